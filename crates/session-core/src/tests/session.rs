//! `Session`: headers, appends, seeds and the end-seed marker (reference 01 §1.2–1.7, §2.1,
//! §2.4).

use std::sync::Arc;

use serde_json::{Value, json};

use super::{T0, append, clock, closed_turn, detached, event, id, kinds, tool_result, user_message};
use crate::{
    Clock, END_SEED, JsonData, ManualClock, Session, SessionError, SessionEvent, SessionHeader, SurfaceIntent,
    SurfaceOp,
};

fn header(session_id: &str) -> SessionHeader {
    SessionHeader::new(id(session_id), T0 as u64)
}

#[test]
fn create_validates_the_header() {
    let check = |edit: fn(&mut SessionHeader), expected: &str| {
        let mut header = header("h");
        edit(&mut header);
        let err = Session::create(header, None, clock()).unwrap_err();
        assert_eq!(err.to_string(), expected);
    };
    check(|h| h.version = 1, "session header version must be 0, got 1");
    check(|h| h.cwd = Some("rel".into()), "session header cwd must be an absolute path, got \"rel\"");
    check(|h| h.owner = Some(String::new()), "session header owner must be a non-empty string");
    check(
        |h| h.created_at = crate::json::MAX_SAFE_INTEGER + 1,
        "session header createdAt must be a non-negative safe integer",
    );
    check(|h| h.seed_length = Some(u64::MAX), "session header seedLength must be a non-negative safe integer");
}

#[test]
fn append_stamps_seq_and_time_and_caches_snapshots() {
    let clock = Arc::new(ManualClock::new(50));
    let session = Session::create(header("a"), None, Arc::clone(&clock) as Arc<dyn Clock>).unwrap();
    assert!(session.is_empty());
    let first = append(&session, "turn/start", json!({"turn": 1}));
    clock.set(-5);
    let second = append(&session, "user/message", user_message("m1", "hi"));
    assert_eq!((first.seq, first.time), (0, 50));
    assert_eq!((second.seq, second.time), (1, -5), "time is not required to be monotonic");
    assert_eq!(second.surface_op, Some(SurfaceOp::Append));

    let snapshot = session.events();
    assert!(Arc::ptr_eq(&snapshot, &session.events()), "the snapshot is reused until the next append");
    append(&session, "turn/end", json!({"turn": 1, "reason": {"kind": "completed"}}));
    assert_eq!(snapshot.len(), 2, "a snapshot handed out never grows");
    assert_eq!(session.events().len(), 3);
    assert_eq!(session.len(), 3);
    assert_eq!(kinds(&session.events_from(1)), ["user/message", "turn/end"]);
    assert!(session.events_from(3).is_empty());
    assert!(session.events_from(u64::MAX).is_empty());
    assert_eq!(session.event(1).map(|event| event.seq), Some(1));
    assert!(session.event(3).is_none());
    assert_eq!(session.last_event().map(|event| event.kind.to_string()), Some("turn/end".to_owned()));
    assert!(Arc::ptr_eq(&session.events()[0], &first), "the committed event is the one returned");
}

#[test]
fn open_turn_is_tracked() {
    let session = detached("turns");
    assert_eq!((session.open_turn(), session.has_open_turn()), (None, false));
    append(&session, "turn/start", json!({"turn": 4}));
    append(&session, "step/start", json!({"turn": 4, "step": 1}));
    assert_eq!((session.open_turn(), session.has_open_turn()), (Some(4), true));
    append(&session, "turn/end", json!({"turn": 4, "reason": {"kind": "completed"}}));
    assert_eq!((session.open_turn(), session.has_open_turn()), (None, false));
    append(&session, "turn/start", json!({"turn": "five"}));
    assert_eq!((session.open_turn(), session.has_open_turn()), (None, true));
}

fn check_append(kind: &str, data: JsonData, surface: Option<SurfaceIntent>, expected: &str) {
    let session = detached("append");
    append(&session, "tool/result", with_mutations(tool_result(1, 1, "r0", "c0", "done"), json!([receipt(7)])));
    let err = session.append_data(kind, data, surface).unwrap_err();
    assert_eq!(err.to_string(), expected);
    assert_eq!(session.len(), 1, "a rejected append leaves the log unchanged");
}

fn receipt(commit_order: u64) -> Value {
    json!({
        "version": 1,
        "commitOrder": commit_order,
        "beforeSha1": null,
        "afterSha1": "a".repeat(40),
        "beforeSha256": null,
        "afterSha256": "b".repeat(64),
        "path": "src/lib.rs",
        "operation": "create",
        "diffs": [{"oldText": null, "newText": "fn main() {}"}],
    })
}

fn with_mutations(mut data: Value, mutations: Value) -> Value {
    data["mutations"] = mutations;
    data
}

/// Payload text that skipped the lossless check, as a decoder may produce it.
fn raw_data(text: &str) -> JsonData {
    JsonData::from_raw(serde_json::value::RawValue::from_string(text.to_owned()).unwrap())
}

fn data(value: Value) -> JsonData {
    JsonData::from_value(&value).unwrap()
}

#[test]
fn append_rejections() {
    check_append(
        "x/y",
        raw_data(r#"{"a":[1,-0.0]}"#),
        None,
        "session event \"x/y\" carries non-JSON-serializable data",
    );
    check_append(
        "request/header-delta",
        data(json!({})),
        None,
        "session event \"request/header-delta\" uses unsupported legacy request/header-delta format",
    );
    check_append(
        "request/header",
        data(json!({"header": {"config": {"provider": "p", "model": "m"}}, "reason": "fallback"})),
        None,
        "session event \"request/header\" uses unsupported legacy request/header reason \"fallback\"",
    );
    check_append(
        "tool/result",
        data(with_mutations(tool_result(1, 1, "r1", "c1", "x"), json!([]))),
        Some(SurfaceIntent::append()),
        "session event \"tool/result\" has invalid file mutations",
    );
    let mut modify = receipt(8);
    modify["operation"] = json!("modify");
    check_append(
        "tool/code-dispatch",
        data(json!({"mutations": [receipt(8), modify]})),
        None,
        "session event \"tool/code-dispatch\" file mutation at index 1 is invalid",
    );
    let mut both_null = receipt(8);
    both_null["diffs"] = json!([{"oldText": null, "newText": "x"}, {"oldText": null, "newText": null}]);
    check_append(
        "tool/code-dispatch",
        data(json!({"mutations": [both_null]})),
        None,
        "session event \"tool/code-dispatch\" file mutation at index 0 diff at index 1 is invalid",
    );
    check_append(
        "tool/result",
        data(with_mutations(tool_result(1, 1, "r1", "c1", "x"), json!([receipt(7)]))),
        Some(SurfaceIntent::append()),
        "session event \"tool/result\" reuses file mutation commit order 7",
    );
    check_append(
        "tool/code-dispatch",
        data(json!({"mutations": [receipt(9), receipt(9)]})),
        None,
        "session event \"tool/code-dispatch\" reuses file mutation commit order 9",
    );
    let session = detached("neg-zero");
    let err = session.append("x/y", &json!({"a": -0.0}), None).unwrap_err();
    assert_eq!(err.to_string(), "session event \"x/y\" carries non-JSON-serializable data");
}

#[test]
fn append_refuses_what_a_reader_would_refuse() {
    let session = detached("shapes");
    let refused = [
        ("user/message", json!({}), Some(SurfaceIntent::append()), crate::StorableRule::MessageShape),
        ("user/message", json!({"message": 7}), Some(SurfaceIntent::append()), crate::StorableRule::MessageShape),
        ("mode/set", json!({"mode": "plan"}), None, crate::StorableRule::Retired),
        ("custom/unknown", json!({}), None, crate::StorableRule::UnknownType),
        ("turn/start", json!({"turn": 1, "trigger": {"kind": "user"}}), None, crate::StorableRule::LegacyShape),
    ];
    for (kind, data, surface, rule) in refused {
        match session.append(kind, &data, surface) {
            Err(crate::SessionError::Unstorable(unstorable)) => {
                assert_eq!((unstorable.rule, unstorable.kind.as_str(), unstorable.seq), (rule, kind, 0), "{data}");
            }
            other => panic!("{kind} {data}: expected a storable refusal, got {other:?}"),
        }
    }
    assert!(session.is_empty(), "nothing refused entered the log");
}

#[test]
fn seeds_get_one_end_seed_marker() {
    let unseeded = Session::create(header("fresh"), None, clock()).unwrap();
    assert_eq!((unseeded.len(), unseeded.first_live_seq()), (0, 0));

    let empty = Session::create(header("empty"), Some(Vec::new()), clock()).unwrap();
    assert_eq!(kinds(&empty.events()), [END_SEED]);
    assert_eq!(empty.first_live_seq(), 0);
    assert_eq!(empty.events()[0].data, JsonData::empty_object());

    let source = detached("source");
    closed_turn(&source, 1, "hello");
    let seeded_clock = Arc::new(ManualClock::new(777));
    let seeded =
        Session::create(header("seeded"), Some(source.events().to_vec()), Arc::clone(&seeded_clock) as _).unwrap();
    assert_eq!(kinds(&seeded.events()), ["turn/start", "user/message", "turn/end", END_SEED]);
    assert_eq!(seeded.first_live_seq(), 3);
    assert_eq!((seeded.events()[3].seq, seeded.events()[3].time), (3, 777));
    assert_eq!(seeded.surface_nodes(), [1]);

    // Re-seeding with a log that already ends in end-seed adds nothing.
    let reopened = Session::create(header("reopened"), Some(seeded.events().to_vec()), clock()).unwrap();
    assert_eq!(reopened.events().len(), 4);
    assert_eq!(reopened.first_live_seq(), 4);
    assert_eq!(&reopened.events()[..], &seeded.events()[..]);
}

fn check_seed(seed: Vec<Arc<SessionEvent>>, expected: &str) {
    let err = Session::create(header("seed"), Some(seed), clock()).unwrap_err();
    assert_eq!(err.to_string(), expected);
}

fn with_op(event: Arc<SessionEvent>, op: Option<SurfaceOp>, sources: Option<&[u64]>) -> Arc<SessionEvent> {
    let mut event = Arc::unwrap_or_clone(event);
    event.surface_op = op;
    event.source_event_seqs = sources.map(Box::from);
    Arc::new(event)
}

#[test]
fn seed_rejections() {
    let turn_start = |seq| event("turn/start", seq, json!({"turn": 1}));
    check_seed(
        vec![turn_start(0), turn_start(2)],
        "seed event at index 1 has seq 2 (expected 1); seed must be contiguous from 0",
    );
    check_seed(
        vec![with_op(event("user/message", 0, user_message("m", "x")), None, None)],
        "invalid seed event at index 0: session event \"user/message\" is surface-eligible and requires a surfaceOp marker",
    );
    check_seed(
        vec![turn_start(0), with_op(turn_start(1), None, Some(&[0]))],
        "invalid seed event at index 1: session event \"turn/start\" is not surface-eligible and cannot carry sourceEventSeqs",
    );
    check_seed(
        vec![
            event("user/message", 0, user_message("m", "x")),
            with_op(
                event("user/message", 1, user_message("n", "y")),
                Some(SurfaceOp::Replace { start: 5, end: 5 }),
                Some(&[0]),
            ),
        ],
        "invalid seed event at index 1: surface replace: start seq 5 not found in surface",
    );
    check_seed(
        vec![event("user/message", 0, json!({"content": []}))],
        "seed user/message at index 0 lacks an identified message",
    );
    check_seed(
        vec![event("request/header", 0, json!({"header": {"config": {"provider": "p"}}, "reason": "initial"}))],
        "seed request/header at index 0 lacks provider/model",
    );
    check_seed(
        vec![event("request/header-delta", 0, json!({}))],
        "seed event at index 0 uses unsupported legacy request/header-delta format",
    );
    check_seed(
        vec![event(
            "request/header",
            0,
            json!({"header": {"config": {"provider": "p", "model": "m"}}, "reason": "fallback"}),
        )],
        "seed event at index 0 uses unsupported legacy request/header reason \"fallback\"",
    );
    for text in [r#"{"n":-0}"#, r#"{"n":[1e400]}"#] {
        let outside_domain = SessionEvent::new("x/y", 0, 0, raw_data(text));
        check_seed(vec![Arc::new(outside_domain)], "seed event at index 0 is not losslessly JSON-serializable");
    }
    check_seed(
        vec![event("tool/code-dispatch", 0, json!({"mutations": {}}))],
        "seed event at index 0 has invalid file mutations",
    );
    check_seed(
        vec![
            event("tool/code-dispatch", 0, json!({"mutations": [receipt(3)]})),
            event("tool/code-dispatch", 1, json!({"mutations": [receipt(3)]})),
        ],
        "seed event at index 1 reuses file mutation commit order 3",
    );
    // Shape checks run before the seq check, as in the reference.
    check_seed(vec![event("user/message", 4, json!(null))], "seed user/message at index 0 lacks an identified message");
    assert!(matches!(
        Session::create(header("seed"), Some(vec![turn_start(1)]), clock()),
        Err(SessionError::SeedNotContiguous { index: 0, seq: 1 })
    ));
}

#[test]
fn seeds_accept_ignorable_plugin_events_and_current_messages() {
    let mut plugin = SessionEvent::new("plugin/thing", 0, 3, JsonData::null());
    plugin.ignorable = true;
    let seed = vec![
        Arc::new(plugin),
        event(
            "request/header",
            1,
            json!({"header": {"config": {"provider": "p", "model": "m", "reasoningEffort": "high"}, "adapterDefaults": {"reasoningEffort": true}}, "reason": "initial"}),
        ),
        event("user/message", 2, user_message("m2", "hi")),
        event("tool/result", 3, tool_result(1, 1, "r3", "c3", "ok")),
    ];
    let session = Session::create(header("ok"), Some(seed), clock()).unwrap();
    assert_eq!(session.len(), 5);
    assert!(session.events()[0].ignorable);
}

/// A `tool/output` payload whose event at seq 0 and time [`T0`] encodes to exactly `size` bytes.
fn payload_of_encoded_size(size: usize) -> JsonData {
    let probe = SessionEvent::new("tool/output", 0, T0, JsonData::from_text("\"\"").unwrap());
    let text = format!("\"{}\"", "x".repeat(size - probe.encoded_len()));
    JsonData::from_text(text).unwrap()
}

#[test]
fn append_refuses_an_event_over_the_size_bound_and_keeps_the_log() {
    let session = Session::create_with_types(header("big"), None, clock(), super::known()).unwrap();
    let over = payload_of_encoded_size(crate::MAX_EVENT_BYTES + 1);
    let err = session.append_data("tool/output", over, None).unwrap_err();
    let expected = crate::TooLarge {
        what: crate::Oversized::Event { kind: "tool/output".into(), seq: 0 },
        size: crate::MAX_EVENT_BYTES as u64 + 1,
        limit: crate::MAX_EVENT_BYTES as u64,
    };
    assert_eq!(err.to_string(), expected.to_string());
    assert_eq!(err.too_large(), Some(&expected));
    assert!(session.is_empty(), "a refused append leaves the log unchanged");

    let at_limit = session.append_data("tool/output", payload_of_encoded_size(crate::MAX_EVENT_BYTES), None).unwrap();
    assert_eq!(at_limit.encoded_len(), crate::MAX_EVENT_BYTES);
    assert_eq!(session.len(), 1);
}

#[test]
fn a_seed_event_over_the_size_bound_is_refused() {
    let big = SessionEvent::new("tool/output", 0, T0, payload_of_encoded_size(crate::MAX_EVENT_BYTES + 1));
    let err = Session::create(header("seeded"), Some(vec![Arc::new(big)]), clock()).unwrap_err();
    assert_eq!(err.too_large().map(|too_large| too_large.size), Some(crate::MAX_EVENT_BYTES as u64 + 1));
}

#[test]
fn create_refuses_an_oversized_header_field() {
    let mut oversized = header("h");
    oversized.cwd = Some(format!("/{}", "d".repeat(crate::MAX_CWD_BYTES)));
    let err = Session::create(oversized, None, clock()).unwrap_err();
    assert_eq!(err.to_string(), "session header cwd is 4097 bytes, over the 4096-byte limit");
    let too_large = err.too_large().expect("a typed size error");
    assert_eq!(too_large.what, crate::Oversized::Header(crate::HeaderField::Cwd));
}

#[test]
fn a_held_append_order_keeps_other_threads_out_of_the_batch() {
    let session = detached("ordered");
    let other = detached("other");
    let order = session.append_order();
    assert_eq!(order.next_seq(), 0);
    let (started, on_start) = std::sync::mpsc::channel();
    let appender = {
        let session = Arc::clone(&session);
        std::thread::spawn(move || {
            started.send(()).unwrap();
            append(&session, "plugin/note", json!({"from": "the other thread"})).seq
        })
    };
    // Another session's appends do not wait for this one's order.
    let elsewhere = {
        let other = Arc::clone(&other);
        std::thread::spawn(move || append(&other, "plugin/note", json!({"n": 0})).seq)
    };
    assert_eq!(elsewhere.join().unwrap(), 0);
    on_start.recv().unwrap();
    // The holder's own appends go through the held (re-entrant) lock, at the positions it checked.
    assert_eq!(append(&session, "plugin/note", json!({"n": 1})).seq, 0);
    assert_eq!(append(&session, "plugin/note", json!({"n": 2})).seq, 1);
    assert_eq!(order.next_seq(), 2);
    drop(order);
    assert_eq!(appender.join().unwrap(), 2, "the other thread's append comes after the whole batch");
}
