//! Damaged rows (reference 05 §5.1, §7, §10, §11): a later invalid row is a torn tail, an invalid
//! row at or before the last committed `turn/end` is corruption, both with the reference's
//! messages; seek reads see only their span; repair and the stale-writer check are atomic and
//! refuse what changed under them.

use std::{path::Path, sync::Arc};

use serde_json::{Value, json};
use session_core::{JsonData, SessionEvent, SessionHeader, SessionId};
use session_persistence::{
    Backend, CollectSink, Coordinator, CoordinatorConfig, FencedWrite, PersistenceError, SessionPersistence, TornTail,
};
use session_persistence_sqlite::SqliteStore;
use tokio_util::sync::CancellationToken;

use crate::{id, open};

const ID: &str = "s-rows";

fn event(kind: &str, seq: u64, data: Value) -> Arc<SessionEvent> {
    Arc::new(SessionEvent::new(kind, seq, 100 + seq as i64, JsonData::from_value(&data).unwrap()))
}

fn delta(seq: u64, index: u64, text: &str) -> Arc<SessionEvent> {
    event(
        "assistant/chunk",
        seq,
        json!({"turn": 1, "step": 1, "chunk": {"type": "text-delta", "index": index, "text": text}}),
    )
}

/// Rows: 0, 1, 2 (packed 2–4), 5, 6 (the committed `turn/end`), 7, 8, 9, 10: turn 2 is open.
fn log() -> Vec<Arc<SessionEvent>> {
    vec![
        event("turn/start", 0, json!({"turn": 1})),
        event("step/start", 1, json!({"turn": 1, "step": 1})),
        delta(2, 0, "one "),
        delta(3, 0, "two "),
        delta(4, 0, "three"),
        event("step/end", 5, json!({"turn": 1, "step": 1})),
        event("turn/end", 6, json!({"turn": 1, "reason": {"kind": "completed"}})),
        event("turn/start", 7, json!({"turn": 2})),
        event("step/start", 8, json!({"turn": 2, "step": 1})),
        delta(9, 0, "four"),
        delta(10, 1, "five"),
    ]
}

fn header() -> SessionHeader {
    let mut header = SessionHeader::new(id(ID), 1);
    header.cwd = Some("/work".into());
    header
}

/// A database holding [`log`] (in two batches), and a raw connection to damage it with.
fn written() -> (tempfile::TempDir, std::path::PathBuf, rusqlite::Connection) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sessions.db");
    let store = open(&path);
    let events = log();
    store.append_batch(&header(), &events[..7], false).unwrap();
    store.append_batch(&header(), &events[7..], true).unwrap();
    let connection = rusqlite::Connection::open(&path).unwrap();
    (dir, path, connection)
}

fn damage(connection: &rusqlite::Connection, sql: &str) {
    let changed = connection.execute(sql, []).unwrap();
    assert!(changed > 0, "{sql} changed nothing");
}

fn scan(path: &Path) -> Result<(Vec<u64>, Option<u64>), PersistenceError> {
    let store = open(path);
    let mut sink = CollectSink::default();
    let outcome = store.scan(&id(ID), &CancellationToken::new(), &mut sink)?.expect("stored");
    Ok((sink.events.iter().map(|event| event.seq).collect(), outcome.torn.map(|torn| torn.truncate_to)))
}

fn corrupt_message(error: PersistenceError) -> String {
    match error {
        PersistenceError::Corrupt { message, .. } => message,
        other => panic!("expected corruption, got {other:?}"),
    }
}

fn read_from(path: &Path, from: u64) -> Result<Vec<u64>, PersistenceError> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        let coordinator = Coordinator::new(Arc::new(open(path)), CoordinatorConfig::default()).unwrap();
        let read = coordinator.read_from(&id(ID), from, &CancellationToken::new()).await?;
        Ok(read.events.iter().map(|event| event.seq).collect())
    })
}

#[test]
fn the_undamaged_log_reads_whole_with_its_packed_row() {
    let (_dir, path, connection) = written();
    assert_eq!(scan(&path).unwrap(), ((0..11).collect(), None));
    let packed: i64 = connection
        .query_row("SELECT COUNT(*) FROM events WHERE ignorable = 0 AND seq = 2", [], |row| row.get(0))
        .unwrap();
    assert_eq!(packed, 1, "deltas 2-4 are one packed row");
    assert_eq!(read_from(&path, 3).unwrap(), (3..11).collect::<Vec<_>>(), "a seek inside the packed row");
    assert_eq!(read_from(&path, 11).unwrap(), Vec::<u64>::new());
}

#[test]
fn an_invalid_row_after_the_last_turn_end_is_a_torn_tail() {
    let (_dir, path, connection) = written();
    damage(&connection, "UPDATE events SET data = '{' WHERE seq = 9");
    assert_eq!(scan(&path).unwrap(), ((0..9).collect(), Some(9)), "every later row is torn too");
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        let coordinator = Coordinator::new(Arc::new(open(&path)), CoordinatorConfig::default()).unwrap();
        let cancel = CancellationToken::new();
        let inspected = coordinator.inspect(&id(ID), &cancel).await.unwrap();
        let kinds: Vec<&str> = inspected.events[9..].iter().map(|event| event.kind.as_str()).collect();
        assert_eq!(kinds, ["step/end", "turn/end"], "closers continue the valid prefix");
        let loaded = coordinator.load(&id(ID), &cancel).await.unwrap();
        assert_eq!(loaded.events.len(), 11);
    });
    let rows: Vec<i64> = connection
        .prepare("SELECT seq FROM events ORDER BY seq")
        .unwrap()
        .query_map([], |row| row.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(rows, [0, 1, 2, 5, 6, 7, 8, 9, 10], "the torn rows were replaced by the closers");
    assert_eq!(scan(&path).unwrap(), ((0..11).collect(), None), "the torn rows are gone, the closers stored");
}

#[test]
fn an_invalid_committed_row_is_corruption() {
    let cases = [
        ("UPDATE events SET data = '{' WHERE seq = 5", 5),
        ("UPDATE events SET source_event_seqs = X'8000' WHERE seq = 5", 5),
        ("UPDATE events SET type = 'assistant/chunk' WHERE seq = 2", 2),
        ("DELETE FROM events WHERE seq = 5", 6),
        (
            "INSERT INTO events (session_id, seq, type, time, data) VALUES ('s-rows', 3, 'assistant/chunk', 1, \
             '{\"turn\":1,\"step\":1,\"chunk\":{\"type\":\"text-delta\",\"index\":0,\"text\":\"x\"}}')",
            3,
        ),
    ];
    for (sql, seq) in cases {
        let (_dir, path, connection) = written();
        damage(&connection, sql);
        let message = corrupt_message(scan(&path).unwrap_err());
        assert_eq!(message, format!("corrupt session log: invalid committed physical row at seq {seq}"), "{sql}");
        let message = corrupt_message(read_from(&path, 0).unwrap_err());
        assert_eq!(message, format!("corrupt session log: invalid committed physical row at seq {seq}"), "{sql}");
    }
}

#[test]
fn a_truncated_zstd_frame_is_an_invalid_row() {
    let (_dir, path, connection) = written();
    let text: String = connection.query_row("SELECT data FROM events WHERE seq = 5", [], |row| row.get(0)).unwrap();
    let padded = format!("{},\"pad\":\"{}\"}}", &text[..text.len() - 1], "p".repeat(5000));
    let frame = zstd::bulk::compress(padded.as_bytes(), 3).unwrap();
    connection.execute("UPDATE events SET data = ?1 WHERE seq = 5", [&frame[..frame.len() - 6]]).unwrap();
    assert_eq!(
        corrupt_message(scan(&path).unwrap_err()),
        "corrupt session log: invalid committed physical row at seq 5"
    );
    connection.execute("UPDATE events SET data = ?1 WHERE seq = 5", [&frame]).unwrap();
    let (seqs, torn) = scan(&path).unwrap();
    assert_eq!((seqs.len(), torn), (11, None), "the whole frame reads");
}

#[test]
fn a_row_with_invalid_columns_fails_the_read_wherever_it_is() {
    let cases = [
        ("UPDATE events SET data = 42 WHERE seq = 10", "stored data must be a string or blob"),
        ("UPDATE events SET source_event_seqs = 'x' WHERE seq = 10", "stored source_event_seqs must be a blob or null"),
    ];
    for (sql, message) in cases {
        let (_dir, path, connection) = written();
        // Even behind a torn row, the column checks still run.
        damage(&connection, "UPDATE events SET data = '{' WHERE seq = 8");
        damage(&connection, sql);
        assert_eq!(corrupt_message(scan(&path).unwrap_err()), message, "{sql}");
    }
}

#[test]
fn a_gap_after_the_last_turn_end_is_torn_and_a_seek_past_it_reads_its_span() {
    let (_dir, path, connection) = written();
    damage(&connection, "DELETE FROM events WHERE seq = 8");
    assert_eq!(scan(&path).unwrap(), ((0..8).collect(), Some(9)));
    assert_eq!(read_from(&path, 0).unwrap(), (0..8).collect::<Vec<_>>());
    assert_eq!(read_from(&path, 9).unwrap(), [9, 10], "the span from 9 is whole on its own (reference §10)");
}

#[test]
fn damage_below_a_seek_span_is_not_seen() {
    let (_dir, path, connection) = written();
    damage(&connection, "UPDATE events SET data = '{' WHERE seq = 1");
    assert!(read_from(&path, 0).is_err());
    assert_eq!(read_from(&path, 5).unwrap(), (5..11).collect::<Vec<_>>());
    assert_eq!(read_from(&path, 3).unwrap(), (3..11).collect::<Vec<_>>(), "the packed row covering 3 is read");
}

#[test]
fn a_stale_writer_gets_the_reference_error_and_writes_nothing() {
    let (_dir, path, _connection) = written();
    let (first, second) = (open(&path), open(&path));
    let batch = |seq0: u64| vec![event("step/end", seq0, json!({"turn": 2, "step": 1}))];
    first.append_batch(&header(), &batch(11), true).unwrap();
    let error = second.append_batch(&header(), &batch(11), true).unwrap_err();
    assert_eq!(error.to_string(), "session s-rows append starts at seq 11, stored next seq is 12");
    assert!(matches!(error, PersistenceError::Fenced { seq: 11, stored_next_seq: 12, .. }), "{error:?}");
    second.append_batch(&header(), &batch(12), true).unwrap();
    assert_eq!(scan(&path).unwrap().0, (0..13).collect::<Vec<_>>());
}

#[test]
fn an_append_behind_a_torn_tail_is_refused() {
    let (_dir, path, connection) = written();
    damage(&connection, "UPDATE events SET data = '{' WHERE seq = 10");
    let store = open(&path);
    let error = store.append_batch(&header(), &[event("step/end", 11, json!({"turn": 2, "step": 1}))], true);
    assert_eq!(error.unwrap_err().to_string(), "session s-rows has an invalid physical tail at seq 10");
}

#[test]
fn a_failed_append_leaves_nothing_of_its_batch() {
    let (_dir, path, connection) = written();
    let store = open(&path);
    let revision = |connection: &rusqlite::Connection| -> i64 {
        connection.query_row("SELECT revision FROM sessions", [], |row| row.get(0)).unwrap()
    };
    let before = revision(&connection);
    // The third event repeats a seq: its row breaks the primary key after two rows went in.
    let batch = vec![
        event("step/end", 11, json!({"turn": 2, "step": 1})),
        event("turn/end", 12, json!({"turn": 2, "reason": {"kind": "completed"}})),
        event("turn/end", 12, json!({"turn": 2, "reason": {"kind": "completed"}})),
    ];
    assert!(store.append_batch(&header(), &batch, true).is_err());
    assert_eq!(revision(&connection), before);
    assert_eq!(scan(&path).unwrap().0, (0..11).collect::<Vec<_>>(), "no row of the batch remains");
    store.append_batch(&header(), &batch[..2], true).unwrap();
    assert_eq!(revision(&connection), before + 1, "one transaction, one revision");
}

#[test]
fn repairs_refuse_a_tail_that_changed() {
    let (_dir, path, connection) = written();
    damage(&connection, "UPDATE events SET data = '{' WHERE seq = 9");
    let store = open(&path);
    let closers = |seq0: u64| {
        vec![
            SessionEvent::clone(&event("step/end", seq0, json!({"turn": 2, "step": 1}))),
            SessionEvent::clone(&event("turn/end", seq0 + 1, json!({"turn": 2, "reason": {"kind": "interrupted"}}))),
        ]
    };
    let marker = |seq: u64| TornTail { truncate_to: seq, recovered: Vec::new() };
    let stale = store.commit_repair(&header(), Some(&marker(10)), &closers(9)).unwrap_err();
    assert_eq!(stale.to_string(), "session s-rows repair is stale: physical tail no longer starts at seq 10");
    assert!(matches!(stale, PersistenceError::Fenced { write: FencedWrite::TornTail, seq: 10, .. }), "{stale:?}");
    let omitted = store.commit_repair(&header(), None, &closers(9)).unwrap_err();
    assert_eq!(omitted.to_string(), "session s-rows repair omitted current torn tail at seq 9");
    assert!(matches!(omitted, PersistenceError::Inconsistent { .. }), "{omitted:?}");
    let late = store.commit_repair(&header(), Some(&marker(9)), &closers(10)).unwrap_err();
    assert_eq!(late.to_string(), "session s-rows repair is stale: closer starts at seq 10, stored next seq is 9");
    assert!(
        matches!(late, PersistenceError::Fenced { write: FencedWrite::Repair, seq: 10, stored_next_seq: 9, .. }),
        "{late:?}"
    );
    assert_eq!(scan(&path).unwrap(), ((0..9).collect(), Some(9)), "refused repairs change nothing");
    store.commit_repair(&header(), Some(&marker(9)), &closers(9)).unwrap();
    assert_eq!(scan(&path).unwrap(), ((0..11).collect(), None));
    let missing = SessionHeader::new(SessionId::from("s-none"), 1);
    let error = store.commit_repair(&missing, None, &closers(0)).unwrap_err();
    assert_eq!(error.to_string(), "session s-none metadata row is missing");
    assert!(matches!(error, PersistenceError::Inconsistent { .. }), "{error:?}");
}

#[test]
fn two_connections_racing_appends_never_both_win() {
    let (_dir, path, _connection) = written();
    let stores: Vec<Arc<SqliteStore>> = (0..2).map(|_| Arc::new(open(&path))).collect();
    let barrier = Arc::new(std::sync::Barrier::new(2));
    let mut next = 11u64;
    for round in 0..20 {
        let results: Vec<Result<(), PersistenceError>> = std::thread::scope(|scope| {
            let handles: Vec<_> = stores
                .iter()
                .enumerate()
                .map(|(writer, store)| {
                    let barrier = Arc::clone(&barrier);
                    let batch =
                        vec![event("step/start", next, json!({"turn": 2, "step": 2 + round * 2 + writer as u64}))];
                    scope.spawn(move || {
                        barrier.wait();
                        store.append_batch(&header(), &batch, true)
                    })
                })
                .collect();
            handles.into_iter().map(|handle| handle.join().unwrap()).collect()
        });
        let (won, lost): (Vec<_>, Vec<_>) = results.into_iter().partition(Result::is_ok);
        assert_eq!((won.len(), lost.len()), (1, 1), "round {round}: exactly one writer wins");
        let message = lost.into_iter().next().unwrap().unwrap_err().to_string();
        assert_eq!(message, format!("session s-rows append starts at seq {next}, stored next seq is {}", next + 1));
        next += 1;
    }
    assert_eq!(scan(&path).unwrap().0, (0..next).collect::<Vec<_>>());
}
