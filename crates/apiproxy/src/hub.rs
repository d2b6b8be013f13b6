//! The event hub: fans the store's lifecycle and append feed and the projection change feed out to
//! every WebSocket connection, filtered by the connection's owner, through bounded queues.
//!
//! All state lives under one lock, taken by the store observer (on the appending thread, in seq
//! order per session), by the projection listener, and by `subscribe`. A connection's baseline
//! (`session/subscribed {lastSeq}` per visible live session) is computed and its queue registered
//! under that lock, from the hub's own record of the last seq it fanned out, so there is neither a
//! gap nor a duplicate between `lastSeq` and the first live `session/event`.

use std::{collections::HashMap, fmt, sync::Arc};

use parking_lot::Mutex;
use session_core::{ObserverError, SessionEvent, SessionHeader, SessionId, SessionStore, StoreEvent, StoreObserver};
use session_projection::ProjectionChange;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::{
    access::sees,
    wire::{Frame, RpcError},
};

/// Which downlink a connection is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StreamKind {
    /// `events.mux`: session events, subscriptions and projection pushes.
    Mux,
    /// `events.host`: session lifecycle and running status.
    Host,
}

pub(crate) struct Hub {
    state: Mutex<HubState>,
    queue_frames: usize,
    /// Called after a connection subscribes (the follower's wake-up: a session it has not read
    /// while nobody watched it is read now).
    on_subscribe: Mutex<Option<Box<dyn Fn() + Send + Sync>>>,
}

#[derive(Default)]
struct HubState {
    subscribers: Vec<Subscriber>,
    live: HashMap<SessionId, LiveSession>,
    next_id: u64,
}

struct Subscriber {
    id: u64,
    kind: StreamKind,
    owner: Option<String>,
    tx: mpsc::Sender<Arc<Frame>>,
    /// Cancelled when the queue overflowed: the connection must send `stream/error` and close.
    overflow: CancellationToken,
}

struct LiveSession {
    header: Arc<SessionHeader>,
    /// The last seq fanned out (or present at publication); `-1` for an empty log.
    last_seq: i64,
    running: bool,
    /// Written elsewhere (another gateway, or a writer that fenced this gateway's copy): its
    /// events come from the follower's tail reads (`crate::follow`), not from the store's feed.
    remote: bool,
}

/// What [`Hub::deliver_remote`] did with a tail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Delivered {
    /// Every event past the hub's last seq went out; this is the last seq now.
    UpTo(i64),
    /// The hub does not follow the session from the store (it is live here, or not tracked).
    NotFollowed,
}

/// A registered connection: its queue and overflow signal. Dropping it unsubscribes.
pub(crate) struct Subscription {
    hub: Arc<Hub>,
    id: u64,
    pub(crate) frames: mpsc::Receiver<Arc<Frame>>,
    pub(crate) overflow: CancellationToken,
}

impl Drop for Subscription {
    fn drop(&mut self) {
        self.hub.state.lock().subscribers.retain(|subscriber| subscriber.id != self.id);
    }
}

impl fmt::Debug for Subscription {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Subscription").field("id", &self.id).finish_non_exhaustive()
    }
}

impl fmt::Debug for Hub {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.state.lock();
        f.debug_struct("Hub")
            .field("subscribers", &state.subscribers.len())
            .field("live", &state.live.len())
            .finish_non_exhaustive()
    }
}

/// The error a connection that fell behind receives.
pub(crate) fn overflow_error() -> RpcError {
    RpcError::internal("push queue overflow: the client is not reading fast enough")
}

impl Hub {
    pub(crate) fn new(queue_frames: usize) -> Arc<Hub> {
        Arc::new(Hub {
            state: Mutex::new(HubState::default()),
            queue_frames: queue_frames.max(1),
            on_subscribe: Mutex::new(None),
        })
    }

    /// Registers the hub as an observer of `store` and records the sessions already live.
    pub(crate) fn attach(self: &Arc<Self>, store: &SessionStore) -> session_core::ObserverId {
        let id = store.add_observer(Arc::clone(self) as Arc<dyn StoreObserver>);
        let mut state = self.state.lock();
        for session in store.list() {
            state.live.entry(session.id().clone()).or_insert_with(|| LiveSession {
                header: Arc::clone(session.header()),
                last_seq: session.len() as i64 - 1,
                running: session.has_open_turn(),
                remote: false,
            });
        }
        id
    }

    /// Registers a connection and queues its baseline in the same step.
    pub(crate) fn subscribe(self: &Arc<Self>, kind: StreamKind, owner: Option<String>) -> Subscription {
        let mut state = self.state.lock();
        let baseline: Vec<Arc<Frame>> = match kind {
            StreamKind::Host => Vec::new(),
            StreamKind::Mux => {
                let mut visible: Vec<(&SessionId, &LiveSession)> = state
                    .live
                    .iter()
                    .filter(|(_, live)| sees(owner.as_deref(), live.header.owner.as_deref()))
                    .collect();
                visible.sort_by_key(|(_, live)| (live.header.created_at, live.header.id.clone()));
                visible
                    .into_iter()
                    .map(|(id, live)| Arc::new(Frame::session_subscribed(id.as_str(), live.last_seq)))
                    .collect()
            }
        };
        let (tx, frames) = mpsc::channel(self.queue_frames + baseline.len());
        for frame in baseline {
            // The channel was sized for the baseline, so this cannot fail.
            let _ = tx.try_send(frame);
        }
        let id = state.next_id;
        state.next_id += 1;
        let overflow = CancellationToken::new();
        state.subscribers.push(Subscriber { id, kind, owner, tx, overflow: overflow.clone() });
        drop(state);
        if let Some(hook) = &*self.on_subscribe.lock() {
            hook();
        }
        Subscription { hub: Arc::clone(self), id, frames, overflow }
    }

    /// The number of registered connections.
    pub(crate) fn n_subscribers(&self) -> usize {
        self.state.lock().subscribers.len()
    }

    /// Fans out the projection change feed (`session/projection`, with the causing seq).
    pub(crate) fn on_projection(&self, change: &ProjectionChange<'_>) {
        let mut state = self.state.lock();
        // A fenced copy's values are not the stored log's: the follower folds and sends those.
        if state.live.get(change.session.id()).is_some_and(|live| live.remote) {
            return;
        }
        let owner = change.session.header().owner.clone();
        let session_id = change.session.id().as_str();
        fan_out(&mut state, StreamKind::Mux, owner.as_deref(), || {
            Frame::session_projection(session_id, change.key, change.value, change.seq)
        });
    }
}

impl Hub {
    /// Whether `id` is live in this gateway's store (its events come from the store's feed).
    pub(crate) fn is_local(&self, id: &SessionId) -> bool {
        self.state.lock().live.get(id).is_some_and(|live| !live.remote)
    }

    /// The last seq fanned out of a session followed from the store, if it is one.
    pub(crate) fn remote_last_seq(&self, id: &SessionId) -> Option<i64> {
        self.state.lock().live.get(id).filter(|live| live.remote).map(|live| live.last_seq)
    }

    /// Starts following `header`'s session from the store at `last_seq` (what its stored log
    /// held when the follower read its position): `host/session-added` (and, when a turn is
    /// `running` there, `host/session-status`), then the `session/subscribed {lastSeq}` baseline. `false`, and nothing sent, when the hub already
    /// has the session (live here, or followed).
    pub(crate) fn follow_remote(&self, header: Arc<SessionHeader>, last_seq: i64, running: bool) -> bool {
        let mut state = self.state.lock();
        if state.live.contains_key(&header.id) {
            return false;
        }
        state
            .live
            .insert(header.id.clone(), LiveSession { header: Arc::clone(&header), last_seq, running, remote: true });
        let id = header.id.as_str();
        fan_out(&mut state, StreamKind::Host, header.owner.as_deref(), || {
            Frame::host_session_added(&header, !running && last_seq < 0)
        });
        if running {
            // Followed from inside a turn whose start it will not send: its status says so.
            fan_out(&mut state, StreamKind::Host, header.owner.as_deref(), || Frame::host_session_status(id, true));
        }
        fan_out(&mut state, StreamKind::Mux, header.owner.as_deref(), || Frame::session_subscribed(id, last_seq));
        true
    }

    /// A session live here whose stored log another writer moved on (this copy is fenced): its
    /// subscribers get a fresh baseline at `durable_last_seq`, what this gateway stored of it
    /// ("drop what you hold past lastSeq"), and from then on the store's events, through the
    /// follower. `running` is whether a turn runs at that seq, when known: a turn the copy
    /// started or ended past it is not the log's, and its host clients hear the change.
    /// `false` when the copy of `header` is not live here (a newer copy of the id, resumed since,
    /// is not this one).
    pub(crate) fn fence_local(
        &self,
        header: &Arc<SessionHeader>,
        durable_last_seq: i64,
        running: Option<bool>,
    ) -> bool {
        let id = &header.id;
        let mut state = self.state.lock();
        let Some(live) = state.live.get_mut(id).filter(|live| !live.remote && Arc::ptr_eq(&live.header, header)) else {
            return false;
        };
        live.remote = true;
        live.last_seq = durable_last_seq;
        let changed = running.filter(|running| *running != live.running);
        if let Some(running) = changed {
            live.running = running;
        }
        let owner = live.header.owner.clone();
        if let Some(running) = changed {
            fan_out(&mut state, StreamKind::Host, owner.as_deref(), || {
                Frame::host_session_status(id.as_str(), running)
            });
        }
        fan_out(&mut state, StreamKind::Mux, owner.as_deref(), || {
            Frame::session_subscribed(id.as_str(), durable_last_seq)
        });
        true
    }

    /// Fans out the events of a followed session's tail that continue what the hub sent, in seq
    /// order: events at or before the last seq sent are skipped, and a gap ends the delivery (the
    /// answer's last seq tells the follower where to read from again).
    pub(crate) fn deliver_remote(&self, id: &SessionId, events: &[Arc<SessionEvent>]) -> Delivered {
        let mut state = self.state.lock();
        let Some(live) = state.live.get(id).filter(|live| live.remote) else { return Delivered::NotFollowed };
        let owner = live.header.owner.clone();
        let (mut last_seq, mut running) = (live.last_seq, live.running);
        for event in events {
            let seq = event.seq as i64;
            if seq <= last_seq {
                continue;
            }
            if seq != last_seq + 1 {
                break;
            }
            last_seq = seq;
            let status = match event.kind.as_str() {
                "turn/start" if !running => Some(true),
                "turn/end" if running => Some(false),
                _ => None,
            };
            fan_out(&mut state, StreamKind::Mux, owner.as_deref(), || Frame::session_event(id.as_str(), event));
            if let Some(now) = status {
                running = now;
                fan_out(&mut state, StreamKind::Host, owner.as_deref(), || {
                    Frame::host_session_status(id.as_str(), now)
                });
            }
        }
        if let Some(live) = state.live.get_mut(id) {
            live.last_seq = last_seq;
            live.running = running;
        }
        Delivered::UpTo(last_seq)
    }

    /// `session/projection` frames of a followed session: each changed client value, caused by
    /// the event at `seq`.
    pub(crate) fn project_remote(&self, id: &SessionId, changed: &[(String, serde_json::Value)], seq: u64) {
        let mut state = self.state.lock();
        let Some(live) = state.live.get(id).filter(|live| live.remote) else { return };
        let owner = live.header.owner.clone();
        for (key, value) in changed {
            fan_out(&mut state, StreamKind::Mux, owner.as_deref(), || {
                Frame::session_projection(id.as_str(), key, value, seq)
            });
        }
    }

    /// Stops following a session from the store (its writer let go of it): `host/session-removed`.
    pub(crate) fn unfollow_remote(&self, id: &SessionId) -> bool {
        let mut state = self.state.lock();
        if !state.live.get(id).is_some_and(|live| live.remote) {
            return false;
        }
        let Some(live) = state.live.remove(id) else { return false };
        fan_out(&mut state, StreamKind::Host, live.header.owner.as_deref(), || {
            Frame::host_session_removed(id.as_str())
        });
        true
    }

    /// The queues of the mux connections that see a followed session `id`: the follower waits
    /// for room in them before it hands the hub the next chunk of a long tail, so a burst read
    /// from the store does not overflow a client that keeps up.
    pub(crate) fn mux_queues_of(&self, id: &SessionId) -> Vec<mpsc::Sender<Arc<Frame>>> {
        let state = self.state.lock();
        let Some(live) = state.live.get(id) else { return Vec::new() };
        mux_queues(&state, live.header.owner.as_deref())
    }

    /// The queues of the mux connections that see sessions of `owner`: those a session about to
    /// be followed will send its baseline to.
    pub(crate) fn mux_queues_seeing(&self, owner: Option<&str>) -> Vec<mpsc::Sender<Arc<Frame>>> {
        mux_queues(&self.state.lock(), owner)
    }

    /// Sets what runs after each new subscription.
    pub(crate) fn set_on_subscribe(&self, hook: impl Fn() + Send + Sync + 'static) {
        *self.on_subscribe.lock() = Some(Box::new(hook));
    }

    /// Whether any connection (either downlink) may see session `id`: a followed session nobody
    /// watches is not read (its baseline for a later subscriber is the last seq sent, and the
    /// follower reads on from there).
    pub(crate) fn watched(&self, id: &SessionId) -> bool {
        let state = self.state.lock();
        let Some(live) = state.live.get(id) else { return false };
        let owner = live.header.owner.as_deref();
        state.subscribers.iter().any(|subscriber| sees(subscriber.owner.as_deref(), owner))
    }

    /// The sessions followed from the store.
    pub(crate) fn remote_ids(&self) -> Vec<SessionId> {
        self.state.lock().live.iter().filter(|(_, live)| live.remote).map(|(id, _)| id.clone()).collect()
    }
}

/// The queues of the mux connections that see sessions of `owner`.
fn mux_queues(state: &HubState, owner: Option<&str>) -> Vec<mpsc::Sender<Arc<Frame>>> {
    state
        .subscribers
        .iter()
        .filter(|subscriber| subscriber.kind == StreamKind::Mux && sees(subscriber.owner.as_deref(), owner))
        .map(|subscriber| subscriber.tx.clone())
        .collect()
}

/// Queues a frame (built once, only if someone sees it) for every visible connection of `kind`;
/// a connection whose queue is full is dropped and told so through its overflow token.
fn fan_out(state: &mut HubState, kind: StreamKind, session_owner: Option<&str>, frame: impl FnOnce() -> Frame) {
    let mut frame = Some(frame);
    let mut built: Option<Arc<Frame>> = None;
    state.subscribers.retain(|subscriber| {
        if subscriber.kind != kind || !sees(subscriber.owner.as_deref(), session_owner) {
            return true;
        }
        let frame = match &built {
            Some(frame) => Arc::clone(frame),
            None => {
                // Invariant: this arm runs only while the cached frame is unset, and sets it.
                let made = Arc::new((frame.take().expect("a frame is built at most once"))());
                built = Some(Arc::clone(&made));
                made
            }
        };
        match subscriber.tx.try_send(frame) {
            Ok(()) => true,
            Err(mpsc::error::TrySendError::Full(_)) => {
                tracing::warn!(subscriber = subscriber.id, "a WebSocket client fell behind; closing it");
                subscriber.overflow.cancel();
                false
            }
            // The connection is gone; its subscription is being dropped.
            Err(mpsc::error::TrySendError::Closed(_)) => false,
        }
    });
}

impl StoreObserver for Hub {
    fn notify(&self, event: &StoreEvent<'_>) -> Result<(), ObserverError> {
        let mut state = self.state.lock();
        match event {
            StoreEvent::Created(session) => {
                let header = Arc::clone(session.header());
                let last_seq = session.len() as i64 - 1;
                let running = session.has_open_turn();
                // A session followed from the store that becomes live here (resumed) is written
                // here from now on: its subscribers get this baseline, then the store's feed.
                state.live.insert(
                    session.id().clone(),
                    LiveSession { header: Arc::clone(&header), last_seq, running, remote: false },
                );
                let id = session.id().as_str();
                fan_out(&mut state, StreamKind::Mux, header.owner.as_deref(), || {
                    Frame::session_subscribed(id, last_seq)
                });
                let blank = !session.events().iter().any(|event| event.kind == "turn/start");
                fan_out(&mut state, StreamKind::Host, header.owner.as_deref(), || {
                    Frame::host_session_added(&header, blank)
                });
            }
            StoreEvent::Event(session, event) => {
                let Some(live) = state.live.get_mut(session.id()) else { return Ok(()) };
                // A fenced copy's own events are not the stored log's: the follower sends those.
                if live.remote {
                    return Ok(());
                }
                let seq = event.seq as i64;
                // Already covered by a baseline taken between the commit and this notification.
                if seq <= live.last_seq {
                    return Ok(());
                }
                live.last_seq = seq;
                let status = match event.kind.as_str() {
                    "turn/start" if !live.running => Some(true),
                    "turn/end" if live.running => Some(false),
                    _ => None,
                };
                if let Some(running) = status {
                    live.running = running;
                }
                let owner = live.header.owner.clone();
                let id = session.id().as_str();
                fan_out(&mut state, StreamKind::Mux, owner.as_deref(), || Frame::session_event(id, event));
                if let Some(running) = status {
                    fan_out(&mut state, StreamKind::Host, owner.as_deref(), || Frame::host_session_status(id, running));
                }
            }
            StoreEvent::Disposed(session) => {
                // A newer instance of the same id may already be live; only this one leaves.
                // A fenced copy that leaves goes on being followed from the store.
                let current = state
                    .live
                    .get(session.id())
                    .is_some_and(|live| !live.remote && Arc::ptr_eq(&live.header, session.header()));
                if current && let Some(live) = state.live.remove(session.id()) {
                    let id = session.id().as_str();
                    fan_out(&mut state, StreamKind::Host, live.header.owner.as_deref(), || {
                        Frame::host_session_removed(id)
                    });
                }
            }
        }
        Ok(())
    }
}
