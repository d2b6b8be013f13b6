//! The HTTP carrier: one entry point applying the decision order of reference 04 §4.1.
//!
//! 1. Outside `/api/` → the viewer's assets (`web.rs`; trust fence, no token), else 404. 2. Two `Host`, `Origin`, `Authorization` or `x-dsh-owner` headers, or
//!    an absolute-form target naming another authority than `Host` → 400; trust fence → 403;
//!    token → 401; bad owner header → 400; the owner's share of the connection cap used up → 429
//!    (`connection: close`).
//! 3. `GET|HEAD /api/session.export` → the JSON Lines download (`download.rs`);
//!    `GET /api/events.mux|host` → WebSocket upgrade (426 without one).
//! 4. Not `POST` → 404. 5. Media type not `application/json` → 415.
//! 6. Body over the cap → 413, body not complete within the body-read timeout → 408 (both
//!    `connection: close`). 7. Body not JSON → 400.
//! 8. `/api/respond` → a receipt. 9. Unknown method → 404.
//! 10. Malformed envelope, method/path mismatch, invalid payload → 200 `bad-request`.
//! 11. A handler panic → 500 `handler failure: …`. 12. Otherwise 200 with the `server-response`.

use std::{panic::AssertUnwindSafe, sync::Arc};

use axum::{
    Router,
    body::{Body, Bytes},
    extract::{FromRequestParts, Request, State},
    http::{HeaderMap, HeaderValue, Method as HttpMethod, StatusCode, header},
    response::{IntoResponse, Response},
};
use futures::FutureExt;
use serde_json::Value;
use session_core::panic_text;
use tokio_util::sync::CancellationToken;

use crate::{
    access::{Caller, Refusal, admit},
    connection::{ConnectionHandle, OWNER_REFUSAL},
    download,
    hub::StreamKind,
    methods,
    state::Shared,
    web,
    wire::{self, Method, RpcError},
};

pub(crate) fn router(shared: Arc<Shared>) -> Router {
    Router::new().fallback(entry).with_state(shared)
}

fn text(status: StatusCode, body: &'static str) -> Response {
    (status, [(header::CONTENT_TYPE, "text/plain; charset=utf-8")], body).into_response()
}

fn json_response(value: &Value) -> Response {
    // Invariant: a `Value` has string keys and finite numbers only, so it always serializes.
    let body = serde_json::to_vec(value).expect("a JSON value serializes");
    (StatusCode::OK, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}

async fn entry(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    let path = request.uri().path().to_owned();
    let listen = *shared.listen.lock();
    let Some(segment) = path.strip_prefix("/api/") else {
        // The viewer's page and assets: no token (they hold no data), but the trust fence.
        return match admit(&shared.config.access, listen, request.uri(), request.headers()) {
            Ok(_) | Err(Refusal::Unauthenticated | Refusal::BadOwner) => {
                web::serve(request.method(), &path, request.headers())
                    .unwrap_or_else(|| text(StatusCode::NOT_FOUND, "not found"))
            }
            Err(Refusal::Forbidden) => text(StatusCode::FORBIDDEN, "forbidden"),
            Err(Refusal::Ambiguous(what)) => text(StatusCode::BAD_REQUEST, what),
        };
    };
    let caller = match admit(&shared.config.access, listen, request.uri(), request.headers()) {
        Ok(caller) => caller,
        Err(Refusal::Forbidden) => return text(StatusCode::FORBIDDEN, "forbidden"),
        Err(Refusal::Unauthenticated) => {
            let body = serde_json::json!({"error": "unauthenticated"});
            let mut response = json_response(&body);
            *response.status_mut() = StatusCode::UNAUTHORIZED;
            response.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            return response;
        }
        Err(Refusal::BadOwner) => return text(StatusCode::BAD_REQUEST, "invalid x-dsh-owner header"),
        Err(Refusal::Ambiguous(what)) => return text(StatusCode::BAD_REQUEST, what),
    };
    // The owner is known from here on: its connection counts against its share of the cap.
    if let Some(owner) = &caller.owner
        && let Some(connection) = request.extensions().get::<ConnectionHandle>()
        && connection.charge_owner(&shared.connections, owner).is_err()
    {
        return closing(StatusCode::TOO_MANY_REQUESTS, OWNER_REFUSAL);
    }

    if segment == "session.export" && matches!(*request.method(), HttpMethod::GET | HttpMethod::HEAD) {
        return download::serve(Arc::clone(&shared), caller, request.method(), request.uri()).await;
    }
    let stream = match segment {
        "events.mux" => Some(StreamKind::Mux),
        "events.host" => Some(StreamKind::Host),
        _ => None,
    };
    if let Some(kind) = stream
        && request.method() == HttpMethod::GET
    {
        return upgrade(shared, caller, kind, request).await;
    }
    if request.method() != HttpMethod::POST {
        return text(StatusCode::NOT_FOUND, "not found");
    }
    if !is_json(request.headers()) {
        return text(StatusCode::UNSUPPORTED_MEDIA_TYPE, "content type must be application/json");
    }
    let body = match read_body(request, shared.config.max_body_bytes, shared.config.body_read_timeout).await {
        Ok(body) => body,
        Err(response) => return response,
    };
    let Ok(body) = serde_json::from_slice::<Value>(&body) else {
        return text(StatusCode::BAD_REQUEST, "body is not JSON");
    };
    if segment == "respond" {
        return json_response(&wire::respond_receipt(&body));
    }
    let Some(method) = Method::from_name(segment) else {
        return text(StatusCode::NOT_FOUND, "not found");
    };
    let request = match wire::parse_client_request(&body) {
        Ok(request) => request,
        Err((rpc_id, issues)) => {
            let error = RpcError::bad_request("invalid client-request message", issues);
            return json_response(&wire::server_response(&rpc_id, &Err(error)));
        }
    };
    if request.method != segment {
        let error = RpcError::bad_request(
            format!("method \"{}\" does not match path \"{segment}\"", request.method),
            Vec::new(),
        );
        return json_response(&wire::server_response(&request.rpc_id, &Err(error)));
    }

    // Dropping this request's future (the client went away) cancels the reads it started.
    let cancel = CancellationToken::new();
    let _cancel_on_drop = cancel.clone().drop_guard();
    let outcome =
        AssertUnwindSafe(methods::dispatch(&shared, &caller, method, &request.payload, &cancel)).catch_unwind().await;
    match outcome {
        Ok(result) => json_response(&wire::into_server_response(&request.rpc_id, result)),
        Err(payload) => {
            let message = panic_text(payload.as_ref());
            tracing::error!(method = method.as_str(), %message, "request handler panicked");
            let body = format!("handler failure: {message}");
            (StatusCode::INTERNAL_SERVER_ERROR, [(header::CONTENT_TYPE, "text/plain; charset=utf-8")], body)
                .into_response()
        }
    }
}

/// The media type (before any `;`, trimmed, case-insensitive) must be exactly `application/json`.
fn is_json(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.split(';').next())
        .is_some_and(|media| media.trim().eq_ignore_ascii_case("application/json"))
}

/// An answer after which the connection closes: the rest of the body is not read.
fn closing(status: StatusCode, body: &'static str) -> Response {
    let mut response = text(status, body);
    response.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

fn too_large() -> Response {
    closing(StatusCode::PAYLOAD_TOO_LARGE, "request body too large")
}

/// Buffers the body, refusing a declared or streamed length over `limit` with 413, and a body
/// that has not arrived within `timeout` with 408.
async fn read_body(request: Request, limit: usize, timeout: std::time::Duration) -> Result<Bytes, Response> {
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.parse::<u64>().ok());
    if declared.is_some_and(|length| length > limit as u64) {
        return Err(too_large());
    }
    let body: Body = request.into_body();
    let Ok(read) = tokio::time::timeout(timeout, axum::body::to_bytes(body, limit)).await else {
        return Err(closing(StatusCode::REQUEST_TIMEOUT, "request body timed out"));
    };
    match read {
        Ok(bytes) => Ok(bytes),
        Err(error) => {
            let over =
                std::error::Error::source(&error).is_some_and(|source| source.is::<http_body_util::LengthLimitError>());
            if over { Err(too_large()) } else { Err(text(StatusCode::BAD_REQUEST, "body could not be read")) }
        }
    }
}

/// A downlink's read buffer: one largest client message and its frame header, at most 16 KiB
/// (a larger message is read in several calls). The library's default, 128 KiB, is allocated
/// for every connection and zeroed before every read, for clients that send only control
/// frames (test `limits::an_idle_downlink_holds_no_large_read_buffer`).
fn read_buffer_bytes(max_message: usize) -> usize {
    /// The longest WebSocket frame header.
    const FRAME_HEADER_BYTES: usize = 14;
    max_message.saturating_add(FRAME_HEADER_BYTES).min(16 << 10)
}

async fn upgrade(shared: Arc<Shared>, caller: Caller, kind: StreamKind, request: Request) -> Response {
    let (mut parts, _body) = request.into_parts();
    let connection = parts.extensions.get::<ConnectionHandle>().cloned();
    match axum::extract::ws::WebSocketUpgrade::from_request_parts(&mut parts, &()).await {
        Ok(upgrade) => {
            // The downlinks take no client messages beyond control frames: a small bound keeps a
            // client from holding a large unfinished (fragmented) message in the gateway.
            let max_message = shared.config.max_incoming_message_bytes;
            // Echo only the version: a bearer subprotocol is a credential, never repeated.
            upgrade
                .protocols([crate::access::SUBPROTOCOL])
                .max_message_size(max_message)
                .max_frame_size(max_message)
                .read_buffer_size(read_buffer_bytes(max_message))
                .on_upgrade(move |socket| crate::ws::pump(shared, caller, kind, socket, connection))
        }
        Err(_) => {
            let mut response = text(StatusCode::UPGRADE_REQUIRED, "upgrade required");
            response.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
            response.headers_mut().insert(header::UPGRADE, HeaderValue::from_static("websocket"));
            response
        }
    }
}
