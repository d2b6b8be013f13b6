//! Unit tests of the private streaming sinks: a scan that starts over (the log changed on disk
//! while it was read) must leave no trace of the abandoned pass, and a finished cold fold keeps
//! only its verdict.

use std::sync::{
    Arc,
    atomic::{AtomicUsize, Ordering},
};

use serde_json::{Value, json};
use session_core::{JsonData, SessionEvent, SessionId};
use session_persistence::ScanSink;
use session_projection::ProjectionRegistry;

use crate::{
    ChildMode, SubagentIdentity,
    listing::{ColdFold, Verdict},
    register_units,
    resume::DescriptorEvents,
};

fn event(kind: &str, seq: u64, data: Value) -> Arc<SessionEvent> {
    Arc::new(SessionEvent::new(kind, seq, 10, JsonData::from_value(&data).unwrap()))
}

fn descriptor(seq: u64, label: &str) -> Arc<SessionEvent> {
    event("subagent/descriptor", seq, json!({"version": 2, "mode": "continuable", "provider": "p", "label": label}))
}

#[test]
fn a_restarted_cold_fold_forgets_the_abandoned_pass() {
    let registry = ProjectionRegistry::new();
    let _units = register_units(&registry).unwrap();
    let mut sink = ColdFold::new(&registry, &SessionId::from("c"));
    sink.event(event("turn/start", 0, json!({"turn": 1}))).unwrap();
    sink.event(descriptor(1, "abandoned")).unwrap();
    assert!(sink.restart());
    sink.event(descriptor(0, "fresh")).unwrap();
    assert_eq!(identity(sink), SubagentIdentity { mode: ChildMode::Continuable { label: "fresh".to_owned() }, seq: 0 });
}

fn identity(sink: ColdFold) -> SubagentIdentity {
    match sink.verdict() {
        Ok((Verdict::Identity(identity), _)) => identity,
        Ok((Verdict::Absent, _)) => panic!("no identity"),
        Ok((Verdict::Failed, _)) => panic!("a unit failed"),
        Err(error) => panic!("{error}"),
    }
}

/// Unit states alive in this process, counted by [`Tracked`].
static TRACKED_ALIVE: AtomicUsize = AtomicUsize::new(0);

/// A host unit whose every state counts itself alive until dropped.
struct TrackedUnit;

#[derive(serde::Serialize, serde::Deserialize)]
struct Tracked {
    #[serde(skip)]
    _alive: Alive,
}

/// Counted alive from `new` until dropped.
struct Alive(());

impl Alive {
    fn new() -> Alive {
        TRACKED_ALIVE.fetch_add(1, Ordering::SeqCst);
        Alive(())
    }
}

impl Default for Alive {
    fn default() -> Alive {
        Alive::new()
    }
}

impl Drop for Alive {
    fn drop(&mut self) {
        TRACKED_ALIVE.fetch_sub(1, Ordering::SeqCst);
    }
}

impl session_projection::ProjectionUnit for TrackedUnit {
    type State = Tracked;

    fn key(&self) -> &str {
        "tracked"
    }

    fn state_version(&self) -> u64 {
        1
    }

    fn init(&self) -> Tracked {
        Tracked { _alive: Alive::new() }
    }

    fn apply(&self, _state: &Tracked, _event: &SessionEvent) -> Result<Option<Tracked>, session_projection::UnitError> {
        Ok(Some(Tracked { _alive: Alive::new() }))
    }
}

#[test]
fn a_finished_cold_fold_keeps_only_its_verdict() {
    let registry = ProjectionRegistry::new();
    let _units = register_units(&registry).unwrap();
    let _tracked = registry.register_host_only(TrackedUnit).unwrap();
    let mut sink = ColdFold::new(&registry, &SessionId::from("c"));
    sink.event(event("turn/start", 0, json!({"turn": 1}))).unwrap();
    sink.event(descriptor(1, "kept")).unwrap();
    assert_eq!(TRACKED_ALIVE.load(Ordering::SeqCst), 1, "the fold holds the unit's state");
    sink.finish();
    assert_eq!(TRACKED_ALIVE.load(Ordering::SeqCst), 0, "finishing drops every unit state");
    assert!(sink.event(event("turn/end", 2, json!({"turn": 1}))).is_err(), "a finished fold takes no event");
    assert_eq!(identity(sink), SubagentIdentity { mode: ChildMode::Continuable { label: "kept".to_owned() }, seq: 1 });
}

#[test]
fn a_discontiguous_stream_is_a_read_error() {
    let registry = ProjectionRegistry::new();
    let _units = register_units(&registry).unwrap();
    let mut sink = ColdFold::new(&registry, &SessionId::from("c"));
    sink.event(event("turn/start", 0, json!({"turn": 1}))).unwrap();
    assert!(sink.event(descriptor(5, "gap")).is_err());
}

#[test]
fn a_restarted_descriptor_scan_forgets_the_abandoned_pass() {
    let mut sink = DescriptorEvents::default();
    sink.event(descriptor(0, "abandoned")).unwrap();
    sink.event(event("turn/start", 1, json!({"turn": 1}))).unwrap();
    assert!(sink.restart());
    assert!(sink.events.is_empty());
    sink.event(descriptor(0, "fresh")).unwrap();
    assert_eq!(sink.events.len(), 1);
}
