//! Crash safety: a child process appends to a JSONL store (or a SQLite database, or a PostgreSQL
//! schema when `SESSION_PG_URL` names a server) and is killed
//! with SIGKILL at random moments. After every kill, each acknowledged batch must be intact and the log must load, with
//! closers where the kill left a turn open.

use std::{
    io::{BufRead, BufReader},
    path::Path,
    process::{Command, Stdio},
    sync::{Arc, mpsc},
    time::Duration,
};

use e2e::{crash::batch_hash, workload::Prng};
use session_core::{SessionEvent, SessionId};
use session_persistence::{
    Backend, Compression, Coordinator, CoordinatorConfig, JsonlConfig, JsonlStore, PersistenceError, SessionPersistence,
};
use session_persistence_postgres::{PgConfig, PgStore, testing::ScratchSchema};
use session_persistence_sqlite::{SqliteConfig, SqliteStore};
use tokio_util::sync::CancellationToken;

/// One acknowledged batch: its seq range and content hash.
#[derive(Debug, Clone, Copy)]
struct Ack {
    first: u64,
    last: u64,
    hash: u64,
}

fn parse_ack(line: &str) -> Option<Ack> {
    let mut parts = line.strip_prefix("ack ")?.split(' ');
    Some(Ack {
        first: parts.next()?.parse().ok()?,
        last: parts.next()?.parse().ok()?,
        hash: parts.next()?.parse().ok()?,
    })
}

/// Runs the writer until a random moment, kills it, and returns what it acknowledged.
fn run_and_kill(root: &Path, compression: &str, seed: u64, prng: &mut Prng) -> Vec<Ack> {
    let mut child = Command::new(env!("CARGO_BIN_EXE_crash_writer"))
        .args([root.to_str().unwrap(), compression, "s-crash", &seed.to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn the crash writer");
    let stdout = child.stdout.take().unwrap();
    let (sender, receiver) = mpsc::channel();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if let Some(ack) = parse_ack(&line)
                && sender.send(ack).is_err()
            {
                break;
            }
        }
    });
    // Wait for a random number of acknowledgements (possibly none), then a random extra delay,
    // so kills land before, during and between writes.
    let mut acks = Vec::new();
    let wanted = prng.below(4);
    while (acks.len() as u64) < wanted {
        match receiver.recv_timeout(Duration::from_secs(20)) {
            Ok(ack) => acks.push(ack),
            Err(_) => panic!("the crash writer stopped acknowledging"),
        }
    }
    // A true delay, not a wait for an event: it moves the kill point to a random moment.
    std::thread::sleep(Duration::from_micros(prng.below(3_000)));
    child.kill().expect("SIGKILL the writer");
    child.wait().expect("reap the writer");
    reader.join().expect("reader thread");
    acks.extend(receiver.try_iter());
    acks
}

/// The storage under test: a JSONL encoding, or a SQLite database.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Storage {
    Jsonl(Compression),
    Sqlite,
    /// `root` is the store's URL.
    Postgres,
}

fn check_store(root: &Path, storage: Storage, all_acks: &[Ack], runtime: &tokio::runtime::Runtime) -> usize {
    let store: Arc<dyn Backend> = match storage {
        Storage::Jsonl(compression) => Arc::new(
            JsonlStore::open(JsonlConfig { root: root.to_path_buf(), compression, pack_chunks: true })
                .expect("the store opens after a kill (the lock died with the writer)"),
        ),
        Storage::Sqlite => Arc::new(
            SqliteStore::open(SqliteConfig::file(root))
                .expect("the database opens after a kill (SQLite recovers its log)"),
        ),
        Storage::Postgres => match PgStore::open(&PgConfig::from_url(root.to_str().unwrap()).unwrap()) {
            Ok(store) => Arc::new(store),
            // Killed before its setup committed: nothing was acknowledged.
            Err(_) if all_acks.is_empty() => return 0,
            Err(error) => panic!("the store opens after a kill: {error}"),
        },
    };
    runtime.block_on(async {
        let persistence = Coordinator::new(store, CoordinatorConfig::default()).unwrap();
        let id = SessionId::from("s-crash");
        // A PostgreSQL server may still commit the transaction a killed writer sent last: a
        // repair that raced it is refused by the fence (`Fenced`) and is redone on the new tail.
        let mut attempts = 0;
        let loaded = loop {
            attempts += 1;
            match persistence.load(&id, &CancellationToken::new()).await {
                Ok(loaded) => break loaded,
                Err(err) if err.is_not_found() && all_acks.is_empty() => return 0,
                Err(PersistenceError::Fenced { .. }) if storage == Storage::Postgres && attempts < 5 => {}
                Err(err) => panic!("the log must load after a kill: {err}"),
            }
        };
        let events: &[Arc<SessionEvent>] = &loaded.events;
        for (idx, event) in events.iter().enumerate() {
            assert_eq!(event.seq, idx as u64, "seqs are contiguous");
        }
        for ack in all_acks {
            let range = ack.first as usize..=ack.last as usize;
            assert!(events.len() > ack.last as usize, "acknowledged batch {ack:?} is missing");
            assert_eq!(batch_hash(&events[range]), ack.hash, "acknowledged batch {ack:?} changed");
        }
        let opened = events.iter().filter(|event| event.kind == "turn/start").count();
        let closed = events.iter().filter(|event| event.kind == "turn/end").count();
        assert_eq!(opened, closed, "load closes a turn the kill left open");
        events.len()
    })
}

fn crash_loop(storage: Storage, label: &str, n_kills: u64, seed: u64) {
    let dir = tempfile::tempdir().unwrap();
    // A PostgreSQL schema the first writer sets up, dropped however the test ends.
    let mut schema = None;
    let root = match storage {
        Storage::Jsonl(_) => dir.path().join("store"),
        Storage::Sqlite => dir.path().join("db").join("sessions.db"),
        Storage::Postgres => {
            let Some(scratch) = ScratchSchema::bare() else { return };
            std::path::PathBuf::from(schema.insert(scratch).url())
        }
    };
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let mut prng = Prng::new(seed);
    let mut all_acks: Vec<Ack> = Vec::new();
    let mut n_events = 0;
    for kill in 0..n_kills {
        let acks = run_and_kill(&root, label, seed * 1_000 + kill, &mut prng);
        all_acks.extend(acks);
        n_events = check_store(&root, storage, &all_acks, &runtime);
    }
    eprintln!(
        "{label}: {n_kills} kills, {} acknowledged batches, {n_events} events after the last repair",
        all_acks.len()
    );
    assert!(!all_acks.is_empty() && n_events > 0, "the writer made progress across {n_kills} kills");
}

#[test]
fn sigkill_never_loses_an_acknowledged_batch_zstd() {
    crash_loop(Storage::Jsonl(Compression::Zstd), "zstd", 60, 11);
}

#[test]
fn sigkill_never_loses_an_acknowledged_batch_raw() {
    crash_loop(Storage::Jsonl(Compression::None), "none", 60, 12);
}

/// Writer processes that are killed and reaped when the test ends, however it ends.
struct KillOnDrop(Vec<std::process::Child>);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

#[test]
fn sigkill_never_loses_an_acknowledged_batch_postgres() {
    crash_loop(Storage::Postgres, "postgres", 40, 14);
}

#[test]
fn sigkill_never_loses_an_acknowledged_batch_sqlite() {
    crash_loop(Storage::Sqlite, "sqlite", 60, 13);
}

/// Two writer processes racing on one session of a PostgreSQL schema: each appends at a model's
/// pace, and on the fence's conflict resumes from the stored log and goes on. Every batch either of
/// them acknowledged is in the log, intact, at the seqs it was acknowledged at, and no seq was
/// acknowledged twice: exactly one writer wins each race, and the log has no gap.
#[test]
fn two_writer_processes_racing_never_interleave_postgres() {
    // Set up once before the race, so neither writer races the other's setup.
    let Some(schema) = ScratchSchema::new() else { return };
    let root = std::path::PathBuf::from(schema.url());
    let spawn = |seed: u64| {
        Command::new(env!("CARGO_BIN_EXE_crash_writer"))
            .args([root.to_str().unwrap(), "postgres", "s-crash", &seed.to_string(), "8"])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn a writer")
    };
    // Dropped before the schema, so a failing test never leaves writers running against it.
    let mut writers = KillOnDrop(vec![spawn(101), spawn(202)]);
    let (sender, receiver) = mpsc::channel();
    let readers: Vec<_> = writers
        .0
        .iter_mut()
        .enumerate()
        .map(|(writer, child)| {
            let (stdout, sender) = (child.stdout.take().unwrap(), sender.clone());
            std::thread::spawn(move || {
                for line in BufReader::new(stdout).lines() {
                    let Ok(line) = line else { break };
                    let report = match parse_ack(&line) {
                        Some(ack) => Some(ack),
                        None if line == "conflict" => None,
                        None => continue,
                    };
                    if sender.send((writer, report)).is_err() {
                        break;
                    }
                }
            })
        })
        .collect();
    drop(sender);
    let mut acks: Vec<(usize, Ack)> = Vec::new();
    let mut conflicts = [0; 2];
    let count = |acks: &[(usize, Ack)], which: usize| acks.iter().filter(|(writer, _)| *writer == which).count();
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    while count(&acks, 0) < 15 || count(&acks, 1) < 15 || conflicts.iter().sum::<u32>() == 0 {
        // A failure guard: a writer that died or stalled fails the test instead of hanging it.
        assert!(
            std::time::Instant::now() < deadline,
            "the racing writers did not both acknowledge 15 batches in time: {} and {} acks, {conflicts:?} conflicts",
            count(&acks, 0),
            count(&acks, 1),
        );
        for writer in &mut writers.0 {
            if let Some(status) = writer.try_wait().expect("poll a writer") {
                panic!("a racing writer exited ({status}) with {} acks so far", acks.len());
            }
        }
        match receiver.recv_timeout(Duration::from_secs(20)) {
            Ok((writer, Some(ack))) => acks.push((writer, ack)),
            Ok((writer, None)) => conflicts[writer] += 1,
            Err(_) => panic!("a racing writer stopped reporting ({} acks so far)", acks.len()),
        }
    }
    drop(writers);
    for reader in readers {
        reader.join().expect("reader thread");
    }
    acks.extend(receiver.try_iter().filter_map(|(writer, report)| Some((writer, report?))));
    let mut claimed: Vec<(u64, u64)> = acks.iter().map(|(_, ack)| (ack.first, ack.last)).collect();
    claimed.sort();
    for pair in claimed.windows(2) {
        assert!(pair[0].1 < pair[1].0, "two acknowledged batches claim one seq: {pair:?}");
    }
    let all: Vec<Ack> = acks.into_iter().map(|(_, ack)| ack).collect();
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let n_events = check_store(&root, Storage::Postgres, &all, &runtime);
    eprintln!(
        "postgres race: {} acknowledged batches from two processes, {conflicts:?} conflicts, {n_events} events",
        all.len()
    );
}
