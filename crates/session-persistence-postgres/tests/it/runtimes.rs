//! Calls from async code: every public call of `PgStore` (the `Backend` methods, `open`, `setup`),
//! of `PgCheckpointStore` and of the projection cache over them, made inside a multi-thread and a
//! current-thread Tokio runtime (from the test's body and from a task spawned on the runtime, a
//! worker thread on a multi-thread one), answers what it answers on a plain thread: none panics
//! ("Cannot start a runtime from within a runtime") or hangs.

use std::sync::Arc;

use projection_testkit::{Turns, turn_events};
use serde_json::json;
use session_core::{ManualClock, SessionHeader, SessionId};
use session_persistence::{
    Backend, CollectSink, Coordinator, CoordinatorConfig, PageRequest, SessionPersistence, StoredHeader,
};
use session_persistence_postgres::{PgCheckpointStore, PgStore, SetupOutcome};
use session_projection::ProjectionRegistry;
use session_projection_cache::{CacheConfig, CheckpointRecord, CheckpointStore, ProjectionCache, RecordIdentity};
use tokio_util::sync::CancellationToken;

use crate::TestSchema;

fn ids(headers: &[StoredHeader]) -> Vec<&str> {
    headers.iter().map(|stored| stored.header.id.as_str()).collect()
}

/// The synchronous `Backend` calls, straight from async code.
fn check_backend(store: &PgStore, tag: &str) {
    let cancel = CancellationToken::new();
    let (parent, child) = (SessionId::from(format!("{tag}-parent")), SessionId::from(format!("{tag}-child")));
    let parent_header = SessionHeader::new(parent.clone(), 1);
    store.append_batch(&parent_header, &turn_events(0), false).unwrap();
    store.append_batch(&parent_header, &turn_events(2), true).unwrap();
    let mut child_header = SessionHeader::new(child.clone(), 2);
    child_header.parent_session = Some(parent.clone());
    child_header.delegation_depth = 1;
    store.append_batch(&child_header, &turn_events(0), false).unwrap();
    // The writer lease lives on a connection of its own.
    store.lease(&parent).unwrap();
    store.end_lease(&parent);

    let mut sink = CollectSink::default();
    let outcome = store.scan(&parent, &cancel, &mut sink).unwrap().expect("the parent is stored");
    assert_eq!(outcome.n_events, 4);
    assert_eq!(sink.events.iter().map(|event| event.seq).collect::<Vec<_>>(), [0, 1, 2, 3]);
    let mut tail = CollectSink::default();
    store.scan_from(&parent, 2, &cancel, &mut tail).unwrap().expect("the parent is stored");
    assert_eq!(tail.events.iter().map(|event| event.seq).collect::<Vec<_>>(), [2, 3]);
    assert_eq!(store.revision(&parent).unwrap(), Some(outcome.revision));
    assert_eq!(store.revision(&SessionId::from(format!("{tag}-nobody"))).unwrap(), None);
    assert_eq!(store.header(&child, &cancel).unwrap().map(|stored| stored.header.created_at), Some(2));
    store.commit_repair(&child_header, None, &[]).unwrap();

    let mut listed = store.list(&cancel).unwrap();
    listed.headers.retain(|stored| stored.header.id.as_str().starts_with(tag));
    assert_eq!(ids(&listed.headers), [child.as_str(), parent.as_str()]);
    assert_eq!(ids(&store.list_children(&parent, &cancel).unwrap().headers), [child.as_str(), parent.as_str()]);
    let page = store.list_page(&PageRequest { after: None, limit: 100, ..PageRequest::default() }, &cancel);
    let page = page.unwrap();
    assert!(page.headers.iter().any(|stored| stored.header.id == parent), "{:?}", ids(&page.headers));
}

/// The synchronous `CheckpointStore` calls, straight from async code.
fn check_checkpoints(records: &PgCheckpointStore, tag: &str) {
    let id = SessionId::from(format!("{tag}-records"));
    assert_eq!(records.get(&id).unwrap(), None);
    let identity = RecordIdentity::of(&SessionHeader::new(id.clone(), 1));
    let record = CheckpointRecord { identity, as_of_seq: -1, rows: Default::default(), failures: Default::default() };
    records.put(&id, &record).unwrap();
    assert_eq!(records.get(&id).unwrap(), Some(record));
    assert!(records.remove(&id).unwrap());
    assert!(!records.remove(&id).unwrap());
    assert_eq!(records.get(&id).unwrap(), None);
}

/// The projection cache over the PostgreSQL session store and checkpoint store: a cold read (which
/// writes its record back), then the stored values with zero log reads.
async fn check_cache(store: Arc<PgStore>, tag: &str) {
    let cancel = CancellationToken::new();
    let coordinator = Arc::new(Coordinator::new(store.clone(), CoordinatorConfig::default()).unwrap());
    let id = SessionId::from(format!("{tag}-cached"));
    let header = SessionHeader::new(id.clone(), 1);
    coordinator.create(header.clone(), &cancel).await.unwrap();
    for n in 0..3 {
        coordinator.append(&id, turn_events(n * 2), &cancel).await.unwrap();
    }
    let registry = ProjectionRegistry::new();
    let _unit = registry.register(Turns).unwrap();
    let cache = ProjectionCache::new(
        registry,
        coordinator as Arc<dyn SessionPersistence>,
        Arc::new(PgCheckpointStore::new(store)),
        Arc::new(ManualClock::new(0)),
        CacheConfig::new(100, 5_000).unwrap(),
    )
    .unwrap();
    assert_eq!(cache.cached_snapshot(&header).await, None, "no record yet");
    let cold = cache.cold_snapshot(&id, &cancel).await.unwrap();
    assert_eq!((cold.as_of_seq, cold.values["test/turns"].clone()), (5, json!(3)));
    let reads = cache.stats().log_reads();
    let cached = cache.cached_snapshot(&header).await.expect("the cold read wrote its record back");
    assert_eq!(cached.values, cold.values);
    let batch = cache.cached_snapshots(vec![Arc::new(SessionHeader::new(id.clone(), 2)), Arc::new(header)]).await;
    assert_eq!(batch, vec![None, Some(cached)], "another lifetime is not served");
    assert_eq!(cache.stats().log_reads(), reads, "cached reads read no log");
}

async fn check_on_this_runtime(flavor: &str) {
    let Some(schema) = TestSchema::bare() else { return };
    let (_, outcome) = PgStore::setup(schema.config()).unwrap();
    assert_eq!(outcome, SetupOutcome::Created);
    let store = Arc::new(PgStore::open(schema.config()).unwrap());
    check_backend(&store, &format!("{flavor}-body"));
    check_checkpoints(&PgCheckpointStore::new(store.clone()), &format!("{flavor}-body"));
    check_cache(store.clone(), &format!("{flavor}-body")).await;
    // The same from a task: on a multi-thread runtime it runs on a worker thread.
    let tag = format!("{flavor}-task");
    tokio::spawn(async move {
        check_backend(&store, &tag);
        check_checkpoints(&PgCheckpointStore::new(store.clone()), &tag);
        check_cache(store, &tag).await;
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_call_works_on_a_multi_thread_runtime() {
    check_on_this_runtime("multi").await;
}

#[tokio::test(flavor = "current_thread")]
async fn every_call_works_on_a_current_thread_runtime() {
    check_on_this_runtime("current").await;
}

/// A coordinator's appends to a tracked session (a live session's write-behind batches) wait on
/// no thread of the blocking pool: the store writes them as tasks of its own runtime
/// (`Backend::append_batch_async`). With the runtime's one blocking thread held by another call
/// until the appends are done, they still complete; a batch too large for that path goes
/// through the blocking pool, once it is free, and answers the same.
#[test]
fn appends_to_a_tracked_session_wait_on_no_blocking_thread() {
    let Some(schema) = TestSchema::new() else { return };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .max_blocking_threads(1)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let cancel = CancellationToken::new();
        let store = Arc::new(schema.open());
        let coordinator = Coordinator::new(store.clone(), CoordinatorConfig::default()).unwrap();
        let id = SessionId::from("unblocked");
        coordinator.create(SessionHeader::new(id.clone(), 1), &cancel).await.unwrap();
        coordinator.append(&id, turn_events(0), &cancel).await.unwrap();
        // The pool's one thread, held until the appends below are done (or 30 s).
        let (release, held) = std::sync::mpsc::channel::<()>();
        let holder = tokio::task::spawn_blocking(move || held.recv_timeout(std::time::Duration::from_secs(30)).is_ok());
        for n in 1..4 {
            let appended = tokio::time::timeout(
                std::time::Duration::from_secs(10),
                coordinator.append(&id, turn_events(n * 2), &cancel),
            )
            .await;
            assert!(matches!(appended, Ok(Ok(()))), "append {n} with the blocking pool held: {appended:?}");
        }
        release.send(()).unwrap();
        assert!(holder.await.unwrap(), "the blocking thread was released by the test, not by its timeout");
        // 65 events: the blocking pool's path, now free.
        let large: Vec<_> = (0..33).flat_map(|n| turn_events(8 + n * 2)).take(65).collect();
        coordinator.append(&id, large, &cancel).await.unwrap();
        let mut sink = CollectSink::default();
        let outcome = store.scan(&id, &cancel, &mut sink).unwrap().expect("stored");
        assert_eq!(outcome.n_events, 73);
        let seqs: Vec<u64> = sink.events.iter().map(|event| event.seq).collect();
        assert_eq!(seqs, (0..73).collect::<Vec<u64>>());
    });
}

/// A store whose last handle is its own append task: the write commits, and the store (its
/// runtime included) is dropped on that runtime's own thread without a panic (one there would
/// reach the awaiting caller). The task is held at the session row's lock, which another
/// connection holds, until the caller's handle is gone.
#[test]
fn a_store_dropped_by_its_own_append_task_goes_quietly() {
    let Some(schema) = TestSchema::new() else { return };
    let name = format!("pg-last-handle-{}", schema.name());
    let url = format!("{}?application_name={name}", crate::server_url().unwrap());
    let config = session_persistence_postgres::PgConfig::from_url(&url).unwrap().with_schema(schema.name()).unwrap();
    let poll = |query: &str| {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while schema.value(query).as_deref() != Some("1") {
            assert!(std::time::Instant::now() < deadline, "{query} never held");
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    };
    let id = SessionId::from("orphaned");
    let header = Arc::new(SessionHeader::new(id.clone(), 1));
    let store = Arc::new(PgStore::open(&config).unwrap());
    store.append_batch(&header, &turn_events(0), false).unwrap();
    std::thread::scope(|scope| {
        let holder = scope.spawn(|| {
            schema.sql(
                "BEGIN; SELECT next_seq FROM {s}.sessions WHERE id = 'orphaned' FOR UPDATE; SELECT pg_sleep(3); COMMIT",
            )
        });
        poll("SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'PgSleep' AND query LIKE '%{s}.sessions%'");
        let write = Arc::clone(&store).append_batch_async(&header, &turn_events(2), true).expect("a small batch");
        poll(&format!(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = '{name}' AND wait_event_type = 'Lock'"
        ));
        let handle = Arc::downgrade(&store);
        drop(store);
        assert!(handle.strong_count() > 0, "the waiting task holds the store");
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(write).unwrap();
        assert_eq!(handle.strong_count(), 0, "the task dropped the store's last handle");
        holder.join().unwrap();
    });
    let mut sink = CollectSink::default();
    let outcome = schema.open().scan(&id, &CancellationToken::new(), &mut sink).unwrap().expect("stored");
    assert_eq!(outcome.n_events, 4);
}
