//! The HTTP and WebSocket gateway over a session store (reference 04). The operator CLI (the
//! `apiproxy` binary, whose store operations live in its own module tree under `src/cli/`) is
//! built on it.
//!
//! - [`ApiProxy`] serves `POST /api/<method>` (the `client-request` / `server-response` envelopes
//!   and the HTTP status policy of reference 04 §4.1) and the `GET /api/events.mux` and
//!   `/api/events.host` WebSocket downlinks, over a live [`SessionStore`], an optional
//!   [`SessionPersistence`] for cold sessions, and a [`ProjectionRegistry`].
//! - [`wire`] owns every JSON shape on the wire.
//!
//! # Example
//!
//! Call the gateway from Rust: assemble it over an in-memory store, serve it on an ephemeral
//! loopback port, and create a session with one `POST /api/session.create`. Any HTTP/1.1 client
//! does; this one is hyper's, which the crate already depends on.
//!
//! ```
//! use std::sync::Arc;
//!
//! use apiproxy::{ApiProxy, ProjectionRegistry, ProxyConfig, ProxyParts, SessionStore};
//! use http_body_util::{BodyExt, Full};
//! use hyper::{Request, StatusCode, body::Bytes};
//! use hyper_util::rt::TokioIo;
//! use serde_json::{Value, json};
//! use session_core::{BoundedClock, SessionId, SystemClock};
//! use session_persistence::{Coordinator, CoordinatorConfig, MemoryStore};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! tokio::runtime::Runtime::new()?.block_on(async {
//!     // The parts: live sessions, their storage (attached by the caller, so live sessions are
//!     // written behind), and a registry the gateway attaches itself. The clock is the system's,
//!     // bounded so every stored time stays readable.
//!     let store = Arc::new(SessionStore::new(Arc::new(BoundedClock::new(Arc::new(SystemClock)))));
//!     let persistence = Arc::new(Coordinator::new(Arc::new(MemoryStore::new()), CoordinatorConfig::default())?);
//!     persistence.attach(&store)?;
//!     let parts = ProxyParts { store, persistence: Some(persistence), registry: ProjectionRegistry::new(), cache: None };
//!     let config = ProxyConfig { default_cwd: "/srv/work".to_owned(), ..ProxyConfig::default() };
//!     let proxy = ApiProxy::new(parts, config)?;
//!
//!     // Loopback needs no token; port 0 picks a free port. `serve` runs until `shutdown` resolves.
//!     let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
//!     let addr = listener.local_addr()?;
//!     let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
//!     let server = tokio::spawn({
//!         let proxy = proxy.clone();
//!         async move {
//!             proxy
//!                 .serve(listener, async move {
//!                     let _ = stopped.await;
//!                 })
//!                 .await
//!         }
//!     });
//!
//!     // A `client-request` envelope; the method is named in the path and in the envelope.
//!     let request = json!({
//!         "type": "client-request",
//!         "rpcId": "rpc-1",
//!         "method": "session.create",
//!         "payload": {"sessionId": "s1"},
//!     });
//!     let stream = tokio::net::TcpStream::connect(addr).await?;
//!     let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
//!     tokio::spawn(connection);
//!     let request = Request::post("/api/session.create")
//!         .header("host", addr.to_string()) // the trust fence accepts loopback hosts only
//!         .header("content-type", "application/json")
//!         .body(Full::new(Bytes::from(request.to_string())))?;
//!     let response = sender.send_request(request).await?;
//!
//!     // A business outcome, success or error, is HTTP 200 with a `server-response` envelope.
//!     assert_eq!(response.status(), StatusCode::OK);
//!     let body = response.into_body().collect().await?.to_bytes();
//!     let envelope: Value = serde_json::from_slice(&body)?;
//!     assert_eq!(envelope["type"], "server-response");
//!     assert_eq!(envelope["rpcId"], "rpc-1");
//!     assert_eq!(envelope["result"], json!({"ok": true, "value": {"sessionId": "s1"}}));
//!
//!     // The new session is live in the store the gateway was built over.
//!     assert!(proxy.store().contains(&SessionId::from("s1")));
//!
//!     // Shut down: stop accepting, let open requests finish.
//!     drop(sender);
//!     let _ = stop.send(());
//!     server.await??;
//!     Ok(())
//! })
//! # }
//! ```
//!
//! Where this differs from the reference (reference 04 §13):
//! - Every session-scoped method and every pushed frame is filtered by the caller's owner; another
//!   owner's session answers exactly like an unknown one. Forks and children inherit the owner.
//! - Loopback-only by default: [`ApiProxy::serve`] refuses a non-loopback address unless a bearer
//!   token is configured, and every request then has to carry one.
//! - Each WebSocket connection has a bounded queue; a client that falls behind gets one
//!   `stream/error` frame and is closed, and reset if it does not complete the close in time.
//! - Connections are bounded: a cap on open connections and each owner's share of it,
//!   header-read, body-read and idle timeouts, a small bound on incoming WebSocket messages, and
//!   at most one unsent pong per downlink (`docs/wire.md`, "Connection limits").
//! - `session.history` honours cancellation (a client that disconnects stops the read), is
//!   fail-soft for a failing projection unit, and its internal errors carry no raw error text.
//! - `session.list` reports a persistence failure as an `internal` business error, not HTTP 500.

mod access;
mod calendar;
mod config;
mod connection;
mod date;
mod download;
mod error;
pub mod export;
mod follow;
mod history;
mod http;
mod hub;
mod methods;
mod proxy;
mod state;
mod units;
mod web;
pub mod wire;
mod ws;

pub use crate::{
    access::{OWNER_HEADER, is_loopback_listen},
    config::{AccessConfig, FollowConfig, OwnerToken, ProxyConfig, token_problem},
    error::ProxyError,
    proxy::{ApiProxy, ProxyParts},
    units::{LIST_METADATA_KEY, ListMetadata, SessionListMetadata},
};
// Re-exported so that embedders name the same types the proxy is built from.
pub use session_core::SessionStore;
pub use session_persistence::SessionPersistence;
pub use session_projection::ProjectionRegistry;
