//! What this store writes is the reference's format: one transaction and one revision per batch,
//! the `sessions` row with NULL for absent fields, scalar rows with `surface_op` JSON text,
//! varint sources and `ignorable`, packed chunk runs, zstd `data` only when it pays; and all of
//! it reads back exactly.

use std::sync::Arc;

use serde_json::{Value, json};
use session_core::{JsonData, Origin, SessionEvent, SessionHeader, SessionId, SurfaceOp};
use session_persistence::{Backend, CollectSink};
use tokio_util::sync::CancellationToken;

use crate::open;

fn event(kind: &str, seq: u64, data: Value) -> SessionEvent {
    SessionEvent::new(kind, seq, 1_000 + seq as i64, JsonData::from_value(&data).unwrap())
}

type Row = (i64, String, i64, Option<String>, Option<Vec<u8>>, Option<String>, Option<i64>, String);

fn rows(connection: &rusqlite::Connection, id: &str) -> Vec<Row> {
    connection
        .prepare(
            "SELECT seq, type, time, CASE typeof(data) WHEN 'text' THEN data END, source_event_seqs, surface_op, \
             ignorable, typeof(data) FROM events WHERE session_id = ?1 ORDER BY seq",
        )
        .unwrap()
        .query_map([id], |row| {
            Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?, row.get(4)?, row.get(5)?, row.get(6)?, row.get(7)?))
        })
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

#[test]
fn batches_are_stored_in_the_reference_encodings_and_read_back_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sessions.db");
    let store = open(&path);
    let mut header = SessionHeader::new(SessionId::from("s-child"), 1_772_442_000_000);
    header.cwd = Some("/srv/agents".into());
    header.parent_session = Some(SessionId::from("s-parent"));
    header.origin = Some(Origin::Subagent);
    header.delegation_depth = 1;
    header.seed_length = Some(0);

    let mut message = event(
        "assistant/message",
        2,
        json!({"turn": 1, "step": 1, "message": {"id": "m", "role": "assistant", "source": {"kind": "model"}, "content": []}}),
    );
    message.surface_op = Some(SurfaceOp::Append);
    message.source_event_seqs = Some(Box::new([]));
    let mut replaced =
        event("user/message", 3, json!({"id": "u", "role": "user", "source": {"kind": "user"}, "content": []}));
    replaced.surface_op = Some(SurfaceOp::Replace { start: 0, end: 2 });
    replaced.source_event_seqs = Some(Box::new([2, 0, 1]));
    let mut ignorable = event("host/custom", 4, json!(null));
    ignorable.ignorable = true;
    let big = event("tool/result", 5, json!({"text": "line of output\n".repeat(600)}));
    let first = vec![
        event("turn/start", 0, json!({"turn": 1})),
        event("step/start", 1, json!({"turn": 1, "step": 1})),
        message,
    ];
    let second = vec![replaced, ignorable, big];
    let batches: Vec<Vec<Arc<SessionEvent>>> =
        [first, second].into_iter().map(|batch| batch.into_iter().map(Arc::new).collect()).collect();
    store.append_batch(&header, &batches[0], false).unwrap();
    store.append_batch(&header, &batches[1], true).unwrap();

    let connection = rusqlite::Connection::open(&path).unwrap();
    let session: (Option<i64>, Option<String>, Option<String>, String, i64) = connection
        .query_row(
            "SELECT seed_length, agent_preset, owner, incarnation, revision FROM sessions WHERE id = 's-child'",
            [],
            |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?, row.get(4)?)),
        )
        .unwrap();
    assert_eq!((session.0, session.1, session.2, session.4), (Some(0), None, None, 2), "one revision per batch");
    assert_eq!(session.3.len(), 36);
    let stored = rows(&connection, "s-child");
    assert_eq!(stored[2].4.as_deref(), Some(&[][..]), "an empty source list is a zero-length BLOB");
    assert_eq!(stored[2].5.as_deref(), Some("\"append\""), "surface_op is JSON text");
    assert_eq!(stored[3].4.as_deref(), Some(&[0x02, 0x03, 0x02][..]));
    assert_eq!(stored[3].5.as_deref(), Some(r#"{"op":"replace","start":0,"end":2}"#));
    assert_eq!((stored[4].6, stored[0].6), (Some(1), None), "ignorable is 1 or NULL");
    assert_eq!(stored[5].7, "blob", "a large payload that compresses is a zstd BLOB");
    assert_eq!(stored[0].3.as_deref(), Some(r#"{"turn":1}"#), "small payloads are TEXT");

    let mut sink = CollectSink::default();
    let outcome = store.scan(&SessionId::from("s-child"), &CancellationToken::new(), &mut sink).unwrap().unwrap();
    assert_eq!(*outcome.header, header);
    let written: Vec<SessionEvent> = batches.iter().flatten().map(|event| SessionEvent::clone(event)).collect();
    assert_eq!(sink.events, written, "every field reads back");
    for (read, wrote) in sink.events.iter().zip(&written) {
        assert_eq!(read.data.as_str(), wrote.data.as_str(), "payload bytes are kept");
    }

    let top = SessionHeader::new(SessionId::from("s-top"), 5);
    store.append_batch(&top, &batches[0][..1], false).unwrap();
    let depth: Option<i64> =
        connection.query_row("SELECT delegation_depth FROM sessions WHERE id = 's-top'", [], |row| row.get(0)).unwrap();
    assert_eq!(depth, None, "a top-level session stores no depth, as the reference writes it");
}

#[test]
fn chunk_runs_are_packed_per_batch() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sessions.db");
    let store = open(&path);
    let header = SessionHeader::new(SessionId::from("s-run"), 1);
    let delta = |seq: u64| {
        Arc::new(event(
            "assistant/chunk",
            seq,
            json!({"turn": 1, "step": 1, "chunk": {"type": "text-delta", "index": 0, "text": format!("w{seq} ")}}),
        ))
    };
    let first: Vec<_> = (0..1030).map(delta).collect();
    let second: Vec<_> = (1030..1033).map(delta).collect();
    store.append_batch(&header, &first, false).unwrap();
    store.append_batch(&header, &second, true).unwrap();
    let connection = rusqlite::Connection::open(&path).unwrap();
    let layout: Vec<(i64, String, Option<i64>)> =
        rows(&connection, "s-run").into_iter().map(|row| (row.0, row.1, row.6)).collect();
    assert_eq!(
        layout,
        [
            (0, "text-chunks".to_owned(), Some(0)),
            (1024, "text-chunks".to_owned(), Some(0)),
            (1030, "text-chunks".to_owned(), Some(0)),
        ],
        "1,024 + 6 in the first batch; a later batch never merges with an earlier row"
    );
    let data: String = connection.query_row("SELECT data FROM events WHERE seq = 1030", [], |row| row.get(0)).unwrap();
    assert_eq!(data, r#"{"turn":1,"step":1,"index":0,"dt":[1,1],"texts":["w1030 ","w1031 ","w1032 "]}"#);
    let mut sink = CollectSink::default();
    store.scan(&SessionId::from("s-run"), &CancellationToken::new(), &mut sink).unwrap().unwrap();
    let written: Vec<SessionEvent> = first.iter().chain(&second).map(|event| SessionEvent::clone(event)).collect();
    assert_eq!(sink.events, written);
}

/// One generated event: a chunk delta of one of two blocks (so runs form and break), or another
/// event with optional markers.
fn generated(seq: u64, shape: (u8, String, Vec<u64>, bool, u8)) -> SessionEvent {
    let (kind, text, sources, ignorable, time_step) = shape;
    let time = 1_000 + seq as i64 * i64::from(time_step) - 50;
    let mut event = match kind % 4 {
        0 | 1 => {
            let chunk = json!({"type": "text-delta", "index": kind % 2, "text": text});
            SessionEvent::new(
                "assistant/chunk",
                seq,
                time,
                JsonData::from_value(&json!({"turn": 1, "step": 1, "chunk": chunk})).unwrap(),
            )
        }
        2 => SessionEvent::new("host/note", seq, time, JsonData::from_value(&json!({"text": text})).unwrap()),
        _ => {
            let mut event =
                SessionEvent::new("assistant/message", seq, time, JsonData::from_value(&json!({"t": text})).unwrap());
            event.surface_op = Some(SurfaceOp::Append);
            event.source_event_seqs = Some(sources.into_iter().map(|source| source % (seq + 1)).collect());
            event
        }
    };
    event.ignorable = ignorable && kind % 4 == 2;
    event
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(48))]

    /// decode(encode(batch)) == batch, whatever packs, compresses or carries markers.
    #[test]
    fn every_batch_reads_back_exactly(
        batches in proptest::collection::vec(
            proptest::collection::vec(
                (0u8..8, "[a-z\"\\\\ é😀]{0,12}|x{4000,5000}", proptest::collection::vec(0u64..50, 0..4), proptest::bool::ANY, 0u8..3),
                1..40,
            ),
            1..4,
        )
    ) {
        let store = session_persistence_sqlite::SqliteStore::open(session_persistence_sqlite::SqliteConfig::memory()).unwrap();
        let header = SessionHeader::new(SessionId::from("s-prop"), 1);
        let mut written = Vec::new();
        for (idx, batch) in batches.into_iter().enumerate() {
            let mut events: Vec<Arc<SessionEvent>> = Vec::new();
            for shape in batch {
                let event = generated(written.len() as u64, shape);
                written.push(event.clone());
                events.push(Arc::new(event));
            }
            store.append_batch(&header, &events, idx > 0).unwrap();
        }
        let mut sink = CollectSink::default();
        let outcome = store.scan(&SessionId::from("s-prop"), &CancellationToken::new(), &mut sink).unwrap().unwrap();
        proptest::prop_assert_eq!(outcome.torn, None);
        proptest::prop_assert_eq!(&sink.events, &written);
        for (read, wrote) in sink.events.iter().zip(&written) {
            proptest::prop_assert_eq!(read.data.as_str(), wrote.data.as_str());
        }
    }
}
