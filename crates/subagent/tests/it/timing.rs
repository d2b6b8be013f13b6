//! The `subagentTiming` unit (reference 03 §4.1, §9.2).

use std::sync::Arc;

use serde_json::{Value, json};
use session_core::{ManualClock, SessionEvent, SessionStore};
use session_projection::{CheckpointRows, ProjectionRegistry, ProjectionUnit};
use subagent::{SubagentRuntime, SubagentServices, SubagentTimingUnit, TimingState};

use crate::support::*;

fn timed(events: &[(&str, i64)]) -> Vec<Arc<SessionEvent>> {
    events
        .iter()
        .enumerate()
        .map(|(seq, (kind, time))| {
            let data = match *kind {
                "subagent/descriptor" => continuable("timed"),
                "turn/start" => json!({"turn": 1}),
                "turn/end" => json!({"turn": 1, "reason": {"kind": "completed"}}),
                _ => json!({}),
            };
            ev_at(kind, seq as u64, *time, data)
        })
        .collect()
}

fn timing_of(events: &[(&str, i64)]) -> Value {
    let registry = ProjectionRegistry::new();
    let _units = subagent::register_units(&registry).unwrap();
    let events = timed(events);
    let restored = registry.restore(&CheckpointRows::new(), events.iter().map(|event| &**event), 0).unwrap();
    restored.snapshot.values["subagentTiming"].clone()
}

/// (1) The runtime registers both units: an empty session shows `subagentTiming` and a `null`
/// identity; once the runtime is gone, neither key is served.
#[test]
fn the_runtime_registers_both_units_for_its_lifetime() {
    let store = Arc::new(SessionStore::new(Arc::new(ManualClock::new(5))));
    let registry = ProjectionRegistry::new();
    let session = store.create(Some(id("s")), Default::default()).unwrap();
    let runtime =
        SubagentRuntime::new(SubagentServices { projections: Some(registry.clone()), ..SubagentServices::default() })
            .unwrap();
    let values = registry.snapshot(&session).values;
    assert_eq!(serde_json::to_value(&values).unwrap(), json!({"subagentTiming": {"settledMs": 0}, "subagent": null}));
    drop(runtime);
    assert!(registry.snapshot(&session).values.is_empty());
    assert!(registry.units().is_empty());
}

/// (2) Every descriptor resets the total; the turn containing it counts from its `turn/start`.
#[test]
fn descriptors_reset_the_total() {
    let events = [
        ("turn/start", 100),
        ("subagent/descriptor", 110),
        ("turn/end", 300),
        ("turn/start", 1000),
        ("subagent/descriptor", 1100),
        ("turn/end", 4100),
        ("turn/start", 10000),
        ("turn/end", 12000),
    ];
    assert_eq!(timing_of(&events), json!({"settledMs": 5100}));
}

/// (3) An open turn, and a turn that ends before it starts counts zero.
#[test]
fn open_turn_and_reversed_boundaries() {
    let events = [
        ("turn/start", 1000),
        ("subagent/descriptor", 1100),
        ("turn/end", 900),
        ("turn/start", 2000),
        ("assistant/chunk", 2500),
    ];
    assert_eq!(timing_of(&events), json!({"settledMs": 0, "active": {"since": 2000, "through": 2500}}));
}

/// (4) Unchanged states are reported as unchanged; a descriptor after a closed turn opens nothing.
#[test]
fn unchanged_events_leave_the_state_alone() {
    let unit = SubagentTimingUnit;
    let init = unit.init();
    assert_eq!(unit.apply(&init, &ev_at("request/context", 0, 5, json!({}))).unwrap(), None);
    assert_eq!(unit.apply(&init, &ev_at("turn/end", 0, 5, json!({}))).unwrap(), None, "nothing pending");
    let seen = TimingState { descriptor_seen: true, ..TimingState::default() };
    assert_eq!(unit.apply(&seen, &ev_at("turn/end", 0, 5, json!({}))).unwrap(), None, "no active interval");
    assert_eq!(unit.apply(&seen, &ev_at("step/start", 0, 5, json!({}))).unwrap(), None);
    assert_eq!(
        timing_of(&[("turn/start", 100), ("turn/end", 200), ("subagent/descriptor", 300)]),
        json!({"settledMs": 0})
    );
    let pending = unit.apply(&init, &ev_at("turn/start", 0, 40, json!({}))).unwrap().unwrap();
    assert_eq!(pending.pending_turn_start, Some(40));
    let dropped = unit.apply(&pending, &ev_at("turn/end", 1, 50, json!({}))).unwrap().unwrap();
    assert_eq!(dropped, init);
}

/// A malformed descriptor resets timing too (the payload is not validated).
#[test]
fn any_descriptor_event_resets_timing() {
    let unit = SubagentTimingUnit;
    let state = TimingState { settled_ms: 700, descriptor_seen: true, ..TimingState::default() };
    let next = unit.apply(&state, &ev_at("subagent/descriptor", 3, 9, json!("not even an object"))).unwrap().unwrap();
    assert_eq!(next, TimingState { settled_ms: 0, descriptor_seen: true, ..TimingState::default() });
}

/// The state's JSON form, strict both ways.
#[test]
fn the_state_round_trips_strictly() {
    let unit = SubagentTimingUnit;
    assert_eq!(unit.key(), "subagentTiming");
    assert_eq!(unit.state_version(), 2);
    let state = TimingState {
        settled_ms: 5,
        active: Some(subagent::ActiveInterval { since: 1, through: 2 }),
        pending_turn_start: None,
        descriptor_seen: true,
    };
    let value = serde_json::to_value(&state).unwrap();
    assert_eq!(value, json!({"settledMs": 5, "active": {"since": 1, "through": 2}, "descriptorSeen": true}));
    assert_eq!(serde_json::from_value::<TimingState>(value).unwrap(), state);
    assert!(serde_json::from_value::<TimingState>(json!({"settledMs": 0, "descriptorSeen": false, "x": 1})).is_err());
}

/// A negative time makes the view refuse: the registry reports a failure for the key.
#[test]
fn a_negative_time_fails_the_view() {
    let registry = ProjectionRegistry::new();
    let _units = subagent::register_units(&registry).unwrap();
    let events = timed(&[("turn/start", -5), ("subagent/descriptor", -4)]);
    let restored = registry.restore(&CheckpointRows::new(), events.iter().map(|event| &**event), 0).unwrap();
    assert!(restored.snapshot.failures.contains_key("subagentTiming"));
    assert!(!restored.snapshot.values.contains_key("subagentTiming"));
}
