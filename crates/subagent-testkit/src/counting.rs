//! The read-counting persistence wrapper every harness reads through: reads per id, listings,
//! materialized reads and whole batches counted; reads held at a gate; list and read faults
//! injected.

use std::{
    collections::{HashMap, HashSet},
    path::PathBuf,
    sync::{
        Arc,
        atomic::{AtomicU64, AtomicUsize, Ordering},
    },
};

use parking_lot::Mutex;
use session_core::{SessionEvent, SessionHeader, SessionId};
use session_persistence::{
    HeaderPage, Inspection, Listing, PageRequest, PersistenceError, SessionPersistence, StoredHeader, StreamSink,
    StreamSummary,
};
use tokio::sync::{Notify, oneshot};
use tokio_util::sync::CancellationToken;

use crate::fixtures::id;

/// What the instrumented wrapper does to `list`.
#[derive(Debug, Clone, Default)]
pub enum ListFault {
    /// List normally.
    #[default]
    None,
    /// Fail with this message (no cancellation involved).
    Fail(&'static str),
    /// Cancel this token, then list normally.
    CancelThenOk(CancellationToken),
    /// Wait until the caller's token fires, then fail with `Cancelled` (a backend that rejects on
    /// abort).
    PendUntilCancelled,
}

/// What the instrumented wrapper does to a read of one id.
#[derive(Debug, Clone)]
pub enum ReadFault {
    /// Fail with an injected error (no cancellation involved).
    Fail,
    /// Wait until the read's token fires, then fail with `Cancelled`.
    PendUntilCancelled,
    /// Read normally, then cancel this token before returning.
    CancelAfterOk(CancellationToken),
    /// Cancel this token, then fail.
    CancelThenFail(CancellationToken),
    /// Read normally, then change the returned header.
    Tamper(fn(&mut SessionHeader)),
}

/// Holds reads until the test releases them one by one.
#[derive(Debug, Default)]
pub struct Gate {
    waiting: Mutex<Vec<(SessionId, oneshot::Sender<()>)>>,
    changed: Notify,
}

impl Gate {
    /// Waits until exactly `n` reads are held, and returns their ids in arrival order.
    pub async fn held(&self, n: usize) -> Vec<SessionId> {
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let waiting = self.waiting.lock();
                assert!(waiting.len() <= n, "{} reads held, expected at most {n}", waiting.len());
                if waiting.len() == n {
                    return waiting.iter().map(|(id, _)| id.clone()).collect();
                }
            }
            notified.await;
        }
    }

    /// Lets the held read of `child` go on.
    pub fn release(&self, child: &SessionId) {
        let sender = {
            let mut waiting = self.waiting.lock();
            let idx = waiting.iter().position(|(id, _)| id == child).expect("the read is held");
            waiting.remove(idx).1
        };
        sender.send(()).unwrap();
    }

    async fn hold(&self, child: &SessionId) {
        let (sender, receiver) = oneshot::channel();
        self.waiting.lock().push((child.clone(), sender));
        self.changed.notify_waiters();
        receiver.await.unwrap();
    }
}

/// A `SessionPersistence` that forwards to a real one, counts reads per id, and injects faults.
#[derive(Debug)]
pub struct Counting {
    inner: Arc<dyn SessionPersistence>,
    reads: Mutex<HashMap<SessionId, u64>>,
    /// Reads that materialize a whole log (`inspect`, `read_from`, `load`), as opposed to streams.
    materialized: AtomicU64,
    lists: AtomicU64,
    /// Batches handed whole to the real persistence.
    batches: AtomicU64,
    list_fault: Mutex<ListFault>,
    read_faults: Mutex<HashMap<SessionId, ReadFault>>,
    gate: Mutex<Option<Arc<Gate>>>,
    in_flight: AtomicUsize,
    max_in_flight: AtomicUsize,
    /// The tokens reads were given, by id, most recent last.
    tokens: Mutex<HashMap<SessionId, CancellationToken>>,
    /// Fires whenever a read or a list starts.
    pub entered: Notify,
    entered_ids: Mutex<HashSet<SessionId>>,
}

impl Counting {
    /// A wrapper over `inner` with nothing counted, no fault and no gate.
    pub fn new(inner: Arc<dyn SessionPersistence>) -> Counting {
        Counting {
            inner,
            reads: Mutex::new(HashMap::new()),
            materialized: AtomicU64::new(0),
            lists: AtomicU64::new(0),
            batches: AtomicU64::new(0),
            list_fault: Mutex::new(ListFault::None),
            read_faults: Mutex::new(HashMap::new()),
            gate: Mutex::new(None),
            in_flight: AtomicUsize::new(0),
            max_in_flight: AtomicUsize::new(0),
            tokens: Mutex::new(HashMap::new()),
            entered: Notify::new(),
            entered_ids: Mutex::new(HashSet::new()),
        }
    }

    /// How many reads of `child` started so far.
    pub fn reads(&self, child: &SessionId) -> u64 {
        self.reads.lock().get(child).copied().unwrap_or(0)
    }

    /// How many reads of any id started so far.
    pub fn total_reads(&self) -> u64 {
        self.reads.lock().values().sum()
    }

    /// How many reads materialized a whole log (`inspect`, `read_from`, `load`).
    pub fn materialized_reads(&self) -> u64 {
        self.materialized.load(Ordering::SeqCst)
    }

    /// How many listings (`list_snapshots`, `list_children`) started so far.
    pub fn lists(&self) -> u64 {
        self.lists.load(Ordering::SeqCst)
    }

    /// How many batches of reads went whole to the real persistence's read lanes.
    pub fn batches(&self) -> u64 {
        self.batches.load(Ordering::SeqCst)
    }

    /// The most streamed reads that were in flight at once.
    pub fn max_in_flight(&self) -> usize {
        self.max_in_flight.load(Ordering::SeqCst)
    }

    /// What later listings do.
    pub fn set_list_fault(&self, fault: ListFault) {
        *self.list_fault.lock() = fault;
    }

    /// What later reads of `child` do (`None`: read normally).
    pub fn set_read_fault(&self, child: &str, fault: Option<ReadFault>) {
        let mut faults = self.read_faults.lock();
        match fault {
            Some(fault) => faults.insert(id(child), fault),
            None => faults.remove(&id(child)),
        };
    }

    /// Holds every later streamed read at `gate` (`None`: hold nothing).
    pub fn set_gate(&self, gate: Option<Arc<Gate>>) {
        *self.gate.lock() = gate;
    }

    /// The token the latest read of `child` was given.
    pub fn token_of(&self, child: &str) -> Option<CancellationToken> {
        self.tokens.lock().get(&id(child)).cloned()
    }

    /// Waits until a read of `child` has started.
    pub async fn wait_entered(&self, child: &str) {
        loop {
            let notified = self.entered.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.entered_ids.lock().contains(&id(child)) {
                return;
            }
            notified.await;
        }
    }

    /// Waits until `list` has been called at least once.
    pub async fn wait_listed(&self) {
        loop {
            let notified = self.entered.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.lists() > 0 {
                return;
            }
            notified.await;
        }
    }

    /// A listing through the list fault: counted, then `list` (the real persistence's listing)
    /// unless the fault answers instead.
    async fn listed(
        &self,
        cancel: &CancellationToken,
        list: impl Future<Output = session_persistence::Result<Listing>>,
    ) -> session_persistence::Result<Listing> {
        self.lists.fetch_add(1, Ordering::SeqCst);
        self.entered.notify_waiters();
        let fault = self.list_fault.lock().clone();
        match fault {
            ListFault::None => list.await,
            ListFault::Fail(message) => Err(injected(message)),
            ListFault::CancelThenOk(token) => {
                token.cancel();
                list.await
            }
            ListFault::PendUntilCancelled => {
                cancel.cancelled().await;
                Err(PersistenceError::Cancelled)
            }
        }
    }

    fn count_read(&self, child: &SessionId, cancel: &CancellationToken) {
        *self.reads.lock().entry(child.clone()).or_default() += 1;
        self.tokens.lock().insert(child.clone(), cancel.clone());
        self.entered_ids.lock().insert(child.clone());
        self.entered.notify_waiters();
    }
}

struct InFlight<'a>(&'a Counting);

impl<'a> InFlight<'a> {
    fn enter(counting: &'a Counting) -> InFlight<'a> {
        let now = counting.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        counting.max_in_flight.fetch_max(now, Ordering::SeqCst);
        InFlight(counting)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

fn injected(message: &str) -> PersistenceError {
    PersistenceError::InvalidInput { message: message.to_owned() }
}

#[async_trait::async_trait]
impl SessionPersistence for Counting {
    async fn create(&self, header: SessionHeader, cancel: &CancellationToken) -> session_persistence::Result<()> {
        self.inner.create(header, cancel).await
    }

    async fn append(
        &self,
        id: &SessionId,
        events: Vec<Arc<SessionEvent>>,
        cancel: &CancellationToken,
    ) -> session_persistence::Result<()> {
        self.inner.append(id, events, cancel).await
    }

    async fn list_snapshots(&self, cancel: &CancellationToken) -> session_persistence::Result<Listing> {
        self.listed(cancel, self.inner.list_snapshots(cancel)).await
    }

    /// Counted and failed as a listing, and answered by the real persistence's own query (over
    /// PostgreSQL, `PgStore::list_children`'s SQL).
    async fn list_children(
        &self,
        parent: &SessionId,
        cancel: &CancellationToken,
    ) -> session_persistence::Result<Listing> {
        self.listed(cancel, self.inner.list_children(parent, cancel)).await
    }

    async fn list_page(
        &self,
        request: &PageRequest,
        cancel: &CancellationToken,
    ) -> session_persistence::Result<HeaderPage> {
        self.inner.list_page(request, cancel).await
    }

    async fn stored_header(
        &self,
        id: &SessionId,
        cancel: &CancellationToken,
    ) -> session_persistence::Result<Option<StoredHeader>> {
        self.inner.stored_header(id, cancel).await
    }

    fn durable_len(&self, id: &SessionId) -> Option<u64> {
        self.inner.durable_len(id)
    }

    fn fence(&self, id: &SessionId) -> Option<String> {
        self.inner.fence(id)
    }

    async fn fence_if_overtaken(
        &self,
        id: &SessionId,
        cancel: &CancellationToken,
    ) -> session_persistence::Result<bool> {
        self.inner.fence_if_overtaken(id, cancel).await
    }

    async fn inspect(&self, id: &SessionId, cancel: &CancellationToken) -> session_persistence::Result<Inspection> {
        self.count_read(id, cancel);
        self.materialized.fetch_add(1, Ordering::SeqCst);
        self.inner.inspect(id, cancel).await
    }

    async fn inspect_stream(
        &self,
        id: &SessionId,
        cancel: &CancellationToken,
        sink: Box<dyn StreamSink>,
    ) -> session_persistence::Result<StreamSummary> {
        self.count_read(id, cancel);
        let _in_flight = InFlight::enter(self);
        let gate = self.gate.lock().clone();
        if let Some(gate) = gate {
            gate.hold(id).await;
        }
        let fault = self.read_faults.lock().get(id).cloned();
        match fault {
            None => self.inner.inspect_stream(id, cancel, sink).await,
            Some(ReadFault::Fail) => Err(injected("injected read failure")),
            Some(ReadFault::PendUntilCancelled) => {
                cancel.cancelled().await;
                Err(PersistenceError::Cancelled)
            }
            Some(ReadFault::CancelAfterOk(token)) => {
                let read = self.inner.inspect_stream(id, cancel, sink).await;
                token.cancel();
                read
            }
            Some(ReadFault::CancelThenFail(token)) => {
                token.cancel();
                Err(injected("injected read failure"))
            }
            Some(ReadFault::Tamper(tamper)) => {
                let mut summary = self.inner.inspect_stream(id, cancel, sink).await?;
                let mut header = (*summary.header).clone();
                tamper(&mut header);
                summary.header = Arc::new(header);
                Ok(summary)
            }
        }
    }

    /// Reads one by one through `inspect_stream` (and its gate and faults) when a gate or a fault
    /// is set; otherwise hands the batch to the real persistence, so its read lanes are tested.
    async fn inspect_streams(
        &self,
        reads: Vec<(SessionId, Box<dyn StreamSink>)>,
        lanes: usize,
        cancel: &CancellationToken,
    ) -> Vec<session_persistence::Result<StreamSummary>> {
        if self.gate.lock().is_some() || !self.read_faults.lock().is_empty() {
            return session_persistence::stream_each(self, reads, lanes, cancel).await;
        }
        self.batches.fetch_add(1, Ordering::SeqCst);
        for (id, _) in &reads {
            self.count_read(id, cancel);
        }
        self.inner.inspect_streams(reads, lanes, cancel).await
    }

    async fn read_from(
        &self,
        id: &SessionId,
        from_seq: u64,
        cancel: &CancellationToken,
    ) -> session_persistence::Result<Inspection> {
        self.count_read(id, cancel);
        self.materialized.fetch_add(1, Ordering::SeqCst);
        self.inner.read_from(id, from_seq, cancel).await
    }

    async fn read_from_many(
        &self,
        reads: &[(SessionId, u64)],
        limit: session_persistence::ReadLimit,
        cancel: &CancellationToken,
    ) -> Vec<session_persistence::Result<session_persistence::Suffix>> {
        for (id, _) in reads {
            self.count_read(id, cancel);
        }
        self.materialized.fetch_add(reads.len() as u64, Ordering::SeqCst);
        self.inner.read_from_many(reads, limit, cancel).await
    }

    async fn load(&self, id: &SessionId, cancel: &CancellationToken) -> session_persistence::Result<Inspection> {
        self.count_read(id, cancel);
        self.materialized.fetch_add(1, Ordering::SeqCst);
        self.inner.load(id, cancel).await
    }

    async fn flush(&self, id: &SessionId, cancel: &CancellationToken) -> session_persistence::Result<()> {
        self.inner.flush(id, cancel).await
    }

    async fn release(&self, id: &SessionId, cancel: &CancellationToken) -> session_persistence::Result<()> {
        self.inner.release(id, cancel).await
    }

    fn locate(&self, header: &SessionHeader) -> Option<PathBuf> {
        self.inner.locate(header)
    }

    fn watch(
        &self,
        options: &session_persistence::WatchOptions,
        sink: session_persistence::SharedChangeSink,
    ) -> session_persistence::Result<Option<session_persistence::Watch>> {
        self.inner.watch(options, sink)
    }

    async fn positions(
        &self,
        ids: &[SessionId],
        cancel: &CancellationToken,
    ) -> session_persistence::Result<Vec<session_persistence::SessionPosition>> {
        self.inner.positions(ids, cancel).await
    }

    async fn created_since(
        &self,
        since_ms: u64,
        cancel: &CancellationToken,
    ) -> session_persistence::Result<session_persistence::Listing> {
        self.inner.created_since(since_ms, cancel).await
    }
}
