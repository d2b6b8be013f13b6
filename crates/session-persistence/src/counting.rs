//! `CountingBackend`: a backend wrapper that counts log reads and writes and can inject write
//! failures, for proving a cost model (a listing reads each cold log once) and for fault tests.

use std::{
    path::PathBuf,
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering},
    },
};

use session_core::{SessionEvent, SessionHeader, SessionId};
use tokio_util::sync::CancellationToken;

use crate::{
    backend::{
        AppendFuture, Backend, CollectSink, HeaderPage, Listing, PageRequest, PrefetchedLog, Revision, ScanOutcome,
        ScanSink, StoredHeader, SurveyEntry, TornTail,
    },
    error::{PersistenceError, Result},
};

/// Wraps a backend, forwarding every call, and counts scans (log reads) and appended batches.
/// [`CountingBackend::fail_appends`] makes appends fail with an I/O error until turned off;
/// [`CountingBackend::lose_next_reply`] lets the next append commit and then reports it failed,
/// as a lost reply from a database server does; [`CountingBackend::hold_appends`] keeps appends
/// waiting until released, as a slow write does, and [`CountingBackend::hold_lease_ends`] the
/// ends of writer leases.
#[derive(Debug)]
pub struct CountingBackend {
    inner: Arc<dyn Backend>,
    scans: AtomicU64,
    appends: AtomicU64,
    /// The count of `appends`, for waiting on it.
    appended: tokio::sync::watch::Sender<u64>,
    fail_appends: AtomicBool,
    /// How many appends failed by injection so far, for waiting on it.
    failed: tokio::sync::watch::Sender<u64>,
    lose_next_reply: AtomicBool,
    panic_next_append: AtomicBool,
    prefetches: AtomicU64,
    /// When not 0, reads ahead in runs of this many by scanning each log
    /// ([`CountingBackend::read_ahead_by_scans`]).
    read_ahead: AtomicUsize,
    /// Whether appends wait before they write ([`CountingBackend::hold_appends`]).
    appends_hold: Hold,
    /// Whether lease ends wait ([`CountingBackend::hold_lease_ends`]).
    lease_ends_hold: Hold,
}

/// A gate calls wait at while it is closed, on their blocking threads, counting those that did.
#[derive(Debug)]
struct Hold {
    closed: parking_lot::Mutex<bool>,
    opened: parking_lot::Condvar,
    /// How many calls have waited at it so far, for waiting on it.
    waited: tokio::sync::watch::Sender<u64>,
}

impl Hold {
    fn new() -> Hold {
        Hold {
            closed: parking_lot::Mutex::new(false),
            opened: parking_lot::Condvar::new(),
            waited: tokio::sync::watch::Sender::new(0),
        }
    }

    fn set(&self, closed: bool) {
        *self.closed.lock() = closed;
        self.opened.notify_all();
    }

    fn is_closed(&self) -> bool {
        *self.closed.lock()
    }

    /// Waits while the gate is closed.
    fn pass(&self) {
        let mut closed = self.closed.lock();
        if !*closed {
            return;
        }
        self.waited.send_modify(|waited| *waited += 1);
        while *closed {
            self.opened.wait(&mut closed);
        }
    }

    /// Waits until at least `n` calls have waited at the gate.
    async fn wait_for_waited(&self, n: u64) {
        let mut waited = self.waited.subscribe();
        // The sender lives in `self`, so the channel cannot close while this waits.
        let _ = waited.wait_for(|count| *count >= n).await;
    }
}

impl CountingBackend {
    /// The failure an append meets while failures are injected.
    fn injected_failure(&self, header: &SessionHeader) -> Option<PersistenceError> {
        if !self.fail_appends.load(Ordering::SeqCst) {
            return None;
        }
        self.failed.send_modify(|failed| *failed += 1);
        let path = self.inner.locate(header).unwrap_or_else(|| PathBuf::from(self.inner.name()));
        Some(PersistenceError::io(path, std::io::Error::other("injected write failure")))
    }

    /// Counts an append the inner backend stored, and loses its reply if asked to.
    fn appended(&self, header: &SessionHeader) -> Result<()> {
        let count = self.appends.fetch_add(1, Ordering::SeqCst) + 1;
        self.appended.send_modify(|appended| *appended = (*appended).max(count));
        if self.lose_next_reply.swap(false, Ordering::SeqCst) {
            let path = self.inner.locate(header).unwrap_or_else(|| PathBuf::from(self.inner.name()));
            let lost = std::io::Error::new(
                std::io::ErrorKind::ConnectionAborted,
                "injected lost reply (the append committed)",
            );
            return Err(PersistenceError::io(path, lost));
        }
        Ok(())
    }

    /// Wraps `inner` with both counters at zero and appends not failing.
    pub fn new(inner: Arc<dyn Backend>) -> CountingBackend {
        CountingBackend {
            inner,
            scans: AtomicU64::new(0),
            appends: AtomicU64::new(0),
            appended: tokio::sync::watch::Sender::new(0),
            fail_appends: AtomicBool::new(false),
            failed: tokio::sync::watch::Sender::new(0),
            lose_next_reply: AtomicBool::new(false),
            panic_next_append: AtomicBool::new(false),
            prefetches: AtomicU64::new(0),
            read_ahead: AtomicUsize::new(0),
            appends_hold: Hold::new(),
            lease_ends_hold: Hold::new(),
        }
    }

    /// While `hold` is set, every append waits before it writes (on its blocking thread: a
    /// backend's future is not used meanwhile), until this is called with `false`.
    pub fn hold_appends(&self, hold: bool) {
        self.appends_hold.set(hold);
    }

    /// Waits until at least `n` appends have reached the hold of [`CountingBackend::hold_appends`].
    pub async fn wait_for_held(&self, n: u64) {
        self.appends_hold.wait_for_waited(n).await;
    }

    /// While `hold` is set, every end of a writer lease waits before it ends the lease (on its
    /// blocking thread), until this is called with `false`.
    pub fn hold_lease_ends(&self, hold: bool) {
        self.lease_ends_hold.set(hold);
    }

    /// Waits until at least `n` lease ends have reached the hold of
    /// [`CountingBackend::hold_lease_ends`].
    pub async fn wait_for_held_lease_ends(&self, n: u64) {
        self.lease_ends_hold.wait_for_waited(n).await;
    }

    /// Read-aheads ([`Backend::prefetch`]) asked for so far.
    pub fn prefetches(&self) -> u64 {
        self.prefetches.load(Ordering::SeqCst)
    }

    /// One read ahead, counted: the inner backend's (`forward`), or, when reading ahead by scans,
    /// each of `reads` (each id once, at its first seq) by its own counted seek.
    fn counted_read_ahead(
        &self,
        reads: &[(SessionId, u64)],
        cancel: &CancellationToken,
        forward: impl FnOnce(&dyn Backend) -> Result<Vec<(SessionId, PrefetchedLog)>>,
    ) -> Result<Vec<(SessionId, PrefetchedLog)>> {
        self.prefetches.fetch_add(1, Ordering::SeqCst);
        if self.read_ahead.load(Ordering::SeqCst) == 0 {
            let logs = forward(self.inner.as_ref())?;
            self.scans.fetch_add(logs.len() as u64, Ordering::SeqCst);
            return Ok(logs);
        }
        let mut seen = std::collections::HashSet::new();
        let mut logs = Vec::new();
        for (id, from_seq) in reads.iter().filter(|(id, _)| seen.insert(id.clone())) {
            let mut collect = CollectSink::default();
            if let Ok(Some(outcome)) = self.scan_from(id, *from_seq, cancel, &mut collect)
                && outcome.torn.is_none()
            {
                let events = collect.events.into_iter().filter(|event| event.seq >= *from_seq).map(Arc::new).collect();
                logs.push((id.clone(), PrefetchedLog { outcome, events }));
            }
        }
        Ok(logs)
    }

    /// Makes this backend read ahead in runs of `batch` logs (0: as the inner backend does), each
    /// log by its own counted scan: a stand-in for a backend that reads many logs in one round
    /// trip, for testing the callers of [`Backend::prefetch`].
    pub fn read_ahead_by_scans(&self, batch: usize) {
        self.read_ahead.store(batch, Ordering::SeqCst);
    }

    /// Scans started so far: every cold read of a log, whole or from a seq, whatever its outcome.
    pub fn scans(&self) -> u64 {
        self.scans.load(Ordering::SeqCst)
    }

    /// Batches appended so far (failed ones excluded).
    pub fn appends(&self) -> u64 {
        self.appends.load(Ordering::SeqCst)
    }

    /// Waits until at least `n` batches were appended: a test waits on the append itself (a
    /// write-behind window closing on its own) instead of polling [`CountingBackend::appends`].
    pub async fn wait_for_appends(&self, n: u64) {
        let mut appended = self.appended.subscribe();
        // The sender lives in `self`, so the channel cannot close while this waits.
        let _ = appended.wait_for(|count| *count >= n).await;
    }

    /// Waits until at least `n` appends failed by injection ([`CountingBackend::fail_appends`]):
    /// a test waits on a write-behind window's failed write instead of polling.
    pub async fn wait_for_failed_appends(&self, n: u64) {
        let mut failed = self.failed.subscribe();
        // The sender lives in `self`, so the channel cannot close while this waits.
        let _ = failed.wait_for(|count| *count >= n).await;
    }

    /// While `fail` is set, every append fails with an I/O error and writes nothing.
    pub fn fail_appends(&self, fail: bool) {
        self.fail_appends.store(fail, Ordering::SeqCst);
    }

    /// The next append commits, then fails with a `ConnectionAborted` I/O error: the caller cannot
    /// tell it committed, as when a server's reply to a commit is lost.
    pub fn lose_next_reply(&self) {
        self.lose_next_reply.store(true, Ordering::SeqCst);
    }

    /// Makes the next append panic before it writes anything, as a backend with a bug might.
    pub fn panic_next_append(&self) {
        self.panic_next_append.store(true, Ordering::SeqCst);
    }
}

impl Backend for CountingBackend {
    fn name(&self) -> &'static str {
        self.inner.name()
    }

    fn scan(&self, id: &SessionId, cancel: &CancellationToken, sink: &mut dyn ScanSink) -> Result<Option<ScanOutcome>> {
        self.scans.fetch_add(1, Ordering::SeqCst);
        self.inner.scan(id, cancel, sink)
    }

    fn scan_from(
        &self,
        id: &SessionId,
        from_seq: u64,
        cancel: &CancellationToken,
        sink: &mut dyn ScanSink,
    ) -> Result<Option<ScanOutcome>> {
        self.scans.fetch_add(1, Ordering::SeqCst);
        self.inner.scan_from(id, from_seq, cancel, sink)
    }

    fn header(&self, id: &SessionId, cancel: &CancellationToken) -> Result<Option<StoredHeader>> {
        self.inner.header(id, cancel)
    }

    fn prefetch_batch(&self) -> usize {
        match self.read_ahead.load(Ordering::SeqCst) {
            0 => self.inner.prefetch_batch(),
            batch => batch,
        }
    }

    /// Counts one prefetch, and each log it read as a scan.
    fn prefetch(&self, ids: &[SessionId], cancel: &CancellationToken) -> Result<Vec<(SessionId, PrefetchedLog)>> {
        let reads: Vec<(SessionId, u64)> = ids.iter().map(|id| (id.clone(), 0)).collect();
        self.counted_read_ahead(&reads, cancel, |inner| inner.prefetch(ids, cancel))
    }

    /// Counts one prefetch, and each tail it read as a scan.
    fn prefetch_tails(
        &self,
        reads: &[(SessionId, u64)],
        cancel: &CancellationToken,
    ) -> Result<Vec<(SessionId, PrefetchedLog)>> {
        self.counted_read_ahead(reads, cancel, |inner| inner.prefetch_tails(reads, cancel))
    }

    fn revision(&self, id: &SessionId) -> Result<Option<Revision>> {
        self.inner.revision(id)
    }

    fn append_batch(&self, header: &SessionHeader, events: &[Arc<SessionEvent>], materialized: bool) -> Result<()> {
        self.appends_hold.pass();
        // A fault injection for tests: the panic is the point.
        if self.panic_next_append.swap(false, Ordering::SeqCst) {
            panic!("injected panic in an append of session {}", header.id);
        }
        if let Some(failure) = self.injected_failure(header) {
            return Err(failure);
        }
        self.inner.append_batch(header, events, materialized)?;
        self.appended(header)
    }

    /// The inner backend's future, counted and with the same injected failures as
    /// [`append_batch`](Backend::append_batch); `None` where the inner backend has none, and while
    /// appends are held.
    fn append_batch_async(
        self: Arc<Self>,
        header: &Arc<SessionHeader>,
        events: &[Arc<SessionEvent>],
        materialized: bool,
    ) -> Option<AppendFuture> {
        if self.appends_hold.is_closed() || self.panic_next_append.load(Ordering::SeqCst) {
            return None;
        }
        if let Some(failure) = self.injected_failure(header) {
            return Some(Box::pin(std::future::ready(Err(failure))));
        }
        let write = Arc::clone(&self.inner).append_batch_async(header, events, materialized)?;
        let header = Arc::clone(header);
        Some(Box::pin(async move {
            write.await?;
            self.appended(&header)
        }))
    }

    fn commit_repair(&self, header: &SessionHeader, torn: Option<&TornTail>, closers: &[SessionEvent]) -> Result<()> {
        self.inner.commit_repair(header, torn, closers)
    }

    fn lease(&self, id: &SessionId) -> Result<()> {
        self.inner.lease(id)
    }

    fn end_lease(&self, id: &SessionId) {
        self.lease_ends_hold.pass();
        self.inner.end_lease(id)
    }

    fn list(&self, cancel: &CancellationToken) -> Result<Listing> {
        self.inner.list(cancel)
    }

    fn list_children(&self, parent: &SessionId, cancel: &CancellationToken) -> Result<Listing> {
        self.inner.list_children(parent, cancel)
    }

    fn list_page(&self, request: &PageRequest, cancel: &CancellationToken) -> Result<HeaderPage> {
        self.inner.list_page(request, cancel)
    }

    fn survey(&self, cancel: &CancellationToken) -> Result<Vec<SurveyEntry>> {
        self.inner.survey(cancel)
    }

    fn locate(&self, header: &SessionHeader) -> Option<PathBuf> {
        self.inner.locate(header)
    }
}
