//! The `sessions` row (reference 05 §4): a header's columns, the lifetime's `incarnation` and the
//! `revision` every mutating transaction bumps; written with the first batch, read strictly.

use rusqlite::{Connection, OptionalExtension, types::ValueRef};
use session_core::{Origin, SESSION_FORMAT_VERSION, SessionHeader, SessionId, json::MAX_SAFE_INTEGER};
use session_persistence::{CorruptKind, Location, PersistenceError};

use crate::schema::is_reference_uuid;

/// The columns every `sessions` query selects, in [`StoredSession::read`]'s order.
pub(crate) const SESSION_COLUMNS: &str = "id, version, created_at, cwd, parent_session, seed_length, origin, \
     delegation_depth, agent_preset, owner, incarnation, revision";

/// A decoded `sessions` row.
#[derive(Debug, Clone)]
pub(crate) struct StoredSession {
    pub(crate) header: SessionHeader,
    /// The stored `version` (also in `header.version` when it fits).
    pub(crate) version: i64,
    pub(crate) incarnation: String,
    pub(crate) revision: u64,
}

fn non_negative(value: ValueRef<'_>, column: &str) -> Result<u64, String> {
    match value {
        ValueRef::Integer(n) if n.unsigned_abs() <= MAX_SAFE_INTEGER => {
            u64::try_from(n).map_err(|_| format!("stored {column} must be non-negative"))
        }
        _ => Err(format!("stored {column} must be a safe integer")),
    }
}

fn optional_non_negative(value: ValueRef<'_>, column: &str) -> Result<Option<u64>, String> {
    match value {
        ValueRef::Null => Ok(None),
        ValueRef::Integer(n) if n.unsigned_abs() <= MAX_SAFE_INTEGER => {
            u64::try_from(n).map(Some).map_err(|_| format!("stored {column} must be non-negative or null"))
        }
        _ => Err(format!("stored {column} must be a safe integer or null")),
    }
}

fn optional_string(value: ValueRef<'_>, column: &str) -> Result<Option<String>, String> {
    match value {
        ValueRef::Null => Ok(None),
        ValueRef::Text(bytes) => {
            String::from_utf8(bytes.to_vec()).map(Some).map_err(|_| format!("stored {column} must be a string or null"))
        }
        _ => Err(format!("stored {column} must be a string or null")),
    }
}

/// The id column of a row, for naming a row whose other columns fail: its text, else its rowid.
pub(crate) fn row_label(row: &rusqlite::Row<'_>) -> String {
    match row.get_ref(0) {
        Ok(ValueRef::Text(bytes)) if !bytes.is_empty() => String::from_utf8_lossy(bytes).into_owned(),
        _ => "(a session row without a valid id)".to_owned(),
    }
}

impl StoredSession {
    /// Reads and checks a row of [`SESSION_COLUMNS`], with the reference's messages.
    pub(crate) fn read(row: &rusqlite::Row<'_>) -> Result<StoredSession, String> {
        let get = |idx: usize| row.get_ref(idx).map_err(|error| error.to_string());
        let id = match get(0)? {
            ValueRef::Text(bytes) => {
                String::from_utf8(bytes.to_vec()).map_err(|_| "stored id must be a string".to_owned())?
            }
            _ => return Err("stored id must be a string".to_owned()),
        };
        if id.is_empty() {
            return Err("stored id must not be empty".to_owned());
        }
        let version = match get(1)? {
            ValueRef::Integer(n) if n.unsigned_abs() <= MAX_SAFE_INTEGER => n,
            _ => return Err("stored version must be a safe integer".to_owned()),
        };
        let created_at = non_negative(get(2)?, "created_at")?;
        let cwd = optional_string(get(3)?, "cwd")?;
        if let Some(cwd) = &cwd
            && !session_core::is_absolute_path(cwd)
        {
            return Err("stored session cwd must be absolute".to_owned());
        }
        let parent_session = optional_string(get(4)?, "parent_session")?;
        let seed_length = optional_non_negative(get(5)?, "seed_length")?;
        let origin = match optional_string(get(6)?, "origin")?.as_deref() {
            None => None,
            Some("subagent") => Some(Origin::Subagent),
            Some(_) => return Err("stored session origin must be subagent or null".to_owned()),
        };
        let delegation_depth = optional_non_negative(get(7)?, "delegation_depth")?;
        let agent_preset = optional_string(get(8)?, "agent_preset")?;
        let owner = optional_string(get(9)?, "owner")?;
        let incarnation = match get(10)? {
            ValueRef::Text(bytes) => String::from_utf8(bytes.to_vec()).unwrap_or_default(),
            _ => String::new(),
        };
        if !is_reference_uuid(&incarnation) {
            return Err("stored session incarnation must be a UUID".to_owned());
        }
        let revision = non_negative(get(11)?, "revision")?;
        let header = SessionHeader {
            version: u32::try_from(version).unwrap_or(u32::MAX),
            id: SessionId::from(id),
            created_at,
            cwd,
            parent_session: parent_session.map(SessionId::from),
            seed_length,
            origin,
            delegation_depth: delegation_depth.unwrap_or(0),
            agent_preset,
            owner,
        };
        Ok(StoredSession { header, version, incarnation, revision })
    }

    /// The refusal of a row in another log format version, with the reference's messages; `None`
    /// for version 0.
    pub(crate) fn unsupported_version(&self) -> Option<String> {
        let (id, version) = (&self.header.id, self.version);
        let current = SESSION_FORMAT_VERSION;
        if version == i64::from(current) {
            return None;
        }
        Some(if version > i64::from(current) {
            format!(
                "session \"{id}\" uses log format v{version}, but this harness reads only v{current}: the log was \
                 written by a newer harness — upgrade the harness to open it"
            )
        } else {
            format!(
                "session \"{id}\" uses log format v{version}, older than the supported v{current}, and this build \
                 ships no upgrade path for it"
            )
        })
    }
}

/// The `sessions` row of `id`, decoded; `Ok(None)` if there is none. The outer error is SQLite's,
/// the inner one the row's.
pub(crate) fn read_session(
    connection: &Connection,
    id: &SessionId,
) -> rusqlite::Result<Option<Result<StoredSession, String>>> {
    let mut statement = connection.prepare_cached(&format!("SELECT {SESSION_COLUMNS} FROM sessions WHERE id = ?1"))?;
    statement.query_row([id.as_str()], |row| Ok(StoredSession::read(row))).optional()
}

/// Writes the `sessions` row of a session's first batch (§4): the header's columns (an absent
/// optional field, and a `delegationDepth` of 0, as NULL), a fresh incarnation and revision 0; an
/// existing row keeps its incarnation and revision and takes the new metadata.
pub(crate) fn upsert_session(connection: &Connection, header: &SessionHeader) -> rusqlite::Result<()> {
    let mut statement = connection.prepare_cached(
        "INSERT INTO sessions (id, version, created_at, cwd, parent_session, seed_length, origin, delegation_depth, \
         agent_preset, owner, incarnation, revision) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, 0) \
         ON CONFLICT(id) DO UPDATE SET version = excluded.version, created_at = excluded.created_at, \
         cwd = excluded.cwd, parent_session = excluded.parent_session, seed_length = excluded.seed_length, \
         origin = excluded.origin, delegation_depth = excluded.delegation_depth, \
         agent_preset = excluded.agent_preset, owner = excluded.owner",
    )?;
    let to_i64 = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    statement.execute(rusqlite::params![
        header.id.as_str(),
        i64::from(header.version),
        to_i64(header.created_at),
        header.cwd,
        header.parent_session.as_ref().map(SessionId::as_str),
        header.seed_length.map(to_i64),
        header.origin.map(|_| "subagent"),
        (header.delegation_depth > 0).then(|| to_i64(header.delegation_depth)),
        header.agent_preset,
        header.owner,
        uuid::Uuid::new_v4().to_string(),
    ])?;
    Ok(())
}

/// The `sessions` row of `id` as [`read_session`] found it, checked: `Ok(None)` when there is
/// none, an error when it does not decode or its format version is one this build cannot read.
pub(crate) fn checked_session(
    id: &SessionId,
    found: Option<Result<StoredSession, String>>,
) -> Result<Option<StoredSession>, PersistenceError> {
    let Some(session) = found else { return Ok(None) };
    let session = session.map_err(|message| {
        PersistenceError::corrupt(CorruptKind::Header, Location::Session { id: id.clone() }, message)
    })?;
    if let Some(message) = session.unsupported_version() {
        return Err(PersistenceError::FormatUnsupported { id: id.clone(), message, location: None });
    }
    Ok(Some(session))
}
