//! `GET|HEAD /api/session.export`: a session (and its subagent descendants) as a JSON Lines
//! download, authorized like `session.history` and streamed through a bounded channel, so a
//! slow reader holds back the log read instead of filling memory.

use std::{collections::HashMap, sync::Arc};

use axum::{
    body::{Body, Bytes},
    extract::Query,
    http::{HeaderValue, Method as HttpMethod, StatusCode, Uri, header},
    response::{IntoResponse, Response},
};
use futures::StreamExt;
use session_core::{SessionHeader, SessionId};
use session_persistence::PersistenceError;
use tokio_util::sync::CancellationToken;

use crate::{access::Caller, export, methods, state::Shared};

/// Chunks in flight between the log read and the socket.
const CHANNEL_CHUNKS: usize = 4;

fn refusal(status: StatusCode, body: &'static str) -> Response {
    (status, [(header::CONTENT_TYPE, "text/plain; charset=utf-8")], body).into_response()
}

/// The `sessionId` and `descendants` query parameters.
fn parameters(uri: &Uri) -> Result<(String, bool), &'static str> {
    let Ok(Query(query)) = Query::<HashMap<String, String>>::try_from_uri(uri) else {
        return Err("invalid query string");
    };
    let Some(id) = query.get("sessionId").filter(|id| !id.is_empty()) else {
        return Err("missing sessionId parameter");
    };
    // `includeDescendants` is the reference's name for the same switch.
    let descendants = match query.get("descendants").or_else(|| query.get("includeDescendants")).map(String::as_str) {
        None | Some("false") => false,
        Some("true") => true,
        Some(_) => return Err("invalid descendants parameter"),
    };
    Ok((id.clone(), descendants))
}

/// A file name for the download: the id with anything but `[A-Za-z0-9._-]` replaced.
fn file_name(id: &str) -> String {
    let safe: String = id
        .chars()
        .take(128)
        .map(|c| if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') { c } else { '_' })
        .collect();
    format!("{}.jsonl", safe.trim_start_matches('.'))
}

/// The root's header, if `caller` sees it: a live session is first made durable (as far as it
/// can be), so the export holds what it has appended.
async fn root_header(
    shared: &Shared,
    caller: &Caller,
    id: &SessionId,
    cancel: &CancellationToken,
) -> Option<Arc<SessionHeader>> {
    if let Some(session) = shared.store.get(id) {
        if !caller.sees(session.header()) {
            return None;
        }
        if let Err(error) = methods::make_durable(shared, &session, cancel).await {
            tracing::warn!(session = id.as_str(), message = %error.message, "exporting what is stored of a live session");
        }
        return Some(Arc::clone(session.header()));
    }
    let persistence = shared.persistence.as_ref()?;
    match persistence.stored_header(id, cancel).await {
        Ok(Some(stored)) if stored.header.cwd.is_some() && caller.sees(&stored.header) => Some(stored.header),
        _ => None,
    }
}

/// Answers the export request.
pub(crate) async fn serve(shared: Arc<Shared>, caller: Caller, method: &HttpMethod, uri: &Uri) -> Response {
    let (id, descendants) = match parameters(uri) {
        Ok(parameters) => parameters,
        Err(problem) => return refusal(StatusCode::BAD_REQUEST, problem),
    };
    let cancel = CancellationToken::new();
    let id = SessionId::from(id.as_str());
    let (Some(persistence), Some(root)) =
        (shared.persistence.clone(), root_header(&shared, &caller, &id, &cancel).await)
    else {
        return refusal(StatusCode::NOT_FOUND, "session not found");
    };
    let visible = |header: &SessionHeader| caller.sees(header);
    let sessions = match export::plan(&*persistence, root, descendants, &visible, &cancel).await {
        Ok(sessions) => sessions,
        Err(PersistenceError::Cancelled) => return refusal(StatusCode::SERVICE_UNAVAILABLE, "export cancelled"),
        Err(error) => {
            tracing::error!(session = id.as_str(), %error, "planning a session export failed");
            return refusal(StatusCode::INTERNAL_SERVER_ERROR, "the session store could not be listed");
        }
    };
    let disposition = format!("attachment; filename=\"{}\"", file_name(id.as_str()));
    let mut response = if method == HttpMethod::HEAD {
        StatusCode::OK.into_response()
    } else {
        let (sender, receiver) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(CHANNEL_CHUNKS);
        let writer = tokio::spawn(write_all(persistence, sessions, sender, cancel.clone()));
        // The body's end cancels the read: a reader that goes away stops it.
        let guard = cancel.drop_guard();
        let stream = tokio_stream_from(receiver).chain(futures::stream::once(async move {
            drop(guard);
            drop(writer);
            Ok::<Bytes, std::io::Error>(Bytes::new())
        }));
        Response::new(Body::from_stream(stream))
    };
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/x-ndjson"));
    if let Ok(value) = HeaderValue::from_str(&disposition) {
        headers.insert(header::CONTENT_DISPOSITION, value);
    }
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

fn tokio_stream_from<T: Send + 'static>(
    mut receiver: tokio::sync::mpsc::Receiver<T>,
) -> impl futures::Stream<Item = T> + Send + 'static {
    futures::stream::poll_fn(move |context| receiver.poll_recv(context))
}

/// Writes every session's lines into `sender`; a read failure ends the body with an error, so
/// the download is seen to be cut rather than silently short.
async fn write_all(
    persistence: Arc<dyn session_persistence::SessionPersistence>,
    sessions: Vec<Arc<SessionHeader>>,
    sender: tokio::sync::mpsc::Sender<Result<Bytes, std::io::Error>>,
    cancel: CancellationToken,
) {
    for header in sessions {
        let chunks = sender.clone();
        let send = Box::new(move |chunk: Vec<u8>| {
            // The coordinator runs sinks on blocking threads (`run_blocking`), where waiting for
            // room in the channel is allowed. A persistence that ran one on a runtime thread
            // would make `blocking_send` panic: that export fails instead, and nothing else.
            let sent =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| chunks.blocking_send(Ok(Bytes::from(chunk)))));
            match sent {
                Ok(Ok(())) => Ok(()),
                Ok(Err(_)) => Err(PersistenceError::Cancelled),
                Err(_) => Err(PersistenceError::io(
                    "session export",
                    std::io::Error::other("the persistence ran the export's sink on an async thread"),
                )),
            }
        });
        match export::write_session(&*persistence, &header, &cancel, send).await {
            Ok(rest) => {
                if !rest.is_empty() && sender.send(Ok(Bytes::from(rest))).await.is_err() {
                    return;
                }
            }
            // A session released or removed meanwhile has nothing to export.
            Err(PersistenceError::NotFound { .. }) => {}
            Err(PersistenceError::Cancelled) => return,
            Err(error) => {
                tracing::error!(session = header.id.as_str(), %error, "a session export read failed");
                let _ = sender.send(Err(std::io::Error::other("the export was cut by a read failure"))).await;
                return;
            }
        }
    }
}
