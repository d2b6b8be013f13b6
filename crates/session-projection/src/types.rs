//! The values the registry hands out: snapshots, checkpoint rows, per-key failures and change-feed
//! entries, plus the errors of registration and restore.

use std::{collections::BTreeMap, fmt, sync::Arc};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use session_core::Session;

/// The client-visible values of one cut of one session (reference 02 §3.5).
#[derive(Debug, Clone, PartialEq)]
pub struct Snapshot {
    /// The seq of the last event folded into every value; `-1` for the empty log.
    pub as_of_seq: i64,
    /// Key → client value for every registered client-visible unit that did not fail, in
    /// registration order. A unit that computed "nothing" has a JSON `null` here, never an
    /// absent key.
    pub values: Map<String, Value>,
    /// Key → failure for every registered unit (client-visible or host-only) whose fold or view
    /// failed on this session. A failed key is absent from `values`.
    pub failures: Failures,
}

impl Snapshot {
    /// Whether any registered unit failed on this session.
    pub fn has_failures(&self) -> bool {
        !self.failures.is_empty()
    }
}

/// Per-key failures, by key.
pub type Failures = BTreeMap<String, UnitFailure>;

/// One unit's persisted state for one session (reference 02 §3.5): `{ver, seq, val}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckpointRow {
    /// The unit's `state_version` when the row was taken.
    pub ver: u64,
    /// The seq of the last event folded into `val`; `-1` for the empty log.
    pub seq: i64,
    /// The state, as JSON.
    pub val: Value,
}

/// Checkpoint rows of one session, by key.
pub type CheckpointRows = BTreeMap<String, CheckpointRow>;

/// Every registered unit's state at one cut of one session, ready to be stored.
#[derive(Debug, Clone, PartialEq)]
pub struct Checkpoint {
    /// The cut: the seq of the last event folded by every healthy unit; `-1` for the empty log.
    pub as_of_seq: i64,
    /// A row per registered unit, host-only units included. A healthy unit's row is at
    /// `as_of_seq`; a unit whose fold failed keeps its last good row (at the seq before the event
    /// it failed on), so a restore from these rows meets the same failure again. A unit whose
    /// state could not be serialized has no row.
    pub rows: CheckpointRows,
    /// Units that failed to fold ([`UnitFailure::Apply`]) or whose state could not be serialized
    /// ([`UnitFailure::Encode`]).
    pub failures: Failures,
}

/// The result of a cold fold: the values at the end of the supplied events and refreshed rows.
#[derive(Debug, Clone, PartialEq)]
pub struct Restored {
    pub snapshot: Snapshot,
    pub checkpoint: Checkpoint,
}

/// Why one unit has no value for one session. Failures are deterministic (units are pure), so a
/// live cell, a cold restore and a restore from checkpoint rows report the same failure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UnitFailure {
    /// `apply` returned an error or panicked on the event at `seq`. The unit folds no further
    /// event of this session.
    Apply { seq: u64, panicked: bool, message: String },
    /// The fold is healthy, but `view` panicked or its value could not be serialized.
    View { panicked: bool, message: String },
    /// The state could not be serialized to JSON (only reported by checkpoints).
    Encode { message: String },
}

impl UnitFailure {
    /// The seq of the event the fold failed on, for [`UnitFailure::Apply`].
    pub fn seq(&self) -> Option<u64> {
        match self {
            UnitFailure::Apply { seq, .. } => Some(*seq),
            UnitFailure::View { .. } | UnitFailure::Encode { .. } => None,
        }
    }
}

impl fmt::Display for UnitFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let verb = |panicked: bool| if panicked { "panicked" } else { "failed" };
        match self {
            UnitFailure::Apply { seq, panicked, message } => {
                write!(f, "apply {} at seq {seq}: {message}", verb(*panicked))
            }
            UnitFailure::View { panicked, message } => write!(f, "view {}: {message}", verb(*panicked)),
            UnitFailure::Encode { message } => write!(f, "state is not JSON-serializable: {message}"),
        }
    }
}

impl std::error::Error for UnitFailure {}

/// One change-feed entry: a client-visible unit's state changed at `seq` (reference 02 §6.1).
#[derive(Debug, Clone, Copy)]
pub struct ProjectionChange<'a> {
    pub session: &'a Arc<Session>,
    pub key: &'a str,
    /// The unit's new client value (the same value a snapshot at `seq` serves).
    pub value: &'a Value,
    /// The seq of the event that caused the change, which is also the unit's new watermark.
    pub seq: u64,
}

/// A registered unit, as listed by [`ProjectionRegistry::units`](crate::ProjectionRegistry::units).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegisteredUnit {
    pub key: Arc<str>,
    pub state_version: u64,
    pub client_visible: bool,
    /// The number of live [`Registration`](crate::Registration) handles sharing the key.
    pub refs: usize,
}

/// Why a unit could not be registered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegisterError {
    /// The version does not survive a JSON round trip (it is above 2^53 - 1).
    #[error("session projection {key:?} stateVersion must be a non-negative integer, got {version}")]
    InvalidStateVersion { key: String, version: u64 },
    /// The key is registered at another version.
    #[error(
        "session projection key {key:?} is already registered at stateVersion {registered}; refusing to share it with stateVersion {requested}"
    )]
    VersionConflict { key: String, registered: u64, requested: u64 },
    /// The key is registered at the same version by another unit type, or with the other
    /// visibility. Sharing a key means sharing one fold, so both must be the same unit.
    #[error(
        "session projection key {key:?} is already registered by {registered} ({registered_visibility}); refusing to share it with {requested} ({requested_visibility})"
    )]
    UnitMismatch {
        key: String,
        registered: &'static str,
        registered_visibility: &'static str,
        requested: &'static str,
        requested_visibility: &'static str,
    },
}

/// Why a row cannot seed a restore.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RowProblem {
    Missing,
    VersionMismatch {
        row: u64,
        unit: u64,
    },
    /// The row's `val` does not deserialize into the unit's state.
    Undecodable {
        message: String,
    },
    /// The row's watermark is below `base_seq - 1` (events between it and the slice are missing),
    /// or below `-1`.
    Predates {
        row_seq: i64,
    },
    /// The row claims events past the end of the supplied slice (the log was cut shorter).
    BeyondEnd {
        row_seq: i64,
        end_seq: i64,
    },
}

/// Why a cold fold could not produce a result. Unit failures are not errors: they are reported
/// per key in the result.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RestoreError {
    /// A suffix fold (`base_seq > 0`) needs a usable row for every registered unit: refolding
    /// from `init` is only sound over the whole log.
    #[error(
        "session projection {key:?} cannot restore from seq {base_seq}: its checkpoint row is missing, version-mismatched, or beyond the supplied log end; re-read from seq 0"
    )]
    NeedsFullRead { key: String, base_seq: u64, problem: RowProblem },
    /// The supplied events do not continue the slice: each must have the next seq, starting at
    /// `base_seq`.
    #[error("session projection restore expected the event at seq {expected}, got seq {found}")]
    Discontiguous { expected: u64, found: u64 },
}
