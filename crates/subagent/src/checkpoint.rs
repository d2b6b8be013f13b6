//! Rung 2 of the list ladder: the optional, read-only checkpoint source, and its implementation
//! for the projection cache.

use std::{fmt, sync::Arc};

use session_core::SessionHeader;
use session_projection::Snapshot;
use session_projection_cache::ProjectionCache;

/// Stored projection values of a cold session, served with zero log reads.
///
/// The listing only reads it: it never writes back. It is derived data, so all it can do is save
/// a read: a missing key, a `null` identity, a seed-replayed identity (`seq < seedLength`), any
/// reported unit failure and even a panic all fall through to the authoritative cold fold. A
/// served own-suffix identity, though, is used as it is, without a refold: that is the design
/// note's accepted rung-2 window (deviation 6 in `docs/deviations.md`), where a record older than
/// a second own descriptor keeps serving the first one until the record is rewritten.
pub trait CheckpointSource: Send + Sync + fmt::Debug {
    /// The stored client values for the lifecycle `header` names, or `None` when nothing usable
    /// is stored. Must not read the session log. The listing calls it on Tokio's blocking pool
    /// (all of a listing's cold children in one hop), so it may block on a read.
    fn cached_snapshot(&self, header: &SessionHeader) -> Option<Snapshot>;

    /// [`cached_snapshot`](Self::cached_snapshot) of each of `headers`, in order: one at a time
    /// by default; a source over a database server reads them in one round trip.
    fn cached_snapshots(&self, headers: &[Arc<SessionHeader>]) -> Vec<Option<Snapshot>> {
        headers.iter().map(|header| self.cached_snapshot(header)).collect()
    }
}

impl CheckpointSource for ProjectionCache {
    fn cached_snapshot(&self, header: &SessionHeader) -> Option<Snapshot> {
        ProjectionCache::cached_snapshot_blocking(self, header)
    }

    fn cached_snapshots(&self, headers: &[Arc<SessionHeader>]) -> Vec<Option<Snapshot>> {
        ProjectionCache::cached_snapshots_blocking(self, headers)
    }
}

impl<T: CheckpointSource + ?Sized> CheckpointSource for Arc<T> {
    fn cached_snapshot(&self, header: &SessionHeader) -> Option<Snapshot> {
        (**self).cached_snapshot(header)
    }

    fn cached_snapshots(&self, headers: &[Arc<SessionHeader>]) -> Vec<Option<Snapshot>> {
        (**self).cached_snapshots(headers)
    }
}
