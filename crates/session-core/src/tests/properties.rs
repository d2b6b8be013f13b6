//! Laws of the log: fork children are the seed prefix plus `session/end-seed`, replay is
//! deterministic and idempotent, `seq` is the index, and the text lossless check agrees with the
//! tree check.

use std::sync::Arc;

use proptest::prelude::*;
use serde_json::{Value, json};

use super::{append, assistant_message, clock, id, tool_call_block, tool_result, user_message};
use crate::{
    CreateOptions, END_SEED, Session, SessionEvent, SessionHeader, SessionStore, SurfaceIntent,
    json::{check_lossless, check_lossless_text},
};

/// One step of building a source log.
#[derive(Debug, Clone)]
enum Op {
    /// A complete turn with `n` user messages.
    ClosedTurn(u8),
    /// A turn with a tool call and its result.
    ToolTurn,
    /// A log-only plugin event.
    LogOnly(u32),
    /// A compaction-like replace of every current surface node.
    Compact,
    /// A `turn/start` that may stay open.
    OpenTurn,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (1u8..3).prop_map(Op::ClosedTurn),
        Just(Op::ToolTurn),
        any::<u32>().prop_map(Op::LogOnly),
        Just(Op::Compact),
        Just(Op::OpenTurn),
    ]
}

fn build(session: &Session, ops: &[Op]) {
    let mut turn = 0;
    for op in ops {
        match op {
            Op::ClosedTurn(n_messages) => {
                turn += 1;
                append(session, "turn/start", json!({"turn": turn}));
                for idx in 0..*n_messages {
                    append(session, "user/message", user_message(&format!("m{turn}-{idx}"), "text"));
                }
                append(session, "turn/end", json!({"turn": turn, "reason": {"kind": "completed"}}));
            }
            Op::ToolTurn => {
                turn += 1;
                let call_id = format!("call-{turn}");
                append(session, "turn/start", json!({"turn": turn}));
                append(session, "step/start", json!({"turn": turn, "step": 1}));
                append(
                    session,
                    "assistant/message",
                    assistant_message(turn, 1, &format!("a{turn}"), json!([tool_call_block(&call_id)])),
                );
                let call = append(
                    session,
                    "tool/call",
                    json!({"turn": turn, "step": 1, "callId": call_id, "name": "bash", "arguments": "{}"}),
                );
                let result = tool_result(turn, 1, &format!("r{turn}"), &call_id, "ok");
                session.append("tool/result", &result, Some(SurfaceIntent::append().with_sources([call.seq]))).unwrap();
                append(session, "step/end", json!({"turn": turn, "step": 1}));
                append(session, "turn/end", json!({"turn": turn, "reason": {"kind": "completed"}}));
            }
            Op::LogOnly(value) => {
                append(session, "plugin/note", json!({"value": value}));
            }
            Op::Compact => {
                let nodes = session.surface_nodes();
                if let (Some(&start), Some(&end)) = (nodes.first(), nodes.last()) {
                    let intent = SurfaceIntent::replace(start, end).with_sources(nodes.clone());
                    session.append("user/message", &user_message("summary", "summary"), Some(intent)).unwrap();
                }
            }
            Op::OpenTurn => {
                turn += 1;
                append(session, "turn/start", json!({"turn": turn}));
            }
        }
    }
}

/// Boundaries a fork accepts: those whose prefix does not end inside an open turn.
fn forkable_boundaries(events: &[Arc<SessionEvent>]) -> Vec<u64> {
    let mut open = false;
    let mut boundaries = Vec::new();
    for event in events {
        match event.kind.as_str() {
            "turn/start" => open = true,
            "turn/end" => open = false,
            _ => {}
        }
        if !open {
            boundaries.push(event.seq);
        }
    }
    boundaries
}

fn assert_contiguous(session: &Session) {
    for (idx, event) in session.events().iter().enumerate() {
        assert_eq!(event.seq, idx as u64);
    }
    assert_eq!(session.len(), session.events().len() as u64);
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        prop_oneof![Just(0.0f64), Just(-0.0f64), Just(-0.5f64), Just(1e300f64), (-1e6f64..1e6)].prop_map(|n| json!(n)),
        "[a-z0-9\"\\\\-]{0,6}".prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 32, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map("[a-z-]{1,3}", inner, 0..4)
                .prop_map(|map| Value::Object(map.into_iter().collect())),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn a_fork_child_is_the_seed_prefix_plus_end_seed(ops in prop::collection::vec(op(), 0..8), pick in any::<prop::sample::Index>()) {
        let store = SessionStore::with_known_types(clock(), super::known());
        let source = store.create(Some(id("source")), CreateOptions::default()).unwrap();
        build(&source, &ops);
        let events = source.events();
        let boundaries = forkable_boundaries(&events);
        let boundary = if boundaries.is_empty() { None } else { Some(boundaries[pick.index(boundaries.len())]) };
        let child = store.fork(&id("source"), boundary.map(|b| b as i64), None);
        let expected_len = match boundary {
            Some(boundary) => boundary as usize + 1,
            None if events.is_empty() => 0,
            // Nothing forkable: the default boundary is the last event, inside an open turn.
            None => {
                prop_assert_eq!(child.unwrap_err().code.as_str(), "OPEN_TURN");
                return Ok(());
            }
        };
        let child = child.unwrap();
        let child_events = child.events();
        prop_assert_eq!(child_events.len(), expected_len + 1);
        prop_assert_eq!(&child_events[..expected_len], &events[..expected_len]);
        prop_assert_eq!(child_events[expected_len].kind.as_str(), END_SEED);
        prop_assert_eq!(child_events[expected_len].seq, expected_len as u64);
        prop_assert_eq!(child.header().seed_length, Some(expected_len as u64));
        prop_assert_eq!(child.header().parent_session.as_ref(), Some(source.id()));
        prop_assert_eq!(child.first_live_seq(), expected_len as u64);
        assert_contiguous(&source);
        assert_contiguous(&child);
    }

    #[test]
    fn replay_is_deterministic_and_idempotent(ops in prop::collection::vec(op(), 0..8)) {
        let original = Session::create_with_types(SessionHeader::new(id("a"), 0), None, clock(), super::known()).unwrap();
        build(&original, &ops);
        let replayed = Session::create_with_types(SessionHeader::new(id("b"), 0), Some(original.events().to_vec()), clock(), super::known()).unwrap();
        let n = original.events().len();
        prop_assert_eq!(&replayed.events()[..n], &original.events()[..]);
        prop_assert_eq!(replayed.events().len(), n + 1);
        prop_assert_eq!(replayed.surface_nodes(), original.surface_nodes());
        prop_assert_eq!(replayed.replace_generation(), original.replace_generation());
        prop_assert_eq!(replayed.has_open_turn(), original.has_open_turn());
        prop_assert_eq!(replayed.open_turn(), original.open_turn());

        // Reopening the replay adds nothing, and a fresh parse of the serialized log replays the same.
        let reopened = Session::create_with_types(SessionHeader::new(id("c"), 0), Some(replayed.events().to_vec()), clock(), super::known()).unwrap();
        prop_assert_eq!(&reopened.events()[..], &replayed.events()[..]);
        prop_assert_eq!(reopened.first_live_seq(), replayed.events().len() as u64);
        let decoded: Vec<Arc<SessionEvent>> = replayed
            .events()
            .iter()
            .map(|event| Arc::new(serde_json::from_str(&serde_json::to_string(event).unwrap()).unwrap()))
            .collect();
        let from_text = Session::create_with_types(SessionHeader::new(id("d"), 0), Some(decoded), clock(), super::known()).unwrap();
        prop_assert_eq!(&from_text.events()[..], &replayed.events()[..]);
        assert_contiguous(&original);
        assert_contiguous(&replayed);
        assert_contiguous(&from_text);
    }

    #[test]
    fn the_text_lossless_check_agrees_with_the_tree_check(value in json_value()) {
        let text = serde_json::to_string(&value).unwrap();
        prop_assert_eq!(check_lossless_text(&text).is_ok(), check_lossless(&value).is_ok(), "{}", text);
    }
}

/// Cuts `line` at `at`, or overwrites the byte there, and checks that the line decoder accepts
/// and rejects the result exactly as `serde_json` does.
fn damaged_line_agrees(mut line: Vec<u8>, at: prop::sample::Index, byte: u8, cut: bool) -> Result<(), TestCaseError> {
    let at = at.index(line.len());
    if cut {
        line.truncate(at);
    } else {
        line[at] = byte;
    }
    if let Ok(line) = std::str::from_utf8(&line) {
        let fast = SessionEvent::from_json_line(line).ok();
        let slow = serde_json::from_str::<SessionEvent>(line).ok();
        prop_assert_eq!(fast, slow, "{}", line);
    }
    Ok(())
}

fn envelope() -> impl Strategy<Value = SessionEvent> {
    let kind = prop_oneof![
        Just("turn/start".to_owned()),
        Just("user/message".to_owned()),
        Just("tool/result".to_owned()),
        "[a-z/\"\\\\é\u{1}-]{0,12}",
    ];
    let surface = prop_oneof![
        Just(None),
        Just(Some(crate::SurfaceOp::Append)),
        (0u64..1 << 53, 0u64..1 << 53).prop_map(|(start, end)| Some(crate::SurfaceOp::Replace { start, end })),
    ];
    (
        kind,
        0u64..1 << 53,
        -(1i64 << 53) + 1..1 << 53,
        json_value(),
        proptest::option::of(prop::collection::vec(0u64..1 << 53, 0..4)),
        surface,
        any::<bool>(),
    )
        .prop_map(|(kind, seq, time, data, sources, surface_op, ignorable)| SessionEvent {
            kind: kind.into(),
            seq,
            time,
            data: crate::JsonData::from_text(serde_json::to_string(&data).unwrap())
                .unwrap_or_else(|_| crate::JsonData::null()),
            source_event_seqs: sources.map(Vec::into_boxed_slice),
            surface_op,
            ignorable,
        })
}

/// A message payload in the current shape, or near it: every check of the shape rules is
/// exercised by some mutation.
fn message_event() -> impl Strategy<Value = SessionEvent> {
    let text =
        prop_oneof![Just("".to_owned()), Just("x".to_owned()), Just("call-1".to_owned()), Just("a\"b".to_owned())];
    let value = prop_oneof![
        text.clone().prop_map(Value::String),
        Just(Value::Null),
        Just(json!(1)),
        Just(json!([])),
        Just(json!({})),
    ];
    let maybe = |value: BoxedStrategy<Value>| proptest::option::weighted(0.85, value);
    let string = || maybe(prop_oneof![4 => text.clone().prop_map(Value::String), 1 => value.clone()].boxed());
    let role = maybe(prop_oneof![Just(json!("user")), Just(json!("assistant")), value.clone()].boxed());
    let source_kind =
        maybe(prop_oneof![Just(json!("tool")), Just(json!("model")), Just(json!("user")), value.clone()].boxed());
    let block = (
        maybe(prop_oneof![Just(json!("tool-result")), Just(json!("text")), value.clone()].boxed()),
        string(),
        maybe(prop_oneof![Just(json!([])), value.clone()].boxed()),
    )
        .prop_map(|(kind, call, content)| {
            let mut block = serde_json::Map::new();
            kind.map(|kind| block.insert("type".into(), kind));
            call.map(|call| block.insert("toolCallId".into(), call));
            content.map(|content| block.insert("content".into(), content));
            Value::Object(block)
        });
    let content = maybe(prop_oneof![prop::collection::vec(block, 0..3).prop_map(Value::Array), value.clone()].boxed());
    let kind = prop_oneof![Just("user/message"), Just("assistant/message"), Just("tool/result")];
    (kind, string(), role, source_kind, string(), string(), string(), content, any::<bool>()).prop_map(
        |(kind, id, role, source_kind, provider, model, call_id, content, wrap)| {
            let mut source = serde_json::Map::new();
            source_kind.map(|value| source.insert("kind".into(), value));
            provider.map(|value| source.insert("provider".into(), value));
            model.map(|value| source.insert("model".into(), value));
            call_id.map(|value| source.insert("callId".into(), value));
            let mut message = serde_json::Map::new();
            id.map(|value| message.insert("id".into(), value));
            role.map(|value| message.insert("role".into(), value));
            message.insert("source".into(), Value::Object(source));
            content.map(|value| message.insert("content".into(), value));
            let message = Value::Object(message);
            let data = if kind == "user/message" && !wrap { message } else { json!({"turn": 1, "message": message}) };
            SessionEvent::new(kind, 0, 0, crate::JsonData::from_value(&data).unwrap())
        },
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// The log writer's envelope is byte for byte serde_json's, `encoded_len` is its length, and
    /// the line decoder gives what serde_json gives.
    #[test]
    fn canonical_envelopes_round_trip(event in envelope()) {
        let mut line = Vec::new();
        event.write_json(&mut line);
        prop_assert_eq!(&line, &serde_json::to_vec(&event).unwrap());
        // The size bound measures exactly the bytes written.
        prop_assert_eq!(event.encoded_len(), line.len());
        let line = String::from_utf8(line).unwrap();
        prop_assert_eq!(SessionEvent::from_json_line(&line).unwrap(), event);
    }

    /// On any damaged line, the decoder accepts and rejects exactly what serde_json does.
    #[test]
    fn the_line_decoder_agrees_with_serde(event in envelope(), at in any::<prop::sample::Index>(), byte in any::<u8>(), cut in any::<bool>()) {
        damaged_line_agrees(serde_json::to_vec(&event).unwrap(), at, byte, cut)?;
    }

    /// Damaged message lines, where the decoder validates while it walks the shape: it accepts
    /// and rejects exactly what serde_json does.
    #[test]
    fn damaged_message_lines_agree_with_serde(event in message_event(), at in any::<prop::sample::Index>(), byte in any::<u8>(), cut in any::<bool>()) {
        let mut line = Vec::new();
        event.write_json(&mut line);
        damaged_line_agrees(line, at, byte, cut)?;
    }

    /// The one-pass message check never accepts what the field-by-field rules reject.
    #[test]
    fn the_fast_message_check_agrees(event in message_event()) {
        let fast = super::super::messages::fast_message_is_valid(&event);
        let slow = super::super::messages::check_message_shape_fields(&event, "event");
        if fast {
            prop_assert!(slow.is_ok(), "{} {:?}", event.data, slow);
        }
        // The decoder's in-pass verdict agrees too: a decoded event checks exactly like the
        // original.
        let mut line = Vec::new();
        let mut marked = event.clone();
        marked.surface_op = Some(crate::SurfaceOp::Append);
        marked.write_json(&mut line);
        let decoded = SessionEvent::from_json_line(std::str::from_utf8(&line).unwrap()).unwrap();
        prop_assert_eq!(decoded.data.verified_message().is_some(), fast);
        prop_assert_eq!(crate::check_message_shape(&decoded), crate::check_message_shape(&marked));
    }
}
