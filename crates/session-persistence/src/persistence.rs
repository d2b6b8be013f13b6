//! The `SessionPersistence` trait: what the upper layers need from durable storage.

use std::{any::Any, fmt, path::PathBuf, sync::Arc};

use session_core::{SessionEvent, SessionHeader, SessionId};
use tokio_util::sync::CancellationToken;

use crate::{
    backend::{HeaderPage, Listing, PageRequest, Revision, ScanSink, StoredHeader},
    error::{PersistenceError, Result},
};

/// An immutable view of one session's log.
#[derive(Debug, Clone)]
pub struct Inspection {
    /// The session's header.
    pub header: Arc<SessionHeader>,
    /// Every event in seq order (`events[i].seq == i`), closers included, already through the
    /// read-side validation and the legacy import.
    pub events: Arc<[Arc<SessionEvent>]>,
    /// The stored revision the view was read at; `None` for a live snapshot.
    pub revision: Option<Revision>,
    /// Whether the view is a snapshot of a live session (which may end inside an open turn).
    pub live: bool,
    /// How many events at the end are crash closers synthesized in memory (not stored).
    pub n_closers: u64,
}

/// What a streaming inspection delivered besides its events.
#[derive(Debug, Clone)]
pub struct StreamSummary {
    /// The session's header, as handed to the sink.
    pub header: Arc<SessionHeader>,
    /// Events delivered, closers included.
    pub n_events: u64,
    /// Synthesized closers among them (0 for a live snapshot).
    pub n_closers: u64,
    /// Whether the events came from a live session's snapshot rather than storage.
    pub live: bool,
    /// The stored revision that was read; `None` for a live snapshot.
    pub revision: Option<Revision>,
}

/// One streamed read's result: the sink it was given, with the summary.
pub type Streamed = Result<(Box<dyn StreamSink>, StreamSummary)>;

/// A sink that can travel to the blocking pool and come back.
pub trait StreamSink: ScanSink + Send + Any {}

impl<T: ScanSink + Send + Any> StreamSink for T {}

/// Durable storage of session logs, shared by every upper layer.
///
/// Every operation takes a cancellation token: a call whose token fires returns
/// [`PersistenceError::Cancelled`](crate::PersistenceError::Cancelled) and leaves nothing half-written.
///
/// The [`Coordinator`](crate::Coordinator) is its one implementation; the others wrap it (to count
/// or fail calls in tests). So no method the coordinator answers its own way has a default body: a
/// wrapper must forward each one, and cannot fall back silently to a cut of
/// [`list_snapshots`](Self::list_snapshots) that never reaches the backend's own query. Only
/// [`list`](Self::list), which the coordinator answers from `list_snapshots` too, has one.
#[async_trait::async_trait]
pub trait SessionPersistence: Send + Sync + fmt::Debug {
    /// Registers intent to store a new session. Nothing is written until the first non-empty append.
    async fn create(&self, header: SessionHeader, cancel: &CancellationToken) -> Result<()>;

    /// Durably appends events that continue the stored log. Resolves after they are durable.
    async fn append(&self, id: &SessionId, events: Vec<Arc<SessionEvent>>, cancel: &CancellationToken) -> Result<()>;

    /// Headers of every stored session that can be listed (not of sessions that were created
    /// but never written), sorted by id. Logs that cannot be listed are left out; see
    /// [`list_snapshots`](Self::list_snapshots) for them.
    async fn list(&self, cancel: &CancellationToken) -> Result<Vec<Arc<SessionHeader>>> {
        Ok(self.list_snapshots(cancel).await?.headers.into_iter().map(|stored| stored.header).collect())
    }

    /// Headers with their revisions, without reading the logs, and every stored log that cannot
    /// be listed as its own [`LogFault`](crate::LogFault): one damaged log never fails the
    /// listing or hides another. Only a fault of the store as a whole, or a cancellation, fails it.
    async fn list_snapshots(&self, cancel: &CancellationToken) -> Result<Listing>;

    /// What a listing of `parent`'s subagent children needs: `parent`, its children, and of each
    /// child's own subagent children at least one per owner ([`Listing::family_of`]), with the faults whose header
    /// names one of them: a part of [`list_snapshots`](Self::list_snapshots) cut by
    /// [`Listing::family_of`] (all of it over a backend without an index), for the cost of the
    /// family over an indexed one.
    async fn list_children(&self, parent: &SessionId, cancel: &CancellationToken) -> Result<Listing>;

    /// One page of the stored headers, newest first ([`PageRequest`], [`HeaderPage`]): what
    /// [`HeaderPage::from_listing`] cuts from [`list_snapshots`](Self::list_snapshots).
    async fn list_page(&self, request: &PageRequest, cancel: &CancellationToken) -> Result<HeaderPage>;

    /// The header of `id`'s stored log with its revision, read without reading the log's events
    /// (one small read at most). `Ok(None)` if nothing is stored under `id`. Lets a caller decide
    /// about a session (is it taken? whose is it?) before paying for a read, and without the
    /// time a read takes telling anything.
    async fn stored_header(&self, id: &SessionId, cancel: &CancellationToken) -> Result<Option<StoredHeader>>;

    /// How many events of the live session `id` are durable (written and fsynced), if this
    /// persistence writes it: the durable watermark is `durable_len - 1`. `None` when it does
    /// not know, or does not hold `id` live.
    fn durable_len(&self, id: &SessionId) -> Option<u64>;

    /// Why the live session `id` can no longer be written through this persistence, when it
    /// cannot: one of its writes met the writer fence ([`PersistenceError::Fenced`]), which no
    /// retry heals (another process or host moved its stored log on, or created it after this
    /// copy found the id free). Its flushes then fail at once with that error (this is its
    /// text), its unwritten events stay in memory only, and a release unbinds it without
    /// writing, so it can be resumed from the store. `None` when it can be written or is not
    /// held live.
    fn fence(&self, id: &SessionId) -> Option<String>;

    /// The balanced view of a session, without changing storage: a cold log gets its crash
    /// closers in memory; a live session gets its current snapshot.
    async fn inspect(&self, id: &SessionId, cancel: &CancellationToken) -> Result<Inspection>;

    /// Like [`inspect`](Self::inspect), but streams the events into `sink` as they are decoded,
    /// so memory does not grow with the log, then calls [`ScanSink::finish`]. Returns the sink
    /// with a summary.
    async fn inspect_stream(&self, id: &SessionId, cancel: &CancellationToken, sink: Box<dyn StreamSink>) -> Streamed;

    /// [`inspect_stream`](Self::inspect_stream) for several sessions, each into its own sink,
    /// with at most `lanes` reads running at once. Results come back in the order of `reads`, and
    /// one read's failure leaves the others alone. A fired `cancel` fails the reads not yet
    /// finished with `Cancelled`.
    ///
    /// The coordinator keeps `lanes` blocking threads reading back to back, without a hand-off
    /// between the async side and a thread per read; [`stream_each`] runs `inspect_stream` per
    /// read instead.
    async fn inspect_streams(
        &self,
        reads: Vec<(SessionId, Box<dyn StreamSink>)>,
        lanes: usize,
        cancel: &CancellationToken,
    ) -> Vec<Streamed>;

    /// The stored events with `seq >= from_seq`: no closers, no repair, no caching.
    async fn read_from(&self, id: &SessionId, from_seq: u64, cancel: &CancellationToken) -> Result<Inspection>;

    /// The balanced view of a session, committing any repair durably (cut the torn tail, append
    /// the closers). A live session with an open turn cannot be loaded.
    async fn load(&self, id: &SessionId, cancel: &CancellationToken) -> Result<Inspection>;

    /// Waits until everything a live session appended so far is durable.
    async fn flush(&self, id: &SessionId, cancel: &CancellationToken) -> Result<()>;

    /// Lets go of a live session that its store no longer holds: writes what it buffered, then
    /// forgets the binding, so the id is served cold from then on and may be resumed at once.
    /// Idempotent.
    async fn release(&self, id: &SessionId, cancel: &CancellationToken) -> Result<()>;

    /// Where `header`'s log lives, if the backend has files.
    fn locate(&self, header: &SessionHeader) -> Option<PathBuf>;
}

/// [`SessionPersistence::inspect_streams`] as one
/// [`inspect_stream`](SessionPersistence::inspect_stream) per read, at most `lanes` at once: for
/// wrappers whose `inspect_streams` wants the per-read path (and their own `inspect_stream`).
pub async fn stream_each<P: SessionPersistence + ?Sized>(
    persistence: &P,
    reads: Vec<(SessionId, Box<dyn StreamSink>)>,
    lanes: usize,
    cancel: &CancellationToken,
) -> Vec<Streamed> {
    use futures::{StreamExt, future::BoxFuture};
    // Boxed up front: a lazily mapped stream trips the `Send` check of `async_trait`.
    let n_reads = reads.len();
    let pending: Vec<BoxFuture<'_, (usize, Streamed)>> = reads
        .into_iter()
        .enumerate()
        .map(|(idx, (id, sink))| {
            Box::pin(async move { (idx, persistence.inspect_stream(&id, cancel, sink).await) }) as BoxFuture<'_, _>
        })
        .collect();
    // In completion order, so a slow read never holds back the start of the next one.
    let mut done = futures::stream::iter(pending).buffer_unordered(lanes.max(1));
    let mut results: Vec<Option<Streamed>> = std::iter::repeat_with(|| None).take(n_reads).collect();
    while let Some((idx, result)) = done.next().await {
        results[idx] = Some(result);
    }
    // Invariant: the stream yields every read exactly once.
    results.into_iter().map(|result| result.expect("every read finished")).collect()
}

/// Streams `id` into a concrete sink and hands it back typed.
pub async fn inspect_into<S: StreamSink>(
    persistence: &dyn SessionPersistence,
    id: &SessionId,
    cancel: &CancellationToken,
    sink: S,
) -> Result<(S, StreamSummary)> {
    let (sink, summary) = persistence.inspect_stream(id, cancel, Box::new(sink)).await?;
    Ok((typed(sink)?, summary))
}

/// [`inspect_into`] for several sessions at once, through
/// [`inspect_streams`](SessionPersistence::inspect_streams): each result in the order of `reads`.
/// A persistence that breaks the contract (a result missing or extra, a sink swapped) gives the
/// reads it broke an `InvalidInput` error; nothing is dropped silently.
pub async fn inspect_each_into<S: StreamSink>(
    persistence: &dyn SessionPersistence,
    reads: Vec<(SessionId, S)>,
    lanes: usize,
    cancel: &CancellationToken,
) -> Vec<Result<(S, StreamSummary)>> {
    let n_reads = reads.len();
    let reads = reads.into_iter().map(|(id, sink)| (id, Box::new(sink) as Box<dyn StreamSink>)).collect();
    let streamed = persistence.inspect_streams(reads, lanes, cancel).await;
    let n_results = streamed.len();
    let mut typed_results: Vec<Result<(S, StreamSummary)>> = streamed
        .into_iter()
        .take(n_reads)
        .map(|read| read.and_then(|(sink, summary)| Ok((typed(sink)?, summary))))
        .collect();
    while typed_results.len() < n_reads {
        typed_results.push(Err(PersistenceError::invalid_input(format!(
            "the persistence returned {n_results} results for {n_reads} streamed reads"
        ))));
    }
    typed_results
}

/// The concrete sink a stream was given back. A persistence must return the very sink it was
/// given; one that returns another breaks its contract, which is an error, not a panic.
fn typed<S: StreamSink>(sink: Box<dyn StreamSink>) -> Result<S> {
    let sink: Box<dyn Any> = sink;
    match sink.downcast::<S>() {
        Ok(sink) => Ok(*sink),
        Err(_) => {
            Err(PersistenceError::invalid_input("the persistence returned another sink than the one it was given"))
        }
    }
}
