//! The reference cache matrix (reference 02 §11.2), adapted: the write policy (1–7) and the cold
//! read ladder with `cached_snapshot` (8–19).

use std::sync::{Arc, atomic::Ordering};

use serde_json::{Value, json};
use session_core::{HeaderMeta, SessionId};
use session_projection::CheckpointRow;
use session_projection_cache::{CacheConfig, CheckpointRecord, MemoryCheckpointStore, RecordIdentity, WriteOutcome};
use tokio_util::sync::CancellationToken;

use crate::support::{
    Call, FlakyStore, Logs, Units, World, WorldOptions, append, event, header, mark, other, turn_end, turn_start,
};

fn marks(values: &[&str]) -> Value {
    json!({ "marks": values })
}

fn row(record: &CheckpointRecord, key: &str) -> CheckpointRow {
    record.rows.get(key).cloned().unwrap_or_else(|| panic!("the record has a row for {key}"))
}

// ---------------------------------------------------------------------------------------------
// Write policy

#[tokio::test]
async fn turn_end_writes_a_row_at_the_turn_end_seq() {
    let world = World::with_units(Units::Reference);
    let session = world.session("s");
    turn_start(&session, 1);
    mark(&session, &["a"]);
    world.cache.settle().await;
    assert_eq!(world.record("s"), None, "nothing is stored before turn/end");

    let end = turn_end(&session, 1);
    world.cache.settle().await;
    let record = world.record("s").expect("turn/end stores the record");
    assert_eq!(record.as_of_seq, end.seq as i64);
    assert_eq!(row(&record, "test/marks"), CheckpointRow { ver: 1, seq: 2, val: json!({"marks": ["a"]}) });
    assert_eq!(row(&record, "test/count"), CheckpointRow { ver: 1, seq: 2, val: json!(3) });
    assert_eq!(record.identity, RecordIdentity { created_at: T0_U64, cwd: None });
    assert_eq!(world.persistence.flushes("s"), 1, "the write flushes the log first");
}

const T0_U64: u64 = crate::support::T0 as u64;

#[tokio::test]
async fn disposal_writes_the_live_value() {
    let world = World::with_units(Units::Reference);
    let session = world.session("s");
    mark(&session, &["a"]);
    mark(&session, &["a", "b"]);
    world.cache.settle().await;
    assert_eq!(world.record("s"), None);
    world.retire("s").await;
    let record = world.record("s").expect("disposal stores the record");
    assert_eq!(record.as_of_seq, 1);
    assert_eq!(row(&record, "test/marks").val, json!({"marks": ["a", "b"]}));
}

#[tokio::test]
async fn count_threshold_writes_on_the_nth_event() {
    let world = World::new(WorldOptions { config: CacheConfig::new(3, 60_000).unwrap(), ..WorldOptions::default() });
    let session = world.session("s");
    mark(&session, &["a"]);
    other(&session);
    world.cache.settle().await;
    assert_eq!(world.record("s"), None, "two events store nothing");
    other(&session);
    world.cache.settle().await;
    assert_eq!(world.record("s").map(|record| record.as_of_seq), Some(2), "the third event stores");

    // The write reset the counter: three more events, one more write.
    other(&session);
    other(&session);
    world.cache.settle().await;
    assert_eq!(world.record("s").map(|record| record.as_of_seq), Some(2));
    other(&session);
    world.cache.settle().await;
    assert_eq!(world.record("s").map(|record| record.as_of_seq), Some(5));
}

#[tokio::test]
async fn interval_writes_when_the_injected_clock_reaches_it() {
    let world = World::new(WorldOptions { config: CacheConfig::new(100, 250).unwrap(), ..WorldOptions::default() });
    let attachment = world.attachment.as_ref().unwrap();
    let session = world.session("s");
    mark(&session, &["a"]);
    mark(&session, &["b"]);
    world.clock.advance(249);
    assert_eq!(attachment.run_due_timers(), 0);
    world.cache.settle().await;
    assert_eq!(world.record("s"), None, "nothing at 249 ms");

    world.clock.advance(1);
    // The attachment's own timer may have seen the clock move first; either way one write runs.
    assert!(attachment.run_due_timers() <= 1);
    world.cache.settle().await;
    let record = world.record("s").expect("stored at 250 ms");
    assert_eq!(row(&record, "test/marks").val, marks(&["b"]));
    assert_eq!(attachment.run_due_timers(), 0, "the write disarmed the timer");

    // The timer is armed at the first dirty event after a write, not slid by later ones; an event
    // that arrives after the due time writes at once.
    world.clock.advance(100);
    mark(&session, &["c"]);
    world.clock.advance(200);
    mark(&session, &["d"]);
    world.cache.settle().await;
    assert_eq!(world.record("s").map(|record| record.as_of_seq), Some(1));
    world.clock.advance(50);
    mark(&session, &["e"]);
    world.cache.settle().await;
    let record = world.record("s").unwrap();
    assert_eq!((record.as_of_seq, row(&record, "test/marks").val), (4, marks(&["e"])));
}

#[tokio::test]
async fn write_of_a_never_dirty_session_stores_init_rows() {
    let world = World::with_units(Units::Reference);
    let session = world.session("s");
    assert_eq!(world.cache.write(&session).await.unwrap(), WriteOutcome::Stored { as_of_seq: -1 });
    let record = world.record("s").unwrap();
    assert_eq!(row(&record, "test/marks"), CheckpointRow { ver: 1, seq: -1, val: Value::Null });
    assert_eq!(row(&record, "test/count"), CheckpointRow { ver: 1, seq: -1, val: json!(0) });
    assert_eq!(world.cache.write(&session).await.unwrap(), WriteOutcome::Unchanged { as_of_seq: -1 });
}

#[tokio::test]
async fn write_rejects_a_state_that_is_not_lossless_json() {
    let world = World::with_units(Units::Lossy);
    let session = world.session("s");
    mark(&session, &["a"]);
    append(&session, "test/huge", json!({}));
    let error = world.cache.write(&session).await.unwrap_err();
    assert_eq!(
        error.to_string(),
        "projection checkpoint is not losslessly JSON-serializable (a unit state violates the plain-JSON contract)"
    );
    assert!(
        matches!(&error, session_projection_cache::CacheError::NotLossless { key, .. } if key == "test/huge"),
        "{error:?}"
    );
    assert_eq!(world.record("s"), None);
}

#[tokio::test]
async fn detaching_the_policy_disarms_its_timers() {
    let mut world = World::new(WorldOptions { config: CacheConfig::new(100, 250).unwrap(), ..WorldOptions::default() });
    let session = world.session("s");
    mark(&session, &["a"]);
    assert_eq!(world.attachment.as_ref().unwrap().dirty_sessions(), 1);
    world.attachment.take().unwrap().detach();
    world.clock.advance(10_000);
    mark(&session, &["b"]);
    turn_start(&session, 1);
    turn_end(&session, 1);
    world.retire("s").await;
    assert_eq!(world.record("s"), None, "nothing is written once the policy is detached");
}

#[tokio::test(flavor = "current_thread")]
async fn failed_turn_end_write_is_logged_and_the_next_one_heals() {
    let (logs, _guard) = Logs::capture();
    let flaky = Arc::new(FlakyStore::new(Arc::new(MemoryCheckpointStore::new())));
    let world = World::new(WorldOptions { records: flaky.clone(), ..WorldOptions::default() });
    let session = world.session("fail-soft");
    turn_start(&session, 1);
    mark(&session, &["a"]);
    flaky.failing_puts.store(1, Ordering::SeqCst);
    turn_end(&session, 1);
    world.cache.settle().await;
    assert_eq!(world.record("fail-soft"), None, "the failed write stored nothing");
    assert!(
        logs.contains("session projection cache: turn/end write for \"fail-soft\" failed (cache stays stale): "),
        "{:?}",
        logs.all()
    );
    assert_eq!(world.cache.stats().write_failures, 1);

    turn_start(&session, 2);
    mark(&session, &["b"]);
    let end = turn_end(&session, 2);
    world.cache.settle().await;
    let record = world.record("fail-soft").expect("the next turn/end heals the record");
    assert_eq!((record.as_of_seq, row(&record, "test/marks").val), (end.seq as i64, marks(&["b"])));
}

#[tokio::test]
async fn failed_count_write_gives_its_events_back() {
    let flaky = Arc::new(FlakyStore::new(Arc::new(MemoryCheckpointStore::new())));
    let world = World::new(WorldOptions {
        config: CacheConfig::new(3, 60_000).unwrap(),
        records: flaky.clone(),
        ..WorldOptions::default()
    });
    let session = world.session("s");
    flaky.failing_puts.store(1, Ordering::SeqCst);
    for _ in 0..3 {
        other(&session);
    }
    world.cache.settle().await;
    assert_eq!(world.record("s"), None);
    // The three events are owed again, so the very next event reaches the threshold.
    mark(&session, &["a"]);
    world.cache.settle().await;
    assert_eq!(world.record("s").map(|record| record.as_of_seq), Some(3));
}

#[tokio::test]
async fn failed_flush_stores_nothing() {
    let world = World::with_units(Units::Reference);
    let session = world.session("s");
    mark(&session, &["a"]);
    world.persistence.failing_flushes.store(1, Ordering::SeqCst);
    let error = world.cache.write(&session).await.unwrap_err();
    assert_eq!(error.to_string(), "disk unavailable (injected)");
    assert_eq!(world.record("s"), None, "no record may lead the durable log");
    assert_eq!(world.cache.write(&session).await.unwrap(), WriteOutcome::Stored { as_of_seq: 0 });
}

// ---------------------------------------------------------------------------------------------
// Cold read

/// The reference's 4-event log: marks `[a]` at 0, `[a, b]` at 2.
fn four_events() -> Vec<Arc<session_core::SessionEvent>> {
    vec![
        event(0, "test/mark", marks(&["a"])),
        event(1, "test/other", json!({})),
        event(2, "test/mark", marks(&["a", "b"])),
        event(3, "test/other", json!({})),
    ]
}

async fn cold_world(id: &str, events: Vec<Arc<session_core::SessionEvent>>) -> World {
    let world = World::new(WorldOptions { policy: false, ..WorldOptions::default() });
    world.stored_log(header(id, 0), events).await;
    world
}

async fn cold(world: &World, id: &str) -> session_projection::Snapshot {
    world.cache.cold_snapshot(&SessionId::from(id), &CancellationToken::new()).await.unwrap()
}

#[tokio::test]
async fn row_plus_bounded_tail_read() {
    let events = four_events();
    let world = cold_world("s", events.clone()).await;
    world.put_record("s", &world.record_of(&header("s", 0), &events[..2]));
    let snapshot = cold(&world, "s").await;
    assert_eq!(world.take_reads("s"), vec![Call::ReadFrom(1)]);
    assert_eq!((snapshot.as_of_seq, snapshot.values.get("test/marks")), (3, Some(&marks(&["a", "b"]))));
    let record = world.record("s").unwrap();
    assert_eq!(record.as_of_seq, 3);
    assert_eq!(row(&record, "test/marks"), CheckpointRow { ver: 1, seq: 3, val: marks(&["a", "b"]) });
    assert_eq!(row(&record, "test/count"), CheckpointRow { ver: 1, seq: 3, val: json!(4) });

    // Current now: the next cold read proves the anchor and writes nothing back.
    let stored = world.cache.stats().records_stored;
    assert_eq!(cold(&world, "s").await, snapshot);
    assert_eq!(world.take_reads("s"), vec![Call::ReadFrom(3)]);
    assert_eq!(world.cache.stats().records_stored, stored);
}

#[tokio::test]
async fn version_mismatched_row_costs_one_full_read() {
    let events = four_events();
    let world = cold_world("s", events.clone()).await;
    let mut record = world.record_of(&header("s", 0), &events[..2]);
    record.rows.get_mut("test/marks").unwrap().ver = 99;
    world.put_record("s", &record);
    let snapshot = cold(&world, "s").await;
    assert_eq!(world.take_reads("s"), vec![Call::Stream]);
    assert_eq!(snapshot.values.get("test/marks"), Some(&marks(&["a", "b"])));
    assert_eq!(row(&world.record("s").unwrap(), "test/marks").ver, 1);
}

#[tokio::test]
async fn row_beyond_the_log_end_falls_back_to_a_full_read() {
    let events: Vec<_> = four_events().into_iter().take(3).collect();
    let world = cold_world("s", events.clone()).await;
    let mut record = world.record_of(&header("s", 0), &events);
    record.as_of_seq = 9;
    for row in record.rows.values_mut() {
        row.seq = 9;
    }
    world.put_record("s", &record);
    let snapshot = cold(&world, "s").await;
    assert_eq!(world.take_reads("s"), vec![Call::ReadFrom(9), Call::Stream]);
    assert_eq!((snapshot.as_of_seq, snapshot.values.get("test/marks")), (2, Some(&marks(&["a", "b"]))));
    assert_eq!(world.record("s").unwrap().as_of_seq, 2, "the record proven wrong is replaced");
}

#[tokio::test]
async fn malformed_row_falls_back_to_a_full_read() {
    let events = four_events();
    let world = cold_world("s", events.clone()).await;
    let mut record = world.record_of(&header("s", 0), &events[..2]);
    record.rows.get_mut("test/marks").unwrap().val = json!("not an object");
    world.put_record("s", &record);
    let snapshot = cold(&world, "s").await;
    assert_eq!(world.take_reads("s"), vec![Call::ReadFrom(1), Call::Stream]);
    assert_eq!(snapshot.values.get("test/marks"), Some(&marks(&["a", "b"])));
}

#[tokio::test(flavor = "current_thread")]
async fn write_back_failure_is_logged_and_the_snapshot_served() {
    let (logs, _guard) = Logs::capture();
    let flaky = Arc::new(FlakyStore::new(Arc::new(MemoryCheckpointStore::new())));
    let world = World::new(WorldOptions { records: flaky.clone(), policy: false, ..WorldOptions::default() });
    world.stored_log(header("soft", 0), four_events()).await;
    flaky.failing_puts.store(1, Ordering::SeqCst);
    let snapshot = cold(&world, "soft").await;
    assert_eq!(snapshot.values.get("test/marks"), Some(&marks(&["a", "b"])));
    assert!(
        logs.contains("session projection cache: cold-read write-back for \"soft\" failed (cache stays stale): "),
        "{:?}",
        logs.all()
    );
    assert_eq!(world.record("soft"), None);
}

#[tokio::test]
async fn unknown_session_is_not_found() {
    for units in [Units::Reference, Units::Zero] {
        let world = World::new(WorldOptions { units, policy: false, ..WorldOptions::default() });
        let error = world.cache.cold_snapshot(&SessionId::from("nope"), &CancellationToken::new()).await.unwrap_err();
        assert!(error.is_not_found(), "{error:?}");
        assert_eq!(error.to_string(), "session \"nope\" not found");
    }
}

#[tokio::test]
async fn record_of_another_lifetime_is_replaced_by_the_real_log() {
    let events = four_events();
    let world = cold_world("s", events.clone()).await;
    let mut record = world.record_of(&header("s", 999), &events[..2]);
    record.rows.get_mut("test/marks").unwrap().val = marks(&["phantom"]);
    world.put_record("s", &record);
    let snapshot = cold(&world, "s").await;
    assert_eq!(world.take_reads("s"), vec![Call::ReadFrom(1), Call::Stream]);
    assert_eq!(snapshot.values.get("test/marks"), Some(&marks(&["a", "b"])));
    assert_eq!(world.record("s").unwrap().identity, RecordIdentity { created_at: 0, cwd: None });
}

#[tokio::test]
async fn cached_snapshot_is_none_when_every_row_is_version_mismatched() {
    let events = four_events();
    let world = cold_world("s", events.clone()).await;
    let mut record = world.record_of(&header("s", 0), &events);
    for row in record.rows.values_mut() {
        row.ver = 99;
    }
    world.put_record("s", &record);
    assert_eq!(world.cache.cached_snapshot(&header("s", 0)).await, None);
}

#[tokio::test]
async fn identity_includes_cwd() {
    let world = World::new(WorldOptions { policy: false, ..WorldOptions::default() });
    let mut stored = header("s", 0);
    stored.cwd = Some("/work".into());
    world.put_record("s", &world.record_of(&stored, &four_events()));
    assert!(world.cache.cached_snapshot(&stored).await.is_some());
    let mut elsewhere = stored.clone();
    elsewhere.cwd = Some("/elsewhere".into());
    assert_eq!(world.cache.cached_snapshot(&elsewhere).await, None);
    assert_eq!(world.cache.cached_snapshot(&header("s", 0)).await, None);
}

#[tokio::test]
async fn zero_units_serve_the_cut_and_no_values() {
    let world = World::new(WorldOptions { units: Units::Zero, policy: false, ..WorldOptions::default() });
    world.stored_log(header("s", 0), four_events().into_iter().take(3).collect()).await;
    let snapshot = cold(&world, "s").await;
    assert_eq!((snapshot.as_of_seq, snapshot.values.len(), snapshot.failures.len()), (2, 0, 0));
    assert_eq!(world.take_reads("s"), vec![Call::Stream]);
    assert_eq!(world.record("s"), None, "nothing to write back");
    // The reference's "zero units + empty stored log": persistence stores no empty log, so a
    // session that never appended is not found.
    let error = world.cache.cold_snapshot(&SessionId::from("empty"), &CancellationToken::new()).await.unwrap_err();
    assert!(error.is_not_found());
}

#[tokio::test]
async fn cached_snapshot_serves_a_matching_header_only() {
    let world = World::new(WorldOptions { policy: false, ..WorldOptions::default() });
    let mut events = four_events();
    events.push(event(4, "test/other", json!({})));
    world.put_record("s", &world.record_of(&header("s", 0), &events));
    let snapshot = world.cache.cached_snapshot(&header("s", 0)).await.expect("the record serves");
    assert_eq!(snapshot.as_of_seq, 4);
    assert_eq!(Value::Object(snapshot.values), json!({"test/marks": {"marks": ["a", "b"]}}));
    assert_eq!(world.cache.cached_snapshot(&header("s", 1)).await, None, "a recreated id");
    assert_eq!(world.cache.cached_snapshot(&header("unknown", 0)).await, None);
    assert_eq!(world.take_reads("s"), vec![], "zero log reads");
}

/// The read API hops to the blocking pool itself, so it serves the same values awaited on a
/// multi-thread runtime's worker as on a current-thread runtime; a batch is one hop, in order.
async fn check_cached_reads_on_this_runtime() {
    let world = World::new(WorldOptions { policy: false, ..WorldOptions::default() });
    let mut events = four_events();
    events.push(event(4, "test/other", json!({})));
    world.put_record("s", &world.record_of(&header("s", 0), &events));
    let single = world.cache.cached_snapshot(&header("s", 0)).await.expect("the record serves");
    assert_eq!(Value::Object(single.values.clone()), json!({"test/marks": {"marks": ["a", "b"]}}));
    let headers = vec![Arc::new(header("unknown", 0)), Arc::new(header("s", 0)), Arc::new(header("s", 1))];
    assert_eq!(world.cache.cached_snapshots(headers).await, vec![None, Some(single), None]);
    assert_eq!(world.cache.cached_snapshots(Vec::new()).await, vec![]);
    assert_eq!(world.take_reads("s"), vec![], "zero log reads");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cached_reads_serve_on_a_multi_thread_runtime() {
    check_cached_reads_on_this_runtime().await;
}

#[tokio::test(flavor = "current_thread")]
async fn cached_reads_serve_on_a_current_thread_runtime() {
    check_cached_reads_on_this_runtime().await;
}

#[tokio::test]
async fn cached_snapshot_reports_the_lowest_watermark() {
    let world = World::new(WorldOptions { units: Units::Property, policy: false, ..WorldOptions::default() });
    let events = four_events();
    let mut record = world.record_of(&header("s", 0), &events);
    record.rows.get_mut("test/sum").unwrap().seq = 1;
    world.put_record("s", &record);
    assert_eq!(world.cache.cached_snapshot(&header("s", 0)).await.map(|snapshot| snapshot.as_of_seq), Some(1));
}

// ---------------------------------------------------------------------------------------------
// Ours: ordering of writes, single flight, cancellation

#[tokio::test]
async fn an_older_cut_never_replaces_a_newer_one() {
    let world = World::with_units(Units::Reference);
    let session = world.session_with("s", HeaderMeta { cwd: Some("/work".into()), ..HeaderMeta::default() });
    // A detached twin of the same lifetime, two events behind.
    let twin = session_core::Session::create_with_types(
        session.header().as_ref().clone(),
        None,
        world.clock.clone(),
        crate::support::known_types(),
    )
    .unwrap();
    for n in 0..5 {
        mark(&session, &[n.to_string().as_str()]);
    }
    mark(&twin, &["old"]);
    assert_eq!(world.cache.write(&session).await.unwrap(), WriteOutcome::Stored { as_of_seq: 4 });
    assert_eq!(world.cache.write(&twin).await.unwrap(), WriteOutcome::Superseded { as_of_seq: 0, stored_seq: 4 });
    assert_eq!(row(&world.record("s").unwrap(), "test/marks").val, marks(&["4"]));

    // Many writes racing: whatever order they land in, the newest cut stays.
    let cuts: Vec<_> = (0..8)
        .map(|n| {
            let twin = session_core::Session::create_with_types(
                session.header().as_ref().clone(),
                None,
                world.clock.clone(),
                crate::support::known_types(),
            )
            .unwrap();
            for m in 0..(6 + n) {
                mark(&twin, &[format!("{n}.{m}").as_str()]);
            }
            twin
        })
        .collect();
    let writes = cuts.iter().rev().map(|twin| world.cache.write(twin));
    for outcome in futures::future::join_all(writes).await {
        outcome.unwrap();
    }
    assert_eq!(world.record("s").unwrap().as_of_seq, 12);
}

#[tokio::test]
async fn concurrent_cold_reads_share_one_read() {
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let world = World::new(WorldOptions { gate: Some(gate.clone()), policy: false, ..WorldOptions::default() });
    world.stored_log(header("s", 0), four_events()).await;
    let id = SessionId::from("s");
    let cancel = CancellationToken::new();
    let (first, second, third, ()) = tokio::join!(
        world.cache.cold_snapshot(&id, &cancel),
        world.cache.cold_snapshot(&id, &cancel),
        world.cache.cold_snapshot(&id, &cancel),
        async { gate.add_permits(8) },
    );
    let first = first.unwrap();
    assert_eq!(second.unwrap(), first);
    assert_eq!(third.unwrap(), first);
    assert_eq!(world.take_reads("s"), vec![Call::Stream]);
    let stats = world.cache.stats();
    assert_eq!((stats.cold_reads, stats.shared_cold_reads), (1, 2));

    // Once finished, the next caller reads again (from the record written back).
    cold(&world, "s").await;
    assert_eq!(world.take_reads("s"), vec![Call::ReadFrom(3)]);
}

#[tokio::test]
async fn a_cancelled_caller_leaves_the_shared_read_to_the_others() {
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let world = World::new(WorldOptions { gate: Some(gate.clone()), policy: false, ..WorldOptions::default() });
    world.stored_log(header("s", 0), four_events()).await;
    let id = SessionId::from("s");
    let (impatient, patient) = (CancellationToken::new(), CancellationToken::new());
    let (cancelled, served, ()) =
        tokio::join!(world.cache.cold_snapshot(&id, &impatient), world.cache.cold_snapshot(&id, &patient), async {
            impatient.cancel();
            tokio::task::yield_now().await;
            gate.add_permits(8);
        },);
    assert!(matches!(cancelled, Err(session_projection_cache::CacheError::Cancelled)), "{cancelled:?}");
    assert_eq!(served.unwrap().values.get("test/marks"), Some(&marks(&["a", "b"])));
    assert_eq!(world.take_reads("s"), vec![Call::Stream]);

    let cancelled = CancellationToken::new();
    cancelled.cancel();
    let error = world.cache.cold_snapshot(&id, &cancelled).await.unwrap_err();
    assert!(matches!(error, session_projection_cache::CacheError::Cancelled));
}

#[tokio::test]
async fn a_cold_read_of_a_log_with_an_open_turn_folds_the_stored_events_only() {
    let world = World::with_units(Units::Reference);
    let session = world.session("s");
    turn_start(&session, 1);
    mark(&session, &["a"]);
    let live = world.registry.snapshot(&session);
    world.retire("s").await;
    world.records.remove(&SessionId::from("s")).unwrap();
    world.take_reads("s");
    let snapshot = cold(&world, "s").await;
    assert_eq!(snapshot, live, "no crash closer is folded");
    // The streamed view carried closers, so the stored log was read once more.
    assert_eq!(world.take_reads("s"), vec![Call::Stream, Call::ReadFrom(0)]);
    assert_eq!(world.record("s").unwrap().as_of_seq, 1);
}
