//! The `subagent` identity unit (reference 03 §4.2): last-wins over the whole log, `seq` of the
//! folded descriptor, reset to the `null` sentinel, and the same value live, cold and from a
//! checkpoint row. Also the wire shape of the list rows.

use std::sync::Arc;

use serde_json::{Value, json};
use session_core::{ManualClock, SessionStore};
use session_projection::{CheckpointRows, ProjectionRegistry, ProjectionUnit};
use subagent::{
    Activity, ChildEntry, ChildMode, IdentityState, SUBAGENT_IDENTITY_KEY, SubagentDescendantListEntry,
    SubagentIdentity, SubagentIdentityUnit, SubagentListEntry, SubagentRuntime, SubagentServices,
};

use crate::support::*;

fn registry_with_units() -> (Arc<ProjectionRegistry>, SubagentRuntime) {
    let registry = ProjectionRegistry::new();
    let services = SubagentServices { projections: Some(registry.clone()), ..SubagentServices::default() };
    (registry.clone(), SubagentRuntime::new(services).unwrap())
}

fn restored_identity(registry: &ProjectionRegistry, events: &[Arc<session_core::SessionEvent>]) -> Value {
    let restored = registry.restore(&CheckpointRows::new(), events.iter().map(|event| &**event), 0).unwrap();
    restored.snapshot.values[SUBAGENT_IDENTITY_KEY].clone()
}

/// The pinned example: a valid descriptor, then a malformed one resets to `null`, which survives
/// a JSON round trip as an explicit `null`; an empty log is `null`.
#[test]
fn a_malformed_later_descriptor_resets_to_the_null_sentinel() {
    let store = Arc::new(SessionStore::new(Arc::new(ManualClock::new(5))));
    let (registry, _runtime) = registry_with_units();
    let session = store.create(Some(id("c")), Default::default()).unwrap();
    assert_eq!(registry.snapshot(&session).values[SUBAGENT_IDENTITY_KEY], Value::Null);
    append(&session, "turn/start", json!({"turn": 1}));
    append(&session, "subagent/descriptor", continuable("was valid"));
    assert_eq!(
        registry.snapshot(&session).values[SUBAGENT_IDENTITY_KEY],
        json!({"mode": "continuable", "label": "was valid", "seq": 1})
    );
    append(&session, "subagent/descriptor", json!({"version": 2, "mode": "continuable", "provider": 7}));
    let values = registry.snapshot(&session).values;
    let round_trip: Value = serde_json::from_str(&serde_json::to_string(&values).unwrap()).unwrap();
    assert_eq!(round_trip.as_object().unwrap().get(SUBAGENT_IDENTITY_KEY), Some(&Value::Null));
}

#[test]
fn the_fold_is_last_wins_with_the_descriptor_seq() {
    let (registry, _runtime) = registry_with_units();
    let events = [
        descriptor_event(0, one_shot(None)),
        ev("turn/start", 1, json!({"turn": 1})),
        descriptor_event(2, continuable("second")),
        descriptor_event(3, one_shot(Some("third"))),
    ];
    assert_eq!(restored_identity(&registry, &events[..1]), json!({"mode": "one-shot", "seq": 0}));
    assert_eq!(restored_identity(&registry, &events[..3]), json!({"mode": "continuable", "label": "second", "seq": 2}));
    assert_eq!(restored_identity(&registry, &events), json!({"mode": "one-shot", "label": "third", "seq": 3}));
    let mut foreign = events.to_vec();
    foreign.push(descriptor_event(4, json!({"version": 3, "mode": "continuable", "provider": "p", "label": "l"})));
    assert_eq!(restored_identity(&registry, &foreign), Value::Null);
    foreign.push(descriptor_event(5, continuable("healed")));
    assert_eq!(restored_identity(&registry, &foreign), json!({"mode": "continuable", "label": "healed", "seq": 5}));
}

#[test]
fn the_unit_contract() {
    let unit = SubagentIdentityUnit;
    assert_eq!((unit.key(), unit.state_version()), ("subagent", 2));
    assert_eq!(unit.reads(), Some(&["subagent/descriptor"][..]));
    let state = unit.init();
    assert_eq!(serde_json::to_value(&state).unwrap(), json!({}));
    let other = ev("turn/start", 0, json!({"turn": 1}));
    assert_eq!(unit.apply(&state, &other).unwrap(), None, "other events leave the state unchanged");
    let next = unit.apply(&state, &descriptor_event(7, continuable("x"))).unwrap().unwrap();
    assert_eq!(
        serde_json::to_value(&next).unwrap(),
        json!({"identity": {"mode": "continuable", "label": "x", "seq": 7}})
    );
    let back: IdentityState = serde_json::from_value(serde_json::to_value(&next).unwrap()).unwrap();
    assert_eq!(back, next);
    let reset = unit.apply(&next, &descriptor_event(8, json!("garbage"))).unwrap().unwrap();
    assert_eq!(reset, IdentityState::default());
}

#[test]
fn identity_values_are_read_strictly() {
    let read = |value: Value| SubagentIdentity::from_value(&value);
    assert_eq!(
        read(json!({"mode": "continuable", "label": "l", "seq": 3})),
        Some(SubagentIdentity { mode: ChildMode::Continuable { label: "l".to_owned() }, seq: 3 })
    );
    assert_eq!(
        read(json!({"mode": "one-shot", "seq": 0})),
        Some(SubagentIdentity { mode: ChildMode::OneShot { label: None }, seq: 0 })
    );
    assert_eq!(read(Value::Null), None);
    assert_eq!(read(json!({"mode": "continuable", "seq": 3})), None, "a continuable identity needs a label");
    assert_eq!(read(json!({"mode": "one-shot", "label": null, "seq": 0})), None);
    assert_eq!(read(json!({"mode": "one-shot", "seq": 0, "extra": 1})), None);
    assert_eq!(read(json!({"mode": "one-shot", "seq": -1})), None);
    assert_eq!(read(json!({"mode": "one-shot", "seq": 9007199254740992u64})), None);
    assert_eq!(read(json!({"mode": "one-shot"})), None);
}

/// Live, cold and checkpoint reads serve the same value (one fold authority).
#[test]
fn live_cold_and_checkpoint_reads_agree() {
    let store = Arc::new(SessionStore::new(Arc::new(ManualClock::new(5))));
    let (registry, _runtime) = registry_with_units();
    let session = store.create(Some(id("c")), Default::default()).unwrap();
    append(&session, "turn/start", json!({"turn": 1}));
    append(&session, "subagent/descriptor", one_shot(Some("agree")));
    append(&session, "turn/end", json!({"turn": 1, "reason": {"kind": "completed"}}));
    let live = registry.snapshot(&session);
    let cold = registry.restore(&CheckpointRows::new(), session.events().iter().map(|event| &**event), 0).unwrap();
    let from_rows = registry.view_checkpoint(&registry.checkpoint(&session).rows);
    assert_eq!(live.values, cold.snapshot.values);
    assert_eq!(live.values, from_rows.values);
    assert_eq!(live.values[SUBAGENT_IDENTITY_KEY], json!({"mode": "one-shot", "label": "agree", "seq": 1}));
}

/// The row types serialize exactly as the reference's JSON (key order included) and read back.
#[test]
fn list_rows_have_the_reference_wire_shape() {
    let one_shot = SubagentListEntry::Child(ChildEntry {
        id: id("a"),
        mode: ChildMode::OneShot { label: None },
        activity: Activity::Running,
        // Not part of the JSON: a row read back is `Ready`.
        status: subagent::AgentStatus::Ready,
        has_children: true,
        // Not part of the JSON either.
        timing: None,
    });
    let continuable = SubagentListEntry::Child(ChildEntry {
        id: id("b"),
        mode: ChildMode::Continuable { label: "l".to_owned() },
        activity: Activity::Inactive,
        status: subagent::AgentStatus::Ready,
        has_children: false,
        timing: None,
    });
    let diagnostic = SubagentListEntry::Diagnostic(subagent::DiagnosticEntry {
        id: id("c"),
        reason: subagent::DiagnosticReason::Unavailable,
    });
    let text = serde_json::to_string(&[&one_shot, &continuable, &diagnostic]).unwrap();
    assert_eq!(
        text,
        r#"[{"kind":"child","id":"a","mode":"one-shot","activity":"running","hasChildren":true},{"kind":"child","id":"b","mode":"continuable","label":"l","activity":"inactive","hasChildren":false},{"kind":"diagnostic","id":"c","reason":"unavailable"}]"#
    );
    let back: Vec<SubagentListEntry> = serde_json::from_str(&text).unwrap();
    assert_eq!(back, [one_shot, continuable.clone(), diagnostic]);
    let descendant = SubagentDescendantListEntry { entry: continuable, parent_id: id("p"), depth: 2 };
    let text = serde_json::to_string(&descendant).unwrap();
    assert_eq!(
        text,
        r#"{"kind":"child","id":"b","mode":"continuable","label":"l","activity":"inactive","hasChildren":false,"parentId":"p","depth":2}"#
    );
    assert_eq!(serde_json::from_str::<SubagentDescendantListEntry>(&text).unwrap(), descendant);
    assert_eq!(serde_json::to_value(subagent::DiagnosticReason::Unsupported).unwrap(), json!("unsupported"));
}
