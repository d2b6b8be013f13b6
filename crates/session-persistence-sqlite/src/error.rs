//! How SQLite's errors become [`PersistenceError`]s.

use std::{io, path::Path};

use rusqlite::ErrorCode;
use session_persistence::PersistenceError;

/// A SQLite failure on the database at `path`: a lock held past the busy timeout is `Locked`,
/// anything else an I/O error carrying SQLite's message.
pub(crate) fn sqlite_error(path: &Path, error: rusqlite::Error) -> PersistenceError {
    match error.sqlite_error_code() {
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked) => PersistenceError::Locked { path: path.to_owned() },
        _ => PersistenceError::io(path, io::Error::other(error)),
    }
}
