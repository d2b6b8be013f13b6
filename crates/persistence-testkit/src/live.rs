//! The persistence contract, live part: sessions of an attached `SessionStore` written behind in
//! batches, the flush barrier, forks, resumes and releases.

use std::sync::Arc;

use serde_json::json;
use session_core::{CreateOptions, HeaderMeta, ManualClock, SessionEvent, SessionId, SessionStore};
use session_persistence::{PersistenceError, SessionPersistence};

use crate::{
    inspect::kinds,
    persistence::{Cx, cancel, header, one_turn, open_step_log, plain, seqs},
};

pub(crate) fn store() -> Arc<SessionStore> {
    Arc::new(SessionStore::new(Arc::new(ManualClock::new(5_000))))
}

pub(crate) fn meta() -> HeaderMeta {
    HeaderMeta { cwd: Some("/work/project".into()), ..HeaderMeta::default() }
}

pub(crate) fn append_turn(session: &session_core::Session, turn: u64) {
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
    // Disposal drains the buffer: the detach started the session's retire, and `release` awaits
    // that retire (instead of polling for its effect); a cold load then sees every event.
    persistence.release(&SessionId::from("s-live"), &cancel()).await.unwrap();
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
