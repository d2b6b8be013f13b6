//! One page of the newest-first order (`Backend::list_page`) and one family
//! (`Backend::list_children`) in SQL: the reference's schema has no index on `created_at` or
//! `parent_session` and may not get one (the reference refuses a database with an extra
//! object), so the page is one pass over the `sessions` rows with the filters and SQLite's top-N
//! sort, and the page's children one more pass selecting only theirs; a family is one pass (and
//! one for its children's ids). Only the selected rows are decoded; an event row is never read.

use std::collections::BTreeMap;

use rusqlite::{Connection, types::Value};
use session_core::SessionId;
use session_persistence::{
    HeaderPage, Listing, LogFault, PageKey, PageRequest, PersistenceError, Result, StoredHeader,
};
use tokio_util::sync::CancellationToken;

use crate::{
    sessions::{SESSION_COLUMNS, StoredSession},
    store::SqliteStore,
};

/// A `WHERE` clause and its parameters.
struct Filter {
    sql: String,
    params: Vec<Value>,
}

impl Filter {
    fn new() -> Filter {
        Filter { sql: String::new(), params: Vec::new() }
    }

    /// Adds `condition`, whose `?` placeholders take `params` in order (SQLite numbers bare
    /// `?`s left to right, so the clause's parameters are the conditions' in order).
    fn and(&mut self, condition: &str, params: impl IntoIterator<Item = Value>) {
        self.params.extend(params);
        self.sql.push_str(if self.sql.is_empty() { " WHERE " } else { " AND " });
        self.sql.push_str(condition);
    }
}

fn to_sql_int(n: u64) -> Value {
    Value::Integer(i64::try_from(n).unwrap_or(i64::MAX))
}

/// The request's filters and range as SQL. The decoded rows are checked again in Rust
/// ([`PageRequest::admits`]), so the SQL only has to let every admitted row through.
fn page_filter(request: &PageRequest) -> Filter {
    let mut filter = Filter::new();
    if let Some(owner) = &request.owner {
        filter.and("owner = ?", [Value::Text(owner.clone())]);
    }
    if request.require_cwd {
        filter.and("cwd IS NOT NULL", []);
    }
    if request.exclude_subagents {
        // A row whose origin is anything but NULL or 'subagent' does not decode: it is a fault
        // either way, and the whole listing reports it.
        filter.and("origin IS NULL", []);
    }
    if let Some(cwd) = &request.cwd {
        filter.and("cwd = ?", [Value::Text(cwd.clone())]);
    }
    if let Some(after) = &request.after {
        let created = to_sql_int(after.created_at);
        let id = Value::Text(after.id.as_str().to_owned());
        filter.and("(created_at < ? OR (created_at = ? AND id > ?))", [created.clone(), created, id]);
    }
    filter
}

impl SqliteStore {
    /// `parent`, its children and their children (as `Listing::family_of` cuts them from the
    /// whole listing), selected in SQL; rows that do not decode are faults without a header, which
    /// no family keeps.
    pub(crate) fn family(&self, parent: &SessionId, cancel: &CancellationToken) -> Result<Listing> {
        let filter = " WHERE id = ?1 OR parent_session = ?1 \
                      OR parent_session IN (SELECT id FROM sessions WHERE parent_session = ?1)";
        Ok(self.listing(filter, [parent.as_str()], cancel)?.family_of(parent))
    }

    /// The page `request` asks for, in one read transaction: at most `limit + 1` rows of the
    /// range in page order (more when some of them do not decode: those are the page's faults,
    /// and the query is asked again with room for them), then the page's children.
    pub(crate) fn page(&self, request: &PageRequest, cancel: &CancellationToken) -> Result<HeaderPage> {
        if cancel.is_cancelled() {
            return Err(PersistenceError::Cancelled);
        }
        let filter = page_filter(request);
        let page = self.with_reader(|connection| {
            let transaction = connection.transaction().map_err(self.sql_error())?;
            let mut page = HeaderPage::default();
            let mut room = request.limit.saturating_add(1);
            let mut headers = loop {
                let (headers, faults, n_rows) = self.page_rows(&transaction, request, &filter, room)?;
                let complete = n_rows < room || headers.len() > request.limit;
                if complete || room >= usize::MAX / 2 {
                    page.faults = faults;
                    break headers;
                }
                room = room.saturating_mul(2);
            };
            headers.sort_by_key(|stored| PageKey::of(&stored.header));
            let more = headers.len() > request.limit;
            headers.truncate(request.limit);
            page.next = if more { headers.last().map(|stored| PageKey::of(&stored.header)) } else { None };
            page.headers = headers;
            page.children = self.page_children(&transaction, &page, request)?;
            transaction.commit().map_err(self.sql_error())?;
            Ok(page)
        })?;
        if cancel.is_cancelled() {
            return Err(PersistenceError::Cancelled);
        }
        Ok(page)
    }

    /// The first `room` rows `filter` selects in page order: the admitted headers among them,
    /// the rows that do not decode (as faults), and how many rows there were.
    fn page_rows(
        &self,
        connection: &Connection,
        request: &PageRequest,
        filter: &Filter,
        room: usize,
    ) -> Result<(Vec<StoredHeader>, Vec<LogFault>, usize)> {
        let sql = format!(
            "SELECT {SESSION_COLUMNS} FROM sessions{} ORDER BY created_at DESC, id LIMIT {}",
            filter.sql,
            i64::try_from(room).unwrap_or(i64::MAX)
        );
        let mut statement = connection.prepare_cached(&sql).map_err(self.sql_error())?;
        let mut rows = statement.query(rusqlite::params_from_iter(filter.params.iter())).map_err(self.sql_error())?;
        let (mut headers, mut faults, mut n_rows) = (Vec::new(), Vec::new(), 0);
        while let Some(row) = rows.next().map_err(self.sql_error())? {
            n_rows += 1;
            match self.stored_row(row) {
                Ok(stored) if request.admits(&stored.header) => headers.push(stored),
                Ok(_) => {}
                Err(fault) => faults.push(*fault),
            }
        }
        Ok((headers, faults, n_rows))
    }

    /// The stored direct subagent children of the page's sessions, of the request's owner (every
    /// owner's for none), sorted by id: one query over the page's ids. Rows that do not decode
    /// are left out, as a whole listing leaves them out of its headers.
    fn page_children(
        &self,
        connection: &Connection,
        page: &HeaderPage,
        request: &PageRequest,
    ) -> Result<BTreeMap<SessionId, Vec<SessionId>>> {
        let mut children: BTreeMap<SessionId, Vec<SessionId>> = BTreeMap::new();
        if page.headers.is_empty() {
            return Ok(children);
        }
        let mut filter = Filter::new();
        filter.and("origin = 'subagent'", []);
        let parents = page.headers.iter().map(|stored| Value::Text(stored.header.id.as_str().to_owned()));
        let placeholders = vec!["?"; page.headers.len()].join(", ");
        filter.and(&format!("parent_session IN ({placeholders})"), parents);
        if let Some(owner) = &request.owner {
            filter.and("owner = ?", [Value::Text(owner.clone())]);
        }
        let sql = format!("SELECT {SESSION_COLUMNS} FROM sessions{}", filter.sql);
        let mut statement = connection.prepare(&sql).map_err(self.sql_error())?;
        let mut rows = statement.query(rusqlite::params_from_iter(filter.params.iter())).map_err(self.sql_error())?;
        while let Some(row) = rows.next().map_err(self.sql_error())? {
            let Ok(session) = StoredSession::read(row) else { continue };
            let header = session.header;
            if u32::try_from(session.version).is_err() || !header.is_subagent() {
                continue;
            }
            if let Some(parent) = header.parent_session {
                children.entry(parent).or_default().push(header.id);
            }
        }
        for ids in children.values_mut() {
            ids.sort();
        }
        Ok(children)
    }
}
