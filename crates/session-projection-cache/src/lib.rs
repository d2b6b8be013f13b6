//! The projection checkpoint cache: durable, disposable checkpoints of the projection registry's
//! units, one record per session, so that a cold read need not fold a whole log again
//! (reference 02 §7–§8).
//!
//! - [`CheckpointRecord`]: `{identity, asOfSeq, rows, failures}` for one session, bound to one
//!   lifetime of its id by [`RecordIdentity`] (`createdAt`, `cwd`).
//! - [`CheckpointStore`]: where records live, with [`MemoryCheckpointStore`] and
//!   [`DiskCheckpointStore`] (one file per session, replaced atomically, checksummed, stamped
//!   with a format version).
//! - [`ProjectionCache`]: [`cached_snapshot`](ProjectionCache::cached_snapshot) (zero log
//!   reads; async, the record is read on the blocking pool), [`write`](ProjectionCache::write) (flush the log, then replace the record; an older
//!   cut never replaces a newer one), [`cold_snapshot`](ProjectionCache::cold_snapshot) (rows plus
//!   a tail read, or a streamed fold of the whole log; concurrent callers share one read), and the
//!   write policy ([`ProjectionCache::attach`]).
//!
//! The session log is the only authority. The cache never changes a value: deleting or damaging
//! it only costs longer reads. It reads logs only through
//! [`SessionPersistence`](session_persistence::SessionPersistence), and touches no file but its
//! own records.
//!
//! It sits above both `session-persistence` (whose logs it reads and flushes) and
//! `session-projection` (whose [`ProjectionRegistry`](session_projection::ProjectionRegistry)
//! does every fold; the cache has no fold rules of its own), and below `subagent`, whose listing
//! reads the stored values of cold children through it with zero log reads.
//!
//! # Example
//!
//! A checkpoint round trip: store a live session's cut, then read its values back without
//! reading the log.
//!
//! ```
//! use std::sync::Arc;
//!
//! use serde_json::json;
//! use session_core::{CreateOptions, ManualClock, SessionEvent, SessionId, SessionStore};
//! use session_persistence::{Coordinator, CoordinatorConfig, MemoryStore};
//! use session_projection::{ClientView, ProjectionRegistry, ProjectionUnit, UnitError};
//! use session_projection_cache::{CacheConfig, MemoryCheckpointStore, ProjectionCache, WriteOutcome};
//!
//! /// How many turns have ended.
//! struct EndedTurns;
//!
//! impl ProjectionUnit for EndedTurns {
//!     type State = u64;
//!
//!     fn key(&self) -> &str {
//!         "endedTurns"
//!     }
//!
//!     fn state_version(&self) -> u64 {
//!         1
//!     }
//!
//!     fn init(&self) -> u64 {
//!         0
//!     }
//!
//!     fn reads(&self) -> Option<&'static [&'static str]> {
//!         Some(&["turn/end"])
//!     }
//!
//!     fn apply(&self, ended: &u64, _event: &SessionEvent) -> Result<Option<u64>, UnitError> {
//!         Ok(Some(ended + 1))
//!     }
//! }
//!
//! impl ClientView for EndedTurns {
//!     type View = u64;
//!
//!     fn view(&self, ended: &u64) -> u64 {
//!         *ended
//!     }
//! }
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // The coordinator writes live sessions behind on the Tokio runtime it is attached in.
//! tokio::runtime::Runtime::new()?.block_on(async {
//!     let clock = Arc::new(ManualClock::new(1_772_442_000_000));
//!     let store = Arc::new(SessionStore::new(clock.clone()));
//!     let persistence = Arc::new(Coordinator::new(Arc::new(MemoryStore::new()), CoordinatorConfig::default())?);
//!     persistence.attach(&store)?;
//!
//!     let registry = ProjectionRegistry::new();
//!     let _folding = registry.attach(&store);
//!     let _registration = registry.register(EndedTurns)?;
//!
//!     let records = Arc::new(MemoryCheckpointStore::new());
//!     let throttles = CacheConfig::new(100, 5_000)?;
//!     let cache = ProjectionCache::new(registry.clone(), persistence, records.clone(), clock, throttles)?;
//!
//!     let session = store.create(Some(SessionId::from("s1")), CreateOptions::default())?;
//!     session.append("turn/start", &json!({"turn": 1}), None)?;
//!     session.append("turn/end", &json!({"turn": 1, "reason": {"kind": "completed"}}), None)?;
//!
//!     // Flush the log, then replace the session's record: the log leads, the cache follows.
//!     assert_eq!(cache.write(&session).await?, WriteOutcome::Stored { as_of_seq: 1 });
//!     assert_eq!(records.len(), 1);
//!
//!     // The stored values of this lifetime of "s1", with zero log reads: what a live snapshot
//!     // served at the cut.
//!     let cached = cache.cached_snapshot(session.header()).await.expect("a record of this lifetime");
//!     assert_eq!(cached.as_of_seq, 1);
//!     assert_eq!(cached.values["endedTurns"], json!(1));
//!     assert_eq!(cached.values, registry.snapshot(&session).values);
//!     assert_eq!(cache.stats().log_reads(), 0);
//!
//!     // A record is bound to one lifetime of its id: another `createdAt` is not served.
//!     let mut recreated = (**session.header()).clone();
//!     recreated.created_at += 1;
//!     assert!(cache.cached_snapshot(&recreated).await.is_none());
//!     Ok(())
//! })
//! # }
//! ```
//!
//! Where this differs from the reference (reference 02 §12):
//! - W9: writes of one session are serialized and compared: a cut older than the stored one of
//!   the same lifetime is not stored. A failed background write gives its events back to the
//!   session's throttles instead of dropping them.
//! - W10: concurrent cold reads of one id share one read; the write-back is skipped when the record
//!   would not change.
//! - W12: a damaged, foreign or version-mismatched record is discarded with a warning; it never
//!   stops the cache from opening.
//! - W13: one file per session, written atomically; writing one session never rewrites another,
//!   and records are read on demand, not held in memory.
//! - A unit whose fold fails on a log is stored with its failure, so a cached snapshot reports it
//!   as the live cells and a cold fold do; a row that makes a unit fail where the record recorded
//!   no failure (a poisoned row) sends the cold read to a fold of the whole log.
//! - The write at disposal flushes the log too (reference W8), so no record leads the durable log.

mod aside;
mod backfill;
mod cache;
mod config;
mod disk;
mod error;
mod policy;
mod record;
mod row;
mod store;

#[cfg(test)]
mod tests;

pub use crate::{
    aside::{MovedAside, open_or_move_aside},
    backfill::{BackfillOptions, BackfillReport},
    cache::{CacheStats, ProjectionCache, WriteOutcome},
    config::{CacheConfig, MAX_WRITE_INTERVAL_MS},
    disk::{DiskCheckpointStore, RECORD_FORMAT, RECORD_VERSION},
    error::{CacheError, Result},
    policy::CacheAttachment,
    record::{CheckpointRecord, RecordIdentity, StoredFailure},
    row::RecordRow,
    store::{CheckpointStore, MemoryCheckpointStore},
};
