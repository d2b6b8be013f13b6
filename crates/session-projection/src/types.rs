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
    /// The client values at the fold's end, as [`ProjectionRegistry::snapshot`] of a live
    /// session with the same events would serve them.
    ///
    /// [`ProjectionRegistry::snapshot`]: crate::ProjectionRegistry::snapshot
    pub snapshot: Snapshot,
    /// Every unit's row at the fold's end, ready to be stored and to seed the next restore.
    pub checkpoint: Checkpoint,
}

/// Why one unit has no value for one session. Failures are deterministic (units are pure), so a
/// live cell, a cold restore and a restore from checkpoint rows report the same failure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UnitFailure {
    /// `apply` returned an error or panicked on the event at `seq`. The unit folds no further
    /// event of this session.
    Apply {
        /// The seq of the event the unit failed on.
        seq: u64,
        /// Whether `apply` panicked (rather than returned an error).
        panicked: bool,
        /// The error's text, or the panic's payload when it is a string.
        message: String,
    },
    /// The fold is healthy, but `view` panicked or its value could not be serialized.
    View {
        /// Whether `view` panicked (rather than its value failing to serialize).
        panicked: bool,
        /// The panic's payload (when it is a string) or the serializer's error.
        message: String,
    },
    /// The state could not be serialized to JSON (only reported by checkpoints).
    Encode {
        /// What went wrong: the serializer's error, a panic's payload, a value outside the
        /// lossless JSON domain, or a state that does not read back as itself.
        message: String,
    },
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
    /// The live session whose event caused the change.
    pub session: &'a Arc<Session>,
    /// The key of the unit whose state changed.
    pub key: &'a str,
    /// The unit's new client value (the same value a snapshot at `seq` serves).
    pub value: &'a Value,
    /// The seq of the event that caused the change, which is also the unit's new watermark.
    pub seq: u64,
}

/// A registered unit, as listed by [`ProjectionRegistry::units`](crate::ProjectionRegistry::units).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegisteredUnit {
    /// The unit's projection key.
    pub key: Arc<str>,
    /// The unit's [`state_version`](crate::ProjectionUnit::state_version).
    pub state_version: u64,
    /// Whether the unit was registered with
    /// [`register`](crate::ProjectionRegistry::register) (client-visible) rather than
    /// [`register_host_only`](crate::ProjectionRegistry::register_host_only).
    pub client_visible: bool,
    /// The number of live [`Registration`](crate::Registration) handles sharing the key.
    pub refs: usize,
}

/// Why a unit could not be registered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RegisterError {
    /// The version does not survive a JSON round trip (it is above 2^53 - 1).
    #[error("session projection {key:?} stateVersion must be a non-negative integer, got {version}")]
    InvalidStateVersion {
        /// The unit's key.
        key: String,
        /// The refused version.
        version: u64,
    },
    /// The key is registered at another version.
    #[error(
        "session projection key {key:?} is already registered at stateVersion {registered}; refusing to share it with stateVersion {requested}"
    )]
    VersionConflict {
        /// The shared key.
        key: String,
        /// The `state_version` the key is registered at.
        registered: u64,
        /// The `state_version` of the unit that was refused.
        requested: u64,
    },
    /// The key is registered at the same version by another unit type, or with the other
    /// visibility. Sharing a key means sharing one fold, so both must be the same unit.
    #[error(
        "session projection key {key:?} is already registered by {registered} ({registered_visibility}); refusing to share it with {requested} ({requested_visibility})"
    )]
    UnitMismatch {
        /// The shared key.
        key: String,
        /// The Rust type name of the unit registered under the key.
        registered: &'static str,
        /// `client-visible` or `host-only`: how the registered unit was registered.
        registered_visibility: &'static str,
        /// The Rust type name of the unit that was refused.
        requested: &'static str,
        /// `client-visible` or `host-only`: how the refused unit was to be registered.
        requested_visibility: &'static str,
    },
}

/// Why a row cannot seed a restore.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RowProblem {
    /// There is no row for the unit's key.
    Missing,
    /// The row was stored at another `state_version` than the registered unit's.
    VersionMismatch {
        /// The row's `ver`.
        row: u64,
        /// The registered unit's `state_version`.
        unit: u64,
    },
    /// The row's `val` does not deserialize into the unit's state.
    Undecodable {
        /// The deserializer's error.
        message: String,
    },
    /// The row's watermark is below `base_seq - 1` (events between it and the slice are missing),
    /// or below `-1`.
    Predates {
        /// The row's watermark (`seq`).
        row_seq: i64,
    },
    /// The row claims events past the end of the supplied slice (the log was cut shorter).
    BeyondEnd {
        /// The row's watermark (`seq`).
        row_seq: i64,
        /// The seq of the last event supplied (`-1` when the log is empty).
        end_seq: i64,
    },
}

/// Why a cold fold could not produce a result. Unit failures are not errors: they are reported
/// per key in the result.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RestoreError {
    /// A suffix fold (`base_seq > 0`) needs a usable row for every registered unit: refolding
    /// from `init` is only sound over the whole log.
    #[error(
        "session projection {key:?} cannot restore from seq {base_seq}: its checkpoint row is missing, version-mismatched, or beyond the supplied log end; re-read from seq 0"
    )]
    NeedsFullRead {
        /// The first unit (in registration order) without a usable row.
        key: String,
        /// The seq the refused slice starts at.
        base_seq: u64,
        /// Why that unit's row cannot seed the slice.
        problem: RowProblem,
    },
    /// The supplied events do not continue the slice: each must have the next seq, starting at
    /// `base_seq`.
    #[error("session projection restore expected the event at seq {expected}, got seq {found}")]
    Discontiguous {
        /// The seq the next event had to have.
        expected: u64,
        /// The seq the supplied event has.
        found: u64,
    },
}
