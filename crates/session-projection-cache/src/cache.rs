//! `ProjectionCache`: the cached snapshot (zero log reads), the write of a live cut, and the cold
//! read ladder with its fail-soft write-back (reference 02 §7.3–§7.5, with W9, W10 and W12 fixed).

use std::{
    collections::{BTreeMap, HashMap},
    fmt,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
};

use futures::{
    FutureExt,
    future::{BoxFuture, Shared, WeakShared},
};
use parking_lot::Mutex;
use serde_json::Map;
use session_core::{Clock, Session, SessionEvent, SessionHeader, SessionId};
use session_persistence::{CorruptKind, Location, PersistenceError, ScanSink, SessionPersistence, inspect_into};
use session_projection::{CheckpointRows, Failures, ProjectionRegistry, RestoreFold, Restored, Snapshot};
use session_storage_io::keyed::{BlockingCancelled, KeyedGuard, KeyedLocks, run_blocking, run_blocking_with};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::{
    config::CacheConfig,
    error::{CacheError, Result},
    record::{CheckpointRecord, RecordIdentity},
    store::CheckpointStore,
};

/// Derived, disposable checkpoints of a [`ProjectionRegistry`]'s units, one record per session.
///
/// The session log is the only authority: a record may be stale, never wrong for the lifetime it
/// names, and any doubt about a record costs a longer read, never a different value. Cheap to
/// clone; clones share everything.
#[derive(Clone)]
pub struct ProjectionCache {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) registry: Arc<ProjectionRegistry>,
    pub(crate) persistence: Arc<dyn SessionPersistence>,
    store: Arc<dyn CheckpointStore>,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) config: CacheConfig,
    /// Serializes the read-compare-replace of one session's record.
    write_locks: KeyedLocks,
    /// The cold read in progress per id, shared by every caller that asks meanwhile.
    flights: Mutex<HashMap<SessionId, (u64, WeakShared<ColdRead>)>>,
    next_flight: AtomicU64,
    pub(crate) background: Background,
    pub(crate) counters: Counters,
}

type ColdRead = BoxFuture<'static, Result<Snapshot>>;

/// What a write did to the stored record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteOutcome {
    /// The record now holds the cut at `as_of_seq`.
    Stored {
        /// The cut written: the seq of the last event every healthy unit folded (`-1` for an
        /// empty log).
        as_of_seq: i64,
    },
    /// The record already held exactly this cut; nothing was written.
    Unchanged {
        /// The cut that was already stored.
        as_of_seq: i64,
    },
    /// The record of the same session lifetime holds a newer cut (`stored_seq`), which was kept:
    /// an older cut never replaces a newer one.
    Superseded {
        /// The cut this write offered.
        as_of_seq: i64,
        /// The newer cut the record keeps.
        stored_seq: i64,
    },
}

/// Counters of the work a cache did since it was built.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Cold reads run (one per flight, however many callers shared it).
    pub cold_reads: u64,
    /// Callers of `cold_snapshot` that joined a cold read already in progress.
    pub shared_cold_reads: u64,
    /// Log reads from a checkpoint floor (`read_from(id, floor)` with `floor > 0`).
    pub tail_reads: u64,
    /// Whole-log reads (streamed from seq 0, or `read_from(id, 0)`).
    pub full_reads: u64,
    /// Records replaced, by writes and by cold write-backs.
    pub records_stored: u64,
    /// Writes that stored nothing: the record was unchanged or newer.
    pub writes_skipped: u64,
    /// Writes and write-backs whose flush or store failed.
    pub write_failures: u64,
}

impl CacheStats {
    /// Every read of a session log.
    pub fn log_reads(&self) -> u64 {
        self.tail_reads + self.full_reads
    }
}

#[derive(Default)]
pub(crate) struct Counters {
    cold_reads: AtomicU64,
    shared_cold_reads: AtomicU64,
    tail_reads: AtomicU64,
    full_reads: AtomicU64,
    records_stored: AtomicU64,
    writes_skipped: AtomicU64,
    pub(crate) write_failures: AtomicU64,
}

fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

/// Background writes in progress, so that [`ProjectionCache::settle`] can wait for them.
#[derive(Default)]
pub(crate) struct Background {
    running: Mutex<usize>,
    idle: Notify,
}

/// One background write; dropping it (also by a panic) ends it.
pub(crate) struct BackgroundGuard {
    inner: Arc<Inner>,
}

impl Background {
    pub(crate) fn start(inner: &Arc<Inner>) -> BackgroundGuard {
        *inner.background.running.lock() += 1;
        BackgroundGuard { inner: Arc::clone(inner) }
    }
}

impl Drop for BackgroundGuard {
    fn drop(&mut self) {
        let mut running = self.inner.background.running.lock();
        *running -= 1;
        if *running == 0 {
            self.inner.background.idle.notify_waiters();
        }
    }
}

/// What a write may replace.
enum Replace {
    /// A record of another lifetime, or one at an older or equal cut.
    IfNotNewer,
    /// Anything, as long as the stored record is still `expected` (which a cold read proved
    /// stale or wrong); otherwise as [`Replace::IfNotNewer`].
    IfStill(Option<CheckpointRecord>),
}

impl ProjectionCache {
    /// A cache of `registry`'s units over the logs of `persistence`, storing records in `store`.
    /// `clock` times the interval throttle of the write policy.
    pub fn new(
        registry: Arc<ProjectionRegistry>,
        persistence: Arc<dyn SessionPersistence>,
        store: Arc<dyn CheckpointStore>,
        clock: Arc<dyn Clock>,
        config: CacheConfig,
    ) -> Result<ProjectionCache> {
        config.validate()?;
        Ok(ProjectionCache {
            inner: Arc::new(Inner {
                registry,
                persistence,
                store,
                clock,
                config,
                write_locks: KeyedLocks::new(),
                flights: Mutex::new(HashMap::new()),
                next_flight: AtomicU64::new(1),
                background: Background::default(),
                counters: Counters::default(),
            }),
        })
    }

    /// The registry whose units the cache checkpoints; every fold goes through it.
    pub fn registry(&self) -> &Arc<ProjectionRegistry> {
        &self.inner.registry
    }

    /// Where the records live.
    pub fn store(&self) -> &Arc<dyn CheckpointStore> {
        &self.inner.store
    }

    /// The write policy's throttles, as validated by [`ProjectionCache::new`].
    pub fn config(&self) -> CacheConfig {
        self.inner.config
    }

    /// A snapshot of the work counters since the cache was built (clones share them).
    pub fn stats(&self) -> CacheStats {
        let counters = &self.inner.counters;
        let load = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        CacheStats {
            cold_reads: load(&counters.cold_reads),
            shared_cold_reads: load(&counters.shared_cold_reads),
            tail_reads: load(&counters.tail_reads),
            full_reads: load(&counters.full_reads),
            records_stored: load(&counters.records_stored),
            writes_skipped: load(&counters.writes_skipped),
            write_failures: load(&counters.write_failures),
        }
    }

    /// The stored client values of the session `header` names, with zero log reads (reference
    /// 02 §7.3): `None` if there is no record, the record belongs to another lifetime of the id
    /// (`createdAt` or `cwd` differ), or it serves no value for a registered client-visible unit.
    ///
    /// A value is served only from a row at its unit's current version whose state decodes; a
    /// unit whose fold failed on this log is reported in `failures`, as a live snapshot reports
    /// it. `as_of_seq` is the lowest watermark among the served values (under-claiming is safe for
    /// a reader that keeps the higher seq). The record is read on the blocking pool (one small
    /// read at most), so this may be awaited on any runtime; a store that fails, or a runtime
    /// shutting down, reads as no record.
    pub async fn cached_snapshot(&self, header: &SessionHeader) -> Option<Snapshot> {
        let headers = vec![Arc::new(header.clone())];
        self.cached_snapshots(headers).await.pop().flatten()
    }

    /// [`cached_snapshot`](Self::cached_snapshot) of each of `headers`, in order, looked up in
    /// one hop to the blocking pool (a listing's cold sessions, read side by side with nothing
    /// else to wait for).
    pub async fn cached_snapshots(&self, headers: Vec<Arc<SessionHeader>>) -> Vec<Option<Snapshot>> {
        let n_headers = headers.len();
        if n_headers == 0 {
            return Vec::new();
        }
        let cache = self.clone();
        run_blocking(move || cache.cached_snapshots_blocking(&headers))
            .await
            .unwrap_or_else(|BlockingCancelled| std::iter::repeat_with(|| None).take(n_headers).collect())
    }

    /// [`cached_snapshot`](Self::cached_snapshot) on the calling thread: it reads the record
    /// inline, so it blocks. For code that already runs where blocking is allowed (Tokio's
    /// blocking pool, a plain thread), as the subagent listing's checkpoint source does; async
    /// code awaits [`cached_snapshot`](Self::cached_snapshot) instead.
    pub fn cached_snapshot_blocking(&self, header: &SessionHeader) -> Option<Snapshot> {
        self.snapshot_of(header, self.inner.store.get(&header.id))
    }

    /// [`cached_snapshot_blocking`](Self::cached_snapshot_blocking) of each of `headers`, in
    /// order, with their records read in one [`CheckpointStore::get_many`] (one round trip on
    /// a database server).
    pub fn cached_snapshots_blocking(&self, headers: &[Arc<SessionHeader>]) -> Vec<Option<Snapshot>> {
        let ids: Vec<SessionId> = headers.iter().map(|header| header.id.clone()).collect();
        let mut records = self.inner.store.get_many(&ids).into_iter();
        headers
            .iter()
            .map(|header| {
                let record = records.next().unwrap_or_else(|| self.inner.store.get(&header.id));
                self.snapshot_of(header, record)
            })
            .collect()
    }

    /// The snapshot a read record serves for `header` (see [`cached_snapshot`](Self::cached_snapshot)).
    fn snapshot_of(&self, header: &SessionHeader, record: Result<Option<CheckpointRecord>>) -> Option<Snapshot> {
        let record = match record {
            Ok(record) => record?,
            Err(error) => {
                tracing::warn!(session = %header.id, %error, "session projection cache: cannot read the record (serving none)");
                return None;
            }
        };
        if !record.identity.matches(header) {
            return None;
        }
        let registry = &self.inner.registry;
        let mut snapshot = registry.view_checkpoint(&record.rows);
        let versions: BTreeMap<String, u64> =
            registry.units().into_iter().map(|unit| (unit.key.to_string(), unit.state_version)).collect();
        for (key, failure) in record.failures_at(&versions) {
            snapshot.values.remove(&key);
            snapshot.failures.insert(key, failure);
        }
        if snapshot.values.is_empty() {
            return None;
        }
        snapshot.as_of_seq =
            snapshot.values.keys().filter_map(|key| record.rows.get(key)).map(|row| row.seq).min().unwrap_or(-1);
        Some(snapshot)
    }

    /// Stores `session`'s current cut, replacing its whole record (reference 02 §7.4).
    ///
    /// The cut is taken when this is called; then the session's log is flushed (the log leads,
    /// the cache follows), then the record is replaced, unless the stored record of the same
    /// lifetime is at a newer cut. Writes of one session are serialized. Fails if a unit state is
    /// not lossless JSON, if the flush fails, or if the store fails; the stored record is then
    /// unchanged.
    pub async fn write(&self, session: &Arc<Session>) -> Result<WriteOutcome> {
        let checkpoint = self.inner.registry.checkpoint(session);
        let record = CheckpointRecord::from_checkpoint(RecordIdentity::of(session.header()), &checkpoint)?;
        self.inner.write_cut(session.id(), record).await
    }

    /// The values of the stored log of `id` at its end (reference 02 §7.5): the record's rows plus
    /// the log past the lowest usable watermark, or, when the rows cannot be used, a streamed fold
    /// of the whole log. The fresh record is written back (fail-soft) if it differs from the stored
    /// one. Concurrent callers for one id share one read; a caller whose `cancel` fires gets
    /// `Cancelled` at once, and the read itself stops once no caller is left.
    ///
    /// The log is read as stored: crash closers that a repair would add are not folded, so the
    /// values describe exactly the events the rows can be anchored to.
    pub async fn cold_snapshot(&self, id: &SessionId, cancel: &CancellationToken) -> Result<Snapshot> {
        if cancel.is_cancelled() {
            return Err(CacheError::Cancelled);
        }
        let flight = self.inner.join_flight(id);
        tokio::select! {
            biased;
            () = cancel.cancelled() => Err(CacheError::Cancelled),
            result = flight => result,
        }
    }

    /// Waits until every background write started so far (by the write policy) has finished.
    pub async fn settle(&self) {
        let background = &self.inner.background;
        loop {
            let notified = background.idle.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if *background.running.lock() == 0 {
                return;
            }
            notified.await;
        }
    }
}

impl fmt::Debug for ProjectionCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProjectionCache")
            .field("store", &self.inner.store)
            .field("config", &self.inner.config)
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

impl Inner {
    async fn lock_session(&self, id: &SessionId) -> KeyedGuard<'_> {
        self.write_locks.lock(id).await
    }

    /// The stored record of `id`; a failing store reads as no record (the cache is derived data).
    pub(crate) async fn record_of(&self, id: &SessionId) -> Option<CheckpointRecord> {
        let probe = id.clone();
        match run_blocking_with(&self.store, move |store| store.get(&probe)).await {
            Ok(record) => record,
            Err(error) => {
                tracing::warn!(session = %id, %error, "session projection cache: cannot read the record (folding without it)");
                None
            }
        }
    }

    /// The records of `ids`, in order, in one `get_many` on the blocking pool; `None` when the
    /// blocking pool refused the call.
    pub(crate) async fn records_of(&self, ids: Vec<SessionId>) -> Option<Vec<Result<Option<CheckpointRecord>>>> {
        run_blocking_with(&self.store, move |store| Ok::<_, CacheError>(store.get_many(&ids))).await.ok()
    }

    /// Flushes the session's log, then stores `record` unless a newer cut is stored.
    pub(crate) async fn write_cut(&self, id: &SessionId, record: CheckpointRecord) -> Result<WriteOutcome> {
        if let Err(error) = self.persistence.flush(id, &CancellationToken::new()).await {
            bump(&self.counters.write_failures);
            return Err(error.into());
        }
        self.replace(id, record, Replace::IfNotNewer).await
    }

    /// Replaces the record of `id` under its write lock, as `rule` allows.
    async fn replace(&self, id: &SessionId, record: CheckpointRecord, rule: Replace) -> Result<WriteOutcome> {
        let _lock = self.lock_session(id).await;
        let as_of_seq = record.as_of_seq;
        let stored = self.record_of(id).await;
        let proven_stale = matches!(&rule, Replace::IfStill(expected) if *expected == stored);
        if let Some(stored) = stored.filter(|stored| stored.identity == record.identity) {
            if stored == record {
                bump(&self.counters.writes_skipped);
                return Ok(WriteOutcome::Unchanged { as_of_seq });
            }
            if stored.as_of_seq > as_of_seq && !proven_stale {
                bump(&self.counters.writes_skipped);
                return Ok(WriteOutcome::Superseded { as_of_seq, stored_seq: stored.as_of_seq });
            }
        }
        let target = id.clone();
        let result = run_blocking_with(&self.store, move |store| store.put(&target, &record)).await;
        match result {
            Ok(()) => {
                bump(&self.counters.records_stored);
                Ok(WriteOutcome::Stored { as_of_seq })
            }
            Err(error) => {
                bump(&self.counters.write_failures);
                Err(error)
            }
        }
    }

    fn join_flight(self: &Arc<Self>, id: &SessionId) -> Shared<ColdRead> {
        let mut flights = self.flights.lock();
        if let Some(shared) = flights.get(id).and_then(|(_, weak)| weak.upgrade()) {
            bump(&self.counters.shared_cold_reads);
            return shared;
        }
        let number = self.next_flight.fetch_add(1, Ordering::Relaxed);
        let (inner, flight_id) = (Arc::clone(self), id.clone());
        let read: ColdRead = async move {
            // Cancels the log reads once no caller is left to poll this future.
            let cancel = CancellationToken::new();
            let _abort_when_dropped = cancel.clone().drop_guard();
            let result = inner.cold_read(&flight_id, &cancel).await;
            let mut flights = inner.flights.lock();
            if flights.get(&flight_id).is_some_and(|(current, _)| *current == number) {
                flights.remove(&flight_id);
            }
            result
        }
        .boxed();
        let shared = read.shared();
        if flights.len() >= 64 {
            // Flights whose callers all left are never finished; drop their entries.
            flights.retain(|_, (_, weak)| weak.upgrade().is_some());
        }
        if let Some(weak) = shared.downgrade() {
            flights.insert(id.clone(), (number, weak));
        }
        shared
    }

    async fn cold_read(&self, id: &SessionId, cancel: &CancellationToken) -> Result<Snapshot> {
        bump(&self.counters.cold_reads);
        let record = self.record_of(id).await;
        let rows = record.as_ref().map(|record| record.rows.clone()).unwrap_or_default();
        let Some(floor) = self.registry.restore_floor(&rows) else {
            return self.count_events(id, cancel).await;
        };
        let tail = if floor > 0 { self.fold_tail(id, record.as_ref(), &rows, floor, cancel).await? } else { None };
        let (header, restored) = match tail {
            Some(folded) => folded,
            None => self.fold_whole(id, cancel).await?,
        };
        self.write_back(id, &header, &restored, record).await;
        Ok(restored.snapshot)
    }

    /// No unit is registered: the cut is the stored log's end, and no value is needed.
    async fn count_events(&self, id: &SessionId, cancel: &CancellationToken) -> Result<Snapshot> {
        bump(&self.counters.full_reads);
        let (_, summary) = inspect_into(&*self.persistence, id, cancel, CountSink).await?;
        let stored = summary.n_events - summary.n_closers;
        Ok(Snapshot { as_of_seq: stored as i64 - 1, values: Map::new(), failures: Failures::new() })
    }

    /// Folds the stored rows plus the log from `floor`. `None` when the rows cannot be trusted for
    /// this log: another lifetime, a row the slice cannot anchor, or a failure the record did not
    /// carry (a poisoned row); only a fold of the whole log can then say what the values are.
    async fn fold_tail(
        &self,
        id: &SessionId,
        record: Option<&CheckpointRecord>,
        rows: &CheckpointRows,
        floor: u64,
        cancel: &CancellationToken,
    ) -> Result<Option<(Arc<SessionHeader>, Restored)>> {
        bump(&self.counters.tail_reads);
        let tail = self.persistence.read_from(id, floor, cancel).await?;
        if let Some(record) = record
            && !record.identity.matches(&tail.header)
        {
            tracing::debug!(session = %id, "session projection cache: the record belongs to another lifetime of the id");
            return Ok(None);
        }
        let restored = match self.registry.restore(rows, tail.events.iter().map(|event| &**event), floor) {
            Ok(restored) => restored,
            Err(error) => {
                tracing::debug!(session = %id, %error, "session projection cache: the rows cannot seed the tail");
                return Ok(None);
            }
        };
        let versions: BTreeMap<String, u64> =
            self.registry.units().into_iter().map(|unit| (unit.key.to_string(), unit.state_version)).collect();
        let expected = record.map(|record| record.failures_at(&versions)).unwrap_or_default();
        let unexpected = restored.snapshot.failures.iter().any(|(key, failure)| expected.get(key) != Some(failure));
        if unexpected {
            tracing::debug!(session = %id, "session projection cache: a unit failed on the rows; refolding the whole log");
            return Ok(None);
        }
        Ok(Some((tail.header, restored)))
    }

    /// Folds the whole stored log from `init`, streaming it as it is decoded.
    async fn fold_whole(&self, id: &SessionId, cancel: &CancellationToken) -> Result<(Arc<SessionHeader>, Restored)> {
        bump(&self.counters.full_reads);
        let sink = FoldSink::new(Arc::clone(&self.registry), id.clone());
        let (sink, summary) = inspect_into(&*self.persistence, id, cancel, sink).await?;
        if !summary.live && summary.n_closers == 0 {
            return Ok((summary.header, sink.fold.finish()?));
        }
        // The streamed view was not the stored log: a live session's in-memory log, or a cold log
        // with the closers a repair would add. Rows must describe stored events only.
        bump(&self.counters.full_reads);
        let stored = self.persistence.read_from(id, 0, cancel).await?;
        let restored = self.registry.restore(&CheckpointRows::new(), stored.events.iter().map(|event| &**event), 0)?;
        Ok((stored.header, restored))
    }

    /// Stores the fresh rows of a cold read if they differ from the record it started from;
    /// failures are logged, never returned.
    async fn write_back(
        &self,
        id: &SessionId,
        header: &SessionHeader,
        restored: &Restored,
        read: Option<CheckpointRecord>,
    ) {
        let fresh = match CheckpointRecord::from_checkpoint(RecordIdentity::of(header), &restored.checkpoint) {
            Ok(fresh) => fresh,
            Err(error) => {
                tracing::warn!(
                    session = %id,
                    "session projection cache: cold-read write-back for \"{id}\" failed (cache stays stale): {error}"
                );
                return;
            }
        };
        if read.as_ref() == Some(&fresh) {
            return;
        }
        if let Err(error) = self.replace(id, fresh, Replace::IfStill(read)).await {
            tracing::warn!(
                session = %id,
                "session projection cache: cold-read write-back for \"{id}\" failed (cache stays stale): {error}"
            );
        }
    }
}

/// Folds a streamed log from seq 0.
struct FoldSink {
    registry: Arc<ProjectionRegistry>,
    id: SessionId,
    fold: RestoreFold,
}

impl FoldSink {
    fn new(registry: Arc<ProjectionRegistry>, id: SessionId) -> FoldSink {
        let fold = FoldSink::fresh(&registry);
        FoldSink { registry, id, fold }
    }

    fn fresh(registry: &ProjectionRegistry) -> RestoreFold {
        registry.begin_full_restore()
    }
}

impl ScanSink for FoldSink {
    fn event(&mut self, event: Arc<SessionEvent>) -> session_persistence::Result<()> {
        self.fold.apply(&event).map_err(|error| {
            PersistenceError::corrupt(CorruptKind::SeqGap, Location::Session { id: self.id.clone() }, error.to_string())
        })
    }

    fn restart(&mut self) -> bool {
        self.fold = FoldSink::fresh(&self.registry);
        true
    }
}

/// Counts nothing itself: the stream's summary carries the counts.
struct CountSink;

impl ScanSink for CountSink {
    fn event(&mut self, _event: Arc<SessionEvent>) -> session_persistence::Result<()> {
        Ok(())
    }

    fn restart(&mut self) -> bool {
        true
    }
}
