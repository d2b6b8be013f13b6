//! Following a shared database file (issue 24): a watch on one store handle sees another handle's
//! (and another process's) creations, appends and lease releases, with the next seq; it skips its
//! own handle's writes; positions and `held` match the file; `created_since` filters; a dropped
//! watch calls its sink no more, even when the drop comes from inside the sink.

use std::{
    io::{BufRead, BufReader, Write},
    process::{Command, Stdio},
    sync::{
        Arc,
        mpsc::{self, Receiver},
    },
    time::Duration,
};

use serde_json::{Value, json};
use session_core::{JsonData, SessionEvent, SessionHeader, SessionId};
use session_persistence::{Backend, ChangeKind, SessionPosition, SharedChangeSink, StoreChange, Watch, WatchOptions};
use session_persistence_sqlite::{Access, SqliteConfig, SqliteStore};
use tokio_util::sync::CancellationToken;

use crate::{id, open};

/// How long a test waits for one signal before it fails: far beyond any poll, so a slow machine
/// only makes the test slower. Nothing is timed.
const SIGNAL_WAIT: Duration = Duration::from_secs(60);

fn options() -> WatchOptions {
    WatchOptions {
        poll_interval: Duration::from_millis(10),
        reconnect_min: Duration::from_millis(10),
        reconnect_max: Duration::from_millis(100),
    }
}

/// A sink that queues every signal on a channel.
fn channel_sink() -> (SharedChangeSink, Receiver<StoreChange>) {
    let (send, receive) = mpsc::channel();
    let send = parking_lot::Mutex::new(send);
    let sink: SharedChangeSink = Arc::new(move |change| {
        let _ = send.lock().send(change);
    });
    (sink, receive)
}

/// The next signal, waited for within [`SIGNAL_WAIT`].
fn next(signals: &Receiver<StoreChange>) -> StoreChange {
    signals.recv_timeout(SIGNAL_WAIT).expect("a signal within the wait")
}

fn session(name: &str, kind: ChangeKind, next_seq: Option<u64>) -> StoreChange {
    StoreChange::Session { id: id(name), kind, next_seq }
}

fn event(kind: &str, seq: u64, data: Value) -> Arc<SessionEvent> {
    Arc::new(SessionEvent::new(kind, seq, 1_000 + seq as i64, JsonData::from_value(&data).unwrap()))
}

/// `n` events from `from` on: a turn's start, then steps.
fn events(from: u64, n: u64) -> Vec<Arc<SessionEvent>> {
    (from..from + n)
        .map(|seq| {
            if seq == 0 {
                event("turn/start", seq, json!({"turn": 1}))
            } else {
                event("step/start", seq, json!({"turn": 1, "step": seq}))
            }
        })
        .collect()
}

/// `n` text deltas of one block from `from` on: one packed row.
fn deltas(from: u64, n: u64) -> Vec<Arc<SessionEvent>> {
    (from..from + n)
        .map(|seq| {
            let chunk = json!({"type": "text-delta", "index": 0, "text": format!("t{seq}")});
            event("assistant/chunk", seq, json!({"turn": 1, "step": 1, "chunk": chunk}))
        })
        .collect()
}

fn header(name: &str, created_at: u64) -> SessionHeader {
    SessionHeader::new(id(name), created_at)
}

fn position(name: &str, next_seq: u64, held: bool) -> SessionPosition {
    SessionPosition { id: id(name), next_seq, held: Some(held) }
}

fn created_ids(store: &SqliteStore, since_ms: u64) -> Vec<String> {
    let listing = store.created_since(since_ms, &CancellationToken::new()).unwrap();
    listing.headers.iter().map(|stored| stored.header.id.to_string()).collect()
}

#[test]
fn a_watch_follows_another_handles_writes_and_releases_and_skips_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sessions.db");
    let (watcher, writer) = (open(&path), open(&path));
    let cancel = CancellationToken::new();
    let (sink, signals) = channel_sink();
    let held_sink = Arc::clone(&sink);
    let watch = watcher.watch(&options(), sink).unwrap().expect("a database file has a change signal");
    assert_eq!(next(&signals), StoreChange::Sweep, "a sweep once the poller is listening");

    // The other handle leases the session (as a live writer does before its first write), then
    // creates it, appends, and appends a packed run: each seen with the next seq it left.
    let s = header("s", 1_000);
    writer.lease(&s.id).unwrap();
    writer.append_batch(&s, &events(0, 2), false).unwrap();
    assert_eq!(next(&signals), session("s", ChangeKind::Created, Some(2)));
    writer.append_batch(&s, &events(2, 3), true).unwrap();
    assert_eq!(next(&signals), session("s", ChangeKind::Appended, Some(5)));
    writer.append_batch(&s, &deltas(5, 5), true).unwrap();
    assert_eq!(next(&signals), session("s", ChangeKind::Appended, Some(10)), "a packed tail counts its members");

    assert_eq!(watcher.positions(&[id("s"), id("absent")], &cancel).unwrap(), [position("s", 10, true)]);
    writer.end_lease(&s.id);
    assert_eq!(next(&signals), session("s", ChangeKind::Released, None));
    assert_eq!(watcher.positions(&[id("s")], &cancel).unwrap(), [position("s", 10, false)]);

    // This handle's own session is not signalled: the other handle's later one comes next
    // (sessions changed in one poll are signalled in id order, and "own" sorts first).
    let own = header("own", 3_000);
    watcher.lease(&own.id).unwrap();
    watcher.append_batch(&own, &events(0, 1), false).unwrap();
    watcher.append_batch(&own, &events(1, 1), true).unwrap();
    let t = header("t", 5_000);
    writer.append_batch(&t, &events(0, 3), false).unwrap();
    assert_eq!(next(&signals), session("t", ChangeKind::Created, Some(3)));

    assert_eq!(created_ids(&watcher, 0), ["own", "s", "t"]);
    assert_eq!(created_ids(&watcher, 3_000), ["own", "t"]);
    assert_eq!(created_ids(&watcher, 5_001), Vec::<String>::new());

    // Once the watch is dropped, its thread has let go of the sink: no call can come.
    drop(watch);
    assert_eq!(Arc::strong_count(&held_sink), 1, "the poller dropped its sink");
    writer.append_batch(&t, &events(3, 1), true).unwrap();
    drop(held_sink);
    let left: Vec<StoreChange> = signals.iter().collect();
    assert!(left.is_empty(), "signals after the drop: {left:?}");
}

#[test]
fn a_watch_dropped_from_inside_its_sink_stops_without_waiting_for_itself() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sessions.db");
    let (watcher, writer) = (open(&path), open(&path));
    let slot: Arc<parking_lot::Mutex<Option<Watch>>> = Arc::default();
    let (send, receive) = mpsc::channel();
    let send = parking_lot::Mutex::new(send);
    let slot_in_sink = Arc::clone(&slot);
    let sink: SharedChangeSink = Arc::new(move |change| {
        // The first signal after the watch is in its slot drops it, here on the poller's thread.
        let watch = slot_in_sink.lock().take();
        let dropped_here = watch.is_some();
        drop(watch);
        let _ = send.lock().send((change, dropped_here));
    });
    *slot.lock() = watcher.watch(&options(), sink).unwrap();
    writer.append_batch(&header("d", 1_000), &events(0, 1), false).unwrap();

    // The channel closes when the poller ends and drops its sink: nothing comes after the drop.
    let mut seen = Vec::new();
    loop {
        match receive.recv_timeout(SIGNAL_WAIT) {
            Ok(signal) => seen.push(signal),
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
            Err(mpsc::RecvTimeoutError::Timeout) => panic!("the poller did not stop: {seen:?}"),
        }
    }
    let dropped: Vec<bool> = seen.iter().map(|(_, dropped_here)| *dropped_here).collect();
    assert_eq!(dropped.last(), Some(&true), "the last signal is the one whose call dropped the watch: {seen:?}");
    assert_eq!(dropped.iter().filter(|dropped_here| **dropped_here).count(), 1, "{seen:?}");
}

#[test]
fn a_second_handle_seen_by_a_read_only_watcher_and_memory_and_immutable_opens_have_no_signal() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sessions.db");
    let writer = open(&path);
    let reader = SqliteStore::open(SqliteConfig::file(&path).with_access(Access::ReadOnly)).unwrap();
    let (sink, signals) = channel_sink();
    let watch = reader.watch(&options(), sink).unwrap().expect("a read-only open follows the file too");
    assert_eq!(next(&signals), StoreChange::Sweep);
    writer.append_batch(&header("r", 1_000), &events(0, 4), false).unwrap();
    assert_eq!(next(&signals), session("r", ChangeKind::Created, Some(4)));

    // The last connection to close folds the write-ahead log into the file, as an immutable open needs.
    drop((watch, reader, writer));

    let memory = SqliteStore::open(SqliteConfig::memory()).unwrap();
    assert!(memory.watch(&options(), channel_sink().0).unwrap().is_none(), "no one else writes :memory:");
    let memory_positions = memory.positions(&[id("r")], &CancellationToken::new()).unwrap();
    assert!(memory_positions.is_empty());
    let immutable = SqliteStore::open(SqliteConfig::file(&path).with_access(Access::Immutable)).unwrap();
    assert!(immutable.watch(&options(), channel_sink().0).unwrap().is_none(), "an immutable file never changes");
}

#[test]
fn positions_read_many_sessions_in_chunks_and_stop_before_a_torn_last_row() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sessions.db");
    let store = open(&path);
    store.append_batch(&header("torn", 1_000), &events(0, 2), false).unwrap();
    store.append_batch(&header("packed", 1_000), &deltas(0, 4), false).unwrap();
    let mut connection = rusqlite::Connection::open(&path).unwrap();
    let transaction = connection.transaction().unwrap();
    // A packed row that does not decode, as a crash mid-row leaves it: the readable log ends before it.
    transaction
        .execute(
            "INSERT INTO events (session_id, seq, type, time, data, ignorable) VALUES ('torn', 2, 'text-chunks', 5, '{}', 0)",
            [],
        )
        .unwrap();
    // More sessions than one query binds, each with one event.
    let n_many = 1_234;
    for idx in 0..n_many {
        let name = format!("m{idx:04}");
        transaction
            .execute(
                "INSERT INTO sessions (id, version, created_at, incarnation, revision) VALUES (?1, 0, 7, ?2, 1)",
                rusqlite::params![name, uuid::Uuid::new_v4().to_string()],
            )
            .unwrap();
        transaction
            .execute(
                "INSERT INTO events (session_id, seq, type, time, data) VALUES (?1, 0, 'turn/start', 7, '{\"turn\":1}')",
                [&name],
            )
            .unwrap();
    }
    transaction.commit().unwrap();
    // Another handle's lease is held; this handle's own is unknown (its lock file's probe cannot
    // see past it), not another writer's.
    let other = open(&path);
    other.lease(&id("m0500")).unwrap();
    store.lease(&id("m0600")).unwrap();

    let mut ids: Vec<SessionId> = (0..n_many).map(|idx| id(&format!("m{idx:04}"))).collect();
    ids.extend([id("torn"), id("packed"), id("absent")]);
    let mut positions = store.positions(&ids, &CancellationToken::new()).unwrap();
    positions.sort_by(|a, b| a.id.cmp(&b.id));
    assert_eq!(positions.len(), n_many + 2, "the absent id is left out");
    for found in &positions[..n_many] {
        let held = match found.id.as_str() {
            "m0600" => None,
            other => Some(other == "m0500"),
        };
        assert_eq!(found, &SessionPosition { held, ..position(found.id.as_str(), 1, false) });
    }
    assert_eq!(positions[n_many..], [position("packed", 4, false), position("torn", 2, false)]);
    assert_eq!(created_ids(&store, 8), ["packed", "torn"], "created_since filters on created_at");
}

const CHILD_DB: &str = "SESSION_SQLITE_WATCH_CHILD_DB";

/// Run as a child by [`a_watch_follows_a_writer_in_another_process`]: a writer of the database
/// named by the environment, one command per line on stdin (`create`, `append`), answering each
/// with `CHILD: ok` once it is committed. It holds session `p`'s lease until it is killed.
#[test]
fn watch_child_writer() {
    let Some(path) = std::env::var_os(CHILD_DB) else { return };
    let store = open(std::path::Path::new(&path));
    let p = header("p", 1_000);
    store.lease(&p.id).unwrap();
    for line in std::io::stdin().lock().lines() {
        match line.unwrap().as_str() {
            "create" => store.append_batch(&p, &events(0, 3), false).unwrap(),
            "append" => store.append_batch(&p, &events(3, 2), true).unwrap(),
            other => panic!("unknown command {other:?}"),
        }
        println!("CHILD: ok");
    }
}

#[test]
fn a_watch_follows_a_writer_in_another_process() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sessions.db");
    let watcher = open(&path);
    let (sink, signals) = channel_sink();
    let _watch = watcher.watch(&options(), sink).unwrap().unwrap();
    assert_eq!(next(&signals), StoreChange::Sweep);

    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "watch::watch_child_writer", "--nocapture", "--test-threads=1"])
        .env(CHILD_DB, &path)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut commands = child.stdin.take().unwrap();
    let mut answers = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut run = |command: &str| {
        writeln!(commands, "{command}").unwrap();
        let answered = answers.by_ref().map(Result::unwrap).any(|line| line.contains("CHILD: ok"));
        assert!(answered, "the child answered {command}");
    };
    run("create");
    assert_eq!(next(&signals), session("p", ChangeKind::Created, Some(3)));
    run("append");
    assert_eq!(next(&signals), session("p", ChangeKind::Appended, Some(5)));
    assert_eq!(
        watcher.positions(&[id("p")], &CancellationToken::new()).unwrap(),
        [position("p", 5, true)],
        "the other process holds the lease"
    );

    // A writer that dies lets go of its lease with its process.
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(next(&signals), session("p", ChangeKind::Released, None));
    assert_eq!(watcher.positions(&[id("p")], &CancellationToken::new()).unwrap(), [position("p", 5, false)]);
}
