//! Test-only projection units and helpers, shared by the integration tests of
//! `session-projection`, `session-projection-cache` and the storage crates' checkpoint tests (a
//! dev-dependency only; nothing ships it).
//!
//! The units mirror the reference fixtures (`test/marks`, `test/count`) plus an accumulating
//! `test/sum` state and a client-visible `test/turns`; each test crate keeps the units whose
//! behaviour is specific to it.

use std::{
    panic,
    sync::{Arc, Once},
};

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use session_core::{JsonData, KnownTypes, ManualClock, Session, SessionEvent, SessionStore};
use session_projection::{ClientView, ProjectionUnit, UnitError};

/// The clock origin of the test stores: 2026-03-02T09:00:00Z.
pub const T0: i64 = 1_772_442_000_000;

/// The event types the projection tests append (a host registers its own types once; a store of
/// [`store`] accepts these).
pub const TEST_EVENT_TYPES: &[&str] = &[
    "test/add",
    "test/bad-state",
    "test/batch",
    "test/blob",
    "test/count",
    "test/descriptor",
    "test/drifting",
    "test/fail",
    "test/flaky",
    "test/forgetful",
    "test/fragile-view",
    "test/huge",
    "test/label",
    "test/mark",
    "test/marks",
    "test/mean",
    "test/n",
    "test/ok",
    "test/other",
    "test/sum",
    "test/ticket",
    "test/title",
    "test/touch",
    "test/turns",
];

/// [`TEST_EVENT_TYPES`] with the reference vocabulary.
pub fn known_types() -> KnownTypes {
    KnownTypes::with_extra(TEST_EVENT_TYPES.iter().copied())
}

/// A store whose sessions accept [`TEST_EVENT_TYPES`], on a manual clock at [`T0`].
pub fn store() -> Arc<SessionStore> {
    Arc::new(SessionStore::with_known_types(Arc::new(ManualClock::new(T0)), known_types()))
}

/// Appends a test event to a live session.
pub fn append(session: &Session, kind: &str, data: Value) -> Arc<SessionEvent> {
    session.append(kind, &data, None).expect("test events are valid")
}

/// Appends a `test/mark` event carrying `marks`.
pub fn mark(session: &Session, marks: &[&str]) -> Arc<SessionEvent> {
    append(session, "test/mark", json!({ "marks": marks }))
}

/// Appends a `test/other` event, which no unit but `test/count` (and the test crates' own
/// units) reads.
pub fn other(session: &Session) -> Arc<SessionEvent> {
    append(session, "test/other", json!({}))
}

/// Marks a panic raised on purpose by a test unit.
pub const DELIBERATE: &str = "(deliberate test panic)";

/// Silences the panics the test units raise on purpose; any other panic still prints.
pub fn quiet_unit_panics() {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        let default = panic::take_hook();
        panic::set_hook(Box::new(move |info| {
            let text = info
                .payload()
                .downcast_ref::<&str>()
                .map(|text| (*text).to_owned())
                .or_else(|| info.payload().downcast_ref::<String>().cloned())
                .unwrap_or_default();
            if !text.contains(DELIBERATE) {
                default(info);
            }
        }));
    });
}

/// The state of [`Marks`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MarksState {
    /// The `marks` of the last `test/mark` event, in payload order.
    pub marks: Vec<String>,
}

#[derive(Deserialize)]
struct MarksPayload {
    marks: Vec<String>,
}

/// `test/marks`: last-wins over `test/mark`, state `{marks} | null`, view defaulting to
/// `{marks: []}` (the reference fixture).
#[derive(Debug)]
pub struct Marks;

impl ProjectionUnit for Marks {
    type State = Option<MarksState>;

    fn key(&self) -> &str {
        "test/marks"
    }

    fn state_version(&self) -> u64 {
        1
    }

    fn init(&self) -> Self::State {
        None
    }

    fn reads(&self) -> Option<&'static [&'static str]> {
        Some(&["test/mark"])
    }

    fn apply(&self, _state: &Self::State, event: &SessionEvent) -> Result<Option<Self::State>, UnitError> {
        let payload: MarksPayload = event.data.parse()?;
        Ok(Some(Some(MarksState { marks: payload.marks })))
    }
}

impl ClientView for Marks {
    type View = Value;

    fn view(&self, state: &Self::State) -> Value {
        json!({ "marks": state.as_ref().map(|state| state.marks.clone()).unwrap_or_default() })
    }
}

/// `test/turns`: client-visible, counts `turn/end` events.
#[derive(Debug)]
pub struct Turns;

impl ProjectionUnit for Turns {
    type State = u64;

    fn key(&self) -> &str {
        "test/turns"
    }

    fn state_version(&self) -> u64 {
        1
    }

    fn init(&self) -> u64 {
        0
    }

    fn apply(&self, state: &u64, event: &SessionEvent) -> Result<Option<u64>, UnitError> {
        Ok((event.kind == "turn/end").then_some(state + 1))
    }
}

impl ClientView for Turns {
    type View = u64;

    fn view(&self, state: &u64) -> u64 {
        *state
    }
}

/// One completed turn as stored events at `seq0` and `seq0 + 1`, for writing a log straight
/// through a persistence.
pub fn turn_events(seq0: u64) -> Vec<Arc<SessionEvent>> {
    let data = |value| JsonData::from_value(&value).expect("plain JSON");
    vec![
        Arc::new(SessionEvent::new("turn/start", seq0, 1, data(json!({"turn": 1})))),
        Arc::new(SessionEvent::new("turn/end", seq0 + 1, 2, data(json!({"turn": 1, "reason": {"kind": "completed"}})))),
    ]
}

/// `test/count`: host-only, counts every event.
#[derive(Debug)]
pub struct Count;

impl ProjectionUnit for Count {
    type State = u64;

    fn key(&self) -> &str {
        "test/count"
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

/// The state of the test crates' `test/sum` units: the running total and the seqs folded, so a
/// double or a skipped application shows.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SumState {
    /// The sum of the numbers folded so far.
    pub total: i64,
    /// The seqs of the events folded, in fold order.
    pub seqs: Vec<u64>,
}

impl SumState {
    /// The state after folding `n` from the event at `seq`.
    pub fn add(&self, seq: u64, n: i64) -> SumState {
        let mut seqs = self.seqs.clone();
        seqs.push(seq);
        SumState { total: self.total + n, seqs }
    }
}
