//! `PersistenceError`: every way a persistence operation can fail.

use std::{fmt, io, path::PathBuf};

use session_core::{HeaderError, SessionId, TooLarge, Unstorable};

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

/// Which write met the writer fence ([`PersistenceError::Fenced`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FencedWrite {
    /// An append (a batch, or the first batch that creates the log).
    Append,
    /// A repair's closers.
    Repair,
    /// A repair's cut of a torn tail that is no longer where it was read.
    TornTail,
}

fn fence_message(id: &SessionId, write: FencedWrite, seq: u64, stored_next_seq: u64) -> String {
    match write {
        FencedWrite::Append => format!("session {id} append starts at seq {seq}, stored next seq is {stored_next_seq}"),
        FencedWrite::Repair => {
            format!("session {id} repair is stale: closer starts at seq {seq}, stored next seq is {stored_next_seq}")
        }
        FencedWrite::TornTail => format!("session {id} repair is stale: physical tail no longer starts at seq {seq}"),
    }
}

/// What kind of failure a [`PersistenceError::Database`] reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DatabaseFault {
    /// The connection was lost, refused or could not be made (including TLS).
    Connection,
    /// A query or getting a connection took longer than its bound.
    Timeout,
    /// The server refused the statement (its SQLSTATE leads the message).
    Server,
    /// Anything else the driver reports, such as a setting it refuses.
    Other,
}

/// The one error type of this crate. Messages keep the reference's wording where it has one.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
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
    /// The writer fence: another writer moved the stored log of `id` past this copy (another
    /// process or host appended to it, created it meanwhile, or repaired it), so this copy's write
    /// would not extend it. Nothing was stored. No retry heals it: the copy must be loaded (or
    /// released and resumed) from the store again. Every backend builds it with
    /// [`PersistenceError::fenced`]; the message is the reference's.
    #[error("{}", fence_message(id, *write, *seq, *stored_next_seq))]
    Fenced {
        /// The session both writers write.
        id: SessionId,
        /// Which write met the fence.
        write: FencedWrite,
        /// The seq this copy's write started at (where it believed the log ends; for
        /// [`FencedWrite::TornTail`], where it believed the torn tail starts).
        seq: u64,
        /// The seq the stored log's next event must have: where the log really ends.
        stored_next_seq: u64,
    },
    /// The id is taken by another lifetime or writer that this process can see: a create of an
    /// id that is stored or tracked already, a live session whose cwd or log differs from the
    /// log of its id this coordinator tracks, another live session bound to the id, or a cold
    /// append or load that the id's live session forbids. Nothing was stored.
    #[error("{message}")]
    Collision {
        /// The id both claim.
        id: SessionId,
        /// What clashes (an existing log, another live session, a different header).
        message: String,
    },
    /// The store contradicts itself: a log without its metadata row, an id stored twice, event
    /// rows past the stored end, a tail that changed under the only writer. An operator's
    /// `verify` reports it; nothing was stored.
    #[error("{message}")]
    Inconsistent {
        /// The session whose stored state is inconsistent.
        id: SessionId,
        /// What contradicts what.
        message: String,
    },
    /// A database driver or server failed an operation (for PostgreSQL: a lost or refused
    /// connection, a query past its timeout, a server error). The write, if any, is in doubt
    /// only as a transaction is: it committed whole or not at all.
    #[error("database {database}: {message}")]
    Database {
        /// The database as messages show it (a URL never carries its password here).
        database: String,
        /// What kind of failure, for callers that retry some and not others.
        kind: DatabaseFault,
        /// The driver's or server's message, with its causes.
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
    /// An event of an append is one a reader would refuse (the storable check,
    /// [`session_core::check_storable`]: retired vocabulary, an unknown type, a legacy or
    /// malformed shape, bad markers or receipts). Nothing of the batch was stored.
    #[error("cannot append to session \"{id}\": batch event {index}: {source}")]
    Unstorable {
        /// The session appended to.
        id: SessionId,
        /// The refused event's index in the batch.
        index: usize,
        /// The event, the rule it breaks and why.
        #[source]
        source: Box<Unstorable>,
    },
    /// A header field or an event is over its size bound ([`session_core::TooLarge`] names the
    /// field or event, its size and the limit). Refused before anything is stored: a reader
    /// could not read it back.
    #[error(transparent)]
    TooLarge(#[from] TooLarge),
}

/// A backend call the runtime dropped at shutdown is the caller's cancellation, not a bug.
impl From<session_storage_io::keyed::BlockingCancelled> for PersistenceError {
    fn from(_: session_storage_io::keyed::BlockingCancelled) -> PersistenceError {
        PersistenceError::Cancelled
    }
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

    /// The refusal of the event at `index` of a batch appended to `id` by the storable check:
    /// [`PersistenceError::TooLarge`] for one over the size bound, else
    /// [`PersistenceError::Unstorable`].
    pub fn unstorable(id: &SessionId, index: usize, refused: Unstorable) -> PersistenceError {
        match refused.too_large {
            Some(too_large) => PersistenceError::TooLarge(too_large),
            None => PersistenceError::Unstorable { id: id.clone(), index, source: Box::new(refused) },
        }
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

    /// The writer fence ([`PersistenceError::Fenced`]): `write` of `id`, starting at `seq`, meets
    /// a stored log whose next seq is `stored_next_seq`. The one constructor every backend and
    /// the coordinator use, so the fence reads the same whatever the store.
    pub fn fenced(id: &SessionId, write: FencedWrite, seq: u64, stored_next_seq: u64) -> PersistenceError {
        PersistenceError::Fenced { id: id.clone(), write, seq, stored_next_seq }
    }

    /// An id collision ([`PersistenceError::Collision`]) of `id`.
    pub fn collision(id: &SessionId, message: impl Into<String>) -> PersistenceError {
        PersistenceError::Collision { id: id.clone(), message: message.into() }
    }

    /// A store inconsistency ([`PersistenceError::Inconsistent`]) in the stored state of `id`.
    pub fn inconsistent(id: &SessionId, message: impl Into<String>) -> PersistenceError {
        PersistenceError::Inconsistent { id: id.clone(), message: message.into() }
    }

    /// A database failure ([`PersistenceError::Database`]) of `kind` on `database` (as shown).
    pub fn database(database: impl Into<String>, kind: DatabaseFault, message: impl Into<String>) -> PersistenceError {
        PersistenceError::Database { database: database.into(), kind, message: message.into() }
    }

    /// Whether this is `NotFound`.
    pub fn is_not_found(&self) -> bool {
        matches!(self, PersistenceError::NotFound { .. })
    }
}

/// The result of a persistence operation.
pub type Result<T, E = PersistenceError> = std::result::Result<T, E>;
