//! Unit tests of the private streaming sinks: a scan that starts over (the log changed on disk
//! while it was read) must leave no trace of the abandoned pass.

use std::sync::Arc;

use serde_json::{Value, json};
use session_core::{JsonData, SessionEvent, SessionId};
use session_persistence::ScanSink;
use session_projection::ProjectionRegistry;

use crate::{listing::ColdFold, register_units, resume::DescriptorEvents};

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
    let restored = sink.fold.finish().unwrap();
    assert_eq!(restored.snapshot.values["subagent"], json!({"mode": "continuable", "label": "fresh", "seq": 0}));
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
