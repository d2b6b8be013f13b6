//! Where sessions stand, for a follower of a shared database: each session's next seq from its
//! last row alone (two primary-key seeks per session, in chunked queries) with whether another
//! writer holds its lease, and the `sessions` rows' change marks (`incarnation`, `revision`) that the
//! change poller compares.

use std::{collections::HashMap, path::Path};

use parking_lot::Mutex;
use rusqlite::{Connection, types::ValueRef};
use session_core::SessionId;
use session_persistence::{Result, SessionPosition};

use crate::{
    codec::StoredRow,
    error::sqlite_error,
    lease::{Lease, lease_held, lease_key_of, lease_keys},
};

/// How many ids one positions query binds: below SQLite's oldest default variable limit (999),
/// so the statement works whatever the library was built with.
pub(crate) const IDS_PER_QUERY: usize = 500;

/// The seq after the last event of each of `ids` that has a `sessions` row (ids without one are
/// left out; a session without event rows is at 0). One query per [`IDS_PER_QUERY`] ids, each
/// session costing two seeks of the primary key `(session_id, seq)`: `MAX(seq)`, then that row.
///
/// Only the last row is read. A scalar row is one event (its seq + 1, its payload not read); a
/// packed row is decoded to count its members (at most 1,024 and 1 MiB); a last row that does not
/// decode is the start of a torn tail, so the log's readable events end before it (its seq). A
/// damaged row further back is not seen here: the follower's tail read meets it.
pub(crate) fn next_seqs(connection: &Connection, shown: &Path, ids: &[SessionId]) -> Result<Vec<(SessionId, u64)>> {
    let sql_error = |error| sqlite_error(shown, error);
    let mut positions = Vec::with_capacity(ids.len());
    for chunk in ids.chunks(IDS_PER_QUERY) {
        let mut statement = connection.prepare_cached(&positions_sql(chunk.len())).map_err(sql_error)?;
        let mut rows =
            statement.query(rusqlite::params_from_iter(chunk.iter().map(SessionId::as_str))).map_err(sql_error)?;
        while let Some(row) = rows.next().map_err(sql_error)? {
            let ValueRef::Text(id) = row.get_ref(0).map_err(sql_error)? else { continue };
            let id = SessionId::from(String::from_utf8_lossy(id).into_owned());
            positions.push((id, last_row_next_seq(row).map_err(sql_error)?));
        }
    }
    Ok(positions)
}

/// [`next_seqs`] in one read transaction, so every session's position is of one state of the file.
pub(crate) fn next_seqs_at_once(
    connection: &mut Connection,
    shown: &Path,
    ids: &[SessionId],
) -> Result<Vec<(SessionId, u64)>> {
    let transaction = connection.transaction().map_err(|error| sqlite_error(shown, error))?;
    let next = next_seqs(&transaction, shown, ids)?;
    transaction.commit().map_err(|error| sqlite_error(shown, error))?;
    Ok(next)
}

/// The query of [`next_seqs`] for `n_ids` ids: each session's row by its primary key, joined to its
/// last event row by the events' primary key (`MAX(seq)` of one `session_id` is a seek). The
/// payload columns are read for a packed row only: a scalar row's seq is its position.
fn positions_sql(n_ids: usize) -> String {
    let placeholders = vec!["?"; n_ids].join(", ");
    format!(
        "SELECT s.id, e.seq, e.type, e.time, \
         CASE WHEN e.ignorable = 0 THEN e.data ELSE '' END, \
         CASE WHEN e.ignorable = 0 THEN e.source_event_seqs END, \
         CASE WHEN e.ignorable = 0 THEN e.surface_op END, \
         e.ignorable \
         FROM sessions AS s LEFT JOIN events AS e ON e.session_id = s.id \
         AND e.seq = (SELECT MAX(seq) FROM events WHERE session_id = s.id) \
         WHERE s.id IN ({placeholders})"
    )
}

/// The next seq a session's last row (columns 1.. of a [`next_seqs`] row) leaves.
fn last_row_next_seq(row: &rusqlite::Row<'_>) -> rusqlite::Result<u64> {
    let seq = match row.get_ref(1)? {
        ValueRef::Integer(seq) => u64::try_from(seq).unwrap_or(0),
        // No event row (or a seq of another type, which no read gets past): nothing readable.
        _ => return Ok(0),
    };
    let packed = matches!(row.get_ref(7), Ok(ValueRef::Integer(0)));
    if !packed {
        return Ok(seq + 1);
    }
    let Ok(stored) = StoredRow::read_at(row, 1) else { return Ok(seq) };
    let mut members = Vec::new();
    match stored.decode(&mut members) {
        Ok(()) => Ok(members.last().map_or(seq, |last| last.seq + 1)),
        Err(_) => Ok(seq),
    }
}

/// The positions of sessions at `next` seqs, each with whether a writer other than this handle
/// holds its lease: one read of `<database>.leases/`, then a non-blocking probe of each present
/// file of these sessions (see `lease`). `None` for a session whose lease this handle holds
/// (`mine`, the handle's leases, locked around each probe so none is taken or ended meanwhile: a
/// `flock` probe cannot see past this handle's own lock), for one whose probe failed (with a
/// warning), and for every session of `:memory:` (`file` is `None`), which keeps no leases.
pub(crate) fn with_holds(
    file: Option<&Path>,
    next: Vec<(SessionId, u64)>,
    mine: &Mutex<HashMap<SessionId, Lease>>,
) -> Result<Vec<SessionPosition>> {
    let Some(file) = file else {
        return Ok(next.into_iter().map(|(id, next_seq)| SessionPosition { id, next_seq, held: None }).collect());
    };
    let present = lease_keys(file)?;
    let held = |id: &SessionId| {
        if !present.contains(&lease_key_of(id)) {
            return Some(false);
        }
        let mine = mine.lock();
        if mine.contains_key(id) {
            return None;
        }
        lease_held(file, id)
            .inspect_err(|error| tracing::warn!(session = %id, %error, "cannot probe a session's writer lease"))
            .ok()
    };
    Ok(next.into_iter().map(|(id, next_seq)| SessionPosition { held: held(&id), id, next_seq }).collect())
}

/// What identifies one state of a `sessions` row: a new materialization mints a new incarnation,
/// and every append or repair transaction adds 1 to the revision (reference 05 §4, §8).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ChangeMark {
    pub(crate) incarnation: String,
    pub(crate) revision: i64,
}

/// Every `sessions` row's change mark, by id: one pass over the table (three columns of each
/// row; no event row is read). Rows whose id is not text are skipped: no session can be named
/// by them.
pub(crate) fn change_marks(connection: &Connection, shown: &Path) -> Result<HashMap<SessionId, ChangeMark>> {
    let sql_error = |error| sqlite_error(shown, error);
    let mut statement =
        connection.prepare_cached("SELECT id, incarnation, revision FROM sessions").map_err(sql_error)?;
    let mut rows = statement.query([]).map_err(sql_error)?;
    let mut marks = HashMap::new();
    while let Some(row) = rows.next().map_err(sql_error)? {
        let ValueRef::Text(id) = row.get_ref(0).map_err(sql_error)? else { continue };
        let id = SessionId::from(String::from_utf8_lossy(id).into_owned());
        let incarnation = match row.get_ref(1).map_err(sql_error)? {
            ValueRef::Text(text) => String::from_utf8_lossy(text).into_owned(),
            _ => String::new(),
        };
        let revision = match row.get_ref(2).map_err(sql_error)? {
            ValueRef::Integer(revision) => revision,
            _ => -1,
        };
        marks.insert(id, ChangeMark { incarnation, revision });
    }
    Ok(marks)
}

#[cfg(test)]
mod tests;
