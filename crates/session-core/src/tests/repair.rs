//! Crash-repair closers (reference 01 §2.7), including the reference's own answer for a real
//! log left open by a killed process.

use std::{path::PathBuf, sync::Arc};

use serde_json::{Value, json};

use super::{assistant_message, event, tool_call_block, tool_result, user_message};
use crate::{RepairScan, Session, SessionEvent, SessionHeader, interrupted_turn_closers};

const OUTCOME_UNKNOWN: &str = "The tool call was interrupted after it was recorded, but no result was durably recorded. Its outcome is unknown. Decide whether to retry from the tool semantics: retry only if the operation is read-only or idempotent; if it may have side effects, first verify external state or ask the user. Do not retry blindly.";
const NOT_STARTED: &str =
    "The tool call was interrupted before the Harness recorded it as started. Retry it if it is still needed.";

/// A log from `(kind, data)` pairs, with seqs from 0 and times 100, 101, ...
fn log(entries: &[(&str, Value)]) -> Vec<Arc<SessionEvent>> {
    entries
        .iter()
        .enumerate()
        .map(|(seq, (kind, data))| {
            let mut event = Arc::unwrap_or_clone(event(kind, seq as u64, data.clone()));
            event.time = 100 + seq as i64;
            Arc::new(event)
        })
        .collect()
}

/// Compares the closers, as JSON, with `expected`, and checks the incremental scan agrees.
fn check(entries: &[(&str, Value)], expected: Value) {
    let events = log(entries);
    let closers = interrupted_turn_closers(&events);
    assert_eq!(serde_json::to_value(&closers).unwrap(), expected);
    let mut scan = RepairScan::new();
    events.iter().for_each(|event| scan.observe(event));
    let last = events.last().map_or((0, 0), |last| (last.seq, last.time));
    let incremental = if events.is_empty() { Vec::new() } else { scan.closers(last.0, last.1) };
    assert_eq!(incremental, closers);
    assert_eq!(scan.is_turn_open(), !closers.is_empty());
}

fn closer_result(seq: u64, time: i64, step: u64, call_id: &str, call_seq: Option<u64>) -> Value {
    let (text, name, code) = match call_seq {
        Some(_) => (OUTCOME_UNKNOWN, "ToolOutcomeUnknownError", "TOOL_OUTCOME_UNKNOWN"),
        None => (NOT_STARTED, "ToolNotStartedError", "TOOL_NOT_STARTED"),
    };
    let mut closer = json!({
        "type": "tool/result",
        "seq": seq,
        "time": time,
        "data": {
            "turn": 1,
            "step": step,
            "message": {
                "id": format!("interrupted-tool-result-{call_id}-{seq}"),
                "role": "user",
                "source": {"kind": "tool", "callId": call_id},
                "content": [{
                    "type": "tool-result",
                    "toolCallId": call_id,
                    "isError": true,
                    "content": [{"type": "text", "text": text}],
                }],
            },
            "error": {"name": name, "code": code},
        },
        "surfaceOp": "append",
    });
    if let Some(call_seq) = call_seq {
        closer["sourceEventSeqs"] = json!([call_seq]);
    }
    closer
}

fn step_end(seq: u64, time: i64, step: u64) -> Value {
    json!({"type": "step/end", "seq": seq, "time": time, "data": {"turn": 1, "step": step}})
}

fn turn_end(seq: u64, time: i64) -> Value {
    json!({"type": "turn/end", "seq": seq, "time": time, "data": {"turn": 1, "reason": {"kind": "interrupted"}}})
}

fn start() -> (&'static str, Value) {
    ("turn/start", json!({"turn": 1}))
}

fn step_start(step: u64) -> (&'static str, Value) {
    ("step/start", json!({"turn": 1, "step": step}))
}

fn asks_for(step: u64, calls: &[&str]) -> (&'static str, Value) {
    let blocks: Vec<Value> = calls.iter().map(|call| tool_call_block(call)).collect();
    ("assistant/message", assistant_message(1, step, &format!("a-{step}"), Value::Array(blocks)))
}

fn call(step: u64, call_id: &str) -> (&'static str, Value) {
    ("tool/call", json!({"turn": 1, "step": step, "callId": call_id, "name": "bash", "arguments": "{}"}))
}

fn result(step: u64, call_id: &str) -> (&'static str, Value) {
    ("tool/result", tool_result(1, step, &format!("r-{call_id}"), call_id, "ok"))
}

#[test]
fn balanced_and_empty_logs_need_nothing() {
    check(&[], json!([]));
    check(&[start(), ("turn/end", json!({"turn": 1, "reason": {"kind": "completed"}}))], json!([]));
    check(&[("user/message", user_message("m", "x")), ("plugin/x", json!(null))], json!([]));
    // An open plugin bracket is never closed by repair.
    check(
        &[start(), ("turn/end", json!({"turn": 1, "reason": {"kind": "completed"}})), ("compaction/start", json!({}))],
        json!([]),
    );
}

#[test]
fn an_open_turn_gets_an_interrupted_turn_end() {
    check(&[start(), ("user/message", user_message("m", "x"))], json!([turn_end(2, 101)]));
}

#[test]
fn an_open_step_is_closed_before_the_turn() {
    check(&[start(), step_start(1)], json!([step_end(2, 101, 1), turn_end(3, 101)]));
    // A closed step leaves only the turn.
    check(&[start(), step_start(1), ("step/end", json!({"turn": 1, "step": 1}))], json!([turn_end(3, 102)]));
}

#[test]
fn pending_calls_get_results_in_request_order() {
    check(
        &[start(), step_start(1), asks_for(1, &["c1", "c2", "c3"]), call(1, "c1"), result(1, "c1"), call(1, "c2")],
        json!([
            closer_result(6, 105, 1, "c2", Some(5)),
            closer_result(7, 105, 1, "c3", None),
            step_end(8, 105, 1),
            turn_end(9, 105),
        ]),
    );
}

#[test]
fn scan_state_resets_at_boundaries() {
    // A step end clears the step's pending calls.
    check(
        &[start(), step_start(1), asks_for(1, &["c1"]), ("step/end", json!({"turn": 1, "step": 1})), step_start(2)],
        json!([step_end(5, 104, 2), turn_end(6, 104)]),
    );
    // A new turn forgets the previous one's calls.
    check(&[start(), step_start(1), asks_for(1, &["old"]), start()], json!([turn_end(4, 103)]));
    // A tool/call without an assistant block is ignored, and a result of any surfaceOp clears a call.
    check(
        &[start(), step_start(1), call(1, "orphan"), asks_for(1, &["c1"]), result(1, "c1")],
        json!([step_end(5, 104, 1), turn_end(6, 104)]),
    );
}

#[test]
fn re_requesting_a_call_keeps_its_place_and_forgets_its_call_seq() {
    check(
        &[start(), step_start(1), asks_for(1, &["c1", "c2"]), call(1, "c1"), asks_for(1, &["c1"])],
        json!([
            closer_result(5, 104, 1, "c1", None),
            closer_result(6, 104, 1, "c2", None),
            step_end(7, 104, 1),
            turn_end(8, 104),
        ]),
    );
}

#[test]
fn closers_balance_a_session() {
    let events = log(&[start(), step_start(1), asks_for(1, &["c1", "c2"]), call(1, "c1")]);
    let closers = interrupted_turn_closers(&events);
    let mut seed = events;
    seed.extend(closers.into_iter().map(Arc::new));
    let session = Session::create(SessionHeader::new("repaired".into(), 0), Some(seed), super::clock()).unwrap();
    assert!(!session.has_open_turn());
    assert_eq!(session.surface_nodes(), [2, 4, 5]);
    assert!(interrupted_turn_closers(&session.events()).is_empty());
}

fn reference_store() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../session-persistence/test_data/reference-store")
}

/// Scans the committed lines of a reference JSONL log (after the header line). Packed chunk rows
/// only matter for the seq and time of the last event, which they may carry.
fn scan_reference_log(name: &str) -> (RepairScan, u64, i64) {
    let path = reference_store().join("none/--srv-agents-demo--").join(name).join("session.jsonl");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|err| panic!("{}: {err}", path.display()));
    // Only newline-terminated lines are committed.
    let committed = &text[..text.rfind('\n').map_or(0, |end| end + 1)];
    let mut scan = RepairScan::new();
    let mut last = (0, 0);
    for line in committed.lines().skip(1) {
        let row: Value = serde_json::from_str(line).unwrap();
        match row["type"].as_str() {
            Some("text-chunks" | "reasoning-chunks" | "tool-call-chunks") => {
                let gaps: Vec<i64> =
                    row["data"]["dt"].as_array().unwrap().iter().map(|gap| gap.as_i64().unwrap()).collect();
                last = (
                    row["seq0"].as_u64().unwrap() + gaps.len() as u64,
                    row["time0"].as_i64().unwrap() + gaps.iter().sum::<i64>(),
                );
            }
            _ => {
                let event: Arc<SessionEvent> = Arc::new(serde_json::from_str(line).unwrap());
                scan.observe(&event);
                last = (event.seq, event.time);
            }
        }
    }
    (scan, last.0, last.1)
}

#[test]
fn reference_closers_for_a_killed_process() {
    let expected: Value =
        serde_json::from_str(&std::fs::read_to_string(reference_store().join("expected.json")).unwrap()).unwrap();
    for name in ["s-open-turn", "s-torn"] {
        let (scan, last_seq, last_time) = scan_reference_log(name);
        let closers = serde_json::to_value(scan.closers(last_seq, last_time)).unwrap();
        assert_eq!(closers, expected["none"]["closers"][name], "{name}");
    }
    let (scan, last_seq, _) = scan_reference_log("s-open-turn");
    assert_eq!(last_seq, 93);
    assert_eq!(scan.closers(last_seq, 0).len(), 4);
}
