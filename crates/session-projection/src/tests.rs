//! Unit tests of the internals: the dispatch table and the cell's fold and row rules.

use std::sync::Arc;

use serde_json::json;
use session_core::{JsonData, SessionEvent};

use crate::{
    CheckpointRow, ProjectionUnit, UnitError, UnitFailure,
    cell::{Cell, Step},
    erased::Erased,
    plan::{Plan, PlanUnit},
};

/// Counts the events it reads; fails on `test/fail`.
struct Reader(&'static str, Option<&'static [&'static str]>);

impl ProjectionUnit for Reader {
    type State = u64;

    fn key(&self) -> &str {
        self.0
    }

    fn state_version(&self) -> u64 {
        1
    }

    fn init(&self) -> u64 {
        0
    }

    fn reads(&self) -> Option<&'static [&'static str]> {
        self.1
    }

    fn apply(&self, state: &u64, event: &SessionEvent) -> Result<Option<u64>, UnitError> {
        if event.kind == "test/fail" {
            return Err("refused".into());
        }
        Ok(Some(state + 1))
    }
}

fn plan(units: Vec<Reader>) -> Plan {
    let units = units
        .into_iter()
        .enumerate()
        .map(|(idx, unit)| PlanUnit {
            id: idx as u64,
            key: Arc::from(unit.key()),
            state_version: unit.state_version(),
            reads: unit.reads(),
            unit: Arc::new(Erased::host_only(unit)),
        })
        .collect();
    Plan::new(1, units)
}

fn event(seq: u64, kind: &str) -> SessionEvent {
    SessionEvent::new(kind, seq, 0, JsonData::empty_object())
}

#[test]
fn dispatch_lists_listed_readers_and_every_event_readers_in_registration_order() {
    let plan = plan(vec![
        Reader("a", Some(&["x", "y"])),
        Reader("all", None),
        Reader("b", Some(&["y", "y"])),
        Reader("none", Some(&[])),
    ]);
    let check = |kind: &str, expected: &[usize]| assert_eq!(plan.readers(kind), expected, "{kind}");
    check("x", &[0, 1]);
    check("y", &[0, 1, 2]);
    check("z", &[1]);
    assert_eq!(plan.position("b"), Some(2));
    assert_eq!(plan.position("c"), None);
    assert!(Plan::empty().readers("x").is_empty());
}

#[test]
fn a_failed_cell_keeps_its_last_good_row_and_ignores_later_events() {
    let plan = plan(vec![Reader("a", None)]);
    let unit = &plan.units[0];
    let mut cell = Cell::new(unit.unit.init());
    assert_eq!(cell.step(unit, &event(0, "test/ok")), Step::Changed);
    assert_eq!(cell.changed_seq(), Some(0));
    assert_eq!(cell.step(unit, &event(1, "test/fail")), Step::Failed);
    assert_eq!(cell.step(unit, &event(2, "test/ok")), Step::Unchanged);
    assert_eq!(cell.failure(), Some(&UnitFailure::Apply { seq: 1, panicked: false, message: "refused".to_owned() }));
    assert_eq!(cell.row(unit, 2), Ok(CheckpointRow { ver: 1, seq: 0, val: json!(1) }));
    assert_eq!(cell.failure().unwrap().to_string(), "apply failed at seq 1: refused");
}
