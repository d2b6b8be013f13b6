//! The fold laws a registry's units must keep, checked over one log: the tool for property
//! tests of your own units (`ProjectionRegistry::check_fold_laws`).
//!
//! Live cells, cold restores and checkpoint caches all assume that a unit's next state depends
//! only on its state and the event, and that its state survives being stored as a row. A unit
//! that breaks either still folds, and its values look right in most tests; what goes wrong is
//! that a restored or cached value differs from a live one. These laws make that visible.

use std::borrow::Borrow;

use session_core::SessionEvent;

use crate::{CheckpointRows, ProjectionRegistry, RestoreError, Restored, UnitFailure};

/// A fold law the registered units broke over one log, with where it shows: the first cut (the
/// number of events folded) and key, where the law has them.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum LawViolation {
    /// The events are not a log from seq 0 (each event's seq must be its index).
    #[error("the events are not a log from seq 0: {0}")]
    NotALog(RestoreError),
    /// Two folds of the same events from `init` disagree: a unit depends on more than its state
    /// and the event (a counter in the unit, a clock, a random number, ...).
    #[error(
        "two folds of the same {n_events} events disagree on {key:?}: a unit depends on more than its state and the event"
    )]
    NotDeterministic {
        /// The length of the log both folds read.
        n_events: usize,
        /// The first key (in key order) whose value, row or failure differs.
        key: String,
    },
    /// A unit's state after the first `cut` events cannot be stored as a checkpoint row.
    #[error("unit {key:?} cannot store its state after {cut} events: {message}")]
    Unencodable {
        /// The number of events folded when the state could not be stored.
        cut: usize,
        /// The unit's key.
        key: String,
        /// The serializer's error.
        message: String,
    },
    /// The value served from the checkpoint after the first `cut` events, with zero log reads
    /// (`view_checkpoint`, what a checkpoint cache serves), differs from the fold's value at that
    /// cut: a unit's row loses part of what its view shows.
    #[error(
        "the value of {key:?} served from the checkpoint after {cut} events differs from the fold's: a unit's row loses part of its state"
    )]
    CachedView {
        /// The number of events folded into the checkpoint.
        cut: usize,
        /// The first client-visible key whose served value differs.
        key: String,
    },
    /// The registry refused the rows it produced itself after the first `cut` events. Only a
    /// registration that changes while the check runs can cause it.
    #[error("the checkpoint after {cut} events cannot seed a restore: {error}")]
    RowsRefused {
        /// The number of events folded into the checkpoint.
        cut: usize,
        /// Why the restore refused the rows.
        error: RestoreError,
    },
    /// Restoring from the checkpoint after the first `cut` events (its rows taken through JSON
    /// text, as a store keeps them) and folding the rest disagrees with the fold of the whole
    /// log: a unit's state loses something its row does not carry (a `#[serde(skip)]` field, a
    /// lossy custom serializer, ...).
    #[error(
        "restoring from the checkpoint after {cut} events and folding the rest disagrees with the whole log on {key:?}: a unit's row loses part of its state"
    )]
    CheckpointPlusTail {
        /// The number of events folded into the checkpoint the restore was seeded from.
        cut: usize,
        /// The first key (in key order) whose value, row or failure differs, or a description
        /// of the cut when only the watermarks differ.
        key: String,
    },
}

impl ProjectionRegistry {
    /// Checks the fold laws of every registered unit over `events`, a log from seq 0:
    ///
    /// 1. folding the log twice from `init` gives the same values, rows and failures;
    /// 2. after every prefix of the log, each unit's state can be stored as a row;
    /// 3. after every prefix, the values served from that checkpoint's rows (written to JSON text
    ///    and read back, as a store keeps them) with zero log reads equal the fold's values there;
    /// 4. after every prefix, a restore seeded from those rows, from
    ///    [`restore_floor`](Self::restore_floor) on, plus the rest of the log gives exactly the
    ///    fold of the whole log. The rows are used even where the floor is seq 0 and a real
    ///    restore would fold from `init`, so every cut checks every unit's row.
    ///
    /// A unit that fails on an event (an error or a panic) or whose view fails breaks no law: the
    /// failure is part of the fold, and a restore must meet it again. Meant for property tests of
    /// your own units (for example with `proptest` over generated logs). It folds the log once
    /// per prefix, so keep the logs short: a few hundred events.
    pub fn check_fold_laws<E: Borrow<SessionEvent>>(&self, events: &[E]) -> Result<(), LawViolation> {
        let fold_all = |slice: &[E]| self.restore(&CheckpointRows::new(), slice.iter().map(Borrow::borrow), 0);
        let whole = fold_all(events).map_err(LawViolation::NotALog)?;
        let again = fold_all(events).map_err(LawViolation::NotALog)?;
        if let Some(key) = first_difference(&whole, &again) {
            return Err(LawViolation::NotDeterministic { n_events: events.len(), key });
        }
        for cut in 0..=events.len() {
            let prefix = fold_all(&events[..cut]).map_err(LawViolation::NotALog)?;
            if let Some((key, UnitFailure::Encode { message })) =
                prefix.checkpoint.failures.iter().find(|(_, failure)| matches!(failure, UnitFailure::Encode { .. }))
            {
                return Err(LawViolation::Unencodable { cut, key: key.clone(), message: message.clone() });
            }
            let rows = through_json(&prefix.checkpoint.rows);

            let cached = self.view_checkpoint(&rows);
            if let Some(key) = prefix
                .snapshot
                .values
                .iter()
                .find(|(key, value)| cached.values.get(*key) != Some(value))
                .map(|(key, _)| key)
            {
                return Err(LawViolation::CachedView { cut, key: key.clone() });
            }

            let Some(floor) = self.restore_floor(&rows) else {
                // No unit is registered: there is nothing to restore.
                return Ok(());
            };
            let resumed = self
                .begin_seeded_restore(&rows, floor)
                .and_then(|mut fold| {
                    for event in &events[floor as usize..] {
                        fold.apply(event.borrow())?;
                    }
                    fold.finish()
                })
                .map_err(|error| LawViolation::RowsRefused { cut, error })?;
            if let Some(key) = first_difference(&whole, &resumed) {
                return Err(LawViolation::CheckpointPlusTail { cut, key });
            }
        }
        Ok(())
    }
}

/// `rows` written to JSON text and read back, as a checkpoint store keeps them.
fn through_json(rows: &CheckpointRows) -> CheckpointRows {
    // Invariant: rows are string-keyed maps of integers and JSON values, which always serialize,
    // and serde_json always reads back its own output.
    let text = serde_json::to_vec(rows).expect("checkpoint rows serialize");
    serde_json::from_slice(&text).expect("serde_json reads its own output")
}

/// The first key (in key order) whose value, row or failure differs between `a` and `b`, or a
/// description of the cut if only the watermarks differ.
fn first_difference(a: &Restored, b: &Restored) -> Option<String> {
    if a == b {
        return None;
    }
    let keys = a
        .snapshot
        .values
        .keys()
        .chain(b.snapshot.values.keys())
        .chain(a.checkpoint.rows.keys())
        .chain(b.checkpoint.rows.keys())
        .chain(a.checkpoint.failures.keys())
        .chain(b.checkpoint.failures.keys())
        .chain(a.snapshot.failures.keys())
        .chain(b.snapshot.failures.keys());
    let differs = |key: &String| {
        a.snapshot.values.get(key) != b.snapshot.values.get(key)
            || a.checkpoint.rows.get(key) != b.checkpoint.rows.get(key)
            || a.checkpoint.failures.get(key) != b.checkpoint.failures.get(key)
            || a.snapshot.failures.get(key) != b.snapshot.failures.get(key)
    };
    let first = keys.filter(|key| differs(key)).min().cloned();
    Some(first.unwrap_or_else(|| {
        format!(
            "<the cut: as_of_seq {} and {} against {} and {}>",
            a.snapshot.as_of_seq, a.checkpoint.as_of_seq, b.snapshot.as_of_seq, b.checkpoint.as_of_seq
        )
    }))
}
