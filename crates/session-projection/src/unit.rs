//! The typed unit contract: a projection unit folds one piece of state out of a session log.

use serde::{Serialize, de::DeserializeOwned};
use session_core::SessionEvent;

/// What a unit's `apply` returns when it cannot fold an event. Any error type converts into it.
pub type UnitError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// A pure, synchronous fold over a session's events (reference 02 §2).
///
/// The registry drives every registered unit over every committed event of every session; the
/// same `init`/`apply` pair serves the live cells, cold restores and checkpoint views, so there is
/// exactly one authority for the fold rules.
///
/// Contract:
/// - `init`, `apply` and [`ClientView::view`] are pure: they read no clock, no randomness and no
///   mutable host state (`event.time` and `event.seq` are fine), and they never call back into the
///   registry (a unit runs while its session's cells are locked).
/// - `apply` returns `Ok(None)` when the event leaves the state unchanged, and `Ok(Some(next))`
///   when it produces a new state. `Some` counts as a change even if `next` equals the old state:
///   a client-visible unit then emits a change-feed entry.
/// - The state round-trips losslessly through JSON (`serde_json::to_value`, then
///   `Deserialize`): it is what checkpoint rows store and restores re-seed. No `f64` NaN or
///   infinity, no maps with non-string keys.
/// - A payload the unit cannot make sense of should fold to a sentinel (typically a `null`-valued
///   state) rather than fail. A returned error or a panic is contained to this unit and this
///   session: the unit's cell stops at the last good state and the failure is reported for its key.
pub trait ProjectionUnit: Send + Sync + 'static {
    /// The fold state. Keep it O(1) or UI-sized: `apply` builds a new one for every change.
    type State: Serialize + DeserializeOwned + Send + Sync + 'static;

    /// The projection key, unique across the registry. Must not change over the unit's life.
    fn key(&self) -> &str;

    /// The invalidation anchor for persisted rows: bump it whenever the serialized state shape or
    /// the fold semantics change. Rows stored at another version are never used. At most
    /// 2^53 - 1, so that it survives a JSON round trip.
    fn state_version(&self) -> u64;

    /// The state of the empty log. Called for every fresh fold, so keep it cheap.
    fn init(&self) -> Self::State;

    /// The event types this unit reads, or `None` for every event. The registry does not call
    /// `apply` (and nothing parses the payload) for an event whose type is not listed.
    fn reads(&self) -> Option<&'static [&'static str]> {
        None
    }

    /// Folds one event: `Ok(None)` when the state is unchanged, `Ok(Some(next))` otherwise.
    fn apply(&self, state: &Self::State, event: &SessionEvent) -> Result<Option<Self::State>, UnitError>;
}

/// A unit whose value clients see (a "wire" unit in the reference). Units without it are
/// host-only: their state is readable in the host and checkpointed, but never served or fed.
pub trait ClientView: ProjectionUnit {
    /// The whole client-visible value. "Computed, but nothing" must serialize to `null` (an
    /// `Option` that is `None`), never to a missing field.
    type View: Serialize;

    /// Maps the state to the client value. Pure; it may read host configuration only if that
    /// cannot change during the process lifetime.
    fn view(&self, state: &Self::State) -> Self::View;
}
