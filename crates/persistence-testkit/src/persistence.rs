//! The persistence contract (reference 01 §7.1 and §7.2): what a `Coordinator` over any backend
//! must do, from create and append to crash repair, the live write-behind path and batched
//! streams. The legacy-log cases (`legacy`) run on the same context.

use std::{path::PathBuf, sync::Arc, time::Duration};

use serde_json::{Value, json};
use session_core::{CreateOptions, HeaderMeta, ManualClock, SessionEvent, SessionHeader, SessionId, SessionStore};
use session_persistence::{Coordinator, CoordinatorConfig, PersistenceError, SessionPersistence, SinkSlot};
use tokio_util::sync::CancellationToken;

use crate::{Place, inspect::kinds};

/// A persistence case's context: its place.
pub(crate) type Cx<'a> = crate::runner::Cx<'a, dyn Place>;

impl Cx<'_> {
    /// A fresh coordinator over the place's storage. Drop the previous one first: a backend may
    /// hold a lock for as long as it lives, as the JSONL store holds its root's.
    pub(crate) fn open(&self) -> Coordinator {
        let config =
            CoordinatorConfig { write_batch_max_delay: Duration::from_millis(20), ..CoordinatorConfig::default() };
        Coordinator::new(self.place.open(), config).unwrap()
    }
}

pub(crate) fn cancel() -> CancellationToken {
    CancellationToken::new()
}

pub(crate) fn header(id: &str) -> SessionHeader {
    let mut header = SessionHeader::new(SessionId::from(id), 1_000);
    header.cwd = Some("/work/project".to_owned());
    header
}

pub(crate) fn event(value: Value) -> Arc<SessionEvent> {
    Arc::new(serde_json::from_value(value).unwrap())
}

fn user_message(seq: u64, turn: u64) -> Arc<SessionEvent> {
    event(json!({"type": "user/message", "seq": seq, "time": 10 + seq, "surfaceOp": "append",
        "data": {"id": format!("m-{seq}"), "role": "user", "source": {"kind": "user"},
                 "content": [{"type": "text", "text": format!("hello {turn}")}]}}))
}

fn assistant_message(seq: u64, turn: u64, tool_calls: &[&str]) -> Arc<SessionEvent> {
    let mut content = vec![json!({"type": "text", "text": "ok"})];
    for call in tool_calls {
        content.push(json!({"type": "tool-call", "id": call, "name": "read_file", "arguments": "{}"}));
    }
    event(json!({"type": "assistant/message", "seq": seq, "time": 10 + seq, "surfaceOp": "append",
        "data": {"turn": turn, "step": 1, "message": {"id": format!("a-{seq}"), "role": "assistant",
                 "source": {"kind": "model", "provider": "p", "model": "m"}, "content": content}}}))
}

pub(crate) fn plain(kind: &str, seq: u64, data: Value) -> Arc<SessionEvent> {
    event(json!({"type": kind, "seq": seq, "time": 10 + seq, "data": data}))
}

/// A complete one-turn log starting at `seq0`: 6 events.
fn one_turn(seq0: u64, turn: u64) -> Vec<Arc<SessionEvent>> {
    vec![
        plain("turn/start", seq0, json!({"turn": turn})),
        user_message(seq0 + 1, turn),
        plain("step/start", seq0 + 2, json!({"turn": turn, "step": 1})),
        assistant_message(seq0 + 3, turn, &[]),
        plain("step/end", seq0 + 4, json!({"turn": turn, "step": 1})),
        plain("turn/end", seq0 + 5, json!({"turn": turn, "reason": {"kind": "completed"}})),
    ]
}

fn seqs(events: &[Arc<SessionEvent>]) -> Vec<u64> {
    events.iter().map(|event| event.seq).collect()
}

pub(crate) async fn round_trip(h: &Cx<'_>) {
    let persistence = h.open();
    persistence.create(header("s-1"), &cancel()).await.unwrap();
    persistence.append(&SessionId::from("s-1"), one_turn(0, 1), &cancel()).await.unwrap();
    drop(persistence);
    let persistence = h.open();
    let loaded = persistence.load(&SessionId::from("s-1"), &cancel()).await.unwrap();
    assert_eq!(*loaded.header, header("s-1"));
    assert_eq!(loaded.events.to_vec(), one_turn(0, 1));
}

pub(crate) async fn create_validates_the_whole_header_and_reserves_nothing_on_failure(h: &Cx<'_>) {
    let persistence = h.open();
    let mut bad = header("s-1");
    bad.cwd = Some("relative/dir".into());
    let err = persistence.create(bad, &cancel()).await.unwrap_err();
    assert_eq!(err.to_string(), "session header cwd must be an absolute path, got \"relative/dir\"");
    persistence.create(header("s-1"), &cancel()).await.unwrap();
    let err = persistence.create(header("s-1"), &cancel()).await.unwrap_err();
    assert_eq!(err.to_string(), "session \"s-1\" already exists in this backend");
}

/// A log that stops inside step 1 of turn 1 (the process died).
fn open_step_log() -> Vec<Arc<SessionEvent>> {
    let mut events = one_turn(0, 1);
    events.extend([
        plain("turn/start", 6, json!({"turn": 2})),
        user_message(7, 2),
        plain("step/start", 8, json!({"turn": 2, "step": 1})),
    ]);
    events
}

pub(crate) async fn crash_recovery_of_an_open_step(h: &Cx<'_>) {
    let id = SessionId::from("s-open");
    let persistence = h.open();
    persistence.create(header("s-open"), &cancel()).await.unwrap();
    persistence.append(&id, open_step_log(), &cancel()).await.unwrap();
    drop(persistence);

    let persistence = h.open();
    let before = persistence.list_snapshots(&cancel()).await.unwrap();
    let inspected = persistence.inspect(&id, &cancel()).await.unwrap();
    assert_eq!(seqs(&inspected.events), (0..11).collect::<Vec<_>>());
    assert_eq!(kinds(&inspected.events[9..]), ["step/end", "turn/end"]);
    assert_eq!(inspected.events[10].data.to_value().unwrap(), json!({"turn": 2, "reason": {"kind": "interrupted"}}));
    assert_eq!(persistence.list_snapshots(&cancel()).await.unwrap(), before, "inspect must not write");

    let loaded = persistence.load(&id, &cancel()).await.unwrap();
    assert_eq!(loaded.events.to_vec(), inspected.events.to_vec());
    assert_ne!(persistence.list_snapshots(&cancel()).await.unwrap(), before, "load commits the repair");

    persistence.append(&id, vec![plain("turn/start", 11, json!({"turn": 3}))], &cancel()).await.unwrap();
    drop(persistence);
    let persistence = h.open();
    let reloaded = persistence.load(&id, &cancel()).await.unwrap();
    assert_eq!(seqs(&reloaded.events), (0..13).collect::<Vec<_>>());
    assert_eq!(kinds(&reloaded.events[11..]), ["turn/start", "turn/end"]);
}

pub(crate) async fn crash_recovery_of_pending_tool_calls(h: &Cx<'_>) {
    let id = SessionId::from("s-tools");
    let events = vec![
        plain("turn/start", 0, json!({"turn": 1})),
        user_message(1, 1),
        plain("step/start", 2, json!({"turn": 1, "step": 1})),
        assistant_message(3, 1, &["call-a", "call-b"]),
        plain(
            "tool/call",
            4,
            json!({"turn": 1, "step": 1, "callId": "call-a", "name": "read_file", "arguments": "{}"}),
        ),
    ];
    let persistence = h.open();
    persistence.create(header("s-tools"), &cancel()).await.unwrap();
    persistence.append(&id, events, &cancel()).await.unwrap();
    let inspected = persistence.inspect(&id, &cancel()).await.unwrap();
    assert_eq!(kinds(&inspected.events[5..]), ["tool/result", "tool/result", "step/end", "turn/end"]);
    let unknown = inspected.events[5].data.to_value().unwrap();
    assert_eq!(unknown["error"], json!({"name": "ToolOutcomeUnknownError", "code": "TOOL_OUTCOME_UNKNOWN"}));
    assert_eq!(inspected.events[5].source_event_seqs.as_deref(), Some(&[4][..]));
    let not_started = inspected.events[6].data.to_value().unwrap();
    assert_eq!(not_started["error"], json!({"name": "ToolNotStartedError", "code": "TOOL_NOT_STARTED"}));
    assert_eq!(not_started["message"]["source"]["callId"], "call-b");
    assert_eq!(inspected.events[6].source_event_seqs, None);
}

pub(crate) async fn lists_only_written_sessions_and_honours_cancellation(h: &Cx<'_>) {
    let persistence = h.open();
    assert_eq!(persistence.list_snapshots(&cancel()).await.unwrap(), session_persistence::Listing::default());
    persistence.create(header("s-lazy"), &cancel()).await.unwrap();
    persistence.append(&SessionId::from("s-lazy"), Vec::new(), &cancel()).await.unwrap();
    persistence.create(header("s-real"), &cancel()).await.unwrap();
    persistence.append(&SessionId::from("s-real"), one_turn(0, 1), &cancel()).await.unwrap();
    let listed = persistence.list(&cancel()).await.unwrap();
    assert_eq!(listed.iter().map(|h| h.id.as_str()).collect::<Vec<_>>(), ["s-real"]);

    let cancelled = CancellationToken::new();
    cancelled.cancel();
    let id = SessionId::from("s-real");
    assert!(matches!(persistence.list(&cancelled).await, Err(PersistenceError::Cancelled)));
    assert!(matches!(persistence.list_snapshots(&cancelled).await, Err(PersistenceError::Cancelled)));
    assert!(matches!(persistence.inspect(&id, &cancelled).await, Err(PersistenceError::Cancelled)));
    assert!(matches!(persistence.read_from(&id, 0, &cancelled).await, Err(PersistenceError::Cancelled)));
    assert!(matches!(persistence.load(&id, &cancelled).await, Err(PersistenceError::Cancelled)));
    assert!(matches!(persistence.append(&id, one_turn(6, 2), &cancelled).await, Err(PersistenceError::Cancelled)));
    assert_eq!(persistence.read_from(&id, 0, &cancel()).await.unwrap().events.len(), 6, "nothing was written");
}

pub(crate) async fn read_from_serves_stored_suffixes_without_closers(h: &Cx<'_>) {
    let id = SessionId::from("s-read");
    let persistence = h.open();
    persistence.create(header("s-read"), &cancel()).await.unwrap();
    persistence.append(&id, open_step_log(), &cancel()).await.unwrap();
    let read = |from| {
        let persistence = persistence.clone();
        let id = id.clone();
        async move { seqs(&persistence.read_from(&id, from, &cancel()).await.unwrap().events) }
    };
    assert_eq!(read(0).await, (0..9).collect::<Vec<_>>());
    assert_eq!(read(3).await, (3..9).collect::<Vec<_>>());
    assert_eq!(read(9).await, Vec::<u64>::new());
    assert_eq!(read(100).await, Vec::<u64>::new());
    let missing = persistence.read_from(&SessionId::from("nope"), 0, &cancel()).await.unwrap_err();
    assert_eq!(missing.to_string(), "session \"nope\" not found");
}

pub(crate) async fn revisions_are_stable_and_change_on_append(h: &Cx<'_>) {
    let id = SessionId::from("s-rev");
    let persistence = h.open();
    persistence.create(header("s-rev"), &cancel()).await.unwrap();
    persistence.append(&id, one_turn(0, 1), &cancel()).await.unwrap();
    let first = persistence.list_snapshots(&cancel()).await.unwrap();
    assert_eq!(persistence.list_snapshots(&cancel()).await.unwrap(), first);
    persistence.inspect(&id, &cancel()).await.unwrap();
    assert_eq!(persistence.list_snapshots(&cancel()).await.unwrap(), first);
    persistence.append(&id, one_turn(6, 2), &cancel()).await.unwrap();
    assert_ne!(persistence.list_snapshots(&cancel()).await.unwrap().headers[0].revision, first.headers[0].revision);
}

pub(crate) async fn append_rejects_stale_and_gapped_batches(h: &Cx<'_>) {
    let id = SessionId::from("s-gap");
    let persistence = h.open();
    persistence.create(header("s-gap"), &cancel()).await.unwrap();
    persistence.append(&id, one_turn(0, 1), &cancel()).await.unwrap();
    let err = persistence.append(&id, one_turn(0, 1), &cancel()).await.unwrap_err();
    assert_eq!(err.to_string(), "append seq mismatch for \"s-gap\": expected 6 at index 0, got 0");
    let mut gapped = one_turn(6, 2);
    gapped.remove(2);
    let err = persistence.append(&id, gapped, &cancel()).await.unwrap_err();
    assert_eq!(err.to_string(), "append seq mismatch for \"s-gap\": expected 8 at index 2, got 9");
    assert_eq!(persistence.read_from(&id, 0, &cancel()).await.unwrap().events.len(), 6);
}

pub(crate) async fn missing_sessions_are_not_found_and_duplicates_are_refused(h: &Cx<'_>) {
    let persistence = h.open();
    let missing = SessionId::from("missing");
    assert!(persistence.load(&missing, &cancel()).await.unwrap_err().is_not_found());
    assert!(persistence.inspect(&missing, &cancel()).await.unwrap_err().is_not_found());
    persistence.create(header("s-dup"), &cancel()).await.unwrap();
    persistence.append(&SessionId::from("s-dup"), one_turn(0, 1), &cancel()).await.unwrap();
    drop(persistence);
    let persistence = h.open();
    let err = persistence.create(header("s-dup"), &cancel()).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "session \"s-dup\" already has a persisted log on disk; load/resume it instead of creating"
    );
}

pub(crate) async fn append_adopts_a_stored_session(h: &Cx<'_>) {
    let id = SessionId::from("s-adopt");
    let persistence = h.open();
    persistence.create(header("s-adopt"), &cancel()).await.unwrap();
    persistence.append(&id, one_turn(0, 1), &cancel()).await.unwrap();
    drop(persistence);
    let persistence = h.open();
    persistence.append(&id, vec![plain("turn/start", 6, json!({"turn": 2}))], &cancel()).await.unwrap();
    drop(persistence);
    let persistence = h.open();
    // The adopted log had no open turn, so nothing was added besides the new event; the
    // new event opened a turn, which a cold load now closes.
    let loaded = persistence.load(&id, &cancel()).await.unwrap();
    assert_eq!(kinds(&loaded.events[6..]), ["turn/start", "turn/end"]);
}

pub(crate) async fn unknown_event_types_are_refused_unless_ignorable(h: &Cx<'_>) {
    let persistence = h.open();
    let id = SessionId::from("s-future");
    let mut future = one_turn(0, 1);
    future.push(plain("future/event", 6, json!({"x": 1})));
    // No writer stores an unknown type (the storable check), so the log is written as a newer
    // harness would have written it.
    persistence.create(header("s-future"), &cancel()).await.unwrap();
    let err = persistence.append(&id, future.clone(), &cancel()).await.unwrap_err();
    assert!(matches!(&err, PersistenceError::Unstorable { index: 6, .. }), "{err:?}");
    match persistence.inspect(&id, &cancel()).await {
        Err(PersistenceError::NotFound { .. }) => {}
        Ok(stored) => assert!(stored.events.is_empty(), "nothing of a refused batch is stored"),
        Err(error) => panic!("{error}"),
    }
    crate::legacy::store_raw(&persistence, &header("s-future-raw"), &future);
    let id = SessionId::from("s-future-raw");
    let err = persistence.inspect(&id, &cancel()).await.unwrap_err();
    assert!(matches!(err, PersistenceError::FormatUnsupported { .. }), "{err:?}");
    assert!(err.to_string().contains("contains event type \"future/event\" (seq 6) unknown to this harness"), "{err}");

    persistence.create(header("s-future-ok"), &cancel()).await.unwrap();
    let id = SessionId::from("s-future-ok");
    let mut tolerated = one_turn(0, 1);
    tolerated.push(event(json!({"type": "future/event", "seq": 6, "time": 1, "data": null, "ignorable": true})));
    persistence.append(&id, tolerated, &cancel()).await.unwrap();
    let inspected = persistence.inspect(&id, &cancel()).await.unwrap();
    assert_eq!(inspected.events.len(), 7);
    assert!(inspected.events[6].ignorable);
}

pub(crate) fn store() -> Arc<SessionStore> {
    Arc::new(SessionStore::new(Arc::new(ManualClock::new(5_000))))
}

fn meta() -> HeaderMeta {
    HeaderMeta { cwd: Some("/work/project".into()), ..HeaderMeta::default() }
}

fn append_turn(session: &session_core::Session, turn: u64) {
    session.append("turn/start", &json!({"turn": turn}), None).unwrap();
    session.append("turn/end", &json!({"turn": turn, "reason": {"kind": "completed"}}), None).unwrap();
}

pub(crate) async fn live_sessions_are_written_behind_and_flushed(h: &Cx<'_>) {
    let persistence = h.open();
    let store = store();
    persistence.attach(&store).unwrap();
    let session = store.create(Some(SessionId::from("s-live")), CreateOptions { seed: None, meta: meta() }).unwrap();
    append_turn(&session, 1);
    session.append("turn/start", &json!({"turn": 2}), None).unwrap();
    persistence.flush(session.id(), &cancel()).await.unwrap();

    let err = persistence.load(session.id(), &cancel()).await.unwrap_err();
    assert!(err.to_string().starts_with("cannot load session \"s-live\" while its live turn is open"), "{err}");
    let read = persistence.read_from(session.id(), 0, &cancel()).await.unwrap();
    assert_eq!(kinds(&read.events), ["turn/start", "turn/end", "turn/start"]);

    session.append("turn/end", &json!({"turn": 2, "reason": {"kind": "completed"}}), None).unwrap();
    store.detach(session.id());
    drop(session);
    // Disposal drains the buffer; a cold load then sees every event.
    for _ in 0..200 {
        if persistence.read_from(&SessionId::from("s-live"), 0, &cancel()).await.unwrap().events.len() == 4 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let loaded = persistence.load(&SessionId::from("s-live"), &cancel()).await.unwrap();
    assert_eq!(seqs(&loaded.events), [0, 1, 2, 3]);
    assert_eq!(loaded.header.cwd.as_deref(), Some("/work/project"));
}

pub(crate) async fn store_flush_barrier_persists_everything_appended_before_it(h: &Cx<'_>) {
    let persistence = h.open();
    let store = store();
    persistence.attach(&store).unwrap();
    let session = store.create(Some(SessionId::from("s-flush")), CreateOptions { seed: None, meta: meta() }).unwrap();
    append_turn(&session, 1);
    append_turn(&session, 2);
    assert!(store.flush(session.id()).await.unwrap());
    let read = persistence.read_from(session.id(), 0, &cancel()).await.unwrap();
    assert_eq!(read.events.len(), 4);
}

pub(crate) async fn an_empty_live_session_is_never_written(h: &Cx<'_>) {
    let persistence = h.open();
    let store = store();
    persistence.attach(&store).unwrap();
    let session = store.create(Some(SessionId::from("s-empty")), CreateOptions { seed: None, meta: meta() }).unwrap();
    store.flush(session.id()).await.unwrap();
    assert!(persistence.load(session.id(), &cancel()).await.unwrap_err().is_not_found());
    assert!(persistence.list(&cancel()).await.unwrap().is_empty());
}

pub(crate) async fn fork_seed_is_persisted_exactly_once_with_its_end_seed(h: &Cx<'_>) {
    let persistence = h.open();
    let store = store();
    persistence.attach(&store).unwrap();
    let parent = store.create(Some(SessionId::from("s-parent")), CreateOptions { seed: None, meta: meta() }).unwrap();
    append_turn(&parent, 1);
    let child = store.fork(parent.id(), None, Some(SessionId::from("s-child"))).unwrap();
    store.flush(child.id()).await.unwrap();
    store.flush(child.id()).await.unwrap();
    let read = persistence.read_from(child.id(), 0, &cancel()).await.unwrap();
    assert_eq!(kinds(&read.events), ["turn/start", "turn/end", "session/end-seed"]);
    assert_eq!(read.header.seed_length, Some(2));
    assert_eq!(read.header.parent_session.as_ref().map(SessionId::as_str), Some("s-parent"));
}

pub(crate) async fn resume_claims_the_loaded_log_without_rewriting_it(h: &Cx<'_>) {
    let id = SessionId::from("s-resume");
    {
        let persistence = h.open();
        let store = store();
        persistence.attach(&store).unwrap();
        let session = store.create(Some(id.clone()), CreateOptions { seed: None, meta: meta() }).unwrap();
        append_turn(&session, 1);
        store.flush(&id).await.unwrap();
        persistence.close().await.unwrap();
    }
    let persistence = h.open();
    let loaded = persistence.load(&id, &cancel()).await.unwrap();
    let store = store();
    persistence.attach(&store).unwrap();
    let meta = HeaderMeta { created_at: Some(loaded.header.created_at), ..meta() };
    let session = store.create(Some(id.clone()), CreateOptions { seed: Some(loaded.events.to_vec()), meta }).unwrap();
    append_turn(&session, 2);
    store.flush(&id).await.unwrap();
    let read = persistence.read_from(&id, 0, &cancel()).await.unwrap();
    assert_eq!(kinds(&read.events), ["turn/start", "turn/end", "session/end-seed", "turn/start", "turn/end"]);
}

pub(crate) async fn a_new_live_session_cannot_take_over_a_stored_id(h: &Cx<'_>) {
    let id = SessionId::from("s-taken");
    let persistence = h.open();
    persistence.create(header("s-taken"), &cancel()).await.unwrap();
    persistence.append(&id, one_turn(0, 1), &cancel()).await.unwrap();
    drop(persistence);
    let persistence = h.open();
    let store = store();
    persistence.attach(&store).unwrap();
    let session = store.create(Some(id.clone()), CreateOptions { seed: None, meta: meta() }).unwrap();
    append_turn(&session, 1);
    let err = store.flush(&id).await.unwrap_err();
    // Another writer's log where this copy's first write goes: the writer fence.
    assert!(err.to_string().contains("append starts at seq 0, stored next seq is 6"), "{err}");
    assert!(persistence.fence(&id).is_some(), "the new live copy is fenced");
    let read = persistence.read_from(&id, 0, &cancel()).await.unwrap();
    assert_eq!(read.events.to_vec(), one_turn(0, 1), "the stored log is untouched");
}

pub(crate) async fn streaming_inspection_matches_the_materialized_view(h: &Cx<'_>) {
    let id = SessionId::from("s-stream");
    let persistence = h.open();
    persistence.create(header("s-stream"), &cancel()).await.unwrap();
    persistence.append(&id, open_step_log(), &cancel()).await.unwrap();
    drop(persistence);
    let persistence = h.open();
    let (sink, summary) =
        session_persistence::inspect_into(&persistence, &id, &cancel(), session_persistence::CollectSink::default())
            .await
            .unwrap();
    let inspected = persistence.inspect(&id, &cancel()).await.unwrap();
    let streamed: Vec<Arc<SessionEvent>> = sink.events.into_iter().map(Arc::new).collect();
    assert_eq!(streamed, inspected.events.to_vec());
    assert_eq!((summary.n_events, summary.n_closers), (11, 2));
    assert_eq!(inspected.n_closers, 2);
    // Served again, now from the inspection cache: the summary still counts the closers.
    let (_, cached) =
        session_persistence::inspect_into(&persistence, &id, &cancel(), session_persistence::CollectSink::default())
            .await
            .unwrap();
    assert_eq!((cached.n_events, cached.n_closers), (11, 2));
}

pub(crate) async fn a_live_session_is_inspected_live_before_its_first_write(h: &Cx<'_>) {
    let persistence = h.open();
    let store = store();
    persistence.attach(&store).unwrap();
    let session = store.create(Some(SessionId::from("s-fresh")), CreateOptions { seed: None, meta: meta() }).unwrap();
    session.append("turn/start", &json!({"turn": 1}), None).unwrap();
    // No flush yet: storage has nothing, but the session is live.
    let inspected = persistence.inspect(session.id(), &cancel()).await.unwrap();
    assert!(inspected.live);
    assert_eq!(kinds(&inspected.events), ["turn/start"], "a live snapshot keeps its open turn");
    let err = persistence.append(session.id(), vec![plain("turn/end", 1, json!({"turn": 1}))], &cancel()).await;
    assert!(matches!(err, Err(PersistenceError::Collision { .. })), "{err:?}");
}

pub(crate) async fn release_lets_go_of_a_detached_session_at_once(h: &Cx<'_>) {
    let persistence = h.open();
    let store = store();
    persistence.attach(&store).unwrap();
    let id = SessionId::from("s-release");
    let session = store.create(Some(id.clone()), CreateOptions { seed: None, meta: meta() }).unwrap();
    append_turn(&session, 1);
    store.detach(&id);
    persistence.release(&id, &cancel()).await.unwrap();
    // Whatever still holds the old session object, the id is cold now and can be resumed.
    let inspected = persistence.inspect(&id, &cancel()).await.unwrap();
    assert!(!inspected.live);
    assert_eq!(inspected.events.len(), 2);
    let loaded = persistence.load(&id, &cancel()).await.unwrap();
    let meta = HeaderMeta { created_at: Some(loaded.header.created_at), ..meta() };
    let resumed = store.create(Some(id.clone()), CreateOptions { seed: Some(loaded.events.to_vec()), meta }).unwrap();
    append_turn(&resumed, 2);
    store.flush(&id).await.unwrap();
    assert_eq!(persistence.read_from(&id, 0, &cancel()).await.unwrap().events.len(), 5);
    drop(session);
}

/// Writes three stored sessions for the batch tests: a clean turn, an open step (so the read
/// synthesizes closers) and two turns.
async fn three_stored(persistence: &Coordinator) {
    for (name, events) in
        [("s-a", one_turn(0, 1)), ("s-b", open_step_log()), ("s-c", [one_turn(0, 1), one_turn(6, 2)].concat())]
    {
        persistence.create(header(name), &cancel()).await.unwrap();
        persistence.append(&SessionId::from(name), events, &cancel()).await.unwrap();
    }
}

/// A fresh coordinator over [`three_stored`]'s sessions, attached to a store holding the live
/// session `s-live` with one turn. Keep the store alive while reading `s-live`.
async fn three_stored_and_one_live(h: &Cx<'_>) -> (Coordinator, Arc<SessionStore>) {
    let persistence = h.open();
    three_stored(&persistence).await;
    drop(persistence);
    let persistence = h.open();
    let store = store();
    persistence.attach(&store).unwrap();
    let live = store.create(Some(SessionId::from("s-live")), CreateOptions { seed: None, meta: meta() }).unwrap();
    append_turn(&live, 1);
    (persistence, store)
}

fn collect() -> Box<dyn session_persistence::StreamSink> {
    Box::new(session_persistence::CollectSink::default())
}

/// A collecting sink lent to a read, with the slot it comes back through.
fn lent_collect() -> (Box<dyn session_persistence::StreamSink>, SinkSlot<session_persistence::CollectSink>) {
    SinkSlot::lend(session_persistence::CollectSink::default())
}

pub(crate) async fn batched_streams_equal_single_streams_in_request_order(h: &Cx<'_>) {
    let (persistence, _store) = three_stored_and_one_live(h).await;
    let order = ["s-b", "s-missing", "s-a", "s-live", "s-c"];
    for lanes in [0, 1, 2, 16] {
        let (reads, slots): (Vec<_>, Vec<_>) = order
            .iter()
            .map(|name| {
                let (sink, slot) = lent_collect();
                ((SessionId::from(*name), sink), slot)
            })
            .unzip();
        let batch = persistence.inspect_streams(reads, lanes, &cancel()).await;
        assert_eq!(batch.len(), order.len());
        for ((name, streamed), slot) in order.iter().zip(batch).zip(slots) {
            let id = SessionId::from(*name);
            let single = session_persistence::inspect_into(
                &persistence,
                &id,
                &cancel(),
                session_persistence::CollectSink::default(),
            )
            .await;
            match (streamed, single) {
                (Ok(summary), Ok((single_sink, single_summary))) => {
                    assert_eq!(slot.take().unwrap().events, single_sink.events, "{name}, {lanes} lanes");
                    assert_eq!(summary.header, single_summary.header);
                    assert_eq!(
                        (summary.n_events, summary.n_closers, summary.live),
                        (single_summary.n_events, single_summary.n_closers, single_summary.live),
                        "{name}"
                    );
                }
                (Err(PersistenceError::NotFound { id: missing }), Err(PersistenceError::NotFound { .. })) => {
                    assert_eq!(missing, id);
                }
                (streamed, single) => panic!("{name}: batch {:?}, single {:?}", streamed.err(), single.err()),
            }
        }
    }
    let batch = persistence.inspect_streams(Vec::new(), 4, &cancel()).await;
    assert!(batch.is_empty());
}

pub(crate) async fn a_cancelled_batch_fails_every_read_as_cancelled(h: &Cx<'_>) {
    let persistence = h.open();
    three_stored(&persistence).await;
    let cancelled = cancel();
    cancelled.cancel();
    let reads = ["s-a", "s-b", "s-c"].iter().map(|name| (SessionId::from(*name), collect())).collect();
    let batch = persistence.inspect_streams(reads, 2, &cancelled).await;
    assert_eq!(batch.len(), 3);
    assert!(batch.iter().all(|read| matches!(read, Err(PersistenceError::Cancelled))));
}

/// Counts the reads a batch runs at once: each read, at its first event, waits until two reads
/// have started, so a batch that never overlapped two reads would stall here.
#[derive(Default)]
struct Overlap {
    state: std::sync::Mutex<(usize, usize, usize)>,
    changed: std::sync::Condvar,
}

struct OverlapSink {
    overlap: Arc<Overlap>,
    seen: bool,
}

impl session_persistence::ScanSink for OverlapSink {
    fn event(&mut self, _event: Arc<SessionEvent>) -> session_persistence::Result<()> {
        if std::mem::replace(&mut self.seen, true) {
            return Ok(());
        }
        let mut state = self.overlap.state.lock().unwrap();
        let (active, started, max) = &mut *state;
        *active += 1;
        *started += 1;
        *max = (*max).max(*active);
        self.overlap.changed.notify_all();
        let (mut state, _) =
            self.overlap.changed.wait_timeout_while(state, Duration::from_secs(10), |state| state.1 < 2).unwrap();
        state.0 -= 1;
        Ok(())
    }
}

pub(crate) async fn a_batch_reads_at_most_its_lanes_at_once(h: &Cx<'_>) {
    let persistence = h.open();
    three_stored(&persistence).await;
    let overlap = Arc::new(Overlap::default());
    let reads = ["s-a", "s-b", "s-c", "s-a", "s-b", "s-c"]
        .iter()
        .map(|name| {
            let sink = OverlapSink { overlap: Arc::clone(&overlap), seen: false };
            (SessionId::from(*name), Box::new(sink) as Box<dyn session_persistence::StreamSink>)
        })
        .collect();
    let batch = persistence.inspect_streams(reads, 2, &cancel()).await;
    assert!(batch.iter().all(Result::is_ok));
    let (active, started, max) = *overlap.state.lock().unwrap();
    assert_eq!((active, started, max), (0, 6, 2), "two lanes: two reads at once, never more");
}

/// Panics at the first event it is given.
struct PanicSink;

impl session_persistence::ScanSink for PanicSink {
    fn event(&mut self, _event: Arc<SessionEvent>) -> session_persistence::Result<()> {
        panic!("a sink that panics");
    }
}

pub(crate) async fn a_panicking_sink_panics_the_batch(h: &Cx<'_>) {
    use futures::FutureExt;
    let persistence = h.open();
    three_stored(&persistence).await;
    let reads = vec![
        (SessionId::from("s-a"), collect()),
        (SessionId::from("s-b"), Box::new(PanicSink) as Box<dyn session_persistence::StreamSink>),
        (SessionId::from("s-c"), collect()),
    ];
    let token = cancel();
    let batch = std::panic::AssertUnwindSafe(persistence.inspect_streams(reads, 2, &token)).catch_unwind();
    let Err(panic) = batch.await else { panic!("the batch did not panic") };
    assert_eq!(panic.downcast_ref::<&str>(), Some(&"a sink that panics"));
}

/// Reports, when dropped, whether it was given any event.
struct DropReport {
    name: &'static str,
    used: bool,
    report: std::sync::mpsc::Sender<(&'static str, bool)>,
}

impl session_persistence::ScanSink for DropReport {
    fn event(&mut self, _event: Arc<SessionEvent>) -> session_persistence::Result<()> {
        self.used = true;
        Ok(())
    }
}

impl Drop for DropReport {
    fn drop(&mut self) {
        let _ = self.report.send((self.name, self.used));
    }
}

/// Holds its read at the first event until released.
struct HeldSink {
    entered: std::sync::mpsc::Sender<()>,
    release: std::sync::mpsc::Receiver<()>,
}

impl session_persistence::ScanSink for HeldSink {
    fn event(&mut self, _event: Arc<SessionEvent>) -> session_persistence::Result<()> {
        if self.entered.send(()).is_ok() {
            let _ = self.release.recv_timeout(Duration::from_secs(10));
        }
        Ok(())
    }
}

pub(crate) async fn a_dropped_batch_starts_no_further_read(h: &Cx<'_>) {
    let persistence = Arc::new(h.open());
    three_stored(&persistence).await;
    let (entered_tx, entered) = std::sync::mpsc::channel();
    let (release, release_rx) = std::sync::mpsc::channel();
    let (report, reports) = std::sync::mpsc::channel();
    let reads = vec![
        (SessionId::from("s-a"), Box::new(HeldSink { entered: entered_tx, release: release_rx }) as Box<_>),
        (SessionId::from("s-b"), Box::new(DropReport { name: "s-b", used: false, report: report.clone() }) as _),
        (SessionId::from("s-c"), Box::new(DropReport { name: "s-c", used: false, report }) as _),
    ];
    let batch = tokio::spawn({
        let persistence = Arc::clone(&persistence);
        async move { persistence.inspect_streams(reads, 1, &cancel()).await }
    });
    tokio::task::spawn_blocking(move || entered.recv_timeout(Duration::from_secs(10)).unwrap()).await.unwrap();
    batch.abort();
    assert!(batch.await.is_err_and(|error| error.is_cancelled()));
    release.send(()).unwrap();
    let mut dropped = tokio::task::spawn_blocking(move || {
        (0..2).map(|_| reports.recv_timeout(Duration::from_secs(10)).unwrap()).collect::<Vec<_>>()
    })
    .await
    .unwrap();
    dropped.sort();
    assert_eq!(dropped, [("s-b", false), ("s-c", false)], "the lane stopped after the read it held");
}

/// Records how many events it had when `finish` was called, and how often it was.
#[derive(Default)]
struct FinishSink {
    events: usize,
    finished: Vec<usize>,
}

impl session_persistence::ScanSink for FinishSink {
    fn event(&mut self, _event: Arc<SessionEvent>) -> session_persistence::Result<()> {
        self.events += 1;
        Ok(())
    }

    fn restart(&mut self) -> bool {
        self.events = 0;
        true
    }

    fn finish(&mut self) {
        self.finished.push(self.events);
    }
}

pub(crate) async fn a_stream_finishes_its_sink_once_after_the_last_event(h: &Cx<'_>) {
    let (persistence, _store) = three_stored_and_one_live(h).await;
    for name in ["s-b", "s-live"] {
        let id = SessionId::from(name);
        let (sink, summary) =
            session_persistence::inspect_into(&persistence, &id, &cancel(), FinishSink::default()).await.unwrap();
        assert_eq!(sink.finished, [summary.n_events as usize], "{name}: once, after every event and closer");
    }
    let names = ["s-a", "s-b", "s-live", "s-c"];
    let reads = names.iter().map(|name| (SessionId::from(*name), FinishSink::default())).collect();
    let batch = session_persistence::inspect_each_into(&persistence, reads, 2, &cancel()).await;
    for (name, read) in names.iter().zip(batch) {
        let (sink, summary) = read.unwrap();
        assert_eq!(sink.finished, [summary.n_events as usize], "{name} in a batch");
    }
}

/// A persistence that breaks the streaming contract: it keeps the sink it was given past the
/// read (streaming into one of its own), and it returns one result short for a batch. (Handing
/// back a sink of another type cannot be written: nothing comes back through the trait.)
#[derive(Debug)]
struct Misbehaving(Coordinator, Kept);

/// The sinks a misbehaving persistence kept.
#[derive(Default)]
struct Kept(std::sync::Mutex<Vec<Box<dyn session_persistence::StreamSink>>>);

impl std::fmt::Debug for Kept {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Kept").finish_non_exhaustive()
    }
}

#[async_trait::async_trait]
impl SessionPersistence for Misbehaving {
    async fn create(&self, header: SessionHeader, cancel: &CancellationToken) -> session_persistence::Result<()> {
        self.0.create(header, cancel).await
    }

    async fn append(
        &self,
        id: &SessionId,
        events: Vec<Arc<SessionEvent>>,
        cancel: &CancellationToken,
    ) -> session_persistence::Result<()> {
        self.0.append(id, events, cancel).await
    }

    async fn list_snapshots(
        &self,
        cancel: &CancellationToken,
    ) -> session_persistence::Result<session_persistence::Listing> {
        self.0.list_snapshots(cancel).await
    }

    async fn list_children(
        &self,
        parent: &SessionId,
        cancel: &CancellationToken,
    ) -> session_persistence::Result<session_persistence::Listing> {
        self.0.list_children(parent, cancel).await
    }

    async fn list_page(
        &self,
        request: &session_persistence::PageRequest,
        cancel: &CancellationToken,
    ) -> session_persistence::Result<session_persistence::HeaderPage> {
        self.0.list_page(request, cancel).await
    }

    async fn stored_header(
        &self,
        id: &SessionId,
        cancel: &CancellationToken,
    ) -> session_persistence::Result<Option<session_persistence::StoredHeader>> {
        self.0.stored_header(id, cancel).await
    }

    fn durable_len(&self, id: &SessionId) -> Option<u64> {
        self.0.durable_len(id)
    }

    fn fence(&self, id: &SessionId) -> Option<String> {
        self.0.fence(id)
    }

    async fn inspect(
        &self,
        id: &SessionId,
        cancel: &CancellationToken,
    ) -> session_persistence::Result<session_persistence::Inspection> {
        self.0.inspect(id, cancel).await
    }

    async fn inspect_stream(
        &self,
        id: &SessionId,
        cancel: &CancellationToken,
        sink: Box<dyn session_persistence::StreamSink>,
    ) -> session_persistence::Result<session_persistence::StreamSummary> {
        self.1.0.lock().unwrap().push(sink);
        self.0.inspect_stream(id, cancel, collect()).await
    }

    async fn inspect_streams(
        &self,
        mut reads: Vec<(SessionId, Box<dyn session_persistence::StreamSink>)>,
        lanes: usize,
        cancel: &CancellationToken,
    ) -> Vec<session_persistence::Result<session_persistence::StreamSummary>> {
        reads.pop();
        self.0.inspect_streams(reads, lanes, cancel).await
    }

    async fn read_from(
        &self,
        id: &SessionId,
        from_seq: u64,
        cancel: &CancellationToken,
    ) -> session_persistence::Result<session_persistence::Inspection> {
        self.0.read_from(id, from_seq, cancel).await
    }

    async fn load(
        &self,
        id: &SessionId,
        cancel: &CancellationToken,
    ) -> session_persistence::Result<session_persistence::Inspection> {
        self.0.load(id, cancel).await
    }

    async fn flush(&self, id: &SessionId, cancel: &CancellationToken) -> session_persistence::Result<()> {
        self.0.flush(id, cancel).await
    }

    async fn release(&self, id: &SessionId, cancel: &CancellationToken) -> session_persistence::Result<()> {
        self.0.release(id, cancel).await
    }

    fn locate(&self, header: &SessionHeader) -> Option<PathBuf> {
        self.0.locate(header)
    }
}

pub(crate) async fn a_persistence_breaking_the_stream_contract_gives_errors_not_panics(h: &Cx<'_>) {
    let persistence = h.open();
    three_stored(&persistence).await;
    let misbehaving = Misbehaving(persistence, Kept::default());
    let kept =
        session_persistence::inspect_into(&misbehaving, &SessionId::from("s-a"), &cancel(), FinishSink::default())
            .await;
    let Err(PersistenceError::InvalidInput { message }) = kept else { panic!("a kept sink is an error") };
    assert!(message.contains("kept the sink"), "{message}");

    let reads = ["s-a", "s-b", "s-c"].iter().map(|name| (SessionId::from(*name), FinishSink::default())).collect();
    let batch = session_persistence::inspect_each_into(&misbehaving, reads, 2, &cancel()).await;
    assert_eq!(batch.len(), 3, "every read has a result");
    assert!(batch[..2].iter().all(Result::is_ok));
    let Err(PersistenceError::InvalidInput { message }) = &batch[2] else { panic!("the missing result is an error") };
    assert!(message.contains("2 results for 3 streamed reads"), "{message}");
}
