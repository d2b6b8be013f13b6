//! A server that restarts under a writer: a PostgreSQL cluster of the test's own (in a temp
//! directory, on a port of its own, so the shared server is never touched) is stopped the way a
//! crash stops it (`pg_ctl stop -m immediate`) while a store appends, then started again. While
//! it is down every call fails as a typed error (an I/O error, or the fence's conflict for a
//! writer whose lost batch had committed) and none hangs (a generous liveness bound, not a timing);
//! once it is back the same store, without reopening, reads and appends again; every batch it
//! acknowledged is in the log, and a batch whose answer was lost is there whole or not at all.
//!
//! Needs the PostgreSQL server binaries (`testing::PrivateCluster`); without them the test says it
//! was skipped, and fails under CI.

use std::{
    collections::BTreeMap,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
        mpsc::{self, RecvTimeoutError},
    },
    time::{Duration, Instant},
};

use session_core::{JsonData, SessionEvent, SessionHeader, SessionId};
use session_persistence::{Backend, CollectSink, PersistenceError};
use session_persistence_postgres::{PgConfig, PgStore, testing::PrivateCluster};
use tokio_util::sync::CancellationToken;

fn header() -> SessionHeader {
    let mut header = SessionHeader::new(SessionId::from("s-restart"), 1_000);
    header.cwd = Some("/w".to_owned());
    header
}

/// Batch `n`: three events at `first..first + 3`, each naming its batch.
fn batch(n: u64, first: u64) -> Vec<Arc<SessionEvent>> {
    (first..first + 3)
        .map(|seq| {
            let data = JsonData::from_text(format!(r#"{{"batch":{n},"seq":{seq}}}"#)).unwrap();
            Arc::new(SessionEvent::new("test/batch", seq, 1, data))
        })
        .collect()
}

fn scan(store: &dyn Backend) -> Result<Vec<SessionEvent>, PersistenceError> {
    let mut sink = CollectSink::default();
    store.scan(&SessionId::from("s-restart"), &CancellationToken::new(), &mut sink)?;
    Ok(sink.events)
}

/// What the writer did with one batch.
enum Outcome {
    /// Batch `n` was acknowledged at `first..first + 3`.
    Acked { n: u64, first: u64 },
    /// Batch `n`'s append failed: whether it committed is unknown until the store answers again.
    /// `typed` says whether the failure is the store's typed error (a lost connection or a
    /// timeout, or a fence conflict for a resumed writer whose lost batch did commit).
    Failed { n: u64, message: String, typed: bool },
}

/// What the writer saw.
#[derive(Default)]
struct Seen {
    /// Acknowledged batches: number → first seq.
    acked: BTreeMap<u64, u64>,
    /// Batches whose append failed with a lost connection or a timeout: the commit may or may
    /// not have happened.
    unknown: Vec<u64>,
    /// Every failure, as text, and whether it is typed as the store's error.
    failures: Vec<(String, bool)>,
}

impl Seen {
    fn record(&mut self, outcome: Outcome) {
        match outcome {
            Outcome::Acked { n, first } => {
                self.acked.insert(n, first);
            }
            Outcome::Failed { n, message, typed } => {
                self.failures.push((message, typed));
                self.unknown.push(n);
            }
        }
    }
}

/// Liveness bounds, not timings: the store's own bounds (the 2 s connect and query timeouts below)
/// are what end a call, and these deadlines only turn a hang into a failure instead of a stuck
/// test. Each is far above what a call or a phase takes on a loaded machine.
///
/// Every call the writer makes answers within this.
const CALL_ANSWERS_WITHIN: Duration = Duration::from_secs(60);
/// Each phase (the acknowledged batches before the crash, the first failure after it, the
/// batches after the restart) completes within this.
const PHASE_ENDS_WITHIN: Duration = Duration::from_secs(180);

#[test]
fn a_server_restarted_under_a_writer_loses_nothing_acknowledged_and_the_store_carries_on() {
    let Some(server) = PrivateCluster::start() else { return };
    let bound = Duration::from_secs(2);
    let config = PgConfig::from_url(&server.url("restart"))
        .unwrap()
        .with_pool_size(2)
        .with_connect_timeout(bound)
        .with_query_timeout(bound);
    let store = Arc::new(PgStore::setup(&config).unwrap().0);
    let stop = Arc::new(AtomicBool::new(false));
    let (outcomes, answers) = mpsc::channel();
    let writer = {
        let (store, stop) = (store.clone(), stop.clone());
        std::thread::spawn(move || {
            let (mut n, mut next_seq) = (0_u64, 0_u64);
            while !stop.load(Ordering::Relaxed) {
                let outcome = match store.append_batch(&header(), &batch(n, next_seq), next_seq > 0) {
                    Ok(()) => {
                        let first = next_seq;
                        next_seq += 3;
                        Outcome::Acked { n, first }
                    }
                    Err(error) => {
                        let typed =
                            matches!(error, PersistenceError::Database { .. } | PersistenceError::Fenced { .. });
                        Outcome::Failed { n, message: error.to_string(), typed }
                    }
                };
                let failed = matches!(outcome, Outcome::Failed { .. });
                if outcomes.send(outcome).is_err() {
                    return;
                }
                if failed {
                    // A pause between retries, not a wait for something: while the server is
                    // down a refused connection fails at once, and the writer should not spin.
                    std::thread::sleep(Duration::from_millis(50));
                    // Resume from what the store holds (a lost batch may have committed).
                    if let Ok(events) = scan(&*store) {
                        next_seq = events.len() as u64;
                    }
                }
                n += 1;
            }
        })
    };
    let mut seen = Seen::default();
    // Takes the writer's outcomes until `done`, each within its liveness bound.
    let wait_until = |seen: &mut Seen, what: &str, done: &dyn Fn(&Seen) -> bool| {
        let deadline = Instant::now() + PHASE_ENDS_WITHIN;
        while !done(seen) {
            match answers.recv_timeout(CALL_ANSWERS_WITHIN) {
                Ok(outcome) => seen.record(outcome),
                Err(RecvTimeoutError::Timeout) => panic!("no call answered within {CALL_ANSWERS_WITHIN:?}: one hangs"),
                Err(RecvTimeoutError::Disconnected) => panic!("the writer stopped before {what}"),
            }
            assert!(Instant::now() < deadline, "{what} did not happen within {PHASE_ENDS_WITHIN:?}");
        }
    };
    wait_until(&mut seen, "20 acknowledged batches", &|seen| seen.acked.len() >= 20);
    server.crash();
    // Down until the writer has seen it go: its calls fail, each answering within its bounds.
    let failures_before = seen.failures.len();
    wait_until(&mut seen, "a failure while the server is down", &|seen| seen.failures.len() > failures_before);
    let failed_while_down = seen.failures.len() - failures_before;
    server.up();
    let acked_before = seen.acked.len();
    wait_until(&mut seen, "20 more acknowledged batches after the restart", &|seen| {
        seen.acked.len() >= acked_before + 20
    });
    // The writer's last call answers too; then it ends and the channel closes.
    stop.store(true, Ordering::Relaxed);
    loop {
        match answers.recv_timeout(CALL_ANSWERS_WITHIN) {
            Ok(outcome) => seen.record(outcome),
            Err(RecvTimeoutError::Disconnected) => break,
            Err(RecvTimeoutError::Timeout) => panic!("no call answered within {CALL_ANSWERS_WITHIN:?}: one hangs"),
        }
    }
    writer.join().unwrap();
    // A second crash with the pool idle: the store's next calls still succeed after the restart.
    server.crash();
    server.up();
    let events = scan(&*store).expect("the same store reads again after a restart, without reopening");

    assert!(failed_while_down > 0, "the writer saw the server go away");
    for (failure, typed) in &seen.failures {
        assert!(typed, "a failure is the store's typed I/O error: {failure}");
    }
    // The log is whole (no gap: `scan` checks), every acknowledged batch is in it at the seqs it
    // was acknowledged at, and a batch whose answer was lost is there whole or not at all.
    let mut stored: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
    for event in &events {
        let value = event.data.to_value().unwrap();
        stored.entry(value["batch"].as_u64().unwrap()).or_default().push(event.seq);
    }
    for (n, first) in &seen.acked {
        assert_eq!(stored.get(n), Some(&vec![*first, first + 1, first + 2]), "acknowledged batch {n}");
    }
    for n in &seen.unknown {
        if let Some(seqs) = stored.get(n) {
            assert_eq!(seqs.len(), 3, "batch {n}, whose answer was lost, is stored whole or not at all");
        }
    }
    assert!(stored.keys().all(|n| seen.acked.contains_key(n) || seen.unknown.contains(n)), "only written batches");
    eprintln!(
        "restart: {} acknowledged batches, {} failed calls ({} while down), {} events",
        seen.acked.len(),
        seen.failures.len(),
        failed_while_down,
        events.len()
    );
    // And it writes again.
    let next = events.len() as u64;
    store.append_batch(&header(), &batch(u64::MAX, next), true).unwrap();
    assert_eq!(scan(&*store).unwrap().len() as u64, next + 3);
}
