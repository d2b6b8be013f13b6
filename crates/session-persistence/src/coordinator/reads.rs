//! Cold reads: the balanced view of a log (`inspect`, cached by revision), streamed reads
//! (`inspect_stream`) and their lanes (`inspect_streams`: a batch on a few blocking threads that
//! each take the next read as they finish one), the stored suffix (`read_from`), and `load`, the
//! one read that commits a repair. A live session is served from its snapshot instead.

use std::{
    collections::{HashMap, HashSet},
    panic::AssertUnwindSafe,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
};

use parking_lot::Mutex;
use session_core::{KnownTypes, Session, SessionEvent, SessionHeader, SessionId};
use session_storage_io::keyed::{BlockingCancelled, run_blocking};
use tokio_util::sync::CancellationToken;

use super::{
    live::LiveSessions,
    state::{IdState, Inner, blocking, check_cancel},
};
use crate::{
    backend::{Backend, PrefetchedLog, ScanSink},
    error::{PersistenceError, Result},
    persistence::{Inspection, ReadLimit, StreamSink, StreamSummary, Suffix},
    validate::{ReadThreads, Source, validated},
};

/// The balanced view of `id`, without changing storage.
pub(super) async fn inspect(
    inner: &Inner,
    live: &LiveSessions,
    id: &SessionId,
    cancel: &CancellationToken,
) -> Result<Inspection> {
    check_cancel(cancel)?;
    if let Some(session) = live.session(id) {
        return Ok(live_inspection(&session));
    }
    // Same-id readers queue here, so the second one finds the first one's result cached.
    let _guard = inner.lock_id(id).await;
    check_cancel(cancel)?;
    if let Some(session) = live.session(id) {
        return Ok(live_inspection(&session));
    }
    if inner.cache.lock().contains(id) {
        let probe = id.clone();
        let revision = blocking(&inner.backend, move |backend| backend.revision(&probe)).await?;
        if let Some(hit) = revision.and_then(|revision| inner.cache.lock().get(id, &revision)) {
            return Ok(hit);
        }
    }
    let Some(log) = inner.read_cold(id, cancel).await? else {
        return Err(PersistenceError::NotFound { id: id.clone() });
    };
    let mut events = log.events;
    let n_closers = log.closers.len() as u64;
    events.extend(log.closers.into_iter().map(Arc::new));
    let inspection = Inspection {
        header: log.outcome.header,
        events: events.into(),
        revision: Some(log.outcome.revision),
        live: false,
        n_closers,
    };
    inner.cache.lock().insert(id.clone(), inspection.clone());
    Ok(inspection)
}

/// A read waiting in a lane's queue, with its place in the answer.
type Queued = (usize, (SessionId, Box<dyn StreamSink>));

/// The short logs of a run of reads, read ahead in one go where the backend gains by it (none
/// for a single read, or for sessions served live). A failed read ahead is only a lost shortcut:
/// every read then scans its own log and meets the failure itself.
fn read_ahead(
    inner: &Inner,
    live: &LiveSessions,
    run: &[Queued],
    cancel: &CancellationToken,
) -> HashMap<SessionId, PrefetchedLog> {
    if run.len() < 2 || cancel.is_cancelled() {
        return HashMap::new();
    }
    let cold: Vec<SessionId> =
        run.iter().map(|(_, (id, _))| id).filter(|id| live.session(id).is_none()).cloned().collect();
    if cold.len() < 2 {
        return HashMap::new();
    }
    match inner.backend.prefetch(&cold, cancel) {
        Ok(logs) => logs.into_iter().collect(),
        Err(error) => {
            tracing::debug!(%error, n_sessions = cold.len(), "a batched read ahead failed; reading the logs one by one");
            HashMap::new()
        }
    }
}

/// One streamed read, on a blocking thread.
pub(super) async fn inspect_stream(
    inner: &Arc<Inner>,
    live: &Arc<LiveSessions>,
    id: &SessionId,
    cancel: &CancellationToken,
    sink: Box<dyn StreamSink>,
) -> Result<StreamSummary> {
    check_cancel(cancel)?;
    let (inner, live, id, cancel) = (Arc::clone(inner), Arc::clone(live), id.clone(), cancel.clone());
    run_blocking(move || stream(&inner, &live, &id, &cancel, sink, None)).await?
}

/// Keeps `lanes` blocking threads reading back to back: each takes the next read when it
/// finishes one, so no read waits for a hand-off through the async side. Over a backend that
/// reads best in batches ([`Backend::prefetch_batch`](crate::Backend::prefetch_batch)), a lane
/// takes a run of reads at a time and reads their short logs ahead in one go.
pub(super) async fn inspect_streams(
    inner: &Arc<Inner>,
    live: &Arc<LiveSessions>,
    reads: Vec<(SessionId, Box<dyn StreamSink>)>,
    lanes: usize,
    cancel: &CancellationToken,
) -> Vec<Result<StreamSummary>> {
    if reads.is_empty() {
        return Vec::new();
    }
    let n_reads = reads.len();
    let n_lanes = lanes.clamp(1, n_reads);
    // About two runs per lane (so a lane held up by a long log leaves the rest to the others),
    // each at most what one read ahead takes. Runs stride over the reads, so that runs read side
    // by side start with different sessions: a session asked twice is not read twice at once.
    let run_len = n_reads.div_ceil(2 * n_lanes).clamp(1, inner.backend.prefetch_batch().max(1));
    let n_runs = n_reads.div_ceil(run_len);
    let mut runs: Vec<Vec<_>> = std::iter::repeat_with(|| Vec::with_capacity(run_len)).take(n_runs).collect();
    for (idx, read) in reads.into_iter().enumerate() {
        runs[idx % n_runs].push((idx, read));
    }
    let queue = Arc::new(Mutex::new(runs.into_iter()));
    // Set when this call is dropped or a read panics: the lanes then take no further read.
    let stop = Arc::new(AtomicBool::new(false));
    let _stop_on_drop = StopOnDrop(Arc::clone(&stop));
    let lanes: Vec<_> = (0..n_lanes)
        .map(|_| {
            let (inner, live, queue, stop, cancel) =
                (Arc::clone(inner), Arc::clone(live), Arc::clone(&queue), Arc::clone(&stop), cancel.clone());
            run_blocking(move || {
                let mut done = Vec::new();
                while !stop.load(Ordering::Acquire) {
                    let Some(run) = queue.lock().next() else { break };
                    let ahead = std::panic::catch_unwind(AssertUnwindSafe(|| read_ahead(&inner, &live, &run, &cancel)))
                        .inspect_err(|_| stop.store(true, Ordering::Release))?;
                    for (idx, (id, sink)) in run {
                        if stop.load(Ordering::Acquire) {
                            break;
                        }
                        let log = ahead.get(&id);
                        match std::panic::catch_unwind(AssertUnwindSafe(|| {
                            stream(&inner, &live, &id, &cancel, sink, log)
                        })) {
                            Ok(result) => done.push((idx, result)),
                            Err(panic) => {
                                stop.store(true, Ordering::Release);
                                return Err(panic);
                            }
                        }
                    }
                }
                Ok(done)
            })
        })
        .collect();
    let mut results: Vec<Option<Result<StreamSummary>>> = std::iter::repeat_with(|| None).take(n_reads).collect();
    let mut panic = None;
    for lane in lanes {
        match lane.await {
            Ok(Ok(done)) => {
                for (idx, result) in done {
                    results[idx] = Some(result);
                }
            }
            Ok(Err(payload)) => panic = panic.or(Some(payload)),
            // A lane the runtime cancelled before it ran leaves its reads unfinished (below).
            Err(BlockingCancelled) => {}
        }
    }
    if let Some(payload) = panic {
        std::panic::resume_unwind(payload);
    }
    // A read no lane finished was stopped before it started.
    results.into_iter().map(|result| result.unwrap_or(Err(PersistenceError::Cancelled))).collect()
}

/// The stored events of `id` with `seq >= from_seq`: no closers, no repair, no caching.
pub(super) async fn read_from(
    inner: &Inner,
    id: &SessionId,
    from_seq: u64,
    cancel: &CancellationToken,
) -> Result<Inspection> {
    let suffix = read_suffix(inner, id, from_seq, ReadLimit::NONE, cancel).await?;
    Ok(Inspection {
        header: suffix.header,
        events: suffix.events.into(),
        revision: suffix.revision,
        live: false,
        n_closers: 0,
    })
}

/// [`read_from`] up to `limit`.
async fn read_suffix(
    inner: &Inner,
    id: &SessionId,
    from_seq: u64,
    limit: ReadLimit,
    cancel: &CancellationToken,
) -> Result<Suffix> {
    check_cancel(cancel)?;
    let _guard = inner.lock_id(id).await;
    let (id, known, token) = (id.clone(), inner.config.known_types.clone(), cancel.clone());
    let threads = inner.config.read_threads;
    blocking(&inner.backend, move |backend| {
        validated_suffix(backend, &id, from_seq, limit, Source::From(from_seq), &known, threads, &token)
    })
    .await
}

/// [`read_suffix`] of each of `reads`, in order: over a backend that reads best in batches, the
/// short tails are read ahead in one go and each is validated as its own read would be, all in
/// one hop to the blocking pool (a follower's round of many short tails wakes one thread, not
/// one per session); the ones left out are read by their own seek.
pub(super) async fn read_from_many(
    inner: &Arc<Inner>,
    reads: &[(SessionId, u64)],
    limit: ReadLimit,
    cancel: &CancellationToken,
) -> Vec<Result<Suffix>> {
    let mut answers: Vec<Option<Result<Suffix>>> = reads.iter().map(|_| None).collect();
    if reads.len() > 1 && inner.backend.prefetch_batch() > 1 && !cancel.is_cancelled() {
        let (batch_inner, all, token) = (Arc::clone(inner), reads.to_vec(), cancel.clone());
        let answered = blocking(&inner.backend, move |backend| {
            Ok::<_, PersistenceError>(read_and_validate_ahead(&batch_inner, backend, &all, limit, &token))
        })
        .await;
        match answered {
            Ok(answered) => answers = answered,
            Err(error) => tracing::debug!(%error, "a batched tail read stopped; reading the tails one by one"),
        }
    }
    let left: Vec<usize> = (0..reads.len()).filter(|&at| answers[at].is_none()).collect();
    // Up to 8 at once (same-id reads queue on the id's lock).
    for chunk in left.chunks(8) {
        let read = chunk.iter().map(|&at| read_suffix(inner, &reads[at].0, reads[at].1, limit, cancel));
        for (&at, answer) in chunk.iter().zip(futures::future::join_all(read).await) {
            answers[at] = Some(answer);
        }
    }
    // Invariant: every read left unanswered above was answered by its own seek.
    answers.into_iter().map(|answer| answer.expect("every read is answered")).collect()
}

/// On a blocking thread: the short tails of `reads` read ahead in one go (each id once, at the
/// seq its first read asks for), and each read ahead validated under its id's lock, as its own
/// read would be. `None` for a read left to its own seek.
fn read_and_validate_ahead(
    inner: &Inner,
    backend: &dyn Backend,
    reads: &[(SessionId, u64)],
    limit: ReadLimit,
    cancel: &CancellationToken,
) -> Vec<Option<Result<Suffix>>> {
    let mut seen = HashSet::new();
    let batch: Vec<(SessionId, u64)> = reads.iter().filter(|(id, _)| seen.insert(id.clone())).cloned().collect();
    let mut ahead: HashMap<SessionId, PrefetchedLog> = match backend.prefetch_tails(&batch, cancel) {
        Ok(logs) => logs.into_iter().collect(),
        Err(error) => {
            tracing::debug!(%error, n_sessions = reads.len(), "a batched tail read failed; reading the tails one by one");
            HashMap::new()
        }
    };
    let (known, threads) = (&inner.config.known_types, inner.config.read_threads);
    reads
        .iter()
        .map(|(id, from_seq)| {
            // An id asked twice reads its log again the second time: the read ahead is the first's.
            let log = ahead.remove(id)?;
            let _guard = inner.lock_id_blocking(id);
            if cancel.is_cancelled() {
                return Some(Err(PersistenceError::Cancelled));
            }
            Some(validated_suffix(backend, id, *from_seq, limit, Source::Prefetched(&log), known, threads, cancel))
        })
        .collect()
}

/// The events of `id` from `from_seq` on that `source` gives, validated, up to `limit`: the body
/// of every [`read_suffix`].
#[allow(clippy::too_many_arguments)]
fn validated_suffix(
    backend: &dyn Backend,
    id: &SessionId,
    from_seq: u64,
    limit: ReadLimit,
    source: Source<'_>,
    known: &KnownTypes,
    threads: ReadThreads,
    cancel: &CancellationToken,
) -> Result<Suffix> {
    let mut suffix = SuffixSink::new(from_seq, limit);
    let read = validated(backend, id, source, known, threads, cancel, &mut suffix);
    // The events reached the limit: the sink stopped the read on the next one (what the rest
    // of the log holds, a defect included, is the next read's), or the backend ended it well
    // before that one ([`ScanSink::until_seq`]). A read that failed once full, with no event
    // past the limit, failed on what it answered (say, an event the session row does not own).
    if (suffix.stopped || (suffix.full && read.is_ok()))
        && let Some(header) = suffix.header
    {
        return Ok(Suffix { header, events: suffix.events, revision: None, cut: true });
    }
    let Some((outcome, _closers)) = read? else {
        return Err(PersistenceError::NotFound { id: id.clone() });
    };
    Ok(Suffix { header: outcome.header, events: suffix.events, revision: Some(outcome.revision), cut: false })
}

/// The balanced view of `id`, committing any repair durably; a live session is flushed instead
/// (and refused while its turn is open).
pub(super) async fn load(
    inner: &Inner,
    live: &Arc<LiveSessions>,
    id: &SessionId,
    cancel: &CancellationToken,
) -> Result<Inspection> {
    check_cancel(cancel)?;
    if let Some(session) = live.session(id) {
        if session.open_turn().is_some() {
            return Err(PersistenceError::collision(
                id,
                format!(
                    "cannot load session \"{id}\" while its live turn is open; use the live Session or wait for the turn to close"
                ),
            ));
        }
        let snapshot = live_inspection(&session);
        check_cancel(cancel)?;
        live.flush(id).await?;
        if snapshot.events.is_empty() {
            return Err(PersistenceError::NotFound { id: id.clone() });
        }
        return Ok(snapshot);
    }
    let _guard = inner.lock_id(id).await;
    check_cancel(cancel)?;
    let Some(log) = inner.read_cold(id, cancel).await? else {
        return Err(PersistenceError::NotFound { id: id.clone() });
    };
    let header = log.outcome.header.clone();
    let mut events = log.events;
    if log.outcome.torn.is_some() || !log.closers.is_empty() {
        check_cancel(cancel)?;
        let (torn, closers, repair_header) = (log.outcome.torn.clone(), log.closers.clone(), header.clone());
        inner.check_repair(id, &closers)?;
        blocking(&inner.backend, move |backend| backend.commit_repair(&repair_header, torn.as_ref(), &closers)).await?;
        events.extend(log.closers.into_iter().map(Arc::new));
    }
    let probe = id.clone();
    let revision = blocking(&inner.backend, move |backend| backend.revision(&probe)).await?;
    inner.cache.lock().remove(id);
    inner.states.lock().insert(id.clone(), IdState::unowned(header.clone(), events.len() as u64, true));
    // The closers are durable now: the view is all stored events.
    Ok(Inspection { header, events: events.into(), revision, live: false, n_closers: 0 })
}

/// Streams `id` into `sink` on a blocking thread: the body of every streamed read. The sink is
/// dropped here, on the reading thread, once the read is over.
fn stream(
    inner: &Inner,
    live: &LiveSessions,
    id: &SessionId,
    cancel: &CancellationToken,
    mut sink: Box<dyn StreamSink>,
    ahead: Option<&PrefetchedLog>,
) -> Result<StreamSummary> {
    check_cancel(cancel)?;
    if let Some(session) = live.session(id) {
        return feed(&mut *sink, live_inspection(&session));
    }
    let _guard = inner.lock_id_blocking(id);
    check_cancel(cancel)?;
    let cached = inner.cache.lock().peek(id);
    if let Some(cached) = cached {
        let revision = match ahead {
            Some(log) => Some(log.outcome.revision.clone()),
            None => inner.backend.revision(id)?,
        };
        if cached.revision == revision {
            return feed(&mut *sink, cached);
        }
    }
    let (backend, known, threads) = (&*inner.backend, &inner.config.known_types, inner.config.read_threads);
    let source = ahead.map_or(Source::From(0), Source::Prefetched);
    let Some((outcome, closers)) = validated(backend, id, source, known, threads, cancel, &mut *sink)? else {
        return Err(PersistenceError::NotFound { id: id.clone() });
    };
    let n_closers = closers.len() as u64;
    for closer in closers {
        sink.event(Arc::new(closer))?;
    }
    sink.finish();
    Ok(StreamSummary {
        header: outcome.header,
        n_events: outcome.n_events + n_closers,
        n_closers,
        live: false,
        torn: Some(outcome.torn.is_some()),
        revision: Some(outcome.revision),
    })
}

/// Delivers a view held in memory to `sink`.
fn feed(sink: &mut dyn StreamSink, view: Inspection) -> Result<StreamSummary> {
    sink.header(&view.header)?;
    for event in view.events.iter() {
        sink.event(Arc::clone(event))?;
    }
    sink.finish();
    Ok(StreamSummary {
        header: view.header.clone(),
        n_events: view.events.len() as u64,
        n_closers: view.n_closers,
        live: view.live,
        revision: view.revision.clone(),
        torn: None,
    })
}

fn live_inspection(session: &Arc<Session>) -> Inspection {
    Inspection { header: session.header().clone(), events: session.events(), revision: None, live: true, n_closers: 0 }
}

/// Sets its flag when dropped.
struct StopOnDrop(Arc<AtomicBool>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Release);
    }
}

/// Collects a read's events from `from_seq` on, and stops the read (with an error the read's
/// caller never sees) at the first event past its limit.
struct SuffixSink {
    from_seq: u64,
    limit: ReadLimit,
    header: Option<Arc<SessionHeader>>,
    events: Vec<Arc<SessionEvent>>,
    bytes: usize,
    /// Whether the events reached the limit.
    full: bool,
    /// Whether an event came past the limit, and the sink stopped the read there.
    stopped: bool,
}

impl SuffixSink {
    fn new(from_seq: u64, limit: ReadLimit) -> SuffixSink {
        SuffixSink { from_seq, limit, header: None, events: Vec::new(), bytes: 0, full: false, stopped: false }
    }
}

impl ScanSink for SuffixSink {
    fn header(&mut self, header: &Arc<SessionHeader>) -> Result<()> {
        self.header = Some(Arc::clone(header));
        Ok(())
    }

    fn event(&mut self, event: Arc<SessionEvent>) -> Result<()> {
        if event.seq < self.from_seq {
            return Ok(());
        }
        if self.full {
            self.stopped = true;
            return Err(PersistenceError::Cancelled);
        }
        if self.limit != ReadLimit::NONE {
            self.bytes = self.bytes.saturating_add(event.encoded_len());
        }
        self.events.push(event);
        self.full = self.events.len() >= self.limit.events || self.bytes >= self.limit.bytes;
        Ok(())
    }

    fn restart(&mut self) -> bool {
        self.events.clear();
        self.bytes = 0;
        self.full = false;
        self.stopped = false;
        true
    }

    fn until_seq(&self) -> Option<u64> {
        // At least one event: a read bounded at its own start would answer that the log ends
        // there.
        let events = u64::try_from(self.limit.events).ok().filter(|_| self.limit.events != usize::MAX)?;
        Some(self.from_seq.saturating_add(events.max(1)))
    }
}
