//! Projections: pure, typed folds over the session log, served live, cold and from checkpoint
//! rows with one set of fold rules (reference 02 §1–§6).
//!
//! - [`ProjectionUnit`] (and [`ClientView`] for a client-visible unit) is the typed contract of
//!   one fold: a key, a `state_version`, `init`, `apply`, the event types it reads.
//! - [`ProjectionRegistry`] holds the units. [Attached](ProjectionRegistry::attach) to a
//!   [`SessionStore`](session_core::SessionStore), it keeps a watermark cell per live session and
//!   unit, advanced on every committed event; [`snapshot`](ProjectionRegistry::snapshot),
//!   [`state_of`](ProjectionRegistry::state_of) and [`checkpoint`](ProjectionRegistry::checkpoint)
//!   read the cells, [`restore`](ProjectionRegistry::restore) and [`RestoreFold`] fold stored
//!   logs (from seq 0, or from [`CheckpointRows`] plus the tail), and
//!   [`on_changed`](ProjectionRegistry::on_changed) feeds client-visible changes.
//! - [`check_fold_laws`](ProjectionRegistry::check_fold_laws) checks, over one log, the laws
//!   every unit must keep for live, restored and cached values to agree, and says where one
//!   breaks ([`LawViolation`]): the tool for property tests of your own units.
//! - One unit failing on one session (an error or a panic) is contained to that unit and that
//!   session and reported for its key ([`UnitFailure`]); every other unit still folds every event.
//!
//! This crate sits on `session-core` alone, beside `session-persistence`: it does no I/O, reads
//! no clock and runs no async runtime. It never reads a stored log itself; a caller hands
//! [`restore`](ProjectionRegistry::restore) the events it read. Storing checkpoint rows, and
//! reading logs to fold them cold, belongs to `session-projection-cache`; the `subagent` crate
//! registers its identity and timing units here and reads them through the registry.
//!
//! # Example
//!
//! A unit that counts completed turns, folded live, cold, and from a checkpoint plus the tail:
//!
//! ```
//! use std::sync::Arc;
//!
//! use serde::{Deserialize, Serialize};
//! use serde_json::json;
//! use session_core::{CreateOptions, ManualClock, SessionEvent, SessionStore};
//! use session_projection::{CheckpointRows, ClientView, ProjectionRegistry, ProjectionUnit, UnitError};
//!
//! /// How many turns completed, and how the last one ended.
//! #[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
//! struct TurnStats {
//!     completed: u64,
//!     last_reason: Option<String>,
//! }
//!
//! struct TurnStatsUnit;
//!
//! impl ProjectionUnit for TurnStatsUnit {
//!     type State = TurnStats;
//!
//!     fn key(&self) -> &str {
//!         "turnStats"
//!     }
//!
//!     // Bump it when the state's shape or the fold's meaning changes: rows of another version
//!     // are never used.
//!     fn state_version(&self) -> u64 {
//!         1
//!     }
//!
//!     fn init(&self) -> TurnStats {
//!         TurnStats::default()
//!     }
//!
//!     // Every other event type skips this unit without being parsed.
//!     fn reads(&self) -> Option<&'static [&'static str]> {
//!         Some(&["turn/end"])
//!     }
//!
//!     fn apply(&self, state: &TurnStats, event: &SessionEvent) -> Result<Option<TurnStats>, UnitError> {
//!         #[derive(Deserialize)]
//!         struct TurnEnd {
//!             reason: Reason,
//!         }
//!         #[derive(Deserialize)]
//!         struct Reason {
//!             kind: String,
//!         }
//!         let end: TurnEnd = event.data.parse()?;
//!         let completed = state.completed + u64::from(end.reason.kind == "completed");
//!         Ok(Some(TurnStats { completed, last_reason: Some(end.reason.kind) }))
//!     }
//! }
//!
//! impl ClientView for TurnStatsUnit {
//!     type View = TurnStats;
//!
//!     fn view(&self, state: &TurnStats) -> TurnStats {
//!         state.clone()
//!     }
//! }
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let registry = ProjectionRegistry::new();
//! // The unit stays registered while the handle lives.
//! let _registration = registry.register(TurnStatsUnit)?;
//!
//! // Live: attached to a store, the registry folds every committed event.
//! let store = Arc::new(SessionStore::new(Arc::new(ManualClock::new(0))));
//! let _attachment = registry.attach(&store);
//! let session = store.create(None, CreateOptions::default())?;
//! for (turn, reason) in [(1, "completed"), (2, "completed"), (3, "blocked")] {
//!     session.append("turn/start", &json!({"turn": turn}), None)?;
//!     session.append("turn/end", &json!({"turn": turn, "reason": {"kind": reason}}), None)?;
//! }
//! let live = registry.snapshot(&session);
//! assert_eq!(live.as_of_seq, 5);
//! assert_eq!(live.values["turnStats"], json!({"completed": 2, "last_reason": "blocked"}));
//!
//! // Cold: the same rules over the log's events, from seq 0.
//! let events = session.events();
//! let whole = registry.restore(&CheckpointRows::new(), events.iter().cloned(), 0)?;
//! assert_eq!(whole.snapshot.values, live.values);
//!
//! // A checkpoint after the first turn (the rows a cache would store), then only the tail.
//! let head = registry.restore(&CheckpointRows::new(), events[..2].iter().cloned(), 0)?;
//! let rows = head.checkpoint.rows;
//! assert_eq!(rows["turnStats"].seq, 1);
//! let resumed = registry.restore(&rows, events[2..].iter().cloned(), 2)?;
//! assert_eq!(resumed.snapshot.values, live.values);
//!
//! // The laws those three reads rely on hold for this unit over this log.
//! registry.check_fold_laws(&events)?;
//! # Ok(())
//! # }
//! ```
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
