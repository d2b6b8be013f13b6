//! Small helpers for looking at what a store read back, shared by the kit's cases and a backend's
//! own tests: the event types of a log, the message ids its surface events carry, and a live
//! session resumed from a read view.

use std::sync::Arc;

use serde_json::Value;
use session_core::{ManualClock, Session, SessionEvent};
use session_persistence::Inspection;

/// The event types of `events`, in order.
pub fn kinds(events: &[Arc<SessionEvent>]) -> Vec<&str> {
    events.iter().map(|event| event.kind.as_str()).collect()
}

/// The payload of `event` as a JSON value.
pub fn data(event: &SessionEvent) -> Value {
    event.data.to_value().expect("a stored payload is JSON")
}

/// The id of the message a surface event carries (`data.id` of a `user/message`, else
/// `data.message.id`).
pub fn message_id(event: &SessionEvent) -> Value {
    let data = data(event);
    if event.kind == "user/message" { data["id"].clone() } else { data["message"]["id"].clone() }
}

/// The message ids of the surface events of `events`, in order.
pub fn message_ids(events: &[Arc<SessionEvent>]) -> Vec<Value> {
    events
        .iter()
        .filter(|event| session_core::is_surface_eligible(&event.kind))
        .map(|event| message_id(event))
        .collect()
}

/// A live session resumed from a read view, as a host resumes one (its seed is the view's events,
/// and the session appends the end-seed marker).
///
/// # Panics
///
/// When the view's log does not seed a session.
pub fn resume(view: &Inspection) -> Arc<Session> {
    let clock = Arc::new(ManualClock::new(9_000));
    Session::create((*view.header).clone(), Some(view.events.to_vec()), clock).expect("the read log seeds a session")
}
