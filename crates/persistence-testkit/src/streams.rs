//! The persistence contract, streamed part: batched streamed reads (`inspect_streams`) in request
//! order, within their lanes, cancelled, dropped or panicking, and a persistence that breaks the
//! streaming contract.

use std::{path::PathBuf, sync::Arc, time::Duration};

use session_core::{CreateOptions, SessionEvent, SessionHeader, SessionId, SessionStore};
use session_persistence::{Coordinator, PersistenceError, SessionPersistence, SinkSlot};
use tokio_util::sync::CancellationToken;

use crate::{
    live::{append_turn, meta, store},
    persistence::{Cx, cancel, header, one_turn, open_step_log},
};

/// Writes three stored sessions for the batch tests: a clean turn, an open step (so the read
/// synthesizes closers) and two turns.
async fn three_stored(persistence: &Coordinator) {
    for (name, events) in
        [("s-a", one_turn(0, 1)), ("s-b", open_step_log()), ("s-c", [one_turn(0, 1), one_turn(6, 2)].concat())]
    {
        persistence.create(header(name), &cancel()).await.unwrap();
        persistence.append(&SessionId::from(name), events, &cancel()).await.unwrap();
    }
}

/// A fresh coordinator over [`three_stored`]'s sessions, attached to a store holding the live
/// session `s-live` with one turn. Keep the store alive while reading `s-live`.
async fn three_stored_and_one_live(h: &Cx<'_>) -> (Coordinator, Arc<SessionStore>) {
    let persistence = h.open();
    three_stored(&persistence).await;
    drop(persistence);
    let persistence = h.open();
    let store = store();
    persistence.attach(&store).unwrap();
    let live = store.create(Some(SessionId::from("s-live")), CreateOptions { seed: None, meta: meta() }).unwrap();
    append_turn(&live, 1);
    (persistence, store)
}

fn collect() -> Box<dyn session_persistence::StreamSink> {
    Box::new(session_persistence::CollectSink::default())
}

/// A collecting sink lent to a read, with the slot it comes back through.
fn lent_collect() -> (Box<dyn session_persistence::StreamSink>, SinkSlot<session_persistence::CollectSink>) {
    SinkSlot::lend(session_persistence::CollectSink::default())
}

pub(crate) async fn batched_streams_equal_single_streams_in_request_order(h: &Cx<'_>) {
    let (persistence, _store) = three_stored_and_one_live(h).await;
    let order = ["s-b", "s-missing", "s-a", "s-live", "s-c"];
    for lanes in [0, 1, 2, 16] {
        let (reads, slots): (Vec<_>, Vec<_>) = order
            .iter()
            .map(|name| {
                let (sink, slot) = lent_collect();
                ((SessionId::from(*name), sink), slot)
            })
            .unzip();
        let batch = persistence.inspect_streams(reads, lanes, &cancel()).await;
        assert_eq!(batch.len(), order.len());
        for ((name, streamed), slot) in order.iter().zip(batch).zip(slots) {
            let id = SessionId::from(*name);
            let single = session_persistence::inspect_into(
                &persistence,
                &id,
                &cancel(),
                session_persistence::CollectSink::default(),
            )
            .await;
            match (streamed, single) {
                (Ok(summary), Ok((single_sink, single_summary))) => {
                    assert_eq!(slot.take().unwrap().events, single_sink.events, "{name}, {lanes} lanes");
                    assert_eq!(summary.header, single_summary.header);
                    assert_eq!(
                        (summary.n_events, summary.n_closers, summary.live),
                        (single_summary.n_events, single_summary.n_closers, single_summary.live),
                        "{name}"
                    );
                }
                (Err(PersistenceError::NotFound { id: missing }), Err(PersistenceError::NotFound { .. })) => {
                    assert_eq!(missing, id);
                }
                (streamed, single) => panic!("{name}: batch {:?}, single {:?}", streamed.err(), single.err()),
            }
        }
    }
    let batch = persistence.inspect_streams(Vec::new(), 4, &cancel()).await;
    assert!(batch.is_empty());
}

pub(crate) async fn a_cancelled_batch_fails_every_read_as_cancelled(h: &Cx<'_>) {
    let persistence = h.open();
    three_stored(&persistence).await;
    let cancelled = cancel();
    cancelled.cancel();
    let reads = ["s-a", "s-b", "s-c"].iter().map(|name| (SessionId::from(*name), collect())).collect();
    let batch = persistence.inspect_streams(reads, 2, &cancelled).await;
    assert_eq!(batch.len(), 3);
    assert!(batch.iter().all(|read| matches!(read, Err(PersistenceError::Cancelled))));
}

/// Counts the reads a batch runs at once: each read, at its first event, waits until two reads
/// have started, so a batch that never overlapped two reads would stall here.
#[derive(Default)]
struct Overlap {
    state: std::sync::Mutex<(usize, usize, usize)>,
    changed: std::sync::Condvar,
}

struct OverlapSink {
    overlap: Arc<Overlap>,
    seen: bool,
}

impl session_persistence::ScanSink for OverlapSink {
    fn event(&mut self, _event: Arc<SessionEvent>) -> session_persistence::Result<()> {
        if std::mem::replace(&mut self.seen, true) {
            return Ok(());
        }
        let mut state = self.overlap.state.lock().unwrap();
        let (active, started, max) = &mut *state;
        *active += 1;
        *started += 1;
        *max = (*max).max(*active);
        self.overlap.changed.notify_all();
        let (mut state, _) =
            self.overlap.changed.wait_timeout_while(state, Duration::from_secs(10), |state| state.1 < 2).unwrap();
        state.0 -= 1;
        Ok(())
    }
}

pub(crate) async fn a_batch_reads_at_most_its_lanes_at_once(h: &Cx<'_>) {
    let persistence = h.open();
    three_stored(&persistence).await;
    let overlap = Arc::new(Overlap::default());
    let reads = ["s-a", "s-b", "s-c", "s-a", "s-b", "s-c"]
        .iter()
        .map(|name| {
            let sink = OverlapSink { overlap: Arc::clone(&overlap), seen: false };
            (SessionId::from(*name), Box::new(sink) as Box<dyn session_persistence::StreamSink>)
        })
        .collect();
    let batch = persistence.inspect_streams(reads, 2, &cancel()).await;
    assert!(batch.iter().all(Result::is_ok));
    let (active, started, max) = *overlap.state.lock().unwrap();
    assert_eq!((active, started, max), (0, 6, 2), "two lanes: two reads at once, never more");
}

/// Panics at the first event it is given.
struct PanicSink;

impl session_persistence::ScanSink for PanicSink {
    fn event(&mut self, _event: Arc<SessionEvent>) -> session_persistence::Result<()> {
        panic!("a sink that panics");
    }
}

pub(crate) async fn a_panicking_sink_panics_the_batch(h: &Cx<'_>) {
    use futures::FutureExt;
    let persistence = h.open();
    three_stored(&persistence).await;
    let reads = vec![
        (SessionId::from("s-a"), collect()),
        (SessionId::from("s-b"), Box::new(PanicSink) as Box<dyn session_persistence::StreamSink>),
        (SessionId::from("s-c"), collect()),
    ];
    let token = cancel();
    let batch = std::panic::AssertUnwindSafe(persistence.inspect_streams(reads, 2, &token)).catch_unwind();
    let Err(panic) = batch.await else { panic!("the batch did not panic") };
    assert_eq!(panic.downcast_ref::<&str>(), Some(&"a sink that panics"));
}

/// Reports, when dropped, whether it was given any event.
struct DropReport {
    name: &'static str,
    used: bool,
    report: std::sync::mpsc::Sender<(&'static str, bool)>,
}

impl session_persistence::ScanSink for DropReport {
    fn event(&mut self, _event: Arc<SessionEvent>) -> session_persistence::Result<()> {
        self.used = true;
        Ok(())
    }
}

impl Drop for DropReport {
    fn drop(&mut self) {
        let _ = self.report.send((self.name, self.used));
    }
}

/// Holds its read at the first event until released.
struct HeldSink {
    entered: std::sync::mpsc::Sender<()>,
    release: std::sync::mpsc::Receiver<()>,
}

impl session_persistence::ScanSink for HeldSink {
    fn event(&mut self, _event: Arc<SessionEvent>) -> session_persistence::Result<()> {
        if self.entered.send(()).is_ok() {
            let _ = self.release.recv_timeout(Duration::from_secs(10));
        }
        Ok(())
    }
}

pub(crate) async fn a_dropped_batch_starts_no_further_read(h: &Cx<'_>) {
    let persistence = Arc::new(h.open());
    three_stored(&persistence).await;
    let (entered_tx, entered) = std::sync::mpsc::channel();
    let (release, release_rx) = std::sync::mpsc::channel();
    let (report, reports) = std::sync::mpsc::channel();
    let reads = vec![
        (SessionId::from("s-a"), Box::new(HeldSink { entered: entered_tx, release: release_rx }) as Box<_>),
        (SessionId::from("s-b"), Box::new(DropReport { name: "s-b", used: false, report: report.clone() }) as _),
        (SessionId::from("s-c"), Box::new(DropReport { name: "s-c", used: false, report }) as _),
    ];
    let batch = tokio::spawn({
        let persistence = Arc::clone(&persistence);
        async move { persistence.inspect_streams(reads, 1, &cancel()).await }
    });
    tokio::task::spawn_blocking(move || entered.recv_timeout(Duration::from_secs(10)).unwrap()).await.unwrap();
    batch.abort();
    assert!(batch.await.is_err_and(|error| error.is_cancelled()));
    release.send(()).unwrap();
    let mut dropped = tokio::task::spawn_blocking(move || {
        (0..2).map(|_| reports.recv_timeout(Duration::from_secs(10)).unwrap()).collect::<Vec<_>>()
    })
    .await
    .unwrap();
    dropped.sort();
    assert_eq!(dropped, [("s-b", false), ("s-c", false)], "the lane stopped after the read it held");
}

/// Records how many events it had when `finish` was called, and how often it was.
#[derive(Default)]
struct FinishSink {
    events: usize,
    finished: Vec<usize>,
}

impl session_persistence::ScanSink for FinishSink {
    fn event(&mut self, _event: Arc<SessionEvent>) -> session_persistence::Result<()> {
        self.events += 1;
        Ok(())
    }

    fn restart(&mut self) -> bool {
        self.events = 0;
        true
    }

    fn finish(&mut self) {
        self.finished.push(self.events);
    }
}

pub(crate) async fn a_stream_finishes_its_sink_once_after_the_last_event(h: &Cx<'_>) {
    let (persistence, _store) = three_stored_and_one_live(h).await;
    for name in ["s-b", "s-live"] {
        let id = SessionId::from(name);
        let (sink, summary) =
            session_persistence::inspect_into(&persistence, &id, &cancel(), FinishSink::default()).await.unwrap();
        assert_eq!(sink.finished, [summary.n_events as usize], "{name}: once, after every event and closer");
    }
    let names = ["s-a", "s-b", "s-live", "s-c"];
    let reads = names.iter().map(|name| (SessionId::from(*name), FinishSink::default())).collect();
    let batch = session_persistence::inspect_each_into(&persistence, reads, 2, &cancel()).await;
    for (name, read) in names.iter().zip(batch) {
        let (sink, summary) = read.unwrap();
        assert_eq!(sink.finished, [summary.n_events as usize], "{name} in a batch");
    }
}

/// A persistence that breaks the streaming contract: it keeps the sink it was given past the
/// read (streaming into one of its own), and it returns one result short for a batch. (Handing
/// back a sink of another type cannot be written: nothing comes back through the trait.)
#[derive(Debug)]
struct Misbehaving(Coordinator, Kept);

/// The sinks a misbehaving persistence kept.
#[derive(Default)]
struct Kept(std::sync::Mutex<Vec<Box<dyn session_persistence::StreamSink>>>);

impl std::fmt::Debug for Kept {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Kept").finish_non_exhaustive()
    }
}

#[async_trait::async_trait]
impl SessionPersistence for Misbehaving {
    async fn create(&self, header: SessionHeader, cancel: &CancellationToken) -> session_persistence::Result<()> {
        self.0.create(header, cancel).await
    }

    async fn append(
        &self,
        id: &SessionId,
        events: Vec<Arc<SessionEvent>>,
        cancel: &CancellationToken,
    ) -> session_persistence::Result<()> {
        self.0.append(id, events, cancel).await
    }

    async fn list_snapshots(
        &self,
        cancel: &CancellationToken,
    ) -> session_persistence::Result<session_persistence::Listing> {
        self.0.list_snapshots(cancel).await
    }

    async fn list_children(
        &self,
        parent: &SessionId,
        cancel: &CancellationToken,
    ) -> session_persistence::Result<session_persistence::Listing> {
        self.0.list_children(parent, cancel).await
    }

    async fn list_page(
        &self,
        request: &session_persistence::PageRequest,
        cancel: &CancellationToken,
    ) -> session_persistence::Result<session_persistence::HeaderPage> {
        self.0.list_page(request, cancel).await
    }

    async fn stored_header(
        &self,
        id: &SessionId,
        cancel: &CancellationToken,
    ) -> session_persistence::Result<Option<session_persistence::StoredHeader>> {
        self.0.stored_header(id, cancel).await
    }

    fn durable_len(&self, id: &SessionId) -> Option<u64> {
        self.0.durable_len(id)
    }

    fn fence(&self, id: &SessionId) -> Option<String> {
        self.0.fence(id)
    }

    async fn fence_if_overtaken(
        &self,
        id: &SessionId,
        cancel: &CancellationToken,
    ) -> session_persistence::Result<bool> {
        self.0.fence_if_overtaken(id, cancel).await
    }

    async fn inspect(
        &self,
        id: &SessionId,
        cancel: &CancellationToken,
    ) -> session_persistence::Result<session_persistence::Inspection> {
        self.0.inspect(id, cancel).await
    }

    async fn inspect_stream(
        &self,
        id: &SessionId,
        cancel: &CancellationToken,
        sink: Box<dyn session_persistence::StreamSink>,
    ) -> session_persistence::Result<session_persistence::StreamSummary> {
        self.1.0.lock().unwrap().push(sink);
        self.0.inspect_stream(id, cancel, collect()).await
    }

    async fn inspect_streams(
        &self,
        mut reads: Vec<(SessionId, Box<dyn session_persistence::StreamSink>)>,
        lanes: usize,
        cancel: &CancellationToken,
    ) -> Vec<session_persistence::Result<session_persistence::StreamSummary>> {
        reads.pop();
        self.0.inspect_streams(reads, lanes, cancel).await
    }

    async fn read_from(
        &self,
        id: &SessionId,
        from_seq: u64,
        cancel: &CancellationToken,
    ) -> session_persistence::Result<session_persistence::Inspection> {
        self.0.read_from(id, from_seq, cancel).await
    }

    async fn read_from_many(
        &self,
        reads: &[(SessionId, u64)],
        limit: session_persistence::ReadLimit,
        cancel: &CancellationToken,
    ) -> Vec<session_persistence::Result<session_persistence::Suffix>> {
        self.0.read_from_many(reads, limit, cancel).await
    }

    async fn load(
        &self,
        id: &SessionId,
        cancel: &CancellationToken,
    ) -> session_persistence::Result<session_persistence::Inspection> {
        self.0.load(id, cancel).await
    }

    async fn flush(&self, id: &SessionId, cancel: &CancellationToken) -> session_persistence::Result<()> {
        self.0.flush(id, cancel).await
    }

    async fn release(&self, id: &SessionId, cancel: &CancellationToken) -> session_persistence::Result<()> {
        self.0.release(id, cancel).await
    }

    fn locate(&self, header: &SessionHeader) -> Option<PathBuf> {
        self.0.locate(header)
    }

    fn watch(
        &self,
        options: &session_persistence::WatchOptions,
        sink: session_persistence::SharedChangeSink,
    ) -> session_persistence::Result<Option<session_persistence::Watch>> {
        self.0.watch(options, sink)
    }

    async fn positions(
        &self,
        ids: &[SessionId],
        cancel: &CancellationToken,
    ) -> session_persistence::Result<Vec<session_persistence::SessionPosition>> {
        self.0.positions(ids, cancel).await
    }

    async fn created_since(
        &self,
        since_ms: u64,
        cancel: &CancellationToken,
    ) -> session_persistence::Result<session_persistence::Listing> {
        self.0.created_since(since_ms, cancel).await
    }
}

pub(crate) async fn a_persistence_breaking_the_stream_contract_gives_errors_not_panics(h: &Cx<'_>) {
    let persistence = h.open();
    three_stored(&persistence).await;
    let misbehaving = Misbehaving(persistence, Kept::default());
    let kept =
        session_persistence::inspect_into(&misbehaving, &SessionId::from("s-a"), &cancel(), FinishSink::default())
            .await;
    let Err(PersistenceError::InvalidInput { message }) = kept else { panic!("a kept sink is an error") };
    assert!(message.contains("kept the sink"), "{message}");

    let reads = ["s-a", "s-b", "s-c"].iter().map(|name| (SessionId::from(*name), FinishSink::default())).collect();
    let batch = session_persistence::inspect_each_into(&misbehaving, reads, 2, &cancel()).await;
    assert_eq!(batch.len(), 3, "every read has a result");
    assert!(batch[..2].iter().all(Result::is_ok));
    let Err(PersistenceError::InvalidInput { message }) = &batch[2] else { panic!("the missing result is an error") };
    assert!(message.contains("2 results for 3 streamed reads"), "{message}");
}
