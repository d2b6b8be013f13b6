//! Surface markers and transitions (reference 01 §2.3), through `Session::append` and the pure
//! fold.

use std::sync::Arc;

use serde_json::{Value, json};

use super::{append, assistant_message, detached, event, tool_call_block, tool_result, user_message};
use crate::{
    Session, SessionEvent, SurfaceFold, SurfaceIntent, SurfaceOp, SurfaceReplacement, SurfaceState, fold_surface,
};

/// Surface nodes 0 (user), 2 (assistant asking for `c1`), 3 (its result), 4 (user); seq 1 is
/// `turn/start`.
fn base() -> Arc<Session> {
    let session = detached("surface");
    append(&session, "user/message", user_message("u0", "hello"));
    append(&session, "turn/start", json!({"turn": 1}));
    append(&session, "assistant/message", assistant_message(1, 1, "a2", json!([tool_call_block("c1")])));
    append(&session, "tool/result", tool_result(1, 1, "r3", "c1", "output"));
    append(&session, "user/message", user_message("u4", "more"));
    session
}

/// Appends one candidate to a fresh base and compares the surface (nodes, generation) or the
/// exact error. A rejected append must leave the log and surface as they were.
fn check(kind: &str, data: Value, intent: Option<SurfaceIntent>, expected: Result<(&[u64], u64), &str>) {
    let session = base();
    let before = (session.len(), session.surface_nodes(), session.replace_generation());
    let actual = session
        .append(kind, &data, intent.clone())
        .map(|_| (session.surface_nodes(), session.replace_generation()))
        .map_err(|err| err.to_string());
    let expected = expected.map(|(nodes, generation)| (nodes.to_vec(), generation)).map_err(str::to_owned);
    assert_eq!(actual, expected, "{kind} {intent:?}");
    if actual.is_err() {
        assert_eq!((session.len(), session.surface_nodes(), session.replace_generation()), before);
    }
}

fn user(text: &str) -> Value {
    user_message(&format!("id-{text}"), text)
}

#[test]
fn append_and_marker_rules() {
    check("user/message", user("x"), Some(SurfaceIntent::append()), Ok((&[0, 2, 3, 4, 5], 0)));
    check("turn/end", json!({"turn": 1, "reason": {"kind": "completed"}}), None, Ok((&[0, 2, 3, 4], 0)));
    check(
        "user/message",
        user("x"),
        None,
        Err("session event \"user/message\" is surface-eligible and requires a surfaceOp marker"),
    );
    check(
        "turn/end",
        json!({"turn": 1, "reason": {"kind": "completed"}}),
        Some(SurfaceIntent::append()),
        Err("session event \"turn/end\" is not surface-eligible and cannot carry surfaceOp"),
    );
    check(
        "user/message",
        user("x"),
        Some(SurfaceIntent::append().with_sources([])),
        Err("sourceEventSeqs must not be empty except on assistant/message"),
    );
    check(
        "assistant/message",
        assistant_message(1, 2, "a5", json!([])),
        Some(SurfaceIntent::append().with_sources([])),
        Ok((&[0, 2, 3, 4, 5], 0)),
    );
    check(
        "user/message",
        user("x"),
        Some(SurfaceIntent::append().with_sources([1, 1])),
        Err("sourceEventSeqs must not contain duplicates"),
    );
    check(
        "user/message",
        user("x"),
        Some(SurfaceIntent::append().with_sources([1, 9, 5])),
        Err("sourceEventSeqs must reference earlier events: 9 >= current seq 5"),
    );
    check(
        "user/message",
        user("x"),
        Some(SurfaceIntent::append().with_sources([1, crate::json::MAX_SAFE_INTEGER + 1])),
        Err("session event \"user/message\" sourceEventSeqs must densely contain non-negative safe integers"),
    );
    // Duplicates are reported before a non-earlier source, as in the reference.
    check(
        "user/message",
        user("x"),
        Some(SurfaceIntent::append().with_sources([9, 9])),
        Err("sourceEventSeqs must not contain duplicates"),
    );
}

#[test]
fn replace_rules() {
    check(
        "user/message",
        user("x"),
        Some(SurfaceIntent::replace(1, 2).with_sources([1, 2])),
        Err("surface replace: start seq 1 not found in surface"),
    );
    check(
        "user/message",
        user("x"),
        Some(SurfaceIntent::replace(0, 1).with_sources([0])),
        Err("surface replace: end seq 1 not found in surface"),
    );
    check(
        "user/message",
        user("x"),
        Some(SurfaceIntent::replace(4, 0).with_sources([0, 4])),
        Err("surface replace: start seq 4 (index 3) is after end seq 0 (index 0)"),
    );
    check(
        "user/message",
        user("summary"),
        Some(SurfaceIntent::replace(0, 2).with_sources([0])),
        Err("surface replace: sourceEventSeqs must include every shadowed surface node; missing 2"),
    );
    check(
        "user/message",
        user("summary"),
        Some(SurfaceIntent::replace(0, 3)),
        Err("surface replace: sourceEventSeqs must include every shadowed surface node; missing 0, 2, 3"),
    );
    // The range is located before the sources are checked.
    check(
        "user/message",
        user("summary"),
        Some(SurfaceIntent::replace(1, 1).with_sources([9, 9])),
        Err("surface replace: start seq 1 not found in surface"),
    );
    check(
        "user/message",
        user("summary"),
        Some(SurfaceIntent::replace(0, 3).with_sources([0, 2, 3, 1])),
        Ok((&[5, 4], 1)),
    );
    check(
        "assistant/message",
        assistant_message(1, 2, "a5", json!([{"type": "text", "text": "summary"}])),
        Some(SurfaceIntent::replace(2, 4).with_sources([2, 3, 4])),
        Ok((&[0, 5], 1)),
    );
}

#[test]
fn tool_result_replace_is_a_content_only_rewrite() {
    check(
        "tool/result",
        tool_result(1, 1, "r3", "c1", "x"),
        Some(SurfaceIntent::replace(2, 3).with_sources([2, 3])),
        Err("tool/result surface replacement must rewrite exactly one current node"),
    );
    check(
        "tool/result",
        tool_result(1, 1, "r3", "c1", "x"),
        Some(SurfaceIntent::replace(4, 4).with_sources([4])),
        Err("tool/result surface replacement must target a current tool/result"),
    );
    let mut changed_flag = tool_result(1, 1, "r3", "c1", "shorter");
    changed_flag["message"]["content"][0]["isError"] = json!(true);
    check(
        "tool/result",
        changed_flag,
        Some(SurfaceIntent::replace(3, 3).with_sources([3])),
        Err("tool/result surface replacement may change only content"),
    );
    check(
        "tool/result",
        tool_result(1, 1, "r3-b", "c1", "shorter"),
        Some(SurfaceIntent::replace(3, 3).with_sources([3])),
        Err("tool/result surface replacement may change only content"),
    );
    check(
        "tool/result",
        tool_result(1, 1, "r3", "c1", "shorter"),
        Some(SurfaceIntent::replace(3, 3).with_sources([3])),
        Ok((&[0, 2, 5, 4], 1)),
    );
    // Key order does not matter: the comparison is structural.
    let reordered = json!({
        "message": {
            "content": [{"content": [{"type": "text", "text": "elided"}], "isError": false, "toolCallId": "c1", "type": "tool-result"}],
            "source": {"callId": "c1", "kind": "tool"},
            "role": "user",
            "id": "r3",
        },
        "step": 1,
        "turn": 1,
    });
    check("tool/result", reordered, Some(SurfaceIntent::replace(3, 3).with_sources([3])), Ok((&[0, 2, 5, 4], 1)));
}

fn raw(kind: &str, seq: u64, op: Option<SurfaceOp>, sources: Option<&[u64]>) -> Arc<SessionEvent> {
    let data = match kind {
        "user/message" => user_message(&format!("u{seq}"), "text"),
        _ => json!({}),
    };
    let mut event = Arc::unwrap_or_clone(event(kind, seq, data));
    event.surface_op = op;
    event.source_event_seqs = sources.map(Box::from);
    Arc::new(event)
}

#[test]
fn fold_reports_replacements_and_contiguity() {
    let replace = |start, end| Some(SurfaceOp::Replace { start, end });
    let events = vec![
        raw("user/message", 0, Some(SurfaceOp::Append), None),
        raw("turn/start", 1, None, None),
        raw("user/message", 2, Some(SurfaceOp::Append), None),
        raw("user/message", 3, replace(0, 2), Some(&[0, 2])),
        raw("user/message", 4, Some(SurfaceOp::Append), Some(&[1])),
        raw("user/message", 5, replace(3, 4), Some(&[3, 4])),
    ];
    let fold = fold_surface(&events).unwrap();
    assert_eq!(
        fold,
        SurfaceFold {
            nodes: vec![5],
            replacements: vec![
                SurfaceReplacement { seq: 3, start: 0, end: 2, shadowed_seqs: vec![0, 2] },
                SurfaceReplacement { seq: 5, start: 3, end: 4, shadowed_seqs: vec![3, 4] },
            ],
        }
    );

    let gap = vec![raw("turn/start", 0, None, None), raw("turn/end", 2, None, None)];
    assert_eq!(fold_surface(&gap).unwrap_err(), "session event seq 2 is not contiguous; expected 1");

    let sources_on_plain = vec![raw("turn/start", 0, None, None), raw("turn/end", 1, None, Some(&[0]))];
    assert_eq!(
        fold_surface(&sources_on_plain).unwrap_err(),
        "session event \"turn/end\" is not surface-eligible and cannot carry sourceEventSeqs"
    );
}

#[test]
fn window_fold_cannot_reach_before_its_base() {
    let window = [
        raw("user/message", 10, Some(SurfaceOp::Append), None),
        raw("user/message", 11, Some(SurfaceOp::Replace { start: 3, end: 10 }), Some(&[3, 10])),
    ];
    let mut state = SurfaceState::with_base(10);
    state.apply(&window[0]).unwrap();
    let err = state.apply(&window[1]).unwrap_err();
    assert_eq!(err, "surface replace: start seq 3 not found in surface");
    assert_eq!(state.nodes(), &[10]);
    assert_eq!(state.replace_generation(), 0);
}
