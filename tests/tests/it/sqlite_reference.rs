//! The subagent catalog over the reference's own SQLite database
//! (`crates/session-persistence-sqlite/test_data/reference-sqlite`): `list_children` and
//! `list_descendants` of every id answer exactly as the reference answered (`expected.json`, key
//! order included), opened immutable, read-only and read-write. The rest of that database's
//! answers are the SQLite crate's own tests.

use std::{
    fs,
    os::unix::fs::PermissionsExt,
    path::{Path, PathBuf},
    sync::Arc,
};

use session_core::{ManualClock, SessionId, SessionStore};
use session_persistence::{Coordinator, CoordinatorConfig, SessionPersistence};
use session_persistence_sqlite::{Access, SqliteConfig, SqliteStore};
use session_projection::ProjectionRegistry;
use subagent::{SubagentRuntime, SubagentServices};
use tokio_util::sync::CancellationToken;

fn fixture_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../crates/session-persistence-sqlite/test_data/reference-sqlite")
}

/// A private copy of the reference's database (the path rules refuse a 0644 file in a shared
/// directory): a 0700 directory holding the file at 0600. Lives as long as the returned guard.
fn fixture_copy() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let private = dir.path().join("private");
    fs::create_dir(&private).unwrap();
    fs::set_permissions(&private, fs::Permissions::from_mode(0o700)).unwrap();
    let path = private.join("sessions.db");
    fs::copy(fixture_dir().join("sessions.db"), &path).unwrap();
    fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).unwrap();
    (dir, path)
}

#[test]
fn the_reference_database_lists_subagents_as_the_reference_does() {
    let (_guard, path) = fixture_copy();
    let text = fs::read_to_string(fixture_dir().join("expected.json")).unwrap();
    let expected: serde_json::Value = serde_json::from_str(&text).unwrap();
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let cancel = CancellationToken::new();
    for access in [Access::Immutable, Access::ReadOnly, Access::ReadWrite] {
        let label = format!("{access:?}");
        let store = SqliteStore::open(SqliteConfig::file(&path).with_access(access)).unwrap();
        let coordinator = Coordinator::new(Arc::new(store), CoordinatorConfig::default()).unwrap();
        let persistence: Arc<dyn SessionPersistence> = Arc::new(coordinator.clone());
        for (method, answers) in
            [("listChildren", &expected["listChildren"]), ("listDescendants", &expected["listDescendants"])]
        {
            for (parent, want) in answers.as_object().unwrap() {
                // A fresh catalog per call, as the reference's answers were taken.
                let catalog = SubagentRuntime::new(SubagentServices {
                    sessions: Some(Arc::new(SessionStore::new(Arc::new(ManualClock::new(0))))),
                    projections: Some(ProjectionRegistry::new()),
                    persistence: Some(persistence.clone()),
                    cache: None,
                })
                .unwrap();
                let parent = SessionId::from(parent.as_str());
                let rows = runtime.block_on(async {
                    if method == "listChildren" {
                        serde_json::to_string(&catalog.list_children(&parent, &cancel).await.unwrap()).unwrap()
                    } else {
                        serde_json::to_string(&catalog.list_descendants(&parent, &cancel).await.unwrap()).unwrap()
                    }
                });
                assert_eq!(
                    rows,
                    serde_json::to_string(want).unwrap(),
                    "{label}: {method}({parent}), key order included"
                );
            }
        }
        runtime.block_on(coordinator.close()).unwrap();
    }
}
