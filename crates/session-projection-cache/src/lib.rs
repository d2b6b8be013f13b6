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
//!   reads), [`write`](ProjectionCache::write) (flush the log, then replace the record; an older
//!   cut never replaces a newer one), [`cold_snapshot`](ProjectionCache::cold_snapshot) (rows plus
//!   a tail read, or a streamed fold of the whole log; concurrent callers share one read), and the
//!   write policy ([`ProjectionCache::attach`]).
//!
//! The session log is the only authority. The cache never changes a value: deleting or damaging
//! it only costs longer reads. It reads logs only through `SessionPersistence`, and touches no
//! file but its own records.
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

mod backfill;
mod cache;
mod config;
mod disk;
mod error;
mod policy;
mod record;
mod store;

#[cfg(test)]
mod tests;

pub use crate::{
    backfill::{BackfillOptions, BackfillReport},
    cache::{CacheStats, ProjectionCache, WriteOutcome},
    config::{CacheConfig, MAX_WRITE_INTERVAL_MS},
    disk::{DiskCheckpointStore, RECORD_FORMAT, RECORD_VERSION},
    error::{CacheError, Result},
    policy::CacheAttachment,
    record::{CheckpointRecord, RecordIdentity, StoredFailure},
    store::{CheckpointStore, MemoryCheckpointStore},
};
