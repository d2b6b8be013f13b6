//! `PersistenceError`: every way a persistence operation can fail.

use std::{fmt, io, path::PathBuf};

use session_core::{HeaderError, SessionId, TooLarge};

/// Where a corruption or refusal was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location {
    /// A file, with the 1-based line and/or the byte offset of the defect when known.
    File {
        /// The file (for a SQLite store, the database file).
        path: PathBuf,
        /// The 1-based line of the defect.
        line: Option<u64>,
        /// The byte offset of the defect: in the decoded log text for a damaged record, in the
        /// file itself for a damaged zstd frame.
        byte: Option<u64>,
    },
    /// A session held by a backend without files.
    Session {
        /// The session whose log holds the defect.
        id: SessionId,
    },
}

impl Location {
    /// A whole file, with no line or byte.
    pub fn file(path: impl Into<PathBuf>) -> Location {
        Location::File { path: path.into(), line: None, byte: None }
    }

    /// Line `line` (1-based) of a file.
    pub fn at_line(path: impl Into<PathBuf>, line: u64) -> Location {
        Location::File { path: path.into(), line: Some(line), byte: None }
    }

    /// Byte offset `byte` of a file.
    pub fn at_byte(path: impl Into<PathBuf>, byte: u64) -> Location {
        Location::File { path: path.into(), line: None, byte: Some(byte) }
    }
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Location::File { path, line, byte } => {
                write!(f, "{}", path.display())?;
                if let Some(line) = line {
                    write!(f, " line {line}")?;
                }
                if let Some(byte) = byte {
                    write!(f, " byte {byte}")?;
                }
                Ok(())
            }
            Location::Session { id } => write!(f, "session {id:?}"),
        }
    }
}

/// What kind of damage a `Corrupt` error reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CorruptKind {
    /// The header line or header frame is missing, unparsable or invalid.
    Header,
    /// A committed record does not parse (bad JSON, malformed packed row, bad envelope).
    Record,
    /// Seqs are not contiguous inside the committed region.
    SeqGap,
    /// A complete zstd frame fails structural or checksum validation.
    Frame,
    /// A complete zstd frame ends inside a record.
    TornRecordInFrame,
    /// The header names a different session or path than the one it was found under.
    Identity,
    /// The decoded events fail session validation (markers, surface, message shape).
    Validation,
}

/// The one error type of this crate. Messages keep the reference's wording where it has one.
#[derive(Debug, thiserror::Error)]
pub enum PersistenceError {
    /// No log is stored under `id` (and, for the live path, no session of that id is tracked).
    #[error("session \"{id}\" not found")]
    NotFound {
        /// The id that was asked for.
        id: SessionId,
    },
    /// Committed bytes are damaged; `message` says how.
    #[error("{message} ({location})")]
    Corrupt {
        /// What kind of damage, for callers that treat kinds differently.
        kind: CorruptKind,
        /// Where the damage was found.
        location: Location,
        /// What is wrong, in the reference's wording where it has one.
        message: String,
    },
    /// An intact log that this build cannot read: another format version, an unknown
    /// non-ignorable event type, or retired vocabulary no import exists for
    /// (`request/header-delta`, `mode/set`). The reference's other earlier shapes are imported on
    /// read; a malformed one is `Corrupt`.
    #[error("{message}")]
    FormatUnsupported {
        /// The session whose log cannot be read.
        id: SessionId,
        /// What this build does not support, naming the version or type found.
        message: String,
        /// Where the unsupported record is, when a reader got that far.
        location: Option<Location>,
    },
    /// The operation's cancellation token fired; a cancelled append or repair wrote nothing.
    #[error("operation cancelled")]
    Cancelled,
    /// The operating system refused a read, write, sync or open.
    #[error("I/O error on {path}: {source}", path = path.display())]
    Io {
        /// The file or directory the failed call was on.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: io::Error,
    },
    /// The caller passed something this operation cannot accept.
    #[error("{message}")]
    InvalidInput {
        /// What was refused, in the reference's wording where it has one.
        message: String,
    },
    /// Creating or binding a session would clash with another lifetime of the same id.
    #[error("{message}")]
    Conflict {
        /// The id both lifetimes claim.
        id: SessionId,
        /// What clashes (an existing log, another live session, a different header).
        message: String,
    },
    /// Another process holds the store's write lock (for JSONL, the lock on the root directory;
    /// for SQLite, the database's lock past the busy timeout).
    #[error("session store {path} is locked by another process", path = path.display())]
    Locked {
        /// The store root or database file that is locked.
        path: PathBuf,
    },
    /// A repair was refused because a live writer holds the session's writer lease: its open
    /// turn may be in progress. Nothing was written.
    #[error("session \"{id}\" is held live by a writer ({holder}); it is not repaired while that writer holds it")]
    Held {
        /// The session that is held.
        id: SessionId,
        /// Who holds it, as the holder named itself (host and pid), or what is known of it.
        holder: String,
    },
    /// A failed write could not be rolled back; the writer refuses further appends.
    #[error("{message}")]
    Poisoned {
        /// The failure that poisoned the writer.
        message: String,
    },
    /// The store as a whole cannot be used as it is: a database whose identity, schema or
    /// settings are not its format's, or a path whose type, owner or mode its rules refuse.
    /// `message` says which rule failed and, where it can, how to fix it.
    #[error("{message}")]
    Refused {
        /// The store, database or directory that was refused.
        path: PathBuf,
        /// The rule that failed and, where it can, how to fix it.
        message: String,
    },
    /// A header field or an event is over its size bound ([`session_core::TooLarge`] names the
    /// field or event, its size and the limit). Refused before anything is stored: a reader
    /// could not read it back.
    #[error(transparent)]
    TooLarge(#[from] TooLarge),
}

impl PersistenceError {
    /// An `Io` error on `path`.
    pub fn io(path: impl Into<PathBuf>, source: io::Error) -> PersistenceError {
        PersistenceError::Io { path: path.into(), source }
    }

    /// A `Corrupt` error of `kind` at `location`.
    pub fn corrupt(kind: CorruptKind, location: Location, message: impl Into<String>) -> PersistenceError {
        PersistenceError::Corrupt { kind, location, message: message.into() }
    }

    /// An `InvalidInput` error with `message`.
    pub fn invalid_input(message: impl Into<String>) -> PersistenceError {
        PersistenceError::InvalidInput { message: message.into() }
    }

    /// A header refused by [`SessionHeader::validate`](session_core::SessionHeader::validate):
    /// [`PersistenceError::TooLarge`] for a field over its bound, else `InvalidInput` with the
    /// reference's message.
    pub fn invalid_header(error: HeaderError) -> PersistenceError {
        match error.too_large {
            Some(too_large) => PersistenceError::TooLarge(too_large),
            None => PersistenceError::invalid_input(error.message),
        }
    }

    /// Whether this is `NotFound`.
    pub fn is_not_found(&self) -> bool {
        matches!(self, PersistenceError::NotFound { .. })
    }
}

/// The result of a persistence operation.
pub type Result<T, E = PersistenceError> = std::result::Result<T, E>;
