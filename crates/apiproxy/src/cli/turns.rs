//! Turns appended straight to a live `Session`, in the shape of the demo store of `apiproxy serve
//! --demo`: a prompt, the answer streamed word by word, the answer. One file compiled into the
//! binary (for the demo) and into the integration tests (for their stores), so both write the
//! same turns.

use serde_json::{Value, json};
use session_core::{Session, SessionError, SurfaceIntent};

/// A `user/message` payload from a human.
pub(crate) fn user_message(id: &str, text: &str) -> Value {
    json!({"id": id, "role": "user", "source": {"kind": "user"}, "content": [{"type": "text", "text": text}]})
}

/// An `assistant/message` payload from the demo model.
pub(crate) fn assistant_message(turn: u64, step: u64, id: &str, text: &str) -> Value {
    json!({
        "turn": turn,
        "step": step,
        "message": {
            "id": id,
            "role": "assistant",
            "source": {"kind": "model", "provider": "demo", "model": "scripted-1"},
            "content": [{"type": "text", "text": text}],
        },
    })
}

/// Appends one complete turn: a prompt, streamed chunks, the answer.
pub(crate) fn append_turn(session: &Session, turn: u64, prompt: &str, answer: &str) -> Result<(), SessionError> {
    let id = session.id();
    session.append("turn/start", &json!({"turn": turn}), None)?;
    session.append("user/message", &user_message(&format!("{id}-u{turn}"), prompt), Some(SurfaceIntent::append()))?;
    session.append("step/start", &json!({"turn": turn, "step": 1}), None)?;
    let mut chunks = Vec::new();
    for word in answer.split_inclusive(' ') {
        let chunk = json!({"turn": turn, "step": 1, "chunk": {"type": "text-delta", "delta": word}});
        chunks.push(session.append("assistant/chunk", &chunk, None)?.seq);
    }
    let message = assistant_message(turn, 1, &format!("{id}-a{turn}"), answer);
    session.append("assistant/message", &message, Some(SurfaceIntent::append().with_sources(chunks)))?;
    session.append("step/end", &json!({"turn": turn, "step": 1}), None)?;
    session.append("turn/end", &json!({"turn": turn, "reason": {"kind": "completed"}}), None)?;
    Ok(())
}
