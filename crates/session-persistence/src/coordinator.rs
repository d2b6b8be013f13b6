//! `Coordinator`: the one implementation of [`SessionPersistence`] over any [`Backend`].
//!
//! It owns everything that is not bytes: per-id serialization, validation of what is read,
//! crash repair, the inspection cache, and the live write path that makes a `SessionStore`'s
//! sessions durable with write-behind batching and a flush barrier.

use std::{
    collections::{HashMap, HashSet, VecDeque},
    fmt,
    panic::AssertUnwindSafe,
    path::PathBuf,
    sync::{
        Arc, Weak,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use parking_lot::Mutex;
use session_core::{
    KnownTypes, Session, SessionEvent, SessionHeader, SessionId, SessionStore, StoreEvent, StoreObserver,
};
use tokio_util::sync::CancellationToken;

use crate::{
    backend::{Backend, HeaderPage, Listing, LogFault, PageRequest, Revision, ScanOutcome, ScanSink, StoredHeader},
    error::{FencedWrite, PersistenceError, Result},
    // A backend call's hop to the blocking pool: the one helper, under the name the call sites use.
    keyed::{BlockingCancelled, KeyedGuard, KeyedLocks, run_blocking, run_blocking_with as blocking},
    live::LiveWriter,
    persistence::{Inspection, SessionPersistence, StreamSink, StreamSummary, Streamed},
    validate::{ReadThreads, scan_validated},
};

/// Tuning of a [`Coordinator`]. Validated by [`Coordinator::new`].
#[derive(Debug, Clone)]
pub struct CoordinatorConfig {
    /// How long the first buffered event of a live session may wait before its batch is written.
    pub write_batch_max_delay: Duration,
    /// How many inspected logs stay cached (at least 1).
    pub inspect_cache_entries: usize,
    /// How many bytes of payload the inspection cache may hold in all.
    pub inspect_cache_bytes: u64,
    /// The event types a read accepts without `ignorable: true`.
    pub known_types: KnownTypes,
    /// When a cold read may use helper threads.
    pub read_threads: ReadThreads,
}

impl Default for CoordinatorConfig {
    fn default() -> CoordinatorConfig {
        CoordinatorConfig {
            write_batch_max_delay: Duration::from_millis(200),
            inspect_cache_entries: 5,
            inspect_cache_bytes: 64 << 20,
            known_types: KnownTypes::default(),
            read_threads: ReadThreads::default(),
        }
    }
}

impl CoordinatorConfig {
    fn validate(&self) -> Result<()> {
        if self.inspect_cache_entries == 0 {
            return Err(PersistenceError::invalid_input("preparedSessionCacheSize must be a positive safe integer"));
        }
        let delay_ms = self.write_batch_max_delay.as_millis();
        if !(1..=2_147_483_647).contains(&delay_ms) {
            return Err(PersistenceError::invalid_input(
                "writeBatchMaxDelayMs must be an integer between 1 and 2147483647",
            ));
        }
        Ok(())
    }
}

/// Durable state the coordinator tracks for one id.
#[derive(Debug, Clone)]
struct IdState {
    header: Arc<SessionHeader>,
    /// The next seq storage expects.
    cursor: u64,
    /// Whether the log exists in storage.
    materialized: bool,
    /// The live session that writes this log, if any.
    owner: Option<Weak<Session>>,
    /// The stored log moved on without this writer: an append was refused as stale, and what is
    /// stored from the cursor on is not what it sent, or a live copy's binding found a stored log
    /// that its own does not extend (another process or host wrote or created the session, the
    /// writer fence). A live writer is fenced only then.
    stale: bool,
}

impl IdState {
    fn owner(&self) -> Option<Arc<Session>> {
        self.owner.as_ref().and_then(Weak::upgrade)
    }
}

/// Persists session logs through a [`Backend`]. Cheap to clone; clones share everything.
#[derive(Clone)]
pub struct Coordinator {
    inner: Arc<Inner>,
}

pub(crate) struct Inner {
    backend: Arc<dyn Backend>,
    pub(crate) config: CoordinatorConfig,
    locks: KeyedLocks,
    states: Mutex<HashMap<SessionId, IdState>>,
    live: Mutex<HashMap<SessionId, Arc<LiveWriter>>>,
    cache: Mutex<InspectCache>,
    /// The faults listings have already logged, so each is logged once, not on every listing.
    reported_faults: Mutex<HashSet<String>>,
    /// The fence of each fenced live session unbound by a retire nobody awaited (a store's detach
    /// retires in a task of its own), kept until a `release` of the id reports it or a new live
    /// session takes the id.
    unreported_fences: Mutex<HashMap<SessionId, PersistenceError>>,
}

/// How many distinct listing faults are remembered as logged; past it, the memory starts over
/// (and faults still present are logged again).
const MAX_REPORTED_FAULTS: usize = 4096;

impl fmt::Debug for Coordinator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Coordinator").field("backend", &self.inner.backend.name()).finish_non_exhaustive()
    }
}

impl Coordinator {
    /// A coordinator over `backend`, with nothing cached and no session tracked yet: the first
    /// call for an id reads its state from the backend.
    ///
    /// Fails with `InvalidInput` when `config` is out of range (an inspection cache of zero
    /// entries, or a write-behind delay outside 1 ms to 2^31 − 1 ms); nothing is read or written.
    pub fn new(backend: Arc<dyn Backend>, config: CoordinatorConfig) -> Result<Coordinator> {
        config.validate()?;
        let cache = InspectCache::new(config.inspect_cache_entries, config.inspect_cache_bytes);
        Ok(Coordinator {
            inner: Arc::new(Inner {
                backend,
                config,
                locks: KeyedLocks::new(),
                states: Mutex::new(HashMap::new()),
                live: Mutex::new(HashMap::new()),
                cache: Mutex::new(cache),
                reported_faults: Mutex::default(),
                unreported_fences: Mutex::default(),
            }),
        })
    }

    /// The backend this coordinator drives. Calling it directly bypasses the per-id
    /// serialization, validation and repair the coordinator adds; tests and operator tools use it
    /// to look at stored state.
    pub fn backend(&self) -> &Arc<dyn Backend> {
        &self.inner.backend
    }

    /// Makes every session of `store` durable: sessions already live are adopted now, later ones
    /// when they are published. Events are written behind, in batches, and `store.flush(id)` or
    /// [`SessionPersistence::flush`] waits for them.
    ///
    /// Must be called inside a Tokio runtime: the write-behind timers run on it.
    ///
    /// The store's sessions accept the event types this coordinator's reads accept
    /// ([`CoordinatorConfig::known_types`]): `attach` gives them to the store, for the sessions it
    /// creates from then on, so a host registers its own types once. It fails with
    /// `InvalidInput`, attaching nothing, when the store already accepts a type these reads would
    /// refuse.
    pub fn attach(&self, store: &Arc<SessionStore>) -> Result<()> {
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| {
            PersistenceError::invalid_input("Coordinator::attach must be called inside a Tokio runtime")
        })?;
        let known = &self.inner.config.known_types;
        let mut unreadable = store.known_types().missing_from(known);
        for session in store.list() {
            unreadable.extend(session.known_types().missing_from(known));
        }
        if !unreadable.is_empty() {
            unreadable.sort();
            unreadable.dedup();
            return Err(PersistenceError::invalid_input(format!(
                "the session store accepts event types this coordinator's reads refuse: {}; add them to CoordinatorConfig::known_types",
                unreadable.join(", ")
            )));
        }
        store.set_known_types(known.clone());
        let observer = Arc::new(LiveObserver { inner: Arc::downgrade(&self.inner), runtime });
        store.add_flush_hook(observer.clone());
        store.add_observer(observer);
        for session in store.list() {
            self.inner.live_writer(&session);
        }
        Ok(())
    }

    /// Drains every live session's buffered events. Errors are collected; the first is returned.
    pub async fn close(&self) -> Result<()> {
        let writers: Vec<Arc<LiveWriter>> = self.inner.live.lock().values().cloned().collect();
        let mut first_error = None;
        for writer in writers {
            if let Some(reason) = writer.fenced() {
                // Its loss was reported when the fence fell; closing is not an error for it.
                tracing::warn!(session = %writer.session().id(), %reason, "closing with a fenced live session: its unwritten events are not stored");
                continue;
            }
            if let Err(err) = writer.drain(&self.inner).await {
                tracing::warn!(session = %writer.session().id(), error = %err, "failed to drain a live session at close");
                first_error.get_or_insert(err);
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// How many ids currently have a storage lock entry (held or awaited).
    pub fn n_locked_ids(&self) -> usize {
        self.inner.locks.len()
    }

    /// The number of cached inspections and the payload bytes they hold.
    pub fn inspect_cache_usage(&self) -> (usize, u64) {
        let cache = self.inner.cache.lock();
        (cache.entries.len(), cache.bytes)
    }
}

fn check_cancel(cancel: &CancellationToken) -> Result<()> {
    if cancel.is_cancelled() { Err(PersistenceError::Cancelled) } else { Ok(()) }
}

/// A scan's collected output, validated and with its closers.
struct ColdLog {
    outcome: ScanOutcome,
    events: Vec<Arc<SessionEvent>>,
    closers: Vec<SessionEvent>,
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

impl Inner {
    /// Serializes storage work on `id`. The lock's entry lives only while someone holds or
    /// awaits it, so the registry does not grow with the number of ids ever touched.
    async fn lock_id(&self, id: &SessionId) -> KeyedGuard<'_> {
        self.locks.lock(id).await
    }

    /// [`lock_id`](Self::lock_id) for a blocking thread (never an async context: it would block
    /// the runtime).
    fn lock_id_blocking(&self, id: &SessionId) -> KeyedGuard<'_> {
        self.locks.lock_blocking(id)
    }

    /// The live session of `id`: one published in an attached store (even before its first write
    /// reached storage), or the owner of the durable state.
    fn live_session(&self, id: &SessionId) -> Option<Arc<Session>> {
        if let Some(writer) = self.live.lock().get(id) {
            return Some(writer.session().clone());
        }
        let states = self.states.lock();
        states.get(id).and_then(IdState::owner)
    }

    /// Reads and validates the whole stored log of `id` into memory.
    async fn read_cold(&self, id: &SessionId, cancel: &CancellationToken) -> Result<Option<ColdLog>> {
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

    /// The storable check of a repair's closers (built by `session-core`, so a refusal here is a
    /// bug, but a repair is a write like any other: nothing a reader would refuse is stored).
    fn check_repair(&self, id: &SessionId, closers: &[SessionEvent]) -> Result<()> {
        for (index, closer) in closers.iter().enumerate() {
            session_core::check_storable(id, closer, &self.config.known_types)
                .map_err(|refused| PersistenceError::unstorable(id, index, refused))?;
        }
        Ok(())
    }

    /// Adopts a stored log that this coordinator does not track yet: repairs it durably (cut the
    /// torn tail, append closers) and returns the state positioned after it.
    async fn adopt_cold(&self, id: &SessionId, cancel: &CancellationToken) -> Result<IdState> {
        let Some(log) = self.read_cold(id, cancel).await? else {
            return Err(PersistenceError::NotFound { id: id.clone() });
        };
        let header = log.outcome.header.clone();
        let cursor = log.events.len() as u64 + log.closers.len() as u64;
        if log.outcome.torn.is_some() || !log.closers.is_empty() {
            check_cancel(cancel)?;
            let (torn, closers) = (log.outcome.torn, log.closers);
            self.check_repair(id, &closers)?;
            let repair_header = header.clone();
            blocking(&self.backend, move |backend| backend.commit_repair(&repair_header, torn.as_ref(), &closers))
                .await?;
            self.cache.lock().remove(id);
        }
        Ok(IdState { header, cursor, materialized: true, owner: None, stale: false })
    }

    /// Appends a validated, contiguous batch for a tracked id. The caller holds the id lock.
    /// Every event is checked (its seq, then the storable check against the configured known
    /// types: what a reader would refuse, or could not hold) before the backend sees any of
    /// them, so a refused batch stores nothing.
    async fn append_tracked(&self, state: &mut IdState, events: Vec<Arc<SessionEvent>>) -> Result<()> {
        if events.is_empty() {
            return Ok(());
        }
        let id = state.header.id.clone();
        for (idx, event) in events.iter().enumerate() {
            let expected = state.cursor + idx as u64;
            if event.seq != expected {
                return Err(PersistenceError::invalid_input(format!(
                    "append seq mismatch for \"{id}\": expected {expected} at index {idx}, got {}",
                    event.seq
                )));
            }
            // The storable check: a backend gets only what a reader accepts (and can hold).
            session_core::check_storable(&id, event, &self.config.known_types)
                .map_err(|refused| PersistenceError::unstorable(&id, idx, refused))?;
        }
        let mut events = events;
        loop {
            let header = state.header.clone();
            let materialized = state.materialized;
            let sent = events.clone();
            match blocking(&self.backend, move |backend| backend.append_batch(&header, &sent, materialized)).await {
                Ok(()) => break,
                // A backend that fences writers (a database many processes share) refused the
                // batch: earlier attempts of this very write may have committed with their
                // replies lost, or another writer moved the log on. A first write (the log not
                // materialized yet) that meets a log another writer created meanwhile is the same
                // fence: what is stored is not this copy's.
                Err(err @ PersistenceError::Fenced { .. }) => {
                    let stored = self.stored_from(&id, state.cursor).await?;
                    let ours = stored.iter().zip(&events).take_while(|(stored, sent)| *stored == &***sent).count();
                    if ours > 0 {
                        tracing::info!(session = %id, first_seq = state.cursor, n_events = ours, "appends whose replies were lost had committed; they are not written again");
                        state.cursor += ours as u64;
                        state.materialized = true;
                        self.cache.lock().remove(&id);
                    }
                    if ours == events.len() {
                        return Ok(());
                    }
                    if ours < stored.len() {
                        // Past what this writer wrote, the log holds another writer's events.
                        state.stale = true;
                        return Err(err);
                    }
                    if ours == 0 {
                        return Err(err);
                    }
                    // Only part of the batch was stored: write the rest.
                    events.drain(..ours);
                }
                Err(err) => return Err(err),
            }
        }
        let n_events = events.len() as u64;
        state.cursor += n_events;
        state.materialized = true;
        self.cache.lock().remove(&id);
        Ok(())
    }

    /// The stored events of `id` from `cursor` on.
    async fn stored_from(&self, id: &SessionId, cursor: u64) -> Result<Vec<SessionEvent>> {
        let probe = id.clone();
        blocking(&self.backend, move |backend| {
            let mut sink = crate::CollectSink::default();
            backend.scan_from(&probe, cursor, &CancellationToken::new(), &mut sink)?;
            Ok(sink.events.into_iter().filter(|event| event.seq >= cursor).collect())
        })
        .await
    }

    /// Whether the live session `session` writes a log that moved on without it (see
    /// [`IdState::stale`]).
    pub(crate) fn is_stale(&self, session: &Arc<Session>) -> bool {
        self.states
            .lock()
            .get(session.id())
            .is_some_and(|state| state.stale && state.owner().is_some_and(|owner| Arc::ptr_eq(&owner, session)))
    }

    pub(crate) fn live_writer(self: &Arc<Self>, session: &Arc<Session>) -> Arc<LiveWriter> {
        let mut live = self.live.lock();
        if let Some(writer) = live.get(session.id())
            && Arc::ptr_eq(writer.session(), session)
        {
            return writer.clone();
        }
        let writer = Arc::new(LiveWriter::new(session.clone()));
        // A newer live session under the same id replaces the writer of a retired one; its
        // initialization decides whether it may own the stored log.
        live.insert(session.id().clone(), writer.clone());
        self.unreported_fences.lock().remove(session.id());
        writer
    }

    /// Binds a live session to its durable log (reference 01 §3.4.5 `onCreated`) and writes the
    /// part of its log that storage does not have yet.
    pub(crate) async fn init_live(&self, session: &Arc<Session>) -> Result<()> {
        let id = session.id().clone();
        let _guard = self.lock_id(&id).await;
        let seed = session.events();
        let existing = self.states.lock().get(&id).cloned();
        let mut state = match existing {
            Some(state) => match state.owner() {
                // A retried initialization: only the unwritten suffix is left to do.
                Some(owner) if Arc::ptr_eq(&owner, session) => state,
                Some(_) if state.materialized => {
                    return Err(PersistenceError::collision(
                        &id,
                        format!(
                            "session \"{id}\" is already bound to a different live session in this backend (id collision)"
                        ),
                    ));
                }
                // An owner that never wrote anything frees its id.
                Some(_) => self.bind_untracked(session, &seed).await?,
                None => self.claim_ownerless(session, state, &seed).await?,
            },
            None => self.bind_untracked(session, &seed).await?,
        };
        state.owner = Some(Arc::downgrade(session));
        self.states.lock().insert(id.clone(), state.clone());
        // Announced before the first write, so a repair elsewhere never closes this session's turn.
        let leased = id.clone();
        if let Err(error) = blocking(&self.backend, move |backend| backend.lease(&leased)).await {
            tracing::warn!(session = %id, %error, "cannot take the session's writer lease; a repair by another process could close its open turn");
        }
        let suffix: Vec<Arc<SessionEvent>> = seed.iter().skip(state.cursor as usize).cloned().collect();
        let result = self.append_tracked(&mut state, suffix).await;
        self.states.lock().insert(id, state);
        result
    }

    /// A tracked state without an owner (left by `create` or `load`) is claimed by a live
    /// session whose log reproduces the stored prefix.
    async fn claim_ownerless(
        &self,
        session: &Arc<Session>,
        state: IdState,
        seed: &[Arc<SessionEvent>],
    ) -> Result<IdState> {
        let id = session.id();
        if state.header.cwd != session.header().cwd {
            return Err(cwd_collision(id, &state.header, session.header()));
        }
        if state.cursor > 0 {
            let stored = self.read_cold(id, &CancellationToken::new()).await?.map(|log| log.events).unwrap_or_default();
            if stored.len() as u64 != state.cursor {
                // Another writer moved the log on since it was loaded here.
                return Err(self.fence_binding(session, state.header.clone(), seed, &stored));
            }
            if !covers(seed, &stored) {
                return Err(PersistenceError::collision(
                    id,
                    format!(
                        "session \"{id}\" is already persisted with {} event(s) that do not match this live session (id collision)",
                        state.cursor
                    ),
                ));
            }
        }
        Ok(state)
    }

    /// A live session whose id this coordinator does not track: adopt the stored log if one
    /// exists (the live log must extend it), or start a new one.
    async fn bind_untracked(&self, session: &Arc<Session>, seed: &[Arc<SessionEvent>]) -> Result<IdState> {
        let id = session.id();
        let Some(stored) = self.read_cold(id, &CancellationToken::new()).await? else {
            return Ok(IdState {
                header: session.header().clone(),
                cursor: 0,
                materialized: false,
                owner: None,
                stale: false,
            });
        };
        let stored_header = stored.outcome.header.clone();
        if stored_header.cwd != session.header().cwd {
            return Err(cwd_collision(id, &stored_header, session.header()));
        }
        if !covers(seed, &stored.events) {
            // Another writer created or wrote the id before this copy's first write (two
            // gateways over one database that both created it): the writer fence, as after any
            // later write, so a release unbinds this copy and a resume starts from the store.
            return Err(self.fence_binding(session, stored_header, seed, &stored.events));
        }
        if let Some(torn) = stored.outcome.torn {
            // The live session is authoritative: cut the torn bytes but never close its turn.
            let header = stored_header.clone();
            blocking(&self.backend, move |backend| backend.commit_repair(&header, Some(&torn), &[])).await?;
            self.cache.lock().remove(id);
        }
        Ok(IdState {
            header: stored_header,
            cursor: stored.events.len() as u64,
            materialized: true,
            owner: None,
            stale: false,
        })
    }

    /// Binds `session` to the stored log of its id as fenced (see [`IdState::stale`]): the log
    /// holds another writer's events where this copy's differ. Answers the fence's error. The
    /// caller holds the id lock.
    fn fence_binding(
        &self,
        session: &Arc<Session>,
        header: Arc<SessionHeader>,
        seed: &[Arc<SessionEvent>],
        stored: &[Arc<SessionEvent>],
    ) -> PersistenceError {
        let id = session.id();
        let ours = seed.iter().zip(stored).take_while(|(live, stored)| live == stored).count() as u64;
        let state =
            IdState { header, cursor: ours, materialized: true, owner: Some(Arc::downgrade(session)), stale: true };
        self.states.lock().insert(id.clone(), state);
        PersistenceError::fenced(id, FencedWrite::Append, ours, stored.len() as u64)
    }

    /// Writes a batch of a live session's events. Events storage already has are skipped.
    pub(crate) async fn append_live(&self, session: &Arc<Session>, batch: Vec<Arc<SessionEvent>>) -> Result<()> {
        let id = session.id().clone();
        let _guard = self.lock_id(&id).await;
        let Some(mut state) = self.states.lock().get(&id).cloned() else {
            return Err(PersistenceError::collision(
                &id,
                format!("session \"{id}\" has no durable state bound to this live session"),
            ));
        };
        if !state.owner().is_some_and(|owner| Arc::ptr_eq(&owner, session)) {
            return Err(PersistenceError::collision(
                &id,
                format!("session \"{id}\" is already bound to a different live session in this backend (id collision)"),
            ));
        }
        let batch: Vec<Arc<SessionEvent>> = batch.into_iter().filter(|event| event.seq >= state.cursor).collect();
        let result = self.append_tracked(&mut state, batch).await;
        self.states.lock().insert(id, state);
        result
    }

    /// Unbinds a live session after its buffered events are written. A failed write keeps the
    /// binding (and the buffer), so a later flush or release can retry; a fenced writer (another
    /// writer moved its log on, which no retry heals) is unbound without writing, its unwritten
    /// events dropped, and the fence's `Fenced` is returned so the caller can say so.
    pub(crate) async fn retire(self: &Arc<Self>, session: Arc<Session>) -> Result<()> {
        let writer = self.live.lock().get(session.id()).cloned();
        let mut fenced = None;
        if let Some(writer) = &writer
            && Arc::ptr_eq(writer.session(), &session)
        {
            if writer.fenced().is_none()
                && let Err(err) = writer.drain(self).await
                && writer.fenced().is_none()
            {
                return Err(err);
            }
            // Fenced before or by this drain: unbound without writing; the caller learns it, and
            // so does a later `release` of the id if this retire's caller does not await it.
            fenced = writer.fence_error();
            if let Some(fence) = writer.fence_error() {
                self.unreported_fences.lock().insert(session.id().clone(), fence);
            }
            let mut live = self.live.lock();
            if live.get(session.id()).is_some_and(|current| Arc::ptr_eq(current, writer)) {
                live.remove(session.id());
            }
        }
        let _guard = self.lock_id(session.id()).await;
        let owned = {
            let mut states = self.states.lock();
            let owned =
                states.get(session.id()).and_then(IdState::owner).is_some_and(|owner| Arc::ptr_eq(&owner, &session));
            if owned {
                states.remove(session.id());
            }
            owned
        };
        if owned {
            let id = session.id().clone();
            // Ending a lease cannot fail; the blocking pool only keeps its I/O off the runtime.
            let ended: Result<()> = blocking(&self.backend, move |backend| {
                backend.end_lease(&id);
                Ok(())
            })
            .await;
            drop(ended);
        }
        fenced.map_or(Ok(()), Err)
    }

    /// Logs each listing fault as a warning the first time a listing finds it: the log is left
    /// out of the listing, but never silently.
    fn report_faults(&self, faults: &[LogFault]) {
        if faults.is_empty() {
            return;
        }
        let mut reported = self.reported_faults.lock();
        for fault in faults {
            let path = fault.path.as_ref().map(|path| path.display().to_string());
            let key = format!("{}\0{}\0{}", fault.id, path.as_deref().unwrap_or(""), fault.error);
            if reported.contains(&key) {
                continue;
            }
            if reported.len() >= MAX_REPORTED_FAULTS {
                reported.clear();
            }
            tracing::warn!(
                session = %fault.id,
                path = path.as_deref().unwrap_or("-"),
                error = %fault.error,
                "a stored log cannot be listed; it is left out of listings (run `apiproxy verify` for a report)"
            );
            reported.insert(key);
        }
    }

    /// Streams `id` into `sink` on a blocking thread: the body of every streamed read.
    fn stream(&self, id: &SessionId, cancel: &CancellationToken, mut sink: Box<dyn StreamSink>) -> Streamed {
        check_cancel(cancel)?;
        if let Some(session) = self.live_session(id) {
            return feed(sink, Inner::live_inspection(&session));
        }
        let _guard = self.lock_id_blocking(id);
        check_cancel(cancel)?;
        let cached = self.cache.lock().peek(id);
        if let Some(cached) = cached
            && cached.revision == self.backend.revision(id)?
        {
            return feed(sink, cached);
        }
        let threads = self.config.read_threads;
        let Some((outcome, closers)) =
            scan_validated(&*self.backend, id, 0, &self.config.known_types, threads, cancel, &mut *sink)?
        else {
            return Err(PersistenceError::NotFound { id: id.clone() });
        };
        let n_closers = closers.len() as u64;
        for closer in closers {
            sink.event(Arc::new(closer))?;
        }
        sink.finish();
        let summary = StreamSummary {
            header: outcome.header,
            n_events: outcome.n_events + n_closers,
            n_closers,
            live: false,
            revision: Some(outcome.revision),
        };
        Ok((sink, summary))
    }

    fn live_inspection(session: &Arc<Session>) -> Inspection {
        Inspection {
            header: session.header().clone(),
            events: session.events(),
            revision: None,
            live: true,
            n_closers: 0,
        }
    }
}

/// Whether `seed` starts with exactly the events of `stored` (structural comparison).
fn covers(seed: &[Arc<SessionEvent>], stored: &[Arc<SessionEvent>]) -> bool {
    seed.len() >= stored.len() && seed.iter().zip(stored).all(|(live, stored)| live == stored)
}

fn cwd_collision(id: &SessionId, stored: &SessionHeader, live: &SessionHeader) -> PersistenceError {
    let show = |cwd: &Option<String>| cwd.clone().unwrap_or_else(|| "(none)".to_owned());
    PersistenceError::collision(
        id,
        format!(
            "session \"{id}\" is already persisted at a different cwd (persisted: {}, live: {}) (id collision)",
            show(&stored.cwd),
            show(&live.cwd)
        ),
    )
}

#[async_trait::async_trait]
impl SessionPersistence for Coordinator {
    async fn create(&self, header: SessionHeader, cancel: &CancellationToken) -> Result<()> {
        check_cancel(cancel)?;
        header.validate(&header.id).map_err(PersistenceError::invalid_header)?;
        let inner = &self.inner;
        let id = header.id.clone();
        let _guard = inner.lock_id(&id).await;
        if inner.states.lock().contains_key(&id) {
            return Err(PersistenceError::collision(&id, format!("session \"{id}\" already exists in this backend")));
        }
        let probe = id.clone();
        if blocking(&inner.backend, move |backend| backend.revision(&probe)).await?.is_some() {
            return Err(PersistenceError::collision(
                &id,
                format!("session \"{id}\" already has a persisted log on disk; load/resume it instead of creating"),
            ));
        }
        check_cancel(cancel)?;
        inner.states.lock().insert(
            id,
            IdState { header: Arc::new(header), cursor: 0, materialized: false, owner: None, stale: false },
        );
        Ok(())
    }

    async fn append(&self, id: &SessionId, events: Vec<Arc<SessionEvent>>, cancel: &CancellationToken) -> Result<()> {
        check_cancel(cancel)?;
        if events.is_empty() {
            return Ok(());
        }
        let inner = &self.inner;
        let _guard = inner.lock_id(id).await;
        if inner.live_session(id).is_some() {
            return Err(PersistenceError::collision(
                id,
                format!("session \"{id}\" is written by a live session; append through the session instead"),
            ));
        }
        let tracked = inner.states.lock().get(id).cloned();
        let mut state = match tracked {
            Some(state) => state,
            None => inner.adopt_cold(id, cancel).await?,
        };
        check_cancel(cancel)?;
        let result = inner.append_tracked(&mut state, events).await;
        inner.states.lock().insert(id.clone(), state);
        result
    }

    async fn list_snapshots(&self, cancel: &CancellationToken) -> Result<Listing> {
        check_cancel(cancel)?;
        let token = cancel.clone();
        let mut listed = blocking(&self.inner.backend, move |backend| backend.list(&token)).await?;
        check_cancel(cancel)?;
        listed.sort();
        self.inner.report_faults(&listed.faults);
        Ok(listed)
    }

    async fn list_children(&self, parent: &SessionId, cancel: &CancellationToken) -> Result<Listing> {
        check_cancel(cancel)?;
        let (parent, token) = (parent.clone(), cancel.clone());
        let mut listed = blocking(&self.inner.backend, move |backend| backend.list_children(&parent, &token)).await?;
        check_cancel(cancel)?;
        listed.sort();
        self.inner.report_faults(&listed.faults);
        Ok(listed)
    }

    async fn list_page(&self, request: &PageRequest, cancel: &CancellationToken) -> Result<HeaderPage> {
        check_cancel(cancel)?;
        let (request, token) = (request.clone(), cancel.clone());
        let page = blocking(&self.inner.backend, move |backend| backend.list_page(&request, &token)).await?;
        check_cancel(cancel)?;
        self.inner.report_faults(&page.faults);
        Ok(page)
    }

    async fn stored_header(&self, id: &SessionId, cancel: &CancellationToken) -> Result<Option<StoredHeader>> {
        check_cancel(cancel)?;
        let (probe, token) = (id.clone(), cancel.clone());
        blocking(&self.inner.backend, move |backend| backend.header(&probe, &token)).await
    }

    fn durable_len(&self, id: &SessionId) -> Option<u64> {
        let states = self.inner.states.lock();
        let state = states.get(id)?;
        state.owner()?;
        Some(state.cursor)
    }

    fn fence(&self, id: &SessionId) -> Option<String> {
        self.inner.live.lock().get(id)?.fenced()
    }

    async fn inspect(&self, id: &SessionId, cancel: &CancellationToken) -> Result<Inspection> {
        check_cancel(cancel)?;
        let inner = &self.inner;
        if let Some(session) = inner.live_session(id) {
            return Ok(Inner::live_inspection(&session));
        }
        // Same-id readers queue here, so the second one finds the first one's result cached.
        let _guard = inner.lock_id(id).await;
        check_cancel(cancel)?;
        if let Some(session) = inner.live_session(id) {
            return Ok(Inner::live_inspection(&session));
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

    async fn inspect_stream(&self, id: &SessionId, cancel: &CancellationToken, sink: Box<dyn StreamSink>) -> Streamed {
        check_cancel(cancel)?;
        let (inner, id, cancel) = (Arc::clone(&self.inner), id.clone(), cancel.clone());
        run_blocking(move || inner.stream(&id, &cancel, sink)).await?
    }

    /// Keeps `lanes` blocking threads reading back to back: each takes the next read when it
    /// finishes one, so no read waits for a hand-off through the async side.
    async fn inspect_streams(
        &self,
        reads: Vec<(SessionId, Box<dyn StreamSink>)>,
        lanes: usize,
        cancel: &CancellationToken,
    ) -> Vec<Streamed> {
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
                let (inner, queue, stop, cancel) =
                    (Arc::clone(&self.inner), Arc::clone(&queue), Arc::clone(&stop), cancel.clone());
                run_blocking(move || {
                    let mut done = Vec::new();
                    while !stop.load(Ordering::Acquire) {
                        let Some((idx, (id, sink))) = queue.lock().next() else { break };
                        match std::panic::catch_unwind(AssertUnwindSafe(|| inner.stream(&id, &cancel, sink))) {
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
        let mut results: Vec<Option<Streamed>> = std::iter::repeat_with(|| None).take(n_reads).collect();
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

    async fn read_from(&self, id: &SessionId, from_seq: u64, cancel: &CancellationToken) -> Result<Inspection> {
        check_cancel(cancel)?;
        let inner = &self.inner;
        let _guard = inner.lock_id(id).await;
        let (id, known, token) = (id.clone(), inner.config.known_types.clone(), cancel.clone());
        let threads = inner.config.read_threads;
        blocking(&inner.backend, move |backend| {
            let mut suffix = SuffixSink { from_seq, events: Vec::new() };
            let Some((outcome, _closers)) =
                scan_validated(backend, &id, from_seq, &known, threads, &token, &mut suffix)?
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

    async fn load(&self, id: &SessionId, cancel: &CancellationToken) -> Result<Inspection> {
        check_cancel(cancel)?;
        let inner = &self.inner;
        if let Some(session) = inner.live_session(id) {
            if session.open_turn().is_some() {
                return Err(PersistenceError::collision(
                    id,
                    format!(
                        "cannot load session \"{id}\" while its live turn is open; use the live Session or wait for the turn to close"
                    ),
                ));
            }
            let snapshot = Inner::live_inspection(&session);
            self.flush(id, cancel).await?;
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
            blocking(&inner.backend, move |backend| backend.commit_repair(&repair_header, torn.as_ref(), &closers))
                .await?;
            events.extend(log.closers.into_iter().map(Arc::new));
        }
        let probe = id.clone();
        let revision = blocking(&inner.backend, move |backend| backend.revision(&probe)).await?;
        inner.cache.lock().remove(id);
        inner.states.lock().insert(
            id.clone(),
            IdState {
                header: header.clone(),
                cursor: events.len() as u64,
                materialized: true,
                owner: None,
                stale: false,
            },
        );
        // The closers are durable now: the view is all stored events.
        Ok(Inspection { header, events: events.into(), revision, live: false, n_closers: 0 })
    }

    async fn flush(&self, id: &SessionId, cancel: &CancellationToken) -> Result<()> {
        check_cancel(cancel)?;
        let writer = self.inner.live.lock().get(id).cloned();
        match writer {
            Some(writer) => writer.drain(&self.inner).await,
            None => Ok(()),
        }
    }

    async fn release(&self, id: &SessionId, cancel: &CancellationToken) -> Result<()> {
        check_cancel(cancel)?;
        let writer = self.inner.live.lock().get(id).cloned();
        let released = match writer {
            Some(writer) => self.inner.retire(writer.session().clone()).await,
            None => Ok(()),
        };
        // A fence that a detach's own retire met first is this release's to report.
        match self.inner.unreported_fences.lock().remove(id) {
            Some(fence) => Err(fence),
            None => released,
        }
    }

    fn locate(&self, header: &SessionHeader) -> Option<PathBuf> {
        self.inner.backend.locate(header)
    }
}

/// Delivers a view held in memory to `sink`.
fn feed(mut sink: Box<dyn StreamSink>, view: Inspection) -> Streamed {
    sink.header(&view.header)?;
    for event in view.events.iter() {
        sink.event(Arc::clone(event))?;
    }
    sink.finish();
    let summary = StreamSummary {
        header: view.header.clone(),
        n_events: view.events.len() as u64,
        n_closers: view.n_closers,
        live: view.live,
        revision: view.revision.clone(),
    };
    Ok((sink, summary))
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

/// Receives the store's notifications and routes them to the coordinator.
struct LiveObserver {
    inner: Weak<Inner>,
    runtime: tokio::runtime::Handle,
}

impl StoreObserver for LiveObserver {
    fn notify(&self, event: &StoreEvent<'_>) -> std::result::Result<(), session_core::ObserverError> {
        let Some(inner) = self.inner.upgrade() else {
            return Ok(());
        };
        match event {
            StoreEvent::Created(session) => {
                inner.live_writer(session);
            }
            StoreEvent::Event(session, event) => {
                let writer = inner.live_writer(session);
                writer.enqueue(&inner, &self.runtime, Arc::clone(event));
            }
            StoreEvent::Disposed(session) => {
                let session = Arc::clone(session);
                let retiring = inner.clone();
                self.runtime.spawn(async move {
                    if let Err(err) = retiring.retire(Arc::clone(&session)).await {
                        tracing::warn!(session = %session.id(), error = %err, "failed to write a disposed session's last events");
                    }
                });
            }
        }
        Ok(())
    }
}

impl session_core::FlushHook for LiveObserver {
    fn flush(
        &self,
        session: Arc<Session>,
    ) -> futures::future::BoxFuture<'static, std::result::Result<(), session_core::ObserverError>> {
        let inner = self.inner.upgrade();
        Box::pin(async move {
            let Some(inner) = inner else {
                return Ok(());
            };
            let writer = inner.live_writer(&session);
            writer.drain(&inner).await.map_err(|err| Box::new(err) as session_core::ObserverError)
        })
    }
}

/// Recently inspected logs, bounded by entry count and by payload bytes. Most recent at the back.
struct InspectCache {
    entries: VecDeque<(SessionId, Inspection, u64)>,
    max_entries: usize,
    max_bytes: u64,
    bytes: u64,
}

impl InspectCache {
    fn new(max_entries: usize, max_bytes: u64) -> InspectCache {
        InspectCache { entries: VecDeque::new(), max_entries, max_bytes, bytes: 0 }
    }

    fn contains(&self, id: &SessionId) -> bool {
        self.entries.iter().any(|(entry_id, ..)| entry_id == id)
    }

    fn peek(&self, id: &SessionId) -> Option<Inspection> {
        self.entries.iter().find(|(entry_id, ..)| entry_id == id).map(|(_, inspection, _)| inspection.clone())
    }

    /// Returns the entry if it is still at `revision`, making it most recent; drops it otherwise.
    fn get(&mut self, id: &SessionId, revision: &Revision) -> Option<Inspection> {
        let idx = self.entries.iter().position(|(entry_id, ..)| entry_id == id)?;
        let entry = self.entries.remove(idx)?;
        if entry.1.revision.as_ref() != Some(revision) {
            self.bytes -= entry.2;
            return None;
        }
        let hit = entry.1.clone();
        self.entries.push_back(entry);
        Some(hit)
    }

    fn insert(&mut self, id: SessionId, inspection: Inspection) {
        self.remove(&id);
        let bytes: u64 = inspection.events.iter().map(|event| event.data.as_str().len() as u64 + 64).sum();
        if bytes > self.max_bytes {
            return;
        }
        self.bytes += bytes;
        self.entries.push_back((id, inspection, bytes));
        while self.entries.len() > self.max_entries || self.bytes > self.max_bytes {
            let Some((_, _, evicted)) = self.entries.pop_front() else { break };
            self.bytes -= evicted;
        }
    }

    fn remove(&mut self, id: &SessionId) {
        if let Some(idx) = self.entries.iter().position(|(entry_id, ..)| entry_id == id)
            && let Some((_, _, bytes)) = self.entries.remove(idx)
        {
            self.bytes -= bytes;
        }
    }
}
