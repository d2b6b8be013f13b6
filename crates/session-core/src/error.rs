//! The error families of this crate: session construction and append (`SessionError`), store
//! lifecycle (`StoreError`) and fork (`ForkError`). Messages are the reference's exact texts.

use std::fmt;

use crate::{EventType, HeaderError, LosslessError, SessionId, TooLarge};

/// What an observer or flush hook reports when it fails. Any error type converts into it.
pub type ObserverError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Why a session could not be built or an event could not be appended. A rejected append leaves
/// the log unchanged.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SessionError {
    /// Append step 1: the payload is outside the lossless JSON domain.
    #[error("session event \"{kind}\" carries non-JSON-serializable data")]
    NotSerializable {
        kind: EventType,
        #[source]
        source: LosslessError,
    },
    /// Append step 2: retired legacy vocabulary or invalid file-mutation receipts. The message
    /// names the event (`session event "<type>" uses unsupported ...`).
    #[error("{message}")]
    Unsupported { kind: EventType, message: String },
    /// Append step 4: an observer appended to the session whose append it is being told about.
    #[error("session append cannot reenter while another append is being published")]
    Reentrant,
    /// Append steps 6 and 8: a surface marker or transition rule (§2.3), or a reused
    /// file-mutation commit order. `message` is the reference's text.
    #[error("{message}")]
    InvalidEvent { kind: EventType, seq: u64, message: String },
    /// A seed event failed a per-event check; `message` already names it
    /// (`seed user/message at index 2 lacks an identified message`).
    #[error("{message}")]
    InvalidSeed { index: u64, message: String },
    /// A seed event broke a surface rule.
    #[error("invalid seed event at index {index}: {message}")]
    SeedSurface { index: u64, message: String },
    #[error("seed event at index {index} has seq {seq} (expected {index}); seed must be contiguous from 0")]
    SeedNotContiguous { index: u64, seq: u64 },
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
pub enum StoreError {
    #[error("session \"{id}\" already exists")]
    AlreadyExists { id: SessionId },
    #[error("session \"{id}\" is not live in this store")]
    NotLive { id: SessionId },
    #[error("session \"{id}\" was already announced")]
    AlreadyAnnounced { id: SessionId },
    #[error("session \"{id}\" is already attached to a store")]
    AlreadyAttached { id: SessionId },
    /// An observer failed on `Created`; the session was rolled back and is not live.
    #[error("session \"{id}\" creation was vetoed by an observer: {source}")]
    CreationVetoed {
        id: SessionId,
        #[source]
        source: ObserverError,
    },
    /// The first failing flush hook, in registration order, after every hook settled.
    #[error("flush of session \"{id}\" failed: {source}")]
    FlushFailed {
        id: SessionId,
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
    SessionAlreadyExists,
    SessionNotFound,
    SessionNotLive,
    InvalidBoundary,
    OpenTurn,
    /// The checks passed but the store refused the child (an observer vetoed its creation, or its
    /// seed failed validation). Not in the reference's set, which rethrows the raw error.
    CreateFailed,
}

impl ForkErrorCode {
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
    pub code: ForkErrorCode,
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
