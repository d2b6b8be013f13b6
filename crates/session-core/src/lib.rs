//! The append-only session event log: ids, headers, events, `Session`, `SessionStore`, fork and
//! crash-repair closers.
//!
//! A session is an immutable [`SessionHeader`] and a log of [`SessionEvent`]s whose `seq` is
//! their index in the log. Nothing in a log is ever rewritten: a session grows by appends, a
//! fork copies a prefix into a new session, and a log cut off by a crash is closed by appending
//! repair events.
//!
//! - [`Session`] is one log, shared as `Arc<Session>`. [`Session::append`] checks an event
//!   (lossless JSON payload, retired vocabulary, surface markers, file-mutation receipts, the
//!   size bound [`MAX_EVENT_BYTES`]) before it enters the log, then stamps its `seq` and its
//!   `time` from the [`Clock`]; a rejected append ([`SessionError`]) changes nothing. Payloads
//!   are [`JsonData`]: validated JSON text, so a clone never copies a transcript.
//! - [`SessionStore`] is the registry of live sessions: [`create`](SessionStore::create),
//!   [`get`](SessionStore::get), [`list`](SessionStore::list), [`detach`](SessionStore::detach),
//!   and [`flush`](SessionStore::flush), the durability barrier its [`FlushHook`]s implement.
//!   Its [`StoreObserver`]s are told every creation, committed event and disposal
//!   ([`StoreEvent`]), synchronously and in seq order.
//! - [`SessionStore::fork`] seeds a new child with a prefix of a live session, through a
//!   boundary seq that must not end inside a turn ([`ForkError`]). The child's log is the seed,
//!   then a [`session/end-seed`](END_SEED) marker; its header records `parentSession` and
//!   `seedLength`, and its own suffix is `events[seedLength..]`.
//! - The message surface ([`SurfaceIntent`], [`SurfaceState`], [`fold_surface`]) orders the
//!   events the model sees; [`interrupted_turn_closers`] and the streaming [`RepairScan`] build
//!   the events that close a turn a crash left open.
//!
//! This is the bottom layer: every other crate of the workspace builds on it, and it knows
//! nothing about files or sockets. It does no I/O and reads no clock of its own: time arrives
//! through the [`Clock`] trait (a host passes [`SystemClock`], the one clock that reads the
//! system time, or its own), and storage lives in `session-persistence`, whose coordinator is
//! a [`StoreObserver`] and a [`FlushHook`] of the store and writes each live session behind.
//! `session-projection` folds logs into typed state the same way, as another observer.
//!
//! # Example
//!
//! Create a session, append a turn, and fork it:
//!
//! ```
//! use std::sync::Arc;
//!
//! use serde_json::json;
//! use session_core::{
//!     CreateOptions, END_SEED, ForkErrorCode, ManualClock, SessionId, SessionStore, SurfaceIntent,
//! };
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // The host supplies the clock; a manual one makes every `time` deterministic.
//! let store = SessionStore::new(Arc::new(ManualClock::new(1_772_442_000_000)));
//! let session = store.create(Some(SessionId::from("s1")), CreateOptions::default())?;
//!
//! // Each append is checked, then numbered: `seq` is the event's index in the log.
//! session.append("turn/start", &json!({"turn": 1}), None)?;
//! let question = json!({"id": "m1", "role": "user", "source": {"kind": "user"},
//!     "content": [{"type": "text", "text": "What changed?"}]});
//! // A message joins the model-visible surface, so it must say how.
//! session.append("user/message", &question, Some(SurfaceIntent::append()))?;
//! let end = session.append("turn/end", &json!({"turn": 1, "reason": {"kind": "completed"}}), None)?;
//! assert_eq!(end.seq, 2);
//! assert_eq!(session.surface_nodes(), [1]);
//!
//! // A rejected append leaves the log as it was.
//! assert!(session.append("user/message", &question, None).is_err());
//! assert_eq!(session.len(), 3);
//!
//! // Fork through seq 2: the child holds the seed prefix, then the end-of-seed marker.
//! let child = store.fork(session.id(), Some(2), Some(SessionId::from("s1-fork")))?;
//! let kinds: Vec<String> = child.events().iter().map(|event| event.kind.to_string()).collect();
//! assert_eq!(kinds, ["turn/start", "user/message", "turn/end", END_SEED]);
//! assert_eq!(child.header().parent_session.as_ref(), Some(session.id()));
//! assert_eq!(child.header().seed_length, Some(3));
//!
//! // The child's own suffix starts at `seedLength`: the marker, then what it appends itself.
//! let own = child.append("turn/start", &json!({"turn": 2}), None)?;
//! assert_eq!(own.seq, 4);
//!
//! // A fork may not end inside a turn: the child could never close it.
//! session.append("turn/start", &json!({"turn": 2}), None)?;
//! let refused = store.fork(session.id(), None, None).unwrap_err();
//! assert_eq!(refused.code, ForkErrorCode::OpenTurn);
//! # Ok(())
//! # }
//! ```

mod bounds;
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
mod publication;
mod repair;
mod session;
mod storable;
mod store;
mod surface;
mod view;

#[cfg(test)]
mod tests;

pub use crate::{
    bounds::{
        HeaderField, MAX_AGENT_PRESET_BYTES, MAX_CWD_BYTES, MAX_EVENT_BYTES, MAX_HEADER_JSON_BYTES, MAX_ID_BYTES,
        MAX_OWNER_BYTES, Oversized, TooLarge,
    },
    clock::{BoundedClock, Clock, MAX_CLOCK_MS, ManualClock, SystemClock},
    error::{ForkError, ForkErrorCode, ObserverError, SessionError, StoreError, panic_text},
    event::{
        END_SEED, EventType, INVALID_ENVELOPE, KNOWN_SESSION_EVENT_TYPES, SURFACE_ELIGIBLE_TYPES, SessionEvent,
        StoredParts, SurfaceOp, is_surface_eligible,
    },
    header::{HeaderError, HeaderMeta, Origin, SESSION_FORMAT_VERSION, SessionHeader, is_absolute_path},
    id::SessionId,
    json::{JsonData, LosslessError},
    legacy::LegacyImport,
    messages::{check_message_shape, check_message_shape_as, check_seed_event_shape},
    repair::{RepairScan, TOOL_NOT_STARTED, TOOL_OUTCOME_UNKNOWN, interrupted_turn_closers},
    session::{AppendOrder, Session},
    storable::{
        KnownTypes, StorableRule, Unstorable, check_current_shape, check_storable, check_storable_shape, is_retired,
    },
    store::{CreateOptions, FlushHook, ObserverId, SessionStore, StoreEvent, StoreObserver},
    surface::{SurfaceFold, SurfaceIntent, SurfaceReplacement, SurfaceState, fold_surface},
};
