//! The coordinator contract: the coordinator's mechanics that the persistence contract does not
//! see (write-behind batching, failure retention, the inspection cache and its bounds, long logs
//! validated alike on every thread setting, a live session fenced by another writer of a shared
//! store), observed through a `CountingBackend` over the place's backend.

use std::{sync::Arc, time::Duration};

use serde_json::json;
use session_core::{
    CreateOptions, HeaderMeta, ManualClock, Session, SessionEvent, SessionHeader, SessionId, SessionStore,
};
use session_persistence::{
    Backend, Coordinator, CoordinatorConfig, CountingBackend, PersistenceError, ReadThreads, SessionPersistence,
};
use tokio_util::sync::CancellationToken;

use crate::Place;

/// A coordinator case's context: its place.
pub(crate) type Cx<'a> = crate::runner::Cx<'a, dyn Place>;

fn live_store(persistence: &Coordinator) -> Arc<SessionStore> {
    let store = Arc::new(SessionStore::new(Arc::new(ManualClock::new(1_000))));
    persistence.attach(&store).unwrap();
    store
}

/// Asserts, through an open of its own, that no writer holds `id`'s lease.
fn assert_nobody_holds(h: &Cx<'_>, id: &SessionId, cancel: &CancellationToken) {
    let held = h.place.open().positions(std::slice::from_ref(id), cancel).unwrap();
    assert_eq!(held.first().map(|position| position.held), Some(Some(false)), "{held:?}");
}

/// Whether the place's opens are two writers of one store ([`Place::shared_writers`]); notes
/// the case as skipped when they are not.
fn has_shared_writers(h: &Cx<'_>) -> bool {
    let shared = h.place.shared_writers();
    if !shared {
        h.note("skipped: the place has no concurrent writers (Place::shared_writers)");
    }
    shared
}

/// Resumes `id` on a host: its stored log loaded through `persistence` and made live in
/// `store`, as a host resumes a session another host wrote.
async fn resume(persistence: &Coordinator, store: &SessionStore, id: &SessionId) -> Arc<session_core::Session> {
    let loaded = persistence.load(id, &CancellationToken::new()).await.unwrap();
    let meta = HeaderMeta { created_at: Some(loaded.header.created_at), ..meta() };
    store.create(Some(id.clone()), CreateOptions { seed: Some(loaded.events.to_vec()), meta }).unwrap()
}

/// Another host over an open of its own resumes `id`, writes a turn and lets go of it: the
/// stored log moves on past every copy elsewhere. That host's coordinator.
async fn moved_on_by_another_host(h: &Cx<'_>, id: &SessionId) -> Coordinator {
    let cancel = CancellationToken::new();
    let two = Coordinator::new(h.place.open(), CoordinatorConfig::default()).unwrap();
    let two_store = live_store(&two);
    let theirs = resume(&two, &two_store, id).await;
    append_turn(&theirs, 2);
    two_store.flush(id).await.unwrap();
    drop(two_store.detach(id));
    two.release(id, &cancel).await.unwrap();
    two
}

/// A copy of `id` made live in `store` from its whole stored log read cold through
/// `persistence` (not loaded: nothing tracks it for the copy).
async fn published_from_the_store(persistence: &Coordinator, store: &SessionStore, id: &SessionId) -> Arc<Session> {
    let stored = persistence.read_from(id, 0, &CancellationToken::new()).await.unwrap();
    let meta = HeaderMeta { created_at: Some(stored.header.created_at), ..meta() };
    store.create(Some(id.clone()), CreateOptions { seed: Some(stored.events.to_vec()), meta }).unwrap()
}

/// A host over an open of its own whose live session `id` holds one flushed turn: its counting
/// backend, its coordinator, its store and the session.
async fn host_with_one_turn(
    h: &Cx<'_>,
    id: &SessionId,
) -> (Arc<CountingBackend>, Coordinator, Arc<SessionStore>, Arc<session_core::Session>) {
    let backend = Arc::new(CountingBackend::new(h.place.open()));
    let persistence = Coordinator::new(backend.clone(), CoordinatorConfig::default()).unwrap();
    let store = live_store(&persistence);
    let session = store.create(Some(id.clone()), CreateOptions { seed: None, meta: meta() }).unwrap();
    append_turn(&session, 1);
    store.flush(id).await.unwrap();
    (backend, persistence, store, session)
}

fn meta() -> HeaderMeta {
    HeaderMeta { cwd: Some("/work".into()), ..HeaderMeta::default() }
}

pub(crate) async fn events_inside_one_window_are_written_as_one_batch(h: &Cx<'_>) {
    let backend = Arc::new(CountingBackend::new(h.place.open()));
    let config = CoordinatorConfig { write_batch_max_delay: Duration::from_millis(50), ..CoordinatorConfig::default() };
    let persistence = Coordinator::new(backend.clone(), config).unwrap();
    let store = live_store(&persistence);
    let session = store.create(Some(SessionId::from("s-batch")), CreateOptions { seed: None, meta: meta() }).unwrap();
    for turn in 1..=10 {
        session.append("turn/start", &json!({"turn": turn}), None).unwrap();
        session.append("turn/end", &json!({"turn": turn, "reason": {"kind": "completed"}}), None).unwrap();
    }
    // The window closes on its own and writes once; the bound only keeps a broken build from
    // hanging (no timing is asserted).
    tokio::time::timeout(Duration::from_secs(30), backend.wait_for_appends(1))
        .await
        .expect("the write-behind window closes on its own");
    assert_eq!(backend.appends(), 1, "20 events in one window make one batch");
    persistence.flush(session.id(), &CancellationToken::new()).await.unwrap();
    assert_eq!(backend.appends(), 1, "20 events in one window make one batch");
    let read = persistence.read_from(session.id(), 0, &CancellationToken::new()).await.unwrap();
    assert_eq!(read.events.len(), 20);
}

/// A live session's first write fails when its window closes (the store unreachable): its events
/// stay buffered, and the next event opens a new window that writes them, without a flush.
pub(crate) async fn a_failed_first_write_is_retried_when_the_next_event_comes(h: &Cx<'_>) {
    let backend = Arc::new(CountingBackend::new(h.place.open()));
    let config = CoordinatorConfig { write_batch_max_delay: Duration::from_millis(20), ..CoordinatorConfig::default() };
    let persistence = Coordinator::new(backend.clone(), config).unwrap();
    let store = live_store(&persistence);
    let id = SessionId::from("s-first-fails");
    let session = store.create(Some(id.clone()), CreateOptions { seed: None, meta: meta() }).unwrap();
    backend.fail_appends(true);
    session.append("turn/start", &json!({"turn": 1}), None).unwrap();
    // The bounds only keep a broken build from hanging (no timing is asserted).
    tokio::time::timeout(Duration::from_secs(30), backend.wait_for_failed_appends(1))
        .await
        .expect("the window closes on its own and its write fails");
    backend.fail_appends(false);
    session.append("turn/end", &json!({"turn": 1, "reason": {"kind": "completed"}}), None).unwrap();
    tokio::time::timeout(Duration::from_secs(30), backend.wait_for_appends(1))
        .await
        .expect("the next event opens a window that writes");
    let read = persistence.read_from(&id, 0, &CancellationToken::new()).await.unwrap();
    let kinds: Vec<&str> = read.events.iter().map(|event| event.kind.as_str()).collect();
    assert_eq!(kinds, ["turn/start", "turn/end"]);
}

pub(crate) async fn a_failed_write_keeps_the_batch_in_order_and_the_next_flush_writes_it(h: &Cx<'_>) {
    let backend = Arc::new(CountingBackend::new(h.place.open()));
    let persistence = Coordinator::new(backend.clone(), CoordinatorConfig::default()).unwrap();
    let store = live_store(&persistence);
    let session = store.create(Some(SessionId::from("s-retry")), CreateOptions { seed: None, meta: meta() }).unwrap();
    backend.fail_appends(true);
    session.append("turn/start", &json!({"turn": 1}), None).unwrap();
    let err = store.flush(session.id()).await.unwrap_err();
    assert!(err.to_string().contains("injected write failure") || format!("{err:?}").contains("injected"), "{err:?}");
    session.append("turn/end", &json!({"turn": 1, "reason": {"kind": "completed"}}), None).unwrap();
    backend.fail_appends(false);
    store.flush(session.id()).await.unwrap();
    let read = persistence.read_from(session.id(), 0, &CancellationToken::new()).await.unwrap();
    let kinds: Vec<&str> = read.events.iter().map(|event| event.kind.as_str()).collect();
    assert_eq!(kinds, ["turn/start", "turn/end"]);
}

fn append_turn(session: &Session, turn: u64) {
    session.append("turn/start", &json!({"turn": turn}), None).unwrap();
    session.append("turn/end", &json!({"turn": turn, "reason": {"kind": "completed"}}), None).unwrap();
}

/// Two hosts over one shared store hold one session live in turn. The second resumes it and
/// writes first, so the first host's next write meets the writer fence and its live copy is
/// fenced: its flushes fail at once with the fence and nothing more reaches the store; its
/// writer lease ends (once the second host lets go, nobody holds the session); a release unbinds
/// it without writing; resumed from the store, it holds the second host's log and
/// writes again. Runs where two opens are two writers of one store ([`Place::shared_writers`]).
pub(crate) async fn a_live_session_that_meets_the_writer_fence_stops_writing_until_it_is_resumed(h: &Cx<'_>) {
    if !has_shared_writers(h) {
        return;
    }
    let cancel = CancellationToken::new();
    let id = SessionId::from("s-fenced");
    let (one_backend, one, one_store, session) = host_with_one_turn(h, &id).await;

    // The second host resumes the session and writes first.
    let two = Coordinator::new(h.place.open(), CoordinatorConfig::default()).unwrap();
    let two_store = live_store(&two);
    let resumed = resume(&two, &two_store, &id).await;
    append_turn(&resumed, 2);
    two_store.flush(&id).await.unwrap();
    let theirs = two.read_from(&id, 0, &cancel).await.unwrap().events;

    // The first host's next write meets the fence; from then on it writes nothing.
    append_turn(&session, 2);
    let err = one_store.flush(&id).await.unwrap_err();
    assert!(err.to_string().contains("append starts at seq 2, stored next seq is 5"), "{err}");
    let reason = one.fence(&id).expect("the first host's live copy is fenced");
    assert!(two.fence(&id).is_none(), "the writer that won is not fenced");
    let appends = one_backend.appends();
    append_turn(&session, 3);
    let again = one_store.flush(&id).await.unwrap_err();
    assert!(again.to_string().contains(&reason), "every later flush fails with the same reason: {again}");
    assert_eq!(one_backend.appends(), appends, "a fenced live copy sends no more writes");
    assert_eq!(two.read_from(&id, 0, &cancel).await.unwrap().events, theirs, "the stored log is the winner's");

    // The fenced copy holds no lease (it can never be written again): once the winner lets go,
    // no other process sees the session held, though the copy is still bound.
    drop(two_store.detach(&id));
    two.release(&id, &cancel).await.unwrap();
    assert_nobody_holds(h, &id, &cancel);
    assert!(one.fence(&id).is_some(), "the fenced copy is still bound");

    // Released without writing, then resumed from the store: the winner's log, writable again.
    // Detached first, as a gateway does: the detach unbinds it in a task of its own, and the
    // release reports the fence whichever of the two meets it.
    drop(one_store.detach(&id));
    let released = one.release(&id, &cancel).await.unwrap_err();
    assert!(released.to_string().contains(&reason), "the release says the fenced events were not stored: {released}");
    assert!(one.fence(&id).is_none(), "a released session is not fenced any more");
    assert_eq!(one.durable_len(&id), None, "and it is not bound any more");
    drop((resumed, two_store));
    two.close().await.unwrap();
    let one_store = live_store(&one);
    let session = resume(&one, &one_store, &id).await;
    assert_eq!(session.events()[..theirs.len()], theirs[..], "the resumed copy starts from the stored log");
    append_turn(&session, 4);
    one_store.flush(&id).await.unwrap();
    assert_eq!(one.read_from(&id, 0, &cancel).await.unwrap().events.len(), session.len() as usize);
    one.close().await.unwrap();
}

/// A batch that committed but whose reply was lost: the retry meets the fence, the coordinator
/// finds its own batch stored there, and goes on without fencing the session or writing the
/// batch twice. Runs where the backend fences writers ([`Place::shared_writers`]).
pub(crate) async fn a_write_whose_reply_was_lost_is_not_taken_for_another_writer(h: &Cx<'_>) {
    if !has_shared_writers(h) {
        return;
    }
    let cancel = CancellationToken::new();
    let backend = Arc::new(CountingBackend::new(h.place.open()));
    let persistence = Coordinator::new(backend.clone(), CoordinatorConfig::default()).unwrap();
    let store = live_store(&persistence);
    let id = SessionId::from("s-lost-reply");
    let session = store.create(Some(id.clone()), CreateOptions { seed: None, meta: meta() }).unwrap();
    append_turn(&session, 1);
    store.flush(&id).await.unwrap();
    append_turn(&session, 2);
    backend.lose_next_reply();
    let err = store.flush(&id).await.unwrap_err();
    assert!(err.to_string().contains("lost reply"), "the lost reply is the flush's error: {err}");
    assert!(persistence.fence(&id).is_none(), "a lost reply is not another writer");
    append_turn(&session, 3);
    store.flush(&id).await.unwrap();
    assert_eq!(persistence.durable_len(&id), Some(6));
    let stored = persistence.read_from(&id, 0, &cancel).await.unwrap().events;
    assert_eq!(stored.to_vec(), session.events().to_vec(), "every event stored once, in order");
    persistence.close().await.unwrap();
}

/// Two hosts over one shared store both create one new id (each finds it free) and hold it
/// live. The first one's write creates the log, so the second one's first write meets the writer
/// fence: its copy is fenced exactly as after any later write (not an id collision, not retried),
/// its lease ends, its release says so, and resumed from the store it writes again. Runs where two opens are two
/// writers of one store ([`Place::shared_writers`]).
pub(crate) async fn a_first_write_that_meets_a_log_created_meanwhile_is_fenced(h: &Cx<'_>) {
    if !has_shared_writers(h) {
        return;
    }
    let cancel = CancellationToken::new();
    let id = SessionId::from("s-created-twice");
    let mut header = SessionHeader::new(id.clone(), 1_000);
    header.cwd = Some("/work".into());
    let one = Coordinator::new(h.place.open(), CoordinatorConfig::default()).unwrap();
    let two_backend = Arc::new(CountingBackend::new(h.place.open()));
    let two = Coordinator::new(two_backend.clone(), CoordinatorConfig::default()).unwrap();
    one.create(header.clone(), &cancel).await.unwrap();
    two.create(header, &cancel).await.unwrap();
    let (one_store, two_store) = (live_store(&one), live_store(&two));
    let first = one_store.create(Some(id.clone()), CreateOptions { seed: None, meta: meta() }).unwrap();
    let second = two_store.create(Some(id.clone()), CreateOptions { seed: None, meta: meta() }).unwrap();
    append_turn(&first, 1);
    one_store.flush(&id).await.unwrap();

    // The second copy's first write would create the log the first one created meanwhile.
    append_turn(&second, 7);
    let err = two_store.flush(&id).await.unwrap_err();
    assert!(err.to_string().contains("append starts at seq 0, stored next seq is 2"), "{err}");
    assert!(two.fence(&id).is_some(), "the second copy is fenced");
    assert!(one.fence(&id).is_none(), "the writer that won is not fenced");
    let appends = two_backend.appends();
    append_turn(&second, 8);
    assert!(two_store.flush(&id).await.is_err(), "a fenced copy stays fenced");
    assert_eq!(two_backend.appends(), appends, "a fenced copy sends no more writes");
    // The lease its binding took is let go of with the fence: once the first writer releases
    // the session, nobody holds it.
    drop(one_store.detach(&id));
    one.release(&id, &cancel).await.unwrap();
    assert_nobody_holds(h, &id, &cancel);

    drop(two_store.detach(&id));
    let released = two.release(&id, &cancel).await.unwrap_err();
    assert!(matches!(released, PersistenceError::Fenced { seq: 0, stored_next_seq: 2, .. }), "{released:?}");
    assert_eq!(two.durable_len(&id), None, "a released copy is not bound any more");
    let loaded = two.load(&id, &cancel).await.unwrap();
    assert_eq!(loaded.events[..], first.events()[..], "the stored log is the first writer's");
    let meta = HeaderMeta { created_at: Some(loaded.header.created_at), ..meta() };
    let resumed =
        two_store.create(Some(id.clone()), CreateOptions { seed: Some(loaded.events.to_vec()), meta }).unwrap();
    append_turn(&resumed, 9);
    two_store.flush(&id).await.unwrap();
    let stored = two.read_from(&id, 0, &cancel).await.unwrap().events;
    assert_eq!(stored[..], resumed.events()[..], "resumed, it writes again");
}

/// A live copy that another host took over while it wrote nothing (the store holds more than
/// the copy): asked, the coordinator fences it as its next write would (its flushes fail with the
/// fence, nothing more is written) and ends its lease, so once the other host lets go nobody
/// holds the session. A copy the store has not moved past is left alone. Runs where two opens are
/// two writers of one store ([`Place::shared_writers`]).
pub(crate) async fn a_live_copy_another_writer_took_over_is_fenced_when_asked(h: &Cx<'_>) {
    if !has_shared_writers(h) {
        return;
    }
    let cancel = CancellationToken::new();
    let id = SessionId::from("s-overtaken");
    let (one_backend, one, one_store, session) = host_with_one_turn(h, &id).await;
    assert!(!one.fence_if_overtaken(&id, &cancel).await.unwrap(), "nobody moved the log on");
    assert!(one.fence(&id).is_none());

    let two = Coordinator::new(h.place.open(), CoordinatorConfig::default()).unwrap();
    let two_store = live_store(&two);
    let resumed = resume(&two, &two_store, &id).await;
    append_turn(&resumed, 2);
    two_store.flush(&id).await.unwrap();
    assert!(!two.fence_if_overtaken(&id, &cancel).await.unwrap(), "the writer that took it over is not behind");
    let stored = two.read_from(&id, 0, &cancel).await.unwrap().events.len();

    assert!(one.fence_if_overtaken(&id, &cancel).await.unwrap(), "the copy is behind the store");
    assert!(one.fence(&id).is_some(), "and fenced");
    assert!(!one.fence_if_overtaken(&id, &cancel).await.unwrap(), "once");
    let appends = one_backend.appends();
    append_turn(&session, 3);
    let err = one_store.flush(&id).await.unwrap_err();
    assert!(err.to_string().contains(&format!("append starts at seq 2, stored next seq is {stored}")), "{err}");
    assert_eq!(one_backend.appends(), appends, "a fenced copy sends no writes");

    drop(two_store.detach(&id));
    two.release(&id, &cancel).await.unwrap();
    assert_nobody_holds(h, &id, &cancel);
    drop(one_store.detach(&id));
    assert!(one.release(&id, &cancel).await.is_err(), "its release says its events were not stored");
}

/// A copy resumed from the store and never written (nothing appended since) that another host
/// then took over: asked, the coordinator fences it as its first write would, with the seqs that
/// write would meet. Runs where two opens are two writers of one store ([`Place::shared_writers`]).
pub(crate) async fn a_resumed_copy_never_written_is_fenced_when_asked(h: &Cx<'_>) {
    if !has_shared_writers(h) {
        return;
    }
    let cancel = CancellationToken::new();
    let id = SessionId::from("s-resumed-idle");
    let (_, first, first_store, _) = host_with_one_turn(h, &id).await;
    drop(first_store.detach(&id));
    first.release(&id, &cancel).await.unwrap();
    let one_backend = Arc::new(CountingBackend::new(h.place.open()));
    let one = Coordinator::new(one_backend.clone(), CoordinatorConfig::default()).unwrap();
    let one_store = live_store(&one);
    let idle = resume(&one, &one_store, &id).await;
    assert!(!one.fence_if_overtaken(&id, &cancel).await.unwrap(), "nobody moved the log on");

    let two = Coordinator::new(h.place.open(), CoordinatorConfig::default()).unwrap();
    let two_store = live_store(&two);
    let resumed = resume(&two, &two_store, &id).await;
    append_turn(&resumed, 2);
    two_store.flush(&id).await.unwrap();
    let appends = one_backend.appends();
    assert!(one.fence_if_overtaken(&id, &cancel).await.unwrap(), "the idle copy is behind the store");
    assert!(one.fence(&id).is_some(), "and fenced");
    assert_eq!(one_backend.appends(), appends, "fencing it wrote nothing");
    append_turn(&idle, 3);
    assert!(one_store.flush(&id).await.is_err(), "a fenced copy stays fenced");
    assert_eq!(one_backend.appends(), appends, "a fenced copy sends no writes");
    drop(two_store.detach(&id));
    two.release(&id, &cancel).await.unwrap();
    assert_nobody_holds(h, &id, &cancel);
}

/// A store attached to a coordinator twice is refused the second time (each event would reach
/// its writer twice, and every batch after the first would fail its seq check), and its sessions
/// are written as with one attachment.
pub(crate) async fn a_store_attached_twice_is_refused(h: &Cx<'_>) {
    let persistence = Coordinator::new(h.place.open(), CoordinatorConfig::default()).unwrap();
    let store = live_store(&persistence);
    let err = persistence.attach(&store).unwrap_err();
    assert!(err.to_string().contains("already attached"), "{err}");
    let id = SessionId::from("s-attached-once");
    let session = store.create(Some(id.clone()), CreateOptions { seed: None, meta: meta() }).unwrap();
    append_turn(&session, 1);
    store.flush(&id).await.unwrap();
    let stored = persistence.read_from(&id, 0, &CancellationToken::new()).await.unwrap();
    assert_eq!(stored.events.len(), session.len() as usize);
}

/// Waits until `backend` holds one append at its hold, polling `call` meanwhile, then drops
/// `call`: its caller stops waiting while the write is on its way, as a cancelled request does.
async fn abandon_while_held<T: std::fmt::Debug>(backend: &CountingBackend, call: impl std::future::Future<Output = T>) {
    tokio::pin!(call);
    tokio::select! {
        result = &mut call => panic!("the call ended while its write was held: {result:?}"),
        () = backend.wait_for_held(1) => {}
    }
}

/// A flush whose caller stops waiting while its batch is being written (a cancelled request): the
/// write goes on to its end and is recorded, so the session's next flush writes what followed,
/// and the log holds every event once, in order.
pub(crate) async fn a_flush_whose_caller_stops_waiting_still_records_its_write(h: &Cx<'_>) {
    let backend = Arc::new(CountingBackend::new(h.place.open()));
    // No window closes on its own here: the flush is the one writing.
    let config =
        CoordinatorConfig { write_batch_max_delay: Duration::from_secs(3_600), ..CoordinatorConfig::default() };
    let persistence = Coordinator::new(backend.clone(), config).unwrap();
    let store = live_store(&persistence);
    let id = SessionId::from("s-abandoned-flush");
    let session = store.create(Some(id.clone()), CreateOptions { seed: None, meta: meta() }).unwrap();
    append_turn(&session, 1);
    store.flush(&id).await.unwrap();
    let before = backend.appends();
    append_turn(&session, 2);
    backend.hold_appends(true);
    abandon_while_held(&backend, store.flush(&id)).await;
    backend.hold_appends(false);
    tokio::time::timeout(Duration::from_secs(30), backend.wait_for_appends(before + 1))
        .await
        .expect("the abandoned flush's write goes on");
    append_turn(&session, 3);
    store.flush(&id).await.expect("the next flush writes what followed the abandoned one");
    assert_eq!(persistence.durable_len(&id), Some(6));
    let stored = persistence.read_from(&id, 0, &CancellationToken::new()).await.unwrap().events;
    assert_eq!(stored.to_vec(), session.events().to_vec(), "every event stored once, in order");
    persistence.close().await.unwrap();
}

/// An append whose caller stops waiting while the batch is being written: the write goes on to
/// its end and is recorded, so the next batch, from the next seq, is accepted.
pub(crate) async fn an_append_whose_caller_stops_waiting_still_records_its_write(h: &Cx<'_>) {
    let backend = Arc::new(CountingBackend::new(h.place.open()));
    let persistence = Coordinator::new(backend.clone(), CoordinatorConfig::default()).unwrap();
    let cancel = CancellationToken::new();
    let id = SessionId::from("s-abandoned-append");
    let mut header = SessionHeader::new(id.clone(), 1);
    header.cwd = Some("/work".into());
    persistence.create(header, &cancel).await.unwrap();
    persistence.append(&id, turn(0), &cancel).await.unwrap();
    let before = backend.appends();
    backend.hold_appends(true);
    abandon_while_held(&backend, persistence.append(&id, turn(2), &cancel)).await;
    backend.hold_appends(false);
    tokio::time::timeout(Duration::from_secs(30), backend.wait_for_appends(before + 1))
        .await
        .expect("the abandoned append's write goes on");
    persistence.append(&id, turn(4), &cancel).await.expect("the next batch, from the next seq, is accepted");
    let stored = persistence.read_from(&id, 0, &cancel).await.unwrap().events;
    assert_eq!(stored.iter().map(|event| event.seq).collect::<Vec<_>>(), (0..6).collect::<Vec<_>>());
    persistence.close().await.unwrap();
}

fn turn(seq0: u64) -> Vec<Arc<SessionEvent>> {
    ["turn/start", "turn/end"]
        .iter()
        .enumerate()
        .map(|(offset, kind)| {
            let data = if *kind == "turn/start" {
                json!({"turn": 1})
            } else {
                json!({"turn": 1, "reason": {"kind": "completed"}})
            };
            Arc::new(
                serde_json::from_value(json!({"type": kind, "seq": seq0 + offset as u64, "time": 1, "data": data}))
                    .unwrap(),
            )
        })
        .collect()
}

pub(crate) async fn inspections_are_cached_until_the_log_changes(h: &Cx<'_>) {
    let backend = Arc::new(CountingBackend::new(h.place.open()));
    let persistence = Coordinator::new(backend.clone(), CoordinatorConfig::default()).unwrap();
    let cancel = CancellationToken::new();
    let id = SessionId::from("s-cache");
    let mut header = SessionHeader::new(id.clone(), 1);
    header.cwd = Some("/work".into());
    persistence.create(header, &cancel).await.unwrap();
    persistence.append(&id, turn(0), &cancel).await.unwrap();
    let scans = || backend.scans();
    let first = persistence.inspect(&id, &cancel).await.unwrap();
    let after_first = scans();
    let second = persistence.inspect(&id, &cancel).await.unwrap();
    assert_eq!(scans(), after_first, "an unchanged log is served from the cache");
    assert!(Arc::ptr_eq(&first.events, &second.events));
    persistence.append(&id, turn(2), &cancel).await.unwrap();
    let third = persistence.inspect(&id, &cancel).await.unwrap();
    assert_eq!(scans(), after_first + 1, "an append invalidates the entry");
    assert_eq!(third.events.len(), 4);
    // Concurrent readers of one id share one read.
    let before = scans();
    persistence.append(&id, turn(4), &cancel).await.unwrap();
    let reads = futures::future::join_all((0..4).map(|_| persistence.inspect(&id, &cancel))).await;
    assert!(reads.iter().all(|read| read.as_ref().is_ok_and(|read| read.events.len() == 6)));
    assert_eq!(scans(), before + 1);
    assert_eq!(persistence.n_locked_ids(), 0, "per-id locks are dropped once unused");
}

pub(crate) async fn the_inspection_cache_is_bounded_by_entries_and_bytes(h: &Cx<'_>) {
    let backend = Arc::new(CountingBackend::new(h.place.open()));
    let config =
        CoordinatorConfig { inspect_cache_entries: 2, inspect_cache_bytes: 1 << 20, ..CoordinatorConfig::default() };
    let persistence = Coordinator::new(backend.clone(), config).unwrap();
    let cancel = CancellationToken::new();
    for n in 0..4 {
        let id = SessionId::from(format!("s-{n}"));
        persistence.create(SessionHeader::new(id.clone(), 1), &cancel).await.unwrap();
        persistence.append(&id, turn(0), &cancel).await.unwrap();
        persistence.inspect(&id, &cancel).await.unwrap();
    }
    assert_eq!(persistence.inspect_cache_usage().0, 2, "at most two entries");

    let small = CoordinatorConfig { inspect_cache_bytes: 200, ..CoordinatorConfig::default() };
    let persistence = Coordinator::new(backend.clone(), small).unwrap();
    for n in 0..4 {
        persistence.inspect(&SessionId::from(format!("s-{n}")), &cancel).await.unwrap();
        let (_, bytes) = persistence.inspect_cache_usage();
        assert!(bytes <= 200, "the byte bound holds: {bytes}");
    }
}

pub(crate) async fn invalid_configuration_is_rejected_with_the_reference_messages(h: &Cx<'_>) {
    let backend: Arc<dyn Backend> = h.place.open();
    let zero = CoordinatorConfig { inspect_cache_entries: 0, ..CoordinatorConfig::default() };
    assert_eq!(
        Coordinator::new(backend.clone(), zero).unwrap_err().to_string(),
        "preparedSessionCacheSize must be a positive safe integer"
    );
    let no_delay = CoordinatorConfig { write_batch_max_delay: Duration::ZERO, ..CoordinatorConfig::default() };
    assert_eq!(
        Coordinator::new(backend, no_delay).unwrap_err().to_string(),
        "writeBatchMaxDelayMs must be an integer between 1 and 2147483647"
    );
}

/// Long logs are validated on a second thread when reads may use helpers: results, errors and
/// closers are the same as on one thread, including a defect deep in the log. One case per
/// setting, each on a place of its own (the cases write the same ids).
pub(crate) async fn long_logs_validate_the_same_on_the_relay_thread_always(h: &Cx<'_>) {
    long_logs_validate_the_same_with(h, ReadThreads::Always).await;
}

pub(crate) async fn long_logs_validate_the_same_on_the_relay_thread_never(h: &Cx<'_>) {
    long_logs_validate_the_same_with(h, ReadThreads::Never).await;
}

pub(crate) async fn long_logs_validate_the_same_on_the_relay_thread_auto(h: &Cx<'_>) {
    long_logs_validate_the_same_with(h, ReadThreads::Auto).await;
}

async fn long_logs_validate_the_same_with(h: &Cx<'_>, read_threads: ReadThreads) {
    let backend = Arc::new(CountingBackend::new(h.place.open()));
    let config = CoordinatorConfig { read_threads, ..CoordinatorConfig::default() };
    let persistence = Coordinator::new(backend.clone(), config).unwrap();
    let cancel = CancellationToken::new();
    let id = SessionId::from("s-long");
    persistence.create(SessionHeader::new(id.clone(), 1), &cancel).await.unwrap();
    for turn in 0..1_000u64 {
        persistence.append(&id, self::turn(turn * 2), &cancel).await.unwrap();
    }
    let open: Arc<SessionEvent> = Arc::new(
        serde_json::from_value(json!({"type": "turn/start", "seq": 2_000, "time": 5, "data": {"turn": 1}})).unwrap(),
    );
    persistence.append(&id, vec![open], &cancel).await.unwrap();
    let inspected = persistence.inspect(&id, &cancel).await.unwrap();
    assert_eq!(inspected.events.len(), 2_002);
    assert_eq!(inspected.n_closers, 1);
    assert!(inspected.events.iter().enumerate().all(|(idx, event)| event.seq == idx as u64));
    let suffix = persistence.read_from(&id, 1_500, &cancel).await.unwrap();
    assert_eq!(suffix.events.len(), 501);

    // A defect at seq 1,500 of another long log: a message without an id.
    let bad_id = SessionId::from("s-long-bad");
    let mut log: Vec<Arc<SessionEvent>> = (0..750u64).flat_map(|turn| self::turn(turn * 2)).collect();
    log.push(Arc::new(
        serde_json::from_value(json!({"type": "user/message", "seq": 1_500, "time": 5, "surfaceOp": "append",
            "data": {"role": "user", "source": {"kind": "user"}, "content": [], "id": ""}}))
        .unwrap(),
    ));
    log.extend((0..200u64).flat_map(|turn| self::turn(1_501 + turn * 2)));
    // No writer stores the defect (the storable check refuses it) ...
    persistence.create(SessionHeader::new(bad_id.clone(), 1), &cancel).await.unwrap();
    let refused = persistence.append(&bad_id, log.clone(), &cancel).await.unwrap_err();
    assert!(refused.to_string().contains("lacks an identified message"), "{refused}");
    // ... so the log is stored as another writer might have left it.
    let raw_id = SessionId::from("s-long-bad-raw");
    crate::legacy::store_raw(&persistence, &SessionHeader::new(raw_id.clone(), 1), &log);
    let bad_id = raw_id;
    let err = persistence.inspect(&bad_id, &cancel).await.unwrap_err();
    assert!(err.to_string().contains("lacks an identified message"), "{err}");
    let (sink, _) =
        session_persistence::inspect_into(&persistence, &id, &cancel, session_persistence::CollectSink::default())
            .await
            .unwrap();
    assert_eq!(sink.events.len(), 2_002);
}

/// A release whose caller stops waiting while its writer lease is being ended (a request dropped
/// when its client went away) still ends that lease before anything else takes the id: a copy
/// resumed right after keeps the lease its own first write took. Runs where two opens are two
/// writers of one store ([`Place::shared_writers`]).
pub(crate) async fn a_release_dropped_while_its_lease_ends_leaves_the_next_copys_lease_alone(h: &Cx<'_>) {
    if !has_shared_writers(h) {
        return;
    }
    let cancel = CancellationToken::new();
    let id = SessionId::from("s-dropped-release");
    let (backend, one, one_store, session) = host_with_one_turn(h, &id).await;
    let appends = backend.appends();
    backend.hold_lease_ends(true);
    tokio::select! {
        released = one.release(&id, &cancel) => panic!("the release ended with its lease end held: {released:?}"),
        () = backend.wait_for_held_lease_ends(1) => {}
    }
    // The release's future is gone, its lease end still waiting; the session is resumed here.
    drop(session);
    drop(one_store.detach(&id));
    let resumed_id = id.clone();
    let mut resuming = tokio::spawn(async move {
        let resumed = resume(&one, &one_store, &resumed_id).await;
        append_turn(&resumed, 2);
        let flushed = one_store.flush(&resumed_id).await;
        (one, one_store, flushed)
    });
    // The resumed copy's first write, if it comes before the old lease ends (up to 1 s).
    let wrote = tokio::time::timeout(Duration::from_secs(1), backend.wait_for_appends(appends + 1)).await;
    backend.hold_lease_ends(false);
    let (one, _one_store, flushed) = (&mut resuming).await.unwrap();
    flushed.unwrap();
    let held = h.place.open().positions(std::slice::from_ref(&id), &cancel).unwrap();
    assert_eq!(
        held.first().map(|position| position.held),
        Some(Some(true)),
        "the resumed copy's lease outlived the dropped release's (its first write came before that \
         lease ended: {})",
        wrote.is_ok()
    );
    one.close().await.unwrap();
}

/// A backend that panics while it writes a batch leaves that batch to the next write: the flush
/// that met the panic fails, and the next one stores everything, in order (before, the batch was
/// lost with the panic and every later write started past the stored log's end).
pub(crate) async fn a_write_that_panics_leaves_its_batch_to_the_next_one(h: &Cx<'_>) {
    let id = SessionId::from("s-panicked");
    let (backend, persistence, store, session) = host_with_one_turn(h, &id).await;
    backend.panic_next_append();
    append_turn(&session, 2);
    assert!(store.flush(&id).await.is_err(), "the flush that met the panic fails");
    append_turn(&session, 3);
    store.flush(&id).await.expect("the next flush stores the batch the panic left, then the rest");
    let stored = persistence.read_from(&id, 0, &CancellationToken::new()).await.unwrap().events;
    assert_eq!(stored[..], session.events()[..]);
    persistence.close().await.unwrap();
}

/// A copy published from the whole stored log after another host moved that log on (here, past
/// what this host loaded) continues it: its first write is not fenced, and the log ends with its
/// events. Runs where two opens are two writers of one store ([`Place::shared_writers`]).
pub(crate) async fn a_copy_of_the_whole_log_continues_it_after_another_host_moved_it_on(h: &Cx<'_>) {
    if !has_shared_writers(h) {
        return;
    }
    let cancel = CancellationToken::new();
    let id = SessionId::from("s-continued");
    let (_, one, one_store, _) = host_with_one_turn(h, &id).await;
    drop(one_store.detach(&id));
    one.release(&id, &cancel).await.unwrap();
    // Loaded here (tracked, with nobody owning it), then moved on by another host.
    one.load(&id, &cancel).await.unwrap();
    let two = moved_on_by_another_host(h, &id).await;
    // Published here from the whole stored log, read cold, and written on.
    let ours = published_from_the_store(&two, &one_store, &id).await;
    append_turn(&ours, 3);
    one_store.flush(&id).await.expect("a copy of the whole log continues it");
    assert!(one.fence(&id).is_none(), "not fenced");
    assert_eq!(two.read_from(&id, 0, &cancel).await.unwrap().events[..], ours.events()[..]);
    one.close().await.unwrap();
    two.close().await.unwrap();
}

/// A fence that a detached copy's retire meets after a newer copy took the id is not that newer
/// copy's: once the newer copy wrote and let go, its release answers no `Fenced`. Runs where two
/// opens are two writers of one store ([`Place::shared_writers`]).
pub(crate) async fn a_fence_an_old_copy_met_is_not_reported_by_the_next_copys_release(h: &Cx<'_>) {
    if !has_shared_writers(h) {
        return;
    }
    let cancel = CancellationToken::new();
    let id = SessionId::from("s-old-fence");
    let (backend, one, one_store, old) = host_with_one_turn(h, &id).await;
    // Another host moves the log on.
    let two = moved_on_by_another_host(h, &id).await;
    // The old copy's next write is held, and the copy detached: its retire waits on that write.
    backend.hold_appends(true);
    append_turn(&old, 2);
    drop(one_store.detach(&id));
    backend.wait_for_held(1).await;
    drop(old);
    // A newer copy takes the id meanwhile, from the whole stored log.
    let newer = published_from_the_store(&two, &one_store, &id).await;
    // The old write meets the fence, and the old retire ends.
    backend.hold_appends(false);
    tokio::time::sleep(Duration::from_millis(300)).await;
    append_turn(&newer, 3);
    one_store.flush(&id).await.unwrap();
    drop(one_store.detach(&id));
    one.release(&id, &cancel).await.expect("the newer copy's release reports no fence of the old copy's");
    assert_eq!(two.read_from(&id, 0, &cancel).await.unwrap().events[..], newer.events()[..]);
    one.close().await.unwrap();
    two.close().await.unwrap();
}
