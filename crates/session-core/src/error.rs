//! The error families of this crate: session construction and append (`SessionError`), store
//! lifecycle (`StoreError`) and fork (`ForkError`). Messages are the reference's exact texts.

use std::fmt;

use crate::{EventType, HeaderError, LosslessError, SessionId, TooLarge};

/// What an observer or flush hook reports when it fails. Any error type converts into it.
pub type ObserverError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Why a session could not be built or an event could not be appended. A rejected append leaves
/// the log unchanged.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SessionError {
    /// Append step 1: the payload is outside the lossless JSON domain.
    #[error("session event \"{kind}\" carries non-JSON-serializable data")]
    NotSerializable {
        /// The type of the refused event.
        kind: EventType,
        /// What put the payload outside the domain (a `-0`, a number that overflows, bad text).
        #[source]
        source: LosslessError,
    },
    /// Append step 2: the storable check refused the event (retired vocabulary, an unknown type,
    /// a legacy or malformed shape, bad markers or receipts): a reader would refuse a log holding
    /// it. [`Unstorable::rule`] says which rule.
    ///
    /// [`Unstorable::rule`]: crate::Unstorable::rule
    #[error("{}", .0.message)]
    Unstorable(Box<crate::Unstorable>),
    /// Append step 4: an observer appended to the session whose append it is being told about.
    #[error("session append cannot reenter while another append is being published")]
    Reentrant,
    /// Append steps 6 and 8: a surface marker or transition rule (§2.3), or a reused
    /// file-mutation commit order. `message` is the reference's text.
    #[error("{message}")]
    InvalidEvent {
        /// The type of the refused event.
        kind: EventType,
        /// The seq the event would have had: the log's length at the time of the append.
        seq: u64,
        /// The reference's text, which is also this error's message.
        message: String,
    },
    /// A seed event failed a per-event check; `message` already names it
    /// (`seed user/message at index 2 lacks an identified message`).
    #[error("{message}")]
    InvalidSeed {
        /// The refused event's position in the seed (0-based).
        index: u64,
        /// The reference's text, which is also this error's message.
        message: String,
    },
    /// A seed event broke a surface rule.
    #[error("invalid seed event at index {index}: {message}")]
    SeedSurface {
        /// The refused event's position in the seed (0-based).
        index: u64,
        /// The surface rule's text (reference 01 §2.3).
        message: String,
    },
    /// A seed event's `seq` is not its position in the seed: a seed is a prefix of a log, so its
    /// seqs run 0, 1, 2, ... without a gap.
    #[error("seed event at index {index} has seq {seq} (expected {index}); seed must be contiguous from 0")]
    SeedNotContiguous {
        /// The event's position in the seed (0-based), which its `seq` must equal.
        index: u64,
        /// The `seq` the event carries.
        seq: u64,
    },
    /// The header failed [`SessionHeader::validate`]: a rule of reference 01 §1.2, or a string
    /// field over its size bound (then [`HeaderError::too_large`] is set).
    ///
    /// [`SessionHeader::validate`]: crate::SessionHeader::validate
    #[error(transparent)]
    Header(#[from] HeaderError),
    /// The event (or a seed event) encodes to more than [`MAX_EVENT_BYTES`]; checked after the
    /// event is stamped, before anything else is planned.
    ///
    /// [`MAX_EVENT_BYTES`]: crate::MAX_EVENT_BYTES
    #[error(transparent)]
    TooLarge(#[from] TooLarge),
}

impl SessionError {
    /// The size bound this error reports, from an event or from the header.
    pub fn too_large(&self) -> Option<&TooLarge> {
        match self {
            SessionError::TooLarge(too_large) => Some(too_large),
            SessionError::Header(header) => header.too_large.as_ref(),
            _ => None,
        }
    }
}

/// Why a store operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// `create`, `prepare` or `publish` named an id that another session already holds live in
    /// this store.
    #[error("session \"{id}\" already exists")]
    AlreadyExists {
        /// The id asked for.
        id: SessionId,
    },
    /// `flush` named an id that is not live in this store.
    #[error("session \"{id}\" is not live in this store")]
    NotLive {
        /// The id asked for.
        id: SessionId,
    },
    /// `publish` was called for a session that is already published (or is being published)
    /// in this store: `Created` is emitted exactly once.
    #[error("session \"{id}\" was already announced")]
    AlreadyAnnounced {
        /// The session's id.
        id: SessionId,
    },
    /// `publish` was called for a session that is live in another store; a session belongs to
    /// at most one store.
    #[error("session \"{id}\" is already attached to a store")]
    AlreadyAttached {
        /// The session's id.
        id: SessionId,
    },
    /// An observer failed on `Created`; the session was rolled back and is not live.
    #[error("session \"{id}\" creation was vetoed by an observer: {source}")]
    CreationVetoed {
        /// The id of the session that was rolled back.
        id: SessionId,
        /// The observer's error (or its panic, as text).
        #[source]
        source: ObserverError,
    },
    /// The first failing flush hook, in registration order, after every hook settled.
    #[error("flush of session \"{id}\" failed: {source}")]
    FlushFailed {
        /// The session that was being flushed.
        id: SessionId,
        /// The hook's error (or its panic, as text).
        #[source]
        source: ObserverError,
    },
    /// The session itself could not be built (header or seed validation).
    #[error(transparent)]
    Session(#[from] SessionError),
}

impl StoreError {
    /// The size bound this error reports, when the header or a seed event is over it.
    pub fn too_large(&self) -> Option<&TooLarge> {
        match self {
            StoreError::Session(error) => error.too_large(),
            _ => None,
        }
    }
}

/// The reason a fork was refused (reference 01 §2.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ForkErrorCode {
    /// The requested child id is already live in the store.
    SessionAlreadyExists,
    /// The source id is not live in the store.
    SessionNotFound,
    /// The source session object is not the store's live instance for its id
    /// ([`SessionStore::fork_session`] with a detached or replaced session).
    ///
    /// [`SessionStore::fork_session`]: crate::SessionStore::fork_session
    SessionNotLive,
    /// The boundary is negative, beyond a safe integer, or names no event of the source.
    InvalidBoundary,
    /// The prefix through the boundary ends inside a turn: its last turn bracket is a
    /// `turn/start`, so the child would inherit a turn it can never close.
    OpenTurn,
    /// The checks passed but the store refused the child (an observer vetoed its creation, or its
    /// seed failed validation). Not in the reference's set, which rethrows the raw error.
    CreateFailed,
}

impl ForkErrorCode {
    /// The reference's stable code in upper snake case (`SESSION_NOT_FOUND`, `OPEN_TURN`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            ForkErrorCode::SessionAlreadyExists => "SESSION_ALREADY_EXISTS",
            ForkErrorCode::SessionNotFound => "SESSION_NOT_FOUND",
            ForkErrorCode::SessionNotLive => "SESSION_NOT_LIVE",
            ForkErrorCode::InvalidBoundary => "INVALID_BOUNDARY",
            ForkErrorCode::OpenTurn => "OPEN_TURN",
            ForkErrorCode::CreateFailed => "CREATE_FAILED",
        }
    }
}

impl fmt::Display for ForkErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A refused fork: a stable code plus the reference's message.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct ForkError {
    /// Why the fork was refused; stable, for a caller to branch on.
    pub code: ForkErrorCode,
    /// The reference's text (`fork boundary 7 in session "s1" ends inside open turn 2`), which is
    /// also this error's message.
    pub message: String,
    /// The store's error when `code` is [`ForkErrorCode::CreateFailed`].
    #[source]
    pub source: Option<StoreError>,
}

impl ForkError {
    pub(crate) fn new(code: ForkErrorCode, message: impl Into<String>) -> ForkError {
        ForkError { code, message: message.into(), source: None }
    }
}

/// The message of a caught panic (`std::panic::catch_unwind`'s payload): its `&str` or `String`,
/// or `non-string panic payload` for any other value. Every layer that contains a panic (a store
/// observer, a projection unit, a change sink, a gateway handler) reports it with this.
pub fn panic_text(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(text) = payload.downcast_ref::<&str>() {
        (*text).to_owned()
    } else if let Some(text) = payload.downcast_ref::<String>() {
        text.clone()
    } else {
        "non-string panic payload".to_owned()
    }
}
