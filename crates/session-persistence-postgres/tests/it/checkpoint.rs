//! The PostgreSQL checkpoint store beyond the test kit's checkpoint-store contract (which
//! `contract` runs, damaging rows in SQL): the projection cache over a PostgreSQL session store
//! with its checkpoints in the same schema, reading its tail by seek.

use std::sync::Arc;

use projection_testkit::{Turns, turn_events};
use serde_json::json;
use session_core::{ManualClock, SessionHeader, SessionId};
use session_persistence::{Coordinator, CoordinatorConfig, CountingBackend, SessionPersistence};
use session_persistence_postgres::PgCheckpointStore;
use session_projection::ProjectionRegistry;
use session_projection_cache::{CacheConfig, CheckpointStore, ProjectionCache};
use tokio_util::sync::CancellationToken;

use crate::TestSchema;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
}

#[test]
fn the_cache_keeps_its_records_in_the_store_schema_and_reads_tails_by_seek() {
    let Some(schema) = TestSchema::new() else { return };
    let id = SessionId::from("s-cached");
    let store = Arc::new(schema.open());
    runtime().block_on(async {
        let backend = Arc::new(CountingBackend::new(store.clone()));
        let coordinator = Arc::new(Coordinator::new(backend.clone(), CoordinatorConfig::default()).unwrap());
        let cancel = CancellationToken::new();
        coordinator.create(SessionHeader::new(id.clone(), 1), &cancel).await.unwrap();
        for n in 0..50 {
            coordinator.append(&id, turn_events(n * 2), &cancel).await.unwrap();
        }
        let records = Arc::new(PgCheckpointStore::new(store.clone()));
        let registry = ProjectionRegistry::new();
        let _unit = registry.register(Turns).unwrap();
        let cache = |records: Arc<PgCheckpointStore>| {
            ProjectionCache::new(
                registry.clone(),
                coordinator.clone() as Arc<dyn SessionPersistence>,
                records,
                Arc::new(ManualClock::new(0)),
                CacheConfig::new(100, 5_000).unwrap(),
            )
            .unwrap()
        };
        let snapshot = cache(records.clone()).cold_snapshot(&id, &cancel).await.unwrap();
        assert_eq!((snapshot.as_of_seq, snapshot.values["test/turns"].clone()), (99, json!(50)));
        let stored = records.get(&id).unwrap();
        assert!(stored.is_some(), "the cold read wrote its record back");
        for n in 50..60 {
            coordinator.append(&id, turn_events(n * 2), &cancel).await.unwrap();
        }
        // Another store over the same schema (as another gateway would have) serves the record.
        let other = Arc::new(schema.open());
        let tail_cache = cache(Arc::new(PgCheckpointStore::new(other)));
        let scans_before = backend.scans();
        let snapshot = tail_cache.cold_snapshot(&id, &cancel).await.unwrap();
        assert_eq!((snapshot.as_of_seq, snapshot.values["test/turns"].clone()), (119, json!(60)));
        let stats = tail_cache.stats();
        assert_eq!((stats.tail_reads, stats.full_reads), (1, 0), "the record's tail was read, not the log");
        assert_eq!(backend.scans() - scans_before, 1);
    });
    assert_eq!(schema.value("SELECT count(*) FROM {s}.checkpoints").as_deref(), Some("1"));
}
