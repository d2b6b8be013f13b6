//! The read-side legacy imports (reference 01 §3.7), event by event: every mapping, every
//! malformed shape with the reference's message, key order, and the replacement id inheritance.

use serde_json::{Value, json};

use super::{assistant_message, event, tool_result, user_message};
use crate::{LegacyImport, SessionEvent, SessionId, SurfaceOp, legacy::is_candidate};

const SESSION: &str = "s-old";

/// Imports one event at seq 7 and compares what comes out: `Ok(None)` when nothing changes,
/// `Ok(Some((kind, data)))` for an import, the error message otherwise.
fn check(kind: &str, data: Value, expected: Result<Option<(&str, Value)>, &str>) {
    let event = event(kind, 7, data);
    let imported = LegacyImport::new(SessionId::from(SESSION)).import(&event);
    let actual = imported.map(|imported| {
        imported.map(|imported| {
            assert_eq!((imported.seq, imported.time, imported.surface_op), (event.seq, event.time, event.surface_op));
            (imported.kind.to_string(), imported.data.to_value().unwrap())
        })
    });
    let expected = expected
        .map(|imported| imported.map(|(kind, data)| (kind.to_owned(), data)))
        .map_err(|message| format!("session \"{SESSION}\" contains malformed pre-react-loop {message} at seq 7"));
    assert_eq!(actual, expected, "{kind} {}", event.data);
}

fn unchanged(kind: &str, data: Value) {
    check(kind, data, Ok(None));
}

#[test]
fn turn_start_triggers_are_dropped_after_the_exact_shape_check() {
    check("turn/start", json!({"turn": 2, "trigger": {"kind": "retry"}}), Ok(Some(("turn/start", json!({"turn": 2})))));
    check(
        "turn/start",
        json!({"turn": 1, "trigger": {"kind": "message", "source": {"kind": "user"}}}),
        Ok(Some(("turn/start", json!({"turn": 1})))),
    );
    unchanged("turn/start", json!({"turn": 1}));
    unchanged("turn/start", json!(null));
    for malformed in [
        json!({"turn": 1, "trigger": null}),
        json!({"turn": 1, "trigger": {}}),
        json!({"turn": 1, "trigger": {"kind": ""}}),
        json!({"turn": 1, "trigger": {"kind": 3}}),
        json!({"turn": 0, "trigger": {"kind": "message"}}),
        json!({"turn": 1.5, "trigger": {"kind": "message"}}),
        json!({"trigger": {"kind": "message"}}),
        json!({"turn": 1, "trigger": {"kind": "message"}, "extra": true}),
    ] {
        check("turn/start", malformed, Err("turn/start"));
    }
}

#[test]
fn turn_end_reasons_map_to_the_current_vocabulary() {
    let turn_end = |reason: Value| json!({"turn": 3, "reason": reason});
    let imported = |reason: Value| Ok(Some(("turn/end", json!({"turn": 3, "reason": reason}))));
    for kind in ["completed", "blocked", "max-tokens", "interrupted"] {
        unchanged("turn/end", turn_end(json!({"kind": kind})));
        check("turn/end", turn_end(json!({"kind": kind, "extra": true})), Err("turn/end"));
    }
    check(
        "turn/end",
        turn_end(json!({"kind": "aborted"})),
        imported(json!({"kind": "aborted", "reason": {"kind": "legacy"}})),
    );
    unchanged("turn/end", turn_end(json!({"kind": "aborted", "reason": {"kind": "user"}})));
    check("turn/end", turn_end(json!({"kind": "aborted", "extra": true})), Err("turn/end"));
    check(
        "turn/end",
        turn_end(json!({"kind": "disposed"})),
        imported(json!({"kind": "aborted", "reason": {"kind": "disposed"}})),
    );
    check("turn/end", turn_end(json!({"kind": "disposed", "extra": true})), Err("turn/end"));
    // The two old error shapes.
    check(
        "turn/end",
        turn_end(json!({"kind": "error", "step": 1, "failure": {"message": "old provider failure", "code": "SERVER"}})),
        imported(json!({"kind": "error", "error": {"message": "old provider failure", "code": "SERVER"}})),
    );
    let detailed =
        json!({"message": "m", "code": "RATE_LIMIT", "status": 429, "providerRetryAfterMs": 1000, "requestId": "r"});
    check(
        "turn/end",
        turn_end(json!({"kind": "error", "step": 0, "failure": detailed})),
        imported(json!({"kind": "error", "error": detailed})),
    );
    check(
        "turn/end",
        turn_end(json!({"kind": "error", "step": 1, "message": "old thrown value"})),
        imported(json!({"kind": "error", "error": {"message": "old thrown value", "code": "UNKNOWN"}})),
    );
    check(
        "turn/end",
        turn_end(json!({"kind": "error", "step": 0, "message": "old coded error", "code": "CODED"})),
        imported(json!({"kind": "error", "error": {"message": "old coded error", "code": "CODED"}})),
    );
    unchanged("turn/end", turn_end(json!({"kind": "error", "error": {"message": "now", "code": "X"}})));
    unchanged("turn/end", turn_end(json!({"kind": "extension-reason"})));
    unchanged("turn/end", turn_end(json!({"kind": "extension-reason", "anything": [1]})));
    unchanged("turn/end", json!("not a record"));
    for malformed in [
        json!({"turn": 1, "step": 1, "reason": {"kind": "completed"}}),
        json!({"turn": 1, "reason": null}),
        json!({"turn": 1, "reason": {"why": "no kind"}}),
        json!({"turn": 1, "reason": {"kind": 5}}),
        json!({"turn": 0, "reason": {"kind": "completed"}}),
        json!({"turn": 1}),
        json!({}),
        json!({"turn": 1, "reason": {"kind": "error", "step": -1, "message": "bad step"}}),
        json!({"turn": 1, "reason": {"kind": "error", "message": "no step"}}),
        json!({"turn": 1, "reason": {"kind": "error", "step": 0, "message": "bad code", "code": 1}}),
        json!({"turn": 1, "reason": {"kind": "error", "step": 0, "message": "null code", "code": null}}),
        json!({"turn": 1, "reason": {"kind": "error", "step": 0, "message": 7}}),
        json!({"turn": 1, "reason": {"kind": "error", "step": 0, "failure": {"message": "m", "code": "C", "x": 1}}}),
        json!({"turn": 1, "reason": {"kind": "error", "step": 0, "failure": {"message": "m", "code": "C", "status": "429"}}}),
        json!({"turn": 1, "reason": {"kind": "error", "step": 0, "failure": {"message": "m"}}}),
        json!({"turn": 1, "reason": {"kind": "error", "step": 0, "failure": {"message": "m", "code": "C"}, "x": 1}}),
    ] {
        check("turn/end", malformed, Err("turn/end"));
    }
}

#[test]
fn an_import_keeps_the_payload_key_order() {
    let event = event("turn/end", 4, json!({"reason": {"kind": "aborted"}, "turn": 2}));
    let imported = LegacyImport::new(SessionId::from(SESSION)).import(&event).unwrap().unwrap();
    assert_eq!(imported.data.as_str(), r#"{"reason":{"kind":"aborted","reason":{"kind":"legacy"}},"turn":2}"#);
    let event = event_text("steering/message", 9, r#"{"source":{"kind":"user"},"turn":1,"content":[]}"#);
    let imported = LegacyImport::new(SessionId::from(SESSION)).import(&event).unwrap().unwrap();
    assert_eq!(
        imported.data.as_str(),
        r#"{"source":{"kind":"user"},"content":[],"id":"legacy-message:s-old:9","role":"user"}"#
    );
    let event = event_text(
        "assistant/message",
        3,
        r#"{"turn":1,"content":[],"provenance":{"model":"m","kind":"old","provider":"p"},"step":1}"#,
    );
    let imported = LegacyImport::new(SessionId::from(SESSION)).import(&event).unwrap().unwrap();
    assert_eq!(
        imported.data.as_str(),
        r#"{"turn":1,"step":1,"message":{"id":"legacy-message:s-old:3","role":"assistant","content":[],"source":{"model":"m","kind":"model","provider":"p"}}}"#
    );
}

fn event_text(kind: &str, seq: u64, data: &str) -> SessionEvent {
    let mut event = SessionEvent::new(kind, seq, 1, crate::JsonData::from_text(data).unwrap());
    event.surface_op = Some(SurfaceOp::Append);
    event
}

#[test]
fn steering_messages_become_user_messages() {
    let steering = user_message("m-steer", "old steering");
    check("steering/message", json!({"turn": 1, "message": steering}), Ok(Some(("user/message", steering.clone()))));
    check(
        "steering/message",
        json!({"turn": 1, "content": [{"type": "text", "text": "flat"}], "source": {"kind": "user"}}),
        Ok(Some((
            "user/message",
            json!({"content": [{"type": "text", "text": "flat"}], "source": {"kind": "user"},
                   "id": "legacy-message:s-old:7", "role": "user"}),
        ))),
    );
    // A wrapped message from before message identity then gets a legacy id too.
    check(
        "steering/message",
        json!({"turn": 1, "message": {"content": [], "source": {"kind": "user"}}}),
        Ok(Some((
            "user/message",
            json!({"content": [], "source": {"kind": "user"}, "id": "legacy-message:s-old:7", "role": "user"}),
        ))),
    );
    for malformed in [
        json!(null),
        json!([]),
        json!({"turn": 1, "content": [], "source": {"kind": "user"}, "extra": true}),
        json!({"content": [], "source": {"kind": "user"}}),
        json!({"turn": "1", "content": [], "source": {"kind": "user"}}),
        json!({"turn": 1, "message": "not a record"}),
        json!({"turn": 1, "message": steering, "extra": true}),
    ] {
        check("steering/message", malformed, Err("steering/message"));
    }
}

#[test]
fn pre_identity_messages_get_legacy_ids() {
    let source = json!({"kind": "user"});
    check(
        "user/message",
        json!({"content": [], "source": source}),
        Ok(Some((
            "user/message",
            json!({"content": [], "source": source, "id": "legacy-message:s-old:7", "role": "user"}),
        ))),
    );
    check(
        "assistant/message",
        json!({"turn": 1, "step": 1, "content": [], "provenance": {"provider": "p", "model": "m"}}),
        Ok(Some((
            "assistant/message",
            json!({"turn": 1, "step": 1, "message": {"id": "legacy-message:s-old:7", "role": "assistant", "content": [],
                   "source": {"provider": "p", "model": "m", "kind": "model"}}}),
        ))),
    );
    // A provenance that is not a record leaves only the kind, which current validation refuses.
    check(
        "assistant/message",
        json!({"content": [], "provenance": "p"}),
        Ok(Some((
            "assistant/message",
            json!({"message": {"id": "legacy-message:s-old:7", "role": "assistant", "content": [], "source": {"kind": "model"}}}),
        ))),
    );
    check(
        "tool/result",
        json!({"turn": 1, "step": 1, "callId": "c1", "content": [{"type": "text", "text": "out"}], "isError": false}),
        Ok(Some((
            "tool/result",
            json!({"turn": 1, "step": 1, "message": {"id": "legacy-message:s-old:7", "role": "user",
                   "content": [{"type": "tool-result", "toolCallId": "c1", "content": [{"type": "text", "text": "out"}], "isError": false}],
                   "source": {"kind": "tool", "callId": "c1"}}}),
        ))),
    );
}

#[test]
fn current_looking_records_are_never_imported() {
    // Current messages, well-formed or not: validation decides.
    unchanged("user/message", user_message("m", "hi"));
    unchanged("user/message", json!({"id": "m", "role": "assistant", "content": [], "source": {"kind": "user"}}));
    unchanged("user/message", json!({"role": "user", "content": [], "source": {"kind": "user"}}));
    unchanged("user/message", json!({"content": []}));
    unchanged("user/message", json!({}));
    unchanged("assistant/message", assistant_message(1, 1, "a", json!([])));
    unchanged("assistant/message", json!({"turn": 1, "message": null, "content": [], "provenance": {}}));
    unchanged("assistant/message", json!({"content": []}));
    unchanged("tool/result", tool_result(1, 1, "r", "c", "ok"));
    unchanged("tool/result", json!({"message": null}));
    unchanged("tool/result", json!({"callId": "c", "content": []}));
    unchanged("plugin/x", json!(null));
    unchanged("request/header", json!({"header": {"config": {"provider": "p", "model": "m"}}, "reason": "initial"}));
}

/// A replacing pre-identity tool result keeps its target's id, through chains of replacements.
#[test]
fn a_replacement_inherits_the_id_of_its_target() {
    let mut import = LegacyImport::new(SessionId::from(SESSION));
    let result = |seq: u64, text: &str, replaces: Option<u64>| {
        let mut event = (*event(
            "tool/result",
            seq,
            json!({"turn": 1, "step": 1, "callId": "c", "content": [{"type": "text", "text": text}], "isError": false}),
        ))
        .clone();
        if let Some(target) = replaces {
            event.surface_op = Some(SurfaceOp::Replace { start: target, end: target });
        }
        event
    };
    let id_of = |event: &SessionEvent| event.data.to_value().unwrap()["message"]["id"].clone();
    let first = import.import(&result(5, "full", None)).unwrap().unwrap();
    assert_eq!(id_of(&first), "legacy-message:s-old:5");
    let pruned = import.import(&result(6, "pruned", Some(5))).unwrap().unwrap();
    assert_eq!(id_of(&pruned), "legacy-message:s-old:5");
    let again = import.import(&result(8, "pruned again", Some(6))).unwrap().unwrap();
    assert_eq!(id_of(&again), "legacy-message:s-old:5");
    // A current message after the first import is recorded too.
    assert_eq!(import.import(&event("tool/result", 9, tool_result(1, 1, "r-9", "c", "now"))).unwrap(), None);
    assert_eq!(id_of(&import.import(&result(10, "pruned", Some(9))).unwrap().unwrap()), "r-9");
    // A target without an id leaves the replacement without one; validation refuses it.
    let orphan = import.import(&result(11, "pruned", Some(2))).unwrap().unwrap();
    assert_eq!(orphan.data.to_value().unwrap()["message"].get("id"), None);
    assert_eq!(
        crate::check_message_shape(&orphan),
        Err("session event at seq 11 lacks an identified message".to_owned())
    );
}

/// What a current log is made of is decided without parsing: decoded messages are verified, and
/// current `turn/start` and `turn/end` payloads are recognized in one walk.
#[test]
fn current_events_decoded_from_a_log_are_not_candidates() {
    let lines = [
        r#"{"type":"turn/start","seq":0,"time":1,"data":{"turn":1}}"#,
        r#"{"type":"user/message","seq":1,"time":1,"data":{"id":"m","role":"user","content":[],"source":{"kind":"user"}},"surfaceOp":"append"}"#,
        r#"{"type":"assistant/message","seq":2,"time":1,"data":{"turn":1,"step":1,"message":{"id":"a","role":"assistant","content":[],"source":{"kind":"model","provider":"p","model":"m"}}},"surfaceOp":"append"}"#,
        r#"{"type":"tool/result","seq":3,"time":1,"data":{"turn":1,"step":1,"message":{"id":"r","role":"user","content":[{"type":"tool-result","toolCallId":"c","content":[],"isError":false}],"source":{"kind":"tool","callId":"c"}}},"surfaceOp":"append"}"#,
        r#"{"type":"assistant/chunk","seq":4,"time":1,"data":{"turn":1,"step":1,"chunk":{"type":"text-delta","index":0,"text":"x"}}}"#,
        r#"{"type":"turn/end","seq":5,"time":1,"data":{"turn":1,"reason":{"kind":"completed"}}}"#,
        r#"{"type":"turn/end","seq":6,"time":1,"data":{"turn":12,"reason":{"kind":"aborted","reason":{"kind":"user"}}}}"#,
        r#"{"type":"turn/end","seq":7,"time":1,"data":{"turn":2,"reason":{"kind":"error","error":{"message":"m","code":"C"}}}}"#,
        r#"{"type":"turn/end","seq":8,"time":1,"data":{"turn":3,"reason":{"kind":"extension-reason","x":1}}}"#,
    ];
    for line in lines {
        let event = SessionEvent::from_json_line(line).unwrap();
        assert!(!is_candidate(&event), "{line}");
    }
    for line in [
        r#"{"type":"turn/start","seq":0,"time":1,"data":{"turn":1,"trigger":{"kind":"retry"}}}"#,
        r#"{"type":"turn/end","seq":5,"time":1,"data":{"turn":1,"reason":{"kind":"disposed"}}}"#,
        r#"{"type":"turn/end","seq":5,"time":1,"data":{"turn":0,"reason":{"kind":"completed"}}}"#,
        r#"{"type":"turn/end","seq":5,"time":1,"data":{"turn":1,"reason":{"kind":"completed","x":1}}}"#,
        r#"{"type":"user/message","seq":1,"time":1,"data":{"content":[],"source":{"kind":"user"}},"surfaceOp":"append"}"#,
    ] {
        let event = SessionEvent::from_json_line(line).unwrap();
        assert!(is_candidate(&event), "{line}");
    }
}
