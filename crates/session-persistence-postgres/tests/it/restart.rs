//! A server that restarts under a writer: a PostgreSQL cluster of the test's own (in a temp
//! directory, on a port of its own, so the shared server is never touched) is stopped the way a
//! crash stops it (`pg_ctl stop -m immediate`) while a store appends, then started again. While
//! it is down every call fails as a typed error within the configured bounds (none hangs): an I/O
//! error, or the fence's conflict for a writer whose lost batch had committed;
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
    },
    time::{Duration, Instant},
};

use parking_lot::Mutex;
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

/// What the writer saw.
#[derive(Default)]
struct Seen {
    /// Acknowledged batches: number → first seq.
    acked: BTreeMap<u64, u64>,
    /// Batches whose append failed with a lost connection or a timeout: the commit may or may
    /// not have happened.
    unknown: Vec<u64>,
    /// Every failure, as text, whether it is typed as the store's I/O error or a fence conflict
    /// (a resumed writer whose lost batch did commit), and how long the call took.
    failures: Vec<(String, bool, Duration)>,
    /// The longest any call took.
    longest: Duration,
}

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
    let seen = Arc::new(Mutex::new(Seen::default()));
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (store, seen, stop) = (store.clone(), seen.clone(), stop.clone());
        std::thread::spawn(move || {
            let (mut n, mut next_seq) = (0_u64, 0_u64);
            while !stop.load(Ordering::Relaxed) {
                let started = Instant::now();
                let outcome = store.append_batch(&header(), &batch(n, next_seq), next_seq > 0);
                let took = started.elapsed();
                let mut seen = seen.lock();
                seen.longest = seen.longest.max(took);
                match outcome {
                    Ok(()) => {
                        seen.acked.insert(n, next_seq);
                        next_seq += 3;
                    }
                    Err(error) => {
                        let typed =
                            matches!(error, PersistenceError::Database { .. } | PersistenceError::Fenced { .. });
                        seen.failures.push((error.to_string(), typed, took));
                        // Whether the batch committed is unknown until the store answers again:
                        // resume from what it holds.
                        seen.unknown.push(n);
                        drop(seen);
                        std::thread::sleep(Duration::from_millis(50));
                        if let Ok(events) = scan(&*store) {
                            next_seq = events.len() as u64;
                        }
                    }
                }
                n += 1;
            }
        })
    };
    let wait_for_acks = |count: usize, within: Duration| {
        let deadline = Instant::now() + within;
        while seen.lock().acked.len() < count {
            assert!(Instant::now() < deadline, "the writer did not reach {count} acknowledged batches in {within:?}");
            std::thread::sleep(Duration::from_millis(10));
        }
    };
    wait_for_acks(20, Duration::from_secs(30));
    server.crash();
    // Down for a while: the writer's calls fail, each within its bounds.
    std::thread::sleep(Duration::from_secs(1));
    let failed_while_down = seen.lock().failures.len();
    server.up();
    let acked_before = seen.lock().acked.len();
    wait_for_acks(acked_before + 20, Duration::from_secs(60));
    // A second crash with the pool idle: the store's next calls still succeed after the restart.
    stop.store(true, Ordering::Relaxed);
    writer.join().unwrap();
    server.crash();
    server.up();
    let events = scan(&*store).expect("the same store reads again after a restart, without reopening");

    let seen = seen.lock();
    assert!(failed_while_down > 0, "the writer saw the server go away");
    for (failure, typed, took) in &seen.failures {
        assert!(typed, "a failure is the store's typed I/O error: {failure}");
        assert!(*took < bound * 3, "a failing call took {took:?} (bound {bound:?}): {failure}");
    }
    assert!(seen.longest < bound * 3, "no call hangs: the longest took {:?}", seen.longest);
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
        "restart: {} acknowledged batches, {} failed calls ({} while down), the longest call {:?}, {} events",
        seen.acked.len(),
        seen.failures.len(),
        failed_while_down,
        seen.longest,
        events.len()
    );
    // And it writes again.
    let next = events.len() as u64;
    store.append_batch(&header(), &batch(u64::MAX, next), true).unwrap();
    assert_eq!(scan(&*store).unwrap().len() as u64, next + 3);
}
