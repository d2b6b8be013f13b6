//! A custom storage backend, `BTreeStore`, proven correct by the backend test kit
//! (`persistence-testkit`): every log behind one `RwLock<BTreeMap>`, a count of the writes it
//! took, and a suffix read that seeks instead of scanning the whole log.
//!
//! A backend implements the narrow, synchronous `session_persistence::Backend` trait; a
//! `Coordinator` over it gives everything else (per-id serialization, validation, crash closers,
//! the inspection cache, the live write-behind path). `main` uses the store as a host would, then
//! runs three cases of the persistence contract on it; `cargo test -p examples --example
//! custom_backend` runs the whole persistence and coordinator contracts, as a backend's own tests
//! should.
//!
//! Run with `cargo run -p examples --example custom_backend`.

use std::{
    collections::BTreeMap,
    sync::{
        Arc, PoisonError, RwLock,
        atomic::{AtomicU64, Ordering},
    },
};

use serde_json::json;
use session_core::{SessionEvent, SessionHeader, SessionId};
use session_persistence::{
    Backend, Coordinator, CoordinatorConfig, FencedWrite, Listing, PersistenceError, Result, Revision, ScanOutcome,
    ScanSink, SessionPersistence, StoredHeader, TornTail,
};
use tokio_util::sync::CancellationToken;

/// Distinguishes stores, so that no two stores ever hand out the same revision.
static NEXT_STORE: AtomicU64 = AtomicU64::new(1);

/// Session logs in process memory, each behind one shared `RwLock`: reads share the lock, and
/// a write takes it only to push the events. Counts the writes it took (appended batches and
/// repairs), which is what a host would export as a metric.
#[derive(Debug)]
pub struct BTreeStore {
    store_no: u64,
    logs: RwLock<BTreeMap<SessionId, Log>>,
    writes: AtomicU64,
}

/// One stored log.
#[derive(Debug, Clone)]
struct Log {
    header: Arc<SessionHeader>,
    events: Vec<Arc<SessionEvent>>,
    /// Bumped by every write, so that a revision names exactly one stored state.
    generation: u64,
}

impl Default for BTreeStore {
    fn default() -> BTreeStore {
        BTreeStore::new()
    }
}

impl BTreeStore {
    /// An empty store.
    pub fn new() -> BTreeStore {
        BTreeStore {
            store_no: NEXT_STORE.fetch_add(1, Ordering::Relaxed),
            logs: RwLock::new(BTreeMap::new()),
            writes: AtomicU64::new(0),
        }
    }

    /// Writes taken so far: appended batches and committed repairs.
    pub fn writes(&self) -> u64 {
        self.writes.load(Ordering::SeqCst)
    }

    fn revision(&self, log: &Log) -> Revision {
        Revision::new(format!("btree:{}:{}:{}", self.store_no, log.header.id, log.generation))
    }

    /// A copy of one log, taken under the read lock (the events are shared, not copied), so that
    /// a scan streams without holding the lock.
    fn log(&self, id: &SessionId) -> Option<Log> {
        self.logs.read().unwrap_or_else(PoisonError::into_inner).get(id).cloned()
    }

    /// Streams `log`'s header and its events from `from_seq` on.
    fn stream(
        &self,
        log: Log,
        from_seq: u64,
        cancel: &CancellationToken,
        sink: &mut dyn ScanSink,
    ) -> Result<Option<ScanOutcome>> {
        sink.header(&log.header)?;
        let start = usize::try_from(from_seq).unwrap_or(usize::MAX).min(log.events.len());
        let mut n_bytes = 0;
        for (idx, event) in log.events[start..].iter().enumerate() {
            // Check the token between units of work, not on every event.
            if idx % 1024 == 0 && cancel.is_cancelled() {
                return Err(PersistenceError::Cancelled);
            }
            n_bytes += event.encoded_len() as u64;
            sink.event(Arc::clone(event))?;
        }
        Ok(Some(ScanOutcome {
            revision: self.revision(&log),
            n_events: (log.events.len() - start) as u64,
            header: log.header,
            // Memory is never torn: a write lands whole or not at all.
            torn: None,
            n_bytes,
        }))
    }
}

impl Backend for BTreeStore {
    fn name(&self) -> &'static str {
        "btree"
    }

    fn scan(&self, id: &SessionId, cancel: &CancellationToken, sink: &mut dyn ScanSink) -> Result<Option<ScanOutcome>> {
        match self.log(id) {
            Some(log) => self.stream(log, 0, cancel, sink),
            None => Ok(None),
        }
    }

    /// Seeks: a suffix read (`read_from`, a checkpoint's tail) costs the suffix only. An event's
    /// `seq` is its index, so the suffix starts at index `from_seq`.
    fn scan_from(
        &self,
        id: &SessionId,
        from_seq: u64,
        cancel: &CancellationToken,
        sink: &mut dyn ScanSink,
    ) -> Result<Option<ScanOutcome>> {
        match self.log(id) {
            Some(log) => self.stream(log, from_seq, cancel, sink),
            None => Ok(None),
        }
    }

    fn revision(&self, id: &SessionId) -> Result<Option<Revision>> {
        Ok(self.log(id).map(|log| self.revision(&log)))
    }

    /// Reads the header alone (the default would start a scan).
    fn header(&self, id: &SessionId, cancel: &CancellationToken) -> Result<Option<StoredHeader>> {
        if cancel.is_cancelled() {
            return Err(PersistenceError::Cancelled);
        }
        Ok(self.log(id).map(|log| StoredHeader { revision: self.revision(&log), header: log.header, n_bytes: None }))
    }

    fn append_batch(&self, header: &SessionHeader, events: &[Arc<SessionEvent>], materialized: bool) -> Result<()> {
        // The size bounds every backend enforces, so that what one accepts another can read.
        header.check_sizes()?;
        for event in events {
            event.check_size()?;
        }
        let mut logs = self.logs.write().unwrap_or_else(PoisonError::into_inner);
        match logs.get_mut(&header.id) {
            // The coordinator says the log does not exist yet, but it does: another writer
            // created it meanwhile. Refuse with the writer fence, rather than append to a log of
            // another lifetime; the coordinator fences the live copy that sent it.
            Some(log) if !materialized => {
                let first = events.first().map_or(0, |event| event.seq);
                return Err(PersistenceError::fenced(&header.id, FencedWrite::Append, first, log.events.len() as u64));
            }
            Some(log) => {
                log.events.extend(events.iter().cloned());
                log.generation += 1;
            }
            None => {
                let log = Log { header: Arc::new(header.clone()), events: events.to_vec(), generation: 1 };
                logs.insert(header.id.clone(), log);
            }
        }
        self.writes.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }

    fn commit_repair(&self, header: &SessionHeader, torn: Option<&TornTail>, closers: &[SessionEvent]) -> Result<()> {
        // Nothing is ever torn here (`stream` reports no torn tail), so a repair only appends the
        // closers that balance the log's open turn.
        debug_assert!(torn.is_none(), "a BTreeStore log is never torn");
        if closers.is_empty() {
            return Ok(());
        }
        let closers: Vec<Arc<SessionEvent>> = closers.iter().cloned().map(Arc::new).collect();
        self.append_batch(header, &closers, true)
    }

    fn list(&self, cancel: &CancellationToken) -> Result<Listing> {
        if cancel.is_cancelled() {
            return Err(PersistenceError::Cancelled);
        }
        let logs = self.logs.read().unwrap_or_else(PoisonError::into_inner);
        // A BTreeMap iterates in id order, the order every listing reports.
        let headers = logs
            .values()
            .map(|log| StoredHeader { header: Arc::clone(&log.header), revision: self.revision(log), n_bytes: None })
            .collect();
        Ok(Listing::of(headers))
    }
}

/// The test kit's view of the store: a fresh, empty store per case. Memory has no bytes to
/// reopen, so opening the place again hands out the same store, as a process that kept it would.
struct Fresh(Arc<BTreeStore>);

impl Fresh {
    fn new() -> Fresh {
        Fresh(Arc::new(BTreeStore::new()))
    }
}

impl persistence_testkit::Place for Fresh {
    fn open(&self) -> Arc<dyn Backend> {
        self.0.clone()
    }
}

fn event(kind: &str, seq: u64, data: serde_json::Value) -> Arc<SessionEvent> {
    let event = json!({"type": kind, "seq": seq, "time": 1_000 + seq, "data": data});
    Arc::new(serde_json::from_value(event).expect("a well-formed event"))
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    // 1. The store as a host uses it: behind a coordinator, through `SessionPersistence`.
    let store = Arc::new(BTreeStore::new());
    let persistence = Coordinator::new(store.clone(), CoordinatorConfig::default())?;
    let cancel = CancellationToken::new();
    let id = SessionId::from("s-example");
    let mut header = SessionHeader::new(id.clone(), 1_772_442_000_000);
    header.cwd = Some("/work/example".to_owned());
    persistence.create(header, &cancel).await?;
    persistence.append(&id, vec![event("turn/start", 0, json!({"turn": 1}))], &cancel).await?;
    let ended = event("turn/end", 1, json!({"turn": 1, "reason": {"kind": "completed"}}));
    persistence.append(&id, vec![ended, event("turn/start", 2, json!({"turn": 2}))], &cancel).await?;
    println!("two appends took {} writes", store.writes());

    // Turn 2 is open, as if the process had died: a read closes it in memory and writes nothing,
    // a load commits the closer with one more write.
    let inspected = persistence.inspect(&id, &cancel).await?;
    println!(
        "inspect: {} events, {} closer(s) synthesized, {} writes",
        inspected.events.len(),
        inspected.n_closers,
        store.writes()
    );
    let loaded = persistence.load(&id, &cancel).await?;
    println!("load: {} events stored, {} writes (the repair)", loaded.events.len(), store.writes());
    let suffix = persistence.read_from(&id, 2, &cancel).await?;
    let kinds: Vec<&str> = suffix.events.iter().map(|event| event.kind.as_str()).collect();
    println!("read_from(2), served by the seeking scan_from: {kinds:?}");

    // 2. The store proven by the test kit. A backend's tests write one test per case
    // (`persistence_contract!(persistence, Fresh::new)`, see the tests below); here, three cases.
    // The kit runs each case on a runtime of its own, so it runs on a thread of its own here,
    // which hands the report back through a channel.
    let (done, report) = tokio::sync::oneshot::channel();
    std::thread::spawn(move || {
        let wanted =
            ["round_trip", "crash_recovery_of_an_open_step", "read_from_serves_stored_suffixes_without_closers"];
        let report = persistence_testkit::persistence_contract().only(|case| wanted.contains(&case)).run(Fresh::new);
        // The receiver is gone only if `main` already returned.
        let _ = done.send(report);
    });
    let report = report.await?;
    println!("{}: {} of {} cases passed", report.suite, report.passed(), report.cases.len());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::Fresh;

    persistence_testkit::persistence_contract!(persistence, Fresh::new);
    persistence_testkit::coordinator_contract!(coordinator, Fresh::new);
}
