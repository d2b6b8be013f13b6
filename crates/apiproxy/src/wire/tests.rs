//! Golden tests of the wire shapes: error codes and details, envelopes, frames and rows.

use expect_test::{Expect, expect};
use serde_json::{Value, json};

use super::*;

fn check(value: &impl Serialize, expected: Expect) {
    expected.assert_eq(&serde_json::to_string(value).unwrap());
}

#[test]
fn every_error_kind_is_in_the_closed_set_with_exact_details() {
    let kinds = [
        (
            ErrorKind::BadRequest { issues: vec![Issue::at("invalid_type", "sessionId", "required")] },
            json!({"issues": [{"code": "invalid_type", "path": ["sessionId"], "message": "required"}]}),
        ),
        (ErrorKind::Cancelled, json!({})),
        (ErrorKind::SessionNotFound { session_id: "s".into() }, json!({"sessionId": "s"})),
        (
            ErrorKind::SessionConflict { session_id: "s".into(), requested_cwd: "/a".into(), existing_cwd: None },
            json!({"sessionId": "s", "requestedCwd": "/a"}),
        ),
        (ErrorKind::WorkspaceNotFound { workspace_id: "w".into() }, json!({"workspaceId": "w"})),
        (
            ErrorKind::AgentPresetConflict {
                session_id: "s".into(),
                requested_preset: "p".into(),
                existing_preset: Some("q".into()),
            },
            json!({"sessionId": "s", "requestedPreset": "p", "existingPreset": "q"}),
        ),
        (ErrorKind::AgentBusy { reason: "r".into() }, json!({"reason": "r"})),
        (ErrorKind::ForkUnavailable { session_id: "s".into() }, json!({"sessionId": "s"})),
        (ErrorKind::SubagentParentUnavailable { parent_session_id: "p".into() }, json!({"parentSessionId": "p"})),
        (
            ErrorKind::SubagentNotFound { parent_session_id: "p".into(), child_session_id: "c".into() },
            json!({"parentSessionId": "p", "childSessionId": "c"}),
        ),
        (
            ErrorKind::SubagentCatalogDiagnostic {
                parent_session_id: "p".into(),
                child_session_id: "c".into(),
                reason: DiagnosticReason::Unavailable,
            },
            json!({"parentSessionId": "p", "childSessionId": "c", "reason": "unavailable"}),
        ),
        (ErrorKind::SubagentUnauthorized { child_session_id: "c".into() }, json!({"childSessionId": "c"})),
        (ErrorKind::Internal, json!({})),
    ];
    for (kind, details) in kinds {
        assert!(CLOSED_ERROR_CODES.contains(&kind.code()), "{}", kind.code());
        let error = RpcError::new(kind, "m");
        let value = serde_json::to_value(&error).unwrap();
        assert_eq!(value, json!({"code": error.code(), "message": "m", "details": details}));
    }
}

#[test]
fn envelopes() {
    check(
        &server_response("r", &Ok(json!({"a": 1}))),
        expect![[r#"{"type":"server-response","rpcId":"r","result":{"ok":true,"value":{"a":1}}}"#]],
    );
    check(
        &server_response("r", &Err(RpcError::session_not_found("s"))),
        expect![[
            r#"{"type":"server-response","rpcId":"r","result":{"ok":false,"error":{"code":"session-not-found","message":"session \"s\" not found","details":{"sessionId":"s"}}}}"#
        ]],
    );
    // The by-value envelope is the same envelope, key order included.
    for result in [Ok(json!({"a": [1, {"b": null}]})), Err(RpcError::session_not_found("s"))] {
        let expected = serde_json::to_string(&server_response("r", &result)).unwrap();
        assert_eq!(serde_json::to_string(&into_server_response("r", result)).unwrap(), expected);
    }
    let request =
        parse_client_request(&json!({"type": "client-request", "rpcId": "", "method": "m", "extra": 1})).unwrap();
    assert_eq!(request, ClientRequest { rpc_id: String::new(), method: "m".into(), payload: Value::Null });
    assert_eq!(parse_client_request(&json!({"rpcId": 5})).unwrap_err().0, INVALID_REQUEST_RPC_ID);
    for method in Method::ALL {
        assert_eq!(Method::from_name(method.as_str()), Some(method));
    }
}

#[test]
fn frames_and_rows() {
    let frame = Frame::session_projection("s", "title", &Value::Null, 3);
    assert_eq!(frame.payload(), r#"{"type":"session/projection","sessionId":"s","key":"title","value":null,"seq":3}"#);
    let text = frame.envelope();
    let envelope: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(envelope["method"], "session/projection");
    assert_eq!(envelope["payload"]["value"], Value::Null);
    let rpc_id = envelope["rpcId"].as_str().unwrap();
    assert_eq!(rpc_id.len(), 36);
    assert_eq!(
        text,
        format!(
            r#"{{"type":"server-request","rpcId":"{rpc_id}","method":"session/projection","payload":{}}}"#,
            frame.payload()
        )
    );
    assert_eq!(text.len(), text.capacity(), "written into a string of its final size");
    assert_ne!(frame.envelope(), text, "each envelope has an rpcId of its own");
    expect![[r#"{"type":"stream/error","error":{"code":"internal","message":"x","details":{}}}"#]]
        .assert_eq(Frame::stream_error(&RpcError::internal("x")).payload());
    check(
        &SubagentListEntry::Child {
            id: "c".into(),
            mode: "one-shot",
            label: None,
            activity: "inactive",
            has_children: false,
            active_ms: None,
        },
        expect![[r#"{"kind":"child","id":"c","mode":"one-shot","activity":"inactive","hasChildren":false}"#]],
    );
    check(
        &SubagentListEntry::Child {
            id: "c".into(),
            mode: "continuable",
            label: Some("l".into()),
            activity: "running",
            has_children: true,
            active_ms: Some(1_500),
        },
        expect![[
            r#"{"kind":"child","id":"c","mode":"continuable","label":"l","activity":"running","hasChildren":true,"activeMs":1500}"#
        ]],
    );
    check(
        &SubagentListEntry::Diagnostic { id: "d".into(), reason: DiagnosticReason::Corrupt },
        expect![[r#"{"kind":"diagnostic","id":"d","reason":"corrupt"}"#]],
    );
}

#[test]
fn answers() {
    check(
        &HostDescription {
            version: "0.1.0".into(),
            cwd: "/w".into(),
            attached_sessions: 2,
            home: "/home/u".into(),
            can_open_path: false,
            operator_eligible: true,
            follows_store: false,
        },
        expect![[
            r#"{"version":"0.1.0","cwd":"/w","attachedSessions":2,"home":"/home/u","canOpenPath":false,"operatorEligible":true,"followsStore":false}"#
        ]],
    );
    let row = SessionSummary::from_header(&SessionHeader::new("s".into(), 5), 7, false, true);
    check(
        &SessionList { items: vec![row.clone()] },
        expect![[r#"{"items":[{"sessionId":"s","updatedAt":7,"running":false,"blank":true}]}"#]],
    );
    check(
        &SessionListPage { items: vec![row.clone()], next_cursor: Some("c".into()) },
        expect![[r#"{"items":[{"sessionId":"s","updatedAt":7,"running":false,"blank":true}],"nextCursor":"c"}"#]],
    );
    check(&SessionListPage { items: vec![], next_cursor: None }, expect![[r#"{"items":[],"nextCursor":null}"#]]);
    check(&Created { session_id: "s".into(), agent_preset: None }, expect![[r#"{"sessionId":"s"}"#]]);
    check(
        &Created { session_id: "s".into(), agent_preset: Some("p".into()) },
        expect![[r#"{"sessionId":"s","agentPreset":"p"}"#]],
    );
    check(&Forked { session_id: "f".into() }, expect![[r#"{"sessionId":"f"}"#]]);
    check(
        &Appended { first_seq: Some(3), last_seq: Some(4), durable_seq: None },
        expect![[r#"{"firstSeq":3,"lastSeq":4,"durableSeq":null}"#]],
    );
    check(
        &Appended { first_seq: None, last_seq: None, durable_seq: Some(2) },
        expect![[r#"{"firstSeq":null,"lastSeq":null,"durableSeq":2}"#]],
    );
    check(&Flushed { durable_seq: Some(4) }, expect![[r#"{"durableSeq":4}"#]]);
    check(&Flushed { durable_seq: None }, expect![[r#"{"durableSeq":null}"#]]);
    check(&Released { last_seq: -1 }, expect![[r#"{"released":true,"lastSeq":-1}"#]]);
    check(
        &Spawned { child_session_id: "c".into(), mode: "one-shot" },
        expect![[r#"{"childSessionId":"c","mode":"one-shot"}"#]],
    );
}

/// A `session/event` frame written straight from the event is the text the generic
/// construction writes, for every optional field and for ids that need escaping.
#[test]
fn a_session_event_frame_is_the_generic_frame_text() {
    let lines = [
        r#"{"type":"turn/start","seq":0,"time":1700000000000,"data":{"turn":1}}"#,
        r#"{"type":"assistant/message","seq":7,"time":1,"data":{"text":"a \"quoted\" é\n","n":1.5},"sourceEventSeqs":[3,4],"surfaceOp":"append"}"#,
        r#"{"type":"x/y","seq":8,"time":2,"data":[],"surfaceOp":{"op":"replace","start":1,"end":2},"ignorable":true}"#,
    ];
    for line in lines {
        let event = SessionEvent::from_json_line(line).unwrap();
        for id in ["s", "a\"b\\c", "ünï"] {
            let generic = Frame::new("session/event", json!({"sessionId": id, "event": &event}));
            let direct = Frame::session_event(id, &event);
            assert_eq!(direct.kind, generic.kind);
            assert_eq!(direct.payload(), generic.payload(), "{line} as {id}");
            serde_json::from_str::<Value>(direct.payload()).expect("a frame's payload is JSON");
        }
    }
    // A payload stored in another form than the canonical one goes out as stored, the same value.
    let event =
        SessionEvent::from_json_line(r#"{"type":"x/y","seq":1,"time":2,"data":{"n":1.50, "s":"\u00e9"}}"#).unwrap();
    let direct: Value = serde_json::from_str(Frame::session_event("s", &event).payload()).unwrap();
    let generic = Frame::new("session/event", json!({"sessionId": "s", "event": &event}));
    assert_eq!(direct, serde_json::from_str::<Value>(generic.payload()).unwrap());
    let mut stored = Vec::new();
    event.write_json(&mut stored);
    assert!(Frame::session_event("s", &event).payload().contains(std::str::from_utf8(&stored).unwrap()));
}
