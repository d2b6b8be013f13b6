//! The object-safe layer under the typed units: the registry is heterogeneous, so it holds each
//! unit as `dyn ErasedUnit` and each state as a `Box<dyn Any>`.
//!
//! States stay typed in memory (a downcast per `apply` is one `TypeId` comparison); JSON is
//! produced only where JSON is the product: client views, checkpoint rows and `state_of`. Holding
//! states as `serde_json::Value` instead would cost a decode and an encode on every applied event.

use std::{
    any::{Any, TypeId, type_name},
    panic::{AssertUnwindSafe, catch_unwind},
};

use serde::Deserialize;
use serde_json::Value;
use session_core::{SessionEvent, json::check_lossless, panic_text};

use crate::{ClientView, ProjectionUnit, UnitError, UnitFailure};

/// A unit's state, typed behind `Any`.
pub(crate) type State = Box<dyn Any + Send + Sync>;

pub(crate) trait ErasedUnit: Send + Sync {
    fn unit_type(&self) -> TypeId;
    fn type_name(&self) -> &'static str;
    fn is_client_visible(&self) -> bool;
    fn init(&self) -> State;
    /// Folds one event into `state` in place; `Ok(true)` if the unit reported a change. Panics
    /// propagate; the caller contains them.
    fn apply(&self, state: &mut State, event: &SessionEvent) -> Result<bool, UnitError>;
    /// The client value, for a client-visible unit (`None` for a host-only one).
    fn view(&self, state: &State) -> Option<Result<Value, UnitFailure>>;
    fn encode(&self, state: &State) -> Result<Value, UnitFailure>;
    fn decode(&self, value: &Value) -> Result<State, String>;
}

/// Renders a client value: [`ClientView::view`] then serialization.
type ViewFn<U> = fn(&U, &<U as ProjectionUnit>::State) -> Result<Value, serde_json::Error>;

/// A typed unit with an optional view "vtable": `Some` for a client-visible unit.
pub(crate) struct Erased<U: ProjectionUnit> {
    unit: U,
    view: Option<ViewFn<U>>,
}

impl<U: ProjectionUnit> Erased<U> {
    pub(crate) fn host_only(unit: U) -> Erased<U> {
        Erased { unit, view: None }
    }
}

impl<U: ClientView> Erased<U> {
    pub(crate) fn client(unit: U) -> Erased<U> {
        Erased { unit, view: Some(|unit, state| serde_json::to_value(unit.view(state))) }
    }
}

fn typed<S: 'static>(state: &State) -> &S {
    state.downcast_ref::<S>().expect("a cell's state has the type of the unit that built it")
}

impl<U: ProjectionUnit> ErasedUnit for Erased<U> {
    fn unit_type(&self) -> TypeId {
        TypeId::of::<U>()
    }

    fn type_name(&self) -> &'static str {
        type_name::<U>()
    }

    fn is_client_visible(&self) -> bool {
        self.view.is_some()
    }

    fn init(&self) -> State {
        Box::new(self.unit.init())
    }

    fn apply(&self, state: &mut State, event: &SessionEvent) -> Result<bool, UnitError> {
        let slot = state.downcast_mut::<U::State>().expect("a cell's state has the type of the unit that built it");
        match self.unit.apply(slot, event)? {
            Some(next) => {
                *slot = next;
                Ok(true)
            }
            None => Ok(false),
        }
    }

    fn view(&self, state: &State) -> Option<Result<Value, UnitFailure>> {
        let view = self.view?;
        let state = typed::<U::State>(state);
        Some(match catch_unwind(AssertUnwindSafe(|| view(&self.unit, state))) {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(error)) => Err(UnitFailure::View { panicked: false, message: error.to_string() }),
            Err(payload) => Err(UnitFailure::View { panicked: true, message: panic_text(payload.as_ref()) }),
        })
    }

    fn encode(&self, state: &State) -> Result<Value, UnitFailure> {
        let state = typed::<U::State>(state);
        let value = match catch_unwind(AssertUnwindSafe(|| serde_json::to_value(state))) {
            Ok(Ok(value)) => value,
            Ok(Err(error)) => return Err(UnitFailure::Encode { message: error.to_string() }),
            Err(payload) => return Err(UnitFailure::Encode { message: panic_text(payload.as_ref()) }),
        };
        check_lossless(&value).map_err(|error| UnitFailure::Encode { message: error.to_string() })?;
        // A state that does not survive the round trip would make a restore from this row
        // diverge from the live cell; refuse to hand out such a row (reference 02 W17).
        let round_trip = self.decode(&value).map_err(|message| UnitFailure::Encode {
            message: format!("the serialized state does not deserialize: {message}"),
        })?;
        let again = serde_json::to_value(typed::<U::State>(&round_trip))
            .map_err(|error| UnitFailure::Encode { message: error.to_string() })?;
        if again != value {
            return Err(UnitFailure::Encode {
                message: "the state does not round-trip through JSON (it deserializes to a different value)".to_owned(),
            });
        }
        Ok(value)
    }

    fn decode(&self, value: &Value) -> Result<State, String> {
        match catch_unwind(AssertUnwindSafe(|| U::State::deserialize(value))) {
            Ok(Ok(state)) => Ok(Box::new(state)),
            Ok(Err(error)) => Err(error.to_string()),
            Err(payload) => Err(panic_text(payload.as_ref())),
        }
    }
}

/// Folds one event into one unit's state, containing an error or a panic as a failure.
pub(crate) fn apply_contained(
    unit: &dyn ErasedUnit,
    state: &mut State,
    event: &SessionEvent,
) -> Result<bool, UnitFailure> {
    match catch_unwind(AssertUnwindSafe(|| unit.apply(state, event))) {
        Ok(Ok(changed)) => Ok(changed),
        Ok(Err(error)) => Err(UnitFailure::Apply { seq: event.seq, panicked: false, message: error.to_string() }),
        Err(payload) => {
            Err(UnitFailure::Apply { seq: event.seq, panicked: true, message: panic_text(payload.as_ref()) })
        }
    }
}
