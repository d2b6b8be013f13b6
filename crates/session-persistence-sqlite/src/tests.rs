//! Unit tests of the row codec: varints, `data` compression, packing.

use std::sync::Arc;

use serde_json::json;
use session_core::{JsonData, SessionEvent};

use crate::codec::{Data, decode_data, decode_sources, encode_data, encode_sources, pack_batch};

fn check_sources(values: &[u64], bytes: &[u8]) {
    assert_eq!(encode_sources(values), bytes, "{values:?}");
    assert_eq!(decode_sources(bytes).unwrap(), values, "{bytes:02X?}");
}

#[test]
fn source_seqs_encode_as_the_reference_writes_them() {
    check_sources(&[2, 0, 1], &[0x02, 0x03, 0x02]);
    check_sources(&[141], &[0x8D, 0x01]);
    check_sources(&[], &[]);
    let run: Vec<u64> = (29..=4791).collect();
    let mut bytes = vec![0x1D];
    bytes.extend(std::iter::repeat_n(0x02, run.len() - 1));
    check_sources(&run, &bytes);
    let max = session_core::json::MAX_SAFE_INTEGER;
    check_sources(&[max, 0, max], &decode_and_encode(&[max, 0, max]));
}

fn decode_and_encode(values: &[u64]) -> Vec<u8> {
    let bytes = encode_sources(values);
    assert_eq!(decode_sources(&bytes).unwrap(), values);
    bytes
}

fn check_bad_sources(bytes: &[u8], why: &str) {
    assert_eq!(
        decode_sources(bytes).unwrap_err(),
        format!("malformed source_event_seqs storage value: {why}"),
        "{bytes:02X?}"
    );
}

#[test]
fn malformed_source_seqs_are_refused_with_the_reference_messages() {
    check_bad_sources(&[0x80], "truncated varint");
    check_bad_sources(&[0x02, 0x81], "truncated varint");
    check_bad_sources(&[0x80, 0x00], "non-canonical varint");
    check_bad_sources(&[0xFF; 10], "varint is out of range");
    // 2^53 as the first value.
    check_bad_sources(&[0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x10], "varint is out of range");
    // 0, then a step down by one.
    check_bad_sources(&[0x00, 0x01], "decoded seq is out of range");
}

#[test]
fn data_is_compressed_from_4_kib_only_when_it_shrinks() {
    let small = "x".repeat(4095);
    assert_eq!(encode_data(small.clone()), Data::Text(small));
    let large = "y".repeat(5000);
    let Data::Blob(blob) = encode_data(large.clone()) else { panic!("large repetitive data compresses") };
    assert_eq!(&blob[..4], &[0x28, 0xB5, 0x2F, 0xFD], "one zstd frame");
    assert_eq!(decode_data(Data::Blob(blob.clone()), usize::MAX).unwrap(), large);
    assert!(decode_data(Data::Blob(blob[..blob.len() - 4].to_vec()), usize::MAX).is_err(), "a truncated frame");
    assert!(decode_data(Data::Blob(blob), 100).is_err(), "over the limit");
}

fn delta(seq: u64, text: &str) -> Arc<SessionEvent> {
    let data = json!({"turn": 1, "step": 1, "chunk": {"type": "text-delta", "index": 0, "text": text}});
    Arc::new(SessionEvent::new("assistant/chunk", seq, 1_000 + seq as i64, JsonData::from_value(&data).unwrap()))
}

fn layout(events: &[Arc<SessionEvent>]) -> Vec<(u64, String, Option<i64>)> {
    pack_batch(events).into_iter().map(|row| (row.seq, row.kind.to_owned(), row.ignorable)).collect()
}

#[test]
fn runs_are_cut_as_the_reference_cuts_them() {
    let run: Vec<_> = (0..1025).map(|seq| delta(seq, "a")).collect();
    assert_eq!(
        layout(&run),
        [(0, "text-chunks".to_owned(), Some(0)), (1024, "assistant/chunk".to_owned(), None)],
        "1,025 members: 1,024 packed and one scalar"
    );
    let run: Vec<_> = (0..1030).map(|seq| delta(seq, "a")).collect();
    assert_eq!(layout(&run), [(0, "text-chunks".to_owned(), Some(0)), (1024, "text-chunks".to_owned(), Some(0))]);
    let big = "z".repeat(300_000);
    let run: Vec<_> = (0..5).map(|seq| delta(seq, &big)).collect();
    assert_eq!(
        layout(&run),
        [
            (0, "text-chunks".to_owned(), Some(0)),
            (3, "assistant/chunk".to_owned(), None),
            (4, "assistant/chunk".to_owned(), None)
        ],
        "five 300,000-character deltas: three packed and two scalars"
    );
    let huge = "h".repeat(400_000);
    let run: Vec<_> = (0..4).map(|seq| delta(seq, &huge)).collect();
    assert!(layout(&run).iter().all(|(_, kind, _)| kind == "assistant/chunk"), "not even three fit: all scalar");
    let short: Vec<_> = (0..2).map(|seq| delta(seq, "b")).collect();
    assert_eq!(layout(&short).len(), 2, "a run of two stays scalar");
}

/// A row decoded in place is the event the full read and decode give; a row it declines (a
/// packed row, compressed or odd columns) is left to them.
#[test]
fn rows_decoded_in_place_match_the_full_decode() {
    use rusqlite::{Connection, params};

    use crate::codec::{ROW_COLUMNS, StoredRow, decode_plain_row};

    let connection = Connection::open_in_memory().unwrap();
    connection
        .execute_batch(
            "CREATE TABLE events (seq, type, time, data, source_event_seqs, surface_op, ignorable, n INTEGER PRIMARY KEY)",
        )
        .unwrap();
    let user = r#"{"content":[{"type":"text","text":"hi"}],"source":{"kind":"user"},"role":"user","id":"u-1"}"#;
    let insert = |values: [rusqlite::types::Value; 7]| {
        connection
            .execute("INSERT INTO events (seq, type, time, data, source_event_seqs, surface_op, ignorable) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)", params![values[0], values[1], values[2], values[3], values[4], values[5], values[6]])
            .unwrap();
    };
    use rusqlite::types::Value::{Blob, Integer, Null, Real, Text};
    let text = |text: &str| Text(text.to_owned());
    let taken = [
        [Integer(0), text("turn/start"), Integer(-5), text(r#"{"turn":1}"#), Null, Null, Null],
        [Integer(1), text("user/message"), Integer(7), text(user), Null, text("\"append\""), Null],
        [
            Integer(2),
            text("tool/result"),
            Integer(7),
            text("{}"),
            Blob(encode_sources(&[1, 0])),
            text("\"append\""),
            Null,
        ],
        [Integer(3), text("host/x"), Integer(7), text("[1,2]"), Null, Null, Integer(1)],
    ];
    let declined = [
        [
            Integer(4),
            text("tool/result"),
            Integer(7),
            text("{}"),
            Null,
            text(r#"{"op":"replace","start":0,"end":1}"#),
            Null,
        ],
        [Integer(5), text("text-chunks"), Integer(7), text("{}"), Null, Null, Integer(0)],
        [Integer(6), text("turn/start"), Integer(7), Blob(vec![1, 2]), Null, Null, Null],
        [Integer(7), text("turn/start"), Real(7.0), text("{}"), Null, Null, Null],
        [Integer(-1), text("turn/start"), Integer(7), text("{}"), Null, Null, Null],
        [Integer(8), text(""), Integer(7), text("{}"), Null, Null, Null],
        [Integer(9), text("turn/start"), Integer(7), text("{} "), Null, Null, Null],
        [Integer(10), text("turn/start"), Integer(7), text("{}"), Blob(vec![0x80]), Null, Null],
    ];
    let n_taken = taken.len();
    for values in taken.into_iter().chain(declined) {
        insert(values);
    }
    let mut statement = connection.prepare(&format!("SELECT {ROW_COLUMNS} FROM events ORDER BY n")).unwrap();
    let mut rows = statement.query([]).unwrap();
    let mut idx = 0;
    while let Some(row) = rows.next().unwrap() {
        let in_place = decode_plain_row(row);
        if idx < n_taken {
            let mut decoded = Vec::new();
            StoredRow::read(row).unwrap().decode(&mut decoded).unwrap();
            assert_eq!(in_place.as_ref(), decoded.first(), "row {idx}");
            assert_eq!(decoded.len(), 1);
        } else {
            assert!(in_place.is_none(), "row {idx} is left to the full decode");
        }
        idx += 1;
    }
    assert_eq!(idx, 12);
}
