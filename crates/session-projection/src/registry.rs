//! The projection registry: registration, the change feed, and the live watermark cells driven by
//! a session store's notifications (reference 02 §3–§4, with weaknesses W1–W5 fixed).
//!
//! Cells are kept per session object and advanced together: a session's cells have all folded the
//! log through one watermark, `folded_seq`. Every read first brings them up to the log's current
//! end, so a read of a live session whose cells are current touches no event at all.
//!
//! Only the drive (the store's `Event` notification) emits change-feed entries, so they come in
//! seq order on the appending thread. A read may fold the event being published before the drive
//! sees it; the drive then skips the fold (an event is applied only at `folded_seq + 1`) but still
//! emits the entries for the units whose state changed at that seq.

use std::{
    any::TypeId,
    collections::HashMap,
    fmt,
    panic::{AssertUnwindSafe, catch_unwind},
    sync::{
        Arc, Weak,
        atomic::{AtomicU64, Ordering},
    },
};

use parking_lot::{Mutex, RwLock};
use serde_json::Value;
use session_core::{
    ObserverError, ObserverId, Session, SessionEvent, SessionStore, StoreEvent, StoreObserver, json::MAX_SAFE_INTEGER,
    panic_text,
};

use crate::{
    Checkpoint, ClientView, ProjectionChange, ProjectionUnit, RegisterError, RegisteredUnit, Snapshot, UnitFailure,
    cell::{Cell, Step, checkpoint_of, fold_event, read_view, snapshot_of},
    erased::{Erased, ErasedUnit},
    plan::{Plan, PlanUnit},
};

/// A change-feed subscriber. Called synchronously on the appending thread, after the session's
/// cells are unlocked, so it may read the registry; a panic is contained and logged.
///
/// Implemented for every `Fn(&ProjectionChange<'_>) + Send + Sync`, so a closure is a listener.
pub trait ChangeListener: Send + Sync {
    /// Handles one change: a client-visible unit's new value for a session, at the seq that
    /// caused it. Changes of one session arrive in seq order, and within a seq in registration
    /// order.
    fn changed(&self, change: &ProjectionChange<'_>);
}

impl<F> ChangeListener for F
where
    F: Fn(&ProjectionChange<'_>) + Send + Sync,
{
    fn changed(&self, change: &ProjectionChange<'_>) {
        self(change)
    }
}

/// The process-wide table of projection units and their live cells. Share it as
/// `Arc<ProjectionRegistry>`; attach it to a [`SessionStore`] with [`ProjectionRegistry::attach`].
pub struct ProjectionRegistry {
    entries: Mutex<Entries>,
    /// Rebuilt (under `entries`) on every registration change; readers clone the `Arc`.
    plan: RwLock<Arc<Plan>>,
    sessions: Mutex<SessionMap>,
    listeners: RwLock<Listeners>,
    next_listener_id: AtomicU64,
}

type Listeners = Arc<[(u64, Arc<dyn ChangeListener>)]>;

#[derive(Default)]
struct Entries {
    list: Vec<Entry>,
    next_id: u64,
    generation: u64,
}

struct Entry {
    id: u64,
    key: Arc<str>,
    state_version: u64,
    reads: Option<&'static [&'static str]>,
    unit: Arc<dyn ErasedUnit>,
    refs: usize,
}

/// The cells of every session the registry has read or driven, keyed by the session object's
/// address. The slot's `Weak` keeps that allocation from being reused while the slot exists, so
/// an address names one session object.
struct SessionMap {
    slots: HashMap<usize, Slot>,
    /// Slots of dropped sessions are swept when the map reaches this size.
    sweep_at: usize,
}

struct Slot {
    session: Weak<Session>,
    cells: Arc<Mutex<SessionCells>>,
}

const MIN_SWEEP_AT: usize = 64;

/// One session's cells, parallel to the units of plan `generation`.
struct SessionCells {
    generation: u64,
    unit_ids: Vec<u64>,
    /// Every cell has folded the log through this seq (`-1`: nothing folded yet).
    folded_seq: i64,
    cells: Vec<Cell>,
}

/// Keeps one registration of a key alive; dropping it releases the registration. When the last
/// handle of a key is dropped, the key and all its cells are removed.
#[must_use = "dropping the handle unregisters the unit"]
#[derive(Debug)]
pub struct Registration {
    registry: Weak<ProjectionRegistry>,
    key: Arc<str>,
    id: u64,
}

/// Keeps a change-feed listener subscribed; dropping it unsubscribes.
#[must_use = "dropping the subscription unsubscribes the listener"]
#[derive(Debug)]
pub struct ChangeSubscription {
    registry: Weak<ProjectionRegistry>,
    id: u64,
}

/// Keeps the registry attached to a store as an observer; dropping it detaches the registry.
#[must_use = "dropping the attachment detaches the registry from the store"]
#[derive(Debug)]
pub struct StoreAttachment {
    store: Weak<SessionStore>,
    observer: ObserverId,
}

impl ProjectionRegistry {
    /// An empty registry: no unit, no listener, attached to no store.
    pub fn new() -> Arc<ProjectionRegistry> {
        Arc::new(ProjectionRegistry {
            entries: Mutex::new(Entries::default()),
            plan: RwLock::new(Arc::new(Plan::empty())),
            sessions: Mutex::new(SessionMap { slots: HashMap::new(), sweep_at: MIN_SWEEP_AT }),
            listeners: RwLock::new(Arc::from([])),
            next_listener_id: AtomicU64::new(1),
        })
    }

    /// Registers a client-visible unit. See [`ProjectionRegistry::register_host_only`] for the
    /// sharing rules.
    pub fn register<U: ClientView>(self: &Arc<Self>, unit: U) -> Result<Registration, RegisterError> {
        let (key, state_version, reads) = (Arc::from(unit.key()), unit.state_version(), unit.reads());
        self.register_erased(Arc::new(Erased::client(unit)), key, state_version, reads)
    }

    /// Registers a host-only unit: its state is folded, readable with
    /// [`ProjectionRegistry::state_of`] and checkpointed, but never served nor fed.
    ///
    /// A key already registered is shared (the handle count goes up and the first registrant's
    /// unit keeps serving) if the new unit has the same `state_version`, the same Rust type and
    /// the same visibility; otherwise the registration fails and nothing changes.
    pub fn register_host_only<U: ProjectionUnit>(self: &Arc<Self>, unit: U) -> Result<Registration, RegisterError> {
        let (key, state_version, reads) = (Arc::from(unit.key()), unit.state_version(), unit.reads());
        self.register_erased(Arc::new(Erased::host_only(unit)), key, state_version, reads)
    }

    fn register_erased(
        self: &Arc<Self>,
        unit: Arc<dyn ErasedUnit>,
        key: Arc<str>,
        state_version: u64,
        reads: Option<&'static [&'static str]>,
    ) -> Result<Registration, RegisterError> {
        if state_version > MAX_SAFE_INTEGER {
            return Err(RegisterError::InvalidStateVersion { key: key.to_string(), version: state_version });
        }
        let mut entries = self.entries.lock();
        if let Some(entry) = entries.list.iter_mut().find(|entry| entry.key == key) {
            if entry.state_version != state_version {
                return Err(RegisterError::VersionConflict {
                    key: key.to_string(),
                    registered: entry.state_version,
                    requested: state_version,
                });
            }
            let visibility =
                |unit: &dyn ErasedUnit| if unit.is_client_visible() { "client-visible" } else { "host-only" };
            if entry.unit.unit_type() != unit.unit_type() || entry.unit.is_client_visible() != unit.is_client_visible()
            {
                return Err(RegisterError::UnitMismatch {
                    key: key.to_string(),
                    registered: entry.unit.type_name(),
                    registered_visibility: visibility(entry.unit.as_ref()),
                    requested: unit.type_name(),
                    requested_visibility: visibility(unit.as_ref()),
                });
            }
            entry.refs += 1;
            return Ok(Registration { registry: Arc::downgrade(self), key: Arc::clone(&entry.key), id: entry.id });
        }
        let id = entries.next_id;
        entries.next_id += 1;
        entries.list.push(Entry { id, key: Arc::clone(&key), state_version, reads, unit, refs: 1 });
        self.publish_plan(&mut entries);
        Ok(Registration { registry: Arc::downgrade(self), key, id })
    }

    fn release(&self, id: u64) {
        let mut entries = self.entries.lock();
        let Some(idx) = entries.list.iter().position(|entry| entry.id == id) else { return };
        entries.list[idx].refs -= 1;
        if entries.list[idx].refs == 0 {
            entries.list.remove(idx);
            self.publish_plan(&mut entries);
        }
    }

    fn publish_plan(&self, entries: &mut Entries) {
        entries.generation += 1;
        let units = entries
            .list
            .iter()
            .map(|entry| PlanUnit {
                id: entry.id,
                key: Arc::clone(&entry.key),
                state_version: entry.state_version,
                reads: entry.reads,
                unit: Arc::clone(&entry.unit),
            })
            .collect();
        *self.plan.write() = Arc::new(Plan::new(entries.generation, units));
    }

    pub(crate) fn plan(&self) -> Arc<Plan> {
        Arc::clone(&self.plan.read())
    }

    /// The registered units in registration order (a key removed and registered again moves to
    /// the end).
    pub fn units(&self) -> Vec<RegisteredUnit> {
        self.entries
            .lock()
            .list
            .iter()
            .map(|entry| RegisteredUnit {
                key: Arc::clone(&entry.key),
                state_version: entry.state_version,
                client_visible: entry.unit.is_client_visible(),
                refs: entry.refs,
            })
            .collect()
    }

    /// Subscribes to the change feed: one call per client-visible unit whose state changed at a
    /// committed event of an attached session, in registration order, with the causing seq.
    /// Host-only units, unchanged states and events before the subscription are never fed.
    pub fn on_changed(self: &Arc<Self>, listener: impl ChangeListener + 'static) -> ChangeSubscription {
        let id = self.next_listener_id.fetch_add(1, Ordering::Relaxed);
        let listener: Arc<dyn ChangeListener> = Arc::new(listener);
        let mut listeners = self.listeners.write();
        *listeners = listeners.iter().cloned().chain([(id, listener)]).collect();
        ChangeSubscription { registry: Arc::downgrade(self), id }
    }

    fn unsubscribe(&self, id: u64) {
        let mut listeners = self.listeners.write();
        *listeners = listeners.iter().filter(|(listener_id, _)| *listener_id != id).cloned().collect();
    }

    /// Adds the registry to `store`'s observers: every committed event of a live session then
    /// advances that session's cells, and a disposed session's cells are dropped.
    pub fn attach(self: &Arc<Self>, store: &Arc<SessionStore>) -> StoreAttachment {
        let observer = store.add_observer(Arc::clone(self) as Arc<dyn StoreObserver>);
        StoreAttachment { store: Arc::downgrade(store), observer }
    }

    /// The client values of `session` at its current end (reference 02 §3.5). `as_of_seq` is the
    /// seq of the session's last event.
    ///
    /// Once the session's cells are built, this reads no event: it costs O(units), each client
    /// value computed at most once per change. The first read (or the first after a registration
    /// change) folds the log for the units it has not seen.
    pub fn snapshot(&self, session: &Arc<Session>) -> Snapshot {
        self.read_cells(session, |plan, cells| snapshot_of(plan, &mut cells.cells, cells.folded_seq))
    }

    /// Runs `read` on the client value of unit `key` for `session` (if any) and whether any
    /// registered unit failed there, exactly as [`Self::snapshot`] reports them
    /// (`snapshot.values[key]` and `snapshot.has_failures()`), without copying any value. For a
    /// caller that needs one value and the verdict, such as a listing row per live session.
    /// `read` runs while the session's cells are locked, so it must not call the registry.
    pub fn read_view<R>(&self, session: &Arc<Session>, key: &str, read: impl FnOnce(Option<&Value>, bool) -> R) -> R {
        self.read_cells(session, |plan, cells| read_view(plan, &mut cells.cells, key, read))
    }

    /// Every unit's checkpoint row for `session` at its current end, host-only units included.
    /// The rows are fresh JSON: nothing a caller does to them reaches the cells.
    pub fn checkpoint(&self, session: &Arc<Session>) -> Checkpoint {
        self.read_cells(session, |plan, cells| checkpoint_of(plan, &cells.cells, cells.folded_seq))
    }

    /// The state of unit `key` for `session` as JSON: `None` if `key` is not registered, the
    /// unit's failure if its fold failed or its state cannot be serialized.
    pub fn state_of(&self, session: &Arc<Session>, key: &str) -> Option<Result<Value, UnitFailure>> {
        self.read_cells(session, |plan, cells| {
            let idx = plan.position(key)?;
            let cell = &cells.cells[idx];
            if let Some(failure) = cell.failure() {
                return Some(Err(failure.clone()));
            }
            Some(plan.units[idx].unit.encode(cell.state()))
        })
    }

    /// Reads the typed state of unit `key` for `session` without copying it: `None` if `key` is
    /// not registered by a unit of type `U`, the unit's failure if its fold failed. `read` runs
    /// while the session's cells are locked, so it must not call the registry.
    pub fn read_state<U: ProjectionUnit, R>(
        &self,
        session: &Arc<Session>,
        key: &str,
        read: impl FnOnce(&U::State) -> R,
    ) -> Option<Result<R, UnitFailure>> {
        self.read_cells(session, |plan, cells| {
            let idx = plan.position(key)?;
            if plan.units[idx].unit.unit_type() != TypeId::of::<U>() {
                return None;
            }
            let cell = &cells.cells[idx];
            if let Some(failure) = cell.failure() {
                return Some(Err(failure.clone()));
            }
            let state = cell.state().downcast_ref::<U::State>().expect("a cell's state has its unit's state type");
            Some(Ok(read(state)))
        })
    }

    /// Runs `read` on `session`'s cells brought up to the log's current end.
    fn read_cells<R>(&self, session: &Arc<Session>, read: impl FnOnce(&Plan, &mut SessionCells) -> R) -> R {
        let plan = self.plan();
        let end = session.len() as i64 - 1;
        if plan.units.is_empty() {
            // Nothing to fold and nothing worth keeping: the cut is the log's end.
            return read(&plan, &mut SessionCells { folded_seq: end, ..SessionCells::new(&plan) });
        }
        let slot = self.cells_for(session, &plan);
        let mut cells = slot.lock();
        cells.sync(&plan, session, end);
        read(&plan, &mut cells)
    }

    /// Advances `session`'s cells over the committed `event` and feeds the changes.
    fn drive(&self, session: &Arc<Session>, event: &SessionEvent) {
        let plan = self.plan();
        if plan.units.is_empty() {
            return;
        }
        let listeners = Arc::clone(&self.listeners.read());
        let seq = event.seq as i64;
        let mut changed: Vec<usize> = Vec::new();
        let mut frames: Vec<(Arc<str>, Value)> = Vec::new();
        let slot = self.cells_for(session, &plan);
        {
            let mut cells = slot.lock();
            cells.sync(&plan, session, seq - 1);
            if cells.folded_seq == seq - 1 {
                let id = session.id();
                fold_event(
                    &plan,
                    &mut cells.cells,
                    event,
                    |_| true,
                    |idx, step| match step {
                        Step::Changed => changed.push(idx),
                        Step::Failed => log_failure(id.as_str(), &plan.units[idx], event.seq),
                        Step::Unchanged => {}
                    },
                );
                cells.folded_seq = seq;
            } else if cells.folded_seq == seq {
                // A read folded this event first (it ran while the event was being published);
                // the entries are still owed for the units it changed.
                changed.extend((0..plan.units.len()).filter(|&idx| cells.cells[idx].changed_seq() == Some(event.seq)));
            }
            // Otherwise the cells are past this event (a replayed notification): nothing is owed.
            if !listeners.is_empty() {
                for idx in changed {
                    let unit = &plan.units[idx];
                    match cells.cells[idx].view(unit) {
                        Some(Ok(value)) => frames.push((Arc::clone(&unit.key), value.clone())),
                        Some(Err(failure)) => {
                            tracing::warn!(session = %session.id(), key = &*unit.key, %failure, "session projection view failed");
                        }
                        None => {}
                    }
                }
            }
        }
        for (key, value) in &frames {
            let change = ProjectionChange { session, key, value, seq: event.seq };
            for (_, listener) in listeners.iter() {
                if let Err(payload) = catch_unwind(AssertUnwindSafe(|| listener.changed(&change))) {
                    tracing::warn!(
                        session = %session.id(),
                        key = &**key,
                        seq = event.seq,
                        panic = panic_text(payload.as_ref()),
                        "session projection change listener panicked"
                    );
                }
            }
        }
    }

    /// The cells of `session`, created empty if it has none. A registry without units keeps none.
    fn cells_for(&self, session: &Arc<Session>, plan: &Plan) -> Arc<Mutex<SessionCells>> {
        let address = Arc::as_ptr(session) as usize;
        let mut map = self.sessions.lock();
        if let Some(slot) = map.slots.get(&address) {
            return Arc::clone(&slot.cells);
        }
        if map.slots.len() >= map.sweep_at {
            map.slots.retain(|_, slot| slot.session.strong_count() > 0);
            map.sweep_at = (map.slots.len() * 2).max(MIN_SWEEP_AT);
        }
        let cells = Arc::new(Mutex::new(SessionCells::new(plan)));
        map.slots.insert(address, Slot { session: Arc::downgrade(session), cells: Arc::clone(&cells) });
        cells
    }

    fn forget(&self, session: &Arc<Session>) {
        let address = Arc::as_ptr(session) as usize;
        self.sessions.lock().slots.remove(&address);
    }
}

fn log_failure(session: &str, unit: &PlanUnit, seq: u64) {
    tracing::warn!(session, key = &*unit.key, seq, "session projection unit failed; its key reports the failure");
}

impl SessionCells {
    /// Cells for a session nothing has been folded for: laid out for `plan`, at their seeds.
    fn new(plan: &Plan) -> SessionCells {
        SessionCells {
            generation: plan.generation,
            unit_ids: plan.units.iter().map(|unit| unit.id).collect(),
            folded_seq: -1,
            cells: plan.units.iter().map(|unit| Cell::new(unit.unit.init())).collect(),
        }
    }

    /// Lays the cells out for `plan` and folds them through `through` (clamped to the log).
    fn sync(&mut self, plan: &Plan, session: &Session, through: i64) {
        if self.generation != plan.generation {
            self.relayout(plan, session);
        }
        if self.folded_seq < through {
            let id = session.id().as_str();
            for event in session.events_from((self.folded_seq + 1) as u64) {
                if event.seq as i64 > through {
                    break;
                }
                assert_eq!(event.seq as i64, self.folded_seq + 1, "a session's events are contiguous from seq 0");
                fold_event(
                    plan,
                    &mut self.cells,
                    &event,
                    |_| true,
                    |idx, step| {
                        if step == Step::Failed {
                            log_failure(id, &plan.units[idx], event.seq);
                        }
                    },
                );
                self.folded_seq = event.seq as i64;
            }
        }
    }

    /// Keeps the cells of units still registered, drops the others, and builds the cells of new
    /// units through `folded_seq`.
    fn relayout(&mut self, plan: &Plan, session: &Session) {
        let mut old: HashMap<u64, Cell> = self.unit_ids.drain(..).zip(self.cells.drain(..)).collect();
        let mut fresh = vec![false; plan.units.len()];
        self.cells = plan
            .units
            .iter()
            .enumerate()
            .map(|(idx, unit)| {
                old.remove(&unit.id).unwrap_or_else(|| {
                    fresh[idx] = true;
                    Cell::new(unit.unit.init())
                })
            })
            .collect();
        self.unit_ids = plan.units.iter().map(|unit| unit.id).collect();
        self.generation = plan.generation;
        if self.folded_seq < 0 || !fresh.contains(&true) {
            return;
        }
        let id = session.id().as_str();
        let events = session.events();
        for event in events.iter().take_while(|event| event.seq as i64 <= self.folded_seq) {
            fold_event(
                plan,
                &mut self.cells,
                event,
                |idx| fresh[idx],
                |idx, step| {
                    if step == Step::Failed {
                        log_failure(id, &plan.units[idx], event.seq);
                    }
                },
            );
        }
    }
}

impl StoreObserver for ProjectionRegistry {
    /// Drives the cells on `Event`, drops them on `Disposed`; never fails (a unit's failure is
    /// contained to its key), so it never vetoes a creation.
    fn notify(&self, event: &StoreEvent<'_>) -> Result<(), ObserverError> {
        match event {
            StoreEvent::Created(_) => {}
            StoreEvent::Event(session, event) => self.drive(session, event),
            StoreEvent::Disposed(session) => self.forget(session),
        }
        Ok(())
    }
}

impl Registration {
    /// The key this handle keeps registered.
    pub fn key(&self) -> &str {
        &self.key
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        if let Some(registry) = self.registry.upgrade() {
            registry.release(self.id);
        }
    }
}

impl Drop for ChangeSubscription {
    fn drop(&mut self) {
        if let Some(registry) = self.registry.upgrade() {
            registry.unsubscribe(self.id);
        }
    }
}

impl Drop for StoreAttachment {
    fn drop(&mut self) {
        if let Some(store) = self.store.upgrade() {
            store.remove_observer(self.observer);
        }
    }
}

impl fmt::Debug for ProjectionRegistry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let keys: Vec<Arc<str>> = self.plan().units.iter().map(|unit| Arc::clone(&unit.key)).collect();
        f.debug_struct("ProjectionRegistry")
            .field("keys", &keys)
            .field("sessions", &self.sessions.lock().slots.len())
            .field("listeners", &self.listeners.read().len())
            .finish()
    }
}
