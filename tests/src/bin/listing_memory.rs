//! Peak memory of a cold listing: 8 children whose transcripts are about 50 MB each (raw JSONL),
//! listed with no cache, so every child costs one full streamed read and fold.
//!
//! `listing_memory` writes the store into a temp dir, then lists it in a fresh child process
//! (`listing_memory list <root> <zstd|none>`) and reports that process's peak resident set size
//! before and after the listing. Run by `cargo xtask bench`.

use std::{path::PathBuf, process::Command, time::Instant};

use e2e::fleet::{self, Fleet};
use session_persistence::Compression;

const N_CHILDREN: usize = 8;
/// About 50 MB of raw JSONL per child at the workload's 373 bytes per event.
const N_EVENTS: u64 = 134_000;

/// `VmHWM` (peak resident set) of this process, in MiB.
fn peak_rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|value| value.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(f64::NAN, |kib| kib / 1024.0)
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime")
}

fn compression(name: &str) -> Compression {
    if name == "none" { Compression::None } else { Compression::Zstd }
}

fn list(root: PathBuf, compression: Compression) {
    let runtime = runtime();
    let fleet = Fleet::open(&root, compression);
    let catalog = fleet.runtime(None);
    let before = peak_rss_mib();
    let started = Instant::now();
    let rows = runtime.block_on(fleet::list(&catalog));
    let elapsed = started.elapsed();
    let after = peak_rss_mib();
    println!(
        "rows={} reads={} elapsed_ms={} peak_rss_before_mib={before:.1} peak_rss_after_mib={after:.1}",
        rows.len(),
        fleet.backend.scans(),
        elapsed.as_millis()
    );
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let [_, mode, root, encoding] = &args[..]
        && mode == "list"
    {
        list(PathBuf::from(root), compression(encoding));
        return;
    }
    for encoding in ["zstd", "none"] {
        let dir = tempfile::tempdir().expect("temp dir");
        let root = dir.path().join("store");
        let started = Instant::now();
        runtime().block_on(fleet::write_fleet(&root, compression(encoding), N_CHILDREN, N_EVENTS));
        let raw_bytes: u64 = (0..N_CHILDREN)
            .map(|idx| {
                let path = root.join("--srv-agents-bench--").join(fleet::child_id(idx).as_str());
                let file = path.join(compression(encoding).file_name());
                std::fs::metadata(file).map(|metadata| metadata.len()).unwrap_or(0)
            })
            .sum();
        eprintln!(
            "{encoding}: wrote {N_CHILDREN} children x {N_EVENTS} events ({:.0} MB on disk) in {:.1?}",
            raw_bytes as f64 / 1e6,
            started.elapsed()
        );
        let output = Command::new(std::env::current_exe().expect("own path"))
            .args(["list", root.to_str().expect("utf-8 temp path"), encoding])
            .output()
            .expect("run the listing process");
        print!("cold listing, {encoding}, {N_CHILDREN} children x ~50 MB: {}", String::from_utf8_lossy(&output.stdout));
        if !output.status.success() {
            eprintln!("{}", String::from_utf8_lossy(&output.stderr));
            std::process::exit(1);
        }
    }
}
