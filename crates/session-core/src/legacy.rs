//! Read-side imports of the reference's earlier event shapes (reference 01 §3.7): a log written
//! before the react loop or before message identity reads as its current equivalent.
//!
//! Every read of a stored log passes each event through one [`LegacyImport`], in seq order, before
//! it validates the event. The import changes only the view a reader gets; the stored bytes are
//! never rewritten. It imports exactly what the reference imports, in the reference's order per
//! event (`turn/start`, `turn/end`, steering, message), and refuses a malformed legacy record with
//! the reference's message (`session "s" contains malformed pre-react-loop turn/end at seq 7`). A
//! record that looks current is never imported: if it is malformed, current validation says so.
//!
//! Reading a current log costs next to nothing. Whether an event is a candidate is decided from
//! what is already known about it: a message the decoder verified in the current shape is not
//! one, a `turn/start` is one only if its small payload names a trigger, and a `turn/end` (whose
//! exact shape the reference checks on every read) is walked once without allocating. Only a
//! candidate is parsed.

use std::collections::HashMap;

use serde::Deserialize;
use serde_json::{Map, Value, json};
use smol_str::SmolStr;

use crate::{
    EventType, JsonData, SessionEvent, SessionId, SurfaceOp,
    json::as_safe_i64,
    jsontext::{Walker, plain_str},
    messages::MessageKind,
    view::{Field, object, object_text, present, string},
};

/// Imports one log's events, in order. Keep one per read; start a new one when a read starts over.
#[derive(Debug, Clone)]
pub struct LegacyImport {
    session: SessionId,
    /// The message id of each event, by seq, from the first imported event on: a replacing
    /// pre-identity `tool/result` takes the id of the message it replaces. `None` until an event
    /// is imported, so a current log records nothing.
    message_ids: Option<HashMap<u64, SmolStr>>,
}

impl LegacyImport {
    /// An import for the log of `session` (the stored header's id, which the minted message ids
    /// and the messages name).
    pub fn new(session: SessionId) -> LegacyImport {
        LegacyImport { session, message_ids: None }
    }

    /// The current equivalent of the next event of the log, `Ok(None)` when the event is already
    /// current (or is not one the reference imports), or the reference's message for a malformed
    /// legacy record.
    pub fn import(&mut self, event: &SessionEvent) -> Result<Option<SessionEvent>, String> {
        let imported = if is_candidate(event) { self.import_candidate(event)? } else { None };
        if imported.is_some() && self.message_ids.is_none() {
            self.message_ids = Some(HashMap::new());
        }
        if let Some(ids) = &mut self.message_ids {
            let current = imported.as_ref().unwrap_or(event);
            if let Some(message_id) = message_id(current) {
                ids.insert(current.seq, message_id);
            }
        }
        Ok(imported)
    }

    fn import_candidate(&self, event: &SessionEvent) -> Result<Option<SessionEvent>, String> {
        match event.kind.as_str() {
            "turn/start" => self.turn_start(event),
            "turn/end" => self.turn_end(event),
            // The steering step's user message still goes through the message step.
            "steering/message" => {
                let user = self.steering(event)?;
                Ok(Some(self.message(&user)?.unwrap_or(user)))
            }
            "user/message" | "assistant/message" | "tool/result" => self.message(event),
            _ => Ok(None),
        }
    }

    fn malformed(&self, kind: &str, seq: u64) -> String {
        format!("session \"{}\" contains malformed pre-react-loop {kind} at seq {seq}", self.session)
    }

    /// The id a message stored before identities existed gets: `legacy-message:<session>:<seq>`.
    fn legacy_id(&self, seq: u64) -> String {
        format!("legacy-message:{}:{seq}", self.session)
    }

    /// `{turn, trigger}` becomes `{turn}`, once the whole old shape is verified.
    fn turn_start(&self, event: &SessionEvent) -> Result<Option<SessionEvent>, String> {
        let Some(data) = record(event) else { return Ok(None) };
        if !data.contains_key("trigger") {
            return Ok(None);
        }
        let turn = data.get("turn").filter(|turn| as_safe_i64(turn).is_some_and(|turn| turn >= 1));
        let trigger_kind = data.get("trigger").and_then(Value::as_object).and_then(|trigger| trigger.get("kind"));
        let has_kind = trigger_kind.and_then(Value::as_str).is_some_and(|kind| !kind.is_empty());
        let Some(turn) = turn.filter(|_| has_kind && has_only_keys(&data, &["turn", "trigger"], &[])) else {
            return Err(self.malformed("turn/start", event.seq));
        };
        let mut current = Map::new();
        current.insert("turn".to_owned(), turn.clone());
        rebuilt(event, None, current).map(Some)
    }

    /// The exact shape every `turn/end` must have, and the reasons of the old vocabulary in the
    /// current one: bare `aborted` and `disposed` become causes of `aborted`, both old `error`
    /// shapes carry their failure as `error`. Unknown kinds pass through.
    fn turn_end(&self, event: &SessionEvent) -> Result<Option<SessionEvent>, String> {
        let Some(mut data) = record(event) else { return Ok(None) };
        let malformed = || self.malformed("turn/end", event.seq);
        let turn_ok = data.get("turn").and_then(as_safe_i64).is_some_and(|turn| turn >= 1);
        let reason = data.get("reason").and_then(Value::as_object);
        let kind = reason.and_then(|reason| reason.get("kind")).and_then(Value::as_str);
        let (Some(reason), Some(kind)) = (reason, kind) else { return Err(malformed()) };
        if !turn_ok || !has_only_keys(&data, &["turn", "reason"], &[]) {
            return Err(malformed());
        }
        let current = match kind {
            "completed" | "blocked" | "max-tokens" | "interrupted" => {
                return if has_only_keys(reason, &["kind"], &[]) { Ok(None) } else { Err(malformed()) };
            }
            "aborted" if reason.contains_key("reason") => return Ok(None),
            "aborted" | "disposed" if !has_only_keys(reason, &["kind"], &[]) => return Err(malformed()),
            "aborted" => json!({"kind": "aborted", "reason": {"kind": "legacy"}}),
            "disposed" => json!({"kind": "aborted", "reason": {"kind": "disposed"}}),
            "error" if reason.contains_key("error") => return Ok(None),
            "error" => legacy_error(reason).ok_or_else(malformed)?,
            _ => return Ok(None),
        };
        data.insert("reason".to_owned(), current);
        rebuilt(event, None, data).map(Some)
    }

    /// `steering/message` becomes a `user/message`: `{turn, message}` carries it whole, and
    /// `{turn, content, source}` is the message without its id and role.
    fn steering(&self, event: &SessionEvent) -> Result<SessionEvent, String> {
        let malformed = || self.malformed("steering/message", event.seq);
        let Some(mut data) = record(event) else { return Err(malformed()) };
        let turn_ok = data.get("turn").and_then(as_safe_i64).is_some();
        if turn_ok
            && data.get("message").is_some_and(Value::is_object)
            && has_only_keys(&data, &["turn", "message"], &[])
            && let Some(Value::Object(message)) = data.shift_remove("message")
        {
            return rebuilt(event, Some("user/message"), message);
        }
        if !turn_ok || !has_only_keys(&data, &["turn", "content", "source"], &[]) {
            return Err(malformed());
        }
        data.shift_remove("turn");
        data.insert("id".to_owned(), Value::String(self.legacy_id(event.seq)));
        data.insert("role".to_owned(), Value::String("user".to_owned()));
        rebuilt(event, Some("user/message"), data)
    }

    /// A message stored before messages had identities gets one, in the current wrapper.
    fn message(&self, event: &SessionEvent) -> Result<Option<SessionEvent>, String> {
        // Most candidates are current messages the decoder could not verify in one pass; their
        // keys are read without building a tree.
        let (keys, parsed) = match object_text::<MessageKeys<'_>>(event.data.as_str()) {
            Some(keys) => (keys.present(), None),
            None => match record(event) {
                Some(data) => (Present::of_map(&data), Some(data)),
                None => return Ok(None),
            },
        };
        if !keys.is_pre_identity(&event.kind) {
            return Ok(None);
        }
        let Some(mut data) = parsed.or_else(|| record(event)) else { return Ok(None) };
        match event.kind.as_str() {
            "user/message" => {
                data.insert("id".to_owned(), Value::String(self.legacy_id(event.seq)));
                data.insert("role".to_owned(), Value::String("user".to_owned()));
            }
            "assistant/message" => {
                let content = data.shift_remove("content").unwrap_or(Value::Null);
                let mut source = match data.shift_remove("provenance") {
                    Some(Value::Object(provenance)) => provenance,
                    _ => Map::new(),
                };
                source.insert("kind".to_owned(), Value::String("model".to_owned()));
                let message =
                    json!({"id": self.legacy_id(event.seq), "role": "assistant", "content": content, "source": source});
                data.insert("message".to_owned(), message);
            }
            _ => {
                let call_id = data.shift_remove("callId").unwrap_or(Value::Null);
                let content = data.shift_remove("content").unwrap_or(Value::Null);
                let is_error = data.shift_remove("isError").unwrap_or(Value::Null);
                let message_id = match event.surface_op {
                    // A replacement keeps the identity of the message it replaces.
                    Some(SurfaceOp::Replace { start, .. }) => {
                        self.message_ids.as_ref().and_then(|ids| ids.get(&start)).map(|id| id.to_string())
                    }
                    _ => Some(self.legacy_id(event.seq)),
                };
                let mut message = Map::new();
                // A replacement whose target has no id gets none, and fails current validation
                // as a message without identity.
                if let Some(message_id) = message_id {
                    message.insert("id".to_owned(), Value::String(message_id));
                }
                message.insert("role".to_owned(), Value::String("user".to_owned()));
                let block =
                    json!({"type": "tool-result", "toolCallId": call_id, "content": content, "isError": is_error});
                message.insert("content".to_owned(), Value::Array(vec![block]));
                message.insert("source".to_owned(), json!({"kind": "tool", "callId": call_id}));
                data.insert("message".to_owned(), Value::Object(message));
            }
        }
        rebuilt(event, None, data).map(Some)
    }
}

/// Whether an event may need importing. Decided without parsing for nearly every event of a
/// current log.
pub(crate) fn is_candidate(event: &SessionEvent) -> bool {
    let text = event.data.as_str();
    match event.kind.as_str() {
        // An escaped key could spell `trigger`; such payloads are parsed to be sure.
        "turn/start" => text.contains("\"trigger\"") || text.contains('\\'),
        "turn/end" => !turn_end_passes(text),
        "steering/message" => true,
        kind => MessageKind::of(kind).is_some_and(|message| event.data.verified_message() != Some(message)),
    }
}

/// Whether a `turn/end` payload certainly passes the import unchanged: compact text with exactly
/// `turn` (a positive integer) and `reason`, whose `kind` is a current bare kind with nothing
/// else, a cause-carrying `aborted`, an `error` with its `error`, or a kind the import passes
/// through. Anything else (including text outside the compact subset) is looked at closely.
fn turn_end_passes(text: &str) -> bool {
    walk_turn_end(text).unwrap_or(false)
}

fn walk_turn_end(text: &str) -> Option<bool> {
    fn once<'a>(slot: &mut Option<&'a str>, value: &'a str) -> Option<()> {
        slot.replace(value).is_none().then_some(())
    }
    let mut walker = Walker::new(text);
    walker.enter_object()?;
    let (mut turn, mut reason) = (None, None);
    while let Some(key) = walker.next_key()? {
        match key {
            "turn" => once(&mut turn, walker.value()?)?,
            "reason" => once(&mut reason, walker.value()?)?,
            _ => return Some(false),
        }
    }
    // A positive integer below 10^15 is a safe one.
    let turn = turn?;
    let positive = turn.len() <= 15 && turn.bytes().all(|byte| byte.is_ascii_digit()) && !turn.starts_with('0');
    if !positive {
        return Some(false);
    }
    let mut walker = Walker::new(reason?);
    walker.enter_object()?;
    let (mut kind, mut n_keys, mut has_cause, mut has_error) = (None, 0, false, false);
    while let Some(key) = walker.next_key()? {
        n_keys += 1;
        match key {
            "kind" => once(&mut kind, walker.value()?)?,
            "reason" => {
                walker.value()?;
                has_cause = true;
            }
            "error" => {
                walker.value()?;
                has_error = true;
            }
            _ => {
                walker.value()?;
            }
        }
    }
    Some(match plain_str(kind?)? {
        "completed" | "blocked" | "max-tokens" | "interrupted" => n_keys == 1,
        "aborted" => has_cause,
        "error" => has_error,
        "disposed" => false,
        _ => true,
    })
}

/// The old `error` reasons: `{kind, step, failure}` carries its failure record as the error;
/// `{kind, step, message, code?}` becomes `{message, code}` with `UNKNOWN` for a missing code.
/// `None` when the reason has neither shape exactly.
fn legacy_error(reason: &Map<String, Value>) -> Option<Value> {
    reason.get("step").and_then(as_safe_i64).filter(|step| *step >= 0)?;
    let failure = reason.get("failure").and_then(Value::as_object).filter(|failure| {
        has_only_keys(reason, &["kind", "step", "failure"], &[])
            && has_only_keys(failure, &["message", "code"], &["status", "providerRetryAfterMs", "requestId"])
            && failure.get("message").is_some_and(Value::is_string)
            && failure.get("code").is_some_and(Value::is_string)
            && failure.get("status").is_none_or(Value::is_number)
            && failure.get("providerRetryAfterMs").is_none_or(Value::is_number)
            && failure.get("requestId").is_none_or(Value::is_string)
    });
    if let Some(failure) = failure {
        return Some(json!({"kind": "error", "error": failure}));
    }
    let code = reason.get("code");
    let keys: &[&str] =
        if code.is_some() { &["kind", "step", "message", "code"] } else { &["kind", "step", "message"] };
    let message = reason.get("message").and_then(Value::as_str);
    if !has_only_keys(reason, keys, &[]) || code.is_some_and(|code| !code.is_string()) {
        return None;
    }
    let code = code.and_then(Value::as_str).unwrap_or("UNKNOWN");
    Some(json!({"kind": "error", "error": {"message": message?, "code": code}}))
}

/// The payload as an object, in document order (a repeated key keeps its first place and its
/// last value, as `JSON.parse` does); `None` for any other value.
fn record(event: &SessionEvent) -> Option<Map<String, Value>> {
    match event.data.to_value() {
        Ok(Value::Object(data)) => Some(data),
        _ => None,
    }
}

/// Whether `record` has every `required` key and no key outside `required` and `optional`.
fn has_only_keys(record: &Map<String, Value>, required: &[&str], optional: &[&str]) -> bool {
    record.keys().all(|key| required.contains(&key.as_str()) || optional.contains(&key.as_str()))
        && required.iter().all(|key| record.contains_key(*key))
}

/// `event` with `data` (and `kind`, if given) in place of its own.
fn rebuilt(event: &SessionEvent, kind: Option<&str>, data: Map<String, Value>) -> Result<SessionEvent, String> {
    let data = JsonData::from_value(&Value::Object(data))
        .map_err(|err| format!("session event at seq {} is not losslessly JSON-serializable: {err}", event.seq))?;
    Ok(SessionEvent { kind: kind.map_or_else(|| event.kind.clone(), EventType::from), data, ..event.clone() })
}

/// The keys that tell a pre-identity message from a current one.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct MessageKeys<'a> {
    #[serde(default, borrow, deserialize_with = "present")]
    id: Field<'a>,
    #[serde(default, borrow, deserialize_with = "present")]
    role: Field<'a>,
    #[serde(default, borrow, deserialize_with = "present")]
    message: Field<'a>,
    #[serde(default, borrow, deserialize_with = "present")]
    content: Field<'a>,
    #[serde(default, borrow, deserialize_with = "present")]
    source: Field<'a>,
    #[serde(default, borrow, deserialize_with = "present")]
    provenance: Field<'a>,
    #[serde(default, borrow, deserialize_with = "present")]
    call_id: Field<'a>,
    #[serde(default, borrow, deserialize_with = "present")]
    is_error: Field<'a>,
}

impl MessageKeys<'_> {
    fn present(&self) -> Present {
        Present {
            id: self.id.is_some(),
            role: self.role.is_some(),
            message: self.message.is_some(),
            content: self.content.is_some(),
            source: self.source.is_some(),
            provenance: self.provenance.is_some(),
            call_id: self.call_id.is_some(),
            is_error: self.is_error.is_some(),
        }
    }
}

/// Which of [`MessageKeys`] a payload has.
struct Present {
    id: bool,
    role: bool,
    message: bool,
    content: bool,
    source: bool,
    provenance: bool,
    call_id: bool,
    is_error: bool,
}

impl Present {
    fn of_map(data: &Map<String, Value>) -> Present {
        let has = |key: &str| data.contains_key(key);
        Present {
            id: has("id"),
            role: has("role"),
            message: has("message"),
            content: has("content"),
            source: has("source"),
            provenance: has("provenance"),
            call_id: has("callId"),
            is_error: has("isError"),
        }
    }

    fn is_pre_identity(&self, kind: &str) -> bool {
        match kind {
            "user/message" => !self.id && !self.role && !self.message && self.content && self.source,
            "assistant/message" => !self.message && self.content && self.provenance,
            "tool/result" => !self.message && self.call_id && self.content && self.is_error,
            _ => false,
        }
    }
}

#[derive(Deserialize)]
struct IdView<'a> {
    #[serde(default, borrow, deserialize_with = "present")]
    id: Field<'a>,
}

#[derive(Deserialize)]
struct WrappedView<'a> {
    #[serde(default, borrow, deserialize_with = "present")]
    message: Field<'a>,
}

/// The id of the message an event carries, as the reference records it for replacements:
/// `data.id` of a `user/message`, `data.message.id` of any other event, when it is a string.
fn message_id(event: &SessionEvent) -> Option<SmolStr> {
    let text = event.data.as_str();
    let message = if event.kind == "user/message" {
        object_text::<IdView<'_>>(text)?
    } else {
        object::<IdView<'_>>(object_text::<WrappedView<'_>>(text)?.message)?
    };
    string(message.id).map(SmolStr::from)
}
