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
    assert_eq!(
        frame.payload.get(),
        r#"{"type":"session/projection","sessionId":"s","key":"title","value":null,"seq":3}"#
    );
    let envelope: Value = serde_json::from_str(&frame.envelope()).unwrap();
    assert_eq!(envelope["method"], "session/projection");
    assert_eq!(envelope["payload"]["value"], Value::Null);
    assert_eq!(envelope["rpcId"].as_str().map(str::len), Some(36));
    check(
        &Frame::stream_error(&RpcError::internal("x")).payload,
        expect![[r#"{"type":"stream/error","error":{"code":"internal","message":"x","details":{}}}"#]],
    );
    check(
        &SubagentListEntry::Child {
            id: "c".into(),
            mode: "one-shot",
            label: None,
            activity: "inactive",
            has_children: false,
        },
        expect![[r#"{"kind":"child","id":"c","mode":"one-shot","activity":"inactive","hasChildren":false}"#]],
    );
    check(
        &SubagentListEntry::Diagnostic { id: "d".into(), reason: DiagnosticReason::Corrupt },
        expect![[r#"{"kind":"diagnostic","id":"d","reason":"corrupt"}"#]],
    );
}
