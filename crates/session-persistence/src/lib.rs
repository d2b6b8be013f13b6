//! Durable session logs: the [`SessionPersistence`] trait, one shared [`Coordinator`], and the
//! in-memory and on-disk JSONL backends.
//!
//! - [`SessionPersistence`] is what the upper layers (the projection cache, the subagent catalog,
//!   the gateway) need from storage: [`create`](SessionPersistence::create) and
//!   [`append`](SessionPersistence::append) (acknowledged only once durable), listings that
//!   report a log they cannot list as its own [`LogFault`], and cold reads:
//!   [`inspect`](SessionPersistence::inspect) (the whole balanced log),
//!   [`inspect_stream`](SessionPersistence::inspect_stream) (events handed to a [`ScanSink`] as
//!   they are decoded; [`inspect_into`] lends a typed sink and hands it back, typed), [`read_from`](SessionPersistence::read_from) (a suffix) and
//!   [`load`](SessionPersistence::load) (the only read that commits a crash repair).
//! - [`Coordinator`] is its one implementation, over any [`Backend`]. It owns everything that is
//!   not bytes: per-id serialization, validation of what is read (a log cut off by a crash is
//!   closed in memory with repair events; a legacy shape is imported), the inspection cache, and
//!   the live write path: [`Coordinator::attach`] makes every session of a
//!   [`SessionStore`](session_core::SessionStore) durable, written behind in batches, with
//!   `flush` as the barrier.
//! - [`Backend`] is the narrow synchronous storage trait a new store implements: scan a log into
//!   a sink, append a batch atomically, commit a repair, list headers. [`MemoryStore`] keeps logs
//!   in memory; [`JsonlStore`] keeps one append-only file per session, raw or zstd-framed
//!   ([`Compression`]), fsynced before an append is acknowledged, under an exclusive lock on its
//!   root. [`CountingBackend`] wraps any backend to count reads and inject write failures. A
//!   backend that packs runs of streamed chunks as the JSONL store does reuses its chunk-row
//!   codec: [`chunk_runs`] packs a batch into [`Record`]s, [`ChunkRow::write_data_json`]
//!   encodes a row, [`decode_record`] expands one (the SQLite backend stores rows this way).
//!
//! This is the only crate of the workspace (besides the projection cache and the SQLite backend)
//! that touches files. Errors are one enum, [`PersistenceError`]; a damaged log is `Corrupt`
//! with its [`Location`], never a panic, and never hides another log.
//!
//! # Example
//!
//! Open a JSONL store, write a session, then read it cold from a second open: once whole with
//! [`inspect`](SessionPersistence::inspect), once streamed through a sink that keeps a count, not
//! the events.
//!
//! ```
//! use std::sync::Arc;
//!
//! use serde_json::json;
//! use session_core::{JsonData, SessionEvent, SessionHeader, SessionId};
//! use session_persistence::{
//!     Coordinator, CoordinatorConfig, JsonlConfig, JsonlStore, Result, ScanSink, SessionPersistence, inspect_into,
//! };
//! use tokio_util::sync::CancellationToken;
//!
//! fn event(kind: &str, seq: u64, data: serde_json::Value) -> Arc<SessionEvent> {
//!     let time = 1_772_442_000_000 + seq as i64;
//!     Arc::new(SessionEvent::new(kind, seq, time, JsonData::from_value(&data).expect("plain JSON")))
//! }
//!
//! /// Counts the events of a streamed read as they go by.
//! #[derive(Default)]
//! struct Count(u64);
//!
//! impl ScanSink for Count {
//!     fn event(&mut self, _event: Arc<SessionEvent>) -> Result<()> {
//!         self.0 += 1;
//!         Ok(())
//!     }
//! }
//!
//! # fn main() -> std::result::Result<(), Box<dyn std::error::Error>> {
//! let dir = tempfile::tempdir()?;
//! let id = SessionId::from("s1");
//! let cancel = CancellationToken::new();
//! let runtime = tokio::runtime::Runtime::new()?;
//!
//! // Zstd-framed logs with packed chunk rows, the default. `open` takes the store's exclusive
//! // lock: a second writer, in this process or another, gets `PersistenceError::Locked`.
//! let store = JsonlStore::open(JsonlConfig::new(dir.path()))?;
//! let persistence = Coordinator::new(Arc::new(store), CoordinatorConfig::default())?;
//! runtime.block_on(async {
//!     // Nothing is written until the first append; then the header and the batch appear at
//!     // once. `append` returns after the batch is fsynced.
//!     persistence.create(SessionHeader::new(id.clone(), 1_772_442_000_000), &cancel).await?;
//!     let turn = vec![
//!         event("turn/start", 0, json!({"turn": 1})),
//!         event("turn/end", 1, json!({"turn": 1, "reason": {"kind": "completed"}})),
//!         // A second turn that never ends, as if the host crashed in the middle of it.
//!         event("turn/start", 2, json!({"turn": 2})),
//!     ];
//!     persistence.append(&id, turn, &cancel).await
//! })?;
//! // Dropping the coordinator drops the store and releases its lock.
//! drop(persistence);
//!
//! // A second open reads what the first wrote.
//! let store = JsonlStore::open(JsonlConfig::new(dir.path()))?;
//! let persistence = Coordinator::new(Arc::new(store), CoordinatorConfig::default())?;
//! runtime.block_on(async {
//!     assert_eq!(persistence.list(&cancel).await?.len(), 1);
//!
//!     // The balanced view: the open turn is closed in memory with repair events. `inspect`
//!     // never writes; only `load` commits them.
//!     let log = persistence.inspect(&id, &cancel).await?;
//!     assert_eq!(log.header.id, id);
//!     assert!(log.n_closers > 0);
//!     assert_eq!(log.events.len() as u64, 3 + log.n_closers);
//!     assert_eq!(log.events.last().unwrap().kind, "turn/end");
//!
//!     // The same view streamed: each event goes to the sink as it is decoded, so memory does
//!     // not grow with the log.
//!     let (count, summary) = inspect_into(&persistence, &id, &cancel, Count::default()).await?;
//!     assert_eq!(count.0, summary.n_events);
//!     assert_eq!(summary.n_events, log.events.len() as u64);
//!     assert!(!summary.live);
//!     Ok::<_, session_persistence::PersistenceError>(())
//! })?;
//! # Ok(())
//! # }
//! ```

mod backend;
mod coordinator;
pub mod copy;
mod counting;
mod error;
// The JSONL bytes are an implementation detail: the module is public only so that the criterion
// benchmarks (`tests/benches/persistence.rs`) and this crate's byte-level integration tests can
// encode headers, batches and zstd frames directly. What a backend author needs (the chunk-row
// codec) is re-exported at the crate root below.
#[doc(hidden)]
pub mod format;
mod jsonl;
/// Simulated storage faults for the JSONL store (cargo feature `faults`, for tests).
#[cfg(any(test, feature = "faults"))]
pub use jsonl::faults;
pub mod lease;
mod memory;
mod persistence;
mod threads;
mod validate;
pub mod watch;

pub use crate::{
    backend::{
        AppendFuture, Backend, CollectSink, HeaderPage, Listing, LogFault, PageKey, PageRequest, PrefetchedLog,
        Revision, ScanOutcome, ScanSink, StoredHeader, SurveyEntry, TornTail,
    },
    coordinator::{Coordinator, CoordinatorConfig},
    copy::{CopyOptions, CopyOutcome, SessionCopy, copy_store},
    counting::CountingBackend,
    error::{CorruptKind, DatabaseFault, FencedWrite, Location, PersistenceError, Result},
    // The chunk-row codec, for backends that store packed runs in a layout of their own.
    format::{ChunkKind, ChunkRow, Compression, MIN_RUN, Record, RecordError, chunk_runs, decode_record},
    // The header-line codec, for backends that store a log's header as its JSONL line.
    format::{decode_header_line, encode_header_line},
    jsonl::{
        HeaderCacheStats, JsonlConfig, JsonlStore, LOCK_WAIT, StoreEncoding, detect_encoding, detect_session_encoding,
        encode_segment, project_key,
    },
    memory::MemoryStore,
    persistence::{
        Inspection, ReadLimit, SessionPersistence, SinkSlot, StreamSink, StreamSummary, Suffix, inspect_each_into,
        inspect_into, stream_each,
    },
    validate::ReadThreads,
    watch::{
        ChangeKind, ChangeSink, SessionPosition, SharedChangeSink, StoreChange, Watch, WatchOptions, deliver, jittered,
    },
};
/// The event types a read accepts without `ignorable: true` (owned by `session-core`, which
/// runs the same storable check on every write).
pub use session_core::KnownTypes;
