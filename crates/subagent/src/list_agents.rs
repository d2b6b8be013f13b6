//! The `list_agents` model tool (reference 03 §7): its name, description, parameter and output
//! schemas, the projection of catalog rows to tool rows (one-shot children dropped, status from
//! the host's agent registry), and the model-facing text.

use std::{fmt, sync::Arc};

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use session_core::{Session, SessionId, SessionStore};
use tokio_util::sync::CancellationToken;

use crate::{
    entry::{DiagnosticReason, SubagentListEntry},
    error::SubagentError,
    identity::ChildMode,
    runtime::SubagentRuntime,
};

/// The tool's name as the model calls it.
pub const LIST_AGENTS_TOOL_NAME: &str = "list_agents";

/// The model-visible description, verbatim.
pub const LIST_AGENTS_DESCRIPTION: &str = "List your continuable background subagents by durable id and label. Use it to recall which ones you started, not to poll for completion — you are told when one finishes. Status comes from the live registry: running means the agent is working right now, idle means it is loaded but between turns (it may be waiting on agents it started), and ready means it exists only in storage — resumable, not terminal, and not a result waiting to be collected; a `send_message` starts a new turn on the same conversation, and a direct child remains a `send_message` candidate in every status. The snapshot is not a delivery promise — `send_message` performs the authoritative check and may still fail. Children that could not be read are reported as diagnostics instead of being silently dropped. Scope `descendants` walks the whole tree below you in stable pre-order, annotating each entry with its durable direct-parent session id and depth. You may use `send_message` only for depth-1 entries; deeper entries are candidates for `interrupt_agent` only.";

/// The message of the error raised when the tool runs without a calling agent.
pub const NO_CALLING_AGENT: &str = "list_agents requires a calling agent (exec.agent was undefined)";

/// The parameter schema: one optional `scope`, nothing required.
pub fn list_agents_parameters() -> Value {
    json!({
        "type": "object",
        "properties": {
            "scope": {
                "type": "string",
                "enum": ["children", "descendants"],
                "description": "children (default) lists direct children only; descendants walks the complete tree below you."
            }
        }
    })
}

/// The output schema (validated by the host's tool registry, not shown to the model), in the
/// harness's per-property `required: true` dialect.
pub fn list_agents_output_schema() -> Value {
    let position = |mut properties: Value| {
        properties["parent"] = json!({"type": "string"});
        properties["depth"] = json!({"type": "number"});
        properties
    };
    json!({
        "type": "array",
        "items": {
            "oneOf": [
                {
                    "type": "object",
                    "additionalProperties": false,
                    "properties": position(json!({
                        "kind": {"type": "string", "enum": ["child"], "required": true},
                        "id": {"type": "string", "required": true},
                        "label": {"type": "string", "required": true},
                        "status": {"type": "string", "enum": ["running", "idle", "ready"], "required": true}
                    }))
                },
                {
                    "type": "object",
                    "additionalProperties": false,
                    "properties": position(json!({
                        "kind": {"type": "string", "enum": ["diagnostic"], "required": true},
                        "id": {"type": "string", "required": true},
                        "reason": {"type": "string", "enum": ["corrupt", "unsupported", "unavailable"], "required": true}
                    }))
                }
            ]
        }
    })
}

/// Which part of the tree to list.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ListAgentsScope {
    /// Direct children only.
    #[default]
    Children,
    /// The whole tree below the caller, with positions.
    Descendants,
}

/// An agent's residency as the tool reports it. For a session standing in for an agent this is
/// the one definition of "running": live and inside an open turn ([`AgentStatus::of_session`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AgentStatus {
    /// Working right now.
    Running,
    /// Loaded, between turns.
    Idle,
    /// Only in storage.
    #[default]
    Ready,
}

impl AgentStatus {
    /// The wire and text value: `running`, `idle` or `ready`.
    pub fn as_str(self) -> &'static str {
        match self {
            AgentStatus::Running => "running",
            AgentStatus::Idle => "idle",
            AgentStatus::Ready => "ready",
        }
    }

    /// The status of the agent a session stands in for: not live (`None`) → `Ready`; live with an
    /// open turn → `Running`; live otherwise → `Idle`.
    pub fn of_session(live: Option<&Session>) -> AgentStatus {
        match live {
            None => AgentStatus::Ready,
            Some(session) if session.has_open_turn() => AgentStatus::Running,
            Some(_) => AgentStatus::Idle,
        }
    }
}

/// The host's live agent registry, as far as the tool needs it. The status comes from here, not
/// from the catalog row's `activity`.
pub trait AgentStatusSource: Send + Sync + fmt::Debug {
    /// `Ready` when no agent exists for `id`, `Running` when it is working, `Idle` otherwise.
    fn status(&self, id: &SessionId) -> AgentStatus;
}

/// The default status source: a live session stands in for a loaded agent. Not live → `ready`;
/// live with an open turn → `running`; live otherwise → `idle`.
#[derive(Debug, Clone)]
pub struct LiveSessionStatus {
    sessions: Option<Arc<SessionStore>>,
}

impl LiveSessionStatus {
    /// A status source over `sessions`; without a store every agent is `ready`.
    pub fn new(sessions: Option<Arc<SessionStore>>) -> LiveSessionStatus {
        LiveSessionStatus { sessions }
    }
}

impl AgentStatusSource for LiveSessionStatus {
    fn status(&self, id: &SessionId) -> AgentStatus {
        AgentStatus::of_session(self.sessions.as_ref().and_then(|sessions| sessions.get(id)).as_deref())
    }
}

/// A descendant row's place in the tree.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Position {
    /// The row's durable direct parent (its header's `parentSession`).
    pub parent: SessionId,
    /// The distance from the caller: 1 for a direct child.
    pub depth: u64,
}

/// One row of the tool's output.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum AgentRow {
    /// `"kind":"child"`: a continuable child (one-shot children are not listed by the tool).
    Child {
        /// The child's session id, which `send_message` takes.
        id: SessionId,
        /// The child's label from its descriptor.
        label: String,
        /// The child's residency, from the host's [`AgentStatusSource`].
        status: AgentStatus,
        /// Where the row sits in the tree; only in the `descendants` scope.
        #[serde(flatten, default, skip_serializing_if = "Option::is_none")]
        position: Option<Position>,
    },
    /// `"kind":"diagnostic"`: a child that could not be shown with an identity.
    Diagnostic {
        /// The child's session id.
        id: SessionId,
        /// Why it has no identity row.
        reason: DiagnosticReason,
        /// Where the row sits in the tree; only in the `descendants` scope.
        #[serde(flatten, default, skip_serializing_if = "Option::is_none")]
        position: Option<Position>,
    },
}

/// The model-facing text (reference 03 §7.4): `(no subagents)`, or one line per row,
/// `<id> [<status>] — <label>` or `<id> [diagnostic: <reason>]`, with ` parent=<p> depth=<n>`
/// after the bracket in the descendants scope.
pub fn render(rows: &[AgentRow]) -> String {
    if rows.is_empty() {
        return "(no subagents)".to_owned();
    }
    let position_text = |position: &Option<Position>| match position {
        Some(position) => format!(" parent={} depth={}", position.parent, position.depth),
        None => String::new(),
    };
    let lines: Vec<String> = rows
        .iter()
        .map(|row| match row {
            AgentRow::Child { id, label, status, position } => {
                format!("{id} [{}]{} — {label}", status.as_str(), position_text(position))
            }
            AgentRow::Diagnostic { id, reason, position } => {
                format!("{id} [diagnostic: {}]{}", reason.as_str(), position_text(position))
            }
        })
        .collect();
    lines.join("\n")
}

/// Why `list_agents` failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ListAgentsError {
    /// The tool was called without a calling agent's session ([`NO_CALLING_AGENT`]).
    #[error("list_agents requires a calling agent (exec.agent was undefined)")]
    NoCallingAgent,
    /// The arguments are neither `null` nor an object, or `scope` is not `children` or
    /// `descendants`.
    #[error("list_agents arguments are invalid: {message}")]
    InvalidArguments {
        /// Which rule the arguments break.
        message: String,
    },
    /// The listing failed (no registry or store, cancelled, or the persistence listing failed).
    #[error(transparent)]
    Subagent(#[from] SubagentError),
}

/// The structured error info of an errored result: `{name, code}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ToolErrorInfo {
    /// The error family: `Error`, `TypeError`, `SubagentError` or `PersistenceError`.
    pub name: String,
    /// The stable code (`CANCELLED`, ...), when the error has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
}

impl ListAgentsError {
    /// The `{name, code}` the host attaches to the errored tool result.
    pub fn info(&self) -> ToolErrorInfo {
        match self {
            ListAgentsError::NoCallingAgent => ToolErrorInfo { name: "Error".to_owned(), code: None },
            ListAgentsError::InvalidArguments { .. } => ToolErrorInfo { name: "TypeError".to_owned(), code: None },
            ListAgentsError::Subagent(error) => {
                ToolErrorInfo { name: error.name().to_owned(), code: error.code().map(|code| code.as_str().to_owned()) }
            }
        }
    }
}

/// A finished tool call: the text the model sees, and either the rows or the error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolOutcome {
    /// What the model reads: the [`render`]ed rows, or `Error: <message>`.
    pub text: String,
    /// Whether the call failed.
    pub is_error: bool,
    /// The structured rows of a successful call.
    pub rows: Option<Vec<AgentRow>>,
    /// The error info of a failed call.
    pub error: Option<ToolErrorInfo>,
}

/// The `list_agents` tool over a [`SubagentRuntime`] and the host's status source.
#[derive(Debug, Clone)]
pub struct ListAgentsTool {
    runtime: Arc<SubagentRuntime>,
    status: Arc<dyn AgentStatusSource>,
}

impl ListAgentsTool {
    /// The tool over `runtime`'s catalog, with statuses from `status`.
    pub fn new(runtime: Arc<SubagentRuntime>, status: Arc<dyn AgentStatusSource>) -> ListAgentsTool {
        ListAgentsTool { runtime, status }
    }

    /// The tool with the default status source over the runtime's session store.
    pub fn with_live_status(runtime: Arc<SubagentRuntime>) -> ListAgentsTool {
        let status = Arc::new(LiveSessionStatus::new(runtime.services().sessions.clone()));
        ListAgentsTool { runtime, status }
    }

    /// [`LIST_AGENTS_TOOL_NAME`].
    pub fn name(&self) -> &'static str {
        LIST_AGENTS_TOOL_NAME
    }

    /// [`LIST_AGENTS_DESCRIPTION`].
    pub fn description(&self) -> &'static str {
        LIST_AGENTS_DESCRIPTION
    }

    /// [`list_agents_parameters`].
    pub fn parameters(&self) -> Value {
        list_agents_parameters()
    }

    /// [`list_agents_output_schema`].
    pub fn output_schema(&self) -> Value {
        list_agents_output_schema()
    }

    /// Runs one call. `caller` is the calling agent's session; `arguments` the model's JSON
    /// arguments (`null` counts as `{}`); `cancel` the call's own token, forwarded to the listing.
    /// Errors become an errored outcome with text `Error: <message>`; diagnostics are not errors.
    pub async fn execute(
        &self,
        caller: Option<&SessionId>,
        arguments: &Value,
        cancel: &CancellationToken,
    ) -> ToolOutcome {
        match self.run(caller, arguments, cancel).await {
            Ok(rows) => ToolOutcome { text: render(&rows), is_error: false, rows: Some(rows), error: None },
            Err(error) => {
                ToolOutcome { text: format!("Error: {error}"), is_error: true, rows: None, error: Some(error.info()) }
            }
        }
    }

    /// The rows of one call.
    pub async fn run(
        &self,
        caller: Option<&SessionId>,
        arguments: &Value,
        cancel: &CancellationToken,
    ) -> Result<Vec<AgentRow>, ListAgentsError> {
        let caller = caller.ok_or(ListAgentsError::NoCallingAgent)?;
        let scope = parse_scope(arguments)?;
        Ok(match scope {
            ListAgentsScope::Children => {
                let entries = self.runtime.list_children(caller, cancel).await?;
                entries.iter().filter_map(|entry| self.row(entry, None)).collect()
            }
            ListAgentsScope::Descendants => {
                let entries = self.runtime.list_descendants(caller, cancel).await?;
                entries
                    .iter()
                    .filter_map(|entry| {
                        let position = Position { parent: entry.parent_id.clone(), depth: entry.depth };
                        self.row(&entry.entry, Some(position))
                    })
                    .collect()
            }
        })
    }

    /// A catalog row as a tool row; one-shot children are dropped (they cannot take
    /// `send_message`; the service still walks below them).
    fn row(&self, entry: &SubagentListEntry, position: Option<Position>) -> Option<AgentRow> {
        match entry {
            SubagentListEntry::Diagnostic(diagnostic) => {
                Some(AgentRow::Diagnostic { id: diagnostic.id.clone(), reason: diagnostic.reason, position })
            }
            SubagentListEntry::Child(child) => match &child.mode {
                ChildMode::OneShot { .. } => None,
                ChildMode::Continuable { label } => Some(AgentRow::Child {
                    id: child.id.clone(),
                    label: label.clone(),
                    status: self.status.status(&child.id),
                    position,
                }),
            },
        }
    }
}

fn parse_scope(arguments: &Value) -> Result<ListAgentsScope, ListAgentsError> {
    let invalid = |message: &str| ListAgentsError::InvalidArguments { message: message.to_owned() };
    match arguments {
        Value::Null => Ok(ListAgentsScope::Children),
        Value::Object(arguments) => match arguments.get("scope") {
            None | Some(Value::Null) => Ok(ListAgentsScope::Children),
            Some(Value::String(scope)) if scope == "children" => Ok(ListAgentsScope::Children),
            Some(Value::String(scope)) if scope == "descendants" => Ok(ListAgentsScope::Descendants),
            Some(_) => Err(invalid("scope must be \"children\" or \"descendants\"")),
        },
        _ => Err(invalid("arguments must be an object")),
    }
}
