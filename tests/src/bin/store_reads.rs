//! Cold reads of one workload on every backend, as whole processes of the release `apiproxy`,
//! beside the reference's figures and the decompression floor.
//!
//! `store_reads [--quick] [APIPROXY]` writes a parent with 100 children of 10,000 events each
//! (`e2e::fleet`, one zstd frame per turn, the reference's workload) into a JSONL zstd store, then
//! copies it with `apiproxy copy` into a raw JSONL store, a SQLite database and, with
//! `SESSION_PG_URL`, a PostgreSQL schema of its own (dropped at the end): every backend holds the
//! same events, byte for byte. Then, in rounds that interleave the backends, it times:
//!
//! - the cold listing, `subagents list s-parent --json` (no projection cache: one cold read and
//!   fold per child; its peak memory is `listing_memory`'s);
//! - one cold inspect, `sessions show s-child-0000 --jsonl` (stdout to `/dev/null`);
//! - the floor of the zstd listing: two `zstd -dcq` processes side by side over half the
//!   children's logs each, and of the inspect: one `zstd -dcq` of the child's log.
//!
//! Then it writes 10,000 one-turn sessions (2,000 with `--quick`) into JSONL zstd, copies them into
//! the other backends, and times `sessions list` and `verify` on each against JSONL zstd.
//!
//! It prints medians with [min, max] beside the reference's in-process figures on this machine
//! kind (`../shared/bench/README.md`). `--quick`: 20 children of 2,000 events, 3 rounds; `--keep`
//! leaves the stores in place (for a profiler), the PostgreSQL schemas included, and prints where.
//! Run by `cargo xtask bench`; the figures are in `docs/benchmarks.md` ("Store reads").

use std::{
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::Instant,
};

use e2e::{
    fleet::{PARENT, child_id, write_fleet},
    probe::{PgSchema, quantile, store_dir, timed},
    workload::TranscriptBuilder,
};
use session_core::{SessionHeader, SessionId};
use session_persistence::{Backend, Compression, JsonlConfig, JsonlStore};

/// The sizes and repetitions of one run.
#[derive(Debug, Clone, Copy)]
struct Plan {
    n_children: usize,
    n_events: u64,
    n_rounds: usize,
    /// Sessions of the store that `sessions list` and `verify` walk.
    n_sessions: usize,
}

const FULL: Plan = Plan { n_children: 100, n_events: 10_000, n_rounds: 7, n_sessions: 10_000 };
const QUICK: Plan = Plan { n_children: 20, n_events: 2_000, n_rounds: 3, n_sessions: 2_000 };

/// The reference's in-process figures for the full plan (ms): the cold listing of 100 × 10,000
/// and one cold inspect of a 10,000-event child, per store kind.
const REFERENCE: &[(&str, f64, f64)] =
    &[("jsonl-zstd", 4_362.0, 108.0), ("jsonl-raw", 3_912.0, 101.0), ("sqlite", 4_096.0, 80.0)];

/// One store under test: its label and `--store` argument.
struct Store {
    label: &'static str,
    location: String,
}

/// Runs `program args`, stdout to `/dev/null`, and returns its wall time in ms; panics if it
/// fails.
fn run(program: &Path, args: &[&str]) -> f64 {
    run_parallel(program, &[args.iter().map(|arg| (*arg).to_owned()).collect()])
}

/// Runs the commands side by side and returns the wall time (ms) until the last one ends.
fn run_parallel(program: &Path, batches: &[Vec<String>]) -> f64 {
    let started = Instant::now();
    let children: Vec<_> = batches
        .iter()
        .map(|args| {
            Command::new(program)
                .args(args)
                .env_remove("APIPROXY_LOG")
                .stdout(Stdio::null())
                .spawn()
                .unwrap_or_else(|error| panic!("{} {args:?}: {error}", program.display()))
        })
        .collect();
    for (mut child, args) in children.into_iter().zip(batches) {
        let status = child.wait().expect("wait for the child");
        assert!(status.success(), "{} {args:?}: {status}", program.display());
    }
    started.elapsed().as_secs_f64() * 1e3
}

/// The log files of the fleet's children in a JSONL store, in child order.
fn child_logs(root: &Path, n_children: usize) -> Vec<String> {
    let mut logs = Vec::new();
    for project in std::fs::read_dir(root).expect("the store").flatten() {
        for session in std::fs::read_dir(project.path()).into_iter().flatten().flatten() {
            let name = session.file_name().to_string_lossy().into_owned();
            if name.starts_with("s-child-") {
                logs.push((name, session.path().join(Compression::Zstd.file_name()).display().to_string()));
            }
        }
    }
    logs.sort();
    assert_eq!(logs.len(), n_children, "the fleet's logs under {}", root.display());
    logs.into_iter().map(|(_, path)| path).collect()
}

/// `median [min, max]` of `samples`, in ms.
fn spread(samples: &[f64]) -> String {
    format!("{:.0} ms [{:.0}, {:.0}]", quantile(samples, 0.5), quantile(samples, 0.0), quantile(samples, 1.0))
}

fn main() {
    let mut plan = FULL;
    let mut apiproxy = None;
    let mut keep = false;
    for arg in std::env::args().skip(1) {
        if arg == "--quick" {
            plan = QUICK;
        } else if arg == "--keep" {
            keep = true;
        } else {
            apiproxy = Some(PathBuf::from(arg));
        }
    }
    let apiproxy = apiproxy.unwrap_or_else(|| std::env::current_exe().expect("own path").with_file_name("apiproxy"));
    let dir = store_dir();
    let zstd_root = dir.path().join("jsonl-zstd");
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    timed(&format!("wrote the fleet ({} children × {} events, JSONL zstd)", plan.n_children, plan.n_events), || {
        runtime.block_on(write_fleet(&zstd_root, Compression::Zstd, plan.n_children, plan.n_events));
    });
    let source = zstd_root.display().to_string();
    let mut stores = vec![Store { label: "jsonl-zstd", location: source.clone() }];
    let raw = dir.path().join("jsonl-raw").display().to_string();
    let sqlite = format!("sqlite:{}", dir.path().join("sessions.db").display());
    let schema = std::env::var("SESSION_PG_URL")
        .ok()
        .filter(|url| !url.is_empty())
        .map(|server| PgSchema::create(&server, "store_reads"));
    let mut targets = vec![("jsonl-raw", raw, vec!["--to-compression", "none"]), ("sqlite", sqlite, Vec::new())];
    match &schema {
        Some(schema) => targets.push(("postgres", schema.url.clone(), Vec::new())),
        None => eprintln!(
            "store_reads: SKIPPED the PostgreSQL store: set SESSION_PG_URL=postgres://postgres@127.0.0.1:5432/test"
        ),
    }
    let mut copies = Vec::new();
    for (label, location, flags) in targets {
        let mut args = vec!["copy", "--from", &source, "--to", &location];
        args.extend(flags);
        let ms = run(&apiproxy, &args);
        eprintln!("apiproxy copy into {label}: {:.1} s", ms / 1e3);
        copies.push((label, ms));
        stores.push(Store { label, location });
    }
    if let Some(schema) = &schema {
        // Analyzed, and flushed, so that the server does not write in the background while reads are timed.
        schema.sql(&format!("ANALYZE {0}.sessions; ANALYZE {0}.events; CHECKPOINT;", schema.name));
    }

    let logs = child_logs(&zstd_root, plan.n_children);
    let halves: Vec<Vec<String>> = logs
        .chunks(logs.len().div_ceil(2))
        .map(|half| ["-dcq"].iter().map(|flag| (*flag).to_owned()).chain(half.iter().cloned()).collect())
        .collect();
    let child = child_id(0).to_string();
    let zstd = Path::new("zstd");
    let mut listings: Vec<Vec<f64>> = vec![Vec::new(); stores.len()];
    let mut inspects: Vec<Vec<f64>> = vec![Vec::new(); stores.len()];
    let (mut floor_listing, mut floor_inspect) = (Vec::new(), Vec::new());
    for round in 0..plan.n_rounds + 1 {
        // Round 0 warms the page cache and is not counted.
        let keep = round > 0;
        for (idx, store) in stores.iter().enumerate() {
            let listing = run(&apiproxy, &["subagents", "list", PARENT, "--json", "--store", &store.location]);
            let inspect = run(&apiproxy, &["sessions", "show", &child, "--jsonl", "--store", &store.location]);
            if keep {
                listings[idx].push(listing);
                inspects[idx].push(inspect);
            }
        }
        let listing = run_parallel(zstd, &halves);
        let inspect = run_parallel(zstd, &[vec!["-dcq".to_owned(), logs[0].clone()]]);
        if keep {
            floor_listing.push(listing);
            floor_inspect.push(inspect);
        }
    }

    let full = plan.n_children == FULL.n_children && plan.n_events == FULL.n_events;
    println!();
    println!(
        "cold reads, {} children × {} events, {} rounds (medians [min, max]; reference in-process{})",
        plan.n_children,
        plan.n_events,
        plan.n_rounds,
        if full { "" } else { ": full plan only" }
    );
    println!("| store | listing | vs reference | inspect | vs reference |");
    println!("| --- | ---: | ---: | ---: | ---: |");
    for (idx, store) in stores.iter().enumerate() {
        let reference = REFERENCE.iter().find(|(label, ..)| *label == store.label).filter(|_| full);
        let ratio = |ours: &[f64], theirs: f64| format!("{:.1}×", theirs / quantile(ours, 0.5));
        println!(
            "| {} | {} | {} | {} | {} |",
            store.label,
            spread(&listings[idx]),
            reference.map_or("–".to_owned(), |(_, listing, _)| ratio(&listings[idx], *listing)),
            spread(&inspects[idx]),
            reference.map_or("–".to_owned(), |(_, _, inspect)| ratio(&inspects[idx], *inspect)),
        );
    }
    let zstd_listing = quantile(&listings[0], 0.5);
    println!(
        "| floor: `zstd -dcq`, two processes / one log | {} | listing at {:.2}× the floor | {} | |",
        spread(&floor_listing),
        zstd_listing / quantile(&floor_listing, 0.5),
        spread(&floor_inspect),
    );
    for (label, ms) in copies {
        println!("apiproxy copy from jsonl-zstd into {label}: {:.1} s", ms / 1e3);
    }
    let mut kept = Vec::new();
    kept.extend(schema.filter(|_| keep).map(PgSchema::keep));
    let schema = std::env::var("SESSION_PG_URL")
        .ok()
        .filter(|url| !url.is_empty())
        .map(|server| PgSchema::create(&server, "store_reads_many"));
    many_sessions(&apiproxy, plan, &dir, schema.as_ref());
    if keep {
        kept.extend(schema.map(PgSchema::keep));
        eprintln!("store_reads: kept the stores in {}", dir.keep().display());
        for url in kept {
            eprintln!("store_reads: kept the PostgreSQL store {url} (drop its schema when done)");
        }
    }
}

/// `sessions list` and `verify` of a store of `plan.n_sessions` one-turn sessions, written into
/// JSONL zstd and copied into every other backend.
fn many_sessions(apiproxy: &Path, plan: Plan, dir: &tempfile::TempDir, schema: Option<&PgSchema>) {
    let root = dir.path().join("many-zstd");
    timed(&format!("wrote {} one-turn sessions (JSONL zstd)", plan.n_sessions), || {
        let config = JsonlConfig { root: root.clone(), compression: Compression::Zstd, pack_chunks: true };
        let store = JsonlStore::open(config).expect("open the store");
        for idx in 0..plan.n_sessions {
            let mut header = SessionHeader::new(SessionId::from(format!("many-{idx:05}").as_str()), 1_000 + idx as u64);
            header.cwd = Some("/srv/agents/many".to_owned());
            let turn = TranscriptBuilder::new(idx as u64, 1_772_442_000_000, None).turn();
            store.append_batch(&header, &turn, false).expect("write a session");
        }
    });
    let source = root.display().to_string();
    let mut stores = vec![("jsonl-zstd", source.clone())];
    let raw = dir.path().join("many-raw").display().to_string();
    let sqlite = format!("sqlite:{}", dir.path().join("many.db").display());
    let postgres = schema.map(|schema| schema.url.clone());
    let mut targets = vec![("jsonl-raw", raw, vec!["--to-compression", "none"]), ("sqlite", sqlite, Vec::new())];
    if let Some(postgres) = &postgres {
        targets.push(("postgres", postgres.clone(), Vec::new()));
    }
    for (label, location, flags) in targets {
        let mut args = vec!["copy", "--from", &source, "--to", &location, "--jobs", "8"];
        args.extend(flags);
        let ms = run(apiproxy, &args);
        eprintln!("apiproxy copy of {} sessions into {label}: {:.1} s", plan.n_sessions, ms / 1e3);
        stores.push((label, location));
    }
    let mut lists: Vec<Vec<f64>> = vec![Vec::new(); stores.len()];
    let mut verifies: Vec<Vec<f64>> = vec![Vec::new(); stores.len()];
    for round in 0..plan.n_rounds.min(3) + 1 {
        for (idx, (_, location)) in stores.iter().enumerate() {
            let list = run(apiproxy, &["sessions", "list", "--store", location]);
            let verify = run(apiproxy, &["verify", "--store", location]);
            if round > 0 {
                lists[idx].push(list);
                verifies[idx].push(verify);
            }
        }
    }
    println!();
    println!("{} one-turn sessions (medians [min, max])", plan.n_sessions);
    println!("| store | sessions list | vs JSONL zstd | verify | vs JSONL zstd |");
    println!("| --- | ---: | ---: | ---: | ---: |");
    for (idx, (label, _)) in stores.iter().enumerate() {
        let vs = |samples: &[Vec<f64>]| format!("{:.1}×", quantile(&samples[idx], 0.5) / quantile(&samples[0], 0.5));
        println!(
            "| {label} | {} | {} | {} | {} |",
            spread(&lists[idx]),
            vs(&lists),
            spread(&verifies[idx]),
            vs(&verifies)
        );
    }
}
