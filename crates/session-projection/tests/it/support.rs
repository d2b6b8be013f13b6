//! Test units and builders shared by the integration tests.
//!
//! The reference fixtures (`test/marks`, `test/count`) come from `projection-testkit`; this file
//! adds the shapes the properties need: accumulating, new-but-equal, a primitive with a `null`
//! sentinel, a unit that fails on demand and a unit that reads one event type only.

use std::{
    panic,
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
};

use parking_lot::Mutex;
use serde_json::{Value, json};
use session_core::{CreateOptions, JsonData, ManualClock, Session, SessionEvent, SessionStore};
use session_projection::{
    ChangeSubscription, ClientView, ProjectionChange, ProjectionRegistry, ProjectionUnit, Registration,
    StoreAttachment, UnitError,
};

pub(crate) fn store() -> Arc<SessionStore> {
    Arc::new(SessionStore::with_known_types(Arc::new(ManualClock::new(T0)), projection_testkit::known_types()))
}

/// A store with a registry attached to it.
pub(crate) struct Fixture {
    pub(crate) store: Arc<SessionStore>,
    pub(crate) registry: Arc<ProjectionRegistry>,
    _attachment: StoreAttachment,
}

pub(crate) fn fixture() -> Fixture {
    let store = store();
    let registry = ProjectionRegistry::new();
    let attachment = registry.attach(&store);
    Fixture { store, registry, _attachment: attachment }
}

impl Fixture {
    pub(crate) fn session(&self, id: &str) -> Arc<Session> {
        self.store.create(Some(id.into()), CreateOptions::default()).expect("a fresh id is accepted")
    }
}

pub(crate) use projection_testkit::{
    Count, DELIBERATE, Marks, MarksState, SumState, T0, append, mark, other, quiet_unit_panics,
};

/// A detached event, for cold folds.
pub(crate) fn event(seq: u64, kind: &str, data: Value) -> SessionEvent {
    SessionEvent::new(kind, seq, T0, JsonData::from_value(&data).expect("test payloads are lossless"))
}

/// The events of `session` as owned values.
pub(crate) fn events_of(session: &Session) -> Vec<SessionEvent> {
    session.events().iter().map(|event| SessionEvent::clone(event)).collect()
}

/// Records the change feed.
#[derive(Default)]
pub(crate) struct Feed {
    pub(crate) frames: Mutex<Vec<(String, String, Value, u64)>>,
}

impl Feed {
    pub(crate) fn subscribe(registry: &Arc<ProjectionRegistry>) -> (Arc<Feed>, ChangeSubscription) {
        let feed = Arc::new(Feed::default());
        let sink = Arc::clone(&feed);
        let subscription = registry.on_changed(move |change: &ProjectionChange<'_>| {
            sink.frames.lock().push((
                change.session.id().to_string(),
                change.key.to_owned(),
                change.value.clone(),
                change.seq,
            ));
        });
        (feed, subscription)
    }

    pub(crate) fn take(&self) -> Vec<(String, String, Value, u64)> {
        std::mem::take(&mut *self.frames.lock())
    }
}

/// `test/sum`: accumulates `n` of every `test/add` and remembers which seqs it folded, so a
/// double or a skipped application shows.
pub(crate) struct Sum;

impl ProjectionUnit for Sum {
    type State = SumState;

    fn key(&self) -> &str {
        "test/sum"
    }

    fn state_version(&self) -> u64 {
        3
    }

    fn init(&self) -> SumState {
        SumState { total: 0, seqs: Vec::new() }
    }

    fn reads(&self) -> Option<&'static [&'static str]> {
        Some(&["test/add"])
    }

    fn apply(&self, state: &SumState, event: &SessionEvent) -> Result<Option<SumState>, UnitError> {
        let n: i64 = event.data.to_value()?["n"].as_i64().ok_or("test/add needs an integer n")?;
        Ok(Some(state.add(event.seq, n)))
    }
}

impl ClientView for Sum {
    type View = SumState;

    fn view(&self, state: &SumState) -> SumState {
        state.clone()
    }
}

/// `test/touch`: on every `test/touch`, returns a new state equal to the old one unless the tag
/// differs (so it "changes" without changing).
pub(crate) struct Touch;

impl ProjectionUnit for Touch {
    type State = Value;

    fn key(&self) -> &str {
        "test/touch"
    }

    fn state_version(&self) -> u64 {
        1
    }

    fn init(&self) -> Value {
        json!({ "tag": "none" })
    }

    fn reads(&self) -> Option<&'static [&'static str]> {
        Some(&["test/touch"])
    }

    fn apply(&self, _state: &Value, event: &SessionEvent) -> Result<Option<Value>, UnitError> {
        Ok(Some(json!({ "tag": event.data.to_value()?["tag"].clone() })))
    }
}

impl ClientView for Touch {
    type View = Value;

    fn view(&self, state: &Value) -> Value {
        state.clone()
    }
}

/// `test/title`: a primitive last-wins state whose "nothing" is `null`; setting the same title
/// again is no change.
pub(crate) struct Title;

impl ProjectionUnit for Title {
    type State = Option<String>;

    fn key(&self) -> &str {
        "test/title"
    }

    fn state_version(&self) -> u64 {
        1
    }

    fn init(&self) -> Option<String> {
        None
    }

    fn reads(&self) -> Option<&'static [&'static str]> {
        Some(&["test/title"])
    }

    fn apply(&self, state: &Option<String>, event: &SessionEvent) -> Result<Option<Option<String>>, UnitError> {
        let next = event.data.to_value()?["title"].as_str().map(str::to_owned);
        Ok((next != *state).then_some(next))
    }
}

impl ClientView for Title {
    type View = Option<String>;

    fn view(&self, state: &Option<String>) -> Option<String> {
        state.clone()
    }
}

/// `test/flaky`: counts events, and fails on an event whose payload says `"fail": "error"` or
/// `"fail": "panic"`.
pub(crate) struct Flaky;

impl ProjectionUnit for Flaky {
    type State = u64;

    fn key(&self) -> &str {
        "test/flaky"
    }

    fn state_version(&self) -> u64 {
        1
    }

    fn init(&self) -> u64 {
        0
    }

    fn apply(&self, state: &u64, event: &SessionEvent) -> Result<Option<u64>, UnitError> {
        match event.data.to_value()?["fail"].as_str() {
            Some("error") => Err(format!("cannot fold event {}", event.seq).into()),
            Some("panic") => panic!("flaky unit hit event {} {DELIBERATE}", event.seq),
            _ => Ok(Some(state + 1)),
        }
    }
}

impl ClientView for Flaky {
    type View = u64;

    fn view(&self, state: &u64) -> u64 {
        *state
    }
}

/// `test/descriptor`: reads only `subagent/descriptor` (the hot identity unit's shape) and counts
/// its `apply` calls.
pub(crate) struct Descriptor {
    pub(crate) applied: Arc<AtomicUsize>,
}

impl Descriptor {
    pub(crate) fn applied(&self) -> usize {
        self.applied.load(Ordering::SeqCst)
    }
}

impl ProjectionUnit for Descriptor {
    type State = Option<Value>;

    fn key(&self) -> &str {
        "test/descriptor"
    }

    fn state_version(&self) -> u64 {
        2
    }

    fn init(&self) -> Option<Value> {
        None
    }

    fn reads(&self) -> Option<&'static [&'static str]> {
        Some(&["subagent/descriptor"])
    }

    fn apply(&self, _state: &Option<Value>, event: &SessionEvent) -> Result<Option<Option<Value>>, UnitError> {
        self.applied.fetch_add(1, Ordering::SeqCst);
        let data = event.data.to_value()?;
        Ok(Some(data["mode"].as_str().map(|mode| json!({ "mode": mode, "seq": event.seq }))))
    }
}

impl ClientView for Descriptor {
    type View = Option<Value>;

    fn view(&self, state: &Option<Value>) -> Option<Value> {
        state.clone()
    }
}

/// `test/fragile-view`: folds like `test/count`, but its view panics once the count reaches 3.
pub(crate) struct FragileView;

impl ProjectionUnit for FragileView {
    type State = u64;

    fn key(&self) -> &str {
        "test/fragile-view"
    }

    fn state_version(&self) -> u64 {
        1
    }

    fn init(&self) -> u64 {
        0
    }

    fn apply(&self, state: &u64, _event: &SessionEvent) -> Result<Option<u64>, UnitError> {
        Ok(Some(state + 1))
    }
}

impl ClientView for FragileView {
    type View = u64;

    fn view(&self, state: &u64) -> u64 {
        assert!(*state < 3, "view cannot render {state} {DELIBERATE}");
        *state
    }
}

/// Registers the property units: last-wins, accumulating, new-but-equal, primitive, host-only.
pub(crate) fn register_property_units(registry: &Arc<ProjectionRegistry>) -> Vec<Registration> {
    vec![
        registry.register(Marks).unwrap(),
        registry.register(Sum).unwrap(),
        registry.register(Touch).unwrap(),
        registry.register(Title).unwrap(),
        registry.register_host_only(Count).unwrap(),
    ]
}
