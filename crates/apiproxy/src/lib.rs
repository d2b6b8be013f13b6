//! The HTTP and WebSocket gateway over a session store (reference 04), and the store operations
//! behind the operator CLI.
//!
//! - [`ApiProxy`] serves `POST /api/<method>` (the `client-request` / `server-response` envelopes
//!   and the HTTP status policy of reference 04 §4.1) and the `GET /api/events.mux` and
//!   `/api/events.host` WebSocket downlinks, over a live [`SessionStore`], an optional
//!   [`SessionPersistence`] for cold sessions, and a [`ProjectionRegistry`].
//! - [`wire`] owns every JSON shape on the wire.
//! - [`ops`] holds what the CLI does to a store directory: open it, list and show sessions, and
//!   verify (and repair) every log.
//! - [`demo`] seeds the demo store of `apiproxy serve --demo`.
//!
//! Where this differs from the reference (reference 04 §13):
//! - Every session-scoped method and every pushed frame is filtered by the caller's owner; another
//!   owner's session answers exactly like an unknown one. Forks and children inherit the owner.
//! - Loopback-only by default: [`ApiProxy::serve`] refuses a non-loopback address unless a bearer
//!   token is configured, and every request then has to carry one.
//! - Each WebSocket connection has a bounded queue; a client that falls behind gets one
//!   `stream/error` frame and is closed, and reset if it does not complete the close in time.
//! - Connections are bounded: a cap on open connections, header-read, body-read and idle
//!   timeouts, and a small bound on incoming WebSocket messages (`docs/wire.md`, "Connection
//!   limits").
//! - `session.history` honours cancellation (a client that disconnects stops the read), is
//!   fail-soft for a failing projection unit, and its internal errors carry no raw error text.
//! - `session.list` reports a persistence failure as an `internal` business error, not HTTP 500.

mod access;
mod config;
mod connection;
pub mod demo;
mod error;
mod history;
mod http;
mod hub;
mod methods;
pub mod ops;
mod proxy;
mod units;
pub mod wire;
mod ws;

pub use crate::{
    access::{OWNER_HEADER, is_loopback_listen, token_problem},
    config::{AccessConfig, OwnerToken, ProxyConfig},
    error::ProxyError,
    proxy::{ApiProxy, ProxyParts},
    units::{LIST_METADATA_KEY, ListMetadata, SessionListMetadata},
};
// Re-exported so that embedders name the same types the proxy is built from.
pub use session_core::SessionStore;
pub use session_persistence::SessionPersistence;
pub use session_projection::ProjectionRegistry;
