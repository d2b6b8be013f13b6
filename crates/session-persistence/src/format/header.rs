//! The header line (reference 01 §4.2): line 1 of every log, `{"type":"session", …}`.

use std::path::Path;

use serde_json::{Map, Value};
use session_core::{SESSION_FORMAT_VERSION, SessionHeader, SessionId, json::as_safe_u64};

use super::fields::parse_fields;
use crate::error::{CorruptKind, Location, PersistenceError};

/// Encodes `header` as its header line, without the newline: the first line of a JSONL log, and
/// the stored header text of any backend that keeps a log's header as the JSONL store writes it
/// (the PostgreSQL backend does). Key order: `type, version, id, createdAt, cwd?, parentSession?,
/// seedLength?, origin?, delegationDepth, agentPreset?, owner?`; `delegationDepth` is always
/// written. [`decode_header_line`] reads it back.
///
/// ```
/// use std::path::Path;
///
/// use session_core::{SessionHeader, SessionId};
/// use session_persistence::{decode_header_line, encode_header_line};
///
/// let header = SessionHeader::new(SessionId::from("s1"), 1_772_442_000_000);
/// let line = encode_header_line(&header);
/// assert!(line.starts_with(r#"{"type":"session","version":0,"id":"s1","createdAt":1772442000000"#));
/// assert!(!line.contains('\n'));
/// let decoded = decode_header_line(line.as_bytes(), Path::new("s1/session.jsonl")).unwrap();
/// assert_eq!(decoded, header);
///
/// // A line that is not a header is `Corrupt`, naming the path it was given.
/// let refused = decode_header_line(b"{\"type\":\"turn/start\"}", Path::new("s1/session.jsonl"));
/// assert!(refused.is_err());
/// ```
pub fn encode_header_line(header: &SessionHeader) -> String {
    // `SessionHeader` serializes its fields in the on-disk order; the line adds the tag in front.
    let fields = serde_json::to_string(header).expect("serializing a header into memory cannot fail");
    let members = fields.strip_prefix('{').expect("a header serializes as a JSON object");
    format!("{{\"type\":\"session\",{members}")
}

/// Why a first line is not a usable header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum HeaderLineError {
    /// Not JSON (`corrupt session log: header line is not valid JSON`).
    NotJson,
    /// JSON, but not a valid version-0 header; `detail` says which check failed when the
    /// shape passed the reference's checks but a typed field did not.
    NotHeader { detail: Option<String> },
    /// Carries the retired `sandboxMode` / `approvalPolicy` fields.
    Retired,
    /// A well-formed header of another format version. `header` is the listable form when the
    /// version and fields can be represented.
    Unsupported { id: SessionId, message: String, header: Option<Box<SessionHeader>> },
}

impl HeaderLineError {
    /// The error a read of the log at `path` reports.
    pub(crate) fn into_error(self, path: &Path) -> PersistenceError {
        let corrupt = |message: String| PersistenceError::corrupt(CorruptKind::Header, Location::file(path), message);
        match self {
            HeaderLineError::NotJson => corrupt("corrupt session log: header line is not valid JSON".to_owned()),
            HeaderLineError::NotHeader { detail: None } => {
                corrupt("corrupt session log: first line is not a session header".to_owned())
            }
            HeaderLineError::NotHeader { detail: Some(detail) } => {
                corrupt(format!("corrupt session log: first line is not a session header: {detail}"))
            }
            HeaderLineError::Retired => corrupt("session header uses retired policy baseline fields".to_owned()),
            HeaderLineError::Unsupported { id, message, .. } => PersistenceError::FormatUnsupported {
                id,
                message: format!("{message} (raw log: {})", path.display()),
                location: Some(Location::file(path)),
            },
        }
    }
}

/// Decodes a header line (without its newline), as [`encode_header_line`] writes it: the version
/// gate first (another format version is `FormatUnsupported`), then the reference's shape
/// checks, the retired-field refusal, and the typed field checks (any of which failing is
/// `Corrupt`). Unknown keys are dropped. `path` names the log in errors.
pub fn decode_header_line(line: &[u8], path: &Path) -> Result<SessionHeader, PersistenceError> {
    decode(line).map_err(|error| error.into_error(path))
}

pub(crate) fn decode(line: &[u8]) -> Result<SessionHeader, HeaderLineError> {
    let text = std::str::from_utf8(line).map_err(|_| HeaderLineError::NotJson)?;
    let value: Value = serde_json::from_str(text).map_err(|_| HeaderLineError::NotJson)?;
    let Value::Object(record) = &value else {
        return Err(HeaderLineError::NotHeader { detail: None });
    };
    if let Some(Value::Number(version)) = record.get("version")
        && version.as_f64() != Some(0.0)
    {
        return Err(unsupported(record, version));
    }
    if !has_reference_shape(text, record) {
        return Err(HeaderLineError::NotHeader { detail: None });
    }
    if record.contains_key("sandboxMode") || record.contains_key("approvalPolicy") {
        return Err(HeaderLineError::Retired);
    }
    let id = SessionId::from(record.get("id").and_then(Value::as_str).unwrap_or_default());
    SessionHeader::from_json(&value, &id).map_err(|error| HeaderLineError::NotHeader { detail: Some(error.message) })
}

/// The reference's `isHeaderLine`: the checks a header must pass to be listed at all.
fn has_reference_shape(text: &str, record: &Map<String, Value>) -> bool {
    // `-0` parses as integer zero; the reference rejects it, so look at the raw tokens.
    let raw = parse_fields(text, &["createdAt", "delegationDepth"]).ok();
    let negative = |slot: usize| raw.and_then(|raw| raw.get(slot)).is_some_and(|raw| raw.get().starts_with('-'));
    let optional = |key: &str, check: fn(&Value) -> bool| record.get(key).is_none_or(check);
    record.get("type").and_then(Value::as_str) == Some("session")
        && record.get("version").is_some_and(Value::is_number)
        && record.get("id").is_some_and(Value::is_string)
        && record.get("createdAt").and_then(as_safe_u64).is_some()
        && !negative(0)
        && record.get("delegationDepth").and_then(as_safe_u64).is_some()
        && !negative(1)
        && optional("origin", |origin| origin.as_str() == Some("subagent"))
        && optional("agentPreset", Value::is_string)
        && optional("owner", |owner| owner.as_str().is_some_and(|owner| !owner.is_empty()))
}

/// The refusal for a header of another version, with the reference's messages.
fn unsupported(record: &Map<String, Value>, version: &serde_json::Number) -> HeaderLineError {
    let id = match record.get("id") {
        Some(Value::String(id)) => id.clone(),
        Some(other) => other.to_string(),
        None => "undefined".to_owned(),
    };
    let shown = render_number(version);
    let message = if version.as_f64().is_some_and(|v| v > 0.0) {
        format!(
            "session \"{id}\" uses log format v{shown}, but this harness reads only v{SESSION_FORMAT_VERSION}: the log was \
             written by a newer harness — upgrade the harness to open it"
        )
    } else {
        format!(
            "session \"{id}\" uses log format v{shown}, older than the supported v{SESSION_FORMAT_VERSION}, and this build \
             ships no upgrade path for it"
        )
    };
    // Listing shows a foreign version like any header (refusal happens on load), when the rest
    // of the header is valid and the version fits the typed field.
    let header = version.as_u64().and_then(|v| u32::try_from(v).ok()).and_then(|v| {
        let text = serde_json::to_string(record).ok()?;
        if !has_reference_shape(&text, record)
            || record.contains_key("sandboxMode")
            || record.contains_key("approvalPolicy")
        {
            return None;
        }
        let mut current = record.clone();
        current.insert("version".to_owned(), Value::from(SESSION_FORMAT_VERSION));
        let mut header = SessionHeader::from_json(&Value::Object(current), &SessionId::from(id.as_str())).ok()?;
        header.version = v;
        Some(Box::new(header))
    });
    HeaderLineError::Unsupported { id: SessionId::from(id), message, header }
}

/// A JSON number as JavaScript prints it in a template string (`1`, not `1.0`).
fn render_number(number: &serde_json::Number) -> String {
    match number.as_f64() {
        Some(value) if value.fract() == 0.0 && value.abs() < 1e21 => format!("{}", value as i64),
        _ => number.to_string(),
    }
}
