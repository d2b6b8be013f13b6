//! A PostgreSQL backend for session logs, so many gateways and hosts share one session store,
//! and a PostgreSQL checkpoint store for the projection cache.
//!
//! - [`PgStore`]: a [`session_persistence::Backend`] over one schema of one database. Each
//!   event is stored as its canonical JSON line (`text`, zstd from 4 KiB when shorter), exactly
//!   the bytes a JSONL log holds; appends and repairs are one transaction each, fenced on the
//!   session row so a stale writer in any process gets a typed `Fenced`; reads seek by
//!   `(session_id, seq)`; a parent's family and newest-first pages are index scans. The shared
//!   `Coordinator` drives it.
//! - [`PgCheckpointStore`]: a [`session_projection_cache::CheckpointStore`] in the same schema.
//! - [`PgStore::setup`] is the explicit schema step (create or migrate; a newer version is
//!   refused); [`PgStore::open`] requires a store set up at this build's version.
//!
//! The client is `tokio-postgres` with a `deadpool-postgres` pool, on a small runtime of the
//! store's own: the backend is synchronous (the coordinator calls it on the blocking pool) and
//! blocks on that runtime per call. Every call works from any thread, a Tokio runtime's included
//! (it never panics there): on a multi-thread runtime's worker it waits in `block_in_place`, on a
//! current-thread runtime it blocks that runtime's thread for the call, so async code should
//! still go through the `Coordinator` (or call it from a blocking thread). Every query is bounded by [`PgConfig::query_timeout`]. No
//! message carries the URL's password. Connections use TLS (`rustls`) as libpq's `sslmode` and
//! `sslrootcert` say ([`TlsMode`]; `prefer` by default, `verify-full` to check the server).
//!
//! Every append, repair and release also notifies the schema's channel in its own transaction,
//! and [`Backend::watch`](session_persistence::Backend::watch) listens on it over a connection of
//! its own, so a gateway follows what other gateways write (`docs/storage-format.md`, "Change
//! notifications").
//!
//! Modules: `config` (URL, schema, bounds), `db` (runtime, pool, errors), `schema` (tables,
//! version, setup), `codec` (an event's row), `store` (the backend), `notify` (the channel and
//! the payload), `listen` (the watch's listening connection), `checkpoint`, and, with the `testing`
//! feature, `testing` (the test server from `SESSION_PG_URL` and scratch schemas, for a host's
//! own tests against PostgreSQL: enable it from `[dev-dependencies]`).

mod checkpoint;
mod codec;
mod config;
mod db;
mod listen;
mod notify;
mod schema;
mod store;
#[cfg(feature = "testing")]
pub mod testing;
mod tls;

pub use crate::{
    checkpoint::PgCheckpointStore,
    codec::{COMPRESS_MIN_BYTES, RUN_BYTES, RUN_EVENTS, ZSTD_LEVEL},
    config::{DEFAULT_NOTIFY_GAP, DEFAULT_SCHEMA, PgConfig, PgEnv, is_postgres_url, is_valid_schema, redact_url},
    schema::{SCHEMA_VERSION, SetupOutcome},
    store::PgStore,
    tls::TlsMode,
};
