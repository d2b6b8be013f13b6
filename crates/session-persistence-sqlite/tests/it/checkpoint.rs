//! The SQLite checkpoint store beyond the test kit's checkpoint-store contract (which `contract`
//! runs): a foreign file refused, and the projection cache over a SQLite session store with its
//! checkpoints beside it, reading its tail by seek.

use std::{fs, os::unix::fs::PermissionsExt, sync::Arc};

use projection_testkit::{Turns, turn_events};
use serde_json::json;
use session_core::{ManualClock, SessionHeader, SessionId};
use session_persistence::{Coordinator, CoordinatorConfig, CountingBackend, SessionPersistence};
use session_persistence_sqlite::{SqliteCheckpointStore, SqliteConfig, SqliteStore, Target};
use session_projection::ProjectionRegistry;
use session_projection_cache::{CacheConfig, CheckpointStore, ProjectionCache};
use tokio_util::sync::CancellationToken;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
}

#[test]
fn the_cache_keeps_its_records_beside_the_session_database_and_reads_tails_by_seek() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sessions.db");
    let id = SessionId::from("s-cached");
    runtime().block_on(async {
        let backend = Arc::new(CountingBackend::new(Arc::new(SqliteStore::open(SqliteConfig::file(&path)).unwrap())));
        let coordinator = Arc::new(Coordinator::new(backend.clone(), CoordinatorConfig::default()).unwrap());
        let cancel = CancellationToken::new();
        coordinator.create(SessionHeader::new(id.clone(), 1), &cancel).await.unwrap();
        for n in 0..50 {
            coordinator.append(&id, turn_events(n * 2), &cancel).await.unwrap();
        }
        let records_path = SqliteCheckpointStore::beside(&path);
        let records = Arc::new(SqliteCheckpointStore::open(&Target::File(records_path.clone())).unwrap());
        let registry = ProjectionRegistry::new();
        let _unit = registry.register(Turns).unwrap();
        let cache = |records: Arc<SqliteCheckpointStore>| {
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
        assert!(records.get(&id).unwrap().is_some(), "the cold read wrote its record back");
        for n in 50..60 {
            coordinator.append(&id, turn_events(n * 2), &cancel).await.unwrap();
        }
        let reopened = Arc::new(SqliteCheckpointStore::open(&Target::File(records_path.clone())).unwrap());
        let tail_cache = cache(reopened);
        let snapshot = tail_cache.cold_snapshot(&id, &cancel).await.unwrap();
        assert_eq!((snapshot.as_of_seq, snapshot.values["test/turns"].clone()), (119, json!(60)));
        let stats = tail_cache.stats();
        assert_eq!((stats.tail_reads, stats.full_reads), (1, 0), "the record's tail was read, not the log");
        assert_eq!(fs::metadata(&records_path).unwrap().permissions().mode() & 0o777, 0o600);
    });
    // The session database still holds only the reference's schema objects.
    drop(SqliteStore::open(SqliteConfig::file(&path)).unwrap());
}

#[test]
fn a_foreign_database_is_never_taken_as_a_checkpoint_store() {
    let dir = tempfile::tempdir().unwrap();
    let sessions = dir.path().join("sessions.db");
    drop(SqliteStore::open(SqliteConfig::file(&sessions)).unwrap());
    let error = SqliteCheckpointStore::open(&Target::File(sessions.clone())).unwrap_err();
    assert!(error.to_string().contains("is not a projection cache database"), "{error}");
    drop(SqliteStore::open(SqliteConfig::file(&sessions)).unwrap());
}

/// A checkpoint database that cannot be opened is moved aside under a name with the stamp (numbered when taken), and a fresh one opens in its place; a
/// healthy one is opened as it is.
#[test]
fn a_damaged_checkpoint_database_is_moved_aside_and_recreated() {
    let dir = tempfile::tempdir().unwrap();
    fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o700)).unwrap();
    let path = SqliteCheckpointStore::beside(&dir.path().join("sessions.db"));
    let target = Target::File(path.clone());
    let side = |path: &std::path::Path, suffix: &str| {
        let mut name = path.as_os_str().to_owned();
        name.push(suffix);
        std::path::PathBuf::from(name)
    };
    let damage = || {
        fs::write(&path, b"this is not a SQLite database, it only sits where one should").unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).unwrap();
    };
    damage();
    assert!(SqliteCheckpointStore::open(&target).is_err(), "the damaged file does not open as it is");

    let (store, moved) = SqliteCheckpointStore::open_or_move_aside(&target, "20261202T003000Z").unwrap();
    let moved = moved.expect("the damaged file was moved aside");
    assert_eq!(moved.from, path);
    assert_eq!(moved.to, side(&path, ".damaged-20261202T003000Z"));
    assert!(!moved.error.to_string().is_empty());
    assert_eq!(fs::read(&moved.to).unwrap(), b"this is not a SQLite database, it only sits where one should");
    assert_eq!(store.get(&SessionId::from("s")).unwrap(), None, "the fresh store is empty and works");
    drop(store);

    let (store, moved) = SqliteCheckpointStore::open_or_move_aside(&target, "20261202T003000Z").unwrap();
    assert!(moved.is_none(), "a healthy database is opened as it is");
    drop(store);

    damage();
    let (_store, moved) = SqliteCheckpointStore::open_or_move_aside(&target, "20261202T003000Z").unwrap();
    assert_eq!(moved.unwrap().to, side(&path, ".damaged-20261202T003000Z-1"), "a taken name is not reused");
}
