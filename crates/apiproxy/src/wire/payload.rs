//! Request payloads: one typed struct per method and the validation that turns a JSON payload into
//! it, or into the `bad-request` issues that say what is wrong (reference 04 §3, "schema posture").
//!
//! Objects are non-strict: unknown keys are ignored. An optional key may be absent; a present key
//! of the wrong type is an issue (JSON `null` included, as in the reference's schemas).

use serde_json::{Map, Value};
use session_core::{HeaderField, SessionHeader, SurfaceIntent, SurfaceOp, json::MAX_SAFE_INTEGER};

use crate::wire::error::{Issue, PathSegment};

/// The longest id accepted where a caller names an existing session, in bytes.
pub const MAX_LOOKUP_ID_BYTES: usize = 1024;
/// The longest id a caller may mint (`session.create`, `subagent.spawn`), in bytes.
pub const MAX_NEW_ID_BYTES: usize = 128;
/// The most events one `session.append` may carry.
pub const MAX_APPEND_EVENTS: usize = 1024;
/// The longest event type accepted by `session.append`, in bytes.
pub const MAX_EVENT_TYPE_BYTES: usize = 128;

/// A subagent's mode (reference 03 §2.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SubagentMode {
    /// `one-shot`: the child runs one delegated task; its descriptor is written before its first
    /// step.
    OneShot,
    /// `continuable`: the child can be resumed with more work; its descriptor is in its seed.
    Continuable,
}

impl SubagentMode {
    /// The mode's wire name: `one-shot` or `continuable`.
    pub fn as_str(self) -> &'static str {
        match self {
            SubagentMode::OneShot => "one-shot",
            SubagentMode::Continuable => "continuable",
        }
    }
}

/// The most items one page of `session.list` holds.
pub const MAX_LIST_LIMIT: u64 = 1000;

/// The filters of `session.list`, on the whole and the paged answer (`subagents`, `cwd`,
/// `running`). The default admits every session the caller sees.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListFilters {
    /// `false` leaves out sessions with `origin: "subagent"` (default `true`).
    pub subagents: bool,
    /// Only sessions whose `cwd` is exactly this.
    pub cwd: Option<String>,
    /// Only running sessions (live and inside a turn).
    pub running: bool,
}

impl Default for ListFilters {
    fn default() -> ListFilters {
        ListFilters { subagents: true, cwd: None, running: false }
    }
}

impl ListFilters {
    /// The filters of a `session.list` payload; a payload that is not an object has none (the
    /// reference ignores it). A key of the wrong type is an issue under the key.
    pub fn parse(payload: &Value) -> Result<ListFilters, Vec<Issue>> {
        let Some(object) = payload.as_object() else { return Ok(ListFilters::default()) };
        let mut fields = Fields { object, issues: Vec::new() };
        let subagents = fields.optional_bool("subagents").unwrap_or(true);
        let cwd = fields.optional_string("cwd");
        let running = fields.optional_bool("running").unwrap_or(false);
        fields.finish(ListFilters { subagents, cwd, running })
    }

    /// Whether a session with `header` passes the header filters (`subagents`, `cwd`); `running`
    /// is a live fact the caller checks.
    pub fn admits_header(&self, header: &SessionHeader) -> bool {
        (self.subagents || !header.is_subagent())
            && self.cwd.as_ref().is_none_or(|cwd| header.cwd.as_ref() == Some(cwd))
    }
}

/// A paged `session.list` (`{limit, cursor?}`): newest first by `createdAt`, starting after the
/// cursor's place.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListPageRequest {
    /// How many rows a page holds at most.
    pub limit: usize,
    /// The place the page starts after (the decoded `cursor`), or the newest session.
    pub after: Option<session_persistence::PageKey>,
}

impl ListPageRequest {
    /// `None` without a `limit`: the whole answer of the reference, which ignores every key,
    /// `cursor` included. With a `limit` (1 to [`MAX_LIST_LIMIT`]), a `cursor` must be one this
    /// gateway answered.
    pub fn parse(payload: &Value) -> Result<Option<ListPageRequest>, Vec<Issue>> {
        let Some(object) = payload.as_object().filter(|object| object.contains_key("limit")) else { return Ok(None) };
        let mut fields = Fields { object, issues: Vec::new() };
        let limit = fields.optional_integer("limit", 1);
        if limit.is_some_and(|limit| limit > MAX_LIST_LIMIT) {
            fields.issue("too_big", "limit", format!("must be less than or equal to {MAX_LIST_LIMIT}"));
        }
        let after = match fields.string_field("cursor", false) {
            None => None,
            Some(cursor) => {
                let key = decode_cursor(cursor);
                if key.is_none() {
                    fields.issue("custom", "cursor", "not a cursor this gateway answered");
                }
                key
            }
        };
        let request = limit.map(|limit| ListPageRequest { limit: limit as usize, after });
        fields.finish(request)
    }
}

/// The opaque `nextCursor` of a page that ends at `key`: `v1.` and the hex of
/// `<createdAt>:<id>`. Clients only hand it back.
pub fn encode_cursor(key: &session_persistence::PageKey) -> String {
    let plain = format!("{}:{}", key.created_at, key.id);
    let mut out = String::with_capacity(3 + 2 * plain.len());
    out.push_str("v1.");
    for byte in plain.bytes() {
        out.push_str(&format!("{byte:02x}"));
    }
    out
}

fn decode_cursor(cursor: &str) -> Option<session_persistence::PageKey> {
    let hex = cursor.strip_prefix("v1.")?;
    if !hex.len().is_multiple_of(2) || hex.len() > 4 * 1024 {
        return None;
    }
    let bytes: Option<Vec<u8>> =
        (0..hex.len()).step_by(2).map(|idx| u8::from_str_radix(hex.get(idx..idx + 2)?, 16).ok()).collect();
    let plain = String::from_utf8(bytes?).ok()?;
    let (created_at, id) = plain.split_once(':')?;
    let created_at: u64 = created_at.parse().ok()?;
    (!id.is_empty()).then(|| session_persistence::PageKey { created_at, id: session_core::SessionId::from(id) })
}

/// `session.history`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HistoryRequest {
    /// The session to read.
    pub session_id: String,
    /// Page the events before this seq (absent: the tail page).
    pub before_seq: Option<u64>,
    /// How many messages the page holds at most (at least 1; absent: 50).
    pub max_messages: Option<u64>,
}

/// `session.get`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GetRequest {
    /// The session to describe.
    pub session_id: String,
}

/// `session.create`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreateRequest {
    /// The id to create, adopt or resume; absent: the gateway mints `session-<uuid>`.
    pub session_id: Option<String>,
    /// An absolute working directory; absent: the gateway's default cwd.
    pub cwd: Option<String>,
    /// A workspace; this gateway has none, so any value is `workspace-not-found`.
    pub workspace_id: Option<String>,
    /// The agent preset recorded in the header, as given.
    pub agent_preset: Option<String>,
}

/// `session.fork`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForkRequest {
    /// The session to fork.
    pub session_id: String,
    /// Fork at the first `turn/end` at or after this seq; absent: at the last `turn/end`.
    pub at_seq: Option<u64>,
}

/// One event of a `session.append`, before the session stamps its seq and time.
#[derive(Debug, Clone, PartialEq)]
pub struct NewEvent {
    /// The event type (`type` on the wire), which must be in the session vocabulary.
    pub kind: String,
    /// The payload.
    pub data: Value,
    /// `surfaceOp` with its `sourceEventSeqs`, when the event is a surface message.
    pub surface: Option<SurfaceIntent>,
}

/// `session.append`.
#[derive(Debug, Clone, PartialEq)]
pub struct AppendRequest {
    /// The live session to append to.
    pub session_id: String,
    /// 1 to [`MAX_APPEND_EVENTS`] events, appended in order.
    pub events: Vec<NewEvent>,
    /// The seq the first event must get, or the call is refused (`agent-busy`).
    pub expected_seq: Option<u64>,
    /// For a subagent child: its parent, which a child's driver must name.
    pub parent_session_id: Option<String>,
    /// Answer only once everything appended so far (this batch included) is durable.
    pub durable: bool,
}

/// `session.release`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReleaseRequest {
    /// The live session.
    pub session_id: String,
    /// For a subagent child: its parent, which a child's driver must name.
    pub parent_session_id: Option<String>,
}

/// `subagent.list`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubagentListRequest {
    /// The parent whose direct children are listed.
    pub parent_session_id: String,
}

/// `subagent.history`: a subagent address plus the paging fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubagentHistoryRequest {
    /// The parent the child must be catalogued under.
    pub parent_session_id: String,
    /// The child to read.
    pub child_session_id: String,
    /// The mode the child's catalog row must have.
    pub mode: SubagentMode,
    /// As [`HistoryRequest::before_seq`].
    pub before_seq: Option<u64>,
    /// As [`HistoryRequest::max_messages`].
    pub max_messages: Option<u64>,
}

/// `subagent.spawn`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubagentSpawnRequest {
    /// The live parent.
    pub parent_session_id: String,
    /// The child's id; absent: the session store mints one.
    pub child_session_id: Option<String>,
    /// The child's mode.
    pub mode: SubagentMode,
    /// The descriptor's label; required for a continuable child.
    pub label: Option<String>,
    /// The descriptor's provider; absent: `apiproxy`.
    pub provider: Option<String>,
    /// Seed the child with the parent's log through its last `turn/end`.
    pub fork: bool,
}

/// Reads the fields of one payload object and collects every issue found.
#[derive(Debug)]
pub struct Fields<'a> {
    object: &'a Map<String, Value>,
    issues: Vec<Issue>,
}

impl<'a> Fields<'a> {
    /// The payload must be a JSON object.
    pub fn of(payload: &'a Value) -> Result<Fields<'a>, Vec<Issue>> {
        match payload {
            Value::Object(object) => Ok(Fields { object, issues: Vec::new() }),
            other => {
                Err(vec![Issue::new("invalid_type", Vec::new(), format!("expected object, received {}", kind(other)))])
            }
        }
    }

    fn issue(&mut self, code: &'static str, key: &str, message: impl Into<String>) {
        self.issues.push(Issue::at(code, key, message));
    }

    /// The value when every field was valid, else every issue.
    pub fn finish<T>(self, value: T) -> Result<T, Vec<Issue>> {
        if self.issues.is_empty() { Ok(value) } else { Err(self.issues) }
    }

    fn string_field(&mut self, key: &str, required: bool) -> Option<&'a str> {
        match self.object.get(key) {
            None if required => {
                self.issue("invalid_type", key, "required");
                None
            }
            None => None,
            Some(Value::String(text)) => Some(text.as_str()),
            Some(other) => {
                let message = format!("expected string, received {}", kind(other));
                self.issue("invalid_type", key, message);
                None
            }
        }
    }

    /// An id naming a session that should exist: a non-empty string of at most
    /// [`MAX_LOOKUP_ID_BYTES`] bytes without control characters. Ids are otherwise opaque: a `/`
    /// or `..` is just an unknown id, never a path.
    pub fn lookup_id(&mut self, key: &str) -> Option<String> {
        let id = self.string_field(key, true)?;
        self.check_lookup_id(key, id).then(|| id.to_owned())
    }

    /// Like [`Fields::lookup_id`], but the key may be absent.
    pub fn optional_lookup_id(&mut self, key: &str) -> Option<String> {
        let id = self.string_field(key, false)?;
        self.check_lookup_id(key, id).then(|| id.to_owned())
    }

    fn check_lookup_id(&mut self, key: &str, id: &str) -> bool {
        if id.is_empty() {
            self.issue("too_small", key, "must be a non-empty string");
            return false;
        }
        if id.len() > MAX_LOOKUP_ID_BYTES {
            self.issue("too_big", key, format!("must be at most {MAX_LOOKUP_ID_BYTES} bytes"));
            return false;
        }
        if id.chars().any(char::is_control) {
            self.issue("custom", key, "must not contain control characters");
            return false;
        }
        true
    }

    /// An id the caller mints (optional): 1 to [`MAX_NEW_ID_BYTES`] characters from
    /// `[A-Za-z0-9._-]`, and not `.` or `..`.
    pub fn optional_new_id(&mut self, key: &str) -> Option<String> {
        let id = self.string_field(key, false)?;
        if !self.check_lookup_id(key, id) {
            return None;
        }
        let charset_ok = id.bytes().all(|byte| byte.is_ascii_alphanumeric() || matches!(byte, b'.' | b'_' | b'-'));
        if id.len() > MAX_NEW_ID_BYTES || !charset_ok || id == "." || id == ".." {
            self.issue(
                "custom",
                key,
                format!("a new session id must be 1 to {MAX_NEW_ID_BYTES} characters from [A-Za-z0-9._-], not \".\" or \"..\""),
            );
            return None;
        }
        Some(id.to_owned())
    }

    /// Checks a value that becomes the header field `field` against its size bound, so that a
    /// session is never created with a header its log could not store.
    fn check_header_bound(&mut self, key: &str, field: HeaderField, value: Option<&str>) {
        if let Some(Err(too_large)) = value.map(|value| field.check(value)) {
            self.issues.push(Issue::too_large(&too_large, vec![PathSegment::from(key)]));
        }
        if let Some(Err(message)) = value.map(|value| field.check_text(value)) {
            self.issue("custom", key, message);
        }
    }

    /// An optional string (any content).
    pub fn optional_string(&mut self, key: &str) -> Option<String> {
        self.string_field(key, false).map(str::to_owned)
    }

    /// An optional boolean.
    pub fn optional_bool(&mut self, key: &str) -> Option<bool> {
        match self.object.get(key)? {
            Value::Bool(flag) => Some(*flag),
            other => {
                let message = format!("expected boolean, received {}", kind(other));
                self.issue("invalid_type", key, message);
                None
            }
        }
    }

    /// An optional non-empty string.
    pub fn optional_non_empty(&mut self, key: &str) -> Option<String> {
        let text = self.string_field(key, false)?;
        if text.is_empty() {
            self.issue("too_small", key, "must be a non-empty string");
            return None;
        }
        Some(text.to_owned())
    }

    /// An optional integer `>= min` that a JSON peer represents exactly (at most 2^53 - 1).
    pub fn optional_integer(&mut self, key: &str, min: u64) -> Option<u64> {
        let value = self.object.get(key)?;
        match integer(value) {
            Ok(n) if n >= min => Some(n),
            Ok(_) => {
                self.issue("too_small", key, format!("must be greater than or equal to {min}"));
                None
            }
            Err(message) => {
                self.issue("invalid_type", key, message);
                None
            }
        }
    }

    /// A required subagent mode; `only` restricts it to one literal.
    pub fn mode(&mut self, key: &str, only: Option<SubagentMode>) -> Option<SubagentMode> {
        let text = self.string_field(key, true)?;
        let mode = match text {
            "one-shot" => Some(SubagentMode::OneShot),
            "continuable" => Some(SubagentMode::Continuable),
            _ => None,
        };
        match (mode, only) {
            (Some(mode), None) => Some(mode),
            (Some(mode), Some(only)) if mode == only => Some(mode),
            (_, Some(only)) => {
                self.issue("invalid_literal", key, format!("expected \"{}\"", only.as_str()));
                None
            }
            (None, None) => {
                self.issue("invalid_enum_value", key, "expected \"one-shot\" or \"continuable\"");
                None
            }
        }
    }

    /// The `events` array of `session.append`.
    pub fn new_events(&mut self, key: &str) -> Option<Vec<NewEvent>> {
        let items = match self.object.get(key) {
            None => {
                self.issue("invalid_type", key, "required");
                return None;
            }
            Some(Value::Array(items)) => items,
            Some(other) => {
                let message = format!("expected array, received {}", kind(other));
                self.issue("invalid_type", key, message);
                return None;
            }
        };
        if items.is_empty() || items.len() > MAX_APPEND_EVENTS {
            self.issue("too_small", key, format!("must hold 1 to {MAX_APPEND_EVENTS} events"));
            return None;
        }
        let mut events = Vec::with_capacity(items.len());
        for (idx, item) in items.iter().enumerate() {
            match new_event(item) {
                Ok(event) => events.push(event),
                Err(mut issues) => {
                    for issue in &mut issues {
                        issue.path.splice(0..0, [PathSegment::from(key), PathSegment::from(idx)]);
                    }
                    self.issues.extend(issues);
                }
            }
        }
        (events.len() == items.len()).then_some(events)
    }
}

fn new_event(item: &Value) -> Result<NewEvent, Vec<Issue>> {
    let mut fields = Fields::of(item)?;
    let event_type = fields.string_field("type", true).map(str::to_owned);
    if let Some(event_type) = &event_type
        && (event_type.is_empty()
            || event_type.len() > MAX_EVENT_TYPE_BYTES
            || event_type.chars().any(char::is_control))
    {
        fields.issue("custom", "type", format!("must be 1 to {MAX_EVENT_TYPE_BYTES} bytes without control characters"));
    }
    let data = fields.object.get("data").cloned();
    if data.is_none() {
        fields.issue("invalid_type", "data", "required");
    }
    let surface_op = match fields.object.get("surfaceOp") {
        None => None,
        Some(value) => match SurfaceOp::from_json(value) {
            Ok(op) => Some(op),
            Err(message) => {
                fields.issue("custom", "surfaceOp", message);
                None
            }
        },
    };
    let sources = match fields.object.get("sourceEventSeqs") {
        None => None,
        Some(Value::Array(items)) => {
            let seqs: Option<Vec<u64>> = items.iter().map(|item| integer(item).ok()).collect();
            if seqs.is_none() {
                fields.issue("invalid_type", "sourceEventSeqs", "expected an array of non-negative integers");
            }
            seqs
        }
        Some(other) => {
            let message = format!("expected array, received {}", kind(other));
            fields.issue("invalid_type", "sourceEventSeqs", message);
            None
        }
    };
    if sources.is_some() && surface_op.is_none() && fields.issues.is_empty() {
        fields.issue("custom", "sourceEventSeqs", "sourceEventSeqs needs a surfaceOp");
    }
    let surface = surface_op.map(|op| SurfaceIntent { op, source_event_seqs: sources });
    let (Some(kind), Some(data)) = (event_type, data) else { return Err(fields.issues) };
    fields.finish(NewEvent { kind, data, surface })
}

/// A JSON number that is an integer in `[0, 2^53 - 1]`; `5.0` counts, `-0`, `1.5` and `1e300` do not.
fn integer(value: &Value) -> Result<u64, String> {
    let Value::Number(number) = value else {
        return Err(format!("expected integer, received {}", kind(value)));
    };
    if let Some(n) = number.as_u64() {
        return if n <= MAX_SAFE_INTEGER { Ok(n) } else { Err("must be at most 9007199254740991".to_owned()) };
    }
    if number.is_i64() {
        return Err("must be a non-negative integer".to_owned());
    }
    let float = number.as_f64().unwrap_or(f64::NAN);
    if float.fract() != 0.0 || !float.is_finite() {
        return Err("expected integer, received float".to_owned());
    }
    if float < 0.0 || float.is_sign_negative() {
        return Err("must be a non-negative integer".to_owned());
    }
    if float > MAX_SAFE_INTEGER as f64 {
        return Err("must be at most 9007199254740991".to_owned());
    }
    Ok(float as u64)
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

impl HistoryRequest {
    /// Validates a `session.history` payload. The whole payload is checked: the error holds every
    /// issue found, each with its path, for one `bad-request`.
    pub fn parse(payload: &Value) -> Result<HistoryRequest, Vec<Issue>> {
        let mut fields = Fields::of(payload)?;
        let session_id = fields.lookup_id("sessionId");
        let before_seq = fields.optional_integer("beforeSeq", 0);
        let max_messages = fields.optional_integer("maxMessages", 1);
        let request = HistoryRequest { session_id: session_id.unwrap_or_default(), before_seq, max_messages };
        fields.finish(request)
    }
}

impl GetRequest {
    /// Validates a `session.get` payload.
    pub fn parse(payload: &Value) -> Result<GetRequest, Vec<Issue>> {
        let mut fields = Fields::of(payload)?;
        let session_id = fields.lookup_id("sessionId");
        let request = GetRequest { session_id: session_id.unwrap_or_default() };
        fields.finish(request)
    }
}

impl CreateRequest {
    /// Validates a `session.create` payload. The whole payload is checked: the error holds every
    /// issue found, each with its path, for one `bad-request`.
    pub fn parse(payload: &Value) -> Result<CreateRequest, Vec<Issue>> {
        let mut fields = Fields::of(payload)?;
        let session_id = fields.optional_new_id("sessionId");
        let cwd = fields.optional_non_empty("cwd");
        let workspace_id = fields.optional_non_empty("workspaceId");
        let agent_preset = fields.optional_non_empty("agentPreset");
        fields.check_header_bound("cwd", HeaderField::Cwd, cwd.as_deref());
        fields.check_header_bound("agentPreset", HeaderField::AgentPreset, agent_preset.as_deref());
        if let Some(cwd) = &cwd
            && !session_core::is_absolute_path(cwd)
        {
            fields.issue("custom", "cwd", "must be an absolute path");
        }
        if cwd.is_some() && workspace_id.is_some() {
            fields.issues.push(Issue::new("custom", Vec::new(), "workspaceId and cwd are mutually exclusive"));
        }
        fields.finish(CreateRequest { session_id, cwd, workspace_id, agent_preset })
    }
}

impl ForkRequest {
    /// Validates a `session.fork` payload. The whole payload is checked: the error holds every
    /// issue found, each with its path, for one `bad-request`.
    pub fn parse(payload: &Value) -> Result<ForkRequest, Vec<Issue>> {
        let mut fields = Fields::of(payload)?;
        let session_id = fields.lookup_id("sessionId");
        let at_seq = fields.optional_integer("atSeq", 0);
        fields.finish(ForkRequest { session_id: session_id.unwrap_or_default(), at_seq })
    }
}

impl AppendRequest {
    /// Validates a `session.append` payload. The whole payload is checked: the error holds every
    /// issue found, each with its path, for one `bad-request`.
    pub fn parse(payload: &Value) -> Result<AppendRequest, Vec<Issue>> {
        let mut fields = Fields::of(payload)?;
        let session_id = fields.lookup_id("sessionId");
        let events = fields.new_events("events");
        let expected_seq = fields.optional_integer("expectedSeq", 0);
        let parent_session_id = fields.optional_lookup_id("parentSessionId");
        let durable = fields.optional_bool("durable").unwrap_or(false);
        let request = AppendRequest {
            session_id: session_id.unwrap_or_default(),
            events: events.unwrap_or_default(),
            expected_seq,
            parent_session_id,
            durable,
        };
        fields.finish(request)
    }
}

impl ReleaseRequest {
    /// Validates a `session.release` (and `session.flush`, which takes the same fields) payload. The whole payload is checked: the error holds every
    /// issue found, each with its path, for one `bad-request`.
    pub fn parse(payload: &Value) -> Result<ReleaseRequest, Vec<Issue>> {
        let mut fields = Fields::of(payload)?;
        let session_id = fields.lookup_id("sessionId");
        let parent_session_id = fields.optional_lookup_id("parentSessionId");
        fields.finish(ReleaseRequest { session_id: session_id.unwrap_or_default(), parent_session_id })
    }
}

impl SubagentListRequest {
    /// Validates a `subagent.list` payload. The whole payload is checked: the error holds every
    /// issue found, each with its path, for one `bad-request`.
    pub fn parse(payload: &Value) -> Result<SubagentListRequest, Vec<Issue>> {
        let mut fields = Fields::of(payload)?;
        let parent_session_id = fields.lookup_id("parentSessionId");
        fields.finish(SubagentListRequest { parent_session_id: parent_session_id.unwrap_or_default() })
    }
}

impl SubagentHistoryRequest {
    /// Validates a `subagent.history` payload. The whole payload is checked: the error holds every
    /// issue found, each with its path, for one `bad-request`.
    pub fn parse(payload: &Value) -> Result<SubagentHistoryRequest, Vec<Issue>> {
        let mut fields = Fields::of(payload)?;
        let parent_session_id = fields.lookup_id("parentSessionId");
        let child_session_id = fields.lookup_id("childSessionId");
        let mode = fields.mode("mode", None);
        let before_seq = fields.optional_integer("beforeSeq", 0);
        let max_messages = fields.optional_integer("maxMessages", 1);
        let request = SubagentHistoryRequest {
            parent_session_id: parent_session_id.unwrap_or_default(),
            child_session_id: child_session_id.unwrap_or_default(),
            mode: mode.unwrap_or(SubagentMode::OneShot),
            before_seq,
            max_messages,
        };
        fields.finish(request)
    }
}

impl SubagentSpawnRequest {
    /// Validates a `subagent.spawn` payload. The whole payload is checked: the error holds every
    /// issue found, each with its path, for one `bad-request`.
    pub fn parse(payload: &Value) -> Result<SubagentSpawnRequest, Vec<Issue>> {
        let mut fields = Fields::of(payload)?;
        let parent_session_id = fields.lookup_id("parentSessionId");
        let child_session_id = fields.optional_new_id("childSessionId");
        let mode = fields.mode("mode", None);
        let label = fields.optional_string("label");
        let provider = fields.optional_non_empty("provider");
        let fork = fields.optional_bool("fork").unwrap_or(false);
        if mode == Some(SubagentMode::Continuable) && label.is_none() && !fields.object.contains_key("label") {
            fields.issue("invalid_type", "label", "required for a continuable subagent");
        }
        let request = SubagentSpawnRequest {
            parent_session_id: parent_session_id.unwrap_or_default(),
            child_session_id,
            mode: mode.unwrap_or(SubagentMode::OneShot),
            label,
            provider,
            fork,
        };
        fields.finish(request)
    }
}
