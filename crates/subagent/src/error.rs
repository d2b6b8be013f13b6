//! The error families of this crate: listing and resume (`SubagentError`, with the reference's
//! stable codes), child creation (`CreateChildError`) and descriptor parsing (`DescriptorError`).
//! Messages are the reference's exact texts (reference 03 §5.2, §5.9, §6.2, §6.4).

use session_core::{SessionError, SessionId, StoreError};
use session_persistence::PersistenceError;

/// The stable code of a [`SubagentError`] (reference 03 §6.4), as the wire and tools see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SubagentErrorCode {
    /// `CANCELLED`: the caller cancelled a listing or a resume authorization.
    Cancelled,
    /// `SUBAGENT_CONTROL_PROJECTIONS_UNAVAILABLE`: a listing without a projection registry.
    ProjectionsUnavailable,
    /// `SUBAGENT_CONTROL_SESSION_STORE_UNAVAILABLE`: a listing without a session store.
    SessionStoreUnavailable,
    /// `PERSISTENCE_UNAVAILABLE`: a resume without session persistence.
    PersistenceUnavailable,
    /// `NOT_RESUMABLE`: the child cannot be read, or has no continuable descriptor of its own.
    NotResumable,
    /// `UNAUTHORIZED`: the caller is not the child's exact live parent.
    Unauthorized,
    /// `DUPLICATE_CHILD`: a child was to be created under an id that is already live.
    DuplicateChild,
}

impl SubagentErrorCode {
    /// The code as the wire and tools spell it (`NOT_RESUMABLE`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            SubagentErrorCode::Cancelled => "CANCELLED",
            SubagentErrorCode::ProjectionsUnavailable => "SUBAGENT_CONTROL_PROJECTIONS_UNAVAILABLE",
            SubagentErrorCode::SessionStoreUnavailable => "SUBAGENT_CONTROL_SESSION_STORE_UNAVAILABLE",
            SubagentErrorCode::PersistenceUnavailable => "PERSISTENCE_UNAVAILABLE",
            SubagentErrorCode::NotResumable => "NOT_RESUMABLE",
            SubagentErrorCode::Unauthorized => "UNAUTHORIZED",
            SubagentErrorCode::DuplicateChild => "DUPLICATE_CHILD",
        }
    }
}

impl std::fmt::Display for SubagentErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a listing or a resume authorization failed.
///
/// Every variant but [`SubagentError::Listing`] carries a stable [`SubagentErrorCode`]; `Listing`
/// is the persistence listing's own error, passed through unchanged (reference 03 §5.3 step 1).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SubagentError {
    /// The projection registry is not mounted: mode and label are the row's strong contract, so a
    /// missing fold is a configuration error even with zero children.
    #[error("listing subagents requires the sessionProjections registry (load @monotykamary/dsh-session-projection)")]
    ProjectionsUnavailable,
    /// The session store is not mounted.
    #[error("listing subagents requires the session store (load @monotykamary/dsh-session)")]
    SessionStoreUnavailable,
    /// The caller's cancellation token fired during a listing. Every observed abort becomes this;
    /// a backend's own cancellation error never escapes.
    #[error("subagent listing was cancelled")]
    ListingCancelled,
    /// The caller's cancellation token fired during a resume authorization.
    #[error("subagent resume was cancelled")]
    ResumeCancelled,
    /// `persistence.list` failed without a cancellation: the whole listing fails with the
    /// original error.
    #[error(transparent)]
    Listing(PersistenceError),
    /// A resume needs session persistence.
    #[error("continuable subagents require session persistence (load a dsh-session-persistence backend)")]
    PersistenceUnavailable,
    /// The child's stored log could not be read (unknown ids land here too).
    #[error("subagent \"{id}\" is unavailable")]
    Unavailable {
        /// The child that was to be resumed.
        id: SessionId,
        /// Why its log could not be read.
        #[source]
        source: PersistenceError,
    },
    /// The child's own suffix has no supported continuable descriptor: none, a foreign version,
    /// a one-shot, or a malformed current-version payload (the parse error is the source).
    #[error(
        "subagent \"{id}\" has no supported continuation state and cannot be resumed; do not retry send_message with this id"
    )]
    NoContinuationState {
        /// The child that was to be resumed.
        id: SessionId,
        /// The strict parse's error, for a malformed current-version descriptor.
        #[source]
        source: Option<DescriptorError>,
    },
    /// The caller is not the exact live parent session.
    #[error("subagent \"{id}\" delivery requires the exact live parent agent")]
    ParentNotLive {
        /// The child that was to be resumed.
        id: SessionId,
    },
    /// The child's durable direct parent is another session.
    #[error("subagent \"{id}\" belongs to another parent session")]
    ForeignParent {
        /// The child that was to be resumed.
        id: SessionId,
    },
}

impl SubagentError {
    /// The stable code, or `None` for a persistence listing failure passed through unchanged.
    pub fn code(&self) -> Option<SubagentErrorCode> {
        Some(match self {
            SubagentError::ProjectionsUnavailable => SubagentErrorCode::ProjectionsUnavailable,
            SubagentError::SessionStoreUnavailable => SubagentErrorCode::SessionStoreUnavailable,
            SubagentError::ListingCancelled | SubagentError::ResumeCancelled => SubagentErrorCode::Cancelled,
            SubagentError::Listing(_) => return None,
            SubagentError::PersistenceUnavailable => SubagentErrorCode::PersistenceUnavailable,
            SubagentError::Unavailable { .. } | SubagentError::NoContinuationState { .. } => {
                SubagentErrorCode::NotResumable
            }
            SubagentError::ParentNotLive { .. } | SubagentError::ForeignParent { .. } => {
                SubagentErrorCode::Unauthorized
            }
        })
    }

    /// The error's name as tools report it: `SubagentError` for coded errors, else the
    /// persistence error's family.
    pub fn name(&self) -> &'static str {
        match self {
            SubagentError::Listing(_) => "PersistenceError",
            _ => "SubagentError",
        }
    }

    /// Whether this is a listing's or a resume's cancellation ([`SubagentErrorCode::Cancelled`]).
    pub fn is_cancelled(&self) -> bool {
        self.code() == Some(SubagentErrorCode::Cancelled)
    }
}

/// A persisted descriptor payload that fails the strict parse (reference 03 §2.3). The message
/// always starts with `persisted subagent descriptor `.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct DescriptorError {
    /// The reference's text (`persisted subagent descriptor payload must be an object`, ...),
    /// which is also this error's message.
    pub message: String,
}

impl DescriptorError {
    pub(crate) fn new(message: impl Into<String>) -> DescriptorError {
        DescriptorError { message: message.into() }
    }
}

/// Why a child session could not be created (reference 03 §3.2, §3.5, §3.6).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CreateChildError {
    /// The requested `maxDepth` is above 2^53 - 1.
    #[error("subagent maxDepth must be a non-negative safe integer")]
    InvalidMaxDepth,
    /// The parent's runtime `subagentDepth` is above 2^53 - 1.
    #[error("agent subagentDepth must be a non-negative safe integer")]
    InvalidSubagentDepth,
    /// The child would be deeper than `maxDepth` allows.
    #[error("subagent depth {attempted_depth} exceeds maxDepth {max_depth}")]
    DepthExceeded {
        /// The depth the child would have had (its parent's depth plus one).
        attempted_depth: u64,
        /// The deepest delegation allowed.
        max_depth: u64,
    },
    /// The child's depth does not fit a safe integer.
    #[error("subagent depth overflows the safe integer range")]
    DepthOverflow,
    /// The parent is not a live session of the store the child is created in.
    #[error("subagent parent session \"{id}\" is not live")]
    ParentNotLive {
        /// The parent's id.
        id: SessionId,
    },
    /// The requested child id is already live.
    #[error("subagent \"{id}\" already exists")]
    DuplicateChild {
        /// The requested child id.
        id: SessionId,
    },
    /// The child could not be built (header or seed validation) or published.
    #[error(transparent)]
    Store(StoreError),
    /// The descriptor could not be appended.
    #[error(transparent)]
    Append(SessionError),
}

impl CreateChildError {
    /// The stable code, where the reference has one.
    pub fn code(&self) -> Option<SubagentErrorCode> {
        match self {
            CreateChildError::DuplicateChild { .. } => Some(SubagentErrorCode::DuplicateChild),
            _ => None,
        }
    }
}
