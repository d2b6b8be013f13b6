//! Profiling aid (not committed): lists a 100 x 10,000-event fleet cold, repeatedly.
use e2e::fleet::{self, Fleet};
use session_persistence::Compression;
use std::time::Instant;
fn main() {
    let compression =
        if std::env::args().nth(1).as_deref() == Some("none") { Compression::None } else { Compression::Zstd };
    let root = std::path::PathBuf::from(format!("/tmp/fleet-{}", compression.as_str()));
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    if !root.exists() {
        runtime.block_on(fleet::write_fleet(&root, compression, 100, 10_000));
    }
    let fleet = Fleet::open(&root, compression);
    let catalog = fleet.runtime(None);
    for _ in 0..3 {
        let started = Instant::now();
        let rows = runtime.block_on(fleet::list(&catalog));
        eprintln!("{} rows in {:?}", rows.len(), started.elapsed());
    }
}
