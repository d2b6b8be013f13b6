//! Laws over random logs: the live snapshot equals a restore from zero, a restore from any
//! checkpoint (through JSON) plus its tail, and a lazy build by another registry; the change feed
//! ends at the live values; a failing unit changes nothing for the others.

use std::collections::BTreeMap;

use proptest::prelude::*;
use serde_json::{Value, json};
use session_core::Session;
use session_projection::{CheckpointRows, ProjectionRegistry, UnitFailure};

use crate::support::{Feed, Flaky, append, events_of, fixture, quiet_unit_panics, register_property_units};

#[derive(Debug, Clone)]
enum Op {
    Mark(Vec<u8>),
    Add(i8),
    Touch(u8),
    Title(Option<u8>),
    Other,
    /// Makes `test/flaky` fail (only where that unit is registered).
    Boom {
        panic: bool,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        prop::collection::vec(0u8..3, 0..3).prop_map(Op::Mark),
        any::<i8>().prop_map(Op::Add),
        (0u8..2).prop_map(Op::Touch),
        prop::option::of(0u8..2).prop_map(Op::Title),
        Just(Op::Other),
    ]
}

fn op_with_faults() -> impl Strategy<Value = Op> {
    prop_oneof![8 => op(), 1 => any::<bool>().prop_map(|panic| Op::Boom { panic })]
}

fn apply_op(session: &Session, op: &Op) {
    match op {
        Op::Mark(marks) => {
            let marks: Vec<String> = marks.iter().map(|mark| format!("m{mark}")).collect();
            append(session, "test/mark", json!({ "marks": marks }))
        }
        Op::Add(n) => append(session, "test/add", json!({ "n": n })),
        Op::Touch(tag) => append(session, "test/touch", json!({ "tag": tag })),
        Op::Title(title) => append(session, "test/title", json!({ "title": title.map(|title| format!("t{title}")) })),
        Op::Other => append(session, "test/other", json!({})),
        Op::Boom { panic } => append(session, "test/other", json!({ "fail": if *panic { "panic" } else { "error" } })),
    };
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn live_equals_cold_equals_checkpoint_plus_tail(ops in prop::collection::vec(op(), 0..40)) {
        let fx = fixture();
        let _units = register_property_units(&fx.registry);
        let (feed, _subscription) = Feed::subscribe(&fx.registry);
        let session = fx.session("prop");
        let mut checkpoints = vec![fx.registry.checkpoint(&session)];
        for op in &ops {
            apply_op(&session, op);
            checkpoints.push(fx.registry.checkpoint(&session));
        }

        let live = fx.registry.snapshot(&session);
        let live_checkpoint = fx.registry.checkpoint(&session);
        prop_assert_eq!(live.as_of_seq, ops.len() as i64 - 1);
        prop_assert!(live.failures.is_empty());
        let events = events_of(&session);

        let cold = fx.registry.restore(&CheckpointRows::new(), &events, 0).unwrap();
        prop_assert_eq!(&cold.snapshot, &live);
        prop_assert_eq!(&cold.checkpoint, &live_checkpoint);
        prop_assert_eq!(fx.registry.check_fold_laws(&events), Ok(()));

        for checkpoint in &checkpoints {
            // Rows travel through JSON, as a durable cache stores them.
            let text = serde_json::to_string(&checkpoint.rows).unwrap();
            let rows: CheckpointRows = serde_json::from_str(&text).unwrap();
            let floor = fx.registry.restore_floor(&rows).unwrap();
            prop_assert_eq!(floor as i64, (checkpoint.as_of_seq).max(0));
            let restored = fx.registry.restore(&rows, &events[floor as usize..], floor).unwrap();
            prop_assert_eq!(&restored.snapshot, &live);
            prop_assert_eq!(&restored.checkpoint, &live_checkpoint);
            // The cached view serves the rows' own cut.
            let cached = fx.registry.view_checkpoint(&rows);
            prop_assert_eq!(cached.values.len(), 4);
            prop_assert_eq!(cached.as_of_seq, checkpoint.as_of_seq);
        }

        // Another registry with the same units, reading lazily, agrees.
        let detached = ProjectionRegistry::new();
        let _detached_units = register_property_units(&detached);
        prop_assert_eq!(&detached.snapshot(&session), &live);

        // The feed: per key, strictly increasing seqs ending at the live value; one frame per
        // touch (a new but equal state is a change), one per title that differs.
        let mut last: BTreeMap<String, (Value, u64)> = BTreeMap::new();
        let mut n_frames: BTreeMap<String, usize> = BTreeMap::new();
        for (_, key, value, seq) in feed.take() {
            if let Some((_, previous)) = last.get(&key) {
                prop_assert!(seq > *previous);
            }
            *n_frames.entry(key.clone()).or_default() += 1;
            last.insert(key, (value, seq));
        }
        prop_assert!(!last.contains_key("test/count"));
        for (key, (value, _)) in &last {
            prop_assert_eq!(value, &live.values[key.as_str()]);
        }
        let n_touches = ops.iter().filter(|op| matches!(op, Op::Touch(_))).count();
        prop_assert_eq!(n_frames.get("test/touch").copied().unwrap_or(0), n_touches);
        let mut title = None;
        let mut n_title_changes = 0;
        for op in &ops {
            if let Op::Title(next) = op && *next != title {
                title = *next;
                n_title_changes += 1;
            }
        }
        prop_assert_eq!(n_frames.get("test/title").copied().unwrap_or(0), n_title_changes);
    }

    #[test]
    fn a_failing_unit_changes_nothing_for_the_others(
        first in prop::collection::vec(op_with_faults(), 0..30),
        second in prop::collection::vec(op_with_faults(), 0..30),
    ) {
        quiet_unit_panics();
        let fx = fixture();
        let _units = register_property_units(&fx.registry);
        let _flaky = fx.registry.register(Flaky).unwrap();
        let reference = ProjectionRegistry::new();
        let _reference_units = register_property_units(&reference);

        let sessions = [fx.session("first"), fx.session("second")];
        let mut checkpoints: [Vec<_>; 2] = [Vec::new(), Vec::new()];
        for idx in 0..first.len().max(second.len()) {
            for (which, ops) in [&first, &second].into_iter().enumerate() {
                if let Some(op) = ops.get(idx) {
                    apply_op(&sessions[which], op);
                    checkpoints[which].push(fx.registry.checkpoint(&sessions[which]));
                }
            }
        }

        for (which, ops) in [&first, &second].into_iter().enumerate() {
            let session = &sessions[which];
            let live = fx.registry.snapshot(session);
            let events = events_of(session);

            // The failure is reported iff the log has a boom, at the first one.
            let first_boom = ops.iter().position(|op| matches!(op, Op::Boom { .. }));
            match first_boom {
                Some(seq) => {
                    let failure = &live.failures["test/flaky"];
                    let panicked = matches!(ops[seq], Op::Boom { panic: true });
                    prop_assert!(
                        matches!(failure, UnitFailure::Apply { seq: at, panicked: p, .. } if *at == seq as u64 && *p == panicked),
                        "{:?}",
                        failure
                    );
                    prop_assert!(!live.values.contains_key("test/flaky"));
                }
                None => {
                    prop_assert!(live.failures.is_empty());
                    prop_assert_eq!(&live.values["test/flaky"], &json!(ops.len()));
                }
            }

            // Every other value is what a registry without the failing unit computes.
            let mut others = live.values.clone();
            others.remove("test/flaky");
            let expected = reference.restore(&CheckpointRows::new(), &events, 0).unwrap().snapshot;
            prop_assert_eq!(&others, &expected.values);

            // The public law check agrees: a unit failing on an event breaks no law.
            prop_assert_eq!(fx.registry.check_fold_laws(&events), Ok(()));

            // Live, cold and checkpoint-plus-tail still agree, failures included.
            let cold = fx.registry.restore(&CheckpointRows::new(), &events, 0).unwrap();
            prop_assert_eq!(&cold.snapshot, &live);
            let live_checkpoint = fx.registry.checkpoint(session);
            prop_assert_eq!(&cold.checkpoint, &live_checkpoint);
            for checkpoint in &checkpoints[which] {
                let floor = fx.registry.restore_floor(&checkpoint.rows).unwrap();
                let restored = fx.registry.restore(&checkpoint.rows, &events[floor as usize..], floor).unwrap();
                prop_assert_eq!(&restored.snapshot, &live);
                prop_assert_eq!(&restored.checkpoint, &live_checkpoint);
            }
        }
    }
}
