//! The descriptor (reference 03 §2 and the descriptor half of §9.3): canonical writing, strict
//! parsing in the reference's check order with its messages, foreign versions, and the first-wins
//! fold.

use serde_json::{Value, json};
use subagent::{
    ContinuableDescriptor, Descriptor, DescriptorParse, OneShotDescriptor, SubagentMode, ToolFilter,
    fold_first_descriptor, parse_descriptor,
};

use crate::support::*;

fn check_round_trip(descriptor: Descriptor, expected_text: &str) {
    let value = descriptor.to_value();
    assert_eq!(serde_json::to_string(&value).unwrap(), expected_text);
    assert_eq!(descriptor.to_data().as_str(), expected_text);
    assert_eq!(parse_descriptor(&value), Ok(DescriptorParse::Supported(descriptor)));
}

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|item| (*item).to_owned()).collect()
}

#[test]
fn descriptors_round_trip_in_canonical_order() {
    check_round_trip(
        Descriptor::OneShot(OneShotDescriptor { provider: "spawn".to_owned(), label: None }),
        r#"{"version":2,"mode":"one-shot","provider":"spawn"}"#,
    );
    check_round_trip(
        Descriptor::OneShot(OneShotDescriptor { provider: "spawn".to_owned(), label: Some("check it".to_owned()) }),
        r#"{"version":2,"mode":"one-shot","provider":"spawn","label":"check it"}"#,
    );
    check_round_trip(
        Descriptor::Continuable(ContinuableDescriptor {
            provider: "fork".to_owned(),
            label: "complete".to_owned(),
            agent_provider: Some("deepseek-official".to_owned()),
            agent_model: Some("deepseek-v4-flash".to_owned()),
            persona: Some("a careful reviewer".to_owned()),
            tool_filter: ToolFilter::new(Some(strings(&["read_file"])), Some(strings(&["bash"]))),
        }),
        r#"{"version":2,"mode":"continuable","provider":"fork","label":"complete","agentProvider":"deepseek-official","agentModel":"deepseek-v4-flash","persona":"a careful reviewer","toolFilter":{"allow":["read_file"],"deny":["bash"]}}"#,
    );
    check_round_trip(
        Descriptor::Continuable(ContinuableDescriptor {
            tool_filter: ToolFilter::new(Some(strings(&["read_file"])), None),
            ..continuable_descriptor("allow only")
        }),
        r#"{"version":2,"mode":"continuable","provider":"spawn","label":"allow only","agentProvider":"demo-llm","agentModel":"scripted-1","toolFilter":{"allow":["read_file"]}}"#,
    );
    check_round_trip(
        Descriptor::Continuable(ContinuableDescriptor {
            provider: "spawn".to_owned(),
            label: "deny only".to_owned(),
            agent_provider: None,
            agent_model: None,
            persona: None,
            tool_filter: ToolFilter::new(None, Some(vec![])),
        }),
        r#"{"version":2,"mode":"continuable","provider":"spawn","label":"deny only","toolFilter":{"deny":[]}}"#,
    );
    assert_eq!(ToolFilter::new(None, None), None, "a tool filter declares allow and/or deny");
}

#[test]
fn a_parsed_payload_in_any_key_order_is_written_canonically() {
    let payload = json!({"label": "l", "provider": "p", "mode": "continuable", "agentModel": "m", "version": 2});
    let descriptor = parse_descriptor(&payload).unwrap().supported().unwrap();
    assert_eq!(
        serde_json::to_string(&descriptor.to_value()).unwrap(),
        r#"{"version":2,"mode":"continuable","provider":"p","label":"l","agentModel":"m"}"#
    );
    assert_eq!(descriptor.mode(), SubagentMode::Continuable);
    assert_eq!(descriptor.label(), Some("l"));
    assert_eq!(descriptor.provider(), "p");
}

#[test]
fn other_versions_are_unsupported_not_errors() {
    for version in [json!(1), json!(3), json!(2.5), json!(999), json!(-2)] {
        let payload = json!({"version": version, "mode": "nonsense"});
        assert_eq!(parse_descriptor(&payload), Ok(DescriptorParse::UnsupportedVersion), "{payload}");
    }
    let two_point_zero: Value = serde_json::from_str(r#"{"version":2.0,"mode":"one-shot","provider":"p"}"#).unwrap();
    assert!(matches!(parse_descriptor(&two_point_zero), Ok(DescriptorParse::Supported(_))), "2.0 is version 2");
}

/// The 22 malformed payloads of reference 03 §9.3 (17), with their exact messages.
#[test]
fn malformed_payloads_fail_with_the_reference_messages() {
    let cases: [(&str, Value, &str); 22] = [
        ("string payload", json!("descriptor"), "payload must be an object"),
        ("null payload", Value::Null, "payload must be an object"),
        ("array payload", json!([2]), "payload must be an object"),
        ("missing version", json!({"mode": "one-shot", "provider": "p"}), "version must be a number"),
        ("string version", json!({"version": "2", "mode": "one-shot", "provider": "p"}), "version must be a number"),
        ("missing mode", json!({"version": 2, "provider": "p"}), "mode must be \"one-shot\" or \"continuable\""),
        (
            "invalid mode",
            json!({"version": 2, "mode": "forever", "provider": "p"}),
            "mode must be \"one-shot\" or \"continuable\"",
        ),
        (
            "unknown one-shot field persona",
            json!({"version": 2, "mode": "one-shot", "provider": "p", "persona": "x"}),
            "payload has unknown field \"persona\"",
        ),
        (
            "non-string one-shot label",
            json!({"version": 2, "mode": "one-shot", "provider": "p", "label": null}),
            "label must be a string",
        ),
        (
            "unknown field before the label check",
            json!({"version": 2, "mode": "continuable", "provider": "p", "extra": true}),
            "payload has unknown field \"extra\"",
        ),
        ("missing provider", json!({"version": 2, "mode": "one-shot"}), "provider must be a string"),
        (
            "missing continuable label",
            json!({"version": 2, "mode": "continuable", "provider": "p"}),
            "label must be a string",
        ),
        (
            "invalid continuable label",
            json!({"version": 2, "mode": "continuable", "provider": "p", "label": 5}),
            "label must be a string",
        ),
        (
            "invalid provider",
            json!({"version": 2, "mode": "continuable", "provider": 7, "label": "l"}),
            "provider must be a string",
        ),
        (
            "invalid agentProvider",
            json!({"version": 2, "mode": "continuable", "provider": "p", "label": "l", "agentProvider": 7}),
            "agentProvider must be a string",
        ),
        (
            "invalid agentModel",
            json!({"version": 2, "mode": "continuable", "provider": "p", "label": "l", "agentModel": []}),
            "agentModel must be a string",
        ),
        (
            "invalid persona",
            json!({"version": 2, "mode": "continuable", "provider": "p", "label": "l", "persona": {}}),
            "persona must be a string",
        ),
        (
            "array toolFilter",
            json!({"version": 2, "mode": "continuable", "provider": "p", "label": "l", "toolFilter": []}),
            "toolFilter must be an object",
        ),
        (
            "unknown toolFilter field",
            json!({"version": 2, "mode": "continuable", "provider": "p", "label": "l", "toolFilter": {"except": []}}),
            "toolFilter has unknown field \"except\"",
        ),
        (
            "empty toolFilter",
            json!({"version": 2, "mode": "continuable", "provider": "p", "label": "l", "toolFilter": {}}),
            "toolFilter must declare allow and/or deny",
        ),
        (
            "non-array allow",
            json!({"version": 2, "mode": "continuable", "provider": "p", "label": "l", "toolFilter": {"allow": "bash"}}),
            "toolFilter.allow must be an array of strings",
        ),
        (
            "non-string deny item",
            json!({"version": 2, "mode": "continuable", "provider": "p", "label": "l", "toolFilter": {"deny": ["bash", 1]}}),
            "toolFilter.deny must be an array of strings",
        ),
    ];
    for (name, payload, detail) in cases {
        let error = parse_descriptor(&payload).expect_err(name);
        assert_eq!(error.message, format!("persisted subagent descriptor {detail}"), "{name}");
    }
}

/// Checks run in the reference's order: an unknown field wins over a bad provider and label,
/// the first unknown key in object order is reported.
#[test]
fn checks_run_in_the_reference_order() {
    let payload: Value =
        serde_json::from_str(r#"{"zeta":1,"version":2,"mode":"one-shot","alpha":2,"provider":7}"#).unwrap();
    assert_eq!(
        parse_descriptor(&payload).unwrap_err().message,
        "persisted subagent descriptor payload has unknown field \"zeta\""
    );
    let payload = json!({"version": 2, "mode": "continuable", "provider": "p", "label": "l", "toolFilter": {"allow": 1, "deny": 2}});
    assert_eq!(
        parse_descriptor(&payload).unwrap_err().message,
        "persisted subagent descriptor toolFilter.allow must be an array of strings"
    );
    let payload = json!({"version": "x"});
    assert_eq!(
        parse_descriptor(&payload).unwrap_err().message,
        "persisted subagent descriptor version must be a number"
    );
}

#[test]
fn the_first_wins_fold_takes_the_first_descriptor() {
    assert_eq!(fold_first_descriptor(Vec::<session_core::SessionEvent>::new()), Ok(None));
    let events = [
        ev("turn/start", 0, json!({"turn": 1})),
        descriptor_event(1, continuable("first")),
        descriptor_event(2, continuable("second")),
    ];
    let first = fold_first_descriptor(events.iter().map(|event| &**event)).unwrap().unwrap();
    assert_eq!(first.label(), Some("first"));
    let foreign = [descriptor_event(0, json!({"version": 3})), descriptor_event(1, continuable("ignored"))];
    assert_eq!(fold_first_descriptor(foreign.iter().map(|event| &**event)), Ok(None));
    let malformed = [descriptor_event(0, json!({"version": 2, "mode": "one-shot"}))];
    assert_eq!(
        fold_first_descriptor(malformed.iter().map(|event| &**event)).unwrap_err().message,
        "persisted subagent descriptor provider must be a string"
    );
}

/// A stored payload is checked for syntax only; a number no tree can hold makes the descriptor
/// corrupt instead of crashing the fold.
#[test]
fn an_unrepresentable_number_is_a_corrupt_descriptor() {
    let data: Box<serde_json::value::RawValue> =
        serde_json::from_str(r#"{"version":2,"mode":"continuable","provider":"p","label":"x","n":1e400}"#).unwrap();
    let event = session_core::SessionEvent::new("subagent/descriptor", 0, 0, session_core::JsonData::from_raw(data));
    assert!(subagent::Descriptor::parse_event(&event).is_err());
}
