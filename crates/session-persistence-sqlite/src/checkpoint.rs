//! `SqliteCheckpointStore`: the projection cache's checkpoint records in a SQLite database of
//! their own, one row per session.
//!
//! The records stay out of the session database: the reference refuses a session database that
//! holds any schema object besides its own three tables, and checkpoints are derived data that
//! may be deleted at any time. The conventional place is a second file beside the session
//! database ([`SqliteCheckpointStore::beside`]). A row holds the record's JSON with the record
//! format's name and version and a CRC-32 of the JSON, as the disk store's files do; a row that
//! fails any check is discarded with a warning, never an error.

use std::{
    ffi::OsString,
    io,
    path::{Path, PathBuf},
};

use parking_lot::Mutex;
use rusqlite::{Connection, OpenFlags, OptionalExtension, TransactionBehavior};
use session_core::SessionId;
use session_persistence::PersistenceError;
use session_projection_cache::{CacheError, CheckpointRecord, CheckpointStore, RecordRow};

use crate::{config::Target, rules};

/// `PRAGMA application_id` of a checkpoint database: 0x44535043, ASCII `DSPC`.
pub const CHECKPOINT_APPLICATION_ID: i64 = 0x4453_5043;
/// `PRAGMA user_version` of a checkpoint database.
pub const CHECKPOINT_USER_VERSION: i64 = 1;

const CHECKPOINT_SCHEMA: &str = "CREATE TABLE checkpoint_records (\n  id      TEXT PRIMARY KEY,\n  format  TEXT NOT NULL,\n  version INTEGER NOT NULL,\n  crc32   INTEGER NOT NULL,\n  record  TEXT NOT NULL\n) STRICT";

const SUBJECT: rules::Subject = rules::Subject("projection cache database");

/// Checkpoint records in a SQLite database. See the module documentation.
#[derive(Debug)]
pub struct SqliteCheckpointStore {
    shown: PathBuf,
    connection: Mutex<Connection>,
}

fn cache_error(path: &Path, error: rusqlite::Error) -> CacheError {
    CacheError::io(path, io::Error::other(error))
}

fn refused(error: PersistenceError) -> CacheError {
    match error {
        PersistenceError::Io { path, source } => CacheError::io(path, source),
        other => CacheError::Storage { message: other.to_string() },
    }
}

impl SqliteCheckpointStore {
    /// The store's connection, for tests of how it was opened.
    #[cfg(test)]
    pub(crate) fn connection_for_tests(&self) -> impl std::ops::DerefMut<Target = Connection> + '_ {
        self.connection.lock()
    }

    /// The conventional checkpoint database of the session database at `session_database`:
    /// the same path with `.projection-cache` appended.
    pub fn beside(session_database: &Path) -> PathBuf {
        let mut name = OsString::from(session_database.as_os_str());
        name.push(".projection-cache");
        PathBuf::from(name)
    }

    /// Opens (creating if needed) the checkpoint database at `target`, with the session
    /// database's path and permission rules. A file that is another application's database is
    /// refused, so nothing foreign is ever overwritten.
    pub fn open(target: &Target) -> Result<SqliteCheckpointStore, CacheError> {
        let shown = target.display_path();
        let mut connection = match target {
            Target::Memory => Connection::open_in_memory().map_err(|error| cache_error(&shown, error))?,
            Target::File(path) => {
                let path = rules::absolute(path).map_err(refused)?;
                rules::create_parent(&path).map_err(refused)?;
                rules::check_parent(SUBJECT, &path).map_err(refused)?;
                rules::check_file(SUBJECT, &path).map_err(refused)?;
                rules::create_file(SUBJECT, &path).map_err(refused)?;
                let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
                Connection::open_with_flags(&path, flags).map_err(|error| cache_error(&path, error))?
            }
        };
        let error = |error| cache_error(&shown, error);
        connection.busy_timeout(std::time::Duration::from_secs(5)).map_err(error)?;
        crate::schema::stable_plans(&connection).map_err(error)?;
        // Records are derived data: a crash may lose the newest ones, never mix two.
        connection
            .execute_batch("PRAGMA trusted_schema = OFF; PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL;")
            .map_err(error)?;
        let transaction = connection.transaction_with_behavior(TransactionBehavior::Immediate).map_err(error)?;
        let version: i64 = transaction.query_row("PRAGMA user_version", [], |row| row.get(0)).map_err(error)?;
        let application_id: i64 =
            transaction.query_row("PRAGMA application_id", [], |row| row.get(0)).map_err(error)?;
        let n_objects: i64 = transaction
            .query_row("SELECT COUNT(*) FROM sqlite_schema WHERE name NOT GLOB 'sqlite_*'", [], |row| row.get(0))
            .map_err(error)?;
        let foreign = || CacheError::Storage {
            message: format!(
                "{} \"{}\" is not a projection cache database (application id {application_id}, user version \
                 {version}); move it away or point the cache elsewhere",
                SUBJECT.0,
                shown.display()
            ),
        };
        if version == 0 && application_id == 0 && n_objects == 0 {
            transaction.execute_batch(CHECKPOINT_SCHEMA).map_err(error)?;
            transaction
                .execute_batch(&format!(
                    "PRAGMA application_id = {CHECKPOINT_APPLICATION_ID}; PRAGMA user_version = {CHECKPOINT_USER_VERSION};"
                ))
                .map_err(error)?;
        } else if application_id != CHECKPOINT_APPLICATION_ID || version != CHECKPOINT_USER_VERSION {
            return Err(foreign());
        }
        transaction.commit().map_err(error)?;
        Ok(SqliteCheckpointStore { shown, connection: Mutex::new(connection) })
    }

    /// Opens the checkpoint database at `target` like [`SqliteCheckpointStore::open`]; if that
    /// fails (the file is damaged, unreadable, another application's or a newer build's), moves
    /// it and its `-wal` and `-shm` files aside to `<path>.damaged-<stamp>` and creates a fresh,
    /// empty one, saying what it moved. Records are derived data: a backfill writes them again.
    pub fn open_or_move_aside(
        target: &Target,
        stamp: &str,
    ) -> Result<(SqliteCheckpointStore, Option<session_projection_cache::MovedAside>), CacheError> {
        match target {
            Target::Memory => Ok((SqliteCheckpointStore::open(target)?, None)),
            Target::File(path) => {
                let path = rules::absolute(path).map_err(refused)?;
                // A directory that breaks the rules is not the file's fault: moving it would not help.
                rules::create_parent(&path).map_err(refused)?;
                rules::check_parent(SUBJECT, &path).map_err(refused)?;
                session_projection_cache::open_or_move_aside(&path, stamp, &["-wal", "-shm"], || {
                    SqliteCheckpointStore::open(target)
                })
            }
        }
    }

    /// The checkpoint database file (absolute), or `:memory:`.
    pub fn path(&self) -> &Path {
        &self.shown
    }
}

/// A stored record's columns as read, each with its own type check.
type StoredColumns = (rusqlite::Result<String>, rusqlite::Result<i64>, rusqlite::Result<i64>, rusqlite::Result<String>);

/// The stored columns of `id`'s record, if it has one.
fn read_columns(connection: &Connection, id: &SessionId) -> rusqlite::Result<Option<StoredColumns>> {
    connection
        .prepare_cached("SELECT format, version, crc32, record FROM checkpoint_records WHERE id = ?1")?
        .query_row([id.as_str()], |row| Ok((row.get(0), row.get(1), row.get(2), row.get(3))))
        .optional()
}

impl SqliteCheckpointStore {
    /// The record stored as `columns` for `id`; a damaged one is discarded with a warning.
    fn decode_columns(&self, id: &SessionId, columns: Option<StoredColumns>) -> Option<CheckpointRecord> {
        let (format, version, crc, text) = columns?;
        let decoded = match (format, version, crc, text) {
            (Ok(format), Ok(version), Ok(crc32), Ok(record)) => RecordRow { format, version, crc32, record }.decode(id),
            _ => Err("corrupt: a column has the wrong type".to_owned()),
        };
        match decoded {
            Ok(record) => Some(record),
            Err(detail) => {
                tracing::warn!(
                    session = %id,
                    path = %self.shown.display(),
                    "session projection cache: discarding the record of \"{id}\" ({detail}); the next write replaces it"
                );
                None
            }
        }
    }
}

impl CheckpointStore for SqliteCheckpointStore {
    fn get(&self, id: &SessionId) -> session_projection_cache::Result<Option<CheckpointRecord>> {
        let columns = read_columns(&self.connection.lock(), id).map_err(|error| cache_error(&self.shown, error))?;
        Ok(self.decode_columns(id, columns))
    }

    /// One read transaction for all of `ids` (one shared lock of the file, not one per record);
    /// the records are decoded after the connection is released.
    fn get_many(&self, ids: &[SessionId]) -> Vec<session_projection_cache::Result<Option<CheckpointRecord>>> {
        let read: rusqlite::Result<Vec<Option<StoredColumns>>> = (|| {
            let mut connection = self.connection.lock();
            let transaction = connection.transaction()?;
            let columns = ids.iter().map(|id| read_columns(&transaction, id)).collect::<rusqlite::Result<Vec<_>>>()?;
            transaction.commit()?;
            Ok(columns)
        })();
        match read {
            Ok(columns) => ids.iter().zip(columns).map(|(id, columns)| Ok(self.decode_columns(id, columns))).collect(),
            // The batch failed as a whole: each record on its own, so one bad read fails only itself.
            Err(_) => ids.iter().map(|id| self.get(id)).collect(),
        }
    }

    fn put(&self, id: &SessionId, record: &CheckpointRecord) -> session_projection_cache::Result<()> {
        let RecordRow { format, version, crc32, record } = RecordRow::encode(record);
        let connection = self.connection.lock();
        connection
            .prepare_cached(
                "INSERT INTO checkpoint_records (id, format, version, crc32, record) VALUES (?1, ?2, ?3, ?4, ?5) \
                 ON CONFLICT(id) DO UPDATE SET format = excluded.format, version = excluded.version, \
                 crc32 = excluded.crc32, record = excluded.record",
            )
            .and_then(|mut statement| statement.execute(rusqlite::params![id.as_str(), format, version, crc32, record]))
            .map_err(|error| cache_error(&self.shown, error))?;
        Ok(())
    }

    fn remove(&self, id: &SessionId) -> session_projection_cache::Result<bool> {
        let connection = self.connection.lock();
        let removed = connection
            .prepare_cached("DELETE FROM checkpoint_records WHERE id = ?1")
            .and_then(|mut statement| statement.execute([id.as_str()]))
            .map_err(|error| cache_error(&self.shown, error))?;
        Ok(removed > 0)
    }
}
