//! `ProjectionRegistry::check_fold_laws`: each law, broken by a unit made to break it, is
//! reported with the cut and the key where it shows, also when another unit's failure pins every
//! restore floor at seq 0; healthy units, failing folds and failing views pass (the property tests
//! also run the check over random logs, failures included).

use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use session_core::SessionEvent;
use session_projection::{ClientView, LawViolation, ProjectionRegistry, ProjectionUnit, RestoreError, UnitError};

use crate::support::{Count, Flaky, FragileView, Marks, event, quiet_unit_panics};

fn adds(n: u64) -> Vec<SessionEvent> {
    (0..n).map(|seq| event(seq, "test/add", json!({ "n": 1 }))).collect()
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
struct ForgetfulState {
    total: i64,
    /// Not stored in the row: a restore from a row starts it again from zero.
    #[serde(skip)]
    seen: u64,
}

/// Counts `test/add` events in a field its row does not carry.
struct Forgetful;

impl ProjectionUnit for Forgetful {
    type State = ForgetfulState;

    fn key(&self) -> &str {
        "test/forgetful"
    }

    fn state_version(&self) -> u64 {
        1
    }

    fn init(&self) -> ForgetfulState {
        ForgetfulState::default()
    }

    fn apply(&self, state: &ForgetfulState, _event: &SessionEvent) -> Result<Option<ForgetfulState>, UnitError> {
        Ok(Some(ForgetfulState { total: state.total + 1, seen: state.seen + 1 }))
    }
}

impl ClientView for Forgetful {
    type View = Value;

    fn view(&self, state: &ForgetfulState) -> Value {
        json!({ "total": state.total, "seen": state.seen })
    }
}

/// Derives its total from a count its row does not carry, and shows only the total: its served
/// value is right, but a restore from its row goes wrong on the next event.
struct Drifting;

impl ProjectionUnit for Drifting {
    type State = ForgetfulState;

    fn key(&self) -> &str {
        "test/drifting"
    }

    fn state_version(&self) -> u64 {
        1
    }

    fn init(&self) -> ForgetfulState {
        ForgetfulState::default()
    }

    fn apply(&self, state: &ForgetfulState, _event: &SessionEvent) -> Result<Option<ForgetfulState>, UnitError> {
        Ok(Some(ForgetfulState { total: state.seen as i64 + 1, seen: state.seen + 1 }))
    }
}

impl ClientView for Drifting {
    type View = i64;

    fn view(&self, state: &ForgetfulState) -> i64 {
        state.total
    }
}

/// Numbers the events it sees with a counter of its own, which outlives any one fold.
struct Ticket(AtomicU64);

impl ProjectionUnit for Ticket {
    type State = u64;

    fn key(&self) -> &str {
        "test/ticket"
    }

    fn state_version(&self) -> u64 {
        1
    }

    fn init(&self) -> u64 {
        0
    }

    fn apply(&self, _state: &u64, _event: &SessionEvent) -> Result<Option<u64>, UnitError> {
        Ok(Some(self.0.fetch_add(1, Ordering::Relaxed)))
    }
}

/// A state JSON cannot hold: `NaN` after any event (`serde_json` writes it as `null`, which does
/// not read back as a float).
struct Mean;

impl ProjectionUnit for Mean {
    type State = f64;

    fn key(&self) -> &str {
        "test/mean"
    }

    fn state_version(&self) -> u64 {
        1
    }

    fn init(&self) -> f64 {
        0.0
    }

    fn apply(&self, _state: &f64, _event: &SessionEvent) -> Result<Option<f64>, UnitError> {
        Ok(Some(f64::NAN))
    }
}

#[test]
fn healthy_units_keep_the_laws_and_an_empty_log_is_a_log() {
    let registry = ProjectionRegistry::new();
    let _units = (registry.register(Marks).unwrap(), registry.register_host_only(Count).unwrap());
    let events: Vec<SessionEvent> = (0..6)
        .map(|seq| match seq % 3 {
            0 => event(seq, "test/mark", json!({ "marks": [format!("m{seq}")] })),
            _ => event(seq, "test/other", json!({})),
        })
        .collect();
    assert_eq!(registry.check_fold_laws(&events), Ok(()));
    assert_eq!(registry.check_fold_laws::<SessionEvent>(&[]), Ok(()));
    // No unit registered: nothing can break a law.
    assert_eq!(ProjectionRegistry::new().check_fold_laws(&events), Ok(()));
}

#[test]
fn failing_folds_and_failing_views_break_no_law() {
    quiet_unit_panics();
    let registry = ProjectionRegistry::new();
    let _units = (registry.register(Flaky).unwrap(), registry.register(FragileView).unwrap());
    let events = vec![
        event(0, "test/other", json!({})),
        event(1, "test/other", json!({ "fail": "error" })),
        event(2, "test/other", json!({})),
        event(3, "test/other", json!({})),
    ];
    let whole = registry.restore(&Default::default(), &events, 0).unwrap();
    // Both failures are there: the fold of test/flaky at seq 1, the view of test/fragile-view.
    assert_eq!(
        whole.snapshot.failures.keys().collect::<Vec<_>>(),
        ["test/flaky", "test/fragile-view"],
        "{:?}",
        whole.snapshot.failures
    );
    assert_eq!(registry.check_fold_laws(&events), Ok(()));
}

#[test]
fn a_row_that_loses_what_the_view_shows_breaks_the_cached_value() {
    let registry = ProjectionRegistry::new();
    let _units = (registry.register(Forgetful).unwrap(), registry.register(Marks).unwrap());
    let violation = registry.check_fold_laws(&adds(1)).unwrap_err();
    assert_eq!(violation, LawViolation::CachedView { cut: 1, key: "test/forgetful".to_owned() });
    assert_eq!(
        violation.to_string(),
        "the value of \"test/forgetful\" served from the checkpoint after 1 events differs from the fold's: a unit's row loses part of its state"
    );
}

#[test]
fn a_row_that_loses_what_the_next_event_needs_breaks_checkpoint_plus_tail() {
    let registry = ProjectionRegistry::new();
    let _unit = registry.register(Drifting).unwrap();
    let violation = registry.check_fold_laws(&adds(2)).unwrap_err();
    // After one event the floor is seq 0, where a real restore would fold from `init`; the check
    // still seeds the unit from its row.
    assert_eq!(violation, LawViolation::CheckpointPlusTail { cut: 1, key: "test/drifting".to_owned() });
    assert_eq!(
        violation.to_string(),
        "restoring from the checkpoint after 1 events and folding the rest disagrees with the whole log on \"test/drifting\": a unit's row loses part of its state"
    );
    // With no event after the checkpoint there is nothing for the lost count to spoil.
    assert_eq!(registry.check_fold_laws(&adds(1)), Ok(()));
}

#[test]
fn a_unit_failing_on_the_first_event_does_not_hide_another_units_lossy_row() {
    let registry = ProjectionRegistry::new();
    let _units = (registry.register(Flaky).unwrap(), registry.register(Drifting).unwrap());
    // test/flaky fails on seq 0, so its row stays at seq -1 and every restore floor is seq 0.
    let mut events = vec![event(0, "test/other", json!({ "fail": "error" }))];
    events.extend((1..4).map(|seq| event(seq, "test/add", json!({ "n": 1 }))));
    assert_eq!(
        registry.check_fold_laws(&events),
        Err(LawViolation::CheckpointPlusTail { cut: 1, key: "test/drifting".to_owned() })
    );
}

#[test]
fn a_unit_with_a_memory_of_its_own_is_not_deterministic() {
    let registry = ProjectionRegistry::new();
    let _unit = registry.register_host_only(Ticket(AtomicU64::new(0))).unwrap();
    assert_eq!(
        registry.check_fold_laws(&adds(2)),
        Err(LawViolation::NotDeterministic { n_events: 2, key: "test/ticket".to_owned() })
    );
}

#[test]
fn a_state_json_cannot_hold_is_unencodable_at_the_first_cut_it_appears() {
    let registry = ProjectionRegistry::new();
    let _unit = registry.register_host_only(Mean).unwrap();
    match registry.check_fold_laws(&adds(3)) {
        Err(LawViolation::Unencodable { cut: 1, key, message }) => {
            assert_eq!(key, "test/mean");
            assert!(message.starts_with("the serialized state does not deserialize"), "{message}");
        }
        other => panic!("expected Unencodable at cut 1, got {other:?}"),
    }
}

#[test]
fn events_that_are_not_a_log_from_seq_zero_are_refused() {
    let registry = ProjectionRegistry::new();
    let _unit = registry.register_host_only(Count).unwrap();
    let events = vec![event(0, "test/other", json!({})), event(2, "test/other", json!({}))];
    assert_eq!(
        registry.check_fold_laws(&events),
        Err(LawViolation::NotALog(RestoreError::Discontiguous { expected: 1, found: 2 }))
    );
}
