//! `SessionHeader`: the immutable metadata stored beside a session's log (reference 01 §1.2).

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::{
    HeaderField, SessionId, TooLarge,
    json::{as_safe_u64, check_lossless},
};

/// The only log format version this build reads and writes.
pub const SESSION_FORMAT_VERSION: u32 = 0;

/// The presentation-only classification of a session. `subagent` is the only value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Origin {
    /// `"subagent"`: the session is a child created by the subagent runtime for a parent.
    Subagent,
}

/// Immutable metadata of one session lifetime.
///
/// `delegation_depth` is normalized: an absent depth and depth 0 are the same value, and the
/// header always serializes it (reference 01 §8.4). Field order here is the on-disk and wire order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionHeader {
    /// The log format version; always [`SESSION_FORMAT_VERSION`] (0), and validation refuses any
    /// other.
    pub version: u32,
    /// The session's id; it must equal the id the log is stored and looked up under.
    pub id: SessionId,
    /// When this session lifetime began, in Unix epoch milliseconds: a non-negative safe
    /// integer. With `cwd` it tells one lifetime of an id from another.
    pub created_at: u64,
    /// The working directory the session runs in; an absolute path when present.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    /// Fork lineage: the id of the session this one was forked or spawned from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_session: Option<SessionId>,
    /// How many leading events were inherited from the parent through a fork (the seed, without
    /// its `session/end-seed`). Durable; the session's own suffix is `events[seed_length..]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed_length: Option<u64>,
    /// The presentation-only classification; `Some(Origin::Subagent)` for a subagent child.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<Origin>,
    /// How deep in a delegation chain the session is: 0 at the top level, a subagent child has
    /// its parent's depth plus one. Persisted so a recursion budget survives a resume.
    #[serde(default)]
    pub delegation_depth: u64,
    /// The id of the agent preset the session was composed from (it decides tools and prompt).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_preset: Option<String>,
    /// The identity partition the session belongs to; non-empty when present, and absent for the
    /// operator tier.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
}

/// A header that failed validation; the message is the reference's exact text, or for a field
/// over its size bound the [`TooLarge`] message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct HeaderError {
    /// The reference's text (`session header cwd must be an absolute path, got "tmp"`), which is
    /// also this error's message.
    pub message: String,
    /// Set when a field is over its size bound (the header is well-formed but cannot be stored).
    pub too_large: Option<TooLarge>,
}

impl HeaderError {
    pub(crate) fn new(message: impl Into<String>) -> HeaderError {
        HeaderError { message: message.into(), too_large: None }
    }
}

impl From<TooLarge> for HeaderError {
    fn from(too_large: TooLarge) -> HeaderError {
        HeaderError { message: too_large.to_string(), too_large: Some(too_large) }
    }
}

/// The optional fields of a header, as a caller supplies them when creating a session.
///
/// Each field becomes the [`SessionHeader`] field of the same name; the store fills in
/// `version` and `id`, and `createdAt` when it is absent.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HeaderMeta {
    /// The working directory; must be an absolute path.
    pub cwd: Option<String>,
    /// The session this one is forked or spawned from.
    pub parent_session: Option<SessionId>,
    /// The lifetime's start in Unix epoch milliseconds; `None` takes the store clock's reading.
    /// A resume passes the stored value back.
    pub created_at: Option<u64>,
    /// How many leading seed events were inherited through a fork; a resume passes the stored
    /// value back rather than recomputing it.
    pub seed_length: Option<u64>,
    /// `Some(Origin::Subagent)` for a subagent child.
    pub origin: Option<Origin>,
    /// The delegation depth (0 at the top level).
    pub delegation_depth: u64,
    /// The agent preset the session is composed from.
    pub agent_preset: Option<String>,
    /// The identity partition; must be non-empty when present.
    pub owner: Option<String>,
}

/// A stored header's fields as creation metadata, `createdAt` included, so that
/// [`SessionHeader::from_meta`] rebuilds the very header (a resume creates the live session of a
/// stored one this way; see [`CreateOptions::resume`](crate::CreateOptions::resume)).
impl From<&SessionHeader> for HeaderMeta {
    fn from(header: &SessionHeader) -> HeaderMeta {
        HeaderMeta {
            cwd: header.cwd.clone(),
            parent_session: header.parent_session.clone(),
            created_at: Some(header.created_at),
            seed_length: header.seed_length,
            origin: header.origin,
            delegation_depth: header.delegation_depth,
            agent_preset: header.agent_preset.clone(),
            owner: header.owner.clone(),
        }
    }
}

impl SessionHeader {
    /// A minimal version-0 header.
    pub fn new(id: SessionId, created_at: u64) -> SessionHeader {
        SessionHeader {
            version: SESSION_FORMAT_VERSION,
            id,
            created_at,
            cwd: None,
            parent_session: None,
            seed_length: None,
            origin: None,
            delegation_depth: 0,
            agent_preset: None,
            owner: None,
        }
    }

    /// Builds a header from creation metadata; `now_ms` fills an absent `createdAt`.
    pub fn from_meta(id: SessionId, meta: HeaderMeta, now_ms: u64) -> SessionHeader {
        SessionHeader {
            version: SESSION_FORMAT_VERSION,
            id,
            created_at: meta.created_at.unwrap_or(now_ms),
            cwd: meta.cwd,
            parent_session: meta.parent_session,
            seed_length: meta.seed_length,
            origin: meta.origin,
            delegation_depth: meta.delegation_depth,
            agent_preset: meta.agent_preset,
            owner: meta.owner,
        }
    }

    /// Checks a header about to be stored: the size bounds of its string fields
    /// ([`SessionHeader::check_sizes`]) first, then the rules a typed header can still break
    /// ([`SessionHeader::validate_stored`]), with the reference's messages.
    pub fn validate(&self, session_id: &SessionId) -> Result<(), HeaderError> {
        self.check_sizes()?;
        self.check_text()?;
        self.validate_stored(session_id)
    }

    /// Checks each bounded string field against its limit ([`HeaderField`]), in key order. A
    /// header within the bounds encodes to at most [`MAX_HEADER_JSON_BYTES`].
    ///
    /// [`MAX_HEADER_JSON_BYTES`]: crate::MAX_HEADER_JSON_BYTES
    pub fn check_sizes(&self) -> Result<(), TooLarge> {
        for (field, value) in self.string_fields() {
            if let Some(value) = value {
                field.check(value)?;
            }
        }
        Ok(())
    }

    /// Each string field with its value, in key order.
    fn string_fields(&self) -> [(HeaderField, Option<&str>); 5] {
        [
            (HeaderField::Id, Some(self.id.as_str())),
            (HeaderField::Cwd, self.cwd.as_deref()),
            (HeaderField::ParentSession, self.parent_session.as_ref().map(SessionId::as_str)),
            (HeaderField::AgentPreset, self.agent_preset.as_deref()),
            (HeaderField::Owner, self.owner.as_deref()),
        ]
    }

    /// Refuses a string field holding U+0000 (NUL), in key order: a PostgreSQL `text` column
    /// cannot hold it, so no backend stores it (a header every backend stores alike, never one
    /// accepted and then lost).
    pub fn check_text(&self) -> Result<(), HeaderError> {
        let fields = self.string_fields();
        for (field, value) in fields {
            if let Some(value) = value {
                field.check_text(value).map_err(HeaderError::new)?;
            }
        }
        Ok(())
    }

    /// The rules a header read from a log must pass: everything [`SessionHeader::validate`]
    /// checks except the size bounds, so a log written before the bounds existed still reads.
    pub fn validate_stored(&self, session_id: &SessionId) -> Result<(), HeaderError> {
        if self.version != SESSION_FORMAT_VERSION {
            return Err(HeaderError::new(format!("session header version must be 0, got {}", self.version)));
        }
        if &self.id != session_id {
            return Err(HeaderError::new(format!(
                "session header id {:?} does not match session id {:?}",
                self.id.as_str(),
                session_id.as_str()
            )));
        }
        if self.created_at > crate::json::MAX_SAFE_INTEGER {
            return Err(HeaderError::new("session header createdAt must be a non-negative safe integer"));
        }
        if let Some(cwd) = &self.cwd
            && !is_absolute_path(cwd)
        {
            return Err(HeaderError::new(format!("session header cwd must be an absolute path, got {cwd:?}")));
        }
        if self.seed_length.is_some_and(|n| n > crate::json::MAX_SAFE_INTEGER) {
            return Err(HeaderError::new("session header seedLength must be a non-negative safe integer"));
        }
        if self.delegation_depth > crate::json::MAX_SAFE_INTEGER {
            return Err(HeaderError::new("session header delegationDepth must be a non-negative safe integer"));
        }
        if self.owner.as_deref() == Some("") {
            return Err(HeaderError::new("session header owner must be a non-empty string"));
        }
        Ok(())
    }

    /// Validates an untrusted JSON header (for example one read from a log) against the session
    /// id it must belong to. Unknown keys are ignored. Like [`SessionHeader::validate_stored`] it
    /// applies no size bound; [`SessionHeader::validate`] does before a header is stored.
    pub fn from_json(value: &Value, session_id: &SessionId) -> Result<SessionHeader, HeaderError> {
        let Value::Object(record) = value else {
            return Err(HeaderError::new("session header is not a plain JSON record"));
        };
        if check_lossless(value).is_err() {
            return Err(HeaderError::new("session header is not losslessly JSON-serializable"));
        }
        match record.get("version") {
            Some(Value::Number(n)) if n.as_u64() == Some(0) => {}
            other => {
                let shown = other.map_or_else(|| "undefined".to_owned(), render_js);
                return Err(HeaderError::new(format!("session header version must be 0, got {shown}")));
            }
        }
        let id = match record.get("id") {
            Some(Value::String(id)) if id == session_id.as_str() => session_id.clone(),
            other => {
                let shown = other.map_or_else(|| "undefined".to_owned(), render_js);
                return Err(HeaderError::new(format!(
                    "session header id {shown:?} does not match session id {:?}",
                    session_id.as_str()
                )));
            }
        };
        let created_at = record
            .get("createdAt")
            .and_then(as_safe_u64)
            .ok_or_else(|| HeaderError::new("session header createdAt must be a non-negative safe integer"))?;
        let cwd = optional_string(record, "cwd", "session header cwd must be a string")?;
        if let Some(cwd) = &cwd
            && !is_absolute_path(cwd)
        {
            return Err(HeaderError::new(format!("session header cwd must be an absolute path, got {cwd:?}")));
        }
        let parent_session = optional_string(record, "parentSession", "session header parentSession must be a string")?
            .map(SessionId::from);
        let seed_length =
            optional_safe_u64(record, "seedLength", "session header seedLength must be a non-negative safe integer")?;
        let origin = match record.get("origin") {
            None => None,
            Some(Value::String(origin)) if origin == "subagent" => Some(Origin::Subagent),
            Some(_) => return Err(HeaderError::new("session header origin must be \"subagent\"")),
        };
        let delegation_depth = optional_safe_u64(
            record,
            "delegationDepth",
            "session header delegationDepth must be a non-negative safe integer",
        )?
        .unwrap_or(0);
        let agent_preset = optional_string(record, "agentPreset", "session header agentPreset must be a string")?;
        let owner = match record.get("owner") {
            None => None,
            Some(Value::String(owner)) if !owner.is_empty() => Some(owner.clone()),
            Some(_) => return Err(HeaderError::new("session header owner must be a non-empty string")),
        };
        Ok(SessionHeader {
            version: SESSION_FORMAT_VERSION,
            id,
            created_at,
            cwd,
            parent_session,
            seed_length,
            origin,
            delegation_depth,
            agent_preset,
            owner,
        })
    }

    /// The index of the first event of this session's own suffix (`seedLength`, or 0).
    pub fn own_suffix_start(&self) -> u64 {
        self.seed_length.unwrap_or(0)
    }

    /// Whether the header's `origin` is `subagent`.
    pub fn is_subagent(&self) -> bool {
        self.origin == Some(Origin::Subagent)
    }
}

fn optional_string(record: &Map<String, Value>, key: &str, message: &str) -> Result<Option<String>, HeaderError> {
    match record.get(key) {
        None => Ok(None),
        Some(Value::String(value)) => Ok(Some(value.clone())),
        Some(_) => Err(HeaderError::new(message)),
    }
}

fn optional_safe_u64(record: &Map<String, Value>, key: &str, message: &str) -> Result<Option<u64>, HeaderError> {
    match record.get(key) {
        None => Ok(None),
        Some(value) => as_safe_u64(value).map(Some).ok_or_else(|| HeaderError::new(message)),
    }
}

/// Renders a JSON value the way the reference interpolates it into a message.
fn render_js(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

/// An absolute POSIX path, or an absolute Windows path with a drive letter or UNC prefix.
pub fn is_absolute_path(path: &str) -> bool {
    let bytes = path.as_bytes();
    path.starts_with('/')
        || path.starts_with("\\\\")
        || (bytes.len() >= 3
            && bytes[0].is_ascii_alphabetic()
            && bytes[1] == b':'
            && (bytes[2] == b'\\' || bytes[2] == b'/'))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn check(value: Value, expected: Result<(), &str>) {
        let id = SessionId::from("s-1");
        let actual = SessionHeader::from_json(&value, &id).map(|_| ()).map_err(|err| err.message);
        assert_eq!(actual, expected.map_err(str::to_owned), "{value}");
    }

    /// A header's metadata rebuilds the header, whatever the store's clock reads.
    #[test]
    fn header_meta_from_a_header_rebuilds_it() {
        let mut header = SessionHeader::new(SessionId::from("s-1"), 5);
        header.cwd = Some("/work".to_owned());
        header.parent_session = Some(SessionId::from("p"));
        header.seed_length = Some(3);
        header.origin = Some(Origin::Subagent);
        header.delegation_depth = 2;
        header.agent_preset = Some("preset".to_owned());
        header.owner = Some("owner".to_owned());
        let meta = HeaderMeta::from(&header);
        assert_eq!(meta.created_at, Some(5));
        assert_eq!(SessionHeader::from_meta(header.id.clone(), meta, 99), header);
        let plain = SessionHeader::new(SessionId::from("s-2"), 7);
        assert_eq!(SessionHeader::from_meta(plain.id.clone(), HeaderMeta::from(&plain), 99), plain);
    }

    #[test]
    fn validation_messages() {
        let ok = json!({"version": 0, "id": "s-1", "createdAt": 5});
        check(ok.clone(), Ok(()));
        check(json!([1]), Err("session header is not a plain JSON record"));
        check(json!({"version": 1, "id": "s-1", "createdAt": 5}), Err("session header version must be 0, got 1"));
        check(
            json!({"version": 0, "id": "s-2", "createdAt": 5}),
            Err("session header id \"s-2\" does not match session id \"s-1\""),
        );
        check(
            json!({"version": 0, "id": "s-1", "createdAt": 1.5}),
            Err("session header createdAt must be a non-negative safe integer"),
        );
        check(json!({"version": 0, "id": "s-1", "createdAt": 5, "cwd": 3}), Err("session header cwd must be a string"));
        check(
            json!({"version": 0, "id": "s-1", "createdAt": 5, "cwd": "rel/path"}),
            Err("session header cwd must be an absolute path, got \"rel/path\""),
        );
        check(
            json!({"version": 0, "id": "s-1", "createdAt": 5, "parentSession": 1}),
            Err("session header parentSession must be a string"),
        );
        check(
            json!({"version": 0, "id": "s-1", "createdAt": 5, "seedLength": -1}),
            Err("session header seedLength must be a non-negative safe integer"),
        );
        check(
            json!({"version": 0, "id": "s-1", "createdAt": 5, "origin": "user"}),
            Err("session header origin must be \"subagent\""),
        );
        check(
            json!({"version": 0, "id": "s-1", "createdAt": 5, "delegationDepth": 0.5}),
            Err("session header delegationDepth must be a non-negative safe integer"),
        );
        check(
            json!({"version": 0, "id": "s-1", "createdAt": 5, "agentPreset": false}),
            Err("session header agentPreset must be a string"),
        );
        check(
            json!({"version": 0, "id": "s-1", "createdAt": 5, "owner": ""}),
            Err("session header owner must be a non-empty string"),
        );
    }

    /// A header with every bounded field at its limit, each made of `filler` after a leading `/`.
    fn largest_header(filler: char) -> SessionHeader {
        let fill = |field: HeaderField| {
            let mut text = String::from("/");
            while text.len() + filler.len_utf8() <= field.limit() {
                text.push(filler);
            }
            text
        };
        let mut header = SessionHeader::new(SessionId::from(fill(HeaderField::Id)), crate::json::MAX_SAFE_INTEGER);
        header.cwd = Some(fill(HeaderField::Cwd));
        header.parent_session = Some(SessionId::from(fill(HeaderField::ParentSession)));
        header.seed_length = Some(crate::json::MAX_SAFE_INTEGER);
        header.origin = Some(Origin::Subagent);
        header.delegation_depth = crate::json::MAX_SAFE_INTEGER;
        header.agent_preset = Some(fill(HeaderField::AgentPreset));
        header.owner = Some(fill(HeaderField::Owner));
        header
    }

    #[test]
    fn the_largest_valid_header_encodes_within_its_bound() {
        // A control character escapes to six bytes, the worst case.
        for filler in ['a', '"', '\u{1}', '😀'] {
            let header = largest_header(filler);
            assert_eq!(header.validate(&header.id), Ok(()));
            let text = serde_json::to_string(&header).unwrap();
            assert!(text.len() <= crate::MAX_HEADER_JSON_BYTES, "{} bytes for {filler:?}", text.len());
        }
    }

    #[test]
    fn validate_refuses_an_oversized_field_with_a_typed_error() {
        for field in HeaderField::ALL {
            let mut header = largest_header('a');
            let too_long = format!("/{}", "a".repeat(field.limit()));
            match field {
                HeaderField::Id => header.id = SessionId::from(too_long.as_str()),
                HeaderField::Cwd => header.cwd = Some(too_long.clone()),
                HeaderField::ParentSession => header.parent_session = Some(SessionId::from(too_long.as_str())),
                HeaderField::AgentPreset => header.agent_preset = Some(too_long.clone()),
                HeaderField::Owner => header.owner = Some(too_long.clone()),
            }
            let error = header.validate(&header.id).unwrap_err();
            let expected = TooLarge {
                what: crate::Oversized::Header(field),
                size: too_long.len() as u64,
                limit: field.limit() as u64,
            };
            assert_eq!(error.message, expected.to_string());
            assert_eq!(error.too_large, Some(expected));
            // A stored header is read without the bounds.
            assert_eq!(header.validate_stored(&header.id), Ok(()), "{field}");
        }
        let error = SessionHeader::new(SessionId::from("s"), 1).validate(&SessionId::from("t")).unwrap_err();
        assert_eq!(error.too_large, None);
    }

    #[test]
    fn serializes_in_reference_order_with_depth() {
        let mut header = SessionHeader::new(SessionId::from("a"), 7);
        header.cwd = Some("/w".into());
        header.origin = Some(Origin::Subagent);
        header.parent_session = Some(SessionId::from("p"));
        let text = serde_json::to_string(&header).unwrap();
        assert_eq!(
            text,
            r#"{"version":0,"id":"a","createdAt":7,"cwd":"/w","parentSession":"p","origin":"subagent","delegationDepth":0}"#
        );
        let back: SessionHeader = serde_json::from_str(&text).unwrap();
        assert_eq!(back, header);
    }
}
