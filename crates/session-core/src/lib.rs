//! The append-only session event log: ids, headers, events, `Session`, `SessionStore`, fork and
//! crash-repair closers.
//!
//! This crate does no I/O and reads no clock: time arrives through the [`Clock`] trait, and
//! storage lives in `session-persistence`.

mod canonical;
mod clock;
mod error;
mod event;
mod header;
mod id;
pub mod json;
mod jsontext;
mod legacy;
pub mod messages;
mod mutations;
mod repair;
mod session;
mod store;
mod surface;
mod view;

#[cfg(test)]
mod tests;

pub use futures::future::BoxFuture;

pub use crate::{
    clock::{Clock, ManualClock},
    error::{ForkError, ForkErrorCode, ObserverError, SessionError, StoreError},
    event::{
        END_SEED, EventType, INVALID_ENVELOPE, KNOWN_SESSION_EVENT_TYPES, SURFACE_ELIGIBLE_TYPES, SessionEvent,
        SurfaceOp, is_surface_eligible,
    },
    header::{HeaderError, HeaderMeta, Origin, SESSION_FORMAT_VERSION, SessionHeader, is_absolute_path},
    id::SessionId,
    json::{JsonData, LosslessError},
    legacy::LegacyImport,
    messages::{check_message_shape, check_message_shape_as, check_seed_event_shape},
    repair::{RepairScan, TOOL_NOT_STARTED, TOOL_OUTCOME_UNKNOWN, interrupted_turn_closers},
    session::Session,
    store::{CreateOptions, FlushHook, ObserverId, SessionStore, StoreEvent, StoreObserver},
    surface::{SurfaceFold, SurfaceIntent, SurfaceReplacement, SurfaceState, fold_surface},
};
