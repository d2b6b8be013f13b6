//! A custom projection unit, `turnStats`: how many turns a session completed and how its last one
//! ended. It is registered on a registry, folded over a log, restored from a checkpoint plus the
//! tail, and property-tested with `check_fold_laws`, the check a host runs on each unit of its own
//! (`cargo test -p examples --example turn_counter` runs the property test).
//!
//! Run with `cargo run -p examples --example turn_counter`.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::json;
use session_core::SessionEvent;
use session_projection::{ClientView, ProjectionRegistry, ProjectionUnit, UnitError};

/// The fold state: small, and rebuilt only when it changes.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TurnStats {
    completed: u64,
    last_reason: Option<String>,
}

/// Counts `turn/end` events by their reason.
#[derive(Debug)]
pub struct TurnStatsUnit;

impl ProjectionUnit for TurnStatsUnit {
    type State = TurnStats;

    fn key(&self) -> &str {
        "turnStats"
    }

    /// Bump when the state's shape or the fold's meaning changes: stored rows of another version
    /// are never used.
    fn state_version(&self) -> u64 {
        1
    }

    fn init(&self) -> TurnStats {
        TurnStats::default()
    }

    /// Only `turn/end` is parsed; the registry skips every other event for this unit.
    fn reads(&self) -> Option<&'static [&'static str]> {
        Some(&["turn/end"])
    }

    fn apply(&self, state: &TurnStats, event: &SessionEvent) -> Result<Option<TurnStats>, UnitError> {
        let data = event.data.to_value().map_err(|error| UnitError::from(error.to_string()))?;
        let reason = data["reason"]["kind"].as_str().map(str::to_owned);
        let completed = state.completed + u64::from(reason.as_deref() == Some("completed"));
        Ok(Some(TurnStats { completed, last_reason: reason }))
    }
}

impl ClientView for TurnStatsUnit {
    type View = TurnStats;

    fn view(&self, state: &TurnStats) -> TurnStats {
        state.clone()
    }
}

/// A log of `n` turns, the last one ending with `last`.
pub fn log(n: u64, last: &str) -> Vec<Arc<SessionEvent>> {
    let mut events = Vec::new();
    for turn in 1..=n {
        let seq = events.len() as u64;
        let reason = if turn == n { last } else { "completed" };
        events.push(json!({"type": "turn/start", "seq": seq, "time": seq, "data": {"turn": turn}}));
        events.push(json!({"type": "turn/end", "seq": seq + 1, "time": seq + 1,
            "data": {"turn": turn, "reason": {"kind": reason}}}));
    }
    events.into_iter().map(|event| Arc::new(serde_json::from_value(event).expect("a valid event"))).collect()
}

fn main() -> anyhow::Result<()> {
    let registry = ProjectionRegistry::new();
    let _registration = registry.register(TurnStatsUnit)?;
    let events = log(3, "blocked");

    // A cold fold from nothing: what a live session's watermark cells hold after these events.
    let whole = registry.restore(&Default::default(), events.iter().map(|event| &**event), 0)?;
    println!("fold of the whole log: {}", whole.snapshot.values["turnStats"]);

    // A checkpoint after the first turn, then only the tail: the same value.
    let head = registry.restore(&Default::default(), events[..2].iter().map(|event| &**event), 0)?;
    let resumed = registry.restore(&head.checkpoint.rows, events[2..].iter().map(|event| &**event), 2)?;
    assert_eq!(resumed.snapshot.values, whole.snapshot.values);
    println!("checkpoint + tail:     {}", resumed.snapshot.values["turnStats"]);

    // The laws every read relies on, over this log.
    registry.check_fold_laws(&events)?;
    println!("fold laws hold");
    Ok(())
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        /// Over logs of any length and ending, the unit keeps the fold laws: a deterministic fold,
        /// encodable states, and checkpoint rows that serve the same values and resume to the
        /// same fold.
        #[test]
        fn turn_stats_keeps_the_fold_laws(n in 0u64..12, last in prop::sample::select(vec!["completed", "blocked", "aborted"])) {
            let registry = ProjectionRegistry::new();
            let _registration = registry.register(TurnStatsUnit).unwrap();
            let events = log(n, last);
            prop_assert!(registry.check_fold_laws(&events).is_ok());
        }
    }
}
