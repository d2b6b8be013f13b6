//! Cold folds over stored logs: `restore_floor`, `restore` (and its push-driven form
//! [`RestoreFold`]) and `view_checkpoint` (reference 02 §5, with W6 fixed).
//!
//! A restore from `base_seq == 0` is given the whole log, which is the authority: it folds every
//! unit from `init` and never consults the rows. A suffix restore (`base_seq > 0`) seeds each unit
//! from its row and needs a usable row for every unit. Folding from rows is only ever a shortcut,
//! so a stale or foreign row can make a suffix restore fail (the caller then re-reads from seq 0),
//! but never change a value.

use std::{borrow::Borrow, fmt, sync::Arc};

use serde_json::{Map, Value};
use session_core::SessionEvent;

use crate::{
    CheckpointRow, CheckpointRows, Failures, ProjectionRegistry, RestoreError, Restored, RowProblem, Snapshot,
    cell::{Cell, checkpoint_of, fold_event, read_view, snapshot_of},
    plan::{Plan, PlanUnit},
};

/// A cold fold in progress: feed it the events of a slice in order with [`RestoreFold::apply`],
/// then take the result with [`RestoreFold::finish`]. It owns everything it needs (`Send +
/// 'static`), so it can sit inside a decoder's sink and fold a log while the log is read, without
/// the log ever being held in memory.
pub struct RestoreFold {
    plan: Arc<Plan>,
    base_seq: u64,
    next_seq: u64,
    cells: Vec<Cell>,
    /// Per unit: the seq its seed already covers (`base_seq - 1`, or a row's watermark ahead of
    /// it). Events up to it are not applied again.
    seeded_through: Vec<i64>,
}

impl ProjectionRegistry {
    /// Where a cold read must start so that `rows` plus the tail restore every unit
    /// (reference 02 §5.1): one below the lowest usable watermark, so that the first event read
    /// proves that watermark still exists in the log. A unit without a row at its current version
    /// needs the whole log (0). `None` when no unit is registered: no event needs to be read for
    /// values.
    pub fn restore_floor(&self, rows: &CheckpointRows) -> Option<u64> {
        let plan = self.plan();
        let need = plan
            .units
            .iter()
            .map(|unit| match rows.get(&*unit.key) {
                Some(row) if row.ver == unit.state_version && row.seq >= -1 => row.seq + 1,
                _ => 0,
            })
            .min()?;
        Some((need - 1).max(0) as u64)
    }

    /// Starts a cold fold of the slice that begins at `base_seq` (reference 02 §5.2). With
    /// `base_seq > 0`, every registered unit needs a row in `rows` at its current version, whose
    /// state decodes and whose watermark is at least `base_seq - 1`; otherwise this fails with
    /// [`RestoreError::NeedsFullRead`]. With `base_seq == 0` the rows are not consulted.
    pub fn begin_restore(&self, rows: &CheckpointRows, base_seq: u64) -> Result<RestoreFold, RestoreError> {
        if base_seq == 0 {
            return Ok(self.begin_full_restore());
        }
        self.begin_seeded_restore(rows, base_seq)
    }

    /// [`begin_restore`](Self::begin_restore) without the whole-log shortcut: every unit starts
    /// from its row, also at `base_seq == 0`, and skips the events its row already covers. The
    /// fold laws use it to check rows that a restore from seq 0 would not consult.
    pub(crate) fn begin_seeded_restore(
        &self,
        rows: &CheckpointRows,
        base_seq: u64,
    ) -> Result<RestoreFold, RestoreError> {
        let plan = self.plan();
        let mut cells = Vec::with_capacity(plan.units.len());
        let mut seeded_through = Vec::with_capacity(plan.units.len());
        for unit in &plan.units {
            let needs_full_read =
                |problem| RestoreError::NeedsFullRead { key: unit.key.to_string(), base_seq, problem };
            let row = rows.get(&*unit.key).ok_or_else(|| needs_full_read(RowProblem::Missing))?;
            let state = usable_state(unit, row, base_seq as i64 - 1).map_err(needs_full_read)?;
            cells.push(Cell::new(state));
            seeded_through.push(row.seq);
        }
        Ok(RestoreFold { plan, base_seq, next_seq: base_seq, cells, seeded_through })
    }

    /// Starts a cold fold of a whole log, from every unit's `init`. Infallible: a restore from
    /// seq 0 consults no rows.
    pub fn begin_full_restore(&self) -> RestoreFold {
        let plan = self.plan();
        let cells = plan.units.iter().map(|unit| Cell::new(unit.unit.init())).collect();
        let seeded_through = vec![-1; plan.units.len()];
        RestoreFold { plan, base_seq: 0, next_seq: 0, cells, seeded_through }
    }

    /// Folds `rows` plus the `events` of the slice that starts at `base_seq`, and returns the
    /// values and refreshed rows at the slice's end (`base_seq - 1` for an empty slice). The
    /// events are consumed one at a time, so an iterator that decodes a log as it goes folds it
    /// without holding it. See [`ProjectionRegistry::begin_restore`] for the rules on rows.
    ///
    /// A unit that fails on an event is reported in the result's failures, exactly as the live
    /// cells report it; the other units are unaffected.
    pub fn restore<E: Borrow<SessionEvent>>(
        &self,
        rows: &CheckpointRows,
        events: impl IntoIterator<Item = E>,
        base_seq: u64,
    ) -> Result<Restored, RestoreError> {
        let mut fold = self.begin_restore(rows, base_seq)?;
        for event in events {
            fold.apply(event.borrow())?;
        }
        fold.finish()
    }

    /// The client values stored in `rows`, with zero log reads (reference 02 §7.3): for each
    /// registered client-visible unit whose row is at its current version and decodes, the view
    /// of that state. Other rows are skipped (host-only, unregistered, stale or undecodable); a
    /// view that fails is reported in `failures`. `as_of_seq` is the lowest watermark among the
    /// served values (under-claiming is safe for a reader that keeps the higher seq), or `-1` if
    /// none is served.
    pub fn view_checkpoint(&self, rows: &CheckpointRows) -> Snapshot {
        let plan = self.plan();
        let mut values = Map::new();
        let mut failures = Failures::new();
        let mut as_of_seq: Option<i64> = None;
        for unit in plan.units.iter().filter(|unit| unit.is_client_visible()) {
            let Some(row) = rows.get(&*unit.key) else { continue };
            let Ok(state) = usable_state(unit, row, -1) else { continue };
            match Cell::new(state).view(unit) {
                Some(Ok(value)) => {
                    values.insert(unit.key.to_string(), value.clone());
                    as_of_seq = Some(as_of_seq.map_or(row.seq, |seq| seq.min(row.seq)));
                }
                Some(Err(failure)) => {
                    failures.insert(unit.key.to_string(), failure.clone());
                }
                None => {}
            }
        }
        Snapshot { as_of_seq: as_of_seq.unwrap_or(-1), values, failures }
    }
}

/// The state `row` seeds for `unit`, if the row is at the unit's version, its watermark is at
/// least `min_seq`, and its value decodes.
fn usable_state(unit: &PlanUnit, row: &CheckpointRow, min_seq: i64) -> Result<crate::erased::State, RowProblem> {
    if row.ver != unit.state_version {
        return Err(RowProblem::VersionMismatch { row: row.ver, unit: unit.state_version });
    }
    if row.seq < min_seq.max(-1) {
        return Err(RowProblem::Predates { row_seq: row.seq });
    }
    unit.unit.decode(&row.val).map_err(|message| RowProblem::Undecodable { message })
}

impl RestoreFold {
    /// Folds the next event of the slice. Events must come in order: the first at `base_seq`,
    /// each following one at the next seq.
    pub fn apply(&mut self, event: &SessionEvent) -> Result<(), RestoreError> {
        if event.seq != self.next_seq {
            return Err(RestoreError::Discontiguous { expected: self.next_seq, found: event.seq });
        }
        let seq = event.seq as i64;
        let seeded_through = &self.seeded_through;
        fold_event(&self.plan, &mut self.cells, event, |idx| seq > seeded_through[idx], |_, _| {});
        self.next_seq += 1;
        Ok(())
    }

    /// The seq the next event must have.
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// The seq the slice starts at: the first event [`RestoreFold::apply`] accepted (or will).
    pub fn base_seq(&self) -> u64 {
        self.base_seq
    }

    /// The values and refreshed rows at the end of the events folded so far. Fails if a row
    /// claimed events past that end (the log was cut shorter than the row).
    pub fn finish(mut self) -> Result<Restored, RestoreError> {
        let end_seq = self.check_end()?;
        let snapshot = snapshot_of(&self.plan, &mut self.cells, end_seq);
        let checkpoint = checkpoint_of(&self.plan, &self.cells, end_seq);
        Ok(Restored { snapshot, checkpoint })
    }

    /// The client values at the end of the events folded so far, as
    /// [`RestoreFold::finish`]'s snapshot would report them, without ending the fold: a follower
    /// of a log written elsewhere folds each tail as it arrives and compares the values. Fails
    /// as `finish` does.
    pub fn snapshot(&mut self) -> Result<Snapshot, RestoreError> {
        let end_seq = self.check_end()?;
        Ok(snapshot_of(&self.plan, &mut self.cells, end_seq))
    }

    /// Runs `read` on unit `key`'s client value at the end of the events folded so far, and
    /// whether any unit failed, exactly as [`RestoreFold::finish`]'s snapshot would report them
    /// (the cold twin of [`ProjectionRegistry::read_view`]). Nothing is copied and no row is
    /// encoded; a view computed once is kept, so reading several keys at the same end computes
    /// each unit's view once. Fails as `finish` does.
    pub fn read_view<R>(&mut self, key: &str, read: impl FnOnce(Option<&Value>, bool) -> R) -> Result<R, RestoreError> {
        self.check_end()?;
        Ok(read_view(&self.plan, &mut self.cells, key, read))
    }

    /// The seq the fold ends at, if no row claimed events past it.
    fn check_end(&self) -> Result<i64, RestoreError> {
        let end_seq = self.next_seq as i64 - 1;
        for (unit, &seeded_through) in self.plan.units.iter().zip(&self.seeded_through) {
            if seeded_through > end_seq {
                return Err(RestoreError::NeedsFullRead {
                    key: unit.key.to_string(),
                    base_seq: self.base_seq,
                    problem: RowProblem::BeyondEnd { row_seq: seeded_through, end_seq },
                });
            }
        }
        Ok(end_seq)
    }
}

impl fmt::Debug for RestoreFold {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RestoreFold")
            .field("base_seq", &self.base_seq)
            .field("next_seq", &self.next_seq)
            .field("units", &self.plan.units.len())
            .finish_non_exhaustive()
    }
}
