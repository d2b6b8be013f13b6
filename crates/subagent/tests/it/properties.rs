//! Laws of the two subagent units over random logs: they keep the fold laws every cached or
//! restored value relies on (`ProjectionRegistry::check_fold_laws`), and the identity is the last
//! descriptor's, or the `null` sentinel when that descriptor is malformed or of another version.

use proptest::prelude::*;
use serde_json::{Value, json};
use session_projection::{CheckpointRows, ProjectionRegistry};
use subagent::{SUBAGENT_IDENTITY_KEY, register_units};

use crate::support::{continuable, ev_at, one_shot};

#[derive(Debug, Clone)]
enum Op {
    TurnStart,
    TurnEnd,
    /// Any other event inside or outside a turn.
    Step,
    Continuable(u8),
    OneShot(Option<u8>),
    /// A descriptor that fails the strict parse.
    Malformed,
    /// A well-formed descriptor of another version.
    Unsupported,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => Just(Op::TurnStart),
        3 => Just(Op::TurnEnd),
        4 => Just(Op::Step),
        1 => (0u8..3).prop_map(Op::Continuable),
        1 => prop::option::of(0u8..3).prop_map(Op::OneShot),
        1 => Just(Op::Malformed),
        1 => Just(Op::Unsupported),
    ]
}

/// The descriptor payload of `op`, and the identity a last-wins fold should hold after it
/// (`None` for the `null` sentinel); `None` for an op that is not a descriptor.
fn descriptor(op: &Op) -> Option<(Value, Option<Value>)> {
    let label = |n: &u8| format!("task {n}");
    Some(match op {
        Op::Continuable(n) => (continuable(&label(n)), Some(json!({ "mode": "continuable", "label": label(n) }))),
        Op::OneShot(Some(n)) => (one_shot(Some(&label(n))), Some(json!({ "mode": "one-shot", "label": label(n) }))),
        Op::OneShot(None) => (one_shot(None), Some(json!({ "mode": "one-shot" }))),
        Op::Malformed => (json!({ "version": 2, "mode": "sideways", "provider": "spawn" }), None),
        Op::Unsupported => (json!({ "version": 3, "mode": "continuable", "provider": "spawn", "label": "x" }), None),
        Op::TurnStart | Op::TurnEnd | Op::Step => return None,
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn the_subagent_units_keep_the_fold_laws_and_the_identity_is_last_wins(
        ops in prop::collection::vec((op(), 0i64..50), 0..40),
    ) {
        let registry = ProjectionRegistry::new();
        let _units = register_units(&registry).unwrap();
        let mut time = 1_000;
        let mut expected: Option<Value> = None;
        let mut turn = 0;
        let mut events = Vec::new();
        for (seq, (op, step)) in ops.iter().enumerate() {
            let seq = seq as u64;
            time += step;
            let event = match op {
                Op::TurnStart => {
                    turn += 1;
                    ev_at("turn/start", seq, time, json!({ "turn": turn }))
                }
                Op::TurnEnd => ev_at("turn/end", seq, time, json!({ "turn": turn, "reason": { "kind": "completed" } })),
                Op::Step => ev_at("step/start", seq, time, json!({ "turn": turn, "step": 1 })),
                descriptor_op => {
                    // Invariant: every other op is a descriptor.
                    let (payload, identity) = descriptor(descriptor_op).unwrap();
                    expected = identity.map(|mut identity| {
                        identity["seq"] = json!(seq);
                        identity
                    });
                    ev_at("subagent/descriptor", seq, time, payload)
                }
            };
            events.push(event);
        }

        prop_assert_eq!(registry.check_fold_laws(&events), Ok(()));
        let folded = registry.restore(&CheckpointRows::new(), events.iter().map(|event| &**event), 0).unwrap();
        prop_assert!(folded.snapshot.failures.is_empty(), "{:?}", folded.snapshot.failures);
        prop_assert_eq!(&folded.snapshot.values[SUBAGENT_IDENTITY_KEY], &expected.unwrap_or(Value::Null));
    }
}
