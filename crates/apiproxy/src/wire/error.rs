//! `RpcError`: the closed error union of the wire (reference 04 §11.1). Only the codes this gateway
//! produces have a variant, each with exactly the detail fields the reference's schema requires.
//! Every constructor of an error the handlers answer lives here, the `bad-request` rejections of
//! an event or a creation that is over a bound included, so no handler module builds another's.

use serde::{Serialize, Serializer, ser::SerializeMap};
use serde_json::{Map, Value, json};
use session_core::TooLarge;

/// Every code of the reference's closed error set (reference 04 §11.1). A client rejects an
/// envelope carrying any other code, so [`RpcError`] can only produce codes listed here.
pub const CLOSED_ERROR_CODES: [&str; 39] = [
    "bad-request",
    "cancelled",
    "session-not-found",
    "model-unavailable",
    "session-conflict",
    "invalid-time-zone",
    "workspace-attach-failed",
    "workspace-not-found",
    "workspace-invalid-path",
    "workspace-name-conflict",
    "workspace-move-invalid",
    "directory-unreadable",
    "directory-exists",
    "directory-create-failed",
    "directory-picker-unavailable",
    "agent-preset-read-only",
    "agent-preset-locked",
    "agent-preset-conflict",
    "agent-preset-not-found",
    "agent-preset-invalid",
    "agent-busy",
    "attachment-error",
    "queue-item-not-found",
    "steer-unavailable",
    "command-error",
    "unknown-command",
    "settings-rejected",
    "settings-conflict",
    "credential-rejected",
    "model-discovery-failed",
    "title-invalid",
    "fork-unavailable",
    "subagent-parent-unavailable",
    "subagent-not-found",
    "subagent-catalog-diagnostic",
    "subagent-not-resumable",
    "subagent-unauthorized",
    "subagent-delivery-unavailable",
    "internal",
];

/// One payload problem reported under `bad-request`: `{code, path, message}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Issue {
    /// A machine-readable issue code: `invalid_type`, `too_small`, `too_big`, `invalid_literal`,
    /// `invalid_enum_value` or `custom`.
    pub code: &'static str,
    /// Where in the request the problem is, from the payload's root (empty for the payload
    /// itself).
    pub path: Vec<PathSegment>,
    /// What is wrong, for people.
    pub message: String,
}

/// A step of an issue's path: an object key or an array index.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum PathSegment {
    /// An object key; serialized as a JSON string.
    Key(String),
    /// A 0-based array index; serialized as a JSON number.
    Index(usize),
}

impl From<&str> for PathSegment {
    fn from(key: &str) -> PathSegment {
        PathSegment::Key(key.to_owned())
    }
}

impl From<usize> for PathSegment {
    fn from(index: usize) -> PathSegment {
        PathSegment::Index(index)
    }
}

impl Issue {
    /// An issue at `path`.
    pub fn new(code: &'static str, path: Vec<PathSegment>, message: impl Into<String>) -> Issue {
        Issue { code, path, message: message.into() }
    }

    /// An issue at a top-level key of the payload.
    pub fn at(code: &'static str, key: &str, message: impl Into<String>) -> Issue {
        Issue::new(code, vec![PathSegment::from(key)], message)
    }

    /// The `too_big` issue at `path` for a header field or an event over its size bound; the
    /// message names the field or event, its size and the limit.
    pub fn too_large(too_large: &TooLarge, path: Vec<PathSegment>) -> Issue {
        Issue::new("too_big", path, too_large.to_string())
    }
}

/// The reason of a diagnostic catalog row (reference 04 §6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DiagnosticReason {
    /// A settled child without a usable identity (no descriptor, or a malformed one).
    Corrupt,
    /// A child whose descriptor is of a version this build does not read.
    Unsupported,
    /// A child whose stored log cannot be read.
    Unavailable,
}

impl DiagnosticReason {
    /// The reason as it appears on the wire: `corrupt`, `unsupported` or `unavailable`.
    pub fn as_str(self) -> &'static str {
        match self {
            DiagnosticReason::Corrupt => "corrupt",
            DiagnosticReason::Unsupported => "unsupported",
            DiagnosticReason::Unavailable => "unavailable",
        }
    }
}

/// The code-specific part of an [`RpcError`], with the reference's detail fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ErrorKind {
    /// `bad-request`: the envelope or payload is malformed, a value is over its size bound, or
    /// `session.append` rejected an event.
    BadRequest {
        /// Every problem found, each with its path.
        issues: Vec<Issue>,
    },
    /// `cancelled`: the request was cancelled (its client went away) during a read.
    Cancelled,
    /// `session-not-found`: unknown, cold without a cwd, or another owner's session (which
    /// answers exactly like an unknown one).
    SessionNotFound {
        /// The id the request named.
        session_id: String,
    },
    /// `session-conflict`: `session.create` with another cwd than the session's, or
    /// `subagent.spawn` with a taken child id.
    SessionConflict {
        /// The session that exists already.
        session_id: String,
        /// The cwd the request asked for.
        requested_cwd: String,
        /// The session's cwd, when it has one.
        existing_cwd: Option<String>,
    },
    /// `workspace-not-found`: `session.create` named a workspace (this gateway has none).
    WorkspaceNotFound {
        /// The workspace id the request named.
        workspace_id: String,
    },
    /// `agent-preset-conflict`: `session.create` with another agent preset than the session's.
    AgentPresetConflict {
        /// The session that exists already.
        session_id: String,
        /// The preset the request asked for.
        requested_preset: String,
        /// The session's preset, when it has one.
        existing_preset: Option<String>,
    },
    /// `agent-busy`: the subagent ownership fence, or `session.append` with a stale
    /// `expectedSeq`.
    AgentBusy {
        /// Why the agent cannot take the request.
        reason: String,
    },
    /// `fork-unavailable`: `session.fork` where no completed turn ends at or after the requested
    /// point (forks are cut at a `turn/end`).
    ForkUnavailable {
        /// The session asked to fork.
        session_id: String,
    },
    /// `subagent-parent-unavailable`: `subagent.spawn` under a parent that is not live (or not
    /// the caller's).
    SubagentParentUnavailable {
        /// The parent the request named.
        parent_session_id: String,
    },
    /// `subagent-not-found`: the child is not a direct child of the parent in the asked mode.
    SubagentNotFound {
        /// The parent the request named.
        parent_session_id: String,
        /// The child the request named.
        child_session_id: String,
    },
    /// `subagent-catalog-diagnostic`: the child's catalog row is a diagnostic, so its history is
    /// not served.
    SubagentCatalogDiagnostic {
        /// The parent the request named.
        parent_session_id: String,
        /// The child whose row is a diagnostic.
        child_session_id: String,
        /// The diagnostic's reason.
        reason: DiagnosticReason,
    },
    /// `subagent-unauthorized`: the child's parent changed while its history was read.
    SubagentUnauthorized {
        /// The child whose history was read.
        child_session_id: String,
    },
    /// `internal`: everything else. The message never carries backend error text; the cause
    /// is logged.
    Internal,
}

impl ErrorKind {
    /// The wire code, one of [`CLOSED_ERROR_CODES`].
    pub fn code(&self) -> &'static str {
        match self {
            ErrorKind::BadRequest { .. } => "bad-request",
            ErrorKind::Cancelled => "cancelled",
            ErrorKind::SessionNotFound { .. } => "session-not-found",
            ErrorKind::SessionConflict { .. } => "session-conflict",
            ErrorKind::WorkspaceNotFound { .. } => "workspace-not-found",
            ErrorKind::AgentPresetConflict { .. } => "agent-preset-conflict",
            ErrorKind::AgentBusy { .. } => "agent-busy",
            ErrorKind::ForkUnavailable { .. } => "fork-unavailable",
            ErrorKind::SubagentParentUnavailable { .. } => "subagent-parent-unavailable",
            ErrorKind::SubagentNotFound { .. } => "subagent-not-found",
            ErrorKind::SubagentCatalogDiagnostic { .. } => "subagent-catalog-diagnostic",
            ErrorKind::SubagentUnauthorized { .. } => "subagent-unauthorized",
            ErrorKind::Internal => "internal",
        }
    }

    /// The `details` object: exactly the reference's fields, optional ones omitted when absent.
    pub fn details(&self) -> Value {
        let mut details = Map::new();
        let mut put = |key: &str, value: Value| {
            details.insert(key.to_owned(), value);
        };
        match self {
            ErrorKind::BadRequest { issues } => put("issues", json!(issues)),
            ErrorKind::Cancelled | ErrorKind::Internal => {}
            ErrorKind::SessionNotFound { session_id } | ErrorKind::ForkUnavailable { session_id } => {
                put("sessionId", json!(session_id));
            }
            ErrorKind::SessionConflict { session_id, requested_cwd, existing_cwd } => {
                put("sessionId", json!(session_id));
                put("requestedCwd", json!(requested_cwd));
                if let Some(existing_cwd) = existing_cwd {
                    put("existingCwd", json!(existing_cwd));
                }
            }
            ErrorKind::WorkspaceNotFound { workspace_id } => put("workspaceId", json!(workspace_id)),
            ErrorKind::AgentPresetConflict { session_id, requested_preset, existing_preset } => {
                put("sessionId", json!(session_id));
                put("requestedPreset", json!(requested_preset));
                if let Some(existing_preset) = existing_preset {
                    put("existingPreset", json!(existing_preset));
                }
            }
            ErrorKind::AgentBusy { reason } => put("reason", json!(reason)),
            ErrorKind::SubagentParentUnavailable { parent_session_id } => {
                put("parentSessionId", json!(parent_session_id));
            }
            ErrorKind::SubagentNotFound { parent_session_id, child_session_id } => {
                put("parentSessionId", json!(parent_session_id));
                put("childSessionId", json!(child_session_id));
            }
            ErrorKind::SubagentCatalogDiagnostic { parent_session_id, child_session_id, reason } => {
                put("parentSessionId", json!(parent_session_id));
                put("childSessionId", json!(child_session_id));
                put("reason", json!(reason.as_str()));
            }
            ErrorKind::SubagentUnauthorized { child_session_id } => put("childSessionId", json!(child_session_id)),
        }
        Value::Object(details)
    }
}

/// A business error: `{code, message, details}` on the wire.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{} ({})", message, kind.code())]
pub struct RpcError {
    /// The code and its detail fields.
    pub kind: ErrorKind,
    /// The human-readable message, in the reference's wording where it has one.
    pub message: String,
}

impl RpcError {
    /// An error of `kind` with `message`.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> RpcError {
        RpcError { kind, message: message.into() }
    }

    /// The wire code, one of [`CLOSED_ERROR_CODES`].
    pub fn code(&self) -> &'static str {
        self.kind.code()
    }

    /// `bad-request` with its issues.
    pub fn bad_request(message: impl Into<String>, issues: Vec<Issue>) -> RpcError {
        RpcError::new(ErrorKind::BadRequest { issues }, message)
    }

    /// `internal`. `message` goes to the client: it must not carry backend error text.
    pub fn internal(message: impl Into<String>) -> RpcError {
        RpcError::new(ErrorKind::Internal, message)
    }

    /// `cancelled`.
    pub fn cancelled(message: impl Into<String>) -> RpcError {
        RpcError::new(ErrorKind::Cancelled, message)
    }

    /// `session "<id>" not found`, details `{sessionId}`.
    pub fn session_not_found(session_id: &str) -> RpcError {
        RpcError::new(
            ErrorKind::SessionNotFound { session_id: session_id.to_owned() },
            format!("session \"{session_id}\" not found"),
        )
    }

    /// `session "<id>" not found (not attached)`: the session exists nowhere live.
    pub fn session_not_attached(session_id: &str) -> RpcError {
        RpcError::new(
            ErrorKind::SessionNotFound { session_id: session_id.to_owned() },
            format!("session \"{session_id}\" not found (not attached)"),
        )
    }

    /// The subagent ownership fence (reference 04 §5.2).
    pub fn owned_by_subagent_routing(session_id: &str) -> RpcError {
        RpcError::new(
            ErrorKind::AgentBusy { reason: "use subagent delivery for this child session".to_owned() },
            format!("session \"{session_id}\" is owned by subagent routing"),
        )
    }

    /// `session "<child>" is not a <mode> direct child of "<parent>"`.
    pub fn subagent_not_found(parent: &str, child: &str, mode: &str) -> RpcError {
        RpcError::new(
            ErrorKind::SubagentNotFound { parent_session_id: parent.to_owned(), child_session_id: child.to_owned() },
            format!("session \"{child}\" is not a {mode} direct child of \"{parent}\""),
        )
    }
}

impl Serialize for RpcError {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(3))?;
        map.serialize_entry("code", self.code())?;
        map.serialize_entry("message", &self.message)?;
        map.serialize_entry("details", &self.kind.details())?;
        map.end()
    }
}

/// `bad-request` for the event at `idx`, saying how far the batch got.
pub(crate) fn rejected(idx: usize, last: Option<u64>, message: String) -> RpcError {
    let issue = Issue::new("custom", vec![PathSegment::from("events"), PathSegment::from(idx)], message.clone());
    rejected_with(idx, last, message, issue)
}

/// `bad-request` for the event at `idx` that is over the event size bound, with a `too_big`
/// issue at its `data`.
pub(crate) fn rejected_as_too_large(idx: usize, last: Option<u64>, too_large: &TooLarge) -> RpcError {
    let path = vec![PathSegment::from("events"), PathSegment::from(idx), PathSegment::from("data")];
    rejected_with(idx, last, too_large.to_string(), Issue::too_large(too_large, path))
}

fn rejected_with(idx: usize, last: Option<u64>, message: String, issue: Issue) -> RpcError {
    let committed =
        last.map_or_else(|| "none were appended".to_owned(), |last| format!("events through seq {last} were appended"));
    RpcError::bad_request(format!("event {idx} was rejected ({committed}): {message}"), vec![issue])
}

/// `bad-request` for a creation refused because something is over its size bound: nothing was
/// created, and the issue at `path` names the field or event, its size and the limit.
pub(crate) fn refused_as_too_large(method: &str, too_large: &TooLarge, path: Vec<PathSegment>) -> RpcError {
    RpcError::bad_request(format!("invalid payload for {method}: {too_large}"), vec![Issue::too_large(too_large, path)])
}
