//! A read on two threads gives what the read on one gives: the same events, torn tail, errors
//! and outcome, for whole logs and seek reads, damaged or not; and it stops cleanly when its sink
//! fails or its read is cancelled.

use std::{path::Path, sync::Arc};

use serde_json::{Value, json};
use session_core::{JsonData, SessionEvent, SessionHeader, SessionId};
use session_persistence::{Backend, CollectSink, PersistenceError, ScanSink};
use tokio_util::sync::CancellationToken;

use super::{AHEAD_MIN_SEQS, READS_AHEAD, REFUSE_HELPER, RowBatch, read_log, worth_it};
use crate::{
    SqliteConfig, SqliteStore,
    codec::{Columns, ROW_COLUMN_COUNT, ROW_COLUMNS},
    scan::ScanContext,
    store::checked_session,
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

/// A database holding 100 turns, the last one open (2,998 events, one batch per turn), and a
/// raw connection to damage it with.
fn written() -> (tempfile::TempDir, std::path::PathBuf, rusqlite::Connection) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sessions.db");
    let store = SqliteStore::open(SqliteConfig::file(&path)).unwrap();
    let header = SessionHeader::new(SessionId::from(ID), 1);
    for number in 1..=100 {
        store.append_batch(&header, &turn(number, number < 100), number > 1).unwrap();
    }
    let connection = rusqlite::Connection::open(&path).unwrap();
    (dir, path, connection)
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
        .map_err(|error| error.to_string())?
        .expect("stored");
    Ok((sink.events, outcome.torn.map(|torn| torn.truncate_to), outcome.n_events, outcome.n_bytes))
}

/// The read on two threads, on a read connection of its own.
fn read_on_two_threads(path: &Path, from_seq: u64, cancel: &CancellationToken, sink: &mut dyn ScanSink) -> Answer {
    let store = SqliteStore::open(SqliteConfig::file(path)).unwrap();
    let mut connection = store.open_reader(path).unwrap();
    let id = SessionId::from(ID);
    let ctx = ScanContext { id: &id, shown: path };
    let read = read_log(&mut connection, ctx, from_seq, cancel, |found| checked_session(&id, found), sink)
        .expect("the helper thread starts");
    assert!(connection.is_autocommit(), "the read's transaction is over, whatever its end");
    let (_, scan) = read.map_err(|error| error.to_string())?.expect("stored");
    let torn = scan.torn_from.filter(|_| from_seq == 0);
    Ok((Vec::new(), torn, scan.n_events, scan.n_bytes))
}

fn check_same(path: &Path, from_seq: u64, case: &str) {
    let one = read_on_one_thread(path, from_seq);
    let mut sink = CollectSink::default();
    let two = read_on_two_threads(path, from_seq, &CancellationToken::new(), &mut sink)
        .map(|(_, torn, n_events, n_bytes)| (sink.events, torn, n_events, n_bytes));
    assert_eq!(two, one, "{case}, from {from_seq}");
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

#[test]
fn only_a_long_read_takes_the_helper() {
    let (_dir, path, _connection) = written();
    let store = SqliteStore::open(SqliteConfig::file(&path)).unwrap();
    let connection = store.open_reader(&path).unwrap();
    let id = SessionId::from(ID);
    let ctx = ScanContext { id: &id, shown: &path };
    // The last row is turn 100's packed run of deltas, from 2,972.
    assert!(worth_it(&connection, ctx, 0).unwrap());
    assert!(worth_it(&connection, ctx, 2_972 - AHEAD_MIN_SEQS).unwrap());
    assert!(!worth_it(&connection, ctx, 2_973 - AHEAD_MIN_SEQS).unwrap());
    let other = SessionId::from("s-missing");
    assert!(!worth_it(&connection, ScanContext { id: &other, shown: &path }, 0).unwrap());
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
    let (_dir, path, _connection) = written();
    let store = SqliteStore::open(SqliteConfig::file(&path)).unwrap();
    let short = SessionHeader::new(SessionId::from("s-short"), 1);
    store.append_batch(&short, &turn(1, true), false).unwrap();
    let reads = || READS_AHEAD.with(std::cell::Cell::get);
    let cancel = CancellationToken::new();
    let before = reads();
    let mut sink = ReadAhead::default();
    let outcome = store.scan(&SessionId::from(ID), &cancel, &mut sink).unwrap().unwrap();
    assert_eq!(reads(), before + 1, "the long log is read on two threads");
    assert_eq!((sink.0.events, outcome.n_events), (read_on_one_thread(&path, 0).unwrap().0, 2_998));
    let mut sink = ReadAhead::default();
    store.scan_from(&SessionId::from(ID), 2_000, &cancel, &mut sink).unwrap().unwrap();
    assert_eq!((reads(), sink.0.events.len()), (before + 1, 998), "a read of under 1,024 seqs stays on one");
    let mut sink = ReadAhead::default();
    store.scan(&short.id, &cancel, &mut sink).unwrap().unwrap();
    assert_eq!((reads(), sink.0.events.len()), (before + 1, 30));
    let mut sink = CollectSink::default();
    store.scan(&SessionId::from(ID), &cancel, &mut sink).unwrap().unwrap();
    assert_eq!(reads(), before + 1, "a sink that allows no helper gets none");
    assert!(store.scan(&SessionId::from("s-missing"), &cancel, &mut ReadAhead::default()).unwrap().is_none());
    // A helper the system will not start is no failure: the read runs on the calling thread.
    REFUSE_HELPER.with(|refuse| refuse.set(true));
    let mut sink = ReadAhead::default();
    let outcome = store.scan(&SessionId::from(ID), &cancel, &mut sink);
    REFUSE_HELPER.with(|refuse| refuse.set(false));
    assert_eq!(outcome.unwrap().unwrap().n_events, 2_998);
    assert_eq!((reads(), sink.0.events.len()), (before + 1, 2_998));
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
    let error = read_on_two_threads(&path, 0, &CancellationToken::new(), &mut failing).unwrap_err();
    assert_eq!(error, PersistenceError::invalid_input("the sink is full").to_string());
    assert_eq!(failing.seen, 700, "no event after the sink's error");
    let cancel = CancellationToken::new();
    let mut cancelling = Stopping { seen: 0, fail_at: 10, cancel: Some(cancel.clone()) };
    let error = read_on_two_threads(&path, 0, &cancel, &mut cancelling).unwrap_err();
    assert_eq!(error, PersistenceError::Cancelled.to_string());
    assert!(cancelling.seen < 2_998, "the helper stopped at its next look at the token");
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
