//! The PostgreSQL checkpoint store beyond the test kit's checkpoint-store contract (which
//! `contract` runs, damaging rows in SQL): the projection cache over a PostgreSQL session store
//! with its checkpoints in the same schema, reading its tail by seek.

use std::sync::Arc;

use serde_json::json;
use session_core::{JsonData, ManualClock, SessionEvent, SessionHeader, SessionId};
use session_persistence::{Coordinator, CoordinatorConfig, CountingBackend, SessionPersistence};
use session_persistence_postgres::PgCheckpointStore;
use session_projection::{ClientView, ProjectionRegistry, ProjectionUnit, UnitError};
use session_projection_cache::{CacheConfig, CheckpointStore, ProjectionCache};
use tokio_util::sync::CancellationToken;

use crate::TestSchema;

/// Counts `turn/end` events.
struct Turns;

impl ProjectionUnit for Turns {
    type State = u64;

    fn key(&self) -> &str {
        "test/turns"
    }

    fn state_version(&self) -> u64 {
        1
    }

    fn init(&self) -> u64 {
        0
    }

    fn apply(&self, state: &u64, event: &SessionEvent) -> Result<Option<u64>, UnitError> {
        Ok((event.kind == "turn/end").then_some(state + 1))
    }
}

impl ClientView for Turns {
    type View = u64;

    fn view(&self, state: &u64) -> u64 {
        *state
    }
}

fn turn(seq0: u64) -> Vec<Arc<SessionEvent>> {
    let data = |value| JsonData::from_value(&value).unwrap();
    vec![
        Arc::new(SessionEvent::new("turn/start", seq0, 1, data(json!({"turn": 1})))),
        Arc::new(SessionEvent::new("turn/end", seq0 + 1, 2, data(json!({"turn": 1, "reason": {"kind": "completed"}})))),
    ]
}

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
            coordinator.append(&id, turn(n * 2), &cancel).await.unwrap();
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
        let stored = tokio::task::block_in_place(|| records.get(&id).unwrap());
        assert!(stored.is_some(), "the cold read wrote its record back");
        for n in 50..60 {
            coordinator.append(&id, turn(n * 2), &cancel).await.unwrap();
        }
        // Another store over the same schema (as another gateway would have) serves the record.
        let other = Arc::new(tokio::task::block_in_place(|| schema.open()));
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
