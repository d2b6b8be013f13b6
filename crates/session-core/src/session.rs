//! `Session`: one append-only event log with its surface, shared as `Arc<Session>`.
//!
//! Appends follow reference 01 §2.1: every check runs before the event enters the log, so a
//! rejected append changes nothing. A session attached to a [`SessionStore`] tells the store's
//! observers about each committed event, synchronously and in seq order.
//!
//! Locking: an append holds the session's publication lock from the checks through commit and
//! notification (the protocol is in `publication`: one publication at a time, in seq order, and
//! an append from inside an observer of the session fails with [`SessionError::Reentrant`]).
//! `state` guards the log itself and is never held while an observer runs.
//!
//! [`SessionStore`]: crate::SessionStore

use std::{
    collections::HashSet,
    fmt,
    sync::{Arc, Weak},
};

use parking_lot::{RwLock, RwLockUpgradableReadGuard};
use serde::Deserialize;
use serde_json::Value;

use crate::{
    Clock, END_SEED, EventType, JsonData, SessionError, SessionEvent, SessionHeader, SessionId,
    json::check_lossless_text,
    messages::check_seed_event_shape,
    mutations::{CommitOrder, carries_receipts, check_file_mutations, file_mutation_orders},
    publication::{AfterAnnounce, Held, Publication},
    storable::{KnownTypes, check_storable_shape},
    surface::{SurfaceIntent, SurfacePlan, SurfaceState},
    view::{Field, object_text, present},
};

/// One session: an immutable header and an append-only log whose `seq` equals the index.
pub struct Session {
    id: SessionId,
    header: Arc<SessionHeader>,
    clock: Arc<dyn Clock>,
    /// The event types this session accepts.
    known: KnownTypes,
    first_live_seq: u64,
    /// The `Arc` this session lives in, to hand observers an `&Arc<Session>`.
    this: Weak<Session>,
    state: RwLock<LogState>,
    /// The publication lock and the store this session is live in.
    publication: Publication,
}

#[derive(Debug, Default)]
struct LogState {
    log: Vec<Arc<SessionEvent>>,
    /// The snapshot `events()` last handed out; dropped by the next append.
    snapshot: Option<Arc<[Arc<SessionEvent>]>>,
    surface: SurfaceState,
    turn: TurnState,
    mutation_orders: HashSet<CommitOrder>,
}

/// The last turn boundary of the log.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
enum TurnState {
    #[default]
    Closed,
    /// A `turn/start` is the last boundary; `turn` is its number when it is a safe integer.
    Open { turn: Option<u64> },
}

#[derive(Deserialize)]
struct TurnView<'a> {
    #[serde(default, borrow, deserialize_with = "present")]
    turn: Field<'a>,
}

impl LogState {
    fn next_seq(&self) -> u64 {
        self.log.len() as u64
    }

    /// Checks that no commit order of the candidate was used before (in this event included).
    fn check_orders(&self, orders: &[CommitOrder]) -> Result<(), CommitOrder> {
        let mut pending = HashSet::with_capacity(orders.len());
        for &order in orders {
            if self.mutation_orders.contains(&order) || !pending.insert(order) {
                return Err(order);
            }
        }
        Ok(())
    }

    /// Appends an event whose every check has passed.
    fn commit(&mut self, event: Arc<SessionEvent>, plan: SurfacePlan, orders: Vec<CommitOrder>) {
        assert_eq!(event.seq, self.next_seq(), "a committed event's seq equals its index");
        self.surface.commit(plan);
        self.mutation_orders.extend(orders);
        match event.kind.as_str() {
            "turn/start" => {
                let view: Option<TurnView<'_>> = object_text(event.data.as_str());
                let turn = view.and_then(|view| view.turn).and_then(|raw| serde_json::from_str::<u64>(raw.get()).ok());
                self.turn = TurnState::Open { turn };
            }
            "turn/end" => self.turn = TurnState::Closed,
            _ => {}
        }
        self.log.push(event);
        self.snapshot = None;
    }
}

impl Session {
    /// Builds a detached session from a header and an optional seed (reference 01 §2.4).
    ///
    /// Each seed event is checked in the reference's order: lossless payload, legacy vocabulary,
    /// current shapes (§1.5), file-mutation receipts, `seq == index`, surface rules, commit-order
    /// uniqueness; the size bound ([`SessionEvent::check_size`]) comes right after the lossless
    /// check. The header is validated next, size bounds included ([`SessionHeader::validate`]). If a seed was given (an empty one counts) and
    /// it does not already end in `session/end-seed`, that marker is appended with the clock's
    /// time. [`Session::first_live_seq`] is the seed length, before the marker.
    ///
    /// The session accepts the reference vocabulary only; [`Session::create_with_types`] takes
    /// a host's own types too.
    pub fn create(
        header: SessionHeader,
        seed: Option<Vec<Arc<SessionEvent>>>,
        clock: Arc<dyn Clock>,
    ) -> Result<Arc<Session>, SessionError> {
        Session::create_with_types(header, seed, clock, KnownTypes::default())
    }

    /// [`Session::create`] for a session that accepts the event types `known` (the storable
    /// check, [`check_storable`](crate::check_storable), runs on every seed event and every append against them).
    pub fn create_with_types(
        header: SessionHeader,
        seed: Option<Vec<Arc<SessionEvent>>>,
        clock: Arc<dyn Clock>,
        known: KnownTypes,
    ) -> Result<Arc<Session>, SessionError> {
        let mut state = LogState::default();
        let seeded = seed.is_some();
        if let Some(seed) = seed {
            state.log.reserve(seed.len() + 1);
            for (index, event) in seed.into_iter().enumerate() {
                admit_seed_event(&mut state, &header.id, &known, event, index as u64)?;
            }
        }
        let first_live_seq = state.next_seq();
        header.validate(&header.id)?;
        if seeded && state.log.last().is_none_or(|last| last.kind != END_SEED) {
            let marker = SessionEvent::new(END_SEED, first_live_seq, clock.now_ms(), JsonData::empty_object());
            let plan = state.surface.plan(&marker).expect("session/end-seed is never surface-eligible");
            state.commit(Arc::new(marker), plan, Vec::new());
        }
        Ok(Arc::new_cyclic(|this| Session {
            id: header.id.clone(),
            header: Arc::new(header),
            clock,
            known,
            first_live_seq,
            this: this.clone(),
            state: RwLock::new(state),
            publication: Publication::default(),
        }))
    }

    /// The session's id (the same as its header's).
    pub fn id(&self) -> &SessionId {
        &self.id
    }

    /// The header, validated when the session was built and immutable since.
    pub fn header(&self) -> &Arc<SessionHeader> {
        &self.header
    }

    /// The event types this session accepts (see [`check_storable`](crate::check_storable)).
    pub fn known_types(&self) -> &KnownTypes {
        &self.known
    }

    /// The clock that stamps each appended event's `time`.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    /// The number of events, which is also the seq the next append gets.
    pub fn len(&self) -> u64 {
        self.state.read().next_seq()
    }

    /// Whether the log holds no event (a session created without a seed, before its first
    /// append).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The first seq written by this lifecycle: the seed length (0 without a seed). Not
    /// persisted; `session/end-seed` is its durable projection.
    pub fn first_live_seq(&self) -> u64 {
        self.first_live_seq
    }

    /// An immutable snapshot of the whole log. The same snapshot is returned until the next
    /// append; a snapshot already handed out never grows.
    pub fn events(&self) -> Arc<[Arc<SessionEvent>]> {
        let state = self.state.upgradable_read();
        if let Some(snapshot) = &state.snapshot {
            return Arc::clone(snapshot);
        }
        let mut state = RwLockUpgradableReadGuard::upgrade(state);
        let snapshot: Arc<[Arc<SessionEvent>]> = state.log.iter().cloned().collect();
        state.snapshot = Some(Arc::clone(&snapshot));
        snapshot
    }

    /// The events with `seq >= from_seq` (empty at or past the end).
    pub fn events_from(&self, from_seq: u64) -> Vec<Arc<SessionEvent>> {
        let state = self.state.read();
        let start = usize::try_from(from_seq).unwrap_or(usize::MAX).min(state.log.len());
        state.log[start..].to_vec()
    }

    /// The event at `seq`, or `None` past the end of the log.
    pub fn event(&self, seq: u64) -> Option<Arc<SessionEvent>> {
        let idx = usize::try_from(seq).ok()?;
        self.state.read().log.get(idx).cloned()
    }

    /// The latest event, or `None` for an empty log.
    pub fn last_event(&self) -> Option<Arc<SessionEvent>> {
        self.state.read().log.last().cloned()
    }

    /// The number of the open turn: `Some` when the last `turn/start` is not yet followed by a
    /// `turn/end` and carries an integer `turn`.
    pub fn open_turn(&self) -> Option<u64> {
        match self.state.read().turn {
            TurnState::Open { turn } => turn,
            TurnState::Closed => None,
        }
    }

    /// Whether the last turn boundary of the log is a `turn/start`.
    pub fn has_open_turn(&self) -> bool {
        self.state.read().turn != TurnState::Closed
    }

    /// The surface nodes (event seqs) in model-visible order.
    pub fn surface_nodes(&self) -> Vec<u64> {
        self.state.read().surface.nodes().to_vec()
    }

    /// How many surface replacements have been applied to the log; it changes exactly when an
    /// append replaces surface nodes, so a cache derived from the surface can key on it.
    pub fn replace_generation(&self) -> u64 {
        self.state.read().surface.replace_generation()
    }

    /// Whether the session is live in a store (its appends are published).
    pub fn is_attached(&self) -> bool {
        self.publication.store().is_some()
    }

    /// Appends one event with a JSON payload. See [`Session::append_data`].
    pub fn append(
        &self,
        kind: impl Into<EventType>,
        data: &Value,
        surface: Option<SurfaceIntent>,
    ) -> Result<Arc<SessionEvent>, SessionError> {
        let kind = kind.into();
        match JsonData::from_value(data) {
            Ok(data) => self.append_checked(kind, data, surface),
            Err(source) => Err(SessionError::NotSerializable { kind, source }),
        }
    }

    /// Appends one event (reference 01 §2.1) and returns it as committed, with its `seq` and
    /// `time`. Surface-eligible types need a `surface` intent; other types must not carry one.
    ///
    /// Every check runs before the commit; a rejected append leaves the log unchanged. An event
    /// whose stamped record is over [`crate::MAX_EVENT_BYTES`] is refused with
    /// [`SessionError::TooLarge`]. When the session is live in a store, the store's observers
    /// are told after the commit, before this returns; their failures are logged and never fail
    /// the append.
    pub fn append_data(
        &self,
        kind: impl Into<EventType>,
        data: JsonData,
        surface: Option<SurfaceIntent>,
    ) -> Result<Arc<SessionEvent>, SessionError> {
        let kind = kind.into();
        if let Err(source) = check_lossless_text(data.as_str()) {
            return Err(SessionError::NotSerializable { kind, source });
        }
        self.append_checked(kind, data, surface)
    }

    fn append_checked(
        &self,
        kind: EventType,
        data: JsonData,
        surface: Option<SurfaceIntent>,
    ) -> Result<Arc<SessionEvent>, SessionError> {
        let (surface_op, source_event_seqs) = match surface {
            Some(intent) => (Some(intent.op), intent.source_event_seqs.map(Vec::into_boxed_slice)),
            None => (None, None),
        };
        let mut event = SessionEvent { kind, seq: 0, time: 0, data, source_event_seqs, surface_op, ignorable: false };
        // Step 2: the storable check (retired vocabulary, receipts, markers, legacy and message
        // shapes, known types), so nothing a reader would refuse is ever acknowledged. It runs
        // before the publication lock; the size needs the stamped envelope and comes later.
        // Its refusal names the seq the event would have had.
        event.seq = self.len();
        check_storable_shape(&self.id, &event, &self.known)
            .map_err(|refused| SessionError::Unstorable(Box::new(refused)))?;
        let orders = file_mutation_orders(&event.data);

        // Step 4: one publication at a time; none from inside an observer of this session.
        let publication = self.publication.lock();
        if publication.is_publishing() {
            return Err(SessionError::Reentrant);
        }

        // Steps 5 and 6: stamp the event and plan its surface transition without mutating.
        let state = self.state.upgradable_read();
        event.seq = state.next_seq();
        event.time = self.clock.now_ms();
        // The size is known once the envelope is stamped: a reader could not hold a bigger record.
        event.check_size()?;
        let invalid = |event: &SessionEvent, message: String| SessionError::InvalidEvent {
            kind: event.kind.clone(),
            seq: event.seq,
            message,
        };
        let plan = state.surface.plan(&event).map_err(|message| invalid(&event, message))?;
        if let Err(order) = state.check_orders(&orders) {
            let message =
                format!("session event \"{}\" reuses file mutation commit order {}", event.kind, order.value());
            return Err(invalid(&event, message));
        }

        // Step 7: the store to notify is resolved before the commit.
        let store = publication.store();

        // Step 8: commit.
        let event = Arc::new(event);
        let mut state = RwLockUpgradableReadGuard::upgrade(state);
        state.commit(Arc::clone(&event), plan, orders);
        drop(state);

        // Step 9: notify, still holding the publication lock so notifications stay in seq order.
        if let Some(store) = store {
            let session = self.arc();
            let ((), after) = publication.announce(|| store.notify_event(&session, &event));
            if after == AfterAnnounce::Detach {
                store.finish_detach(&session, &publication);
            }
        }
        Ok(event)
    }

    /// Holds this session's append order until the guard drops: appends from other threads wait,
    /// while this thread's appends go through (the lock is the session's own, re-entrant
    /// publication lock). [`AppendOrder::next_seq`] therefore stays the seq this thread's next
    /// append gets, so a caller can check an expected position and append a whole batch at it.
    /// Other sessions are not affected. Do not hold it across an `.await`: it is a thread's lock.
    pub fn append_order(&self) -> AppendOrder<'_> {
        AppendOrder { session: self, _publication: self.publication.lock() }
    }

    fn arc(&self) -> Arc<Session> {
        self.this.upgrade().expect("a Session is only reachable through its Arc")
    }

    pub(crate) fn publication(&self) -> &Publication {
        &self.publication
    }
}

/// A held append order of one session (see [`Session::append_order`]).
#[must_use = "the order is released as soon as the guard drops"]
pub struct AppendOrder<'a> {
    session: &'a Session,
    _publication: Held<'a>,
}

impl AppendOrder<'_> {
    /// The seq this thread's next append gets: no other thread appends while the guard lives.
    pub fn next_seq(&self) -> u64 {
        self.session.len()
    }
}

impl fmt::Debug for AppendOrder<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AppendOrder").field("session", &self.session.id).finish_non_exhaustive()
    }
}

/// Checks one seed event at `index` and commits it (reference 01 §2.4 step 1).
fn admit_seed_event(
    state: &mut LogState,
    session: &SessionId,
    known: &KnownTypes,
    event: Arc<SessionEvent>,
    index: u64,
) -> Result<(), SessionError> {
    let seed_error = |message: String| SessionError::InvalidSeed { index, message };
    let subject = || format!("seed event at index {index}");
    if check_lossless_text(event.data.as_str()).is_err() {
        return Err(seed_error(format!("{} is not losslessly JSON-serializable", subject())));
    }
    event.check_size()?;
    if event.kind == "request/header-delta" {
        return Err(seed_error(format!("{} uses unsupported legacy request/header-delta format", subject())));
    }
    check_seed_event_shape(&event, index).map_err(seed_error)?;
    if carries_receipts(&event.kind) {
        check_file_mutations(&event.data, &subject()).map_err(seed_error)?;
    }
    event.check_legacy_at(&subject()).map_err(seed_error)?;
    // The rest of the storable check: what a reader refuses that the reference's seed rules let
    // through (retired `mode/set`, unknown types).
    check_storable_shape(session, &event, known)
        .map_err(|refused| seed_error(format!("{}: {}", subject(), refused.message)))?;
    if event.seq != index {
        return Err(SessionError::SeedNotContiguous { index, seq: event.seq });
    }
    let plan = state.surface.plan(&event).map_err(|message| SessionError::SeedSurface { index, message })?;
    let orders = file_mutation_orders(&event.data);
    if let Err(order) = state.check_orders(&orders) {
        return Err(seed_error(format!("{} reuses file mutation commit order {}", subject(), order.value())));
    }
    state.commit(event, plan, orders);
    Ok(())
}

impl fmt::Debug for Session {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Session")
            .field("id", &self.id)
            .field("len", &self.len())
            .field("first_live_seq", &self.first_live_seq)
            .finish_non_exhaustive()
    }
}
