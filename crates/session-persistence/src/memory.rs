//! `MemoryStore`: a backend that keeps logs in process memory, for tests and ephemeral hosts.

use std::{
    collections::BTreeMap,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
};

use parking_lot::Mutex;
use session_core::{SessionEvent, SessionHeader, SessionId};
use tokio_util::sync::CancellationToken;

use crate::{
    backend::{Backend, Listing, Revision, ScanOutcome, ScanSink, StoredHeader, TornTail},
    error::{FencedWrite, PersistenceError, Result},
};

/// Distinguishes stores so revisions never collide across them.
static NEXT_STORE: AtomicU64 = AtomicU64::new(1);

/// A [`Backend`] that keeps every log in process memory: appends are atomic and immediately
/// visible, and nothing survives the process (there is no torn tail to repair, ever). Revisions
/// name the store, so two stores in one process never share one. For tests, examples and hosts
/// that want a session log without durability.
#[derive(Debug)]
pub struct MemoryStore {
    store_no: u64,
    logs: Mutex<BTreeMap<SessionId, MemoryLog>>,
}

#[derive(Debug, Clone)]
struct MemoryLog {
    header: Arc<SessionHeader>,
    events: Vec<Arc<SessionEvent>>,
    /// Bumped by every mutation.
    generation: u64,
    n_bytes: u64,
}

impl MemoryLog {
    fn revision(&self, store_no: u64) -> Revision {
        Revision::new(format!("memory:{store_no}:{}:{}", self.header.id, self.generation))
    }
}

impl Default for MemoryStore {
    fn default() -> MemoryStore {
        MemoryStore::new()
    }
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> MemoryStore {
        MemoryStore { store_no: NEXT_STORE.fetch_add(1, Ordering::Relaxed), logs: Mutex::new(BTreeMap::new()) }
    }
}

fn event_bytes(event: &SessionEvent) -> u64 {
    event.data.as_str().len() as u64 + event.kind.len() as u64 + 32
}

impl Backend for MemoryStore {
    fn name(&self) -> &'static str {
        "memory"
    }

    fn scan(&self, id: &SessionId, cancel: &CancellationToken, sink: &mut dyn ScanSink) -> Result<Option<ScanOutcome>> {
        // Copy out under the lock, then stream without holding it.
        let Some(log) = self.logs.lock().get(id).cloned() else {
            return Ok(None);
        };
        sink.header(&log.header)?;
        for (idx, event) in log.events.iter().enumerate() {
            if idx % 4096 == 0 && cancel.is_cancelled() {
                return Err(PersistenceError::Cancelled);
            }
            sink.event(Arc::clone(event))?;
        }
        Ok(Some(ScanOutcome {
            revision: log.revision(self.store_no),
            header: log.header,
            n_events: log.events.len() as u64,
            torn: None,
            n_bytes: log.n_bytes,
        }))
    }

    fn revision(&self, id: &SessionId) -> Result<Option<Revision>> {
        Ok(self.logs.lock().get(id).map(|log| log.revision(self.store_no)))
    }

    fn header(&self, id: &SessionId, cancel: &CancellationToken) -> Result<Option<StoredHeader>> {
        if cancel.is_cancelled() {
            return Err(PersistenceError::Cancelled);
        }
        Ok(self.logs.lock().get(id).map(|log| StoredHeader {
            header: Arc::clone(&log.header),
            revision: log.revision(self.store_no),
            n_bytes: Some(log.n_bytes),
        }))
    }

    fn append_batch(&self, header: &SessionHeader, events: &[Arc<SessionEvent>], materialized: bool) -> Result<()> {
        // The bounds the JSONL store's reader imposes hold here too, so the two backends accept
        // the same logs.
        header.check_sizes()?;
        for event in events {
            event.check_size()?;
        }
        let mut logs = self.logs.lock();
        let n_bytes: u64 = events.iter().map(|event| event_bytes(event)).sum();
        match logs.get_mut(&header.id) {
            Some(log) => {
                if !materialized {
                    // Another writer created the log after this one found the id free.
                    let first = events.first().map_or(0, |event| event.seq);
                    return Err(PersistenceError::fenced(
                        &header.id,
                        FencedWrite::Append,
                        first,
                        log.events.len() as u64,
                    ));
                }
                log.events.extend(events.iter().cloned());
                log.generation += 1;
                log.n_bytes += n_bytes;
            }
            None => {
                logs.insert(
                    header.id.clone(),
                    MemoryLog { header: Arc::new(header.clone()), events: events.to_vec(), generation: 1, n_bytes },
                );
            }
        }
        Ok(())
    }

    fn commit_repair(&self, header: &SessionHeader, torn: Option<&TornTail>, closers: &[SessionEvent]) -> Result<()> {
        // Memory logs are never torn; a repair only appends closers.
        debug_assert!(torn.is_none(), "memory logs have no torn tail");
        let closers: Vec<Arc<SessionEvent>> = closers.iter().cloned().map(Arc::new).collect();
        if closers.is_empty() {
            return Ok(());
        }
        self.append_batch(header, &closers, true)
    }

    fn list(&self, cancel: &CancellationToken) -> Result<Listing> {
        if cancel.is_cancelled() {
            return Err(PersistenceError::Cancelled);
        }
        let mut listing = Listing::of(
            self.logs
                .lock()
                .values()
                .map(|log| StoredHeader {
                    header: log.header.clone(),
                    revision: log.revision(self.store_no),
                    n_bytes: Some(log.n_bytes),
                })
                .collect(),
        );
        listing.sort();
        Ok(listing)
    }
}
