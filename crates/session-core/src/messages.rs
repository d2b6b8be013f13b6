//! Message-shape checks for seeded and restored events (reference 01 §1.5) and detection of the
//! legacy shapes this build does not import (§3.7).
//!
//! Both run over small borrowed views of the payload: a field is kept as the raw JSON slice it
//! occupies and inspected only if a rule needs it, so checking a long log costs about one scan
//! of each message payload and allocates almost nothing.

use serde::Deserialize;
use serde_json::value::RawValue;

use crate::{
    SessionEvent,
    view::{BorrowedStr, Entries, Field, array, is_array, is_object, non_empty_string, object, present, string},
};

fn is_true(field: Field<'_>) -> bool {
    field.is_some_and(|raw| raw.get() == "true")
}

#[derive(Deserialize)]
struct WrappedMessage<'a> {
    #[serde(default, borrow, deserialize_with = "present")]
    message: Field<'a>,
}

#[derive(Deserialize)]
struct MessageView<'a> {
    #[serde(default, borrow, deserialize_with = "present")]
    id: Field<'a>,
    #[serde(default, borrow, deserialize_with = "present")]
    role: Field<'a>,
    #[serde(default, borrow, deserialize_with = "present")]
    source: Field<'a>,
    #[serde(default, borrow, deserialize_with = "present")]
    content: Field<'a>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SourceView<'a> {
    #[serde(default, borrow, deserialize_with = "present")]
    kind: Field<'a>,
    #[serde(default, borrow, deserialize_with = "present")]
    provider: Field<'a>,
    #[serde(default, borrow, deserialize_with = "present")]
    model: Field<'a>,
    #[serde(default, borrow, deserialize_with = "present")]
    call_id: Field<'a>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ToolResultBlockView<'a> {
    #[serde(default, borrow, deserialize_with = "present", rename = "type")]
    kind: Field<'a>,
    #[serde(default, borrow, deserialize_with = "present")]
    tool_call_id: Field<'a>,
    #[serde(default, borrow, deserialize_with = "present")]
    content: Field<'a>,
}

/// The message an event carries: `data` itself for `user/message`, `data.message` for
/// `assistant/message` and `tool/result`.
fn message_field<'a>(event: &'a SessionEvent) -> Field<'a> {
    if event.kind == "user/message" {
        return Some(event.data.as_raw());
    }
    let data: Field<'a> = Some(event.data.as_raw());
    object::<WrappedMessage<'a>>(data).and_then(|wrapped| wrapped.message)
}

/// Checks the shape of the message a `user/message`, `assistant/message` or `tool/result` event
/// carries, as the load path does (`session event at seq 9 lacks an identified message`); other
/// events pass.
pub fn check_message_shape(event: &SessionEvent) -> Result<(), String> {
    check_message_shape_as(event, &format!("session event at seq {}", event.seq))
}

/// [`check_message_shape`] with a caller-chosen `subject` starting every message
/// (`seed tool/result at index 4`).
pub fn check_message_shape_as(event: &SessionEvent, subject: &str) -> Result<(), String> {
    if fast::message_is_valid(event) {
        return Ok(());
    }
    let kind = event.kind.as_str();
    let is_assistant = kind == "assistant/message";
    let is_tool_result = kind == "tool/result";
    if kind != "user/message" && !is_assistant && !is_tool_result {
        return Ok(());
    }
    let message = object::<MessageView<'_>>(message_field(event))
        .filter(|message| non_empty_string(message.id).is_some())
        .ok_or_else(|| format!("{subject} lacks an identified message"))?;
    let expected_role = if is_assistant { "assistant" } else { "user" };
    if string(message.role).as_deref() != Some(expected_role) {
        return Err(format!("{subject} message must have role \"{expected_role}\""));
    }
    let source = object::<SourceView<'_>>(message.source)
        .filter(|source| non_empty_string(source.kind).is_some())
        .ok_or_else(|| format!("{subject} message has invalid source"))?;
    if !is_array(message.content) {
        return Err(format!("{subject} message has invalid content"));
    }
    let source_kind = string(source.kind);
    if is_assistant {
        let is_model = source_kind.as_deref() == Some("model")
            && non_empty_string(source.provider).is_some()
            && non_empty_string(source.model).is_some();
        if !is_model {
            return Err(format!("{subject} message must have model source"));
        }
        return Ok(());
    }
    if !is_tool_result {
        return Ok(());
    }
    let call_id = non_empty_string(source.call_id)
        .filter(|_| source_kind.as_deref() == Some("tool"))
        .ok_or_else(|| format!("{subject} message must have tool source"))?;
    let blocks = array(message.content).unwrap_or_default();
    let block = match blocks.as_slice() {
        [only] => object::<ToolResultBlockView<'_>>(Some(only)),
        _ => None,
    }
    .filter(|block| string(block.kind).as_deref() == Some("tool-result") && is_array(block.content))
    .ok_or_else(|| format!("{subject} message must contain one tool-result block"))?;
    if string(block.tool_call_id).as_deref() != Some(call_id.as_ref()) {
        return Err(format!("{subject} message has mismatched tool call ids"));
    }
    Ok(())
}

#[derive(Deserialize)]
struct RequestHeaderData<'a> {
    #[serde(default, borrow, deserialize_with = "present")]
    header: Field<'a>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct EpochHeaderView<'a> {
    #[serde(default, borrow, deserialize_with = "present")]
    config: Field<'a>,
    #[serde(default, borrow, deserialize_with = "present")]
    adapter_defaults: Field<'a>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ConfigView<'a> {
    #[serde(default, borrow, deserialize_with = "present")]
    provider: Field<'a>,
    #[serde(default, borrow, deserialize_with = "present")]
    model: Field<'a>,
    #[serde(default, borrow, deserialize_with = "present")]
    reasoning_effort: Field<'a>,
    #[serde(default, borrow, deserialize_with = "present")]
    max_tokens: Field<'a>,
}

/// The current-shape checks a seed (or restored) event at `index` must pass before it enters a
/// log: `request/header` provider, model and adapter defaults, then the message shape with the
/// subject `seed <type> at index <index>`.
pub fn check_seed_event_shape(event: &SessionEvent, index: u64) -> Result<(), String> {
    if event.kind == "request/header" {
        check_request_header(event, index)?;
    }
    check_message_shape_as(event, &format!("seed {} at index {index}", event.kind))
}

fn check_request_header(event: &SessionEvent, index: u64) -> Result<(), String> {
    let data: Field<'_> = Some(event.data.as_raw());
    let header = object::<RequestHeaderData<'_>>(data).and_then(|data| object::<EpochHeaderView<'_>>(data.header));
    let config = header.as_ref().and_then(|header| object::<ConfigView<'_>>(header.config));
    let Some(config) =
        config.filter(|config| non_empty_string(config.provider).is_some() && non_empty_string(config.model).is_some())
    else {
        return Err(format!("seed request/header at index {index} lacks provider/model"));
    };
    if config.reasoning_effort.is_some() && non_empty_string(config.reasoning_effort).is_none() {
        return Err(format!("seed request/header at index {index} has an invalid reasoningEffort"));
    }
    let Some(defaults) = header.and_then(|header| header.adapter_defaults) else { return Ok(()) };
    let invalid = || format!("seed request/header at index {index} has invalid adapterDefaults");
    if !is_object(Some(defaults)) {
        return Err(invalid());
    }
    let markers: Vec<(BorrowedStr<'_>, &RawValue)> =
        serde_json::from_str::<Entries<'_>>(defaults.get()).map(|entries| entries.0).map_err(|_| invalid())?;
    for (key, marker) in &markers {
        let config_field = match key.0.as_ref() {
            "reasoningEffort" => config.reasoning_effort,
            "maxTokens" => config.max_tokens,
            _ => return Err(invalid()),
        };
        if !is_true(Some(marker)) || config_field.is_none() {
            return Err(invalid());
        }
    }
    Ok(())
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct LegacyView<'a> {
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
    #[serde(default, borrow, deserialize_with = "present")]
    trigger: Field<'a>,
    #[serde(default, borrow, deserialize_with = "present")]
    reason: Field<'a>,
}

#[derive(Deserialize)]
struct LegacyReasonView<'a> {
    #[serde(default, borrow, deserialize_with = "present")]
    kind: Field<'a>,
    #[serde(default, borrow, deserialize_with = "present")]
    reason: Field<'a>,
    #[serde(default, borrow, deserialize_with = "present")]
    error: Field<'a>,
}

/// Detects the pre-identity and pre-react-loop shapes of reference 01 §3.7, which the reference
/// rewrites on read and this build refuses, and names the shape (`pre-identity user/message
/// without a message id`). The persistence layer reports it as an unsupported format.
///
/// Only the exact legacy shapes are detected. A current-looking but malformed record is not
/// legacy: it fails the current shape checks instead.
pub fn legacy_shape(event: &SessionEvent) -> Option<&'static str> {
    let kind = event.kind.as_str();
    if kind == "steering/message" {
        return Some("pre-react-loop steering/message");
    }
    // Cheap textual filters first: every legacy shape of these kinds names the key or value that
    // makes it legacy, and nearly every event of a long log is not legacy.
    let text = event.data.as_str();
    match kind {
        "turn/start" if !text.contains("\"trigger\"") => return None,
        "turn/end" if !["\"aborted\"", "\"disposed\"", "\"error\""].iter().any(|word| text.contains(word)) => {
            return None;
        }
        "turn/start" | "turn/end" | "user/message" | "assistant/message" | "tool/result" => {}
        _ => return None,
    }
    let view = object::<LegacyView<'_>>(Some(event.data.as_raw()))?;
    match kind {
        "turn/start" if view.trigger.is_some() => Some("pre-react-loop turn/start with a trigger"),
        "turn/end" => {
            let reason = object::<LegacyReasonView<'_>>(view.reason)?;
            match string(reason.kind).as_deref() {
                Some("aborted") if reason.reason.is_none() => {
                    Some("pre-react-loop turn/end reason \"aborted\" without a cause")
                }
                Some("disposed") => Some("pre-react-loop turn/end reason \"disposed\""),
                Some("error") if reason.error.is_none() => {
                    Some("pre-react-loop turn/end reason \"error\" without an error")
                }
                _ => None,
            }
        }
        "user/message"
            if view.content.is_some()
                && view.source.is_some()
                && view.id.is_none()
                && view.role.is_none()
                && view.message.is_none() =>
        {
            Some("pre-identity user/message without a message id")
        }
        "assistant/message" if view.content.is_some() && view.provenance.is_some() && view.message.is_none() => {
            Some("pre-identity assistant/message without a message id")
        }
        "tool/result"
            if view.call_id.is_some()
                && view.content.is_some()
                && view.is_error.is_some()
                && view.message.is_none() =>
        {
            Some("pre-identity tool/result without a message id")
        }
        _ => None,
    }
}

/// [`legacy_shape`] as an error naming the seq (`pre-react-loop steering/message at seq 7`).
pub fn check_legacy_shape(event: &SessionEvent) -> Result<(), String> {
    match legacy_shape(event) {
        Some(shape) => Err(format!("{shape} at seq {}", event.seq)),
        None => Ok(()),
    }
}

/// A one-pass check for the common case: a well-formed message decodes straight into typed
/// views and passes. Anything unusual (a wrong type anywhere, a missing field) makes this return
/// `false`, and the field-by-field checks above decide and word the error.
mod fast {
    use std::{borrow::Cow, fmt};

    use serde::{
        Deserialize, Deserializer,
        de::{IgnoredAny, SeqAccess, Visitor},
    };

    use crate::SessionEvent;

    #[derive(Deserialize)]
    struct Wrapped<'a> {
        #[serde(borrow)]
        message: Message<'a>,
    }

    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Message<'a> {
        #[serde(borrow)]
        id: Cow<'a, str>,
        #[serde(borrow)]
        role: Cow<'a, str>,
        #[serde(borrow)]
        source: Source<'a>,
        #[serde(borrow)]
        content: Vec<Block<'a>>,
    }

    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Source<'a> {
        #[serde(borrow)]
        kind: Cow<'a, str>,
        #[serde(default, borrow)]
        provider: Option<Cow<'a, str>>,
        #[serde(default, borrow)]
        model: Option<Cow<'a, str>>,
        #[serde(default, borrow)]
        call_id: Option<Cow<'a, str>>,
    }

    /// A content block: only the fields a tool result's checks read; text is skipped.
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Block<'a> {
        #[serde(default, borrow, rename = "type")]
        kind: Option<Cow<'a, str>>,
        #[serde(default, borrow)]
        tool_call_id: Option<Cow<'a, str>>,
        #[serde(default)]
        content: Option<IsArray>,
    }

    /// Whether a value is an array; its elements are skipped unparsed.
    struct IsArray(bool);

    impl<'de> Deserialize<'de> for IsArray {
        fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<IsArray, D::Error> {
            struct ArrayProbe;
            impl<'de> Visitor<'de> for ArrayProbe {
                type Value = IsArray;
                fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                    f.write_str("an array")
                }
                fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<IsArray, A::Error> {
                    while seq.next_element::<IgnoredAny>()?.is_some() {}
                    Ok(IsArray(true))
                }
            }
            deserializer.deserialize_seq(ArrayProbe)
        }
    }

    fn non_empty(text: &Option<Cow<'_, str>>) -> bool {
        text.as_deref().is_some_and(|text| !text.is_empty())
    }

    pub(super) fn message_is_valid(event: &SessionEvent) -> bool {
        let text = event.data.as_str();
        let message = match event.kind.as_str() {
            "user/message" => serde_json::from_str::<Message<'_>>(text),
            "assistant/message" | "tool/result" => serde_json::from_str::<Wrapped<'_>>(text).map(|data| data.message),
            _ => return false,
        };
        let Ok(message) = message else { return false };
        if message.id.is_empty() || message.source.kind.is_empty() {
            return false;
        }
        match event.kind.as_str() {
            "user/message" => message.role == "user",
            "assistant/message" => {
                message.role == "assistant"
                    && message.source.kind == "model"
                    && non_empty(&message.source.provider)
                    && non_empty(&message.source.model)
            }
            _ => {
                let [block] = message.content.as_slice() else { return false };
                message.role == "user"
                    && message.source.kind == "tool"
                    && non_empty(&message.source.call_id)
                    && block.kind.as_deref() == Some("tool-result")
                    && block.content.as_ref().is_some_and(|content| content.0)
                    && block.tool_call_id == message.source.call_id
            }
        }
    }
}
