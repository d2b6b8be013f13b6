//! Checkpoint records: one session's checkpoint rows, bound to one session lifetime
//! (reference 02 §7.1–§7.2).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use session_core::{SessionHeader, json::MAX_SAFE_INTEGER};
use session_projection::{Checkpoint, CheckpointRows, Failures, UnitFailure};

use crate::error::{CacheError, Result};

/// What binds a record to one lifetime of a session id: a session id names a slot, not a
/// lifetime, so a deleted-then-recreated id (or a log store swapped under a surviving cache) must
/// never seed values folded from another log, even though every watermark check would pass.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RecordIdentity {
    /// The header's `createdAt` (Unix epoch milliseconds) of the lifetime the rows were folded
    /// from.
    pub created_at: u64,
    /// The header's `cwd` of that lifetime, if it had one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
}

impl RecordIdentity {
    /// The identity of the lifetime `header` describes.
    pub fn of(header: &SessionHeader) -> RecordIdentity {
        RecordIdentity { created_at: header.created_at, cwd: header.cwd.clone() }
    }

    /// `createdAt` equal and `cwd` equal (both absent counts as equal; present against absent
    /// does not).
    pub fn matches(&self, header: &SessionHeader) -> bool {
        self.created_at == header.created_at && self.cwd == header.cwd
    }
}

/// A unit that failed to fold this session's log, as stored beside its last good row, so that a
/// cached snapshot reports the failure exactly as the live cells and a cold fold do.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StoredFailure {
    /// The unit's `state_version` when it failed; a failure at another version is ignored.
    pub ver: u64,
    /// The seq of the event `apply` failed on.
    pub seq: u64,
    /// Whether `apply` panicked (rather than returned an error).
    pub panicked: bool,
    /// The error's text, or the panic's payload.
    pub message: String,
}

impl StoredFailure {
    /// The failure as the registry reports it: [`UnitFailure::Apply`] at the stored seq.
    pub fn to_unit_failure(&self) -> UnitFailure {
        UnitFailure::Apply { seq: self.seq, panicked: self.panicked, message: self.message.clone() }
    }
}

/// One session's durable checkpoint: whole-record replaced on every write.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CheckpointRecord {
    /// The session lifetime the rows were folded from; a record whose identity does not match the
    /// header of the log it is read against is not used.
    pub identity: RecordIdentity,
    /// The cut the rows were taken at: the seq of the last event every healthy unit folded.
    pub as_of_seq: i64,
    /// `{ver, seq, val}` per unit, host-only units included.
    pub rows: CheckpointRows,
    /// Units whose fold failed on this log. Their rows stay at the seq before the failure.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub failures: BTreeMap<String, StoredFailure>,
}

impl CheckpointRecord {
    /// The record of a checkpoint taken from `identity`'s log. Fails if a unit's state cannot be
    /// stored (its row is missing, or it reports an encode failure): storing the others would make
    /// that unit refold from zero on every cold read while the record claims to be current.
    pub fn from_checkpoint(identity: RecordIdentity, checkpoint: &Checkpoint) -> Result<CheckpointRecord> {
        let mut failures = BTreeMap::new();
        for (key, failure) in &checkpoint.failures {
            let row = checkpoint.rows.get(key);
            match (failure, row) {
                (UnitFailure::Apply { seq, panicked, message }, Some(row)) => {
                    failures.insert(
                        key.clone(),
                        StoredFailure { ver: row.ver, seq: *seq, panicked: *panicked, message: message.clone() },
                    );
                }
                (UnitFailure::Encode { message }, _) | (UnitFailure::Apply { message, .. }, None) => {
                    return Err(CacheError::NotLossless { key: key.clone(), message: message.clone() });
                }
                // A checkpoint never reports view failures; a view is not part of a row.
                (UnitFailure::View { .. }, _) => {}
            }
        }
        Ok(CheckpointRecord { identity, as_of_seq: checkpoint.as_of_seq, rows: checkpoint.rows.clone(), failures })
    }

    /// Checks the rules the types cannot express: safe integers, watermarks within `[-1,
    /// as_of_seq]`. A record that fails them is discarded.
    pub fn validate(&self) -> std::result::Result<(), String> {
        if self.identity.created_at > MAX_SAFE_INTEGER {
            return Err(format!("identity createdAt {} is not a safe integer", self.identity.created_at));
        }
        if !(-1..=MAX_SAFE_INTEGER as i64).contains(&self.as_of_seq) {
            return Err(format!("asOfSeq {} is out of range", self.as_of_seq));
        }
        for (key, row) in &self.rows {
            if row.ver > MAX_SAFE_INTEGER {
                return Err(format!("row {key:?} has version {} (not a safe integer)", row.ver));
            }
            if row.seq < -1 || row.seq > self.as_of_seq {
                return Err(format!("row {key:?} is at seq {}, outside [-1, {}]", row.seq, self.as_of_seq));
            }
        }
        for (key, failure) in &self.failures {
            if failure.seq > MAX_SAFE_INTEGER || failure.seq as i64 > self.as_of_seq {
                return Err(format!("failure {key:?} at seq {} is past the cut {}", failure.seq, self.as_of_seq));
            }
        }
        Ok(())
    }

    /// The stored failures of units registered at the failure's version, as unit failures.
    pub(crate) fn failures_at(&self, versions: &BTreeMap<String, u64>) -> Failures {
        self.failures
            .iter()
            .filter(|(key, failure)| versions.get(key.as_str()) == Some(&failure.ver))
            .map(|(key, failure)| (key.clone(), failure.to_unit_failure()))
            .collect()
    }
}
