//! One unit's fold over one log (a watermark cell when live, a scratch fold when cold), and the
//! reads shared by the live and cold paths so that both render a cut the same way.

use serde_json::{Map, Value};
use session_core::SessionEvent;

use crate::{
    Checkpoint, CheckpointRow, CheckpointRows, Failures, Snapshot, UnitFailure,
    erased::{State, apply_contained},
    plan::{Plan, PlanUnit},
};

/// One unit's state over one log. The fold position (the watermark) is kept by the owner, which
/// advances all of a session's cells together.
pub(crate) struct Cell {
    state: State,
    /// The seq of the last event that changed the state; `None` while it is the seed state.
    changed_seq: Option<u64>,
    /// Set when `apply` failed; the state then stays at the last good fold, the one before
    /// `failure.seq()`, and no further event is applied.
    failure: Option<UnitFailure>,
    /// The client value of the current state, computed on first demand and dropped on change, so
    /// the change feed and every snapshot between two changes share one `view` call.
    view: Option<Result<Value, UnitFailure>>,
}

/// What folding one event did to a cell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    Unchanged,
    Changed,
    /// `apply` failed on this event; [`Cell::failure`] says how.
    Failed,
}

impl Cell {
    pub(crate) fn new(state: State) -> Cell {
        Cell { state, changed_seq: None, failure: None, view: None }
    }

    pub(crate) fn failure(&self) -> Option<&UnitFailure> {
        self.failure.as_ref()
    }

    pub(crate) fn changed_seq(&self) -> Option<u64> {
        self.changed_seq
    }

    pub(crate) fn state(&self) -> &State {
        &self.state
    }

    /// Folds one event. A failed cell ignores every later event.
    pub(crate) fn step(&mut self, unit: &PlanUnit, event: &SessionEvent) -> Step {
        if self.failure.is_some() {
            return Step::Unchanged;
        }
        match apply_contained(unit.unit.as_ref(), &mut self.state, event) {
            Ok(false) => Step::Unchanged,
            Ok(true) => {
                self.changed_seq = Some(event.seq);
                self.view = None;
                Step::Changed
            }
            Err(failure) => {
                self.failure = Some(failure);
                self.view = None;
                Step::Failed
            }
        }
    }

    /// The client value, or why there is none: `None` for a host-only unit.
    pub(crate) fn view(&mut self, unit: &PlanUnit) -> Option<Result<&Value, &UnitFailure>> {
        if let Some(failure) = &self.failure {
            return unit.is_client_visible().then_some(Err(failure));
        }
        if self.view.is_none() {
            self.view = Some(unit.unit.view(&self.state)?);
        }
        self.view.as_ref().map(Result::as_ref)
    }

    /// The row for this cell when its owner has folded through `folded_seq`.
    pub(crate) fn row(&self, unit: &PlanUnit, folded_seq: i64) -> Result<CheckpointRow, UnitFailure> {
        let seq = match self.failure.as_ref().and_then(UnitFailure::seq) {
            Some(failed_at) => failed_at as i64 - 1,
            None => folded_seq,
        };
        let val = unit.unit.encode(&self.state)?;
        Ok(CheckpointRow { ver: unit.state_version, seq, val })
    }
}

/// Folds `event` into every cell whose unit reads its type and for which `include` holds;
/// `outcome` hears about every cell that changed or failed.
pub(crate) fn fold_event(
    plan: &Plan,
    cells: &mut [Cell],
    event: &SessionEvent,
    include: impl Fn(usize) -> bool,
    mut outcome: impl FnMut(usize, Step),
) {
    for &idx in plan.readers(&event.kind) {
        if !include(idx) {
            continue;
        }
        let step = cells[idx].step(&plan.units[idx], event);
        if step != Step::Unchanged {
            outcome(idx, step);
        }
    }
}

/// The snapshot of cells folded through `as_of_seq`. `cells` is parallel to `plan.units`.
pub(crate) fn snapshot_of(plan: &Plan, cells: &mut [Cell], as_of_seq: i64) -> Snapshot {
    let mut values = Map::new();
    let mut failures = Failures::new();
    for (unit, cell) in plan.units.iter().zip(cells.iter_mut()) {
        match cell.view(unit) {
            Some(Ok(value)) => {
                values.insert(unit.key.to_string(), value.clone());
            }
            Some(Err(failure)) => {
                failures.insert(unit.key.to_string(), failure.clone());
            }
            None => {
                if let Some(failure) = cell.failure() {
                    failures.insert(unit.key.to_string(), failure.clone());
                }
            }
        }
    }
    Snapshot { as_of_seq, values, failures }
}

/// Runs `read` on one unit's client value and whether any unit failed, as [`snapshot_of`] would
/// report them, without copying the value.
pub(crate) fn read_view<R>(
    plan: &Plan,
    cells: &mut [Cell],
    key: &str,
    read: impl FnOnce(Option<&Value>, bool) -> R,
) -> R {
    let mut any_failure = false;
    let mut position = None;
    for (idx, (unit, cell)) in plan.units.iter().zip(cells.iter_mut()).enumerate() {
        match cell.view(unit) {
            Some(Ok(_)) if &*unit.key == key => position = Some(idx),
            Some(Ok(_)) => {}
            Some(Err(_)) => any_failure = true,
            None => any_failure |= cell.failure().is_some(),
        }
    }
    let value = position.and_then(|idx| cells[idx].view(&plan.units[idx])).and_then(Result::ok);
    read(value, any_failure)
}

/// The checkpoint of cells folded through `as_of_seq`. `cells` is parallel to `plan.units`.
pub(crate) fn checkpoint_of(plan: &Plan, cells: &[Cell], as_of_seq: i64) -> Checkpoint {
    let mut rows = CheckpointRows::new();
    let mut failures = Failures::new();
    for (unit, cell) in plan.units.iter().zip(cells) {
        if let Some(failure) = cell.failure() {
            failures.insert(unit.key.to_string(), failure.clone());
        }
        match cell.row(unit, as_of_seq) {
            Ok(row) => {
                rows.insert(unit.key.to_string(), row);
            }
            Err(failure) => {
                failures.entry(unit.key.to_string()).or_insert(failure);
            }
        }
    }
    Checkpoint { as_of_seq, rows, failures }
}
