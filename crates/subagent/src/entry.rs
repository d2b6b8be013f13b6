//! The catalog's row types (reference 03 §5.1): `SubagentListEntry` with its `child` and
//! `diagnostic` arms, and the descendant form with `parentId` and `depth`. Serialized exactly as
//! the reference emits them: `kind` first, camelCase, `label` omitted (never `null`) for an
//! unlabelled one-shot child.

use serde::{Deserialize, Serialize};
use session_core::SessionId;

use crate::identity::ChildMode;

/// Where a listed child lives right now. It encodes neither outcome nor resumability.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Activity {
    /// Published in the live session store.
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
    pub id: SessionId,
    #[serde(flatten)]
    pub mode: ChildMode,
    pub activity: Activity,
    /// Some subagent-origin session names this child as its parent (header facts only, one level).
    pub has_children: bool,
}

/// A child that could not be shown with an identity. Never exposes descriptor content.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DiagnosticEntry {
    pub id: SessionId,
    pub reason: DiagnosticReason,
}

/// One row of `list_children`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum SubagentListEntry {
    Child(ChildEntry),
    Diagnostic(DiagnosticEntry),
}

impl SubagentListEntry {
    pub fn id(&self) -> &SessionId {
        match self {
            SubagentListEntry::Child(child) => &child.id,
            SubagentListEntry::Diagnostic(diagnostic) => &diagnostic.id,
        }
    }

    pub fn as_child(&self) -> Option<&ChildEntry> {
        match self {
            SubagentListEntry::Child(child) => Some(child),
            SubagentListEntry::Diagnostic(_) => None,
        }
    }

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
    #[serde(flatten)]
    pub entry: SubagentListEntry,
    pub parent_id: SessionId,
    pub depth: u64,
}
