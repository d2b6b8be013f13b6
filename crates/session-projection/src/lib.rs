//! Projections: pure, typed folds over the session log, served live, cold and from checkpoint
//! rows with one set of fold rules (reference 02 §1–§6).
//!
//! - [`ProjectionUnit`] (and [`ClientView`] for a client-visible unit) is the typed contract of
//!   one fold: a key, a `state_version`, `init`, `apply`, the event types it reads.
//! - [`ProjectionRegistry`] holds the units. Attached to a `SessionStore`, it keeps a watermark
//!   cell per live session and unit, advanced on every committed event; `snapshot`, `state_of`
//!   and `checkpoint` read the cells, `restore` and [`RestoreFold`] fold stored logs, and
//!   `on_changed` feeds client-visible changes.
//! - One unit failing on one session (an error or a panic) is contained to that unit and that
//!   session and reported for its key; every other unit still folds every event.
//!
//! This crate does no I/O, reads no clock and runs no async runtime: storage of checkpoint rows
//! belongs to `session-projection-cache`.

mod cell;
mod erased;
mod plan;
mod registry;
mod restore;
mod types;
mod unit;

pub use crate::{
    registry::{ChangeListener, ChangeSubscription, ProjectionRegistry, Registration, StoreAttachment},
    restore::RestoreFold,
    types::{
        Checkpoint, CheckpointRow, CheckpointRows, Failures, ProjectionChange, RegisterError, RegisteredUnit,
        RestoreError, Restored, RowProblem, Snapshot, UnitFailure,
    },
    unit::{ClientView, ProjectionUnit, UnitError},
};
