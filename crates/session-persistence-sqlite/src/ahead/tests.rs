//! A read on two threads gives what the read on one gives: the same events, torn tail, errors
//! and outcome, for whole logs and seek reads, damaged or not, missing or unreadable sessions; and
//! it stops cleanly when its sink fails, its read is cancelled or its helper fails.

use std::{path::Path, sync::Arc};

use serde_json::{Value, json};
use session_core::{JsonData, SESSION_FORMAT_VERSION, SessionEvent, SessionHeader, SessionId};
use session_persistence::{Backend, CollectSink, PersistenceError, ScanSink};
use tokio_util::sync::CancellationToken;

use super::{
    AHEAD_MIN_ROWS, BATCH_ROWS, BATCHES_IN_FLIGHT, FAIL_AFTER_ROWS, READS_AHEAD, REFUSE_HELPER, RowBatch, read_log,
};
use crate::{
    SqliteConfig, SqliteStore,
    codec::{Columns, ROW_COLUMN_COUNT, ROW_COLUMNS},
    scan::ScanContext,
};

const ID: &str = "s-ahead";

/// Events per turn: a start, a step of 26 text deltas (packed into runs), the step's end and
/// the turn's end.
const TURN: u64 = 30;

fn event(kind: &str, seq: u64, data: Value) -> Arc<SessionEvent> {
    Arc::new(SessionEvent::new(kind, seq, 100 + seq as i64, JsonData::from_value(&data).unwrap()))
}

fn turn(number: u64, closed: bool) -> Vec<Arc<SessionEvent>> {
    let first = (number - 1) * TURN;
    let mut events = vec![
        event("turn/start", first, json!({"turn": number})),
        event("step/start", first + 1, json!({"turn": number, "step": 1})),
    ];
    for k in 0..26 {
        let chunk = json!({"type": "text-delta", "index": 0, "text": format!("word {k} of turn {number} ")});
        events.push(event("assistant/chunk", first + 2 + k, json!({"turn": number, "step": 1, "chunk": chunk})));
    }
    if closed {
        events.push(event("step/end", first + 28, json!({"turn": number, "step": 1})));
        events.push(event("turn/end", first + 29, json!({"turn": number, "reason": {"kind": "completed"}})));
    }
    events
}

/// A database holding 100 turns, the last one open (2,998 events in about 500 rows, one append
/// per turn), and a raw connection to damage it with.
fn written() -> (tempfile::TempDir, std::path::PathBuf, rusqlite::Connection) {
    written_with((1..=100).map(|number| turn(number, number < 100)).collect())
}

/// A database holding `appends` (each appended at once), and a raw connection to it.
fn written_with(appends: Vec<Vec<Arc<SessionEvent>>>) -> (tempfile::TempDir, std::path::PathBuf, rusqlite::Connection) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sessions.db");
    let store = SqliteStore::open(SqliteConfig::file(&path)).unwrap();
    let header = SessionHeader::new(SessionId::from(ID), 1);
    for (at, events) in appends.iter().enumerate() {
        store.append_batch(&header, events, at > 0).unwrap();
    }
    let connection = rusqlite::Connection::open(&path).unwrap();
    (dir, path, connection)
}

/// 2,000 turns of four scalar rows each, every tenth turn's start carrying 3 KiB of padding:
/// more rows than the helper may have copied ahead, and batches cut short by their bytes.
fn scalar_turns() -> Vec<Vec<Arc<SessionEvent>>> {
    (0..2_000u64)
        .map(|turn| {
            let first = turn * 4;
            let pad = if turn % 10 == 0 { "p".repeat(3 * 1024) } else { String::new() };
            vec![
                event("turn/start", first, json!({"turn": turn + 1, "pad": pad})),
                event("step/start", first + 1, json!({"turn": turn + 1, "step": 1})),
                event("step/end", first + 2, json!({"turn": turn + 1, "step": 1})),
                event("turn/end", first + 3, json!({"turn": turn + 1, "reason": {"kind": "completed"}})),
            ]
        })
        .collect()
}

/// What a read gave: its events and (seq of its torn tail, events, bytes), or its error's text.
type Answer = Result<(Vec<SessionEvent>, Option<u64>, u64, u64), String>;

/// The read on the calling thread only: the store's scan into a sink that allows no helper.
fn read_on_one_thread(path: &Path, from_seq: u64) -> Answer {
    let store = SqliteStore::open(SqliteConfig::file(path)).unwrap();
    let mut sink = CollectSink::default();
    assert!(!sink.read_ahead());
    let outcome = store
        .scan_from(&SessionId::from(ID), from_seq, &CancellationToken::new(), &mut sink)
        .map_err(|error| format!("{error:?}"))?
        .expect("stored");
    Ok((sink.events, outcome.torn.map(|torn| torn.truncate_to), outcome.n_events, outcome.n_bytes))
}

/// The read on two threads, on a read connection of its own: `Ok(None)` for no such session.
fn read_on_two_threads(
    path: &Path,
    id: &str,
    from_seq: u64,
    cancel: &CancellationToken,
    sink: &mut dyn ScanSink,
) -> Result<Option<(Option<u64>, u64, u64)>, String> {
    let store = SqliteStore::open(SqliteConfig::file(path)).unwrap();
    let mut connection = store.open_reader(path).unwrap();
    let id = SessionId::from(id);
    let ctx = ScanContext { id: &id, shown: path };
    let read = read_log(&mut connection, ctx, from_seq, cancel, sink).expect("the helper thread starts");
    assert!(connection.is_autocommit(), "the read's transaction is over, whatever its end");
    let read = read.map_err(|error| format!("{error:?}"))?;
    Ok(read.map(|(_, scan)| (scan.torn_from.filter(|_| from_seq == 0), scan.n_events, scan.n_bytes)))
}

fn check_same(path: &Path, from_seq: u64, case: &str) {
    let one = read_on_one_thread(path, from_seq);
    let mut sink = CollectSink::default();
    let two = read_on_two_threads(path, ID, from_seq, &CancellationToken::new(), &mut sink)
        .map(|read| read.expect("stored"))
        .map(|(torn, n_events, n_bytes)| (sink.events, torn, n_events, n_bytes));
    assert_eq!(two, one, "{case}, from {from_seq}");
}

/// Sets a test hook of this thread for as long as it lives.
struct Hooked(&'static std::thread::LocalKey<std::cell::Cell<Option<usize>>>);

impl Hooked {
    fn fail_after_rows(rows: usize) -> Hooked {
        FAIL_AFTER_ROWS.with(|hook| hook.set(Some(rows)));
        Hooked(&FAIL_AFTER_ROWS)
    }
}

impl Drop for Hooked {
    fn drop(&mut self) {
        self.0.with(|hook| hook.set(None));
    }
}

/// Refuses this thread's helpers for as long as it lives.
struct Refused;

impl Refused {
    fn new() -> Refused {
        REFUSE_HELPER.with(|refuse| refuse.set(true));
        Refused
    }
}

impl Drop for Refused {
    fn drop(&mut self) {
        REFUSE_HELPER.with(|refuse| refuse.set(false));
    }
}

const FROM: [u64; 6] = [0, 1, 5, 1_000, 2_002, 2_990];

#[test]
fn a_long_read_on_two_threads_gives_what_one_thread_gives() {
    let (_dir, path, connection) = written();
    let packed: i64 =
        connection.query_row("SELECT COUNT(*) FROM events WHERE ignorable = 0", [], |row| row.get(0)).unwrap();
    assert!(packed >= 100, "the deltas are packed into runs ({packed} packed rows)");
    let whole = read_on_one_thread(&path, 0).unwrap();
    assert_eq!((whole.0.len(), whole.1), (2_998, None));
    for from_seq in FROM {
        check_same(&path, from_seq, "undamaged");
    }
    let cases = [
        ("a torn tail", "UPDATE events SET data = '{' WHERE seq = 2971"),
        ("a committed row that does not decode", "UPDATE events SET data = '{' WHERE seq = 1500"),
        ("a committed row missing", "DELETE FROM events WHERE seq = 1501"),
        ("a packed row that does not decode", "UPDATE events SET data = '{}' WHERE ignorable = 0 AND seq = 1922"),
        ("invalid columns behind a torn row", "UPDATE events SET data = 42 WHERE seq = 2972"),
        ("a blob that is not a zstd frame", "UPDATE events SET data = X'00' WHERE seq = 2008"),
    ];
    for (case, sql) in cases {
        let (_dir, path, connection) = written();
        assert!(connection.execute(sql, []).unwrap() > 0, "{sql}");
        if case.starts_with("invalid columns") {
            connection.execute("UPDATE events SET data = '{' WHERE seq = 2970", []).unwrap();
        }
        assert!(read_on_one_thread(&path, 0) != Ok(whole.clone()), "{case} changes the read");
        for from_seq in FROM {
            check_same(&path, from_seq, case);
        }
    }
}

/// More rows than the helper may copy ahead, some batches cut short by their bytes: the same
/// answer, and a sink that fails at once or part way stops a helper blocked on a full channel.
#[test]
fn a_read_longer_than_the_batches_in_flight_gives_what_one_thread_gives() {
    let (_dir, path, connection) = written_with(scalar_turns());
    let rows: i64 = connection.query_row("SELECT COUNT(*) FROM events", [], |row| row.get(0)).unwrap();
    assert!(rows as usize > (BATCHES_IN_FLIGHT + 2) * BATCH_ROWS * 4, "{rows} rows");
    for from_seq in [0, 3, 4_000, 6_977] {
        check_same(&path, from_seq, "scalar rows");
    }
    assert!(connection.execute("UPDATE events SET data = '{' WHERE seq = 7_000", []).unwrap() > 0);
    for from_seq in [0, 6_999, 7_001] {
        check_same(&path, from_seq, "a committed row that does not decode");
    }
    for fail_at in [1, 5_000] {
        let mut failing = Stopping { seen: 0, fail_at, cancel: None };
        let error = read_on_two_threads(&path, ID, 0, &CancellationToken::new(), &mut failing).unwrap_err();
        assert_eq!(error, format!("{:?}", PersistenceError::invalid_input("the sink is full")));
        assert_eq!(failing.seen, fail_at, "no event after the sink's error");
    }
}

/// A helper that fails part way fails the read with its own error, even after a committed row
/// that did not decode (one thread meets the failing step before the end of the rows, where the
/// corruption would be reported).
#[test]
fn a_helper_that_fails_part_way_fails_the_read_with_its_error() {
    let (_dir, path, connection) = written_with(scalar_turns());
    assert!(connection.execute("UPDATE events SET data = '{' WHERE seq = 100", []).unwrap() > 0);
    let corrupt = read_on_two_threads(&path, ID, 0, &CancellationToken::new(), &mut CollectSink::default());
    assert!(corrupt.unwrap_err().contains("invalid committed physical row at seq 100"));
    for rows in [0, 1, 3_000, 7_999] {
        let hooked = Hooked::fail_after_rows(rows);
        let error = read_on_two_threads(&path, ID, 0, &CancellationToken::new(), &mut CollectSink::default());
        drop(hooked);
        assert!(error.unwrap_err().contains("a failing disk (test)"), "after {rows} rows");
    }
}

/// A missing session, one whose `sessions` row does not decode, and one of a newer format read
/// as on one thread, without reading their rows.
#[test]
fn sessions_that_cannot_be_read_answer_as_on_one_thread() {
    let (_dir, path, connection) = written_with(scalar_turns());
    // Orphan rows of a session not stored.
    connection.execute_batch("PRAGMA foreign_keys = OFF").unwrap();
    connection
        .execute(
            "INSERT INTO events SELECT 's-orphan', seq, type, time, data, source_event_seqs, surface_op, ignorable \
             FROM events WHERE session_id = ?1",
            [ID],
        )
        .unwrap();
    let mut sink = CollectSink::default();
    assert_eq!(read_on_two_threads(&path, "s-orphan", 0, &CancellationToken::new(), &mut sink), Ok(None));
    assert!(sink.events.is_empty());
    let store = SqliteStore::open(SqliteConfig::file(&path)).unwrap();
    let cancel = CancellationToken::new();
    assert!(store.scan(&SessionId::from("s-orphan"), &cancel, &mut CollectSink::default()).unwrap().is_none());
    for (case, sql, message) in [
        ("a newer format", "UPDATE sessions SET version = 99", "log format v99"),
        ("a row that does not decode", "UPDATE sessions SET cwd = 'relative'", "stored session cwd must be absolute"),
    ] {
        connection.execute(sql, []).unwrap();
        let one = read_on_one_thread(&path, 0).map(|_| ()).unwrap_err();
        assert!(one.contains(message), "{case}: {one}");
        let mut sink = CollectSink::default();
        let two = read_on_two_threads(&path, ID, 0, &CancellationToken::new(), &mut sink).map(|_| ()).unwrap_err();
        assert_eq!(two, one, "{case}");
        assert!(sink.events.is_empty(), "{case}");
        connection.execute(&format!("UPDATE sessions SET version = {SESSION_FORMAT_VERSION}, cwd = NULL"), []).unwrap();
    }
}

/// A [`CollectSink`] that lets the backend read ahead.
#[derive(Default)]
struct ReadAhead(CollectSink);

impl ScanSink for ReadAhead {
    fn header(&mut self, header: &Arc<SessionHeader>) -> session_persistence::Result<()> {
        self.0.header(header)
    }

    fn event(&mut self, event: Arc<SessionEvent>) -> session_persistence::Result<()> {
        self.0.event(event)
    }

    fn read_ahead(&self) -> bool {
        true
    }
}

#[test]
fn a_store_reads_a_long_log_on_two_threads_when_its_sink_allows_it() {
    let (_dir, path, _connection) = written_with(scalar_turns());
    let id = SessionId::from(ID);
    let store = SqliteStore::open(SqliteConfig::file(&path)).unwrap();
    let short = SessionHeader::new(SessionId::from("s-short"), 1);
    store.append_batch(&short, &turn(1, true), false).unwrap();
    let reads = || READS_AHEAD.with(std::cell::Cell::get);
    let cancel = CancellationToken::new();
    let before = reads();
    let mut sink = ReadAhead::default();
    let outcome = store.scan(&id, &cancel, &mut sink).unwrap().unwrap();
    assert_eq!(reads(), before + 1, "the long log is read on two threads");
    assert_eq!((sink.0.events, outcome.n_events), (read_on_one_thread(&path, 0).unwrap().0, 8_000));
    let mut sink = ReadAhead::default();
    store.scan_from(&id, 8_000 - AHEAD_MIN_ROWS, &cancel, &mut sink).unwrap().unwrap();
    assert_eq!((reads(), sink.0.events.len()), (before + 2, 1_024), "a read of 1,024 rows takes the helper");
    let mut sink = ReadAhead::default();
    store.scan_from(&id, 8_001 - AHEAD_MIN_ROWS, &cancel, &mut sink).unwrap().unwrap();
    assert_eq!((reads(), sink.0.events.len()), (before + 2, 1_023), "a shorter one stays on one thread");
    let mut sink = ReadAhead::default();
    store.scan(&short.id, &cancel, &mut sink).unwrap().unwrap();
    assert_eq!((reads(), sink.0.events.len()), (before + 2, 30));
    let mut sink = CollectSink::default();
    store.scan(&id, &cancel, &mut sink).unwrap().unwrap();
    assert_eq!(reads(), before + 2, "a sink that allows no helper gets none");
    assert!(store.scan(&SessionId::from("s-missing"), &cancel, &mut ReadAhead::default()).unwrap().is_none());
    // A helper the system will not start is no failure: the read runs on the calling thread.
    let refused = Refused::new();
    let mut sink = ReadAhead::default();
    let outcome = store.scan(&id, &cancel, &mut sink);
    drop(refused);
    assert_eq!(outcome.unwrap().unwrap().n_events, 8_000);
    assert_eq!((reads(), sink.0.events.len()), (before + 2, 8_000));
}

/// Fails at its `fail_at`th event, or cancels its read there.
struct Stopping {
    seen: usize,
    fail_at: usize,
    cancel: Option<CancellationToken>,
}

impl ScanSink for Stopping {
    fn event(&mut self, _event: Arc<SessionEvent>) -> session_persistence::Result<()> {
        self.seen += 1;
        if self.seen == self.fail_at {
            match &self.cancel {
                Some(cancel) => cancel.cancel(),
                None => return Err(PersistenceError::invalid_input("the sink is full")),
            }
        }
        Ok(())
    }
}

#[test]
fn a_read_on_two_threads_ends_with_its_sinks_error_or_its_cancellation() {
    let (_dir, path, _connection) = written();
    let mut failing = Stopping { seen: 0, fail_at: 700, cancel: None };
    let error = read_on_two_threads(&path, ID, 0, &CancellationToken::new(), &mut failing).unwrap_err();
    assert_eq!(error, format!("{:?}", PersistenceError::invalid_input("the sink is full")));
    assert_eq!(failing.seen, 700, "no event after the sink's error");
    // The decoder looks at the token after each batch: the read ends after the first.
    let cancel = CancellationToken::new();
    let mut cancelling = Stopping { seen: 0, fail_at: 10, cancel: Some(cancel.clone()) };
    let error = read_on_two_threads(&path, ID, 0, &cancel, &mut cancelling).unwrap_err();
    assert_eq!(error, format!("{:?}", PersistenceError::Cancelled));
    let first_batch: i64 = {
        let connection = rusqlite::Connection::open(&path).unwrap();
        connection
            .query_row(
                "SELECT max(seq) FROM (SELECT seq FROM events ORDER BY seq LIMIT ?1)",
                [BATCH_ROWS as i64 + 1],
                |row| row.get(0),
            )
            .unwrap()
    };
    assert_eq!(cancelling.seen as i64, first_batch, "the events of the first batch's rows, no more");
}

/// A row copied into a batch reads back as the statement gave it, whatever its values.
#[test]
fn copied_rows_read_back_as_the_statement_gave_them() {
    let connection = rusqlite::Connection::open_in_memory().unwrap();
    connection
        .execute_batch(&format!(
            "CREATE TABLE events ({ROW_COLUMNS}); \
             INSERT INTO events VALUES (0, 'turn/start', -5, '{{\"turn\":1}}', NULL, NULL, NULL); \
             INSERT INTO events VALUES (1, X'FF00', 7.5, X'0102', X'8001', '\"append\"', 1); \
             INSERT INTO events VALUES (2, '', 0, '', X'', 'é', 0);"
        ))
        .unwrap();
    let mut statement = connection.prepare(&format!("SELECT {ROW_COLUMNS} FROM events ORDER BY seq")).unwrap();
    let mut rows = statement.query([]).unwrap();
    let mut batch = RowBatch::default();
    let mut expected = Vec::new();
    while let Some(row) = rows.next().unwrap() {
        batch.push(row).unwrap();
        expected.push((0..ROW_COLUMN_COUNT).map(|idx| format!("{:?}", row.get_ref(idx).unwrap())).collect::<Vec<_>>());
    }
    let copied: Vec<Vec<String>> = batch
        .rows()
        .map(|row| (0..ROW_COLUMN_COUNT).map(|idx| format!("{:?}", row.value(idx).unwrap())).collect())
        .collect();
    assert_eq!(copied, expected);
    assert!(batch.rows().next().unwrap().value(ROW_COLUMN_COUNT).is_err());
    assert_eq!(ROW_COLUMNS.split(", ").count(), ROW_COLUMN_COUNT);
}
