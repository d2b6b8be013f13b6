//! Rows and writes: events round-trip byte for byte (key order, number spelling), large records
//! are compressed and read back, a seek read streams only the suffix, and two stores (two pools,
//! as two processes would have) racing to append to one session: exactly one wins each race, and
//! the log has no gap and no duplicate.

use std::sync::{Arc, Barrier};

use session_core::{JsonData, SessionEvent, SessionHeader, SessionId};
use session_persistence::{Backend, CollectSink, CorruptKind, PersistenceError};
use session_persistence_postgres::{PgConfig, PgStore};
use tokio_util::sync::CancellationToken;

use crate::{TestSchema, server_url};

fn header(id: &str) -> SessionHeader {
    let mut header = SessionHeader::new(SessionId::from(id), 1_000);
    header.cwd = Some("/work/project".to_owned());
    header
}

fn event(kind: &str, seq: u64, data: &str) -> Arc<SessionEvent> {
    Arc::new(SessionEvent::new(kind, seq, 10 + seq as i64, JsonData::from_text(data).unwrap()))
}

fn scan(store: &dyn Backend, id: &str) -> Vec<SessionEvent> {
    let mut sink = CollectSink::default();
    store.scan(&SessionId::from(id), &CancellationToken::new(), &mut sink).unwrap().expect("the session is stored");
    sink.events
}

#[test]
fn events_round_trip_byte_for_byte_and_large_records_are_compressed() {
    let Some(schema) = TestSchema::new() else { return };
    let store = schema.open();
    // Key order that is not sorted, and number spellings that jsonb would normalize.
    let odd = r#"{"z":1,"a":[1.0,2e3,1E+2,0.10],"m":{"y":"é\u00e9","b":null}}"#;
    let big = format!(r#"{{"text":"{}","n":1.50}}"#, "lorem ipsum ".repeat(2_000));
    let events = vec![event("test/odd", 0, odd), event("test/big", 1, &big)];
    // One event per append: a row of one event each.
    for event in &events {
        store.append_batch(&header("s-1"), std::slice::from_ref(event), false).unwrap();
    }
    let read = scan(&store, "s-1");
    assert_eq!(read.len(), 2);
    assert_eq!(read[0].data.as_str(), odd);
    assert_eq!(read[1].data.as_str(), big);
    let mut written = Vec::new();
    events[0].write_json(&mut written);
    assert_eq!(schema.value("SELECT record FROM {s}.events WHERE seq = 0").unwrap().as_bytes(), written.as_slice());
    assert_eq!(
        schema.value("SELECT record IS NULL AND record_zstd IS NOT NULL FROM {s}.events WHERE seq = 1"),
        Some("t".to_owned())
    );
    // The header row keeps the JSONL header line and the indexed columns.
    assert_eq!(
        schema.value("SELECT header FROM {s}.sessions WHERE id = 's-1'").unwrap(),
        session_persistence::encode_header_line(&header("s-1"))
    );
}

#[test]
fn a_seek_read_streams_only_the_suffix() {
    let Some(schema) = TestSchema::new() else { return };
    let store = schema.open();
    let events: Vec<_> = (0..3_000).map(|seq| event("test/n", seq, &format!("{{\"n\":{seq}}}"))).collect();
    store.append_batch(&header("long"), &events[..1_000], false).unwrap();
    store.append_batch(&header("long"), &events[1_000..], true).unwrap();
    let mut sink = CollectSink::default();
    let outcome =
        store.scan_from(&SessionId::from("long"), 2_990, &CancellationToken::new(), &mut sink).unwrap().unwrap();
    assert_eq!(sink.events.iter().map(|event| event.seq).collect::<Vec<_>>(), (2_990..3_000).collect::<Vec<_>>());
    assert_eq!(outcome.n_events, 10);
    assert_eq!(scan(&store, "long").len(), 3_000, "a whole read pages through every row");
}

#[test]
fn a_stale_writer_meets_the_typed_fence_and_stores_nothing() {
    let Some(schema) = TestSchema::new() else { return };
    let (first, second) = (schema.open(), schema.open());
    first.append_batch(&header("s"), &[event("test/n", 0, "0")], false).unwrap();
    first.append_batch(&header("s"), &[event("test/n", 1, "1")], true).unwrap();
    let error = second.append_batch(&header("s"), &[event("test/n", 1, "2")], true).unwrap_err();
    assert!(
        matches!(&error, PersistenceError::Fenced { id, seq: 1, stored_next_seq: 2, .. } if id.as_str() == "s"),
        "{error:?}"
    );
    // Materializing an id that another writer created meanwhile is the same fence.
    let error = second.append_batch(&header("s"), &[event("test/n", 0, "9")], false).unwrap_err();
    assert!(matches!(&error, PersistenceError::Fenced { seq: 0, stored_next_seq: 2, .. }), "{error:?}");
    let read = scan(&first, "s");
    assert_eq!(read.iter().map(|event| event.data.as_str()).collect::<Vec<_>>(), ["0", "1"]);
}

/// An append to a stored session is one statement (`store::append`): a refused one moves
/// nothing (rows, next seq, revision), and one whose session row is gone is refused as
/// inconsistent.
#[test]
fn a_refused_append_moves_nothing_and_a_missing_session_row_is_inconsistent() {
    let Some(schema) = TestSchema::new() else { return };
    let store = schema.open();
    store.append_batch(&header("s"), &[event("test/n", 0, "0"), event("test/n", 1, "1")], false).unwrap();
    let row = || schema.value("SELECT next_seq || '/' || revision || '/' || n_bytes FROM {s}.sessions WHERE id = 's'");
    let before = row();
    for first in [0, 1, 3] {
        let error = store.append_batch(&header("s"), &[event("test/n", first, "7")], true).unwrap_err();
        assert!(
            matches!(&error, PersistenceError::Fenced { seq, stored_next_seq: 2, .. } if *seq == first),
            "{error:?}"
        );
        assert_eq!(row(), before, "a fenced append at {first} moves nothing");
    }
    store.append_batch(&header("s"), &[event("test/n", 2, "2")], true).unwrap();
    assert_eq!(scan(&store, "s").len(), 3);
    schema.sql("DELETE FROM {s}.events WHERE session_id = 's'");
    schema.sql("DELETE FROM {s}.sessions WHERE id = 's'");
    let error = store.append_batch(&header("s"), &[event("test/n", 3, "3")], true).unwrap_err();
    assert!(matches!(&error, PersistenceError::Inconsistent { .. }), "{error:?}");
    assert!(error.to_string().contains("session s has no stored session row to append to"), "{error}");
    assert_eq!(schema.value("SELECT count(*) FROM {s}.events"), Some("0".to_owned()));
}

/// A session's first batch inserts its row and appends in one transaction: a batch the append
/// refuses (here one that does not start at 0) leaves no session row behind.
#[test]
fn a_refused_first_batch_leaves_no_session_row() {
    let Some(schema) = TestSchema::new() else { return };
    let store = schema.open();
    let error = store.append_batch(&header("late"), &[event("test/n", 5, "5")], false).unwrap_err();
    assert!(matches!(&error, PersistenceError::Fenced { seq: 5, stored_next_seq: 0, .. }), "{error:?}");
    assert_eq!(schema.value("SELECT count(*) FROM {s}.sessions WHERE id = 'late'"), Some("0".to_owned()));
    store.append_batch(&header("late"), &[event("test/n", 0, "0")], false).unwrap();
    assert_eq!(scan(&store, "late").len(), 1);
}

#[test]
fn two_stores_racing_on_one_session_never_interleave() {
    let Some(schema) = TestSchema::new() else { return };
    race_two_stores([Arc::new(schema.open()), Arc::new(schema.open())]);
}

/// Two stores creating the same new ids at the same moment (a barrier before each): for each id
/// exactly one first batch is stored, and the other writer meets the fence at the stored next seq,
/// never a missing session row.
#[test]
fn two_stores_creating_one_id_at_once_leave_one_log_and_one_fence() {
    let Some(schema) = TestSchema::new() else { return };
    let stores = [Arc::new(schema.open()), Arc::new(schema.open())];
    const IDS: usize = 20;
    let barrier = Arc::new(Barrier::new(2));
    let threads: Vec<_> = (0..2)
        .map(|writer| {
            let (store, barrier) = (Arc::clone(&stores[writer]), Arc::clone(&barrier));
            std::thread::spawn(move || {
                (0..IDS)
                    .map(|k| {
                        let batch: Vec<_> = (0..3).map(|seq| event("test/n", seq, &format!("\"w{writer}\""))).collect();
                        barrier.wait();
                        store.append_batch(&header(&format!("new-{k}")), &batch, false)
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let outcomes: Vec<Vec<_>> = threads.into_iter().map(|thread| thread.join().unwrap()).collect();
    for (k, (first, second)) in outcomes[0].iter().zip(&outcomes[1]).enumerate() {
        let (won, lost) = match (first, second) {
            (Ok(()), Err(error)) => (0, error),
            (Err(error), Ok(())) => (1, error),
            other => panic!("id new-{k}: {other:?}"),
        };
        assert!(matches!(lost, PersistenceError::Fenced { seq: 0, stored_next_seq: 3, .. }), "new-{k}: {lost:?}");
        let read = scan(&*stores[0], &format!("new-{k}"));
        assert_eq!(read.len(), 3);
        assert!(read.iter().all(|event| event.data.as_str() == format!("\"w{won}\"")), "new-{k}: one writer's batch");
    }
}

/// The same race where the user's options make SERIALIZABLE the default: the store's connections
/// keep READ COMMITTED, so the loser meets the fence, not a serialization failure (without the
/// store's own option, this fails with 40001).
#[test]
fn two_stores_racing_keep_the_fence_where_the_default_isolation_is_serializable() {
    let Some(schema) = TestSchema::new() else { return };
    let url = format!("{}?options=-c%20default_transaction_isolation%3Dserializable", server_url().unwrap());
    let config = PgConfig::from_url(&url).unwrap().with_schema(schema.name()).unwrap();
    race_two_stores([Arc::new(PgStore::open(&config).unwrap()), Arc::new(PgStore::open(&config).unwrap())]);
}

/// Two stores append batches of 3 to one session in lockstep rounds, each from where it last
/// saw the log: every round exactly one wins, and the log holds whole batches in seq order.
fn race_two_stores(stores: [Arc<PgStore>; 2]) {
    stores[0].append_batch(&header("race"), &[event("test/n", 0, "\"start\"")], false).unwrap();
    const ROUNDS: u64 = 25;
    let barrier = Arc::new(Barrier::new(2));
    let threads: Vec<_> = (0..2)
        .map(|writer| {
            let (store, barrier) = (Arc::clone(&stores[writer]), Arc::clone(&barrier));
            std::thread::spawn(move || {
                let (mut wins, mut errors) = (Vec::new(), Vec::new());
                let mut next = 1;
                for round in 0..ROUNDS {
                    barrier.wait();
                    // Each writer believes the log ends where it last saw it, and writes a batch of 3.
                    let batch: Vec<_> =
                        (0..3).map(|k| event("test/n", next + k, &format!("\"w{writer} r{round} k{k}\""))).collect();
                    match store.append_batch(&header("race"), &batch, true) {
                        Ok(()) => {
                            wins.push(round);
                            next += 3;
                        }
                        Err(PersistenceError::Fenced { stored_next_seq, .. }) => next = stored_next_seq,
                        // Kept, not a panic: the other writer would wait for this one at the
                        // barrier forever.
                        Err(other) => errors.push(format!("writer {writer}, round {round}: {other}")),
                    }
                    barrier.wait();
                }
                (wins, errors)
            })
        })
        .collect();
    let (wins, errors): (Vec<Vec<u64>>, Vec<Vec<String>>) =
        threads.into_iter().map(|thread| thread.join().unwrap()).unzip();
    assert_eq!(errors.concat(), Vec::<String>::new(), "a writer met an error other than the fence");
    let read = scan(&*stores[0], "race");
    assert_eq!(read.iter().map(|event| event.seq).collect::<Vec<_>>(), (0..read.len() as u64).collect::<Vec<_>>());
    // Every batch is whole and from one writer.
    for batch in read[1..].chunks(3) {
        let writer = &batch[0].data.as_str()[..3];
        let round = batch[0].data.as_str().split(' ').nth(1).unwrap().to_owned();
        assert!(
            batch.iter().all(|event| event.data.as_str().starts_with(writer) && event.data.as_str().contains(&round))
        );
    }
    // Exactly one writer wins each round: both start each round at the same stored seq.
    let n_wins = wins[0].len() + wins[1].len();
    assert_eq!(n_wins as u64, ROUNDS, "wins: {wins:?}");
    assert_eq!(read.len() as u64, 1 + 3 * ROUNDS);
}

/// A short read is one statement, a long one pages in a transaction (`store::read`): the same
/// events either way, around the bound (256 events from the seq), and a missing row is the same
/// typed defect on both paths.
#[test]
fn reads_of_every_length_around_the_one_statement_bound_agree() {
    let Some(schema) = TestSchema::new() else { return };
    let store = schema.open();
    for n in [1u64, 255, 256, 257, 600] {
        let id = format!("n-{n}");
        let events: Vec<_> = (0..n).map(|seq| event("test/n", seq, &format!("{{\"n\":{seq}}}"))).collect();
        store.append_batch(&header(&id), &events, false).unwrap();
        let whole = scan(&store, &id);
        assert_eq!(whole.iter().map(|event| event.seq).collect::<Vec<_>>(), (0..n).collect::<Vec<_>>(), "{id}");
        for from in [1, n.saturating_sub(257), n.saturating_sub(256), n.saturating_sub(255), n - 1, n] {
            let mut sink = CollectSink::default();
            let outcome = store.scan_from(&SessionId::from(id.as_str()), from, &CancellationToken::new(), &mut sink);
            let outcome = outcome.unwrap().expect("stored");
            let seqs: Vec<u64> = sink.events.iter().map(|event| event.seq).collect();
            assert_eq!(seqs, (from..n).collect::<Vec<_>>(), "{id} from {from}");
            assert_eq!(outcome.n_events, n - from, "{id} from {from}");
        }
    }
    // Each was one append: runs of 512 events, at seqs 0, 512, ...
    let runs = |id: &str| {
        schema.value(&format!(
            "SELECT string_agg(seq || ':' || n_events, ' ' ORDER BY seq) FROM {{s}}.events WHERE session_id = '{id}'"
        ))
    };
    assert_eq!(runs("n-255").as_deref(), Some("0:255"));
    assert_eq!(runs("n-600").as_deref(), Some("0:512 512:88"));
    for (id, message) in [
        ("n-255", "events end at seq 0, but the session row says 255"),
        ("n-600", "the event at seq 0 is missing (next stored: 512)"),
    ] {
        schema.sql(&format!("DELETE FROM {{s}}.events WHERE session_id = '{id}' AND seq = 0"));
        let mut sink = CollectSink::default();
        let error = store.scan(&SessionId::from(id), &CancellationToken::new(), &mut sink).unwrap_err();
        assert!(matches!(&error, PersistenceError::Corrupt { kind: CorruptKind::SeqGap, .. }), "{id}: {error}");
        assert!(error.to_string().contains(message), "{id}: {error}");
        // A seek into the missing run, into the next one, and past the end.
        for from in [130, 520, 700] {
            let mut sink = CollectSink::default();
            let read = store.scan_from(&SessionId::from(id), from, &CancellationToken::new(), &mut sink);
            match (id, from) {
                ("n-600", 520) => assert_eq!(read.unwrap().unwrap().n_events, 80),
                ("n-600", 700) | ("n-255", 520 | 700) => assert_eq!(read.unwrap().unwrap().n_events, 0),
                _ => assert!(matches!(read, Err(PersistenceError::Corrupt { .. })), "{id} from {from}: {read:?}"),
            }
        }
    }
}

/// A store of `schema`, and another whose long reads end each statement after its first row (as
/// a slow sink makes them: `store::read`).
fn store_and_one_ending_every_statement(schema: &TestSchema) -> (PgStore, PgStore) {
    let mut ending = schema.open();
    ending.set_statement_span(std::time::Duration::ZERO);
    (schema.open(), ending)
}

/// Appends `id`'s events from seq 0 on in batches of `sizes` (each at most 512 events a row), the
/// payload of each `data(seq)`; returns the next seq.
fn append_batches(
    store: &PgStore,
    id: &str,
    sizes: impl IntoIterator<Item = u64>,
    data: impl Fn(u64) -> String,
) -> u64 {
    let mut seq = 0;
    for n in sizes {
        let events: Vec<_> = (seq..seq + n).map(|seq| event("test/n", seq, &data(seq))).collect();
        store.append_batch(&header(id), &events, false).unwrap();
        seq += n;
    }
    seq
}

/// A whole read of `id` fails as a seq gap (an event missing, or stored past `next_seq`),
/// `message` in its text.
fn assert_seq_gap(store: &PgStore, id: &SessionId, message: &str) {
    let error = store.scan(id, &CancellationToken::new(), &mut CollectSink::default()).unwrap_err();
    assert!(matches!(&error, PersistenceError::Corrupt { kind: CorruptKind::SeqGap, .. }), "{error}");
    assert!(error.to_string().contains(message), "{error}");
}

/// A long read streams one statement, which a slow sink ends early (`store::read`): a read whose
/// statements end after every row reads what one statement reads, whole and from any seq, and
/// meets a missing row as the same typed defect.
#[test]
fn a_long_read_whose_statements_end_after_every_row_reads_the_same_events() {
    let Some(schema) = TestSchema::new() else { return };
    let (store, cut) = store_and_one_ending_every_statement(&schema);
    // Rows of one event, of a few, and runs of up to 512.
    let seq = append_batches(&store, "rows", [1, 7, 300, 1, 600, 40, 1_100, 3], |seq| format!("{{\"n\":{seq}}}"));
    let seqs = |read: &mut dyn FnMut(&mut CollectSink) -> u64| {
        let mut sink = CollectSink::default();
        let n_events = read(&mut sink);
        assert_eq!(n_events, sink.events.len() as u64);
        sink.events.iter().map(|event| event.seq).collect::<Vec<_>>()
    };
    let id = SessionId::from("rows");
    let cancel = CancellationToken::new();
    for from in [0, 1, 8, 9, 300, 308, 309, 500, 908, 1_000, 1_500, 1_700, seq - 300] {
        let read = |store: &dyn Backend| {
            seqs(&mut |sink| store.scan_from(&id, from, &cancel, sink).unwrap().unwrap().n_events)
        };
        let (whole, ended) = (read(&store), read(&cut));
        assert_eq!(whole, (from..seq).collect::<Vec<_>>(), "from {from}");
        assert_eq!(ended, whole, "from {from}");
    }
    // A run in the middle is missing: the same gap on both.
    schema.sql("DELETE FROM {s}.events WHERE session_id = 'rows' AND seq = 909");
    for store in [&store, &cut] {
        assert_seq_gap(store, &id, "the event at seq 909 is missing (next stored: 949)");
    }
}

/// A long read spans about 2 MiB of event lines per statement (`store::read`: here about 40,000
/// seqs): a log longer than that reads whole and from either side of a span's end, and a row
/// that overlaps a run, a gap wider than a span and rows stored past the session row's next seq
/// are met as one statement meets them; the same with statements ended after every row.
#[test]
fn a_long_read_across_statement_spans_meets_wide_gaps_and_rows_past_next_seq() {
    let Some(schema) = TestSchema::new() else { return };
    let (store, cut) = store_and_one_ending_every_statement(&schema);
    let n = append_batches(&store, "wide", [10_000; 7], |_| "1".to_owned());
    let id = SessionId::from("wide");
    let cancel = CancellationToken::new();
    for store in [&store, &cut] {
        for from in [0, 40_000, 42_000, 65_535, 65_536, 69_000] {
            let mut sink = CollectSink::default();
            let outcome = store.scan_from(&id, from, &cancel, &mut sink).unwrap().unwrap();
            assert_eq!(outcome.n_events, n - from, "from {from}");
            assert!(sink.events.iter().map(|event| event.seq).eq(from..n), "from {from}");
        }
    }
    // A row inside a run that crosses a span's end (or, with statements ended after every
    // row, inside the run before it) overlaps that run: met as one statement meets it.
    schema.sql(
        "INSERT INTO {s}.events (session_id, seq, type, time, record, record_zstd, n_events) VALUES \
         ('wide', 42000, 'test/n', 42010, '{\"type\":\"test/n\",\"seq\":42000,\"time\":42010,\"data\":1}', NULL, 1)",
    );
    for store in [&store, &cut] {
        assert_seq_gap(store, &id, "the event at seq 42048 is missing (next stored: 42000)");
    }
    schema.sql("DELETE FROM {s}.events WHERE session_id = 'wide' AND seq = 42000");
    // Rows stored past the session row's next seq.
    schema.sql("UPDATE {s}.sessions SET next_seq = 500 WHERE id = 'wide'");
    for store in [&store, &cut] {
        assert_seq_gap(store, &id, "events are stored up to seq 69999, but the session row's next_seq is 500");
    }
    // A gap wider than a span.
    schema.sql(&format!("UPDATE {{s}}.sessions SET next_seq = {n} WHERE id = 'wide'"));
    schema.sql("DELETE FROM {s}.events WHERE session_id = 'wide' AND seq >= 1024 AND seq < 67000");
    let next = schema.value("SELECT min(seq) FROM {s}.events WHERE session_id = 'wide' AND seq >= 1024").unwrap();
    for store in [&store, &cut] {
        assert_seq_gap(store, &id, &format!("the event at seq 1024 is missing (next stored: {next})"));
    }
}
