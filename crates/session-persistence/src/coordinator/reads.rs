//! Cold reads: the balanced view of a log (`inspect`, cached by revision), streamed reads
//! (`inspect_stream`) and their lanes (`inspect_streams`: a batch on a few blocking threads that
//! each take the next read as they finish one), the stored suffix (`read_from`), and `load`, the
//! one read that commits a repair. A live session is served from its snapshot instead.

use std::{
    panic::AssertUnwindSafe,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
};

use parking_lot::Mutex;
use session_core::{Session, SessionEvent, SessionId};
use session_storage_io::keyed::{BlockingCancelled, run_blocking};
use tokio_util::sync::CancellationToken;

use super::{
    live::LiveSessions,
    state::{IdState, Inner, blocking, check_cancel},
};
use crate::{
    backend::ScanSink,
    error::{PersistenceError, Result},
    persistence::{Inspection, StreamSink, StreamSummary},
    validate::scan_validated,
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
    run_blocking(move || stream(&inner, &live, &id, &cancel, sink)).await?
}

/// Keeps `lanes` blocking threads reading back to back: each takes the next read when it
/// finishes one, so no read waits for a hand-off through the async side.
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
    let queue = Arc::new(Mutex::new(reads.into_iter().enumerate()));
    // Set when this call is dropped or a read panics: the lanes then take no further read.
    let stop = Arc::new(AtomicBool::new(false));
    let _stop_on_drop = StopOnDrop(Arc::clone(&stop));
    let lanes: Vec<_> = (0..lanes.clamp(1, n_reads))
        .map(|_| {
            let (inner, live, queue, stop, cancel) =
                (Arc::clone(inner), Arc::clone(live), Arc::clone(&queue), Arc::clone(&stop), cancel.clone());
            run_blocking(move || {
                let mut done = Vec::new();
                while !stop.load(Ordering::Acquire) {
                    let Some((idx, (id, sink))) = queue.lock().next() else { break };
                    match std::panic::catch_unwind(AssertUnwindSafe(|| stream(&inner, &live, &id, &cancel, sink))) {
                        Ok(result) => done.push((idx, result)),
                        Err(panic) => {
                            stop.store(true, Ordering::Release);
                            return Err(panic);
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
    check_cancel(cancel)?;
    let _guard = inner.lock_id(id).await;
    let (id, known, token) = (id.clone(), inner.config.known_types.clone(), cancel.clone());
    let threads = inner.config.read_threads;
    blocking(&inner.backend, move |backend| {
        let mut suffix = SuffixSink { from_seq, events: Vec::new() };
        let Some((outcome, _closers)) = scan_validated(backend, &id, from_seq, &known, threads, &token, &mut suffix)?
        else {
            return Err(PersistenceError::NotFound { id });
        };
        Ok(Inspection {
            header: outcome.header,
            events: suffix.events.into(),
            revision: Some(outcome.revision),
            live: false,
            n_closers: 0,
        })
    })
    .await
}

/// The balanced view of `id`, committing any repair durably; a live session is flushed instead
/// (and refused while its turn is open).
pub(super) async fn load(
    inner: &Inner,
    live: &LiveSessions,
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
) -> Result<StreamSummary> {
    check_cancel(cancel)?;
    if let Some(session) = live.session(id) {
        return feed(&mut *sink, live_inspection(&session));
    }
    let _guard = inner.lock_id_blocking(id);
    check_cancel(cancel)?;
    let cached = inner.cache.lock().peek(id);
    if let Some(cached) = cached
        && cached.revision == inner.backend.revision(id)?
    {
        return feed(&mut *sink, cached);
    }
    let threads = inner.config.read_threads;
    let Some((outcome, closers)) =
        scan_validated(&*inner.backend, id, 0, &inner.config.known_types, threads, cancel, &mut *sink)?
    else {
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

struct SuffixSink {
    from_seq: u64,
    events: Vec<Arc<SessionEvent>>,
}

impl ScanSink for SuffixSink {
    fn event(&mut self, event: Arc<SessionEvent>) -> Result<()> {
        if event.seq >= self.from_seq {
            self.events.push(event);
        }
        Ok(())
    }

    fn restart(&mut self) -> bool {
        self.events.clear();
        true
    }
}
