//! A SQLite backend for session logs, file-compatible with the reference's databases
//! (reference 05), and a SQLite checkpoint store for the projection cache.
//!
//! - [`SqliteStore`]: a [`session_persistence::Backend`] over one database file (or `:memory:`):
//!   the reference's identity (`application_id` 0x44534850, `user_version` 18), schema text,
//!   scalar and packed rows, zstd `data` and varint `source_event_seqs`; atomic appends with the
//!   stale-writer check, atomic repair and seek reads; a change signal for a file other handles
//!   and processes write (`Backend::watch`: `PRAGMA data_version` polled on a thread of its own). The shared
//!   [`Coordinator`](session_persistence::Coordinator) drives it, so everything above storage
//!   (validation, crash closers, the live write path) is the same as for the JSONL store.
//! - [`SqliteConfig`]: the [`Target`] (a file or `:memory:`), the [`Access`] (read-write,
//!   read-only through SQLite's locks beside a running writer, or immutable for a read-only
//!   place), the [`JournalMode`] and the busy timeout, with the reference's defaults.
//! - [`SqliteCheckpointStore`]: a [`session_projection_cache::CheckpointStore`] in a second
//!   database beside the session database ([`SqliteCheckpointStore::beside`]; the reference
//!   refuses a session database that holds any object of another schema).
//!
//! A file database is created with the reference's rules: mode 0600, in a directory owned by the
//! user that no one else may write; a refusal
//! ([`PersistenceError::Refused`](session_persistence::PersistenceError::Refused)) names the rule
//! that failed and the fix. Every open and every write checks the identity and the schema, so the
//! file stays one the reference opens. Errors are
//! [`PersistenceError`](session_persistence::PersistenceError)s, as for every backend.
//!
//! Modules: `config` (what to open and how), `rules` (the path and permission rules), `schema`
//! (identity, schema text, the open sequence), `sessions` (the `sessions` row), `codec` (the
//! `events` row encodings and packing), `scan` (committed, torn and corrupt rows, seek reads),
//! `store` (the backend), `page` (a page of the newest-first order and its children in SQL), `lease` (the writer lock and leases), `position` (where sessions stand:
//! next seqs, held leases, change marks), `watch` (the change poller that follows a file other
//! processes write), `checkpoint` (the checkpoint store).
//!
//! # Example
//!
//! Write a session to a database file, then read it cold from a read-only open: once whole,
//! once streamed. The same code runs over `SqliteConfig::memory()`, a private in-memory
//! database that lives as long as its store.
//!
//! ```
//! use std::sync::Arc;
//!
//! use serde_json::json;
//! use session_core::{JsonData, SessionEvent, SessionHeader, SessionId};
//! use session_persistence::{CollectSink, Coordinator, CoordinatorConfig, SessionPersistence, inspect_into};
//! use session_persistence_sqlite::{Access, SqliteConfig, SqliteStore};
//! use tokio_util::sync::CancellationToken;
//!
//! fn event(kind: &str, seq: u64, data: serde_json::Value) -> Arc<SessionEvent> {
//!     let time = 1_772_442_000_000 + seq as i64;
//!     Arc::new(SessionEvent::new(kind, seq, time, JsonData::from_value(&data).expect("plain JSON")))
//! }
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // A private directory (mode 0700), as the path rules require.
//! let dir = tempfile::tempdir()?;
//! let path = dir.path().join("sessions.db");
//! let id = SessionId::from("s1");
//! let cancel = CancellationToken::new();
//! let runtime = tokio::runtime::Runtime::new()?;
//!
//! // Read-write, WAL, a 5 s busy timeout: the reference's defaults. The file is created and
//! // initialized on first open.
//! let store = SqliteStore::open(SqliteConfig::file(&path))?;
//! let persistence = Coordinator::new(Arc::new(store), CoordinatorConfig::default())?;
//! runtime.block_on(async {
//!     persistence.create(SessionHeader::new(id.clone(), 1_772_442_000_000), &cancel).await?;
//!     // One append is one immediate transaction: the header row and the batch commit together.
//!     let turn = vec![
//!         event("turn/start", 0, json!({"turn": 1})),
//!         event("turn/end", 1, json!({"turn": 1, "reason": {"kind": "completed"}})),
//!         // A turn left open, as by a crash.
//!         event("turn/start", 2, json!({"turn": 2})),
//!     ];
//!     persistence.append(&id, turn, &cancel).await
//! })?;
//! drop(persistence);
//!
//! // Read-only, through SQLite's locks: this would work beside a running writer too.
//! let store = SqliteStore::open(SqliteConfig::file(&path).with_access(Access::ReadOnly))?;
//! assert!(store.is_read_only());
//! let persistence = Coordinator::new(Arc::new(store), CoordinatorConfig::default())?;
//! runtime.block_on(async {
//!     // The open turn is closed in memory; nothing is written (the store could not anyway).
//!     let log = persistence.inspect(&id, &cancel).await?;
//!     assert_eq!(log.events.len() as u64, 3 + log.n_closers);
//!     assert!(log.n_closers > 0);
//!
//!     // The same view, streamed into a sink.
//!     let (sink, summary) = inspect_into(&persistence, &id, &cancel, CollectSink::default()).await?;
//!     assert_eq!(sink.events.len() as u64, summary.n_events);
//!     assert_eq!(sink.events.last().map(|event| event.seq), log.events.last().map(|event| event.seq));
//!     Ok::<_, session_persistence::PersistenceError>(())
//! })?;
//! # Ok(())
//! # }
//! ```

mod ahead;
mod checkpoint;
mod codec;
mod config;
mod error;
mod lease;
mod order;
mod page;
mod position;
mod rules;
mod scan;
mod schema;
mod sessions;
mod store;
#[cfg(test)]
mod tests;
mod watch;

pub use crate::{
    checkpoint::{CHECKPOINT_APPLICATION_ID, CHECKPOINT_USER_VERSION, SqliteCheckpointStore},
    codec::{COMPRESS_MIN_BYTES, MAX_PACKED_DATA_BYTES, MAX_PACKED_MEMBERS, ZSTD_LEVEL},
    config::{Access, JournalMode, SqliteConfig, Target},
    schema::{APPLICATION_ID, SCHEMA, USER_VERSION},
    store::SqliteStore,
};
