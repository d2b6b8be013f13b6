//! `SqliteConfig`: where a SQLite store lives, how it is opened, and its tuning (reference 05 §1).

use std::{path::PathBuf, time::Duration};

/// Where the database is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// A database file. Its parent directory is created (mode 0700) when a writable store opens.
    File(PathBuf),
    /// A private in-memory database (`:memory:`), gone when the store is dropped.
    Memory,
}

impl Target {
    /// `:memory:` is the in-memory database, anything else a file path.
    pub fn parse(text: &str) -> Target {
        if text == ":memory:" { Target::Memory } else { Target::File(PathBuf::from(text)) }
    }

    /// The path messages name: the file, or `:memory:`.
    pub fn display_path(&self) -> PathBuf {
        match self {
            Target::File(path) => path.clone(),
            Target::Memory => PathBuf::from(":memory:"),
        }
    }
}

/// How the store may use the database.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Access {
    /// Read and write, as the reference does: the file is created (mode 0600) and initialized if
    /// it is new, and switched to the configured journal mode.
    #[default]
    ReadWrite,
    /// Read only, through SQLite's locking, so a writer in another process can run at the same
    /// time. Needs to be able to create the `-shm` file beside a WAL database. Every write is
    /// refused.
    ReadOnly,
    /// Read only, with `immutable=1`: SQLite takes no lock and creates no file, so a database in
    /// a read-only place can be read. Only safe while nothing writes it, and refused while a
    /// non-empty `-wal` file is beside it (its commits would be missed). Every write is refused.
    Immutable,
}

impl Access {
    /// Whether writes are refused: `ReadOnly` and `Immutable`.
    pub fn is_read_only(self) -> bool {
        self != Access::ReadWrite
    }
}

/// The journal modes the reference allows (`journalMode`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum JournalMode {
    /// Write-ahead logging (the default): readers in other connections and processes run beside
    /// the writer. Leaves `-wal` and `-shm` files beside the database.
    #[default]
    Wal,
    /// A rollback journal deleted at the end of each transaction.
    Delete,
    /// A rollback journal truncated to zero bytes at the end of each transaction.
    Truncate,
    /// A rollback journal whose header is zeroed at the end of each transaction.
    Persist,
}

impl JournalMode {
    /// The mode's name as `PRAGMA journal_mode` takes and reports it.
    pub fn as_str(self) -> &'static str {
        match self {
            JournalMode::Wal => "wal",
            JournalMode::Delete => "delete",
            JournalMode::Truncate => "truncate",
            JournalMode::Persist => "persist",
        }
    }
}

/// How a [`SqliteStore`](crate::SqliteStore) opens its database.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SqliteConfig {
    /// The database: a file or `:memory:`.
    pub target: Target,
    /// Whether the store may write, and how it reads (default [`Access::ReadWrite`]).
    pub access: Access,
    /// The journal mode a writable store sets (the reference's default, `wal`).
    pub journal_mode: JournalMode,
    /// How long a connection waits for a lock another connection holds (the reference's
    /// `busyTimeoutMs`, default 5 s), at most 2,147,483,647 ms.
    pub busy_timeout: Duration,
    /// How many idle read connections a file store keeps open for reuse.
    pub max_idle_readers: usize,
}

impl SqliteConfig {
    /// The reference's defaults for `target`: read-write, WAL, a 5 s busy timeout.
    pub fn new(target: Target) -> SqliteConfig {
        SqliteConfig {
            target,
            access: Access::ReadWrite,
            journal_mode: JournalMode::Wal,
            busy_timeout: Duration::from_millis(5_000),
            max_idle_readers: 4,
        }
    }

    /// The default configuration of a database file.
    pub fn file(path: impl Into<PathBuf>) -> SqliteConfig {
        SqliteConfig::new(Target::File(path.into()))
    }

    /// The default configuration of a private in-memory database.
    pub fn memory() -> SqliteConfig {
        SqliteConfig::new(Target::Memory)
    }

    /// This configuration with `access` instead.
    pub fn with_access(self, access: Access) -> SqliteConfig {
        SqliteConfig { access, ..self }
    }
}
