//! Projections: pure, typed folds over the session log, served live, cold and from checkpoint
//! rows with one set of fold rules (reference 02 §1–§6).
//!
//! - [`ProjectionUnit`] (and [`ClientView`] for a client-visible unit) is the typed contract of
//!   one fold: a key, a `state_version`, `init`, `apply`, the event types it reads.
//! - [`ProjectionRegistry`] holds the units. Attached to a `SessionStore`, it keeps a watermark
//!   cell per live session and unit, advanced on every committed event; `snapshot`, `state_of`
//!   and `checkpoint` read the cells, `restore` and [`RestoreFold`] fold stored logs, and
//!   `on_changed` feeds client-visible changes.
//! - `check_fold_laws` checks, over one log, the laws every unit must keep for live, restored and
//!   cached values to agree, and says where one breaks ([`LawViolation`]): the tool for property
//!   tests of your own units.
//! - One unit failing on one session (an error or a panic) is contained to that unit and that
//!   session and reported for its key; every other unit still folds every event.
//!
//! This crate does no I/O, reads no clock and runs no async runtime: storage of checkpoint rows
//! belongs to `session-projection-cache`.
//!
//! Where this differs from the reference (reference 02 §12):
//! - W1/W3: a unit's error or panic is caught per unit and per event; the unit's cell stops at its
//!   last good state and every read reports a [`UnitFailure`] for its key (`Snapshot::failures`,
//!   `Checkpoint::failures`, `state_of`). Other units and other sessions are unaffected, and a cold
//!   fold reports the same failure, so live and cold still agree. A listener's panic is contained.
//! - W2: a session's cells apply an event only at `folded_seq + 1`; a replayed notification is
//!   skipped, a gap is folded from the session's log, and a read that folded an event before the
//!   drive saw it does not make the drive drop that event's change-feed entries.
//! - W4: a client value is computed once per change and shared by the feed and every snapshot.
//! - W5: a key is shared only by the same unit type with the same visibility.
//! - W6: `restore` checks that the slice is contiguous from `base_seq`, treats an undecodable row as
//!   unusable, and over the whole log (`base_seq == 0`) folds from `init` without consulting rows.
//! - W16: a unit declares the event types it reads; the others never reach its `apply`.
//! - W17: a checkpoint row is handed out only if the state round-trips through JSON unchanged.

mod cell;
mod erased;
mod laws;
mod plan;
mod registry;
mod restore;
mod types;
mod unit;

#[cfg(test)]
mod tests;

pub use crate::{
    laws::LawViolation,
    registry::{ChangeListener, ChangeSubscription, ProjectionRegistry, Registration, StoreAttachment},
    restore::RestoreFold,
    types::{
        Checkpoint, CheckpointRow, CheckpointRows, Failures, ProjectionChange, RegisterError, RegisteredUnit,
        RestoreError, Restored, RowProblem, Snapshot, UnitFailure,
    },
    unit::{ClientView, ProjectionUnit, UnitError},
};
