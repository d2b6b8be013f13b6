//! The `SessionPersistence` trait: what the upper layers need from durable storage.

use std::{fmt, path::PathBuf, sync::Arc};

use parking_lot::Mutex;
use session_core::{SessionEvent, SessionHeader, SessionId};
use tokio_util::sync::CancellationToken;

use crate::{
    backend::{HeaderPage, Listing, PageRequest, Revision, ScanSink, StoredHeader},
    error::{PersistenceError, Result},
    watch::{SessionPosition, SharedChangeSink, Watch, WatchOptions},
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
#[derive(Debug, Clone, PartialEq, Eq)]
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
    /// Whether the stored log ends in a torn tail (an uncommitted physical tail the read stopped
    /// before, which the next write cuts); `None` when the events came from memory (a live
    /// snapshot, or the inspection cache), which does not know.
    pub torn: Option<bool>,
}

/// How much one read of [`SessionPersistence::read_from_many`] may hold: it ends after the
/// event that reaches either bound, so it always holds at least one event when the log has any
/// from the seq asked. A database backend bounds its statements by the events' bound; the bytes'
/// bound is met as the events are decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadLimit {
    /// Events at most.
    pub events: usize,
    /// Bytes at most, counted as the events' JSON lines ([`SessionEvent::encoded_len`]).
    pub bytes: usize,
}

impl ReadLimit {
    /// No bound: each read holds its whole suffix.
    pub const NONE: ReadLimit = ReadLimit { events: usize::MAX, bytes: usize::MAX };
}

/// The stored events of one log from a seq on, up to a [`ReadLimit`].
#[derive(Debug, Clone)]
pub struct Suffix {
    /// The session's header.
    pub header: Arc<SessionHeader>,
    /// The events from the seq asked, in seq order, through the read-side validation.
    pub events: Vec<Arc<SessionEvent>>,
    /// The stored revision that was read; `None` when the read was [`cut`](Self::cut).
    pub revision: Option<Revision>,
    /// Whether the read reached its limit: the log may go on past the last event (or end right
    /// there), and a read from the next seq gives the rest.
    pub cut: bool,
}

/// A sink that can travel to the thread that reads: any [`ScanSink`] that can be sent.
///
/// A streamed read takes its sink by value (`Box<dyn StreamSink>`) and drops it on the reading
/// thread once the read is over; nothing comes back through the trait, so no persistence can hand
/// a caller a sink of another type. A caller that wants its own sink back, typed, lends it through
/// a [`SinkSlot`] (as [`inspect_into`] and [`inspect_each_into`] do).
pub trait StreamSink: ScanSink + Send {}

impl<T: ScanSink + Send> StreamSink for T {}

/// The way back of a typed sink lent to a streamed read: [`lend`](Self::lend) boxes the sink for
/// the read, and the box puts the sink into this slot when the read drops it, so
/// [`take`](Self::take) returns the very sink the caller lent, with its own type, and no
/// downcast.
///
/// ```
/// use session_persistence::{CollectSink, SinkSlot, StreamSink};
///
/// let (boxed, slot): (Box<dyn StreamSink>, _) = SinkSlot::lend(CollectSink::default());
/// // A persistence streams into `boxed`, then drops it.
/// drop(boxed);
/// let sink: CollectSink = slot.take().unwrap();
/// assert!(sink.events.is_empty());
/// ```
pub struct SinkSlot<S> {
    slot: Arc<Mutex<Option<S>>>,
}

impl<S> fmt::Debug for SinkSlot<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SinkSlot").field("returned", &self.slot.lock().is_some()).finish()
    }
}

impl<S: StreamSink + 'static> SinkSlot<S> {
    /// Boxes `sink` for a streamed read, keeping its way back here.
    pub fn lend(sink: S) -> (Box<dyn StreamSink>, SinkSlot<S>) {
        let slot = Arc::new(Mutex::new(None));
        (Box::new(Lent { sink: Some(sink), slot: Arc::clone(&slot) }), SinkSlot { slot })
    }

    /// The lent sink, once the read dropped its box. A persistence that still holds the box
    /// (it kept the sink past the call, which breaks its contract) gives an `InvalidInput`
    /// error, not a panic.
    pub fn take(self) -> Result<S> {
        self.slot.lock().take().ok_or_else(|| {
            PersistenceError::invalid_input("the persistence kept the sink it was given past the streamed read")
        })
    }
}

/// A lent sink: forwards every call, and goes back to its slot when dropped.
struct Lent<S> {
    /// `Some` until dropped.
    sink: Option<S>,
    slot: Arc<Mutex<Option<S>>>,
}

impl<S> Lent<S> {
    fn sink(&mut self) -> &mut S {
        // Invariant: only `Drop` takes the sink out, so every call before it finds it.
        self.sink.as_mut().expect("a lent sink is present until it is dropped")
    }
}

impl<S: ScanSink> ScanSink for Lent<S> {
    fn header(&mut self, header: &Arc<SessionHeader>) -> Result<()> {
        self.sink().header(header)
    }

    fn event(&mut self, event: Arc<SessionEvent>) -> Result<()> {
        self.sink().event(event)
    }

    fn restart(&mut self) -> bool {
        self.sink().restart()
    }

    fn read_ahead(&self) -> bool {
        self.sink.as_ref().is_some_and(ScanSink::read_ahead)
    }

    fn read_ahead_decoders(&self) -> usize {
        self.sink.as_ref().map_or(1, |sink| sink.read_ahead_decoders())
    }

    fn finish(&mut self) {
        self.sink().finish();
    }
}

impl<S> Drop for Lent<S> {
    fn drop(&mut self) {
        if let Some(sink) = self.sink.take() {
            *self.slot.lock() = Some(sink);
        }
    }
}

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

    /// Fences the live session `id` now if the stored log holds more than the live copy does:
    /// another writer took the session over, so the copy's next write would meet the writer
    /// fence. The copy is then fenced as that write would leave it (see [`fence`](Self::fence)),
    /// and its writer lease ends, so other processes no longer see the session held from here.
    /// `Ok(true)` when it fenced the copy; `Ok(false)` when `id` is not live here, is fenced
    /// already, or the stored log, read again, does not reach past the copy.
    async fn fence_if_overtaken(&self, id: &SessionId, cancel: &CancellationToken) -> Result<bool>;

    /// The balanced view of a session, without changing storage: a cold log gets its crash
    /// closers in memory; a live session gets its current snapshot.
    async fn inspect(&self, id: &SessionId, cancel: &CancellationToken) -> Result<Inspection>;

    /// Like [`inspect`](Self::inspect), but streams the events into `sink` as they are decoded,
    /// so memory does not grow with the log, then calls [`ScanSink::finish`]. The sink is
    /// dropped before this returns (a [`SinkSlot`] gets it back); the answer is a summary.
    async fn inspect_stream(
        &self,
        id: &SessionId,
        cancel: &CancellationToken,
        sink: Box<dyn StreamSink>,
    ) -> Result<StreamSummary>;

    /// [`inspect_stream`](Self::inspect_stream) for several sessions, each into its own sink,
    /// with at most `lanes` reads running at once. Results come back in the order of `reads`, and
    /// one read's failure leaves the others alone. A fired `cancel` fails the reads not yet
    /// finished with `Cancelled`. Every sink is dropped before this returns.
    ///
    /// The coordinator keeps `lanes` blocking threads reading back to back, without a hand-off
    /// between the async side and a thread per read; [`stream_each`] runs `inspect_stream` per
    /// read instead.
    async fn inspect_streams(
        &self,
        reads: Vec<(SessionId, Box<dyn StreamSink>)>,
        lanes: usize,
        cancel: &CancellationToken,
    ) -> Vec<Result<StreamSummary>>;

    /// The stored events with `seq >= from_seq`: no closers, no repair, no caching.
    async fn read_from(&self, id: &SessionId, from_seq: u64, cancel: &CancellationToken) -> Result<Inspection>;

    /// [`read_from`](Self::read_from) of each `(id, from_seq)` of `reads`, each holding at most
    /// what `limit` allows (a [`cut`](Suffix::cut) one goes on from the seq after its last
    /// event), answered in order, one read's failure leaving the others alone, a few at once.
    /// Over a database server the short ones are read in one round trip
    /// ([`Backend::prefetch_tails`](crate::Backend::prefetch_tails)).
    async fn read_from_many(
        &self,
        reads: &[(SessionId, u64)],
        limit: ReadLimit,
        cancel: &CancellationToken,
    ) -> Vec<Result<Suffix>>;

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

    /// Starts the store's change signal ([`Backend::watch`](crate::Backend::watch)): wake-ups
    /// when another writer may have changed a session. `Ok(None)` when only this persistence
    /// writes its store.
    fn watch(&self, options: &WatchOptions, sink: SharedChangeSink) -> Result<Option<Watch>>;

    /// Where each of `ids` stands in the store ([`Backend::positions`](crate::Backend::positions)),
    /// read from storage (a live session's unwritten events are not counted). Ids not stored are
    /// left out.
    async fn positions(&self, ids: &[SessionId], cancel: &CancellationToken) -> Result<Vec<SessionPosition>>;

    /// The stored headers created at or after `since_ms`
    /// ([`Backend::created_since`](crate::Backend::created_since)), sorted by id.
    async fn created_since(&self, since_ms: u64, cancel: &CancellationToken) -> Result<Listing>;
}

/// [`SessionPersistence::inspect_streams`] as one
/// [`inspect_stream`](SessionPersistence::inspect_stream) per read, at most `lanes` at once: for
/// wrappers whose `inspect_streams` wants the per-read path (and their own `inspect_stream`).
pub async fn stream_each<P: SessionPersistence + ?Sized>(
    persistence: &P,
    reads: Vec<(SessionId, Box<dyn StreamSink>)>,
    lanes: usize,
    cancel: &CancellationToken,
) -> Vec<Result<StreamSummary>> {
    use futures::{StreamExt, future::BoxFuture};
    // Boxed up front: a lazily mapped stream trips the `Send` check of `async_trait`.
    let n_reads = reads.len();
    let pending: Vec<BoxFuture<'_, (usize, Result<StreamSummary>)>> = reads
        .into_iter()
        .enumerate()
        .map(|(idx, (id, sink))| {
            Box::pin(async move { (idx, persistence.inspect_stream(&id, cancel, sink).await) }) as BoxFuture<'_, _>
        })
        .collect();
    // In completion order, so a slow read never holds back the start of the next one.
    let mut done = futures::stream::iter(pending).buffer_unordered(lanes.max(1));
    let mut results: Vec<Option<Result<StreamSummary>>> = std::iter::repeat_with(|| None).take(n_reads).collect();
    while let Some((idx, result)) = done.next().await {
        results[idx] = Some(result);
    }
    // Invariant: the stream yields every read exactly once.
    results.into_iter().map(|result| result.expect("every read finished")).collect()
}

/// Streams `id` into a concrete sink and hands it back typed (lent through a [`SinkSlot`]).
pub async fn inspect_into<S: StreamSink + 'static>(
    persistence: &dyn SessionPersistence,
    id: &SessionId,
    cancel: &CancellationToken,
    sink: S,
) -> Result<(S, StreamSummary)> {
    let (lent, slot) = SinkSlot::lend(sink);
    let summary = persistence.inspect_stream(id, cancel, lent).await?;
    Ok((slot.take()?, summary))
}

/// [`inspect_into`] for several sessions at once, through
/// [`inspect_streams`](SessionPersistence::inspect_streams): each result in the order of `reads`.
/// A persistence that breaks the contract (a result missing or extra, a sink kept) gives the
/// reads it broke an `InvalidInput` error; nothing is dropped silently.
pub async fn inspect_each_into<S: StreamSink + 'static>(
    persistence: &dyn SessionPersistence,
    reads: Vec<(SessionId, S)>,
    lanes: usize,
    cancel: &CancellationToken,
) -> Vec<Result<(S, StreamSummary)>> {
    let n_reads = reads.len();
    let (lent, slots): (Vec<_>, Vec<_>) = reads
        .into_iter()
        .map(|(id, sink)| {
            let (lent, slot) = SinkSlot::lend(sink);
            ((id, lent), slot)
        })
        .unzip();
    let streamed = persistence.inspect_streams(lent, lanes, cancel).await;
    let n_results = streamed.len();
    let mut typed_results: Vec<Result<(S, StreamSummary)>> = streamed
        .into_iter()
        .zip(slots)
        .map(|(read, slot)| read.and_then(|summary| Ok((slot.take()?, summary))))
        .collect();
    while typed_results.len() < n_reads {
        typed_results.push(Err(PersistenceError::invalid_input(format!(
            "the persistence returned {n_results} results for {n_reads} streamed reads"
        ))));
    }
    typed_results
}
