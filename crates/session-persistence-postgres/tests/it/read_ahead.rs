//! Reading short logs ahead (`Backend::prefetch`): one statement takes the short logs that read
//! cleanly, each exactly as its own scan reads it, and leaves out whatever a scan must report or
//! that is too large to hold; a coordinator's batched reads use it and read each log once. The
//! same for short tails (`Backend::prefetch_tails`), which a follower's rounds read together.

use std::sync::Arc;

use session_core::{JsonData, SessionEvent, SessionHeader, SessionId};
use session_persistence::{
    Backend, CollectSink, Coordinator, CoordinatorConfig, CountingBackend, ReadLimit, ScanOutcome, SessionPersistence,
};
use tokio_util::sync::CancellationToken;

use crate::TestSchema;

fn header(id: &str) -> SessionHeader {
    let mut header = SessionHeader::new(SessionId::from(id), 1_000);
    header.cwd = Some("/work/project".to_owned());
    header
}

/// `n` events of a type the coordinator does not know, marked ignorable so that it reads them.
fn events(n: u64, data: &str) -> Vec<Arc<SessionEvent>> {
    (0..n)
        .map(|seq| {
            let mut event = SessionEvent::new("test/n", seq, seq as i64, JsonData::from_text(data).unwrap());
            event.ignorable = true;
            Arc::new(event)
        })
        .collect()
}

fn scan(store: &dyn Backend, id: &SessionId) -> (ScanOutcome, Vec<SessionEvent>) {
    let mut sink = CollectSink::default();
    let outcome = store.scan(id, &CancellationToken::new(), &mut sink).unwrap().expect("stored");
    (outcome, sink.events)
}

fn ids(names: &[&str]) -> Vec<SessionId> {
    names.iter().copied().map(SessionId::from).collect()
}

/// Writes the sessions of the tests below: five short ones, a long one, three of about 450 KB
/// each (two fit in one read ahead's budget, the third does not), one with a missing row and
/// one whose header is damaged.
fn write_sessions(schema: &TestSchema, store: &dyn Backend) {
    for n in 1..=5 {
        store.append_batch(&header(&format!("short-{n}")), &events(n, &format!("{{\"n\":{n}}}")), false).unwrap();
    }
    store.append_batch(&header("long"), &events(300, "{\"n\":1}"), false).unwrap();
    let big = format!("{{\"text\":\"{}\"}}", "x".repeat(150_000));
    for name in ["big-1", "big-2", "big-3"] {
        store.append_batch(&header(name), &events(3, &big), false).unwrap();
    }
    for event in events(5, "{}") {
        store.append_batch(&header("gap"), &[event], false).unwrap();
    }
    schema.sql("DELETE FROM {s}.events WHERE session_id = 'gap' AND seq = 2");
    store.append_batch(&header("damaged"), &events(2, "{}"), false).unwrap();
    schema.sql("UPDATE {s}.sessions SET header = 'not json' WHERE id = 'damaged'");
}

#[test]
fn a_read_ahead_takes_the_short_clean_logs_as_their_scans_read_them() {
    let Some(schema) = TestSchema::new() else { return };
    let store = schema.open();
    write_sessions(&schema, &store);
    assert!(store.prefetch_batch() > 1);
    let asked = ids(&[
        "short-1", "long", "gap", "short-2", "missing", "damaged", "short-1", "short-3", "big-1", "big-2", "big-3",
        "short-4",
    ]);
    let logs = store.prefetch(&asked, &CancellationToken::new()).unwrap();
    let got: Vec<&str> = logs.iter().map(|(id, _)| id.as_str()).collect();
    // In the order asked, each once; the long, damaged, missing and torn ones are left to their
    // own scans, and so is everything from the first that overflows the budget.
    assert_eq!(got, ["short-1", "short-2", "short-3", "big-1", "big-2"]);
    for (id, log) in &logs {
        let (outcome, scanned) = scan(&store, id);
        assert_eq!(log.outcome, outcome, "{id}");
        let read: Vec<SessionEvent> = log.events.iter().map(|event| SessionEvent::clone(event)).collect();
        assert_eq!(read, scanned, "{id}");
    }
    assert!(store.prefetch(&[], &CancellationToken::new()).unwrap().is_empty());
    let cancelled = CancellationToken::new();
    cancelled.cancel();
    assert!(store.prefetch(&asked, &cancelled).is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batched_reads_of_a_coordinator_read_each_log_once_and_answer_as_single_reads() {
    let Some(schema) = TestSchema::new() else { return };
    let store = Arc::new(schema.open());
    write_sessions(&schema, store.as_ref());
    let counting = Arc::new(CountingBackend::new(store));
    let persistence = Coordinator::new(counting.clone(), CoordinatorConfig::default()).unwrap();
    let names = ["short-1", "long", "gap", "short-2", "missing", "damaged", "short-3", "big-1", "short-4", "short-5"];
    let reads = ids(&names).into_iter().map(|id| (id, CollectSink::default())).collect();
    let cancel = CancellationToken::new();
    let batch = session_persistence::inspect_each_into(&persistence, reads, 2, &cancel).await;
    // Two lanes, two runs each (of 3, 3, 2 and 2 reads), each run read ahead in one statement.
    assert_eq!(counting.prefetches(), 4);
    assert_eq!(counting.scans(), names.len() as u64, "each log is read once");
    for (name, streamed) in names.iter().zip(batch) {
        let id = SessionId::from(*name);
        let single = session_persistence::inspect_into(&persistence, &id, &cancel, CollectSink::default()).await;
        match (streamed, single) {
            (Ok((sink, summary)), Ok((single_sink, single_summary))) => {
                assert!(!["gap", "missing", "damaged"].contains(name), "{name} read");
                assert_eq!(sink.events, single_sink.events, "{name}");
                assert_eq!(summary, single_summary, "{name}");
            }
            (Err(error), Err(single_error)) => {
                assert!(["gap", "missing", "damaged"].contains(name), "{name}: {error}");
                assert_eq!(error.to_string(), single_error.to_string(), "{name}");
            }
            (streamed, single) => panic!("{name}: batched {streamed:?}, single {single:?}"),
        }
    }
    assert_eq!(persistence.inspect(&SessionId::from("short-3"), &cancel).await.unwrap().events.len(), 3);
}

/// The events of `id` from `from_seq` as its own seek read hands them over.
fn scan_from(store: &dyn Backend, id: &SessionId, from_seq: u64) -> (ScanOutcome, Vec<SessionEvent>) {
    let mut sink = CollectSink::default();
    let outcome = store.scan_from(id, from_seq, &CancellationToken::new(), &mut sink).unwrap().expect("stored");
    (outcome, sink.events.into_iter().filter(|event| event.seq >= from_seq).collect())
}

#[test]
fn tails_read_ahead_are_the_short_clean_ones_as_their_seek_reads_read_them() {
    let Some(schema) = TestSchema::new() else { return };
    let store = schema.open();
    write_sessions(&schema, &store);
    // A log of runs: three appends of 100 events, each stored as one row.
    for batch in 0..3 {
        let events: Vec<_> = events(300, "{\"n\":2}").into_iter().skip(batch * 100).take(100).collect();
        store.append_batch(&header("runs"), &events, batch > 0).unwrap();
    }
    let asked: Vec<(SessionId, u64)> = [
        ("runs", 150),
        ("long", 0),
        ("long", 290),
        ("gap", 3),
        ("gap", 0),
        ("missing", 0),
        ("damaged", 1),
        ("short-5", 5),
        ("short-5", 9),
        ("runs", 0),
    ]
    .into_iter()
    .map(|(id, from)| (SessionId::from(id), from))
    .collect();
    let logs = store.prefetch_tails(&asked, &CancellationToken::new()).unwrap();
    let got: Vec<(&str, usize)> = logs.iter().map(|(id, log)| (id.as_str(), log.events.len())).collect();
    // Each id once, at the seq it was first asked from (the run that holds 150 starts at 100);
    // a tail longer than a short read (the long log from 0), a gap inside the tail (the gapped
    // log from 0 is its second ask), a damaged header and a missing session are left to their
    // own reads.
    assert_eq!(got, [("runs", 150), ("gap", 2), ("short-5", 0)]);
    let from: std::collections::HashMap<&str, u64> = [("runs", 150), ("gap", 3), ("short-5", 5)].into();
    for (id, log) in &logs {
        let (outcome, scanned) = scan_from(&store, id, from[id.as_str()]);
        assert_eq!(log.outcome.header, outcome.header, "{id}");
        assert_eq!(log.outcome.revision, outcome.revision, "{id}");
        let read: Vec<SessionEvent> = log.events.iter().map(|event| SessionEvent::clone(event)).collect();
        assert_eq!(read, scanned, "{id}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_coordinators_tails_asked_together_are_one_statement_and_answer_as_single_reads() {
    let Some(schema) = TestSchema::new() else { return };
    let store = Arc::new(schema.open());
    write_sessions(&schema, store.as_ref());
    let counting = Arc::new(CountingBackend::new(store));
    let persistence = Coordinator::new(counting.clone(), CoordinatorConfig::default()).unwrap();
    let reads: Vec<(SessionId, u64)> =
        [("short-1", 0), ("short-4", 2), ("long", 295), ("short-5", 4), ("missing", 0), ("gap", 4)]
            .into_iter()
            .map(|(id, from)| (SessionId::from(id), from))
            .collect();
    let cancel = CancellationToken::new();
    let together = persistence.read_from_many(&reads, session_persistence::ReadLimit::NONE, &cancel).await;
    assert_eq!(counting.prefetches(), 1, "one read ahead for the whole batch");
    // The five tails that read cleanly came in it (the gapped log's tail starts past its gap);
    // the missing session is read on its own.
    assert_eq!(counting.scans(), 5 + 1);
    for ((id, from), answer) in reads.iter().zip(together) {
        let single = persistence.read_from(id, *from, &cancel).await;
        match (answer, single) {
            (Ok(answer), Ok(single)) => {
                let seqs = |events: &[Arc<SessionEvent>]| events.iter().map(|event| event.seq).collect::<Vec<_>>();
                assert_eq!(seqs(&answer.events), seqs(&single.events), "{id}");
                assert_eq!(answer.revision, single.revision, "{id}");
            }
            (Err(error), Err(single)) => assert_eq!(error.to_string(), single.to_string(), "{id}"),
            (answer, single) => panic!("{id}: together {answer:?}, alone {single:?}"),
        }
    }
}

/// A long tail read in pieces ends each piece's statements where the piece ends
/// (`ScanSink::until_seq`), rows of runs that cross the piece's end included: the pieces give the
/// whole log, and no piece drops its connection from the pool, a piece whose sink stopped its
/// statement part way included.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_tail_read_in_pieces_ends_its_statements_with_each_piece_and_keeps_its_connection() {
    let Some(schema) = TestSchema::new() else { return };
    let store = Arc::new(schema.open());
    store.append_batch(&header("long"), &events(3_000, "{\"n\":1}"), false).unwrap();
    let persistence = Coordinator::new(store.clone(), CoordinatorConfig::default()).unwrap();
    let (id, cancel) = (SessionId::from("long"), CancellationToken::new());
    assert_eq!(persistence.read_from(&id, 0, &cancel).await.unwrap().events.len(), 3_000);
    let pooled = store.pooled_connections();
    assert!(pooled >= 1);
    // Reads the log in pieces under `limit`; the seqs read and how many pieces, each checked to
    // have left the pool as it was.
    let in_pieces = async |limit: ReadLimit| {
        let (mut from, mut seqs, mut pieces) = (0, Vec::new(), 0);
        loop {
            let mut answers = persistence.read_from_many(&[(id.clone(), from)], limit, &cancel).await;
            let piece = answers.pop().unwrap().unwrap();
            pieces += 1;
            assert_eq!(store.pooled_connections(), pooled, "piece {pieces} under {limit:?} kept its connection");
            seqs.extend(piece.events.iter().map(|event| event.seq));
            if !piece.cut {
                return (seqs, pieces);
            }
            from = seqs.last().unwrap() + 1;
        }
    };
    let (seqs, pieces) = in_pieces(ReadLimit { events: 700, bytes: usize::MAX }).await;
    assert_eq!(seqs, (0..3_000).collect::<Vec<_>>());
    assert_eq!(pieces, 5);
    // A piece cut by its bytes (which the hint does not carry) is stopped by its sink part way
    // through a statement: its connection goes back to the pool all the same.
    let one_line = persistence.read_from(&id, 0, &cancel).await.unwrap().events[0].encoded_len();
    let (seqs, _) = in_pieces(ReadLimit { events: usize::MAX - 1, bytes: 1_000 * one_line }).await;
    assert_eq!(seqs, (0..3_000).collect::<Vec<_>>());
}

/// A read that reached its limit on an event the session row does not own (stored past its
/// `next_seq`) fails as the unbounded read does: it is not answered as a piece cut at its limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_piece_that_fills_on_an_event_the_session_row_does_not_own_fails() {
    let Some(schema) = TestSchema::new() else { return };
    let store = Arc::new(schema.open());
    store.append_batch(&header("stray"), &events(10, "{\"n\":1}"), false).unwrap();
    schema.sql("UPDATE {s}.sessions SET next_seq = 9 WHERE id = 'stray'");
    let persistence = Coordinator::new(store, CoordinatorConfig::default()).unwrap();
    let (id, cancel) = (SessionId::from("stray"), CancellationToken::new());
    let alone = persistence.read_from(&id, 0, &cancel).await.unwrap_err();
    assert!(alone.to_string().contains("events are stored up to seq 9"), "{alone}");
    let limit = ReadLimit { events: 10, bytes: usize::MAX };
    let piece = persistence.read_from_many(&[(id, 0)], limit, &cancel).await.pop().unwrap();
    assert_eq!(piece.map(|piece| piece.events.len()).unwrap_err().to_string(), alone.to_string());
}

/// A piece whose rows end before its bound reports the session row's `next_seq`, as a whole
/// read does, not the piece's bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_piece_whose_rows_end_early_reports_the_session_rows_next_seq() {
    let Some(schema) = TestSchema::new() else { return };
    let store = Arc::new(schema.open());
    for event in events(5, "{}") {
        store.append_batch(&header("cut-short"), &[event], false).unwrap();
    }
    schema.sql("DELETE FROM {s}.events WHERE session_id = 'cut-short' AND seq >= 3");
    let persistence = Coordinator::new(store, CoordinatorConfig::default()).unwrap();
    let (id, cancel) = (SessionId::from("cut-short"), CancellationToken::new());
    let alone = persistence.read_from(&id, 0, &cancel).await.unwrap_err();
    let limit = ReadLimit { events: 4, bytes: usize::MAX };
    let piece = persistence.read_from_many(&[(id, 0)], limit, &cancel).await.pop().unwrap();
    let error = piece.map(|piece| piece.events.len()).unwrap_err();
    assert!(error.to_string().contains("events end at seq 3, but the session row says 5"), "{error}");
    assert_eq!(error.to_string(), alone.to_string());
}
