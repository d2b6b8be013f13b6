//! Writer leases and side files: a repair from another store (as from another process) leaves a
//! session that a live writer leases alone and names the holder, repairs an unheld one; the
//! lease ends with its holder; a FIFO where a lock file belongs is an error at once; a session's
//! event rows without a `sessions` row are reported by the survey on that session's own line.

use std::{path::Path, sync::Arc, time::Duration};

use session_core::{JsonData, SessionEvent, SessionHeader, SessionId};
use session_persistence::{Backend, Coordinator, CoordinatorConfig, PersistenceError, SessionPersistence};
use session_persistence_sqlite::{SqliteConfig, SqliteStore};
use tokio_util::sync::CancellationToken;

fn event(kind: &str, seq: u64, data: &str) -> Arc<SessionEvent> {
    Arc::new(SessionEvent::new(kind, seq, 10 + seq as i64, JsonData::from_text(data).unwrap()))
}

/// A session whose one event opens a turn, as a crash mid-turn (or a live writer) leaves it.
fn open_turn(store: &SqliteStore, id: &str) -> SessionHeader {
    let header = SessionHeader::new(SessionId::from(id), 1_000);
    store.append_batch(&header, &[event("turn/start", 0, r#"{"turn":1}"#)], false).unwrap();
    header
}

fn closer() -> SessionEvent {
    SessionEvent::new("turn/end", 1, 20, JsonData::from_text(r#"{"turn":1,"reason":{"kind":"interrupted"}}"#).unwrap())
}

fn n_events(store: &SqliteStore, id: &str) -> usize {
    let mut sink = session_persistence::CollectSink::default();
    store.scan(&SessionId::from(id), &CancellationToken::new(), &mut sink).unwrap().unwrap();
    sink.events.len()
}

#[test]
fn a_repair_leaves_a_leased_session_alone_and_repairs_an_unheld_one() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sessions.db");
    let writer = SqliteStore::open(SqliteConfig::file(&path)).unwrap();
    let held = open_turn(&writer, "held");
    let torn = open_turn(&writer, "unheld");
    writer.lease(&held.id).unwrap();
    writer.lease(&held.id).unwrap();

    // Another store handle of the same file: a lock of another open file, as another process has.
    let repairer = SqliteStore::open(SqliteConfig::file(&path)).unwrap();
    let error = repairer.commit_repair(&held, None, &[closer()]).unwrap_err();
    let PersistenceError::Held { id, holder } = &error else { panic!("{error:?}") };
    assert_eq!(id, &held.id);
    assert!(holder.contains(&format!("pid {}", std::process::id())), "{holder}");
    assert!(error.to_string().contains("is held live by a writer"), "{error}");
    assert_eq!(n_events(&writer, "held"), 1, "the held turn is left open");

    // The coordinator's load (what `verify --repair` runs) refuses it the same way, and repairs
    // the unheld one.
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let coordinator = Coordinator::new(Arc::new(repairer), CoordinatorConfig::default()).unwrap();
    let cancel = CancellationToken::new();
    let loaded = runtime.block_on(coordinator.load(&held.id, &cancel));
    assert!(matches!(loaded, Err(PersistenceError::Held { .. })), "{loaded:?}");
    let repaired = runtime.block_on(coordinator.load(&torn.id, &cancel)).unwrap();
    assert!(repaired.events.len() > 1, "the unheld turn is closed");
    assert_eq!(n_events(&writer, "unheld"), repaired.events.len());

    // The writer's own repair is its own to make; once it lets go, anyone may repair.
    writer.end_lease(&held.id);
    assert_eq!(
        std::fs::read_dir(dir.path().join("sessions.db.leases")).unwrap().count(),
        0,
        "the last holder removes its file"
    );
    let repaired = runtime.block_on(coordinator.load(&held.id, &cancel)).unwrap();
    assert!(repaired.events.len() > 1);
}

#[test]
fn a_lease_ends_with_its_holder() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sessions.db");
    let writer = SqliteStore::open(SqliteConfig::file(&path)).unwrap();
    let held = open_turn(&writer, "held");
    writer.lease(&held.id).unwrap();
    let second = SqliteStore::open(SqliteConfig::file(&path)).unwrap();
    second.lease(&held.id).unwrap();
    drop(writer);
    let repairer = SqliteStore::open(SqliteConfig::file(&path)).unwrap();
    assert!(
        matches!(repairer.commit_repair(&held, None, &[closer()]), Err(PersistenceError::Held { .. })),
        "a second holder still holds it"
    );
    drop(second);
    repairer.commit_repair(&held, None, &[closer()]).unwrap();
    assert_eq!(n_events(&repairer, "held"), 2);
}

fn mkfifo(path: &Path) {
    let status = std::process::Command::new("mkfifo").arg(path).status().unwrap();
    assert!(status.success());
}

/// Runs `work` on a thread of its own and waits for it within a bound far beyond any open: a
/// FIFO opened for reading would block forever, and the test must fail instead of hanging.
fn bounded<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> T {
    let (send, receive) = std::sync::mpsc::channel();
    std::thread::spawn(move || send.send(work()));
    receive.recv_timeout(Duration::from_secs(60)).expect("the call blocked on the FIFO")
}

#[test]
fn a_fifo_where_a_lock_file_belongs_is_an_error_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sessions.db");
    drop(SqliteStore::open(SqliteConfig::file(&path)).unwrap());
    let lock = dir.path().join("sessions.db.writer-lock");
    std::fs::remove_file(&lock).unwrap();
    mkfifo(&lock);

    let reading = path.clone();
    let error = bounded(move || SqliteStore::open_for_reading(&reading).unwrap().writer_active().unwrap_err());
    assert!(matches!(&error, PersistenceError::Io { path, .. } if path == &lock), "{error:?}");
    assert!(error.to_string().contains("a FIFO, not a regular file"), "{error}");
    let writing = path.clone();
    let error = bounded(move || SqliteStore::open(SqliteConfig::file(&writing)).unwrap_err());
    assert!(error.to_string().contains("a FIFO, not a regular file"), "{error}");

    // A lease file is held to the same rule.
    std::fs::remove_file(&lock).unwrap();
    let store = SqliteStore::open(SqliteConfig::file(&path)).unwrap();
    let leases = dir.path().join("sessions.db.leases");
    std::fs::create_dir(&leases).unwrap();
    mkfifo(&leases.join(format!("{:016x}", session_persistence::lease::lease_key(&["s"]))));
    let error = bounded(move || store.lease(&SessionId::from("s")).unwrap_err());
    assert!(error.to_string().contains("a FIFO, not a regular file"), "{error}");
}

#[test]
fn event_rows_without_a_sessions_row_are_reported_on_their_own_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sessions.db");
    let store = SqliteStore::open(SqliteConfig::file(&path)).unwrap();
    open_turn(&store, "kept");
    open_turn(&store, "orphan");
    rusqlite::Connection::open(&path)
        .unwrap()
        .execute_batch("PRAGMA foreign_keys = OFF; DELETE FROM sessions WHERE id = 'orphan'")
        .unwrap();

    let survey = store.survey(&CancellationToken::new()).unwrap();
    let ids: Vec<&str> = survey.iter().map(|entry| entry.id.as_str()).collect();
    assert_eq!(ids, ["kept", "orphan"]);
    let error = survey[1].header.as_ref().unwrap_err();
    assert!(matches!(error, PersistenceError::Corrupt { .. }), "{error:?}");
    assert!(error.to_string().contains("1 event row(s) (seqs up to 0) but no sessions row"), "{error}");
    assert!(survey[0].header.is_ok());
    // What a writer would trip on: the id cannot be created again.
    let header = SessionHeader::new(SessionId::from("orphan"), 2_000);
    assert!(store.append_batch(&header, &[event("turn/start", 0, r#"{"turn":1}"#)], false).is_err());
}
