//! The append-only session event log: ids, headers, events, `Session`, `SessionStore`, fork and
//! crash-repair closers.
//!
//! This crate does no I/O and reads no clock: time arrives through the [`Clock`] trait, and
//! storage lives in `session-persistence`.

mod event;
mod header;
mod id;
pub mod json;

pub use crate::{
    event::{
        END_SEED, EventType, INVALID_ENVELOPE, KNOWN_SESSION_EVENT_TYPES, SURFACE_ELIGIBLE_TYPES, SessionEvent,
        SurfaceOp, is_surface_eligible,
    },
    header::{HeaderError, HeaderMeta, Origin, SESSION_FORMAT_VERSION, SessionHeader, is_absolute_path},
    id::SessionId,
    json::{JsonData, LosslessError},
};
