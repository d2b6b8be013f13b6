//! Logs in the reference's earlier event shapes (reference 01 §3.7, §7.2 items 9–11), on every
//! backend: `inspect`, the streamed read, `read_from` and `load` see the current equivalent, a
//! malformed legacy record is refused with the reference's message, and no read, repair or
//! adoption rewrites a stored line.

use std::sync::Arc;

use serde_json::{Value, json};
use session_core::{CreateOptions, HeaderMeta, SessionEvent, SessionHeader, SessionId};
use session_persistence::{CollectSink, Coordinator, PersistenceError, SessionPersistence};

use crate::{
    inspect::{data, kinds, message_id, message_ids, resume},
    live::store,
    persistence::{Cx, cancel, event, header, plain},
};

/// Writes `events` as stored bytes, bypassing the append checks (a `steering/message` carries a
/// surface marker no current event of its type may carry).
/// The backend is called on a thread of its own, as the coordinator calls it (on the blocking
/// pool): a backend may block on a runtime of its own.
pub(crate) fn store_raw(persistence: &Coordinator, header: &SessionHeader, events: &[Arc<SessionEvent>]) {
    let backend = persistence.backend();
    std::thread::scope(|scope| scope.spawn(|| backend.append_batch(header, events, false).unwrap()).join().unwrap());
}

/// The events as stored, straight from the backend, without any import.
fn stored(persistence: &Coordinator, id: &SessionId) -> Vec<SessionEvent> {
    let backend = persistence.backend();
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                let mut sink = CollectSink::default();
                backend.scan(id, &cancel(), &mut sink).unwrap().expect("the log is stored");
                sink.events
            })
            .join()
            .unwrap()
    })
}

/// The stored bytes of a log, from the place's hook; `None` (and a note in the report) for a
/// backend without log files.
fn stored_bytes(h: &Cx<'_>, header: &SessionHeader) -> Option<Vec<u8>> {
    let bytes = h.place.log_bytes(header);
    if bytes.is_none() {
        h.note("skipped the stored-bytes checks: the place gives no log bytes");
    }
    bytes
}

/// A valid log from just before messages gained wrappers and identities (the reference's
/// `legacyMessageLog`): a pre-identity user message, assistant message and tool result, and a
/// replacement of the tool result.
fn legacy_message_log() -> Vec<Arc<SessionEvent>> {
    vec![
        plain("turn/start", 0, json!({"turn": 1})),
        event(json!({"type": "user/message", "seq": 1, "time": 2, "surfaceOp": "append",
            "data": {"content": [{"type": "text", "text": "hi"}], "source": {"kind": "user"}}})),
        plain("step/start", 2, json!({"turn": 1, "step": 1})),
        event(json!({"type": "assistant/message", "seq": 3, "time": 4, "surfaceOp": "append",
            "data": {"turn": 1, "step": 1, "content": [{"type": "tool-call", "id": "call-1", "name": "read", "arguments": "{}"}],
                     "provenance": {"provider": "mock", "model": "mock"}}})),
        plain("tool/call", 4, json!({"turn": 1, "step": 1, "callId": "call-1", "name": "read", "arguments": "{}"})),
        event(json!({"type": "tool/result", "seq": 5, "time": 6, "sourceEventSeqs": [4], "surfaceOp": "append",
            "data": {"turn": 1, "step": 1, "callId": "call-1", "content": [{"type": "text", "text": "full result"}], "isError": false}})),
        event(json!({"type": "tool/result", "seq": 6, "time": 8, "sourceEventSeqs": [5],
            "surfaceOp": {"op": "replace", "start": 5, "end": 5},
            "data": {"turn": 1, "step": 1, "callId": "call-1", "content": [{"type": "text", "text": "pruned"}], "isError": false}})),
        plain("step/end", 7, json!({"turn": 1, "step": 1})),
        plain("turn/end", 8, json!({"turn": 1, "reason": {"kind": "completed"}})),
    ]
}

fn user(id: &str, text: &str) -> Value {
    json!({"id": id, "role": "user", "content": [{"type": "text", "text": text}], "source": {"kind": "user"}})
}

fn trigger(turn: u64, seq: u64) -> Arc<SessionEvent> {
    plain("turn/start", seq, json!({"turn": turn, "trigger": {"kind": "message", "source": {"kind": "user"}}}))
}

fn turn_end(turn: u64, seq: u64, reason: Value) -> Arc<SessionEvent> {
    plain("turn/end", seq, json!({"turn": turn, "reason": reason}))
}

/// A complete log in the vocabulary from before the react loop (the reference's
/// `preReactLoopLog`): turn triggers, a wrapped steering message, and every old `turn/end` reason.
fn pre_react_loop_log() -> Vec<Arc<SessionEvent>> {
    vec![
        trigger(1, 0),
        event(
            json!({"type": "user/message", "seq": 1, "time": 2, "surfaceOp": "append", "data": user("m-prompt", "old prompt")}),
        ),
        plain("step/start", 2, json!({"turn": 1, "step": 1})),
        event(json!({"type": "steering/message", "seq": 3, "time": 4, "surfaceOp": "append",
            "data": {"turn": 1, "message": user("m-steering", "old steering")}})),
        plain("step/end", 4, json!({"turn": 1, "step": 1})),
        turn_end(1, 5, json!({"kind": "completed"})),
        plain("turn/start", 6, json!({"turn": 2, "trigger": {"kind": "retry"}})),
        plain("step/start", 7, json!({"turn": 2, "step": 1})),
        plain("step/end", 8, json!({"turn": 2, "step": 1})),
        turn_end(
            2,
            9,
            json!({"kind": "error", "step": 1, "failure": {"message": "old provider failure", "code": "SERVER"}}),
        ),
        trigger(3, 10),
        turn_end(3, 11, json!({"kind": "aborted"})),
        trigger(4, 12),
        turn_end(4, 13, json!({"kind": "disposed"})),
        trigger(5, 14),
        plain("step/start", 15, json!({"turn": 5, "step": 1})),
        plain("step/end", 16, json!({"turn": 5, "step": 1})),
        turn_end(5, 17, json!({"kind": "error", "step": 1, "message": "old thrown value"})),
        trigger(6, 18),
        turn_end(
            6,
            19,
            json!({"kind": "error", "step": 0, "failure": {"message": "old detailed provider failure", "code": "RATE_LIMIT",
                   "status": 429, "providerRetryAfterMs": 1000, "requestId": "request-1"}}),
        ),
        trigger(7, 20),
        turn_end(7, 21, json!({"kind": "error", "step": 0, "message": "old coded error", "code": "CODED"})),
    ]
}

pub(crate) async fn pre_identity_logs_read_with_legacy_message_ids(h: &Cx<'_>) {
    let id = SessionId::from("legacy-message-load");
    let persistence = h.open();
    // A log the reference wrote: no writer of this build writes these shapes any more.
    store_raw(&persistence, &header(id.as_str()), &legacy_message_log());
    let before = stored_bytes(h, &header(id.as_str()));
    drop(persistence);

    let persistence = h.open();
    let legacy = |seq: u64| json!(format!("legacy-message:{id}:{seq}"));
    let inspected = persistence.inspect(&id, &cancel()).await.unwrap();
    let (streamed, _) =
        session_persistence::inspect_into(&persistence, &id, &cancel(), CollectSink::default()).await.unwrap();
    let streamed: Vec<Arc<SessionEvent>> = streamed.events.into_iter().map(Arc::new).collect();
    assert_eq!(streamed, inspected.events.to_vec());
    let loaded = persistence.load(&id, &cancel()).await.unwrap();
    for view in [&inspected, &loaded] {
        assert_eq!(message_ids(&view.events), [legacy(1), legacy(3), legacy(5), legacy(5)]);
        assert_eq!(
            data(&view.events[3])["message"],
            json!({"id": legacy(3), "role": "assistant",
                   "content": [{"type": "tool-call", "id": "call-1", "name": "read", "arguments": "{}"}],
                   "source": {"provider": "mock", "model": "mock", "kind": "model"}})
        );
        assert_eq!(resume(view).surface_nodes(), [1, 3, 6], "the replacement took its target's place");
    }
    // A suffix read past the replaced result still carries the inherited id.
    let suffix = persistence.read_from(&id, 6, &cancel()).await.unwrap();
    assert_eq!(suffix.events[0].seq, 6);
    assert_eq!(message_id(&suffix.events[0]), legacy(5));
    assert_eq!(persistence.read_from(&id, 5, &cancel()).await.unwrap().events.to_vec(), loaded.events[5..]);

    // Nothing read rewrote a stored line.
    let originals: Vec<SessionEvent> = legacy_message_log().iter().map(|event| (**event).clone()).collect();
    assert_eq!(stored(&persistence, &id), originals);
    assert_eq!(stored_bytes(h, &header(id.as_str())), before);
}

pub(crate) async fn pre_react_loop_logs_read_as_current(h: &Cx<'_>) {
    let id = SessionId::from("pre-react-loop-load");
    let persistence = h.open();
    store_raw(&persistence, &header(id.as_str()), &pre_react_loop_log());
    let before = stored_bytes(h, &header(id.as_str()));
    drop(persistence);

    let persistence = h.open();
    let views = [
        persistence.inspect(&id, &cancel()).await.unwrap(),
        persistence.read_from(&id, 0, &cancel()).await.unwrap(),
        persistence.load(&id, &cancel()).await.unwrap(),
    ];
    for view in &views {
        assert!(!kinds(&view.events).contains(&"steering/message"));
        let starts: Vec<Value> =
            view.events.iter().filter(|event| event.kind == "turn/start").map(|event| data(event)).collect();
        assert_eq!(starts, (1..=7).map(|turn| json!({"turn": turn})).collect::<Vec<_>>());
        let ends: Vec<Value> =
            view.events.iter().filter(|event| event.kind == "turn/end").map(|event| data(event)).collect();
        assert_eq!(
            ends,
            [
                json!({"turn": 1, "reason": {"kind": "completed"}}),
                json!({"turn": 2, "reason": {"kind": "error", "error": {"message": "old provider failure", "code": "SERVER"}}}),
                json!({"turn": 3, "reason": {"kind": "aborted", "reason": {"kind": "legacy"}}}),
                json!({"turn": 4, "reason": {"kind": "aborted", "reason": {"kind": "disposed"}}}),
                json!({"turn": 5, "reason": {"kind": "error", "error": {"message": "old thrown value", "code": "UNKNOWN"}}}),
                json!({"turn": 6, "reason": {"kind": "error", "error": {"message": "old detailed provider failure",
                       "code": "RATE_LIMIT", "status": 429, "providerRetryAfterMs": 1000, "requestId": "request-1"}}}),
                json!({"turn": 7, "reason": {"kind": "error", "error": {"message": "old coded error", "code": "CODED"}}}),
            ]
        );
        assert_eq!(view.events.len(), 22, "a closed log needs no closers");
        let resumed = resume(view);
        let texts: Vec<Value> = resumed
            .surface_nodes()
            .iter()
            .map(|seq| data(&resumed.event(*seq).unwrap())["content"][0]["text"].clone())
            .collect();
        assert_eq!(texts, [json!("old prompt"), json!("old steering")]);
    }
    // A suffix read keeps the steering message's own id.
    let suffix = persistence.read_from(&id, 3, &cancel()).await.unwrap();
    assert_eq!((suffix.events[0].kind.as_str(), suffix.events[0].seq), ("user/message", 3));
    assert_eq!(data(&suffix.events[0]), user("m-steering", "old steering"));
    assert!(
        suffix.events.iter().filter(|event| event.kind == "turn/end").all(|event| data(event).get("step").is_none())
    );
    assert_eq!(stored_bytes(h, &header(id.as_str())), before, "the load rewrote nothing");
    let originals: Vec<SessionEvent> = pre_react_loop_log().iter().map(|event| (**event).clone()).collect();
    assert_eq!(stored(&persistence, &id), originals);

    // Flat steering gets a legacy id; an unknown `turn/end` kind passes as it is.
    let flat = SessionId::from("pre-react-loop-flat-steering");
    let steering = event(json!({"type": "steering/message", "seq": 0, "time": 1, "surfaceOp": "append",
        "data": {"turn": 1, "content": [{"type": "text", "text": "flat steering"}], "source": {"kind": "user"}}}));
    store_raw(&persistence, &header(flat.as_str()), &[steering]);
    let inspected = persistence.inspect(&flat, &cancel()).await.unwrap();
    assert_eq!(inspected.events[0].kind, "user/message");
    assert_eq!(
        data(&inspected.events[0]),
        json!({"content": [{"type": "text", "text": "flat steering"}], "source": {"kind": "user"},
               "id": format!("legacy-message:{flat}:0"), "role": "user"})
    );
    let extended = SessionId::from("current-extended-turn-end");
    persistence.create(header(extended.as_str()), &cancel()).await.unwrap();
    let events = vec![plain("turn/start", 0, json!({"turn": 1})), turn_end(1, 1, json!({"kind": "extension-reason"}))];
    persistence.append(&extended, events.clone(), &cancel()).await.unwrap();
    assert_eq!(persistence.inspect(&extended, &cancel()).await.unwrap().events.to_vec(), events);
}

/// The reference's malformed legacy records (§7.2 item 11), each refused by every read with its
/// message.
fn malformed_legacy() -> Vec<(&'static str, Value, &'static str)> {
    vec![
        ("invalid-old-turn-start", json!({"type": "turn/start", "data": {"turn": 1, "trigger": null}}), "turn/start"),
        (
            "invalid-old-steering",
            json!({"type": "steering/message", "surfaceOp": "append",
                   "data": {"turn": 1, "content": [], "source": {"kind": "user"}, "extra": true}}),
            "steering/message",
        ),
        (
            "invalid-old-steering-data",
            json!({"type": "steering/message", "surfaceOp": "append", "data": null}),
            "steering/message",
        ),
        (
            "invalid-old-turn-end",
            json!({"type": "turn/end", "data": {"turn": 1, "reason": {"kind": "completed", "extra": true}}}),
            "turn/end",
        ),
        ("invalid-old-turn-end-reason", json!({"type": "turn/end", "data": {"turn": 1, "reason": null}}), "turn/end"),
        (
            "unsupported-intermediate-turn-end-step",
            json!({"type": "turn/end", "data": {"turn": 1, "step": 1, "reason": {"kind": "completed"}}}),
            "turn/end",
        ),
        (
            "invalid-old-turn-end-aborted",
            json!({"type": "turn/end", "data": {"turn": 1, "reason": {"kind": "aborted", "extra": true}}}),
            "turn/end",
        ),
        (
            "invalid-old-turn-end-disposed",
            json!({"type": "turn/end", "data": {"turn": 1, "reason": {"kind": "disposed", "extra": true}}}),
            "turn/end",
        ),
        (
            "invalid-old-turn-end-error-step",
            json!({"type": "turn/end", "data": {"turn": 1, "reason": {"kind": "error", "step": -1, "message": "bad step"}}}),
            "turn/end",
        ),
        (
            "invalid-old-turn-end-error-code",
            json!({"type": "turn/end", "data": {"turn": 1, "reason": {"kind": "error", "step": 0, "message": "bad code", "code": 1}}}),
            "turn/end",
        ),
    ]
}

fn at_seq_zero(mut record: Value) -> Arc<SessionEvent> {
    record["seq"] = json!(0);
    record["time"] = json!(1);
    event(record)
}

/// The message of a read that failed validation, without its location.
fn validation_message(err: &PersistenceError) -> String {
    let PersistenceError::Corrupt { kind: session_persistence::CorruptKind::Validation, message, .. } = err else {
        panic!("not a validation failure: {err:?}");
    };
    message.clone()
}

pub(crate) async fn malformed_legacy_records_are_refused_with_the_reference_messages(h: &Cx<'_>) {
    let persistence = h.open();
    for (name, record, kind) in malformed_legacy() {
        let id = SessionId::from(name);
        store_raw(&persistence, &header(name), &[at_seq_zero(record)]);
        let want = format!(
            "stored session \"{name}\" failed validation: session \"{name}\" contains malformed pre-react-loop {kind} at seq 0"
        );
        let inspected = persistence.inspect(&id, &cancel()).await.unwrap_err();
        assert_eq!(validation_message(&inspected), want);
        assert_eq!(validation_message(&persistence.read_from(&id, 0, &cancel()).await.unwrap_err()), want);
        assert_eq!(validation_message(&persistence.load(&id, &cancel()).await.unwrap_err()), want);
        let streamed = session_persistence::inspect_into(&persistence, &id, &cancel(), CollectSink::default()).await;
        assert_eq!(validation_message(&streamed.unwrap_err()), want);
    }

    // A current-shape message with a wrong role is malformed, never legacy.
    let wrong_role = SessionId::from("invalid-message-read");
    let record = json!({"type": "user/message", "surfaceOp": "append",
        "data": {"id": "wrong-role", "role": "assistant", "content": [{"type": "text", "text": "wrong"}], "source": {"kind": "user"}}});
    store_raw(&persistence, &header(wrong_role.as_str()), &[at_seq_zero(record)]);
    for err in [
        persistence.inspect(&wrong_role, &cancel()).await.unwrap_err(),
        persistence.load(&wrong_role, &cancel()).await.unwrap_err(),
    ] {
        assert!(validation_message(&err).ends_with("message must have role \"user\""), "{err}");
    }
    let null_message = SessionId::from("invalid-tool/result");
    let record = json!({"type": "tool/result", "surfaceOp": "append", "data": {"message": null}});
    store_raw(&persistence, &header(null_message.as_str()), &[at_seq_zero(record)]);
    let err = persistence.inspect(&null_message, &cancel()).await.unwrap_err();
    assert!(validation_message(&err).ends_with("lacks an identified message"), "{err}");
    // An ignorable plugin event's payload is not a message.
    let plugin = SessionId::from("non-object-plugin-event");
    let record = json!({"type": "plugin/test", "data": null, "ignorable": true});
    store_raw(&persistence, &header(plugin.as_str()), &[at_seq_zero(record)]);
    assert_eq!(persistence.inspect(&plugin, &cancel()).await.unwrap().events.len(), 1);
    assert_eq!(persistence.read_from(&plugin, 0, &cancel()).await.unwrap().events.len(), 1);
    for kind in ["user/message", "assistant/message"] {
        let name = format!("invalid-{kind}-without-content");
        let id = SessionId::from(name.as_str());
        store_raw(
            &persistence,
            &header(&name),
            &[at_seq_zero(json!({"type": kind, "surfaceOp": "append", "data": {}}))],
        );
        let err = persistence.read_from(&id, 0, &cancel()).await.unwrap_err();
        assert!(validation_message(&err).ends_with("lacks an identified message"), "{err}");
    }
}

/// The legacy log with its last turn left open: everything up to the steering message.
fn interrupted_legacy_log() -> Vec<Arc<SessionEvent>> {
    pre_react_loop_log().into_iter().take(4).collect()
}

pub(crate) async fn repairs_and_appends_after_a_legacy_log_never_rewrite_its_lines(h: &Cx<'_>) {
    // A cold load closes the open turn after the stored legacy lines.
    let id = SessionId::from("legacy-open");
    let persistence = h.open();
    store_raw(&persistence, &header(id.as_str()), &interrupted_legacy_log());
    let before = stored_bytes(h, &header(id.as_str()));
    let loaded = persistence.load(&id, &cancel()).await.unwrap();
    assert_eq!(kinds(&loaded.events[3..]), ["user/message", "step/end", "turn/end"]);
    assert_eq!(data(&loaded.events[5]), json!({"turn": 1, "reason": {"kind": "interrupted"}}));
    let stored_events = stored(&persistence, &id);
    let originals: Vec<SessionEvent> = interrupted_legacy_log().iter().map(|event| (**event).clone()).collect();
    assert_eq!(stored_events[..4], originals[..]);
    let appended: Vec<&str> = stored_events[4..].iter().map(|event| event.kind.as_str()).collect();
    assert_eq!(appended, ["step/end", "turn/end"]);
    if let (Some(before), Some(after)) = (before, stored_bytes(h, &header(id.as_str()))) {
        assert!(after.starts_with(&before), "the repair only appended");
    }

    // An append to a stored legacy log adopts it and only adds.
    let adopted = SessionId::from("legacy-append");
    store_raw(&persistence, &header(adopted.as_str()), &pre_react_loop_log());
    drop(persistence);
    let persistence = h.open();
    persistence.append(&adopted, vec![plain("turn/start", 22, json!({"turn": 8}))], &cancel()).await.unwrap();
    let stored_events = stored(&persistence, &adopted);
    let originals: Vec<SessionEvent> = pre_react_loop_log().iter().map(|event| (**event).clone()).collect();
    assert_eq!(stored_events[..22], originals[..]);
    assert_eq!(stored_events.len(), 23);

    // A live session resumed from the imported view claims the log and writes only its own
    // events: the end-seed marker and a new turn.
    let resumed = SessionId::from("legacy-resume");
    store_raw(&persistence, &header(resumed.as_str()), &legacy_message_log());
    let loaded = persistence.load(&resumed, &cancel()).await.unwrap();
    let live = store();
    persistence.attach(&live).unwrap();
    let meta = HeaderMeta {
        cwd: loaded.header.cwd.clone(),
        created_at: Some(loaded.header.created_at),
        ..HeaderMeta::default()
    };
    let session =
        live.create(Some(resumed.clone()), CreateOptions { seed: Some(loaded.events.to_vec()), meta }).unwrap();
    session.append("turn/start", &json!({"turn": 2}), None).unwrap();
    session.append("turn/end", &json!({"turn": 2, "reason": {"kind": "completed"}}), None).unwrap();
    live.flush(&resumed).await.unwrap();
    let stored_events = stored(&persistence, &resumed);
    let originals: Vec<SessionEvent> = legacy_message_log().iter().map(|event| (**event).clone()).collect();
    assert_eq!(stored_events[..9], originals[..]);
    assert_eq!(
        stored_events[9..].iter().map(|event| event.kind.as_str()).collect::<Vec<_>>(),
        ["session/end-seed", "turn/start", "turn/end"]
    );
    // Reads agree with the live view.
    let read = persistence.read_from(&resumed, 0, &cancel()).await.unwrap();
    assert_eq!(message_ids(&read.events), message_ids(&session.events()));
}

/// A pre-identity message appended through the trait (first written for the SQLite backend's
/// copy of the contract): imported on read as the reference imports it, while a current-shape
/// message with the wrong role is corrupt, never legacy.
pub(crate) async fn pre_identity_legacy_logs_import_and_bad_current_messages_are_corrupt(h: &Cx<'_>) {
    let persistence = h.open();
    let id = SessionId::from("s-legacy");
    let legacy = event(json!({"type": "user/message", "seq": 1, "time": 1, "surfaceOp": "append",
        "data": {"content": [{"type": "text", "text": "hi"}], "source": {"kind": "user"}}}));
    let log = vec![plain("turn/start", 0, json!({"turn": 1})), legacy];
    // No writer of this build writes the legacy shape (the storable check refuses it) ...
    let refusing = SessionId::from("s-legacy-refused");
    persistence.create(header(refusing.as_str()), &cancel()).await.unwrap();
    let refused = persistence.append(&refusing, log.clone(), &cancel()).await.unwrap_err();
    assert!(matches!(refused, PersistenceError::Unstorable { index: 1, .. }), "{refused:?}");
    // ... but the reference's did.
    store_raw(&persistence, &header("s-legacy"), &log);
    // Imported as the reference does: an id of its own and the user role.
    let inspected = persistence.inspect(&id, &cancel()).await.unwrap();
    let data = inspected.events[1].data.to_value().unwrap();
    assert_eq!(data["id"], "legacy-message:s-legacy:1");
    assert_eq!(data["role"], "user");
    let suffix = persistence.read_from(&id, 1, &cancel()).await.unwrap();
    assert_eq!(suffix.events[0].data.to_value().unwrap()["id"], "legacy-message:s-legacy:1");

    // A current-shape message with a wrong role is corrupt, not legacy.
    let id = SessionId::from("s-bad-role");
    let bad = event(json!({"type": "user/message", "seq": 0, "time": 1, "surfaceOp": "append",
        "data": {"id": "m", "role": "assistant", "source": {"kind": "user"}, "content": []}}));
    store_raw(&persistence, &header("s-bad-role"), &[bad]);
    let err = persistence.inspect(&id, &cancel()).await.unwrap_err();
    assert!(matches!(err, PersistenceError::Corrupt { .. }), "{err:?}");
    assert!(err.to_string().contains("message must have role \"user\""), "{err}");
}
