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
