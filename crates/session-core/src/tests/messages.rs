//! Message-shape checks (reference 01 §1.5).

use serde_json::{Value, json};

use super::{assistant_message, event, tool_result, user_message};
use crate::{check_message_shape, check_message_shape_as, check_seed_event_shape};

fn check(kind: &str, data: Value, expected: Result<(), &str>) {
    let event = event(kind, 0, data);
    let actual = check_message_shape_as(&event, "S");
    assert_eq!(actual, expected.map_err(|message| format!("S {message}")), "{kind} {}", event.data);
}

fn edit(mut value: Value, pointer: &str, replacement: Value) -> Value {
    *value.pointer_mut(pointer).unwrap_or_else(|| panic!("{pointer}")) = replacement;
    value
}

fn without(mut value: Value, pointer: &str, key: &str) -> Value {
    value.pointer_mut(pointer).and_then(Value::as_object_mut).unwrap().remove(key);
    value
}

#[test]
fn user_message_shapes() {
    let user = user_message("m1", "hi");
    check("user/message", user.clone(), Ok(()));
    check("user/message", without(user.clone(), "", "id"), Err("lacks an identified message"));
    check("user/message", edit(user.clone(), "/id", json!("")), Err("lacks an identified message"));
    check("user/message", edit(user.clone(), "/id", json!(5)), Err("lacks an identified message"));
    check("user/message", json!(null), Err("lacks an identified message"));
    check("user/message", json!([1]), Err("lacks an identified message"));
    check("user/message", edit(user.clone(), "/role", json!("assistant")), Err("message must have role \"user\""));
    check("user/message", without(user.clone(), "", "role"), Err("message must have role \"user\""));
    check("user/message", without(user.clone(), "", "source"), Err("message has invalid source"));
    check("user/message", edit(user.clone(), "/source", json!("user")), Err("message has invalid source"));
    check("user/message", edit(user.clone(), "/source/kind", json!("")), Err("message has invalid source"));
    check("user/message", edit(user.clone(), "/content", json!("hi")), Err("message has invalid content"));
    check("user/message", edit(user, "/content", json!(null)), Err("message has invalid content"));
}

#[test]
fn assistant_message_shapes() {
    let assistant = assistant_message(1, 1, "a1", json!([{"type": "text", "text": "hi"}]));
    check("assistant/message", assistant.clone(), Ok(()));
    check("assistant/message", assistant_message(1, 1, "a1", json!([])), Ok(()));
    check("assistant/message", edit(assistant.clone(), "/message", json!(null)), Err("lacks an identified message"));
    check("assistant/message", json!({}), Err("lacks an identified message"));
    check(
        "assistant/message",
        edit(assistant.clone(), "/message/role", json!("user")),
        Err("message must have role \"assistant\""),
    );
    check(
        "assistant/message",
        edit(assistant.clone(), "/message/source/kind", json!("user")),
        Err("message must have model source"),
    );
    check(
        "assistant/message",
        edit(assistant.clone(), "/message/source/provider", json!("")),
        Err("message must have model source"),
    );
    check("assistant/message", without(assistant, "/message/source", "model"), Err("message must have model source"));
}

#[test]
fn tool_result_shapes() {
    let result = tool_result(1, 1, "r1", "c1", "ok");
    check("tool/result", result.clone(), Ok(()));
    check("tool/result", edit(result.clone(), "/message", json!(null)), Err("lacks an identified message"));
    check("tool/result", edit(result.clone(), "/message/role", json!("tool")), Err("message must have role \"user\""));
    check(
        "tool/result",
        edit(result.clone(), "/message/source/kind", json!("user")),
        Err("message must have tool source"),
    );
    check(
        "tool/result",
        edit(result.clone(), "/message/source/callId", json!("")),
        Err("message must have tool source"),
    );
    let block = result["message"]["content"][0].clone();
    check(
        "tool/result",
        edit(result.clone(), "/message/content", json!([block.clone(), block])),
        Err("message must contain one tool-result block"),
    );
    check(
        "tool/result",
        edit(result.clone(), "/message/content", json!([])),
        Err("message must contain one tool-result block"),
    );
    check(
        "tool/result",
        edit(result.clone(), "/message/content/0/type", json!("text")),
        Err("message must contain one tool-result block"),
    );
    check(
        "tool/result",
        edit(result.clone(), "/message/content/0/content", json!("ok")),
        Err("message must contain one tool-result block"),
    );
    check(
        "tool/result",
        edit(result, "/message/content/0/toolCallId", json!("c2")),
        Err("message has mismatched tool call ids"),
    );
}

#[test]
fn the_load_path_subject_names_the_seq() {
    let event = event("user/message", 12, json!({}));
    assert_eq!(check_message_shape(&event), Err("session event at seq 12 lacks an identified message".to_owned()));
}

#[test]
fn other_events_are_not_inspected() {
    check("plugin/thing", json!(null), Ok(()));
    check("turn/start", json!("anything"), Ok(()));
}

fn check_seed(data: Value, expected: Result<(), &str>) {
    let event = event("request/header", 3, data);
    assert_eq!(check_seed_event_shape(&event, 3), expected.map_err(str::to_owned), "{}", event.data);
}

#[test]
fn seed_request_header_shapes() {
    let header = |config: Value, defaults: Option<Value>| {
        let mut header = json!({"config": config});
        if let Some(defaults) = defaults {
            header["adapterDefaults"] = defaults;
        }
        json!({"header": header, "reason": "initial"})
    };
    let config = json!({"provider": "p", "model": "m", "reasoningEffort": "high", "maxTokens": 100});
    check_seed(header(config.clone(), None), Ok(()));
    check_seed(header(config.clone(), Some(json!({"reasoningEffort": true, "maxTokens": true}))), Ok(()));
    check_seed(json!({"reason": "initial"}), Err("seed request/header at index 3 lacks provider/model"));
    check_seed(
        header(json!({"provider": "p", "model": ""}), None),
        Err("seed request/header at index 3 lacks provider/model"),
    );
    check_seed(
        header(json!({"provider": "p", "model": "m", "reasoningEffort": ""}), None),
        Err("seed request/header at index 3 has an invalid reasoningEffort"),
    );
    let invalid = Err("seed request/header at index 3 has invalid adapterDefaults");
    check_seed(header(json!({"provider": "p", "model": "m"}), Some(json!({"maxTokens": true}))), invalid);
    check_seed(header(config.clone(), Some(json!({"temperature": true}))), invalid);
    check_seed(header(config.clone(), Some(json!({"maxTokens": false}))), invalid);
    check_seed(header(config, Some(json!([]))), invalid);
    // The message subject names the seed index.
    let event = event("user/message", 2, json!({}));
    assert_eq!(
        check_seed_event_shape(&event, 2),
        Err("seed user/message at index 2 lacks an identified message".to_owned())
    );
}

/// Well-formed messages of every kind take the one-pass path, so a long log is checked in one
/// scan per payload.
#[test]
fn well_formed_messages_take_the_one_pass_path() {
    for (kind, data) in [
        ("user/message", user_message("m1", "hi \"there\"\n")),
        ("assistant/message", assistant_message(1, 1, "a1", json!([{"type": "text", "text": "hi"}]))),
        ("tool/result", tool_result(1, 1, "r1", "c1", "ok")),
    ] {
        assert!(crate::messages::fast_message_is_valid(&event(kind, 0, data.clone())), "{kind} {data}");
    }
    // A message the field rules accept but the one pass leaves to them: an escaped id.
    let escaped = user_message("m\"1", "hi");
    assert!(!crate::messages::fast_message_is_valid(&event("user/message", 0, escaped.clone())));
    check("user/message", escaped, Ok(()));
}

/// Found in review: a message walked with its shape may nest deeper than the compact scanner
/// follows on its own (the walk enters a few levels before skipping). Decoding it must not trip
/// the decoder's debug check, and must agree with serde_json.
#[test]
fn deeply_nested_message_content_decodes_like_serde() {
    for depth in [60, 64, 66, 70, 200] {
        let nested = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
        let line = format!(
            r#"{{"type":"user/message","seq":0,"time":0,"data":{{"id":"m","role":"user","source":{{"kind":"user"}},"content":{nested}}},"surfaceOp":"append"}}"#
        );
        let fast = crate::SessionEvent::from_json_line(&line).ok();
        let slow = serde_json::from_str::<crate::SessionEvent>(&line).ok();
        assert_eq!(fast, slow, "depth {depth}");
        assert!(fast.is_some(), "depth {depth}");
    }
}
