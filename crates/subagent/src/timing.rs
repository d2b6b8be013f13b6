//! The `subagentTiming` projection unit (reference 03 §4.1): the child's settled working time,
//! reset at every descriptor so that only the child's own turns count, plus the open interval of
//! the turn in progress.

use serde::{Deserialize, Serialize, Serializer, ser::SerializeMap};
use session_core::{SessionEvent, json::MAX_SAFE_INTEGER};
use session_projection::{ClientView, ProjectionUnit, UnitError};

use crate::descriptor::DESCRIPTOR_EVENT;

/// The projection key of the timing unit.
pub const SUBAGENT_TIMING_KEY: &str = "subagentTiming";

/// The timing unit's `state_version`; checkpoint rows stored at another version are not used.
pub const SUBAGENT_TIMING_STATE_VERSION: u64 = 2;

/// An open turn: its start time and the time of the last event seen inside it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ActiveInterval {
    /// The open turn's start: the `time` of its `turn/start` (epoch ms).
    pub since: i64,
    /// The `time` of the latest event seen inside the turn (epoch ms).
    pub through: i64,
}

/// The fold state. Times are event times (epoch ms); they are stored as given, and the view
/// refuses a negative one.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TimingState {
    /// The summed length of the closed turns since the last descriptor, in milliseconds
    /// (`turn/end` time minus `turn/start` time, a negative span counting 0).
    pub settled_ms: u64,
    /// The turn in progress after a descriptor, if one is open.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active: Option<ActiveInterval>,
    /// The start time of a turn opened before any descriptor, kept so that the turn holding the
    /// child's own descriptor counts from its `turn/start`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending_turn_start: Option<i64>,
    /// Whether a `subagent/descriptor` event (valid or not) has been folded; turns count only
    /// after one.
    pub descriptor_seen: bool,
}

/// The client value `{settledMs, active?}`. Serialization enforces the reference's strict view
/// schema: a negative time or a total beyond 2^53 - 1 fails, which the registry reports as this
/// unit's view failure for the session (and the subagent list then shows a `corrupt` row).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimingView {
    /// `settledMs`: the child's settled working time in milliseconds.
    pub settled_ms: u64,
    /// `active`: the turn in progress, omitted when none is open.
    pub active: Option<ActiveInterval>,
}

impl Serialize for TimingView {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::Error;
        if self.settled_ms > MAX_SAFE_INTEGER {
            return Err(S::Error::custom("subagentTiming settledMs must be a non-negative safe integer"));
        }
        if let Some(active) = self.active
            && (active.since < 0 || active.through < 0)
        {
            return Err(S::Error::custom("subagentTiming active interval times must be non-negative integers"));
        }
        let mut map = serializer.serialize_map(None)?;
        map.serialize_entry("settledMs", &self.settled_ms)?;
        if let Some(active) = &self.active {
            map.serialize_entry("active", active)?;
        }
        map.end()
    }
}

impl TimingView {
    /// Reads the client value `{settledMs, active?}` back; `None` for anything else.
    pub fn from_value(value: &serde_json::Value) -> Option<TimingView> {
        let settled_ms = value.get("settledMs")?.as_u64()?;
        let active = match value.get("active") {
            None => None,
            Some(active) => Some(ActiveInterval {
                since: active.get("since")?.as_i64()?,
                through: active.get("through")?.as_i64()?,
            }),
        };
        Some(TimingView { settled_ms, active })
    }

    /// The child's active duration in milliseconds: its settled time plus the part of the turn
    /// in progress seen so far (`through - since`, never negative), saturating.
    pub fn active_ms(&self) -> u64 {
        let open =
            self.active.map_or(0, |active| u64::try_from(active.through.saturating_sub(active.since)).unwrap_or(0));
        self.settled_ms.saturating_add(open)
    }
}

/// The `subagentTiming` unit. Pure and total: it never fails on any log (only its view can
/// refuse negative times). "Unchanged" is reported as `Ok(None)`.
#[derive(Debug, Clone, Copy, Default)]
pub struct SubagentTimingUnit;

impl ProjectionUnit for SubagentTimingUnit {
    type State = TimingState;

    fn key(&self) -> &str {
        SUBAGENT_TIMING_KEY
    }

    fn state_version(&self) -> u64 {
        SUBAGENT_TIMING_STATE_VERSION
    }

    fn init(&self) -> TimingState {
        TimingState::default()
    }

    fn apply(&self, state: &TimingState, event: &SessionEvent) -> Result<Option<TimingState>, UnitError> {
        let time = event.time;
        Ok(match event.kind.as_str() {
            "turn/start" if state.descriptor_seen => {
                // Replaces any open interval without accumulating it.
                Some(TimingState { active: Some(ActiveInterval { since: time, through: time }), ..state.clone() })
            }
            "turn/start" => Some(TimingState { pending_turn_start: Some(time), ..state.clone() }),
            // Any descriptor, valid or not: the total restarts, the open turn keeps its start.
            DESCRIPTOR_EVENT => {
                let since = state.active.map(|active| active.since).or(state.pending_turn_start);
                Some(TimingState {
                    settled_ms: 0,
                    active: since.map(|since| ActiveInterval { since, through: time }),
                    pending_turn_start: None,
                    descriptor_seen: true,
                })
            }
            "turn/end" if !state.descriptor_seen => {
                state.pending_turn_start.is_some().then(|| TimingState { pending_turn_start: None, ..state.clone() })
            }
            "turn/end" => state.active.map(|active| {
                let elapsed = u64::try_from(time.saturating_sub(active.since)).unwrap_or(0);
                TimingState { settled_ms: state.settled_ms.saturating_add(elapsed), active: None, ..state.clone() }
            }),
            _ => state.active.map(|active| TimingState {
                active: Some(ActiveInterval { through: time, ..active }),
                ..state.clone()
            }),
        })
    }
}

impl ClientView for SubagentTimingUnit {
    type View = TimingView;

    fn view(&self, state: &TimingState) -> TimingView {
        TimingView { settled_ms: state.settled_ms, active: state.active }
    }
}
