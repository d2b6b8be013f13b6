//! The coordinator's shared state: the backend, the per-id serialization and durable state
//! (`IdState`), the inspection cache and the fault log, with the primitives every concern uses
//! (the id lock, the cancellation check, a whole validated cold read).
//!
//! The concern modules (`ids`, `live`, `reads`, `listing`) import this one and add their own
//! behaviour; it imports none of them.

use std::{collections::HashMap, sync::Arc, sync::Weak};

use parking_lot::Mutex;
use session_core::{Session, SessionEvent, SessionHeader, SessionId};
use session_storage_io::keyed::{KeyedGuard, KeyedLocks};
use tokio_util::sync::CancellationToken;

use super::{cache::InspectCache, config::CoordinatorConfig, faults::FaultLog};
use crate::{
    backend::{Backend, ScanOutcome, ScanSink},
    error::{PersistenceError, Result},
    validate::scan_validated,
};

/// A backend call's hop to the blocking pool, under the name the call sites use.
pub(super) use session_storage_io::keyed::run_blocking_with as blocking;

/// Runs a write (`work`) as a task of its own and waits for it. A caller that stops waiting (a
/// cancelled request dropping its flush or append) does not stop the write half way: a batch
/// taken from a live session's buffer is always either recorded as stored or put back, and the
/// id's state always says where its log ends, so the next write starts there. (A backend's write
/// runs on after a dropped caller anyway, on the blocking pool or the store's own runtime; what
/// the caller's future held was the record of it.) A panic in `work` is the caller's.
pub(super) async fn to_the_end<T: Send + 'static>(
    work: impl std::future::Future<Output = Result<T>> + Send + 'static,
) -> Result<T> {
    // A runtime that shut down under the task is `Cancelled`.
    session_storage_io::keyed::joined(tokio::spawn(work)).await?
}

/// Durable state the coordinator tracks for one id.
#[derive(Debug, Clone)]
pub(super) struct IdState {
    pub(super) header: Arc<SessionHeader>,
    /// The next seq storage expects.
    pub(super) cursor: u64,
    /// Whether the log exists in storage.
    pub(super) materialized: bool,
    /// The live session that writes this log, if any.
    pub(super) owner: Option<Weak<Session>>,
    /// The stored log moved on without this writer: an append was refused as stale, and what is
    /// stored from the cursor on is not what it sent, or a live copy's binding found a stored log
    /// that its own does not extend (another process or host wrote or created the session, the
    /// writer fence). A live writer is fenced only then.
    pub(super) stale: bool,
}

impl IdState {
    /// The state of a log this coordinator has not written to yet, or has just read whole.
    pub(super) fn unowned(header: Arc<SessionHeader>, cursor: u64, materialized: bool) -> IdState {
        IdState { header, cursor, materialized, owner: None, stale: false }
    }

    pub(super) fn owner(&self) -> Option<Arc<Session>> {
        self.owner.as_ref().and_then(Weak::upgrade)
    }

    /// Whether `session` is the live session that writes this log.
    pub(super) fn is_owned_by(&self, session: &Arc<Session>) -> bool {
        self.owner().is_some_and(|owner| Arc::ptr_eq(&owner, session))
    }
}

/// What every concern of the coordinator shares.
pub(super) struct Inner {
    pub(super) backend: Arc<dyn Backend>,
    pub(super) config: CoordinatorConfig,
    locks: KeyedLocks,
    pub(super) states: Mutex<HashMap<SessionId, IdState>>,
    pub(super) cache: Mutex<InspectCache>,
    pub(super) faults: FaultLog,
}

/// A scan's collected output, validated and with its closers.
pub(super) struct ColdLog {
    pub(super) outcome: ScanOutcome,
    pub(super) events: Vec<Arc<SessionEvent>>,
    pub(super) closers: Vec<SessionEvent>,
}

#[derive(Default)]
struct ArcCollect {
    events: Vec<Arc<SessionEvent>>,
}

impl ScanSink for ArcCollect {
    fn event(&mut self, event: Arc<SessionEvent>) -> Result<()> {
        self.events.push(event);
        Ok(())
    }

    fn restart(&mut self) -> bool {
        self.events.clear();
        true
    }
}

pub(super) fn check_cancel(cancel: &CancellationToken) -> Result<()> {
    if cancel.is_cancelled() { Err(PersistenceError::Cancelled) } else { Ok(()) }
}

impl Inner {
    /// Nothing cached and no session tracked yet: the first call for an id reads its state from
    /// the backend.
    pub(super) fn new(backend: Arc<dyn Backend>, config: CoordinatorConfig) -> Inner {
        let cache = InspectCache::new(config.inspect_cache_entries, config.inspect_cache_bytes);
        Inner {
            backend,
            config,
            locks: KeyedLocks::new(),
            states: Mutex::new(HashMap::new()),
            cache: Mutex::new(cache),
            faults: FaultLog::default(),
        }
    }

    /// Serializes storage work on `id`. The lock's entry lives only while someone holds or
    /// awaits it, so the registry does not grow with the number of ids ever touched.
    pub(super) async fn lock_id(&self, id: &SessionId) -> KeyedGuard<'_> {
        self.locks.lock(id).await
    }

    /// [`lock_id`](Self::lock_id) for a blocking thread (never an async context: it would block
    /// the runtime).
    pub(super) fn lock_id_blocking(&self, id: &SessionId) -> KeyedGuard<'_> {
        self.locks.lock_blocking(id)
    }

    /// How many ids currently have a storage lock entry (held or awaited).
    pub(super) fn n_locked_ids(&self) -> usize {
        self.locks.len()
    }

    /// The live session that owns `id`'s durable state, if any.
    pub(super) fn owner_of(&self, id: &SessionId) -> Option<Arc<Session>> {
        self.states.lock().get(id).and_then(IdState::owner)
    }

    /// Reads and validates the whole stored log of `id` into memory.
    pub(super) async fn read_cold(&self, id: &SessionId, cancel: &CancellationToken) -> Result<Option<ColdLog>> {
        let id = id.clone();
        let known = self.config.known_types.clone();
        let threads = self.config.read_threads;
        let cancel = cancel.clone();
        blocking(&self.backend, move |backend| {
            let mut collect = ArcCollect::default();
            let Some((outcome, closers)) = scan_validated(backend, &id, 0, &known, threads, &cancel, &mut collect)?
            else {
                return Ok(None);
            };
            Ok(Some(ColdLog { outcome, events: collect.events, closers }))
        })
        .await
    }
}
