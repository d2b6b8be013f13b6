//! Message-shape checks for seeded and restored events (reference 01 §1.5).
//!
//! They run over small borrowed views of the payload: a field is kept as the raw JSON slice it
//! occupies and inspected only if a rule needs it, so checking a long log costs about one scan
//! of each message payload and allocates almost nothing.

use std::ops::Range;

use serde::Deserialize;
use serde_json::value::RawValue;

use crate::{
    SessionEvent,
    jsontext::Walker,
    view::{
        BorrowedStr, Entries, Field, array, is_array, is_object, non_empty_string, object, object_text, present, string,
    },
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
fn message_text<'a>(event: &'a SessionEvent) -> Option<&'a str> {
    if event.kind == "user/message" {
        return Some(event.data.as_str());
    }
    object_text::<WrappedMessage<'a>>(event.data.as_str()).and_then(|wrapped| wrapped.message).map(RawValue::get)
}

/// Checks the shape of the message a `user/message`, `assistant/message` or `tool/result` event
/// carries, as the load path does (`session event at seq 9 lacks an identified message`); other
/// events pass.
pub fn check_message_shape(event: &SessionEvent) -> Result<(), String> {
    // The subject is only worded when a message fails the quick checks.
    if passes_quickly(event) {
        return Ok(());
    }
    check_message_shape_as(event, &format!("session event at seq {}", event.seq))
}

/// A message verified while it was decoded, or one that passes the one-pass check.
fn passes_quickly(event: &SessionEvent) -> bool {
    let kind = MessageKind::of(&event.kind);
    kind.is_none() || event.data.verified_message() == kind || fast::message_is_valid(event)
}

/// [`check_message_shape`] with a caller-chosen `subject` starting every message
/// (`seed tool/result at index 4`).
pub fn check_message_shape_as(event: &SessionEvent, subject: &str) -> Result<(), String> {
    if passes_quickly(event) {
        return Ok(());
    }
    check_message_shape_fields(event, subject)
}

#[cfg(test)]
pub(crate) fn fast_message_is_valid(event: &SessionEvent) -> bool {
    fast::message_is_valid(event)
}

/// The event types that carry a message, whose shape rules differ.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MessageKind {
    User,
    Assistant,
    ToolResult,
}

impl MessageKind {
    pub(crate) fn of(event_type: &str) -> Option<MessageKind> {
        match event_type {
            "user/message" => Some(MessageKind::User),
            "assistant/message" => Some(MessageKind::Assistant),
            "tool/result" => Some(MessageKind::ToolResult),
            _ => None,
        }
    }
}

/// Walks the payload of a `kind` message at the start of `text` (a decoder's line from where
/// `data` begins) with the one-pass shape check, validating its syntax on the way. Returns where
/// the payload ends if it is a well-formed message in compact text; `None` otherwise, and the
/// decoder then validates the payload on its own. So a message in a log is read in one pass.
///
/// For a tool result it also returns where `message.content[0].content` lies in `text`, the
/// content the surface's shape hash masks, so that hash can step over it instead of walking it
/// again ([`crate::canonical::tool_result_shape_hash`]).
pub(crate) fn walk_message(kind: MessageKind, text: &str) -> Option<(usize, Option<Range<usize>>)> {
    let mut walker = Walker::new(text);
    let masked = fast::check(kind, &mut walker)?;
    Some((walker.position(), masked))
}

/// The field-by-field shape rules, which decide and word every error.
pub(crate) fn check_message_shape_fields(event: &SessionEvent, subject: &str) -> Result<(), String> {
    let kind = event.kind.as_str();
    let is_assistant = kind == "assistant/message";
    let is_tool_result = kind == "tool/result";
    if kind != "user/message" && !is_assistant && !is_tool_result {
        return Ok(());
    }
    let message = message_text(event)
        .and_then(object_text::<MessageView<'_>>)
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
    let header = object_text::<RequestHeaderData<'_>>(event.data.as_str())
        .and_then(|data| object::<EpochHeaderView<'_>>(data.header));
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

/// A one-pass check for the common case: a well-formed message in compact text passes while it
/// is walked once with the cursor of [`crate::jsontext`], entering only the objects the rules
/// read. Anything unusual (a wrong type, a missing or repeated field, an escaped key or value,
/// text outside the fast subset) makes this return `false`, and the field-by-field checks above
/// decide and word the error. So this only ever accepts what those checks accept.
mod fast {
    use std::ops::Range;

    use super::MessageKind as Kind;
    use crate::{
        SessionEvent,
        jsontext::{Walker, plain_str},
    };

    pub(super) fn message_is_valid(event: &SessionEvent) -> bool {
        Kind::of(&event.kind).is_some_and(|kind| check(kind, &mut Walker::new(event.data.as_str())).is_some())
    }

    /// Stores the first occurrence of a field; a repeated field gives up (the typed views the
    /// field rules use refuse duplicates).
    fn once<T>(slot: &mut Option<T>, value: T) -> Option<()> {
        slot.replace(value).is_none().then_some(())
    }

    fn non_empty(token: Option<&str>) -> Option<&str> {
        plain_str(token?).filter(|text| !text.is_empty())
    }

    /// Walks one message payload of `kind` from the walker's position, consuming exactly the
    /// payload when it passes. For a tool result, returns the range of its masked content.
    pub(super) fn check(kind: Kind, walker: &mut Walker<'_>) -> Option<Option<Range<usize>>> {
        if kind == Kind::User {
            return message(walker, kind);
        }
        walker.enter_object()?;
        let mut checked = None;
        while let Some(key) = walker.next_key()? {
            if key == "message" {
                once(&mut checked, message(walker, kind)?)?;
            } else {
                walker.value()?;
            }
        }
        checked
    }

    /// The `source` of a message: `kind`, `provider`, `model`, `callId` as raw tokens.
    #[derive(Default)]
    struct Source<'a>([Option<&'a str>; 4]);

    fn source<'a>(walker: &mut Walker<'a>) -> Option<Source<'a>> {
        walker.enter_object()?;
        let mut found = Source::default();
        while let Some(key) = walker.next_key()? {
            let slot = match key {
                "kind" => 0,
                "provider" => 1,
                "model" => 2,
                "callId" => 3,
                _ => {
                    walker.value()?;
                    continue;
                }
            };
            once(&mut found.0[slot], walker.value()?)?;
        }
        Some(found)
    }

    /// A tool result's content: exactly one `tool-result` block; returns its `toolCallId` token.
    /// The first (only) block of a tool result's content: its `toolCallId` token, and the range
    /// of its own `content`.
    fn tool_result_content<'a>(walker: &mut Walker<'a>) -> Option<(&'a str, Range<usize>)> {
        walker.enter_array()?;
        if !walker.next_element()? {
            return None;
        }
        walker.enter_object()?;
        let (mut block_kind, mut call_id, mut content, mut masked) = (None, None, None, 0..0);
        while let Some(key) = walker.next_key()? {
            match key {
                "type" => once(&mut block_kind, walker.value()?)?,
                "toolCallId" => once(&mut call_id, walker.value()?)?,
                "content" => {
                    let start = walker.position();
                    once(&mut content, walker.value()?)?;
                    masked = start..walker.position();
                }
                _ => {
                    walker.value()?;
                }
            }
        }
        // A second block fails the rules.
        if walker.next_element()? {
            return None;
        }
        let valid = plain_str(block_kind?) == Some("tool-result") && content?.starts_with('[');
        valid.then_some((call_id?, masked))
    }

    fn message(walker: &mut Walker<'_>, kind: Kind) -> Option<Option<Range<usize>>> {
        walker.enter_object()?;
        let (mut id, mut role, mut found_source, mut content) = (None, None, None, None);
        let mut masked = None;
        while let Some(key) = walker.next_key()? {
            match key {
                "id" => once(&mut id, walker.value()?)?,
                "role" => once(&mut role, walker.value()?)?,
                "source" => once(&mut found_source, source(walker)?)?,
                // Only a tool result's content is read; any other content only has to be an array.
                "content" if kind == Kind::ToolResult => {
                    let (call_id, range) = tool_result_content(walker)?;
                    once(&mut content, call_id)?;
                    masked = Some(range);
                }
                "content" => {
                    let token = walker.value()?;
                    once(&mut content, token)?;
                    if !token.starts_with('[') {
                        return None;
                    }
                }
                _ => {
                    walker.value()?;
                }
            }
        }
        non_empty(id)?;
        let content = content?;
        let Source([source_kind, provider, model, call_id]) = found_source?;
        let source_kind = non_empty(source_kind)?;
        let role = plain_str(role?)?;
        let valid = match kind {
            Kind::User => role == "user",
            Kind::Assistant => {
                role == "assistant"
                    && source_kind == "model"
                    && non_empty(provider).is_some()
                    && non_empty(model).is_some()
            }
            Kind::ToolResult => {
                role == "user"
                    && source_kind == "tool"
                    && non_empty(call_id).is_some_and(|call_id| plain_str(content) == Some(call_id))
            }
        };
        valid.then_some(masked)
    }
}
