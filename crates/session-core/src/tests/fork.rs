//! `SessionStore::fork`: every check, code and message of reference 01 §2.5.

use std::sync::Arc;

use parking_lot::Mutex;
use serde_json::json;

use super::{Recorder, append, assistant_message, closed_turn, detached, id, kinds, tool_call_block, user_message};
use crate::{CreateOptions, END_SEED, ForkError, HeaderMeta, Origin, Session, SessionEvent, SessionStore, StoreEvent};

fn store() -> SessionStore {
    super::store()
}

fn create(store: &SessionStore, session_id: &str, cwd: Option<&str>) -> Arc<Session> {
    let meta = HeaderMeta { cwd: cwd.map(str::to_owned), ..HeaderMeta::default() };
    store.create(Some(id(session_id)), CreateOptions { seed: None, meta }).unwrap()
}

fn check_err(result: Result<Arc<Session>, ForkError>, code: &str, message: &str) {
    let err = result.expect_err(message);
    assert_eq!((err.code.as_str(), err.message.as_str()), (code, message));
    assert_eq!(err.to_string(), message);
}

/// The seed a child inherited: its log minus the trailing end-seed marker.
fn inherited(child: &Session) -> Vec<Arc<SessionEvent>> {
    let events = child.events();
    let (last, seed) = events.split_last().expect("a fork child has at least its end-seed marker");
    assert_eq!(last.kind, END_SEED);
    assert_eq!(last.seq, child.header().seed_length.unwrap());
    seed.to_vec()
}

#[test]
fn forks_an_empty_source_as_an_empty_child_with_lineage() {
    let store = store();
    create(&store, "empty-parent", Some("/workspace"));
    let child = store.fork(&id("empty-parent"), None, Some(id("empty-child"))).unwrap();
    assert!(inherited(&child).is_empty());
    let header = child.header();
    assert_eq!(header.id, id("empty-child"));
    assert_eq!(header.cwd.as_deref(), Some("/workspace"));
    assert_eq!(header.parent_session, Some(id("empty-parent")));
    assert_eq!(header.seed_length, Some(0));
    assert!(store.contains(&id("empty-child")));
}

#[test]
fn forks_the_last_event_by_default() {
    let store = store();
    let source = create(&store, "parent", Some("/workspace"));
    closed_turn(&source, 1, "hello");
    let child = store.fork(&id("parent"), None, Some(id("child"))).unwrap();
    assert_eq!(inherited(&child), source.events().to_vec());
    assert_eq!(child.header().seed_length, Some(source.len()));
    assert_eq!(child.first_live_seq(), source.len());
    assert_eq!(kinds(&child.events_from(child.header().own_suffix_start())), [END_SEED]);
    assert_eq!(child.surface_nodes(), source.surface_nodes());
}

#[test]
fn includes_log_only_events_after_a_closed_turn() {
    let store = store();
    let source = create(&store, "log-only-parent", None);
    closed_turn(&source, 1, "hello");
    append(&source, "test/log-only", json!({"value": "after execution"}));
    let child = store.fork(&id("log-only-parent"), None, Some(id("log-only-child"))).unwrap();
    let seed = inherited(&child);
    assert_eq!(seed, source.events().to_vec());
    assert_eq!(seed.last().unwrap().kind, "test/log-only");
    assert_eq!(child.header().cwd, None);
}

#[test]
fn forks_an_earlier_boundary_while_the_source_has_an_open_tail() {
    let store = store();
    let source = create(&store, "parent", Some("/workspace"));
    closed_turn(&source, 1, "first");
    let first_boundary = source.len() - 1;
    closed_turn(&source, 2, "second");
    append(&source, "turn/start", json!({"turn": 3}));
    let child = store.fork(&id("parent"), Some(first_boundary as i64), Some(id("child-from-first"))).unwrap();
    assert_eq!(inherited(&child), source.events()[..=first_boundary as usize].to_vec());
    assert_eq!(child.header().seed_length, Some(first_boundary + 1));
    assert_eq!(child.surface_nodes(), [1]);
}

#[test]
fn accepts_every_turn_end_reason_as_a_boundary() {
    let store = store();
    let reasons = [
        json!({"kind": "completed"}),
        json!({"kind": "aborted", "reason": {"kind": "user"}}),
        json!({"kind": "error", "error": {"message": "model failed", "code": "UNKNOWN"}}),
        json!({"kind": "aborted", "reason": {"kind": "disposed"}}),
        json!({"kind": "max-tokens"}),
        json!({"kind": "interrupted"}),
        json!({"kind": "plugin-defined"}),
    ];
    for (idx, reason) in reasons.into_iter().enumerate() {
        let source = create(&store, &format!("parent-{idx}"), None);
        append(&source, "turn/start", json!({"turn": 1}));
        append(&source, "turn/end", json!({"turn": 1, "reason": reason}));
        let child = store.fork(source.id(), Some(1), Some(id(&format!("child-{idx}")))).unwrap();
        assert_eq!(inherited(&child).last().unwrap().kind, "turn/end");
        assert_eq!(child.header().seed_length, Some(2));
    }
}

#[test]
fn a_bracket_open_in_the_parent_belongs_to_the_childs_seed() {
    let store = store();
    let parent = create(&store, "bracket-parent", Some("/workspace"));
    closed_turn(&parent, 1, "work");
    let open = append(&parent, "test/bracket-open", json!({"id": "op-1"}));
    let child = store.fork(&id("bracket-parent"), None, Some(id("bracket-child"))).unwrap();
    assert!(Arc::ptr_eq(&parent.last_event().unwrap(), &open));
    assert!(!parent.events().iter().any(|event| event.kind == END_SEED));
    let boundary = child.last_event().unwrap();
    assert_eq!(boundary.kind, END_SEED);
    assert!(boundary.seq > open.seq);
    assert_eq!(child.first_live_seq(), open.seq + 1);
    assert_eq!(inherited(&child).last().unwrap().kind, "test/bracket-open");
}

#[test]
fn rejects_invalid_boundaries_before_creating_a_child() {
    let store = store();
    create(&store, "empty", None);
    check_err(
        store.fork(&id("empty"), Some(0), Some(id("empty-child"))),
        "INVALID_BOUNDARY",
        "fork boundary 0 does not exist in session \"empty\" (last seq: none)",
    );
    assert!(!store.contains(&id("empty-child")));

    let source = create(&store, "parent", None);
    closed_turn(&source, 1, "x");
    check_err(
        store.fork(&id("parent"), Some(-1), Some(id("negative"))),
        "INVALID_BOUNDARY",
        "fork boundary for session \"parent\" must be a non-negative safe integer, got -1",
    );
    check_err(
        store.fork(&id("parent"), Some(9_007_199_254_740_992), Some(id("unsafe"))),
        "INVALID_BOUNDARY",
        "fork boundary for session \"parent\" must be a non-negative safe integer, got 9007199254740992",
    );
    check_err(
        store.fork(&id("parent"), Some(3), Some(id("past-end"))),
        "INVALID_BOUNDARY",
        "fork boundary 3 does not exist in session \"parent\" (last seq: 2)",
    );
    assert_eq!(store.list().len(), 2);
}

#[test]
fn rejects_unknown_detached_and_stale_sources() {
    let store = store();
    check_err(store.fork(&id("missing"), None, None), "SESSION_NOT_FOUND", "session \"missing\" not found");
    let loose = detached("detached");
    check_err(store.fork_session(&loose, None, None), "SESSION_NOT_FOUND", "session \"detached\" not found");
    let live = create(&store, "same-id", None);
    let stale = detached("same-id");
    check_err(
        store.fork_session(&stale, None, None),
        "SESSION_NOT_LIVE",
        "session \"same-id\" is not the live store instance",
    );
    let child = store.fork_session(&live, None, None).unwrap();
    assert_eq!(child.id().as_str(), "session-1");
}

#[test]
fn rejects_boundaries_inside_an_open_turn() {
    let store = store();
    let start = |session: &Session| {
        append(session, "turn/start", json!({"turn": 1}));
    };
    let step = |session: &Session| {
        start(session);
        append(session, "step/start", json!({"turn": 1, "step": 1}));
    };
    type Build<'a> = &'a dyn Fn(&Session);
    let cases: [(&str, Build<'_>); 5] = [
        ("turn/start", &start),
        ("step/start", &step),
        ("user/message", &|session| {
            start(session);
            append(session, "user/message", user_message("m", "open"));
        }),
        ("assistant/message", &|session| {
            step(session);
            append(
                session,
                "assistant/message",
                assistant_message(1, 1, "a", json!([{"type": "text", "text": "partial"}])),
            );
        }),
        ("tool/call", &|session| {
            step(session);
            append(session, "assistant/message", assistant_message(1, 1, "a", json!([tool_call_block("call-open")])));
            append(
                session,
                "tool/call",
                json!({"turn": 1, "step": 1, "callId": "call-open", "name": "bash", "arguments": "{}"}),
            );
        }),
    ];
    for (last_kind, build) in cases {
        let source = create(&store, &format!("open-{last_kind}"), None);
        build(&source);
        let boundary = source.len() - 1;
        check_err(
            store.fork(source.id(), Some(boundary as i64), None),
            "OPEN_TURN",
            &format!("fork boundary {boundary} in session \"open-{last_kind}\" ends inside open turn 1"),
        );
        check_err(
            store.fork(source.id(), None, None),
            "OPEN_TURN",
            &format!("fork boundary {boundary} in session \"open-{last_kind}\" ends inside open turn 1"),
        );
    }
}

#[test]
fn rejects_a_live_child_id_before_validating_the_boundary() {
    let store = store();
    let source = create(&store, "parent", None);
    closed_turn(&source, 1, "x");
    create(&store, "child", None);
    check_err(
        store.fork(&id("parent"), None, Some(id("child"))),
        "SESSION_ALREADY_EXISTS",
        "session \"child\" already exists",
    );
    let open = create(&store, "open-parent", None);
    append(&open, "turn/start", json!({"turn": 1}));
    check_err(
        store.fork(&id("open-parent"), Some(-5), Some(id("child"))),
        "SESSION_ALREADY_EXISTS",
        "session \"child\" already exists",
    );
    check_err(
        store.fork(&id("missing"), None, Some(id("child"))),
        "SESSION_ALREADY_EXISTS",
        "session \"child\" already exists",
    );
}

#[test]
fn the_child_inherits_only_lineage() {
    let clock = super::clock();
    let store = SessionStore::with_known_types(Arc::clone(&clock) as _, super::known());
    let meta = HeaderMeta {
        cwd: Some("/srv".into()),
        origin: Some(Origin::Subagent),
        delegation_depth: 2,
        agent_preset: Some("reviewer".into()),
        owner: Some("alice".into()),
        ..HeaderMeta::default()
    };
    let source = store.create(Some(id("rich")), CreateOptions { seed: None, meta }).unwrap();
    closed_turn(&source, 1, "x");
    clock.advance(1_000);
    let child = store.fork(&id("rich"), None, None).unwrap();
    let header = child.header();
    assert_eq!(header.cwd.as_deref(), Some("/srv"));
    assert_eq!((header.origin, header.delegation_depth, &header.agent_preset, &header.owner), (None, 0, &None, &None));
    assert_eq!(header.created_at, (super::T0 + 1_000) as u64, "createdAt is now");
}

#[test]
fn the_child_is_published_and_a_veto_is_reported() {
    let store = store();
    let source = create(&store, "parent", None);
    closed_turn(&source, 1, "x");
    let lines = Arc::new(Mutex::new(Vec::new()));
    store.add_observer(Recorder::new("o", &lines));
    let child = store.fork(&id("parent"), None, Some(id("kid"))).unwrap();
    assert_eq!(child.len(), 4);
    assert_eq!(*lines.lock(), ["o: created kid"], "the end-seed marker is part of the seed, not an event");

    store.add_observer(Arc::new(|event: &StoreEvent<'_>| match event {
        StoreEvent::Created(_) => Err("vetoed".into()),
        _ => Ok(()),
    }));
    check_err(
        store.fork(&id("parent"), None, Some(id("kid-2"))),
        "CREATE_FAILED",
        "session \"kid-2\" creation was vetoed by an observer: vetoed",
    );
    assert!(!store.contains(&id("kid-2")));
}

#[test]
fn codes_have_reference_spellings() {
    use crate::ForkErrorCode::*;
    let codes = [SessionAlreadyExists, SessionNotFound, SessionNotLive, InvalidBoundary, OpenTurn, CreateFailed];
    let spelled: Vec<&str> = codes.iter().map(|code| code.as_str()).collect();
    assert_eq!(
        spelled,
        [
            "SESSION_ALREADY_EXISTS",
            "SESSION_NOT_FOUND",
            "SESSION_NOT_LIVE",
            "INVALID_BOUNDARY",
            "OPEN_TURN",
            "CREATE_FAILED"
        ]
    );
}
