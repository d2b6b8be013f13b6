//! Unit tests of the session log, store, fork, surface, repair and legacy imports, one module per
//! area, with the shared builders below (which the publication protocol's tests, beside it, use
//! too).

mod fork;
mod legacy;
mod messages;
mod properties;
mod repair;
mod session;
mod store;
mod surface;

use std::sync::Arc;

use parking_lot::Mutex;
use serde_json::{Value, json};

use crate::{
    JsonData, ManualClock, ObserverError, Session, SessionEvent, SessionHeader, SessionId, SessionStore, StoreEvent,
    StoreObserver, SurfaceIntent, SurfaceOp,
};

pub(super) const T0: i64 = 1_772_442_000_000;

pub(super) fn clock() -> Arc<ManualClock> {
    Arc::new(ManualClock::new(T0))
}

/// The host event types these tests append (a host registers its own types once).
pub(super) fn known() -> crate::KnownTypes {
    crate::KnownTypes::with_extra(["plugin/note", "plugin/echo", "test/bracket-open", "test/log-only", "tool/output"])
}

pub(super) fn store() -> SessionStore {
    SessionStore::with_known_types(clock(), known())
}

pub(super) fn id(text: &str) -> SessionId {
    SessionId::from(text)
}

/// A detached session with a minimal header.
pub(super) fn detached(session_id: &str) -> Arc<Session> {
    let header = SessionHeader::new(id(session_id), T0 as u64);
    Session::create_with_types(header, None, clock(), known()).expect("a minimal header is valid")
}

pub(super) fn user_message(message_id: &str, text: &str) -> Value {
    json!({"id": message_id, "role": "user", "content": [{"type": "text", "text": text}], "source": {"kind": "user"}})
}

pub(super) fn assistant_message(turn: u64, step: u64, message_id: &str, content: Value) -> Value {
    json!({
        "turn": turn,
        "step": step,
        "message": {
            "id": message_id,
            "role": "assistant",
            "content": content,
            "source": {"kind": "model", "provider": "mock", "model": "mock"},
        },
    })
}

pub(super) fn tool_call_block(call_id: &str) -> Value {
    json!({"type": "tool-call", "id": call_id, "name": "bash", "arguments": "{}"})
}

pub(super) fn tool_result(turn: u64, step: u64, message_id: &str, call_id: &str, text: &str) -> Value {
    json!({
        "turn": turn,
        "step": step,
        "message": {
            "id": message_id,
            "role": "user",
            "source": {"kind": "tool", "callId": call_id},
            "content": [{
                "type": "tool-result",
                "toolCallId": call_id,
                "isError": false,
                "content": [{"type": "text", "text": text}],
            }],
        },
    })
}

pub(super) fn append(session: &Session, kind: &str, data: Value) -> Arc<SessionEvent> {
    let surface = crate::is_surface_eligible(kind).then(SurfaceIntent::append);
    session.append(kind, &data, surface).unwrap_or_else(|err| panic!("append {kind}: {err}"))
}

/// `turn/start`, a user message, `turn/end completed`.
pub(super) fn closed_turn(session: &Session, turn: u64, text: &str) {
    append(session, "turn/start", json!({"turn": turn}));
    append(session, "user/message", user_message(&format!("m-{turn}-{text}"), text));
    append(session, "turn/end", json!({"turn": turn, "reason": {"kind": "completed"}}));
}

/// A free-standing event for seeds and scans.
pub(super) fn event(kind: &str, seq: u64, data: Value) -> Arc<SessionEvent> {
    let mut event = SessionEvent::new(kind, seq, T0, JsonData::from_value(&data).expect("test data is lossless"));
    if crate::is_surface_eligible(kind) {
        event.surface_op = Some(SurfaceOp::Append);
    }
    Arc::new(event)
}

pub(super) fn kinds(events: &[Arc<SessionEvent>]) -> Vec<String> {
    events.iter().map(|event| event.kind.to_string()).collect()
}

/// A shared list of recorded lines.
pub(super) fn lines() -> Arc<Mutex<Vec<String>>> {
    Arc::new(Mutex::new(Vec::new()))
}

/// The lines recorded so far, leaving the list empty.
pub(super) fn take(lines: &Mutex<Vec<String>>) -> Vec<String> {
    std::mem::take(&mut *lines.lock())
}

/// A closure as an observer.
pub(super) fn observer(
    f: impl Fn(&StoreEvent<'_>) -> Result<(), ObserverError> + Send + Sync + 'static,
) -> Arc<dyn StoreObserver> {
    Arc::new(f)
}

/// An observer that records what it hears as short lines (`created s`, `event s 3`,
/// `disposed s`), prefixed with its name.
#[derive(Debug)]
pub(super) struct Recorder {
    name: &'static str,
    lines: Arc<Mutex<Vec<String>>>,
}

impl Recorder {
    pub(super) fn new(name: &'static str, lines: &Arc<Mutex<Vec<String>>>) -> Arc<Recorder> {
        Arc::new(Recorder { name, lines: Arc::clone(lines) })
    }
}

pub(super) fn describe(event: &StoreEvent<'_>) -> String {
    match event {
        StoreEvent::Created(session) => format!("created {}", session.id()),
        StoreEvent::Event(session, event) => format!("event {} {} {}", session.id(), event.seq, event.kind),
        StoreEvent::Disposed(session) => format!("disposed {}", session.id()),
    }
}

impl StoreObserver for Recorder {
    fn notify(&self, event: &StoreEvent<'_>) -> Result<(), ObserverError> {
        self.lines.lock().push(format!("{}: {}", self.name, describe(event)));
        Ok(())
    }
}
