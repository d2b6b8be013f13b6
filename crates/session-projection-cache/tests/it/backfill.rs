//! The backfill: a record for every stored session that lacks a current one, computed exactly as
//! a cold read computes it, resumable, and never touching a current record.

use std::sync::Arc;

use serde_json::json;
use session_projection_cache::{BackfillOptions, BackfillReport};
use tokio_util::sync::CancellationToken;

use crate::support::{World, WorldOptions, event, header};

fn log(n_marks: usize) -> Vec<Arc<session_core::SessionEvent>> {
    (0..n_marks).map(|seq| event(seq as u64, "test/mark", json!({"marks": [format!("m{seq}")]}))).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backfill_warms_every_session_once_and_changes_no_value() {
    let world = World::new(WorldOptions { policy: false, ..WorldOptions::default() });
    for (id, n_marks) in [("a", 1), ("b", 3), ("c", 2)] {
        world.stored_log(header(id, 0), log(n_marks)).await;
    }
    // A session that already has a current record keeps it, unread.
    let current = world.record_of(&header("c", 0), &log(2));
    world.put_record("c", &current);
    assert!(world.record("a").is_none());

    let mut seen = Vec::new();
    let report = world
        .cache
        .backfill(BackfillOptions::default(), &CancellationToken::new(), |report| seen.push(*report))
        .await
        .unwrap();
    assert_eq!(report, BackfillReport { sessions: 3, done: 3, current: 1, warmed: 2, failed: 0 });
    assert_eq!(seen.iter().map(|report| report.done).collect::<Vec<_>>(), [1, 2, 3], "progress after each session");
    assert!(world.take_reads("c").is_empty(), "a current record is not read again");
    assert_eq!(world.record("c"), Some(current));
    // Each record holds what a fold of its log gives.
    for (id, n_marks) in [("a", 1), ("b", 3)] {
        assert_eq!(world.record(id), Some(world.record_of(&header(id, 0), &log(n_marks))), "{id}");
        let served = world.cache.cached_snapshot(&header(id, 0)).await.expect("served from the record");
        let folded = world.registry.restore(&Default::default(), log(n_marks).iter().map(|event| &**event), 0).unwrap();
        assert_eq!(served.values, folded.snapshot.values, "{id}");
    }

    // Resumable: a second run finds everything current and reads nothing.
    for id in ["a", "b", "c"] {
        world.take_reads(id);
    }
    let again = world.cache.backfill(BackfillOptions::default(), &CancellationToken::new(), |_| {}).await.unwrap();
    assert_eq!(again, BackfillReport { sessions: 3, done: 3, current: 3, warmed: 0, failed: 0 });
    for id in ["a", "b", "c"] {
        assert!(world.take_reads(id).is_empty(), "{id}");
    }
    assert!(world.cache.cached_snapshot(&header("zz", 0)).await.is_none());
    let cancelled = CancellationToken::new();
    cancelled.cancel();
    assert!(world.cache.backfill(BackfillOptions::default(), &cancelled, |_| {}).await.is_err());
}

/// Counts how a backfill asks for records: one at a time, or in batches (and how large).
#[derive(Debug, Default)]
struct CountingRecords {
    inner: session_projection_cache::MemoryCheckpointStore,
    gets: std::sync::atomic::AtomicUsize,
    batches: std::sync::Mutex<Vec<usize>>,
}

impl session_projection_cache::CheckpointStore for CountingRecords {
    fn get(
        &self,
        id: &session_core::SessionId,
    ) -> session_projection_cache::Result<Option<session_projection_cache::CheckpointRecord>> {
        self.gets.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        self.inner.get(id)
    }

    fn get_many(
        &self,
        ids: &[session_core::SessionId],
    ) -> Vec<session_projection_cache::Result<Option<session_projection_cache::CheckpointRecord>>> {
        self.batches.lock().unwrap().push(ids.len());
        ids.iter().map(|id| self.inner.get(id)).collect()
    }

    fn put(
        &self,
        id: &session_core::SessionId,
        record: &session_projection_cache::CheckpointRecord,
    ) -> session_projection_cache::Result<()> {
        self.inner.put(id, record)
    }

    fn remove(&self, id: &session_core::SessionId) -> session_projection_cache::Result<bool> {
        self.inner.remove(id)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backfill_checks_records_in_batches_not_one_by_one() {
    let records = Arc::new(CountingRecords::default());
    let world = World::new(WorldOptions { policy: false, records: records.clone(), ..WorldOptions::default() });
    for i in 0..600 {
        world.stored_log(header(&format!("s{i:03}"), 0), log(1)).await;
    }
    let first = world.cache.backfill(BackfillOptions::default(), &CancellationToken::new(), |_| {}).await.unwrap();
    assert_eq!((first.warmed, first.current), (600, 0));
    records.batches.lock().unwrap().clear();
    records.gets.store(0, std::sync::atomic::Ordering::SeqCst);

    // A warm store: every record current, read 256 at a time, none on its own.
    let options = BackfillOptions { pause: std::time::Duration::from_millis(1) };
    let again = world.cache.backfill(options, &CancellationToken::new(), |_| {}).await.unwrap();
    assert_eq!(again, BackfillReport { sessions: 600, done: 600, current: 600, warmed: 0, failed: 0 });
    assert_eq!(*records.batches.lock().unwrap(), [256, 256, 88]);
    assert_eq!(records.gets.load(std::sync::atomic::Ordering::SeqCst), 0);
}
