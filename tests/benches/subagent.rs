//! Subagent listing benchmarks (issue: subagent crate): a parent with 100 children whose
//! transcripts hold 100 or 10,000 events, listed with every child live, every child cold with a
//! checkpoint-cache hit, and every child cold without a cache; and, in the same run, the design
//! note's "before" (two full materializations and a deep copy per child). The read count of one
//! listing in each mode is printed next to the timings, and so is the before / cold ratio measured
//! with the two listings interleaved round by round.

use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use e2e::fleet::{self, Fleet};
use session_persistence::Compression;
use subagent::SubagentListEntry;

const N_CHILDREN: usize = 100;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
}

fn assert_children(rows: &[SubagentListEntry]) {
    assert_eq!(rows.len(), N_CHILDREN);
    assert!(rows.iter().all(|row| matches!(row, SubagentListEntry::Child(_))), "every row is a child row");
}

/// The medians of the two timings `round` returns, over `rounds` rounds.
fn interleaved_medians(rounds: usize, mut round: impl FnMut() -> (Duration, Duration)) -> (Duration, Duration) {
    let (mut first, mut second): (Vec<Duration>, Vec<Duration>) = (0..rounds).map(|_| round()).unzip();
    first.sort();
    second.sort();
    (first[rounds / 2], second[rounds / 2])
}

fn listing(c: &mut Criterion) {
    let runtime = runtime();
    for (compression, n_events) in [(Compression::Zstd, 100), (Compression::Zstd, 10_000), (Compression::None, 10_000)]
    {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("store");
        runtime.block_on(fleet::write_fleet(&root, compression, N_CHILDREN, n_events));
        let name = format!("list_children/{}/{n_events}", compression.as_str());
        let mut group = c.benchmark_group(&name);
        group.sample_size(10).measurement_time(Duration::from_secs(if n_events > 1_000 { 20 } else { 5 }));

        // Cold, no cache: exactly one streamed read per child.
        let cold = Fleet::open(&root, compression);
        let catalog = cold.runtime(None);
        let before = cold.backend.scans();
        assert_children(&runtime.block_on(fleet::list(&catalog)));
        eprintln!("{name}: cold listing read {} logs", cold.backend.scans() - before);
        group.bench_function("cold", |b| b.iter(|| assert_children(&runtime.block_on(fleet::list(&catalog)))));

        // The ratio to the "before" baseline, measured with the two interleaved so that both see
        // the same machine (this VM drifts by 20-30% between groups run a minute apart).
        let rounds = if n_events > 1_000 { 5 } else { 60 };
        let (cold_median, before_median) = interleaved_medians(rounds, || {
            let started = Instant::now();
            assert_children(&runtime.block_on(fleet::list(&catalog)));
            let cold_time = started.elapsed();
            let started = Instant::now();
            std::hint::black_box(runtime.block_on(fleet::list_before(&cold.persistence, N_CHILDREN)));
            (cold_time, started.elapsed())
        });
        eprintln!(
            "{name}: interleaved over {rounds} rounds: cold {cold_median:?}, before {before_median:?}, before / cold {:.2}x",
            before_median.as_secs_f64() / cold_median.as_secs_f64()
        );

        // The same store after the cache backfill (what `apiproxy cache warm` and `serve` do for a
        // store that arrived without checkpoints): every child's identity cached, zero reads.
        let started = Instant::now();
        let (cache, report) = runtime.block_on(cold.backfilled_cache());
        eprintln!("{name}: the backfill warmed {} sessions in {:?}", report.warmed, started.elapsed());
        let cached = cold.runtime(Some(cache));
        drop(catalog);
        let before = cold.backend.scans();
        assert_children(&runtime.block_on(fleet::list(&cached)));
        eprintln!("{name}: cached listing read {} logs", cold.backend.scans() - before);
        group.bench_function("cold_after_backfill", |b| {
            b.iter(|| assert_children(&runtime.block_on(fleet::list(&cached))))
        });
        drop(cached);

        // The "before" design on the same cold store.
        let labels = runtime.block_on(fleet::list_before(&cold.persistence, N_CHILDREN));
        assert!(labels.iter().all(Option::is_some));
        group.bench_function("before_double_read", |b| {
            b.iter(|| runtime.block_on(fleet::list_before(&cold.persistence, N_CHILDREN)))
        });

        // Every child live: zero reads, the registry's watermark cells. The cold fleet goes first,
        // so the live figure does not pay for memory the cold groups left behind.
        drop(cold);
        let live = Fleet::open(&root, compression);
        let catalog = live.runtime(None);
        live.make_children_live(N_CHILDREN, n_events);
        let before = live.backend.scans();
        let rows = runtime.block_on(fleet::list(&catalog));
        assert_eq!(rows.len(), N_CHILDREN);
        eprintln!("{name}: live listing read {} logs", live.backend.scans() - before);
        group.bench_function("live", |b| b.iter(|| runtime.block_on(fleet::list(&catalog))));
        group.finish();
    }
}

criterion_group!(benches, listing);
criterion_main!(benches);
