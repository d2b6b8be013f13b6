//! Fault cases: a unit that fails on one session's log only, a poisoned stored row, and a store
//! that fails and then heals.

use std::sync::{Arc, atomic::Ordering};

use serde_json::json;
use session_core::SessionId;
use session_projection::UnitFailure;
use session_projection_cache::{MemoryCheckpointStore, WriteOutcome};
use tokio_util::sync::CancellationToken;

use crate::support::{
    Call, FlakyStore, Units, World, WorldOptions, append, mark, other, quiet_unit_panics, turn_end, turn_start,
};

#[tokio::test]
async fn a_unit_failing_on_one_session_is_contained_on_every_read_path() {
    quiet_unit_panics();
    for panic in [false, true] {
        let world = World::with_units(Units::Faulty);
        let (broken, healthy) = (world.session("broken"), world.session("healthy"));
        for session in [&broken, &healthy] {
            mark(session, &["a"]);
            other(session);
        }
        append(&broken, "test/fail", json!({ "panic": panic }));
        for session in [&broken, &healthy] {
            other(session);
            append(session, "test/add", json!({ "n": 2 }));
            turn_start(session, 1);
            turn_end(session, 1);
        }
        let live_broken = world.registry.snapshot(&broken);
        let live_healthy = world.registry.snapshot(&healthy);
        let failure = live_broken.failures.get("test/flaky").cloned().expect("the unit failed on this log");
        assert!(matches!(&failure, UnitFailure::Apply { seq: 2, panicked, .. } if *panicked == panic), "{failure:?}");
        assert!(!live_broken.values.contains_key("test/flaky"));
        assert_eq!(live_broken.values.get("test/sum"), Some(&json!({"total": 2, "events": 1})), "others fold on");
        assert!(live_healthy.failures.is_empty());
        assert_eq!(live_healthy.values.get("test/flaky"), Some(&json!(2)));

        world.retire("broken").await;
        world.retire("healthy").await;
        let record = world.record("broken").unwrap();
        assert_eq!(record.rows.get("test/flaky").map(|row| row.seq), Some(1), "its last good row");
        assert_eq!(record.failures.get("test/flaky").map(|failure| failure.seq), Some(2));

        for (id, live) in [("broken", &live_broken), ("healthy", &live_healthy)] {
            let cached = world.cache.cached_snapshot(&world.record_header(id)).await.unwrap();
            assert_eq!(&cached, live, "{id}: cached");
            world.take_reads(id);
            let cold = world.cache.cold_snapshot(&SessionId::from(id), &CancellationToken::new()).await.unwrap();
            assert_eq!(&cold, live, "{id}: cold");
            assert_eq!(world.take_reads(id).len(), 1, "{id}: a recorded failure needs no second read");
        }

        // Without the record, the whole-log fold reports the same failure.
        world.records.remove(&SessionId::from("broken")).unwrap();
        let cold = world.cache.cold_snapshot(&SessionId::from("broken"), &CancellationToken::new()).await.unwrap();
        assert_eq!(cold, live_broken);
    }
}

#[tokio::test]
async fn a_poisoned_row_degrades_its_key_in_the_cached_snapshot_and_is_refolded_cold() {
    quiet_unit_panics();
    let world = World::with_units(Units::Faulty);
    let session = world.session("s");
    append(&session, "test/label", json!({ "label": "fine" }));
    mark(&session, &["a"]);
    let live = world.registry.snapshot(&session);
    world.retire("s").await;

    let mut record = world.record("s").unwrap();
    record.rows.get_mut("test/label").unwrap().val = json!("poison");
    world.put_record("s", &record);
    let header = world.record_header("s");

    let cached = world.cache.cached_snapshot(&header).await.unwrap();
    assert!(matches!(cached.failures.get("test/label"), Some(UnitFailure::View { panicked: true, .. })), "{cached:?}");
    assert!(!cached.values.contains_key("test/label"));
    assert_eq!(cached.values.get("test/marks"), live.values.get("test/marks"), "other keys are served");

    world.take_reads("s");
    let cold = world.cache.cold_snapshot(&SessionId::from("s"), &CancellationToken::new()).await.unwrap();
    assert_eq!(cold, live, "the poisoned row changes no value");
    assert_eq!(world.take_reads("s"), vec![Call::ReadFrom(1), Call::Stream]);
    assert_eq!(world.cache.cached_snapshot(&header).await, Some(live), "the write-back healed the row");
}

#[tokio::test]
async fn a_failing_store_heals_at_the_next_write() {
    let flaky = Arc::new(FlakyStore::new(Arc::new(MemoryCheckpointStore::new())));
    let world = World::new(WorldOptions { records: flaky.clone(), policy: false, ..WorldOptions::default() });
    let session = world.session("s");
    mark(&session, &["a"]);
    flaky.failing_puts.store(2, Ordering::SeqCst);
    let error = world.cache.write(&session).await.unwrap_err();
    assert_eq!(error.to_string(), "checkpoint storage unavailable (injected)");
    mark(&session, &["b"]);
    assert!(world.cache.write(&session).await.is_err());
    assert_eq!(world.record("s"), None);
    assert_eq!(world.cache.write(&session).await.unwrap(), WriteOutcome::Stored { as_of_seq: 1 });
    assert_eq!(world.record("s").unwrap().rows["test/marks"].val, json!({"marks": ["b"]}));
    assert_eq!(world.cache.stats().write_failures, 2);
}
