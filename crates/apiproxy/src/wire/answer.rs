//! The values of the session and host methods (reference 04 §6): one type per answer, so the
//! handlers build typed values and this module alone says how each one reads on the wire (the
//! answers made of rows, `session.list`'s, live beside their rows in the `wire` module itself).
//! `Option` fields named "nullable" below are always present (`null` when none); the others are
//! omitted when absent.

use serde::{Serialize, Serializer, ser::SerializeStruct};

/// The value of `host.describe`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HostDescription {
    /// The gateway's version (`ProxyConfig::version`).
    pub version: String,
    /// The default working directory of new sessions.
    pub cwd: String,
    /// How many live sessions the caller sees.
    pub attached_sessions: usize,
    /// The gateway process's home directory (`$HOME`, else `/`).
    pub home: String,
    /// Whether the host can open a path for the client; never, for this gateway.
    pub can_open_path: bool,
    /// Whether the caller is on the operator tier (no owner).
    pub operator_eligible: bool,
    /// Whether the gateway follows the sessions other writers of its store write
    /// (`docs/wire.md`, "Across gateways").
    pub follows_store: bool,
}

/// The value of `session.create`: the session's id, and its `agentPreset` when it has one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Created {
    /// The created (or adopted) session's id.
    pub session_id: String,
    /// The session header's `agentPreset`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agent_preset: Option<String>,
}

/// The value of `session.fork`: the new session's id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Forked {
    /// The fork's minted id.
    pub session_id: String,
}

/// The value of `session.append`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Appended {
    /// Nullable: the seq of the first event appended, `null` for an empty batch.
    pub first_seq: Option<u64>,
    /// Nullable: the seq of the last event appended, `null` for an empty batch.
    pub last_seq: Option<u64>,
    /// Nullable: the durable watermark (the last seq written and fsynced), `null` when nothing
    /// is durable or the gateway keeps no sessions on disk.
    pub durable_seq: Option<u64>,
}

/// The value of `session.flush`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Flushed {
    /// Nullable: the durable watermark once everything appended before the flush is durable,
    /// `null` for a session with no event.
    pub durable_seq: Option<u64>,
}

/// The value of `session.release`: `{released: true, lastSeq}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Released {
    /// The seq of the session's last event when it was let go, -1 for one with no event.
    pub last_seq: i64,
}

impl Serialize for Released {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut value = serializer.serialize_struct("Released", 2)?;
        // A release that did not happen is an error, never `released: false`.
        value.serialize_field("released", &true)?;
        value.serialize_field("lastSeq", &self.last_seq)?;
        value.end()
    }
}

/// The value of `subagent.spawn`: the child's id and mode.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Spawned {
    /// The child session's id.
    pub child_session_id: String,
    /// `continuable` or `one-shot`, as requested.
    pub mode: &'static str,
}

/// A session header's facts, as `session.get` shows them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HeaderFacts {
    /// Unix epoch milliseconds of the session's creation.
    pub created_at: u64,
    /// The working directory.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    /// The agent preset.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agent_preset: Option<String>,
    /// The session this one was forked or spawned from.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parent_session_id: Option<String>,
    /// `"subagent"` for a subagent child.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub origin: Option<&'static str>,
    /// How many subagent levels lie above the session (0 for a top-level session).
    pub delegation_depth: u64,
    /// The length of the seed prefix a fork or a continuable child was created with.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seed_length: Option<u64>,
    /// The owner the session is partitioned to.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
}

impl From<&session_core::SessionHeader> for HeaderFacts {
    fn from(header: &session_core::SessionHeader) -> HeaderFacts {
        HeaderFacts {
            created_at: header.created_at,
            cwd: header.cwd.clone(),
            agent_preset: header.agent_preset.clone(),
            parent_session_id: header.parent_session.as_ref().map(ToString::to_string),
            origin: header.is_subagent().then_some("subagent"),
            delegation_depth: header.delegation_depth,
            seed_length: header.seed_length,
            owner: header.owner.clone(),
        }
    }
}
