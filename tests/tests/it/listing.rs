//! The listing cost model end to end, on a real JSONL store (and a PostgreSQL schema when
//! `SESSION_PG_URL` names a server): a cold child costs exactly one log read per listing, a
//! checkpoint-cache hit and a live child cost none, and every path (and the design note's
//! "before" double read) finds the same identities.

use e2e::fleet::{self, Fleet};
use session_persistence::Compression;
use subagent::SubagentListEntry;

const N_CHILDREN: usize = 6;
const N_EVENTS: u64 = 600;

fn labels(rows: &[SubagentListEntry]) -> Vec<Option<String>> {
    rows.iter()
        .map(|row| match row {
            SubagentListEntry::Child(child) => child.mode.label().map(str::to_owned),
            SubagentListEntry::Diagnostic(diagnostic) => panic!("unexpected diagnostic row {diagnostic:?}"),
        })
        .collect()
}

#[test]
fn every_rung_lists_the_same_children_at_its_documented_cost() {
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    for compression in [Compression::Zstd, Compression::None] {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("store");
        runtime.block_on(fleet::write_fleet(&root, compression, N_CHILDREN, N_EVENTS));
        let cold = Fleet::open(&root, compression);
        let expected: Vec<Option<String>> = (0..N_CHILDREN).map(|idx| Some(format!("child task {idx}"))).collect();

        let catalog = cold.runtime(None);
        for _ in 0..2 {
            let before = cold.backend.scans();
            let rows = runtime.block_on(fleet::list(&catalog));
            assert_eq!(labels(&rows), expected);
            assert_eq!(cold.backend.scans() - before, N_CHILDREN as u64, "one read per cold child per listing");
        }

        let (cache, report) = runtime.block_on(cold.backfilled_cache());
        assert_eq!((report.warmed, report.failed), (N_CHILDREN + 1, 0), "the children and the parent: {report:?}");
        let cached = cold.runtime(Some(cache));
        drop(catalog);
        let before = cold.backend.scans();
        assert_eq!(labels(&runtime.block_on(fleet::list(&cached))), expected);
        assert_eq!(cold.backend.scans(), before, "a cache hit reads no log");
        drop(cached);

        let baseline = runtime.block_on(fleet::list_before(&cold.persistence, N_CHILDREN));
        assert_eq!(baseline, expected, "the before design finds the same labels");

        let live = Fleet::open(&root, compression);
        let catalog = live.runtime(None);
        live.make_children_live(N_CHILDREN, N_EVENTS);
        let before = live.backend.scans();
        let rows = runtime.block_on(fleet::list(&catalog));
        assert_eq!(labels(&rows), expected);
        assert_eq!(live.backend.scans(), before, "a live child reads no log");
    }
}

/// The same cost model on a PostgreSQL schema (when `SESSION_PG_URL` names a server): the family
/// query hands the listing its candidates, a cold child costs one log read, a checkpoint hit none,
/// and the rows equal the JSONL store's.
#[test]
fn the_listing_costs_the_same_on_postgres() {
    use session_persistence_postgres::testing::ScratchSchema;
    let Some(schema) = ScratchSchema::new() else { return };
    let store = std::sync::Arc::new(schema.open());
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    runtime.block_on(fleet::write_fleet_into(store.clone(), N_CHILDREN, N_EVENTS));
    let expected: Vec<Option<String>> = (0..N_CHILDREN).map(|idx| Some(format!("child task {idx}"))).collect();
    let cold = Fleet::over(store);
    let catalog = cold.runtime(None);
    for _ in 0..2 {
        let before = cold.backend.scans();
        assert_eq!(labels(&runtime.block_on(fleet::list(&catalog))), expected);
        assert_eq!(cold.backend.scans() - before, N_CHILDREN as u64, "one read per cold child per listing");
    }
    let (cache, report) = runtime.block_on(cold.backfilled_cache());
    assert_eq!((report.warmed, report.failed), (N_CHILDREN + 1, 0), "{report:?}");
    let cached = cold.runtime(Some(cache));
    drop(catalog);
    let before = cold.backend.scans();
    assert_eq!(labels(&runtime.block_on(fleet::list(&cached))), expected);
    assert_eq!(cold.backend.scans(), before, "a cache hit reads no log");
}
