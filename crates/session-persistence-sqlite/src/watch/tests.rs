//! Unit tests of the change poller, driven step by step without its thread: the backoff and the
//! sweep after recovery, a sink that panics, the sweep for a change too wide to report session by
//! session, and the handle's own writes and releases left out.

use std::{path::Path, sync::Arc, time::Duration};

use parking_lot::Mutex;
use session_core::{JsonData, SessionEvent, SessionHeader, SessionId};
use session_persistence::{Backend, ChangeKind, StoreChange, WatchOptions};

use super::{MAX_SIGNALLED, OwnWrites, Poller, WatchSpec};
use crate::{Access, JournalMode, SqliteConfig, SqliteStore};

fn spec(path: &Path) -> WatchSpec {
    WatchSpec {
        file: path.to_owned(),
        shown: path.to_owned(),
        access: Access::ReadWrite,
        journal_mode: JournalMode::Wal,
        busy_timeout: Duration::from_secs(5),
    }
}

fn options() -> WatchOptions {
    WatchOptions {
        poll_interval: Duration::from_millis(7),
        reconnect_min: Duration::from_millis(10),
        reconnect_max: Duration::from_millis(35),
    }
}

/// A poller whose sink collects what it is told.
fn poller(path: &Path) -> (Poller, Arc<Mutex<Vec<StoreChange>>>) {
    poller_for(path, Arc::default())
}

/// A poller of the handle whose own writes `own` records.
fn poller_for(path: &Path, own: Arc<OwnWrites>) -> (Poller, Arc<Mutex<Vec<StoreChange>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&seen);
    let poller = Poller::detached(spec(path), options(), Arc::new(move |change| sink.lock().push(change)), own);
    (poller, seen)
}

fn taken(seen: &Mutex<Vec<StoreChange>>) -> Vec<StoreChange> {
    std::mem::take(&mut *seen.lock())
}

fn first_batch(store: &SqliteStore, id: &str) {
    let header = SessionHeader::new(SessionId::from(id), 1_000);
    let event = SessionEvent::new("turn/start", 0, 10, JsonData::from_text(r#"{"turn":1}"#).unwrap());
    store.append_batch(&header, &[Arc::new(event)], false).unwrap();
}

#[test]
fn a_poller_that_cannot_open_backs_off_doubling_and_sweeps_once_it_can() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sessions.db");
    let store = SqliteStore::open(SqliteConfig::file(&path)).unwrap();
    first_batch(&store, "before");
    let away = dir.path().join("away.db");
    std::fs::rename(&path, &away).unwrap();

    let (mut poller, seen) = poller(&path);
    // Doubling from reconnect_min to reconnect_max, each wait jittered into its second half.
    for backoff in [10, 20, 35, 35].map(Duration::from_millis) {
        let wait = poller.step();
        assert!(wait >= backoff / 2 && wait <= backoff, "a wait of {wait:?} for a backoff of {backoff:?}");
    }
    assert!(!poller.is_connected());
    assert!(taken(&seen).is_empty(), "nothing is signalled before the connection opens");

    std::fs::rename(&away, &path).unwrap();
    assert_eq!(poller.step(), Duration::from_millis(7), "a poll that succeeds waits one interval");
    assert!(poller.is_connected());
    assert_eq!(taken(&seen), [StoreChange::Sweep]);

    // The baseline holds what was there before: only what comes after is reported.
    first_batch(&store, "after");
    poller.step();
    assert_eq!(
        taken(&seen),
        [StoreChange::Session { id: SessionId::from("after"), kind: ChangeKind::Created, next_seq: Some(1) }]
    );
}

#[test]
fn a_poll_that_fails_drops_its_connection_backs_off_and_sweeps_after_reopening() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sessions.db");
    let store = SqliteStore::open(SqliteConfig::file(&path)).unwrap();
    let (mut poller, seen) = poller(&path);
    poller.step();
    assert_eq!(taken(&seen), [StoreChange::Sweep]);

    // A connection on which the next pass's query fails (no `sessions` table), and a counter that
    // makes the poll run that pass.
    poller.connection = Some(rusqlite::Connection::open_in_memory().unwrap());
    poller.data_version = -1;
    let wait = poller.step();
    assert!(
        wait >= Duration::from_millis(5) && wait <= Duration::from_millis(10),
        "the first retry waits reconnect_min, jittered: {wait:?}"
    );
    assert!(!poller.is_connected(), "the failed connection is dropped");
    assert!(taken(&seen).is_empty());

    first_batch(&store, "meanwhile");
    assert_eq!(poller.step(), Duration::from_millis(7));
    assert_eq!(taken(&seen), [StoreChange::Sweep], "a write while the poll was down is the sweep's to find");
    poller.step();
    assert!(taken(&seen).is_empty(), "and is not reported again");
}

#[test]
fn more_sessions_changed_in_one_poll_than_are_signalled_one_by_one_are_a_sweep() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sessions.db");
    drop(SqliteStore::open(SqliteConfig::file(&path)).unwrap());
    let (mut poller, seen) = poller(&path);
    poller.step();
    assert_eq!(taken(&seen), [StoreChange::Sweep]);

    let mut connection = rusqlite::Connection::open(&path).unwrap();
    let transaction = connection.transaction().unwrap();
    for idx in 0..=MAX_SIGNALLED {
        transaction
            .execute(
                "INSERT INTO sessions (id, version, created_at, incarnation, revision) VALUES (?1, 0, 1000, ?2, 1)",
                rusqlite::params![format!("s{idx}"), uuid::Uuid::new_v4().to_string()],
            )
            .unwrap();
    }
    transaction.commit().unwrap();
    poller.step();
    assert_eq!(taken(&seen), [StoreChange::Sweep]);

    // One more is one signal again.
    connection.execute("UPDATE sessions SET revision = revision + 1 WHERE id = 's7'", []).unwrap();
    poller.step();
    assert_eq!(
        taken(&seen),
        [StoreChange::Session { id: SessionId::from("s7"), kind: ChangeKind::Appended, next_seq: Some(0) }]
    );
}

fn append(store: &SqliteStore, id: &str, seq: u64) {
    let header = SessionHeader::new(SessionId::from(id), 1_000);
    let event = SessionEvent::new("step/start", seq, 10, JsonData::from_text(r#"{"turn":1,"step":1}"#).unwrap());
    store.append_batch(&header, &[Arc::new(event)], true).unwrap();
}

#[test]
fn the_handles_own_commits_and_releases_are_left_out_and_another_holders_release_is_not() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sessions.db");
    let (mine, other) =
        (SqliteStore::open(SqliteConfig::file(&path)).unwrap(), SqliteStore::open(SqliteConfig::file(&path)).unwrap());
    let (mut poller, seen) = poller_for(&path, mine.own_writes());
    poller.step();
    assert_eq!(taken(&seen), [StoreChange::Sweep]);
    let x = SessionId::from("x");
    let appended =
        |next_seq| StoreChange::Session { id: x.clone(), kind: ChangeKind::Appended, next_seq: Some(next_seq) };

    // This handle's own lease and writes: nothing.
    mine.lease(&x).unwrap();
    first_batch(&mine, "x");
    append(&mine, "x", 1);
    poller.step();
    assert!(taken(&seen).is_empty());
    // The other handle's write is signalled, and the poll finds the lease (this handle's) held.
    append(&other, "x", 2);
    poller.step();
    assert_eq!(taken(&seen), [appended(3)]);
    // This handle lets go: its own release, not signalled.
    mine.end_lease(&x);
    poller.step();
    assert!(taken(&seen).is_empty());

    // Both hold it; this handle lets go first (still held: nothing), then the other (Released).
    mine.lease(&x).unwrap();
    other.lease(&x).unwrap();
    append(&other, "x", 3);
    poller.step();
    assert_eq!(taken(&seen), [appended(4)]);
    mine.end_lease(&x);
    poller.step();
    assert!(taken(&seen).is_empty());
    other.end_lease(&x);
    poller.step();
    assert_eq!(taken(&seen), [StoreChange::Session { id: x.clone(), kind: ChangeKind::Released, next_seq: None }]);

    // Within one poll: this handle's commits around the other's are still the other's change.
    append(&mine, "x", 4);
    append(&other, "x", 5);
    append(&mine, "x", 6);
    poller.step();
    assert_eq!(taken(&seen), [appended(7)]);
    // And this handle's later commits alone are its own again.
    append(&mine, "x", 7);
    append(&mine, "x", 8);
    poller.step();
    assert!(taken(&seen).is_empty());
}

#[test]
fn a_sink_that_panics_loses_one_change_and_the_poller_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sessions.db");
    let store = SqliteStore::open(SqliteConfig::file(&path)).unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&seen);
    let calls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = Arc::clone(&calls);
    let changed = move |change: StoreChange| {
        if counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0 {
            panic!("the sink refuses its first change");
        }
        sink.lock().push(change);
    };
    let mut poller = Poller::detached(spec(&path), options(), Arc::new(changed), Arc::default());
    assert_eq!(poller.step(), Duration::from_millis(7), "the sweep's panic is not the poll's failure");
    assert!(poller.is_connected());
    assert!(taken(&seen).is_empty(), "the first change (the sweep) was lost to the panic");

    first_batch(&store, "after");
    poller.step();
    assert_eq!(
        taken(&seen),
        [StoreChange::Session { id: SessionId::from("after"), kind: ChangeKind::Created, next_seq: Some(1) }],
        "the next change is delivered"
    );
}
