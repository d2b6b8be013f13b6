//! A child process for the crash test: appends batches to a JSONL store (or a SQLite database, or
//! a PostgreSQL schema) forever, printing `ack <first_seq> <last_seq> <hash>` after each batch is
//! durable, until it is killed, and `conflict` each time a write meets another writer's fence and
//! it resumes from the stored log.
//!
//! Usage: `crash_writer <root> <zstd|none|sqlite|postgres> <session-id> <seed> [pace-ms]` (for
//! `sqlite`, `root` is the database file; for `postgres`, the store's URL). With `pace-ms`, the
//! writer waits a random 0..pace-ms between batches, as a host writing at a model's pace does, so
//! a writer resuming from another's fence gets its turn; without it, it writes as fast as it can.

use std::{io::Write, path::PathBuf, sync::Arc};

use e2e::{crash, workload::Prng};
use session_core::{SessionHeader, SessionId};
use session_persistence::{
    Backend, Compression, Coordinator, CoordinatorConfig, JsonlConfig, JsonlStore, PersistenceError, SessionPersistence,
};
use session_persistence_postgres::{PgConfig, PgStore};
use session_persistence_sqlite::{SqliteConfig, SqliteStore};
use tokio_util::sync::CancellationToken;

/// How many conflicts in a row a writer resumes from before it gives up: a writer racing another
/// on a busy machine may lose many rounds in a row, and each loss is a clean resume.
const MAX_CONFLICTS: u32 = 100_000;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (root, compression, id, seed, pace) = match &args[..] {
        [_, root, compression, id, seed] => (root, compression, id, seed, 0),
        [_, root, compression, id, seed, pace] => {
            (root, compression, id, seed, pace.parse().expect("pace is a number"))
        }
        _ => {
            eprintln!("usage: crash_writer <root> <zstd|none|sqlite|postgres> <session-id> <seed> [pace-ms]");
            std::process::exit(2);
        }
    };
    let storage = compression.clone();
    let compression = if compression == "none" { Compression::None } else { Compression::Zstd };
    let seed: u64 = seed.parse().expect("seed is a number");
    // Opened before the runtime starts: a PostgreSQL store blocks on a runtime of its own.
    let store: Arc<dyn Backend> = match storage.as_str() {
        "sqlite" => Arc::new(SqliteStore::open(SqliteConfig::file(root)).expect("open the database")),
        "postgres" => {
            let config = PgConfig::from_url(root).expect("a store URL");
            Arc::new(PgStore::setup(&config).expect("set up the store").0)
        }
        _ => Arc::new(
            JsonlStore::open(JsonlConfig { root: PathBuf::from(root), compression, pack_chunks: true })
                .expect("open store"),
        ),
    };
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    runtime.block_on(async move {
        let id = SessionId::from(id.as_str());
        let cancel = CancellationToken::new();
        let mut prng = Prng::new(seed);
        let mut pacing = Prng::new(seed ^ 0x9e37_79b9_7f4a_7c15);
        let mut stdout = std::io::stdout().lock();
        // A PostgreSQL server may still commit what a killed writer sent last, after this writer
        // resumed, and another writer may race this one: its next write then meets the fence
        // (`Fenced`), and it resumes again (up to 100 times in a row).
        let mut conflicts = 0;
        'resume: loop {
            let persistence = Coordinator::new(store.clone(), CoordinatorConfig::default()).expect("coordinator");
            // Resume: a cold load repairs whatever the previous kill left behind.
            let (mut next_seq, mut open_turn) = match persistence.load(&id, &cancel).await {
                Ok(loaded) => (loaded.events.len() as u64, None),
                Err(err) if err.is_not_found() => {
                    let mut header = SessionHeader::new(id.clone(), 1_000);
                    header.cwd = Some("/crash/test".into());
                    match persistence.create(header, &cancel).await {
                        Ok(()) => (0, None),
                        // Another writer created it first (two writers racing on a shared store):
                        // resume what it wrote.
                        Err(PersistenceError::Collision { .. }) if conflicts < MAX_CONFLICTS => {
                            conflicts += 1;
                            report(&mut stdout, "conflict");
                            continue 'resume;
                        }
                        Err(err) => panic!("create: {err}"),
                    }
                }
                Err(PersistenceError::Fenced { .. }) if conflicts < MAX_CONFLICTS => {
                    conflicts += 1;
                    report(&mut stdout, "conflict");
                    continue 'resume;
                }
                Err(err) => panic!("resume failed: {err}"),
            };
            let mut turn_no = 1_000 + next_seq;
            loop {
                let batch = crash::next_batch(&mut prng, next_seq, &mut open_turn, &mut turn_no);
                let (first, last) = (batch[0].seq, batch[batch.len() - 1].seq);
                let hash = crash::batch_hash(&batch);
                match persistence.append(&id, batch, &cancel).await {
                    Ok(()) => conflicts = 0,
                    Err(PersistenceError::Fenced { .. }) if conflicts < MAX_CONFLICTS => {
                        conflicts += 1;
                        report(&mut stdout, "conflict");
                        continue 'resume;
                    }
                    Err(err) => panic!("append: {err}"),
                }
                report(&mut stdout, &format!("ack {first} {last} {hash}"));
                next_seq = last + 1;
                if pace > 0 {
                    // A true delay, not a wait: pacing spreads the writes out so the parent's
                    // SIGKILL lands between batches as well as inside them.
                    tokio::time::sleep(std::time::Duration::from_millis(pacing.below(pace))).await;
                }
            }
        }
    });
}

/// One line to the parent; a parent that has gone away ends the writer quietly.
fn report(stdout: &mut impl Write, line: &str) {
    if writeln!(stdout, "{line}").and_then(|()| stdout.flush()).is_err() {
        std::process::exit(0);
    }
}
