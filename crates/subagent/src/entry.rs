//! The catalog's row types (reference 03 §5.1): `SubagentListEntry` with its `child` and
//! `diagnostic` arms, and the descendant form with `parentId` and `depth`. Serialized exactly as
//! the reference emits them: `kind` first, camelCase, `label` omitted (never `null`) for an
//! unlabelled one-shot child.

use serde::{Deserialize, Serialize};
use session_core::SessionId;

use crate::{identity::ChildMode, list_agents::AgentStatus, timing::TimingView};

/// Where a listed child lives right now. It encodes neither outcome nor resumability.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Activity {
    /// Published in the live session store (the reference's word for residency; whether the
    /// child is working is [`ChildEntry::status`]).
    Running,
    /// Only in persistence.
    Inactive,
}

/// Why a child is shown as a diagnostic instead of a row with mode and label.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DiagnosticReason {
    /// Settled without a usable identity (missing, malformed or foreign-version descriptor), a
    /// registered unit failing on the child's log, or another lifecycle under the same id.
    Corrupt,
    /// Kept in the wire enum; never produced.
    Unsupported,
    /// The cold read failed; the next listing retries it.
    Unavailable,
}

impl DiagnosticReason {
    /// The wire value: `corrupt`, `unsupported` or `unavailable`.
    pub fn as_str(self) -> &'static str {
        match self {
            DiagnosticReason::Corrupt => "corrupt",
            DiagnosticReason::Unsupported => "unsupported",
            DiagnosticReason::Unavailable => "unavailable",
        }
    }
}

/// A child whose identity was computed. Serializes as `{kind, id, mode, label?, activity,
/// hasChildren}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ChildEntry {
    /// The child's session id.
    pub id: SessionId,
    /// The child's mode and label, folded from its own descriptor (flattened into the row as
    /// `mode` and `label`).
    #[serde(flatten)]
    pub mode: ChildMode,
    /// Whether the child is live or only stored.
    pub activity: Activity,
    /// The agent status of the child when it was listed, taken from the live session the listing
    /// resolved it from (`Ready` for a stored child): `Running` iff it was live inside an open
    /// turn. Not part of the row's JSON; a host's wire may show it instead of `activity`.
    #[serde(skip)]
    pub status: AgentStatus,
    /// Some subagent-origin session names this child as its parent (header facts only, one level).
    pub has_children: bool,
    /// The child's `subagentTiming` value, read on the same rung as its identity (the live
    /// cells, the checkpoint's snapshot or the cold fold), so it costs no read of its own;
    /// `None` when that rung holds no usable timing value. Not part of the row's JSON; a host's
    /// wire may show it (the gateway's `activeMs`).
    #[serde(skip)]
    pub timing: Option<TimingView>,
}

/// A child that could not be shown with an identity. Never exposes descriptor content.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DiagnosticEntry {
    /// The child's session id.
    pub id: SessionId,
    /// Why the child has no identity row.
    pub reason: DiagnosticReason,
}

/// One row of `list_children`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum SubagentListEntry {
    /// `"kind":"child"`: a child with its mode, label and activity.
    Child(ChildEntry),
    /// `"kind":"diagnostic"`: a child shown only by id and reason.
    Diagnostic(DiagnosticEntry),
}

impl SubagentListEntry {
    /// The child's session id, from either arm.
    pub fn id(&self) -> &SessionId {
        match self {
            SubagentListEntry::Child(child) => &child.id,
            SubagentListEntry::Diagnostic(diagnostic) => &diagnostic.id,
        }
    }

    /// The child row, if this is one.
    pub fn as_child(&self) -> Option<&ChildEntry> {
        match self {
            SubagentListEntry::Child(child) => Some(child),
            SubagentListEntry::Diagnostic(_) => None,
        }
    }

    /// The diagnostic row, if this is one.
    pub fn as_diagnostic(&self) -> Option<&DiagnosticEntry> {
        match self {
            SubagentListEntry::Child(_) => None,
            SubagentListEntry::Diagnostic(diagnostic) => Some(diagnostic),
        }
    }

    pub(crate) fn diagnostic(id: &SessionId, reason: DiagnosticReason) -> SubagentListEntry {
        SubagentListEntry::Diagnostic(DiagnosticEntry { id: id.clone(), reason })
    }
}

/// One row of `list_descendants`: an entry plus its durable direct parent (from the enumerated
/// header; it may be an ordinary session that is not itself listed) and its distance from the
/// root (direct children are at depth 1).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SubagentDescendantListEntry {
    /// The row, exactly as [`list_children`](crate::SubagentRuntime::list_children) of its
    /// parent would show it (flattened into the descendant row).
    #[serde(flatten)]
    pub entry: SubagentListEntry,
    /// The child's `parentSession` as its header records it.
    pub parent_id: SessionId,
    /// The distance from the listing's root: 1 for a direct child, 2 for a grandchild, ...
    pub depth: u64,
}
