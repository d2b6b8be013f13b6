//! `SessionStore`: the in-memory registry of live sessions, its observers and flush hooks, and
//! fork (reference 01 §2.5–2.6).
//!
//! Observers are told synchronously: `Created` when a session is published, `Event` after each
//! committed append, `Disposed` when an announced session leaves the store. A failing or
//! panicking observer is logged and contained, except on `Created`, where it vetoes the
//! publication. No store lock is held while an observer runs, so observers may call back into
//! the store and the session.
//!
//! Detach is deferred when requested from inside a publication of the same session on the same
//! thread (an observer detaching the session it is being told about): the session stays live
//! until that publication unwinds, then leaves with its `Disposed`. A detach from another thread
//! waits for the running publication to finish. Either way `Disposed` is the last thing an
//! observer hears about a session lifecycle (the protocol, with its interleaving tests, is the
//! `publication` module). An observer must not block on another session's publication, which
//! could deadlock two sessions detaching each other.

use std::{
    collections::HashMap,
    fmt,
    panic::{AssertUnwindSafe, catch_unwind},
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
};

use futures::{
    FutureExt,
    future::{self, BoxFuture},
};
use parking_lot::{Mutex, RwLock};

use crate::{
    Clock, ForkError, ForkErrorCode, HeaderError, HeaderMeta, KnownTypes, ObserverError, Session, SessionError,
    SessionEvent, SessionHeader, SessionId, StoreError, panic_text,
    publication::{AfterAnnounce, Held},
    view::{Field, object_text, present, string},
};

/// What an observer is told.
#[derive(Debug, Clone, Copy)]
pub enum StoreEvent<'a> {
    /// The session was published. An error (or panic) vetoes the publication.
    Created(&'a Arc<Session>),
    /// An append was committed.
    Event(&'a Arc<Session>, &'a Arc<SessionEvent>),
    /// An announced session left the store; it is detached now.
    Disposed(&'a Arc<Session>),
}

/// A synchronous listener to the store's lifecycle and append feed.
///
/// Implemented for every `Fn(&StoreEvent<'_>) -> Result<(), ObserverError>`, so a closure is an
/// observer.
pub trait StoreObserver: Send + Sync {
    /// Handles one lifecycle event, on the thread that caused it and before that call returns.
    ///
    /// An error or a panic on [`StoreEvent::Created`] vetoes the publication
    /// ([`StoreError::CreationVetoed`]); on any other event it is logged and contained, and
    /// later observers are still told.
    fn notify(&self, event: &StoreEvent<'_>) -> Result<(), ObserverError>;
}

impl<F> StoreObserver for F
where
    F: Fn(&StoreEvent<'_>) -> Result<(), ObserverError> + Send + Sync,
{
    fn notify(&self, event: &StoreEvent<'_>) -> Result<(), ObserverError> {
        self(event)
    }
}

/// An awaited durability checkpoint run by [`SessionStore::flush`].
///
/// Implemented for every `Fn(Arc<Session>) -> BoxFuture<'static, Result<(), ObserverError>>`.
pub trait FlushHook: Send + Sync {
    /// Makes everything appended to `session` so far durable, or fails. The returned future runs
    /// concurrently with the other hooks'; an error or a panic becomes
    /// [`StoreError::FlushFailed`].
    fn flush(&self, session: Arc<Session>) -> BoxFuture<'static, Result<(), ObserverError>>;
}

impl<F> FlushHook for F
where
    F: Fn(Arc<Session>) -> BoxFuture<'static, Result<(), ObserverError>> + Send + Sync,
{
    fn flush(&self, session: Arc<Session>) -> BoxFuture<'static, Result<(), ObserverError>> {
        self(session)
    }
}

/// Names a registered observer or flush hook, for removal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ObserverId(u64);

/// What a new session starts from.
#[derive(Debug, Clone, Default)]
pub struct CreateOptions {
    /// Events to replay or fork from; `Some(vec![])` counts as a seed (it gets `session/end-seed`).
    pub seed: Option<Vec<Arc<SessionEvent>>>,
    /// The header fields the caller supplies; the store adds `version` and `id`.
    pub meta: HeaderMeta,
}

impl CreateOptions {
    /// The options that make a stored session live again: its stored `header`'s metadata
    /// ([`HeaderMeta::from`], `createdAt` and `seedLength` passed back, never recomputed) and its
    /// stored `events` as the seed, so the live session continues the stored log. (A stored log
    /// without events is seeded with `Some(vec![])`, as a resume always was.)
    pub fn resume(header: &SessionHeader, events: Vec<Arc<SessionEvent>>) -> CreateOptions {
        CreateOptions { seed: Some(events), meta: HeaderMeta::from(header) }
    }
}

/// The registry of live sessions. Share it as `Arc<SessionStore>`.
pub struct SessionStore {
    shared: Arc<StoreShared>,
}

/// The part of the store a live session points back to (weakly).
pub(crate) struct StoreShared {
    clock: Arc<dyn Clock>,
    /// The event types sessions created from now on accept.
    known: RwLock<KnownTypes>,
    registry: Mutex<Registry>,
    observers: RwLock<Listeners<dyn StoreObserver>>,
    flush_hooks: RwLock<Listeners<dyn FlushHook>>,
    next_listener_id: AtomicU64,
}

/// A copy-on-write listener list: a publication clones the `Arc`, not the list.
type Listeners<T> = Arc<[(ObserverId, Arc<T>)]>;

#[derive(Default)]
struct Registry {
    entries: HashMap<SessionId, Entry>,
    /// The last minted `session-<n>` number.
    minted: u64,
    /// Creation order of entries.
    next_ordinal: u64,
}

struct Entry {
    session: Arc<Session>,
    ordinal: u64,
    /// `Created` was (or is being) emitted, so leaving emits `Disposed`.
    announced: bool,
}

/// The error an observer or hook "returns" when it panics.
#[derive(Debug, thiserror::Error)]
#[error("{0} panicked: {1}")]
struct Panicked(&'static str, String);

fn call_observer(observer: &dyn StoreObserver, event: &StoreEvent<'_>) -> Result<(), ObserverError> {
    match catch_unwind(AssertUnwindSafe(|| observer.notify(event))) {
        Ok(result) => result,
        Err(payload) => Err(Box::new(Panicked("observer", panic_text(payload.as_ref())))),
    }
}

impl StoreShared {
    fn observers(&self) -> Listeners<dyn StoreObserver> {
        Arc::clone(&self.observers.read())
    }

    /// Tells every observer about a committed event; failures are logged and contained.
    pub(crate) fn notify_event(&self, session: &Arc<Session>, event: &Arc<SessionEvent>) {
        for (_, observer) in self.observers().iter() {
            if let Err(error) = call_observer(observer.as_ref(), &StoreEvent::Event(session, event)) {
                tracing::warn!(session = %session.id(), seq = event.seq, %error, "session event observer failed");
            }
        }
    }

    fn notify_disposed(&self, session: &Arc<Session>, observers: &[(ObserverId, Arc<dyn StoreObserver>)]) {
        for (_, observer) in observers {
            if let Err(error) = call_observer(observer.as_ref(), &StoreEvent::Disposed(session)) {
                tracing::warn!(session = %session.id(), %error, "session disposed observer failed");
            }
        }
    }

    /// Removes `session` if it is still the live instance for its id, detaches it, and emits
    /// `Disposed` if it was announced, under the session's publication lock (`held`).
    pub(crate) fn finish_detach(&self, session: &Arc<Session>, held: &Held<'_>) -> bool {
        let removed = {
            let mut registry = self.registry.lock();
            match registry.entries.get(session.id()) {
                Some(entry) if Arc::ptr_eq(&entry.session, session) => registry.entries.remove(session.id()),
                _ => None,
            }
        };
        let Some(entry) = removed else { return false };
        held.unbind();
        if entry.announced {
            self.notify_disposed(session, &self.observers());
        }
        true
    }
}

impl SessionStore {
    /// An empty store. `clock` stamps `createdAt` of the sessions it creates and is handed to
    /// each of them to stamp event times.
    ///
    /// Its sessions accept the reference vocabulary only; a host with event types of its own
    /// uses [`SessionStore::with_known_types`], and a coordinator of `session-persistence`
    /// attached to the store gives it the types its reads accept.
    pub fn new(clock: Arc<dyn Clock>) -> SessionStore {
        SessionStore::with_known_types(clock, KnownTypes::default())
    }

    /// An empty store whose sessions accept the event types `known` (the storable check,
    /// [`check_storable`](crate::check_storable), runs on every append against them).
    pub fn with_known_types(clock: Arc<dyn Clock>, known: KnownTypes) -> SessionStore {
        SessionStore {
            shared: Arc::new(StoreShared {
                clock,
                known: RwLock::new(known),
                registry: Mutex::new(Registry::default()),
                observers: RwLock::new(Arc::from([])),
                flush_hooks: RwLock::new(Arc::from([])),
                next_listener_id: AtomicU64::new(1),
            }),
        }
    }

    /// The event types the sessions this store creates accept.
    pub fn known_types(&self) -> KnownTypes {
        self.shared.known.read().clone()
    }

    /// Makes sessions created from now on accept the event types `known`; sessions already in
    /// the store keep the types they were created with.
    pub fn set_known_types(&self, known: KnownTypes) {
        *self.shared.known.write() = known;
    }

    /// The clock the store was built with.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.shared.clock
    }

    fn next_listener_id(&self) -> ObserverId {
        ObserverId(self.shared.next_listener_id.fetch_add(1, Ordering::Relaxed))
    }

    /// Registers an observer; it hears about publications that start after this call.
    pub fn add_observer(&self, observer: Arc<dyn StoreObserver>) -> ObserverId {
        let id = self.next_listener_id();
        let mut observers = self.shared.observers.write();
        *observers = observers.iter().cloned().chain([(id, observer)]).collect();
        id
    }

    /// Unregisters an observer; returns whether it was registered.
    pub fn remove_observer(&self, id: ObserverId) -> bool {
        let mut observers = self.shared.observers.write();
        let before = observers.len();
        *observers = observers.iter().filter(|(observer_id, _)| *observer_id != id).cloned().collect();
        observers.len() != before
    }

    /// Registers a flush hook; it runs in every [`SessionStore::flush`] that starts after this
    /// call.
    pub fn add_flush_hook(&self, hook: Arc<dyn FlushHook>) -> ObserverId {
        let id = self.next_listener_id();
        let mut hooks = self.shared.flush_hooks.write();
        *hooks = hooks.iter().cloned().chain([(id, hook)]).collect();
        id
    }

    /// Unregisters a flush hook; returns whether it was registered. A flush already running
    /// still waits for it.
    pub fn remove_flush_hook(&self, id: ObserverId) -> bool {
        let mut hooks = self.shared.flush_hooks.write();
        let before = hooks.len();
        *hooks = hooks.iter().filter(|(hook_id, _)| *hook_id != id).cloned().collect();
        hooks.len() != before
    }

    /// The live session with this id.
    pub fn get(&self, id: &SessionId) -> Option<Arc<Session>> {
        self.shared.registry.lock().entries.get(id).map(|entry| Arc::clone(&entry.session))
    }

    /// Whether a session with this id is live in the store.
    pub fn contains(&self, id: &SessionId) -> bool {
        self.shared.registry.lock().entries.contains_key(id)
    }

    /// The live sessions in creation order.
    pub fn list(&self) -> Vec<Arc<Session>> {
        let registry = self.shared.registry.lock();
        let mut entries: Vec<&Entry> = registry.entries.values().collect();
        entries.sort_by_key(|entry| entry.ordinal);
        entries.into_iter().map(|entry| Arc::clone(&entry.session)).collect()
    }

    /// Builds and publishes a session: [`SessionStore::prepare`] then [`SessionStore::publish`].
    pub fn create(&self, id: Option<SessionId>, options: CreateOptions) -> Result<Arc<Session>, StoreError> {
        let session = self.prepare(id, options)?;
        self.publish(&session)?;
        Ok(session)
    }

    /// Builds a session without publishing it. Without an id the store mints `session-<n>`
    /// (a per-store counter from 1, skipping live ids). The header gets `version` 0, the id, and
    /// `createdAt` from the clock unless `meta` supplies it.
    pub fn prepare(&self, id: Option<SessionId>, options: CreateOptions) -> Result<Arc<Session>, StoreError> {
        let id = {
            let mut registry = self.shared.registry.lock();
            match id {
                Some(id) if registry.entries.contains_key(&id) => return Err(StoreError::AlreadyExists { id }),
                Some(id) => id,
                None => loop {
                    registry.minted += 1;
                    let candidate = SessionId::from(format!("session-{}", registry.minted));
                    if !registry.entries.contains_key(&candidate) {
                        break candidate;
                    }
                },
            }
        };
        let CreateOptions { seed, meta } = options;
        let created_at = match meta.created_at {
            Some(created_at) => created_at,
            None => u64::try_from(self.shared.clock.now_ms()).map_err(|_| {
                SessionError::from(HeaderError::new("session header createdAt must be a non-negative safe integer"))
            })?,
        };
        let header = SessionHeader::from_meta(id, meta, created_at);
        let known = self.known_types();
        Ok(Session::create_with_types(header, seed, Arc::clone(&self.shared.clock), known)?)
    }

    /// Enters a prepared session into the store and announces it with `Created`, exactly once.
    ///
    /// An observer failing on `Created` vetoes the publication: the session is removed again,
    /// every observer already told `Created` (the failing one included) is told `Disposed`, and
    /// the error is returned.
    pub fn publish(&self, session: &Arc<Session>) -> Result<(), StoreError> {
        let id = session.id().clone();
        // Held through enter and announce, so no append of this session is published before
        // its `Created`.
        let publication = session.publication().lock();
        if publication.is_publishing() {
            return Err(StoreError::AlreadyAnnounced { id });
        }
        {
            let mut registry = self.shared.registry.lock();
            if let Some(entry) = registry.entries.get(&id) {
                return Err(if Arc::ptr_eq(&entry.session, session) {
                    StoreError::AlreadyAnnounced { id }
                } else {
                    StoreError::AlreadyExists { id }
                });
            }
            if !publication.bind(&self.shared) {
                return Err(StoreError::AlreadyAttached { id });
            }
            let ordinal = registry.next_ordinal;
            registry.next_ordinal += 1;
            registry.entries.insert(id.clone(), Entry { session: Arc::clone(session), ordinal, announced: true });
        }

        let observers = self.shared.observers();
        let (veto, after) = publication.announce(|| {
            observers.iter().enumerate().find_map(|(idx, (_, observer))| {
                call_observer(observer.as_ref(), &StoreEvent::Created(session)).err().map(|error| (idx, error))
            })
        });
        if let Some((failed_idx, source)) = veto {
            let removed = {
                let mut registry = self.shared.registry.lock();
                registry.entries.remove(&id)
            };
            debug_assert!(removed.is_some_and(|entry| Arc::ptr_eq(&entry.session, session)));
            publication.unbind();
            self.shared.notify_disposed(session, &observers[..=failed_idx]);
            return Err(StoreError::CreationVetoed { id, source });
        }
        if after == AfterAnnounce::Detach {
            self.shared.finish_detach(session, &publication);
        }
        Ok(())
    }

    /// Removes a live session and tells observers `Disposed`; the session becomes detached (it
    /// keeps its log, and later appends notify no one). Returns `None` if the id is not live.
    ///
    /// Called from inside a publication of that session on the same thread, the removal is
    /// deferred until the publication unwinds (the session is returned at once).
    pub fn detach(&self, id: &SessionId) -> Option<Arc<Session>> {
        let session = self.get(id)?;
        let detached = {
            let publication = session.publication().lock();
            publication.defer_detach() || self.shared.finish_detach(&session, &publication)
        };
        detached.then_some(session)
    }

    /// Runs every flush hook on a live session concurrently and waits for all of them. Returns
    /// the first failure in registration order, else whether any hook ran.
    pub async fn flush(&self, id: &SessionId) -> Result<bool, StoreError> {
        let session = self.get(id).ok_or_else(|| StoreError::NotLive { id: id.clone() })?;
        let hooks = Arc::clone(&self.shared.flush_hooks.read());
        let runs = hooks.iter().map(|(_, hook)| {
            let started = catch_unwind(AssertUnwindSafe(|| hook.flush(Arc::clone(&session))));
            match started {
                Ok(run) => AssertUnwindSafe(run)
                    .catch_unwind()
                    .map(|outcome| {
                        outcome.unwrap_or_else(|payload| {
                            Err(Box::new(Panicked("flush hook", panic_text(payload.as_ref()))) as ObserverError)
                        })
                    })
                    .boxed(),
                Err(payload) => {
                    future::ready(Err(Box::new(Panicked("flush hook", panic_text(payload.as_ref()))) as ObserverError))
                        .boxed()
                }
            }
        });
        let outcomes = future::join_all(runs).await;
        for outcome in outcomes {
            outcome.map_err(|source| StoreError::FlushFailed { id: id.clone(), source })?;
        }
        Ok(!hooks.is_empty())
    }

    /// Forks the live session `source` through the inclusive `boundary` seq (default: its last
    /// event) into a new live child (reference 01 §2.5).
    pub fn fork(
        &self,
        source: &SessionId,
        boundary: Option<i64>,
        child_id: Option<SessionId>,
    ) -> Result<Arc<Session>, ForkError> {
        self.check_child_id(child_id.as_ref())?;
        let live = self
            .get(source)
            .ok_or_else(|| ForkError::new(ForkErrorCode::SessionNotFound, format!("session \"{source}\" not found")))?;
        self.fork_live(&live, boundary, child_id)
    }

    /// [`SessionStore::fork`] from a session object, which must be this store's live instance
    /// for its id.
    pub fn fork_session(
        &self,
        source: &Arc<Session>,
        boundary: Option<i64>,
        child_id: Option<SessionId>,
    ) -> Result<Arc<Session>, ForkError> {
        self.check_child_id(child_id.as_ref())?;
        let id = source.id();
        let live = self
            .get(id)
            .ok_or_else(|| ForkError::new(ForkErrorCode::SessionNotFound, format!("session \"{id}\" not found")))?;
        if !Arc::ptr_eq(&live, source) {
            return Err(ForkError::new(
                ForkErrorCode::SessionNotLive,
                format!("session \"{id}\" is not the live store instance"),
            ));
        }
        self.fork_live(&live, boundary, child_id)
    }

    fn check_child_id(&self, child_id: Option<&SessionId>) -> Result<(), ForkError> {
        match child_id {
            Some(child) if self.contains(child) => {
                Err(ForkError::new(ForkErrorCode::SessionAlreadyExists, format!("session \"{child}\" already exists")))
            }
            _ => Ok(()),
        }
    }

    fn fork_live(
        &self,
        source: &Arc<Session>,
        boundary: Option<i64>,
        child_id: Option<SessionId>,
    ) -> Result<Arc<Session>, ForkError> {
        let seed = fork_seed(source, boundary)?;
        let meta = HeaderMeta {
            cwd: source.header().cwd.clone(),
            parent_session: Some(source.id().clone()),
            seed_length: Some(seed.len() as u64),
            ..HeaderMeta::default()
        };
        self.create(child_id, CreateOptions { seed: Some(seed), meta }).map_err(|error| match error {
            StoreError::AlreadyExists { id } => {
                ForkError::new(ForkErrorCode::SessionAlreadyExists, format!("session \"{id}\" already exists"))
            }
            other => ForkError { code: ForkErrorCode::CreateFailed, message: other.to_string(), source: Some(other) },
        })
    }
}

#[derive(serde::Deserialize)]
struct TurnView<'a> {
    #[serde(default, borrow, deserialize_with = "present")]
    turn: Field<'a>,
}

/// The seed of a fork: `events[0..=boundary]`, checked per reference 01 §2.5 steps 3 and 4.
fn fork_seed(source: &Session, boundary: Option<i64>) -> Result<Vec<Arc<SessionEvent>>, ForkError> {
    let id = source.id();
    let events = source.events();
    let boundary = match boundary {
        Some(boundary) => boundary,
        None => match events.last() {
            None => return Ok(Vec::new()),
            Some(last) => last.seq as i64,
        },
    };
    let invalid = |message: String| ForkError::new(ForkErrorCode::InvalidBoundary, message);
    let boundary = u64::try_from(boundary)
        .ok()
        .filter(|&boundary| boundary <= crate::json::MAX_SAFE_INTEGER)
        .ok_or_else(|| {
            invalid(format!("fork boundary for session \"{id}\" must be a non-negative safe integer, got {boundary}"))
        })?;
    let Some(end) = usize::try_from(boundary).ok().filter(|&end| end < events.len()) else {
        let last = events.last().map_or_else(|| "none".to_owned(), |last| last.seq.to_string());
        return Err(invalid(format!("fork boundary {boundary} does not exist in session \"{id}\" (last seq: {last})")));
    };
    if events[end].seq != boundary {
        return Err(invalid(format!(
            "fork boundary {boundary} does not match a contiguous event seq in session \"{id}\""
        )));
    }
    let prefix = &events[..=end];
    let last_bracket = prefix.iter().rev().find(|event| event.kind == "turn/start" || event.kind == "turn/end");
    if let Some(start) = last_bracket.filter(|event| event.kind == "turn/start") {
        let view: Option<TurnView<'_>> = object_text(start.data.as_str());
        let turn = view.and_then(|view| view.turn);
        let turn = string(turn).map(|text| text.into_owned()).or_else(|| turn.map(|raw| raw.get().to_owned()));
        let turn = turn.unwrap_or_else(|| "undefined".to_owned());
        return Err(ForkError::new(
            ForkErrorCode::OpenTurn,
            format!("fork boundary {boundary} in session \"{id}\" ends inside open turn {turn}"),
        ));
    }
    Ok(prefix.to_vec())
}

impl fmt::Debug for SessionStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let registry = self.shared.registry.lock();
        f.debug_struct("SessionStore")
            .field("live_sessions", &registry.entries.len())
            .field("observers", &self.shared.observers.read().len())
            .field("flush_hooks", &self.shared.flush_hooks.read().len())
            .finish_non_exhaustive()
    }
}

impl fmt::Debug for StoreShared {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StoreShared").finish_non_exhaustive()
    }
}
