//! Fault containment (W1, W3) and the watermark guard (W2): a unit failing on one session, a
//! panicking view or listener, readers racing the drive, replayed and gapped notifications.

use std::sync::Arc;

use parking_lot::Mutex;
use serde_json::{Value, json};
use session_core::{ObserverError, StoreEvent};
use session_projection::{CheckpointRows, ProjectionRegistry, Snapshot, UnitFailure};

use crate::support::{
    Count, DELIBERATE, Feed, Flaky, FragileView, Marks, Sum, append, events_of, fixture, mark, other,
    quiet_unit_panics, store,
};

fn flaky_fixture() -> (crate::support::Fixture, Vec<session_projection::Registration>) {
    let fx = fixture();
    let registrations = vec![
        fx.registry.register(Marks).unwrap(),
        fx.registry.register(Flaky).unwrap(),
        fx.registry.register(Sum).unwrap(),
        fx.registry.register_host_only(Count).unwrap(),
    ];
    (fx, registrations)
}

fn check_failure_is_contained(how: &str, panicked: bool) {
    quiet_unit_panics();
    let (fx, _registrations) = flaky_fixture();
    let (feed, _subscription) = Feed::subscribe(&fx.registry);
    let sick = fx.session("sick");
    let healthy = fx.session("healthy");
    for session in [&sick, &healthy] {
        mark(session, &["a"]);
        append(session, "test/add", json!({ "n": 1 }));
    }
    // The failing event is also one that Marks and Sum read; they must still fold it.
    append(&sick, "test/add", json!({ "n": 10, "fail": how }));
    append(&healthy, "test/add", json!({ "n": 10 }));
    for session in [&sick, &healthy] {
        mark(session, &["b"]);
    }

    let sick_snapshot = fx.registry.snapshot(&sick);
    let healthy_snapshot = fx.registry.snapshot(&healthy);
    assert_eq!(sick_snapshot.as_of_seq, 3);
    assert_eq!(
        sick_snapshot.failures.get("test/flaky"),
        Some(&UnitFailure::Apply {
            seq: 2,
            panicked,
            message: if panicked {
                format!("flaky unit hit event 2 {DELIBERATE}")
            } else {
                "cannot fold event 2".to_owned()
            },
        })
    );
    assert_eq!(sick_snapshot.failures.len(), 1);
    assert!(!sick_snapshot.values.contains_key("test/flaky"));
    // The other units folded every event, the failing one included.
    assert_eq!(sick_snapshot.values["test/marks"], json!({ "marks": ["b"] }));
    assert_eq!(sick_snapshot.values["test/sum"], json!({ "total": 11, "seqs": [1, 2] }));
    assert_eq!(fx.registry.state_of(&sick, "test/count"), Some(Ok(json!(4))));
    assert!(matches!(fx.registry.state_of(&sick, "test/flaky"), Some(Err(UnitFailure::Apply { seq: 2, .. }))));

    // The other session is untouched.
    assert!(healthy_snapshot.failures.is_empty());
    assert_eq!(healthy_snapshot.values["test/flaky"], json!(4));
    assert_eq!(
        Value::Object(healthy_snapshot.values),
        json!({ "test/marks": { "marks": ["b"] }, "test/flaky": 4, "test/sum": { "total": 11, "seqs": [1, 2] } })
    );

    // The feed went on for the other units of the sick session and stopped only for the failed key.
    let frames = feed.take();
    let sick_keys_at_2: Vec<&str> =
        frames.iter().filter(|(session, _, _, seq)| session == "sick" && *seq == 2).map(|f| f.1.as_str()).collect();
    assert_eq!(sick_keys_at_2, ["test/sum"]);
    assert!(!frames.iter().any(|(session, key, _, seq)| session == "sick" && key == "test/flaky" && *seq >= 2));

    // Cold folds report the same failure and values.
    let cold = fx.registry.restore(&CheckpointRows::new(), events_of(&sick), 0).unwrap();
    assert_eq!(cold.snapshot, sick_snapshot);
    assert_eq!(cold.checkpoint, fx.registry.checkpoint(&sick));
    // The failed unit's row is its last good cut, so a restore from the rows meets the failure again.
    let checkpoint = fx.registry.checkpoint(&sick);
    assert_eq!(checkpoint.rows["test/flaky"].seq, 1);
    assert_eq!(checkpoint.rows["test/marks"].seq, 3);
    let floor = fx.registry.restore_floor(&checkpoint.rows).unwrap();
    assert_eq!(floor, 1);
    let events = events_of(&sick);
    let from_rows = fx.registry.restore(&checkpoint.rows, &events[floor as usize..], floor).unwrap();
    assert_eq!(from_rows.snapshot, sick_snapshot);
}

#[test]
fn a_unit_returning_an_error_on_one_session_is_contained_to_its_key() {
    check_failure_is_contained("error", false);
}

#[test]
fn a_unit_panicking_on_one_session_is_contained_to_its_key() {
    check_failure_is_contained("panic", true);
}

#[test]
fn a_failing_lazy_build_is_contained_too() {
    quiet_unit_panics();
    let fx = fixture();
    let session = fx.session("lazy");
    other(&session);
    append(&session, "test/other", json!({ "fail": "panic" }));
    other(&session);
    let _flaky = fx.registry.register(Flaky).unwrap();
    let _count = fx.registry.register_host_only(Count).unwrap();

    let snapshot = fx.registry.snapshot(&session);
    assert!(matches!(snapshot.failures["test/flaky"], UnitFailure::Apply { seq: 1, panicked: true, .. }));
    assert_eq!(fx.registry.state_of(&session, "test/count"), Some(Ok(json!(3))));
    assert!(snapshot.has_failures());
}

#[test]
fn a_failing_view_is_reported_for_its_key_only() {
    quiet_unit_panics();
    let fx = fixture();
    let _fragile = fx.registry.register(FragileView).unwrap();
    let _marks = fx.registry.register(Marks).unwrap();
    let (feed, _subscription) = Feed::subscribe(&fx.registry);
    let session = fx.session("fragile");
    other(&session);
    other(&session);
    assert_eq!(fx.registry.snapshot(&session).values["test/fragile-view"], json!(2));
    mark(&session, &["still"]);

    let snapshot: Snapshot = fx.registry.snapshot(&session);
    assert!(
        matches!(&snapshot.failures["test/fragile-view"], UnitFailure::View { panicked: true, message } if message.contains("cannot render 3")),
        "{:?}",
        snapshot.failures
    );
    assert_eq!(snapshot.values["test/marks"], json!({ "marks": ["still"] }));
    // The feed skipped only the value that could not be rendered.
    let frames: Vec<(String, u64)> = feed.take().into_iter().map(|(_, key, _, seq)| (key, seq)).collect();
    assert_eq!(
        frames,
        [("test/fragile-view".to_owned(), 0), ("test/fragile-view".to_owned(), 1), ("test/marks".to_owned(), 2)]
    );
    // The fold itself is healthy: the checkpoint has the state, with no failure.
    let checkpoint = fx.registry.checkpoint(&session);
    assert_eq!(checkpoint.rows["test/fragile-view"].val, json!(3));
    assert!(checkpoint.failures.is_empty());
}

#[test]
fn a_panicking_listener_does_not_starve_other_listeners_or_units() {
    quiet_unit_panics();
    let fx = fixture();
    let _marks = fx.registry.register(Marks).unwrap();
    let _title = fx.registry.register(crate::support::Title).unwrap();
    let _bad = fx.registry.on_changed(|_: &session_projection::ProjectionChange<'_>| panic!("listener {DELIBERATE}"));
    let (feed, _subscription) = Feed::subscribe(&fx.registry);
    let session = fx.session("listeners");
    mark(&session, &["x"]);
    append(&session, "test/title", json!({ "title": "t" }));

    let frames: Vec<(String, u64)> = feed.take().into_iter().map(|(_, key, _, seq)| (key, seq)).collect();
    assert_eq!(frames, [("test/marks".to_owned(), 0), ("test/title".to_owned(), 1)]);
}

#[test]
fn a_reader_running_before_the_drive_neither_double_counts_nor_loses_frames() {
    // W2: an observer registered before the registry reads while an event is being published.
    let store = store();
    let registry = ProjectionRegistry::new();
    let seen: Arc<Mutex<Vec<Value>>> = Arc::default();
    let early = {
        let registry = Arc::clone(&registry);
        let seen = Arc::clone(&seen);
        move |event: &StoreEvent<'_>| -> Result<(), ObserverError> {
            if let StoreEvent::Event(session, _) = event {
                seen.lock().push(Value::Object(registry.snapshot(session).values));
            }
            Ok(())
        }
    };
    store.add_observer(Arc::new(early));
    let _attachment = registry.attach(&store);
    let _sum = registry.register(Sum).unwrap();
    let (feed, _subscription) = Feed::subscribe(&registry);

    let session = store.create(Some("race".into()), Default::default()).unwrap();
    append(&session, "test/add", json!({ "n": 2 }));
    other(&session);
    append(&session, "test/add", json!({ "n": 3 }));

    // The early reader saw every event already folded (its cut is the log's end)...
    assert_eq!(seen.lock()[2], json!({ "test/sum": { "total": 5, "seqs": [0, 2] } }));
    // ...and each event was applied once, with one frame per change.
    assert_eq!(registry.snapshot(&session).values["test/sum"], json!({ "total": 5, "seqs": [0, 2] }));
    let frames: Vec<(Value, u64)> = feed.take().into_iter().map(|(_, _, value, seq)| (value, seq)).collect();
    assert_eq!(frames, [(json!({ "total": 2, "seqs": [0] }), 0), (json!({ "total": 5, "seqs": [0, 2] }), 2)]);
}

#[test]
fn a_replayed_notification_is_not_applied_twice() {
    let fx = fixture();
    let _sum = fx.registry.register(Sum).unwrap();
    let (feed, _subscription) = Feed::subscribe(&fx.registry);
    let session = fx.session("replay");
    let first = append(&session, "test/add", json!({ "n": 4 }));
    append(&session, "test/add", json!({ "n": 5 }));
    assert_eq!(feed.take().len(), 2);

    use session_core::StoreObserver;
    fx.registry.notify(&StoreEvent::Event(&session, &first)).unwrap();
    assert_eq!(fx.registry.snapshot(&session).values["test/sum"], json!({ "total": 9, "seqs": [0, 1] }));
    assert_eq!(feed.take(), vec![]);
}

#[test]
fn a_gap_is_filled_from_the_log_and_a_foreign_event_is_ignored() {
    use session_core::StoreObserver;

    // The registry is not attached: it hears only the notifications the test sends.
    let store = store();
    let registry = ProjectionRegistry::new();
    let _sum = registry.register(Sum).unwrap();
    let (feed, _subscription) = Feed::subscribe(&registry);
    let session = store.create(Some("gap".into()), Default::default()).unwrap();
    append(&session, "test/add", json!({ "n": 1 }));
    append(&session, "test/add", json!({ "n": 2 }));
    let third = append(&session, "test/add", json!({ "n": 3 }));

    // Told about seq 2 without having seen 0 and 1: they come from the log, each applied once.
    registry.notify(&StoreEvent::Event(&session, &third)).unwrap();
    assert_eq!(registry.snapshot(&session).values["test/sum"], json!({ "total": 6, "seqs": [0, 1, 2] }));
    assert_eq!(feed.take().into_iter().map(|frame| frame.3).collect::<Vec<_>>(), [2]);

    // An event the log does not have (seq past its end) is never applied.
    let foreign = Arc::new(crate::support::event(7, "test/add", json!({ "n": 100 })));
    registry.notify(&StoreEvent::Event(&session, &foreign)).unwrap();
    assert_eq!(registry.snapshot(&session).values["test/sum"], json!({ "total": 6, "seqs": [0, 1, 2] }));
    assert_eq!(feed.take(), vec![]);
}

#[test]
fn disposal_drops_a_sessions_cells() {
    let fx = fixture();
    let _sum = fx.registry.register(Sum).unwrap();
    let session = fx.session("bye");
    append(&session, "test/add", json!({ "n": 1 }));
    assert!(format!("{:?}", fx.registry).contains("sessions: 1"), "{:?}", fx.registry);

    fx.store.detach(session.id()).unwrap();
    assert!(format!("{:?}", fx.registry).contains("sessions: 0"), "{:?}", fx.registry);
    // A detached session still reads correctly (from its log).
    assert_eq!(fx.registry.snapshot(&session).values["test/sum"]["total"], json!(1));
}

#[test]
fn concurrent_readers_never_double_apply_or_lose_frames() {
    let fx = fixture();
    let _sum = fx.registry.register(Sum).unwrap();
    let _count = fx.registry.register_host_only(Count).unwrap();
    let (feed, _subscription) = Feed::subscribe(&fx.registry);
    let session = fx.session("threads");
    let n_events = 300u64;

    std::thread::scope(|scope| {
        for _ in 0..2 {
            let registry = Arc::clone(&fx.registry);
            let session = Arc::clone(&session);
            scope.spawn(move || {
                loop {
                    let snapshot = registry.snapshot(&session);
                    let seqs = snapshot.values["test/sum"]["seqs"].as_array().unwrap().len() as i64;
                    // Every value is exactly the fold of the cut it claims.
                    assert_eq!(seqs, snapshot.as_of_seq + 1);
                    if snapshot.as_of_seq + 1 == n_events as i64 {
                        break;
                    }
                }
            });
        }
        for n in 0..n_events {
            append(&session, "test/add", json!({ "n": n }));
        }
    });

    let expected: Vec<u64> = (0..n_events).collect();
    let sum = fx.registry.snapshot(&session).values["test/sum"].clone();
    assert_eq!(sum["seqs"], json!(expected));
    assert_eq!(fx.registry.state_of(&session, "test/count"), Some(Ok(json!(n_events))));
    let frame_seqs: Vec<u64> = feed.take().into_iter().map(|frame| frame.3).collect();
    assert_eq!(frame_seqs, expected);
}

#[test]
fn a_state_that_does_not_round_trip_has_no_row() {
    use serde::{Deserialize, Serialize};
    use session_projection::{ProjectionUnit, UnitError};

    /// Serializes as a string but deserializes only from a number.
    #[derive(Debug)]
    struct Lopsided;
    impl Serialize for Lopsided {
        fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
            serializer.serialize_str("lopsided")
        }
    }
    impl<'de> Deserialize<'de> for Lopsided {
        fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Lopsided, D::Error> {
            u8::deserialize(deserializer).map(|_| Lopsided)
        }
    }
    struct Bad;
    impl ProjectionUnit for Bad {
        type State = Lopsided;
        fn key(&self) -> &str {
            "test/bad-state"
        }
        fn state_version(&self) -> u64 {
            1
        }
        fn init(&self) -> Lopsided {
            Lopsided
        }
        fn apply(&self, _: &Lopsided, _: &session_core::SessionEvent) -> Result<Option<Lopsided>, UnitError> {
            Ok(None)
        }
    }

    let fx = fixture();
    let _bad = fx.registry.register_host_only(Bad).unwrap();
    let _count = fx.registry.register_host_only(Count).unwrap();
    let session = fx.session("lopsided");
    other(&session);
    let checkpoint = fx.registry.checkpoint(&session);
    assert!(!checkpoint.rows.contains_key("test/bad-state"));
    assert!(matches!(checkpoint.failures["test/bad-state"], UnitFailure::Encode { .. }));
    assert_eq!(checkpoint.rows["test/count"].val, json!(1));
}

/// `read_view` reads one value and the failure verdict exactly as `snapshot` reports them:
/// healthy, after a fold failure, after a view failure, for host-only and unknown keys. Its cold
/// twin, `RestoreFold::read_view`, agrees with the snapshot a cold fold of the same log finishes with.
#[test]
fn read_view_agrees_with_the_snapshot() {
    quiet_unit_panics();
    let fx = fixture();
    let _marks = fx.registry.register(Marks).unwrap();
    let _count = fx.registry.register_host_only(Count).unwrap();
    let session = fx.session("verdicts");
    mark(&session, &["a"]);
    let agree = |keys: &[&str]| {
        let snapshot = fx.registry.snapshot(&session);
        let cold_fold = || {
            let mut fold = fx.registry.begin_restore(&CheckpointRows::new(), 0).unwrap();
            for event in events_of(&session) {
                fold.apply(&event).unwrap();
            }
            fold
        };
        let cold = cold_fold().finish().unwrap().snapshot;
        assert_eq!((&cold.values, cold.has_failures()), (&snapshot.values, snapshot.has_failures()));
        for key in keys {
            let (value, any_failure) = fx.registry.read_view(&session, key, |value, any| (value.cloned(), any));
            assert_eq!(value.as_ref(), snapshot.values.get(*key), "{key}");
            assert_eq!(any_failure, snapshot.has_failures(), "{key}");
            let cold = cold_fold().read_view(key, |value, any| (value.cloned(), any)).unwrap();
            assert_eq!(cold, (value, any_failure), "{key}, cold");
        }
        snapshot.has_failures()
    };
    let keys = ["test/marks", "test/count", "test/flaky", "test/fragile-view", "nobody"];
    assert!(!agree(&keys));

    let _fragile = fx.registry.register(FragileView).unwrap();
    other(&session);
    assert!(!agree(&keys));
    other(&session);
    other(&session);
    assert!(agree(&keys), "the view of a count of 3 fails");

    let flaky_session = fx.session("flaky");
    let _flaky = fx.registry.register(Flaky).unwrap();
    append(&flaky_session, "test/other", json!({ "fail": "error" }));
    let snapshot = fx.registry.snapshot(&flaky_session);
    let (value, any_failure) = fx.registry.read_view(&flaky_session, "test/marks", |value, any| (value.cloned(), any));
    assert!(snapshot.has_failures() && any_failure);
    assert_eq!(value.as_ref(), snapshot.values.get("test/marks"));
}
