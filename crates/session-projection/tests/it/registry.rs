//! The reference registry matrix (reference 02 §11.1, tests 1–15), adapted: live drive,
//! registration sharing and release, reads and checkpoints.

use std::sync::{Arc, atomic::AtomicUsize};

use expect_test::expect;
use serde_json::{Value, json};
use session_core::json::MAX_SAFE_INTEGER;
use session_projection::{
    CheckpointRow, ClientView, ProjectionRegistry, ProjectionUnit, RegisterError, RegisteredUnit, UnitError,
};

use crate::support::{Count, Descriptor, Feed, Marks, MarksState, Sum, Title, append, fixture, mark, other};

#[test]
fn drives_a_registered_unit_and_snapshots_the_latest_value() {
    let fx = fixture();
    let _marks = fx.registry.register(Marks).unwrap();
    let session = fx.session("s1");
    mark(&session, &["a"]);
    mark(&session, &["a", "b"]);
    other(&session);

    let snapshot = fx.registry.snapshot(&session);
    assert_eq!(snapshot.as_of_seq, session.len() as i64 - 1);
    assert_eq!(snapshot.as_of_seq, 2);
    assert_eq!(Value::Object(snapshot.values), json!({ "test/marks": { "marks": ["a", "b"] } }));
    assert!(snapshot.failures.is_empty());
}

#[test]
fn a_unit_registered_after_events_builds_from_the_log_then_continues_live() {
    let fx = fixture();
    let session = fx.session("late");
    mark(&session, &["early"]);
    other(&session);

    let _marks = fx.registry.register(Marks).unwrap();
    let _count = fx.registry.register_host_only(Count).unwrap();
    assert_eq!(fx.registry.snapshot(&session).values["test/marks"], json!({ "marks": ["early"] }));
    assert_eq!(fx.registry.state_of(&session, "test/count"), Some(Ok(json!(2))));

    mark(&session, &["live"]);
    let snapshot = fx.registry.snapshot(&session);
    assert_eq!(snapshot.values["test/marks"], json!({ "marks": ["live"] }));
    assert_eq!(snapshot.as_of_seq, 2);
    assert_eq!(fx.registry.state_of(&session, "test/count"), Some(Ok(json!(3))));
}

#[test]
fn a_unit_registered_between_two_events_is_built_by_the_drive() {
    let fx = fixture();
    let (feed, _subscription) = Feed::subscribe(&fx.registry);
    let session = fx.session("mid");
    mark(&session, &["before"]);
    let _marks = fx.registry.register(Marks).unwrap();
    let _count = fx.registry.register_host_only(Count).unwrap();
    mark(&session, &["after"]);

    assert_eq!(feed.take(), vec![("mid".into(), "test/marks".into(), json!({ "marks": ["after"] }), 1)]);
    assert_eq!(fx.registry.state_of(&session, "test/count"), Some(Ok(json!(2))));
}

#[test]
fn the_empty_log_serves_the_init_view_at_minus_one() {
    let fx = fixture();
    let _marks = fx.registry.register(Marks).unwrap();
    let _title = fx.registry.register(Title).unwrap();
    let session = fx.session("empty");

    let snapshot = fx.registry.snapshot(&session);
    assert_eq!(snapshot.as_of_seq, -1);
    // "Computed, but nothing" is a JSON null, never an absent key.
    assert_eq!(Value::Object(snapshot.values), json!({ "test/marks": { "marks": [] }, "test/title": null }));
}

#[test]
fn the_change_feed_carries_the_view_and_the_causing_seq() {
    let fx = fixture();
    let _marks = fx.registry.register(Marks).unwrap();
    let (feed, _subscription) = Feed::subscribe(&fx.registry);
    let session = fx.session("feed");

    other(&session);
    assert_eq!(feed.take(), vec![]);
    mark(&session, &["x"]);
    assert_eq!(feed.take(), vec![("feed".into(), "test/marks".into(), json!({ "marks": ["x"] }), 1)]);
}

#[test]
fn cells_are_per_session() {
    let fx = fixture();
    let _marks = fx.registry.register(Marks).unwrap();
    let first = fx.session("first");
    let second = fx.session("second");
    mark(&first, &["one"]);
    mark(&second, &["two"]);
    other(&second);

    let first_snapshot = fx.registry.snapshot(&first);
    let second_snapshot = fx.registry.snapshot(&second);
    assert_eq!((first_snapshot.as_of_seq, second_snapshot.as_of_seq), (0, 1));
    assert_eq!(first_snapshot.values["test/marks"], json!({ "marks": ["one"] }));
    assert_eq!(second_snapshot.values["test/marks"], json!({ "marks": ["two"] }));
}

#[test]
fn a_host_only_unit_folds_without_feeding_and_stays_out_of_snapshots() {
    let fx = fixture();
    let _count = fx.registry.register_host_only(Count).unwrap();
    let (feed, _subscription) = Feed::subscribe(&fx.registry);
    let session = fx.session("host");
    other(&session);

    assert_eq!(fx.registry.state_of(&session, "test/count"), Some(Ok(json!(1))));
    assert_eq!(fx.registry.read_state::<Count, u64>(&session, "test/count", |count| *count), Some(Ok(1)));
    assert!(fx.registry.snapshot(&session).values.is_empty());
    assert_eq!(feed.take(), vec![]);
}

#[test]
fn registrants_of_one_key_share_it_until_the_last_one_leaves() {
    let fx = fixture();
    let first = fx.registry.register(Marks).unwrap();
    let second = fx.registry.register(Marks).unwrap();
    assert_eq!(
        fx.registry.units(),
        vec![RegisteredUnit { key: "test/marks".into(), state_version: 1, client_visible: true, refs: 2 }]
    );
    let session = fx.session("shared");
    mark(&session, &["m"]);

    drop(first);
    assert_eq!(fx.registry.snapshot(&session).values["test/marks"], json!({ "marks": ["m"] }));
    drop(second);
    assert!(fx.registry.snapshot(&session).values.is_empty());
    assert_eq!(fx.registry.units(), vec![]);
}

#[test]
fn a_conflicting_state_version_is_refused() {
    struct MarksV9;
    impl ProjectionUnit for MarksV9 {
        type State = Option<MarksState>;
        fn key(&self) -> &str {
            "test/marks"
        }
        fn state_version(&self) -> u64 {
            9
        }
        fn init(&self) -> Self::State {
            None
        }
        fn apply(&self, _: &Self::State, _: &session_core::SessionEvent) -> Result<Option<Self::State>, UnitError> {
            Ok(None)
        }
    }
    impl ClientView for MarksV9 {
        type View = Value;
        fn view(&self, _: &Self::State) -> Value {
            Value::Null
        }
    }

    let registry = ProjectionRegistry::new();
    let _marks = registry.register(Marks).unwrap();
    let error = registry.register(MarksV9).unwrap_err();
    assert_eq!(error, RegisterError::VersionConflict { key: "test/marks".into(), registered: 1, requested: 9 });
    expect![[r#"session projection key "test/marks" is already registered at stateVersion 1; refusing to share it with stateVersion 9"#]]
        .assert_eq(&error.to_string());
    assert_eq!(registry.units()[0].refs, 1);
}

#[test]
fn a_key_is_shared_only_by_the_same_unit_type_and_visibility() {
    struct OtherCount;
    impl ProjectionUnit for OtherCount {
        type State = u64;
        fn key(&self) -> &str {
            "test/count"
        }
        fn state_version(&self) -> u64 {
            1
        }
        fn init(&self) -> u64 {
            0
        }
        fn apply(&self, _: &u64, _: &session_core::SessionEvent) -> Result<Option<u64>, UnitError> {
            Ok(None)
        }
    }

    let registry = ProjectionRegistry::new();
    let _count = registry.register_host_only(Count).unwrap();
    let error = registry.register_host_only(OtherCount).unwrap_err();
    assert!(matches!(error, RegisterError::UnitMismatch { ref key, .. } if key == "test/count"), "{error:?}");

    let _marks = registry.register(Marks).unwrap();
    let error = registry.register_host_only(Marks).unwrap_err();
    assert!(
        matches!(
            error,
            RegisterError::UnitMismatch {
                registered_visibility: "client-visible",
                requested_visibility: "host-only",
                ..
            }
        ),
        "{error:?}"
    );
}

#[test]
fn a_state_version_beyond_json_safe_integers_is_refused() {
    struct Huge;
    impl ProjectionUnit for Huge {
        type State = u64;
        fn key(&self) -> &str {
            "test/huge"
        }
        fn state_version(&self) -> u64 {
            MAX_SAFE_INTEGER + 1
        }
        fn init(&self) -> u64 {
            0
        }
        fn apply(&self, _: &u64, _: &session_core::SessionEvent) -> Result<Option<u64>, UnitError> {
            Ok(None)
        }
    }

    let registry = ProjectionRegistry::new();
    let error = registry.register_host_only(Huge).unwrap_err();
    expect![[r#"session projection "test/huge" stateVersion must be a non-negative integer, got 9007199254740992"#]]
        .assert_eq(&error.to_string());
    assert_eq!(registry.units(), vec![]);
}

#[test]
fn re_registration_refolds_from_the_log_not_from_a_stale_cell() {
    let fx = fixture();
    let session = fx.session("stale");
    let count = fx.registry.register_host_only(Count).unwrap();
    other(&session);
    assert_eq!(fx.registry.state_of(&session, "test/count"), Some(Ok(json!(1))));

    drop(count);
    assert_eq!(fx.registry.state_of(&session, "test/count"), None);
    other(&session);
    other(&session);

    let _count = fx.registry.register_host_only(Count).unwrap();
    assert_eq!(fx.registry.state_of(&session, "test/count"), Some(Ok(json!(3))));
}

#[test]
fn dropping_registrations_and_subscriptions_stops_values_and_frames() {
    let fx = fixture();
    let marks = fx.registry.register(Marks).unwrap();
    let (feed, subscription) = Feed::subscribe(&fx.registry);
    let session = fx.session("unload");
    mark(&session, &["a"]);
    assert_eq!(feed.take().len(), 1);

    drop(marks);
    drop(subscription);
    mark(&session, &["b"]);
    assert_eq!(feed.take(), vec![]);
    assert!(fx.registry.snapshot(&session).values.is_empty());
}

#[test]
fn snapshots_serve_client_views_only_and_unregistered_keys_read_as_absent() {
    let fx = fixture();
    let _marks = fx.registry.register(Marks).unwrap();
    let _count = fx.registry.register_host_only(Count).unwrap();
    let session = fx.session("views");
    mark(&session, &["v"]);

    let snapshot = fx.registry.snapshot(&session);
    assert_eq!(snapshot.values.keys().collect::<Vec<_>>(), vec!["test/marks"]);
    assert_eq!(fx.registry.state_of(&session, "test/count"), Some(Ok(json!(1))));
    assert_eq!(fx.registry.state_of(&session, "test/marks"), Some(Ok(json!({ "marks": ["v"] }))));
    assert_eq!(fx.registry.state_of(&session, "test/unknown"), None);
    // A typed read with the wrong unit type finds nothing.
    assert_eq!(fx.registry.read_state::<Sum, ()>(&session, "test/marks", |_| ()), None);
}

#[test]
fn values_keep_registration_order() {
    let fx = fixture();
    let _title = fx.registry.register(Title).unwrap();
    let _marks = fx.registry.register(Marks).unwrap();
    let _sum = fx.registry.register(Sum).unwrap();
    let session = fx.session("order");
    let keys: Vec<String> = fx.registry.snapshot(&session).values.keys().cloned().collect();
    assert_eq!(keys, ["test/title", "test/marks", "test/sum"]);
}

#[test]
fn checkpoint_rows_carry_version_and_watermark() {
    let fx = fixture();
    let _marks = fx.registry.register(Marks).unwrap();
    let _count = fx.registry.register_host_only(Count).unwrap();
    let session = fx.session("rows");

    let empty = fx.registry.checkpoint(&session);
    assert_eq!(empty.as_of_seq, -1);
    assert_eq!(empty.rows["test/marks"], CheckpointRow { ver: 1, seq: -1, val: Value::Null });
    assert_eq!(empty.rows["test/count"], CheckpointRow { ver: 1, seq: -1, val: json!(0) });

    mark(&session, &["r"]);
    other(&session);
    let checkpoint = fx.registry.checkpoint(&session);
    expect![[r#"{"test/count":{"ver":1,"seq":1,"val":2},"test/marks":{"ver":1,"seq":1,"val":{"marks":["r"]}}}"#]]
        .assert_eq(&serde_json::to_string(&checkpoint.rows).unwrap());
    assert!(checkpoint.failures.is_empty());
}

#[test]
fn mutating_checkpoint_values_cannot_reach_the_cells() {
    let fx = fixture();
    let _marks = fx.registry.register(Marks).unwrap();
    let session = fx.session("clone");
    mark(&session, &["keep"]);

    let mut checkpoint = fx.registry.checkpoint(&session);
    checkpoint.rows.get_mut("test/marks").unwrap().val["marks"] = json!(["tampered"]);
    assert_eq!(fx.registry.snapshot(&session).values["test/marks"], json!({ "marks": ["keep"] }));
    assert_eq!(fx.registry.checkpoint(&session).rows["test/marks"].val, json!({ "marks": ["keep"] }));
}

#[test]
fn a_unit_is_applied_only_to_the_event_types_it_reads() {
    let fx = fixture();
    let applied = Arc::new(AtomicUsize::new(0));
    let unit = Descriptor { applied: Arc::clone(&applied) };
    let _descriptor = fx.registry.register(Descriptor { applied: Arc::clone(&applied) }).unwrap();
    let session = fx.session("child");
    for _ in 0..50 {
        other(&session);
    }
    append(&session, "subagent/descriptor", json!({ "mode": "one-shot" }));
    for _ in 0..50 {
        mark(&session, &["noise"]);
    }

    assert_eq!(fx.registry.snapshot(&session).values["test/descriptor"], json!({ "mode": "one-shot", "seq": 50 }));
    assert_eq!(unit.applied(), 1);
    // A cold fold skips the same way.
    let restored = fx.registry.restore(&Default::default(), session.events().iter().map(|event| &**event), 0).unwrap();
    assert_eq!(restored.snapshot, fx.registry.snapshot(&session));
    assert_eq!(unit.applied(), 2);
}

#[test]
fn a_snapshot_of_a_built_session_reads_no_event() {
    // Cells are current after the drive, so a snapshot folds nothing: the descriptor unit is not
    // applied again however often the session is read.
    let fx = fixture();
    let applied = Arc::new(AtomicUsize::new(0));
    let unit = Descriptor { applied: Arc::clone(&applied) };
    let _descriptor = fx.registry.register(Descriptor { applied }).unwrap();
    let session = fx.session("hot");
    append(&session, "subagent/descriptor", json!({ "mode": "continuable" }));
    for _ in 0..100 {
        let snapshot = fx.registry.snapshot(&session);
        assert_eq!(snapshot.values["test/descriptor"]["mode"], "continuable");
    }
    assert_eq!(unit.applied(), 1);
}

#[test]
fn the_registry_and_its_folds_cross_threads() {
    // A cold fold lives in a decoder's sink on a blocking pool, which needs `Send + 'static`.
    fn shared<T: Send + Sync + 'static>() {}
    fn sent<T: Send + 'static>() {}
    shared::<ProjectionRegistry>();
    shared::<session_projection::Snapshot>();
    shared::<session_projection::Checkpoint>();
    sent::<session_projection::RestoreFold>();
    sent::<session_projection::Registration>();
    sent::<session_projection::ChangeSubscription>();
    sent::<session_projection::StoreAttachment>();
}
