//! Event, header and descriptor builders, and the assertions on coded errors: what the listing
//! cases write and check, on any backend.

use std::{fmt, sync::Arc};

use serde_json::{Value, json};
use session_core::{
    JsonData, Origin, Session, SessionEvent, SessionHeader, SessionId, SurfaceIntent, SurfaceOp, is_surface_eligible,
};
use subagent::{ContinuableDescriptor, SubagentError, SubagentListEntry, SubagentRuntime};
use tokio_util::sync::CancellationToken;

use crate::{Harness, Setup};

/// The id `text`.
pub fn id(text: &str) -> SessionId {
    SessionId::from(text)
}

/// A fresh cancellation token.
pub fn token() -> CancellationToken {
    CancellationToken::new()
}

/// The descriptor of a continuable child labelled `label`, with an agent provider and model.
pub fn continuable_descriptor(label: &str) -> ContinuableDescriptor {
    ContinuableDescriptor {
        provider: "spawn".to_owned(),
        label: label.to_owned(),
        agent_provider: Some("demo-llm".to_owned()),
        agent_model: Some("scripted-1".to_owned()),
        persona: None,
        tool_filter: None,
    }
}

/// Appends `kind` with `data` to a live session; surface-eligible kinds are appended to the
/// surface.
pub fn append(session: &Session, kind: &str, data: Value) -> Arc<SessionEvent> {
    let surface = is_surface_eligible(kind).then(SurfaceIntent::append);
    session.append(kind, &data, surface).unwrap()
}

/// One complete turn on a live session; `at_first_step` runs right before `step/start`.
pub fn run_turn(session: &Session, turn: u64, at_first_step: Option<impl FnOnce()>) {
    append(session, "turn/start", json!({"turn": turn}));
    append(session, "user/message", user_message_data(session.len(), "do the work"));
    if let Some(at_first_step) = at_first_step {
        at_first_step();
    }
    append(session, "step/start", json!({"turn": turn, "step": 1}));
    append(session, "assistant/message", assistant_message_data(session.len(), turn));
    append(session, "step/end", json!({"turn": turn, "step": 1}));
    append(session, "turn/end", json!({"turn": turn, "reason": {"kind": "completed"}}));
}

/// A `user/message` payload with id `m-<seq>` and one text part.
pub fn user_message_data(seq: u64, text: &str) -> Value {
    json!({"id": format!("m-{seq}"), "role": "user", "source": {"kind": "user"},
           "content": [{"type": "text", "text": text}]})
}

/// An `assistant/message` payload of step 1 of `turn`, with id `a-<seq>`.
pub fn assistant_message_data(seq: u64, turn: u64) -> Value {
    json!({"turn": turn, "step": 1, "message": {"id": format!("a-{seq}"), "role": "assistant",
           "source": {"kind": "model", "provider": "p", "model": "m"},
           "content": [{"type": "text", "text": "done"}]}})
}

/// An event at `seq` with time `100 + seq`; surface-eligible kinds get `surfaceOp: append`.
pub fn ev(kind: &str, seq: u64, data: Value) -> Arc<SessionEvent> {
    ev_at(kind, seq, 100 + seq as i64, data)
}

/// [`ev`] at an explicit `time`.
pub fn ev_at(kind: &str, seq: u64, time: i64, data: Value) -> Arc<SessionEvent> {
    let mut event = SessionEvent::new(kind, seq, time, JsonData::from_value(&data).unwrap());
    if is_surface_eligible(kind) {
        event.surface_op = Some(SurfaceOp::Append);
    }
    Arc::new(event)
}

/// A `subagent/descriptor` event at `seq` with `payload`.
pub fn descriptor_event(seq: u64, payload: Value) -> Arc<SessionEvent> {
    ev("subagent/descriptor", seq, payload)
}

/// A version-2 continuable descriptor payload labelled `label`.
pub fn continuable(label: &str) -> Value {
    json!({"version": 2, "mode": "continuable", "provider": "spawn", "label": label})
}

/// A version-2 one-shot descriptor payload, labelled if `label` is given.
pub fn one_shot(label: Option<&str>) -> Value {
    match label {
        Some(label) => json!({"version": 2, "mode": "one-shot", "provider": "spawn", "label": label}),
        None => json!({"version": 2, "mode": "one-shot", "provider": "spawn"}),
    }
}

/// The reference tests' `childEvents(desc)`: turn/start 0, user/message 1, descriptor 2,
/// turn/end 3.
pub fn child_events(descriptor: Value) -> Vec<Arc<SessionEvent>> {
    vec![
        ev("turn/start", 0, json!({"turn": 1})),
        ev("user/message", 1, user_message_data(1, "hello")),
        descriptor_event(2, descriptor),
        ev("turn/end", 3, json!({"turn": 1, "reason": {"kind": "completed"}})),
    ]
}

/// A complete turn of stored events starting at `seq0`.
pub fn stored_turn(seq0: u64, turn: u64) -> Vec<Arc<SessionEvent>> {
    vec![
        ev("turn/start", seq0, json!({"turn": turn})),
        ev("user/message", seq0 + 1, user_message_data(seq0 + 1, "hello")),
        ev("step/start", seq0 + 2, json!({"turn": turn, "step": 1})),
        ev("assistant/message", seq0 + 3, assistant_message_data(seq0 + 3, turn)),
        ev("step/end", seq0 + 4, json!({"turn": turn, "step": 1})),
        ev("turn/end", seq0 + 5, json!({"turn": turn, "reason": {"kind": "completed"}})),
    ]
}

/// A header builder: `child_header("c", "p")` is a subagent-origin child of `p` at depth 1,
/// created at 1, with a cwd.
pub fn child_header(child: &str, parent: &str) -> SessionHeader {
    let mut header = SessionHeader::new(id(child), 1);
    header.cwd = Some("/work/project".to_owned());
    header.parent_session = Some(id(parent));
    header.origin = Some(Origin::Subagent);
    header.delegation_depth = 1;
    header
}

/// An ordinary session's header, created at `created_at`, with a cwd.
pub fn plain_header(session: &str, created_at: u64) -> SessionHeader {
    let mut header = SessionHeader::new(id(session), created_at);
    header.cwd = Some("/work/project".to_owned());
    header
}

/// `header` created at `created_at`.
pub fn created(mut header: SessionHeader, created_at: u64) -> SessionHeader {
    header.created_at = created_at;
    header
}

/// Asserts that `result` is the coded subagent error `code`.
pub fn assert_code<T: fmt::Debug>(result: Result<T, SubagentError>, code: &str) {
    match result {
        Err(error) => assert_eq!(error.code().map(|code| code.as_str()), Some(code), "{error}"),
        Ok(value) => panic!("expected {code}, got {value:?}"),
    }
}

/// A fork child's stored events: inherited descriptor at seq 2, `session/end-seed` at 4
/// (`seedLength` 4), then, with `own`, its own descriptor at 5 and a turn.
pub fn fork_child_events(ancestor: &str, own: Option<&str>) -> Vec<Arc<SessionEvent>> {
    let mut events = child_events(continuable(ancestor));
    events.push(ev("session/end-seed", 4, json!({})));
    if let Some(own) = own {
        events.push(descriptor_event(5, continuable(own)));
        events.extend(stored_turn(6, 2));
    }
    events
}

/// [`child_header`] with `seedLength` 4, the header of [`fork_child_events`].
pub fn fork_child_header(child: &str, parent: &str) -> SessionHeader {
    let mut header = child_header(child, parent);
    header.seed_length = Some(4);
    header
}

/// Asserts that `result` is the listing's `CANCELLED` error, with its code and message.
pub fn assert_cancelled<T: fmt::Debug>(result: Result<T, SubagentError>) {
    match result {
        Err(error) => {
            assert!(matches!(error, SubagentError::ListingCancelled), "{error:?}");
            assert_eq!(error.code().unwrap().as_str(), "CANCELLED");
            assert_eq!(error.to_string(), "subagent listing was cancelled");
        }
        Ok(value) => panic!("expected CANCELLED, got {value:?}"),
    }
}

/// Authors two cold children of `p`: `a` (created at 1) and `b` (at 2).
pub async fn two_cold_children<S: Setup>(h: &Harness<S>) {
    h.author(created(child_header("a", "p"), 1), child_events(continuable("a"))).await;
    h.author(created(child_header("b", "p"), 2), child_events(continuable("b"))).await;
}

/// Lists the children of `p` on a task of its own, under `cancel`.
pub fn spawn_children(
    runtime: Arc<SubagentRuntime>,
    cancel: CancellationToken,
) -> tokio::task::JoinHandle<Result<Vec<SubagentListEntry>, SubagentError>> {
    tokio::spawn(async move { runtime.list_children(&id("p"), &cancel).await })
}
