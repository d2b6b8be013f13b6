//! The wire format: every JSON shape the gateway reads or writes (reference 04 §3, §6, §9–§11).
//!
//! This module is the only owner of the wire JSON. Handlers build the typed values below; the
//! HTTP and WebSocket layers serialize them. Optional fields are omitted when absent (never
//! `null`), nullable fields (projection values) are always present.

mod answer;
pub mod error;
pub mod payload;

use std::sync::Arc;

use serde::Serialize;
use serde_json::{Map, Value};
use session_core::{SessionEvent, SessionHeader};

pub use self::{
    answer::{Appended, Created, Flushed, Forked, HeaderFacts, HostDescription, Released, Spawned},
    error::{CLOSED_ERROR_CODES, DiagnosticReason, ErrorKind, Issue, PathSegment, RpcError},
};

/// The rpcId answered when a request's own rpcId cannot be read.
pub const INVALID_REQUEST_RPC_ID: &str = "invalid-request";

/// Every method this gateway serves, by wire name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Method {
    /// `host.describe`: the gateway's version, cwd and the caller's tier.
    HostDescribe,
    /// `session.list`: a row per live or stored session the caller sees.
    SessionList,
    /// `session.history`: one page of a session's events, paged by messages.
    SessionHistory,
    /// `session.get` (this gateway's own): one session's row and header facts, from its header.
    SessionGet,
    /// `session.create`: create a live session, or adopt or resume one by id.
    SessionCreate,
    /// `session.fork`: a new live session seeded with a prefix of another, cut at a `turn/end`.
    SessionFork,
    /// `session.append` (this gateway's own): append events to a live session.
    SessionAppend,
    /// `session.release` (this gateway's own): make a live session durable and detach it.
    SessionRelease,
    /// `session.flush` (this gateway's own): wait until a live session's events are durable.
    SessionFlush,
    /// `subagent.list`: the catalog of a parent's direct children.
    SubagentList,
    /// `subagent.history`: a page of a catalogued child's events.
    SubagentHistory,
    /// `subagent.spawn` (this gateway's own): create a live child of a live parent.
    SubagentSpawn,
}

impl Method {
    /// Every method, in the order `docs/wire.md` lists them.
    pub const ALL: [Method; 12] = [
        Method::HostDescribe,
        Method::SessionList,
        Method::SessionHistory,
        Method::SessionGet,
        Method::SessionCreate,
        Method::SessionFork,
        Method::SessionAppend,
        Method::SessionRelease,
        Method::SessionFlush,
        Method::SubagentList,
        Method::SubagentHistory,
        Method::SubagentSpawn,
    ];

    /// The wire name, as in `POST /api/<name>` and the envelope's `method`.
    pub fn as_str(self) -> &'static str {
        match self {
            Method::HostDescribe => "host.describe",
            Method::SessionList => "session.list",
            Method::SessionHistory => "session.history",
            Method::SessionGet => "session.get",
            Method::SessionCreate => "session.create",
            Method::SessionFork => "session.fork",
            Method::SessionAppend => "session.append",
            Method::SessionRelease => "session.release",
            Method::SessionFlush => "session.flush",
            Method::SubagentList => "subagent.list",
            Method::SubagentHistory => "subagent.history",
            Method::SubagentSpawn => "subagent.spawn",
        }
    }

    /// The method whose wire name is `name`; `None` for a method this gateway does not serve.
    pub fn from_name(name: &str) -> Option<Method> {
        Method::ALL.into_iter().find(|method| method.as_str() == name)
    }
}

/// A parsed `client-request` envelope.
#[derive(Debug, Clone, PartialEq)]
pub struct ClientRequest {
    /// The caller's id for the call, echoed in the `server-response`.
    pub rpc_id: String,
    /// The method name as sent (not yet checked against [`Method`]).
    pub method: String,
    /// The payload; `null` when the envelope has none.
    pub payload: Value,
}

/// Parses the `client-request` envelope (reference 04 §3): `{type, rpcId, method, payload}`.
/// On failure returns the rpcId to answer with (salvaged, or [`INVALID_REQUEST_RPC_ID`]) and the
/// issues.
pub fn parse_client_request(body: &Value) -> Result<ClientRequest, (String, Vec<Issue>)> {
    let salvaged = salvage_rpc_id(body);
    let Value::Object(object) = body else {
        return Err((salvaged, vec![Issue::new("invalid_type", Vec::new(), "expected object")]));
    };
    let mut issues = Vec::new();
    match object.get("type") {
        Some(Value::String(kind)) if kind == "client-request" => {}
        _ => issues.push(Issue::at("invalid_literal", "type", "expected \"client-request\"")),
    }
    let rpc_id = match object.get("rpcId") {
        Some(Value::String(rpc_id)) => Some(rpc_id.clone()),
        _ => {
            issues.push(Issue::at("invalid_type", "rpcId", "expected string"));
            None
        }
    };
    let method = match object.get("method") {
        Some(Value::String(method)) => Some(method.clone()),
        _ => {
            issues.push(Issue::at("invalid_type", "method", "expected string"));
            None
        }
    };
    match (rpc_id, method) {
        (Some(rpc_id), Some(method)) if issues.is_empty() => {
            Ok(ClientRequest { rpc_id, method, payload: object.get("payload").cloned().unwrap_or(Value::Null) })
        }
        _ => Err((salvaged, issues)),
    }
}

/// The rpcId of a body whose envelope may be malformed: its `rpcId` if that is a string, else
/// [`INVALID_REQUEST_RPC_ID`].
pub fn salvage_rpc_id(body: &Value) -> String {
    match body.get("rpcId") {
        Some(Value::String(rpc_id)) => rpc_id.clone(),
        _ => INVALID_REQUEST_RPC_ID.to_owned(),
    }
}

/// The `server-response` envelope: `{type, rpcId, result: {ok, value} | {ok, error}}`.
pub fn server_response(rpc_id: &str, result: &Result<Value, RpcError>) -> Value {
    let result = match result {
        Ok(value) => serde_json::json!({"ok": true, "value": value}),
        Err(error) => serde_json::json!({"ok": false, "error": error}),
    };
    serde_json::json!({"type": "server-response", "rpcId": rpc_id, "result": result})
}

/// [`server_response`] that takes the result by value and moves it into the envelope instead of
/// copying it (a history page is megabytes of JSON values).
pub(crate) fn into_server_response(rpc_id: &str, result: Result<Value, RpcError>) -> Value {
    let result = match result {
        Ok(value) => {
            let mut result = serde_json::Map::new();
            result.insert("ok".to_owned(), Value::Bool(true));
            result.insert("value".to_owned(), value);
            Value::Object(result)
        }
        Err(error) => serde_json::json!({"ok": false, "error": error}),
    };
    let mut envelope = serde_json::Map::new();
    envelope.insert("type".to_owned(), Value::from("server-response"));
    envelope.insert("rpcId".to_owned(), Value::from(rpc_id));
    envelope.insert("result".to_owned(), result);
    Value::Object(envelope)
}

/// The receipt of `POST /api/respond`: this gateway has no pending approvals or questions.
pub fn respond_receipt(body: &Value) -> Value {
    let well_formed = body.get("type").and_then(Value::as_str) == Some("client-response")
        && body.get("rpcId").is_some_and(Value::is_string)
        && body.get("result").and_then(|result| result.get("ok")).is_some_and(Value::is_boolean);
    let reason = if well_formed { "not-pending" } else { "bad-response" };
    serde_json::json!({"accepted": false, "reason": reason})
}

/// `{asOfSeq, values}`: the projection values of one cut (reference 04 §6).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ProjectionsBlock {
    /// The seq of the last event folded into `values`; -1 for a session with no event.
    pub as_of_seq: i64,
    /// Each served unit's client value by unit key (`null` is a value); a unit that failed on
    /// the log is left out.
    pub values: Map<String, Value>,
}

/// The value of `session.get`: the session's `session.list` row and its header's facts.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionDescription {
    /// The row `session.list` would show for the session.
    pub session: SessionSummary,
    /// The header's facts.
    pub header: HeaderFacts,
}

/// One `session.list` row (reference 04 §6).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionSummary {
    /// The session's id.
    pub session_id: String,
    /// Unix epoch milliseconds: the later of the header's `createdAt` and the last human
    /// `user/message`; rows are sorted by it, newest first.
    pub updated_at: i64,
    /// Whether the session is live and inside an open turn.
    pub running: bool,
    /// Whether the session has not started a turn yet (a cold row that cannot tell cheaply is
    /// listed as not blank).
    pub blank: bool,
    /// The header's `parentSession`: the session this one was forked or spawned from.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parent_session_id: Option<String>,
    /// `"subagent"` for a subagent child, absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub origin: Option<&'static str>,
    /// The header's `cwd`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    /// The header's `agentPreset`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agent_preset: Option<String>,
    /// The projection values: live ones, or a checkpoint's for a cold row; absent when a cold
    /// row has no usable checkpoint.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub projections: Option<ProjectionsBlock>,
    /// The session's direct subagent children the caller sees; absent when there are none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub subagents: Option<ChildCounts>,
}

/// How many direct subagent children a listed session has (`SessionSummary::subagents`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ChildCounts {
    /// Direct children with `origin: "subagent"` the caller sees.
    pub count: u64,
    /// How many of them are live and inside a turn.
    pub running: u64,
}

impl SessionSummary {
    /// A row from a header, with the header's facts filled in.
    pub fn from_header(header: &SessionHeader, updated_at: i64, running: bool, blank: bool) -> SessionSummary {
        SessionSummary {
            session_id: header.id.to_string(),
            updated_at,
            running,
            blank,
            parent_session_id: header.parent_session.as_ref().map(ToString::to_string),
            origin: header.is_subagent().then_some("subagent"),
            cwd: header.cwd.clone(),
            agent_preset: header.agent_preset.clone(),
            projections: None,
            subagents: None,
        }
    }
}

/// The value of `session.list` without a page request: every row the caller sees, newest first.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SessionList {
    /// The rows.
    pub items: Vec<SessionSummary>,
}

/// The value of a paged `session.list`: one page of rows and the cursor of the next.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionListPage {
    /// The rows of this page, newest first.
    pub items: Vec<SessionSummary>,
    /// Nullable: the cursor that asks for the next page, `null` on the last one.
    pub next_cursor: Option<String>,
}

/// `{event}`: a history entry. This gateway computes no tool views, so `view` is always omitted
/// and clients render their generic card.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HistoryEntry {
    /// The stored event envelope, as the log holds it.
    pub event: Arc<SessionEvent>,
}

/// The value of `session.history` and `subagent.history`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HistoryPage {
    /// A contiguous range of the log, in seq order, starting at a message boundary.
    pub events: Vec<HistoryEntry>,
    /// Whether older events exist (the page starts after seq 0); ask with `beforeSeq` = the
    /// first seq of this page.
    pub has_more: bool,
    /// Whether the page was cut by the byte budget (`docs/wire.md`, "History budget"), so it
    /// starts after its message boundary, possibly inside a message's group; absent when not.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub truncated: bool,
    /// The projection values at the page's end; only on the tail page (no `beforeSeq`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub projections: Option<ProjectionsBlock>,
}

/// One `subagent.list` row (reference 04 §6): a healthy child or a diagnostic.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum SubagentListEntry {
    /// `kind: "child"`: a child with a usable identity.
    #[serde(rename_all = "camelCase")]
    Child {
        /// The child session's id.
        id: String,
        /// `continuable` or `one-shot`, from its descriptor.
        mode: &'static str,
        /// The descriptor's label, when it has one.
        #[serde(skip_serializing_if = "Option::is_none")]
        label: Option<String>,
        /// `running` while the child is live and inside an open turn, else `inactive`.
        activity: &'static str,
        /// Whether the child has subagent children of its own.
        has_children: bool,
        /// Its active duration in milliseconds, from the `subagentTiming` projection: the settled
        /// time of its closed turns plus the part of an open turn seen so far. Omitted when the
        /// catalog's rung held no timing value.
        #[serde(skip_serializing_if = "Option::is_none")]
        active_ms: Option<u64>,
    },
    /// `kind: "diagnostic"`: a child the catalog cannot classify.
    Diagnostic {
        /// The child session's id.
        id: String,
        /// Why it cannot be classified.
        reason: DiagnosticReason,
    },
}

/// The value of `subagent.list`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SubagentCatalog {
    /// One row per direct child the caller sees, by `createdAt` then id.
    pub entries: Vec<SubagentListEntry>,
    /// Whether the parent is live.
    pub parent_available: bool,
}

/// A pushed frame: its type and its payload JSON (which carries the same `type`).
#[derive(Debug, Clone)]
pub struct Frame {
    /// The frame type, such as `session/event`; also the `method` of its `server-request`.
    pub kind: &'static str,
    /// The payload object's JSON text, serialized once and shared by every connection it is
    /// sent to. Only this module builds frames, and every text it builds is a JSON object.
    payload: Box<str>,
}

impl Frame {
    /// Builds a frame from the payload's fields (the `type` key is added first).
    pub fn new(kind: &'static str, fields: Value) -> Frame {
        let mut object = Map::new();
        object.insert("type".to_owned(), Value::String(kind.to_owned()));
        if let Value::Object(fields) = fields {
            object.extend(fields);
        }
        // Invariant: a `Value` always serializes, and what serde_json writes it parses back.
        let text = serde_json::to_string(&Value::Object(object)).expect("a JSON value serializes");
        Frame { kind, payload: text.into_boxed_str() }
    }

    /// `session/event {sessionId, event}`, written straight from the event's JSON
    /// ([`SessionEvent::write_json`]: its `data` as stored, byte for byte), without building a
    /// `Value` of the event; for the canonical JSON every writer stores, the same text as
    /// [`Frame::new`] gives.
    pub fn session_event(session_id: &str, event: &SessionEvent) -> Frame {
        const KIND: &str = "session/event";
        const HEAD: &[u8] = b"{\"type\":\"session/event\",\"sessionId\":";
        // The exact length when the id needs no escape (ids rarely do): the buffer never grows, and
        // the boxed text below keeps it without a copy.
        let quoted_id = session_id.len() + 2;
        let mut text = Vec::with_capacity(HEAD.len() + quoted_id + ",\"event\":".len() + event.encoded_len() + 1);
        text.extend_from_slice(HEAD);
        // Invariant: serializing a `str` into memory cannot fail.
        serde_json::to_writer(&mut text, session_id).expect("writing a string into memory cannot fail");
        text.extend_from_slice(b",\"event\":");
        event.write_json(&mut text);
        text.push(b'}');
        // Invariant: every piece above is JSON text, and `write_json` writes valid UTF-8 JSON.
        let text = String::from_utf8(text).expect("a frame's JSON is UTF-8");
        Frame { kind: KIND, payload: text.into_boxed_str() }
    }

    /// `session/subscribed {sessionId, lastSeq}`.
    pub fn session_subscribed(session_id: &str, last_seq: i64) -> Frame {
        Frame::new("session/subscribed", serde_json::json!({"sessionId": session_id, "lastSeq": last_seq}))
    }

    /// `session/projection {sessionId, key, value, seq}`; `value` is present even when `null`.
    pub fn session_projection(session_id: &str, key: &str, value: &Value, seq: u64) -> Frame {
        Frame::new(
            "session/projection",
            serde_json::json!({"sessionId": session_id, "key": key, "value": value, "seq": seq}),
        )
    }

    /// `host/session-added {sessionId, blank, parentSessionId?, origin?, cwd?, agentPreset?}`.
    pub fn host_session_added(header: &SessionHeader, blank: bool) -> Frame {
        let mut fields = Map::new();
        fields.insert("sessionId".to_owned(), Value::String(header.id.to_string()));
        fields.insert("blank".to_owned(), Value::Bool(blank));
        if let Some(parent) = &header.parent_session {
            fields.insert("parentSessionId".to_owned(), Value::String(parent.to_string()));
        }
        if header.is_subagent() {
            fields.insert("origin".to_owned(), Value::String("subagent".to_owned()));
        }
        if let Some(cwd) = &header.cwd {
            fields.insert("cwd".to_owned(), Value::String(cwd.clone()));
        }
        if let Some(preset) = &header.agent_preset {
            fields.insert("agentPreset".to_owned(), Value::String(preset.clone()));
        }
        Frame::new("host/session-added", Value::Object(fields))
    }

    /// `host/session-removed {sessionId}`.
    pub fn host_session_removed(session_id: &str) -> Frame {
        Frame::new("host/session-removed", serde_json::json!({"sessionId": session_id}))
    }

    /// `host/session-status {sessionId, running}`.
    pub fn host_session_status(session_id: &str, running: bool) -> Frame {
        Frame::new("host/session-status", serde_json::json!({"sessionId": session_id, "running": running}))
    }

    /// `stream/error {error}`: the last frame before the server closes a stream.
    pub fn stream_error(error: &RpcError) -> Frame {
        Frame::new("stream/error", serde_json::json!({"error": error}))
    }

    /// The payload object's JSON text.
    pub fn payload(&self) -> &str {
        &self.payload
    }

    /// The `server-request` envelope of this frame, with a fresh rpcId.
    pub fn envelope(&self) -> String {
        const HEAD: &str = "{\"type\":\"server-request\",\"rpcId\":\"";
        let mut rpc_id = uuid::Uuid::encode_buffer();
        let rpc_id = uuid::Uuid::new_v4().hyphenated().encode_lower(&mut rpc_id);
        // Written once into a string of its final size: a frame goes out to every client.
        let mut text = String::with_capacity(HEAD.len() + rpc_id.len() + self.kind.len() + self.payload.len() + 25);
        text.push_str(HEAD);
        text.push_str(rpc_id);
        text.push_str("\",\"method\":\"");
        text.push_str(self.kind);
        text.push_str("\",\"payload\":");
        text.push_str(&self.payload);
        text.push('}');
        text
    }
}

#[cfg(test)]
mod tests;

/// A wire value as JSON.
pub(crate) fn to_value<T: serde::Serialize>(value: &T) -> Value {
    // Invariant: wire types are plain data with string map keys, so they always serialize.
    serde_json::to_value(value).expect("wire values serialize")
}
