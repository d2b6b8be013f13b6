//! The live write path: binding the sessions of an attached `SessionStore` to their durable logs
//! (`LiveSessions`), the store's notifications (`LiveObserver`), and write-behind batching for
//! one live session (`LiveWriter`, reference 01 §3.5).
//!
//! A live session is bound on its first write: its log must extend the stored one (a stored log
//! it does not extend is another writer's, the fence below), and the part storage lacks is
//! written then. A release or disposal retires it: what it buffered is written, then the binding
//! is forgotten, so the id is served cold and may be resumed at once.
//!
//! Events are buffered as the session appends them. The first buffered event arms a timer (a
//! fixed window, not a debounce); when it fires, everything buffered is written as one batch.
//! `drain` is the flush barrier: it writes until nothing is buffered. A failed write puts its
//! batch back in front, in order, and pauses the timer until the next event or flush.
//!
//! A write refused because the stored log moved on without this live copy (another process or
//! host wrote the session: the writer fence) never succeeds on a retry. The writer is then
//! *fenced*: it stops writing, and every later flush fails at once with the first fence's
//! [`PersistenceError::Fenced`], until the session is released (which unbinds it without writing)
//! and resumed from the store. The first write of a new session that finds a log another writer
//! created meanwhile is fenced the same way. A refusal whose batch turns out to be stored (an
//! earlier attempt committed and its reply was lost) is a success, and other failures are retried
//! as any failed write is.

use std::{
    collections::HashMap,
    fmt,
    sync::{Arc, Weak},
};

use parking_lot::Mutex;
use session_core::{Session, SessionEvent, SessionHeader, SessionId, SessionStore, StoreEvent, StoreObserver};
use tokio::sync::Mutex as AsyncMutex;
use tokio_util::sync::CancellationToken;

use super::state::{IdState, Inner, blocking, to_the_end};
use crate::error::{FencedWrite, PersistenceError, Result};

/// The live sessions this coordinator writes, over the shared state.
pub(super) struct LiveSessions {
    pub(super) inner: Arc<Inner>,
    writers: Mutex<HashMap<SessionId, Arc<LiveWriter>>>,
    /// The fence of each fenced live session unbound by a retire nobody awaited (a store's detach
    /// retires in a task of its own), kept until a `release` of the id reports it or a new live
    /// session takes the id.
    unreported_fences: Mutex<HashMap<SessionId, PersistenceError>>,
    /// The stores attached so far: one attached twice would hand every event to its writer twice.
    attached: Mutex<Vec<std::sync::Weak<SessionStore>>>,
}

impl LiveSessions {
    pub(super) fn new(inner: Arc<Inner>) -> LiveSessions {
        LiveSessions {
            inner,
            writers: Mutex::default(),
            unreported_fences: Mutex::default(),
            attached: Mutex::default(),
        }
    }

    /// Makes every session of `store` durable (see [`Coordinator::attach`](crate::Coordinator::attach)).
    pub(super) fn attach(self: &Arc<Self>, store: &Arc<SessionStore>) -> Result<()> {
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| {
            PersistenceError::invalid_input("Coordinator::attach must be called inside a Tokio runtime")
        })?;
        let mut attached = self.attached.lock();
        attached.retain(|weak| weak.strong_count() > 0);
        if attached.iter().any(|weak| std::ptr::eq(weak.as_ptr(), Arc::as_ptr(store))) {
            return Err(PersistenceError::invalid_input("this session store is already attached to this coordinator"));
        }
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
        let observer = Arc::new(LiveObserver { live: Arc::downgrade(self), runtime });
        store.add_flush_hook(observer.clone());
        store.add_observer(observer);
        attached.push(Arc::downgrade(store));
        for session in store.list() {
            self.writer(&session);
        }
        Ok(())
    }

    /// Drains every live session's buffered events. Errors are collected; the first is returned.
    pub(super) async fn close(self: &Arc<Self>) -> Result<()> {
        let writers: Vec<Arc<LiveWriter>> = self.writers.lock().values().cloned().collect();
        let mut first_error = None;
        for writer in writers {
            if let Some(reason) = writer.fenced() {
                // Its loss was reported when the fence fell; closing is not an error for it.
                tracing::warn!(session = %writer.session().id(), %reason, "closing with a fenced live session: its unwritten events are not stored");
                continue;
            }
            if let Err(err) = writer.drain(self).await {
                tracing::warn!(session = %writer.session().id(), error = %err, "failed to drain a live session at close");
                first_error.get_or_insert(err);
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// The live session of `id`: one published in an attached store (even before its first write
    /// reached storage), or the owner of the durable state.
    pub(super) fn session(&self, id: &SessionId) -> Option<Arc<Session>> {
        if let Some(writer) = self.writers.lock().get(id) {
            return Some(writer.session().clone());
        }
        self.inner.owner_of(id)
    }

    /// Why the live session `id` can no longer be written, if it cannot.
    pub(super) fn fence(&self, id: &SessionId) -> Option<String> {
        self.writers.lock().get(id)?.fenced()
    }

    /// See [`SessionPersistence::fence_if_overtaken`](crate::SessionPersistence::fence_if_overtaken).
    pub(super) async fn fence_if_overtaken(self: &Arc<Self>, id: &SessionId) -> Result<bool> {
        let writer = self.writers.lock().get(id).cloned();
        match writer {
            Some(writer) => writer.fence_if_overtaken(self).await,
            None => Ok(false),
        }
    }

    /// Waits until everything the live session `id` appended so far is durable.
    pub(super) async fn flush(self: &Arc<Self>, id: &SessionId) -> Result<()> {
        let writer = self.writers.lock().get(id).cloned();
        match writer {
            Some(writer) => writer.drain(self).await,
            None => Ok(()),
        }
    }

    /// Retires the live session `id`, if any, and reports a fence a retire nobody awaited met.
    pub(super) async fn release(self: &Arc<Self>, id: &SessionId) -> Result<()> {
        let writer = self.writers.lock().get(id).cloned();
        let released = match writer {
            // To the end, whoever stops waiting: a retire dropped while its lease ends would let
            // the id's lock go with that end still to come, and a copy resumed meanwhile would
            // lose the lease its first write took when it came.
            Some(writer) => {
                let (live, session) = (Arc::clone(self), writer.session().clone());
                to_the_end(async move { live.retire(session).await }).await
            }
            // A retire already under way (the detach's own) has let go of the writer but may
            // still be waiting for the id's lock, with the session's state still owned: it
            // queued for the lock before this call could see the writer gone, so taking the lock
            // once waits for it. Returning earlier would let a resume read the old copy as live.
            None => {
                drop(self.inner.lock_id(id).await);
                Ok(())
            }
        };
        // A fence that a detach's own retire met first is this release's to report.
        match self.unreported_fences.lock().remove(id) {
            Some(fence) => Err(fence),
            None => released,
        }
    }

    /// The writer of `session`, created on first sight.
    fn writer(&self, session: &Arc<Session>) -> Arc<LiveWriter> {
        let mut writers = self.writers.lock();
        if let Some(writer) = writers.get(session.id())
            && Arc::ptr_eq(writer.session(), session)
        {
            return writer.clone();
        }
        let writer = Arc::new(LiveWriter::new(session.clone()));
        // A newer live session under the same id replaces the writer of a retired one; its
        // initialization decides whether it may own the stored log.
        writers.insert(session.id().clone(), writer.clone());
        self.unreported_fences.lock().remove(session.id());
        writer
    }

    /// Binds a live session to its durable log (reference 01 §3.4.5 `onCreated`) and writes the
    /// part of its log that storage does not have yet.
    async fn bind(&self, session: &Arc<Session>) -> Result<()> {
        let inner = &self.inner;
        let id = session.id().clone();
        let _guard = inner.lock_id(&id).await;
        let seed = session.events();
        let existing = inner.states.lock().get(&id).cloned();
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
        inner.states.lock().insert(id.clone(), state.clone());
        // Announced before the first write, so a repair elsewhere never closes this session's turn.
        let leased = id.clone();
        if let Err(error) = blocking(&inner.backend, move |backend| backend.lease(&leased)).await {
            tracing::warn!(session = %id, %error, "cannot take the session's writer lease; a repair by another process could close its open turn");
        }
        let suffix: Vec<Arc<SessionEvent>> = seed.iter().skip(state.cursor as usize).cloned().collect();
        let result = inner.append_tracked(&mut state, suffix).await;
        inner.states.lock().insert(id, state);
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
            let stored =
                self.inner.read_cold(id, &CancellationToken::new()).await?.map(|log| log.events).unwrap_or_default();
            if stored.len() as u64 != state.cursor {
                // Another writer moved the log on since it was loaded here: a copy that holds all
                // of it continues it (as an untracked copy would), one that does not meets the
                // writer fence.
                return self.bind_untracked(session, seed).await;
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
        let Some(stored) = self.inner.read_cold(id, &CancellationToken::new()).await? else {
            return Ok(IdState::unowned(session.header().clone(), 0, false));
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
            blocking(&self.inner.backend, move |backend| backend.commit_repair(&header, Some(&torn), &[])).await?;
            self.inner.cache.lock().remove(id);
        }
        Ok(IdState::unowned(stored_header, stored.events.len() as u64, true))
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
        self.inner.states.lock().insert(id.clone(), state);
        PersistenceError::fenced(id, FencedWrite::Append, ours, stored.len() as u64)
    }

    /// Writes a batch of a live session's events. Events storage already has are skipped.
    async fn append(&self, session: &Arc<Session>, batch: Vec<Arc<SessionEvent>>) -> Result<()> {
        let inner = &self.inner;
        let id = session.id().clone();
        let _guard = inner.lock_id(&id).await;
        let Some(mut state) = inner.states.lock().get(&id).cloned() else {
            return Err(PersistenceError::collision(
                &id,
                format!("session \"{id}\" has no durable state bound to this live session"),
            ));
        };
        if !state.is_owned_by(session) {
            return Err(PersistenceError::collision(
                &id,
                format!("session \"{id}\" is already bound to a different live session in this backend (id collision)"),
            ));
        }
        let batch: Vec<Arc<SessionEvent>> = batch.into_iter().filter(|event| event.seq >= state.cursor).collect();
        let result = inner.append_tracked(&mut state, batch).await;
        inner.states.lock().insert(id, state);
        result
    }

    /// Unbinds a live session after its buffered events are written. A failed write keeps the
    /// binding (and the buffer), so a later flush or release can retry; a fenced writer (another
    /// writer moved its log on, which no retry heals) is unbound without writing, its unwritten
    /// events dropped, and the fence's `Fenced` is returned so the caller can say so.
    async fn retire(self: &Arc<Self>, session: Arc<Session>) -> Result<()> {
        let writer = self.writers.lock().get(session.id()).cloned();
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
            // Recorded with the writer's removal, and only while it is still the id's: a newer
            // copy that took the id meanwhile is not this fence's to report, and a retire of this
            // writer that removed it first recorded (or its caller got) the fence already.
            let mut writers = self.writers.lock();
            if writers.get(session.id()).is_some_and(|current| Arc::ptr_eq(current, writer)) {
                writers.remove(session.id());
                if let Some(fence) = writer.fence_error() {
                    self.unreported_fences.lock().insert(session.id().clone(), fence);
                }
            }
        }
        let inner = &self.inner;
        let _guard = inner.lock_id(session.id()).await;
        let owned = {
            let mut states = inner.states.lock();
            let owned = states.get(session.id()).is_some_and(|state| state.is_owned_by(&session));
            if owned {
                states.remove(session.id());
            }
            owned
        };
        if owned {
            let id = session.id().clone();
            // Ending a lease cannot fail; the blocking pool only keeps its I/O off the runtime.
            let ended: Result<()> = blocking(&inner.backend, move |backend| {
                backend.end_lease(&id);
                Ok(())
            })
            .await;
            drop(ended);
        }
        fenced.map_or(Ok(()), Err)
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

/// Receives the store's notifications and routes them to the live sessions.
struct LiveObserver {
    live: Weak<LiveSessions>,
    runtime: tokio::runtime::Handle,
}

impl StoreObserver for LiveObserver {
    fn notify(&self, event: &StoreEvent<'_>) -> std::result::Result<(), session_core::ObserverError> {
        let Some(live) = self.live.upgrade() else {
            return Ok(());
        };
        match event {
            StoreEvent::Created(session) => {
                live.writer(session);
            }
            StoreEvent::Event(session, event) => {
                let writer = live.writer(session);
                writer.enqueue(&live, &self.runtime, Arc::clone(event));
            }
            StoreEvent::Disposed(session) => {
                let session = Arc::clone(session);
                self.runtime.spawn(async move {
                    if let Err(err) = live.retire(Arc::clone(&session)).await {
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
        let live = self.live.upgrade();
        Box::pin(async move {
            let Some(live) = live else {
                return Ok(());
            };
            let writer = live.writer(&session);
            writer.drain(&live).await.map_err(|err| Box::new(err) as session_core::ObserverError)
        })
    }
}

/// Write-behind batching for one live session.
pub(super) struct LiveWriter {
    session: Arc<Session>,
    pending: Mutex<Pending>,
    /// Held while writing, so batches of one session reach storage one at a time, in order.
    write: AsyncMutex<Progress>,
}

/// A batch taken from a live copy's buffer, put back at its front (and the window paused) when
/// dropped before it was [defused](Self::defuse): a write that failed, or a backend that panicked
/// while writing it, leaves the batch to the next write instead of losing it (which would leave
/// every later write starting past the stored log's end).
struct PutBack<'a> {
    pending: &'a Mutex<Pending>,
    batch: Option<Vec<Arc<SessionEvent>>>,
}

impl PutBack<'_> {
    /// The batch is stored: nothing to put back.
    fn defuse(mut self) {
        self.batch = None;
    }
}

impl Drop for PutBack<'_> {
    fn drop(&mut self) {
        if let Some(batch) = self.batch.take() {
            let mut pending = self.pending.lock();
            let newer = std::mem::replace(&mut pending.events, batch);
            pending.events.extend(newer);
            pending.paused = true;
        }
    }
}

#[derive(Default)]
struct Pending {
    events: Vec<Arc<SessionEvent>>,
    timer_armed: bool,
    paused: bool,
    /// Why this live copy can no longer be written (the first fence), once it cannot.
    fenced: Option<Fence>,
}

/// The fence that stopped a live writer: the seq its write started at, and the stored next seq.
#[derive(Debug, Clone, Copy)]
struct Fence {
    write: FencedWrite,
    seq: u64,
    stored_next_seq: u64,
}

#[derive(Default)]
struct Progress {
    initialized: bool,
}

impl fmt::Debug for LiveWriter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LiveWriter").field("session", self.session.id()).finish_non_exhaustive()
    }
}

impl LiveWriter {
    fn new(session: Arc<Session>) -> LiveWriter {
        LiveWriter { session, pending: Mutex::new(Pending::default()), write: AsyncMutex::new(Progress::default()) }
    }

    pub(super) fn session(&self) -> &Arc<Session> {
        &self.session
    }

    /// Buffers one event and arms the batch timer if it is not running.
    fn enqueue(self: &Arc<Self>, live: &Arc<LiveSessions>, runtime: &tokio::runtime::Handle, event: Arc<SessionEvent>) {
        let arm = {
            let mut pending = self.pending.lock();
            pending.events.push(event);
            if pending.fenced.is_some() {
                return;
            }
            let arm = pending.paused || !pending.timer_armed;
            pending.paused = false;
            pending.timer_armed = true;
            arm
        };
        if arm {
            // The timer holds no strong references: dropping the coordinator (and with it the
            // backend and its store lock) is never delayed by a pending window.
            let (writer, weak_live) = (Arc::downgrade(self), Arc::downgrade(live));
            let delay = live.inner.config.write_batch_max_delay;
            runtime.spawn(async move {
                tokio::time::sleep(delay).await;
                let (Some(writer), Some(live)) = (writer.upgrade(), weak_live.upgrade()) else {
                    return;
                };
                // A fenced writer said so once, when the fence stopped it.
                if let Err(err) = writer.drain(&live).await
                    && writer.fenced().is_none()
                {
                    tracing::warn!(session = %writer.session.id(), error = %err, "background session write failed; will retry at the next event or flush");
                }
            });
        }
    }

    /// Why this live copy can no longer be written, once a write met the fence.
    pub(super) fn fenced(&self) -> Option<String> {
        self.fence_error().map(|error| error.to_string())
    }

    /// Writes everything buffered, including events that arrive while it writes. Runs to its end
    /// even if the caller stops waiting ([`to_the_end`]): a batch it took is always either
    /// recorded as stored or put back.
    pub(super) async fn drain(self: &Arc<Self>, live: &Arc<LiveSessions>) -> Result<()> {
        // Nothing buffered and nothing being written: answered here, without a task.
        if let Ok(progress) = self.write.try_lock()
            && progress.initialized
            && self.pending.lock().events.is_empty()
        {
            return self.check_fence();
        }
        let (writer, live) = (Arc::clone(self), Arc::clone(live));
        to_the_end(async move { writer.drain_here(&live).await }).await
    }

    /// [`drain`](Self::drain), on the task that runs it.
    async fn drain_here(&self, live: &LiveSessions) -> Result<()> {
        let mut progress = self.write.lock().await;
        self.check_fence()?;
        if !progress.initialized {
            self.bind(live, &mut progress).await?;
        }
        loop {
            let batch = {
                let mut pending = self.pending.lock();
                pending.timer_armed = false;
                std::mem::take(&mut pending.events)
            };
            if batch.is_empty() {
                return Ok(());
            }
            let put_back = PutBack { pending: &self.pending, batch: Some(batch.clone()) };
            match live.append(&self.session, batch).await {
                Ok(()) => put_back.defuse(),
                Err(err) => {
                    drop(put_back);
                    let err = self.fence_on(&live.inner, err);
                    self.end_lease_if_fenced(&live.inner).await;
                    return Err(err);
                }
            }
        }
    }

    /// Fences this copy if the stored log holds more than it does (another writer took it
    /// over: its next write, which starts at its cursor, would meet the fence), then ends its
    /// lease. With no write in flight (the progress lock) and the id's lock held, so the stored
    /// position is read against the cursor it is compared with.
    async fn fence_if_overtaken(&self, live: &LiveSessions) -> Result<bool> {
        let inner = &live.inner;
        let mut progress = self.write.lock().await;
        if self.fence_error().is_some() {
            return Ok(false);
        }
        if !progress.initialized {
            // Never written (a resumed copy nobody appended to yet): the binding its first write
            // would run fences it, finding the stored log past everything it holds.
            let stored_next_seq = self.stored_next_seq(inner).await?;
            if stored_next_seq.is_none_or(|stored| stored <= self.session.len()) {
                return Ok(false);
            }
            return match self.bind(live, &mut progress).await {
                Err(PersistenceError::Fenced { .. }) => Ok(true),
                Err(err) => Err(err),
                Ok(()) => Ok(false),
            };
        }
        let id = self.session.id().clone();
        let guard = inner.lock_id(&id).await;
        let owned = inner.states.lock().get(&id).is_some_and(|state| state.is_owned_by(&self.session));
        if !owned {
            return Ok(false);
        }
        let Some(stored_next_seq) = self.stored_next_seq(inner).await? else { return Ok(false) };
        // Its own events reach `len`; a stored log past them holds another writer's (a lost
        // reply's batch is this copy's own, so never past them).
        if stored_next_seq <= self.session.len() {
            return Ok(false);
        }
        let cursor = {
            let mut states = inner.states.lock();
            let Some(state) = states.get_mut(&id) else { return Ok(false) };
            state.stale = true;
            state.cursor
        };
        let n_unwritten = {
            let mut pending = self.pending.lock();
            pending.fenced = Some(Fence { write: FencedWrite::Append, seq: cursor, stored_next_seq });
            pending.events.len()
        };
        tracing::warn!(
            session = %id,
            stored_next_seq,
            unwritten = n_unwritten,
            "another writer took over a live session: it is not written from this process any more; \
             release it and resume it from the store"
        );
        self.end_lease(inner).await;
        drop(guard);
        drop(progress);
        Ok(true)
    }

    /// The seq the next event stored for this session will have (`None`: nothing stored).
    async fn stored_next_seq(&self, inner: &Inner) -> Result<Option<u64>> {
        let probe = self.session.id().clone();
        let positions =
            blocking(&inner.backend, move |backend| backend.positions(&[probe], &CancellationToken::new())).await?;
        Ok(positions.first().map(|position| position.next_seq))
    }

    /// [`end_lease`](Self::end_lease) under the id's lock, if this writer is fenced.
    async fn end_lease_if_fenced(&self, inner: &Inner) {
        if self.fence_error().is_some() {
            let _guard = inner.lock_id(self.session.id()).await;
            self.end_lease(inner).await;
        }
    }

    /// Ends the writer lease of a copy the fence stopped: it can never be written again (its
    /// writes start behind the stored log, which only grows), so it no longer keeps its session
    /// "held" for other processes, whose followers then see only the writer that took it over,
    /// and let go of it when that writer does. The binding stays until the copy is released.
    /// The caller holds the id's lock; a lease is ended only while this copy owns the id's state
    /// (after a release, a newer copy's lease is that copy's).
    async fn end_lease(&self, inner: &Inner) {
        let owned = inner.states.lock().get(self.session.id()).is_some_and(|state| state.is_owned_by(&self.session));
        if !owned {
            return;
        }
        let id = self.session.id().clone();
        // Ending a lease cannot fail; the blocking pool only keeps its I/O off the runtime.
        let ended: Result<()> = blocking(&inner.backend, move |backend| {
            backend.end_lease(&id);
            Ok(())
        })
        .await;
        drop(ended);
    }

    /// Binds the session to its stored log (its first write), under the progress lock.
    async fn bind(&self, live: &LiveSessions, progress: &mut Progress) -> Result<()> {
        // The window that brought this write here is over: an event that comes while the
        // binding writes opens the next one, as during any write.
        self.pending.lock().timer_armed = false;
        if let Err(err) = live.bind(&self.session).await {
            // The events stay buffered; the next event opens a window again, as after any
            // failed write.
            self.pending.lock().paused = true;
            // A first write that met the fence (the binding took the lease before it).
            let err = self.fence_on(&live.inner, err);
            self.end_lease_if_fenced(&live.inner).await;
            return Err(err);
        }
        progress.initialized = true;
        Ok(())
    }

    /// The fence's error, if this writer is fenced.
    fn check_fence(&self) -> Result<()> {
        match self.pending.lock().fenced {
            Some(fence) => {
                Err(PersistenceError::fenced(self.session.id(), fence.write, fence.seq, fence.stored_next_seq))
            }
            None => Ok(()),
        }
    }

    /// The fence's error, if this writer is fenced.
    fn fence_error(&self) -> Option<PersistenceError> {
        self.check_fence().err()
    }

    /// Fences this writer if `err` says another writer moved its log on (which no retry heals);
    /// answers the error to report.
    fn fence_on(&self, inner: &Inner, err: PersistenceError) -> PersistenceError {
        let PersistenceError::Fenced { write, seq, stored_next_seq, .. } = err else { return err };
        if !inner.is_stale(&self.session) {
            return err;
        }
        let reason = err.to_string();
        let n_unwritten = {
            let mut pending = self.pending.lock();
            pending.fenced = Some(Fence { write, seq, stored_next_seq });
            pending.events.len()
        };
        tracing::warn!(
            session = %self.session.id(),
            reason = %reason,
            unwritten = n_unwritten,
            "a live session's write met the writer fence: it is not written from this process any more; \
             release it and resume it from the store"
        );
        err
    }
}
