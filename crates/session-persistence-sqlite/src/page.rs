//! One page of the newest-first order (`Backend::list_page`), one family
//! (`Backend::list_children`) and the sessions created since a time (`Backend::created_since`).
//!
//! A file store answers them from its in-memory order (the `order` module): the selected rows
//! are read by rowid and decoded, nothing else. `:memory:` (one connection, small) answers them
//! in SQL: the reference's schema has no index on `created_at` or `parent_session` and may not
//! get one (the reference refuses a database with an extra object), so there the page is one
//! pass over the `sessions` rows with the filters and SQLite's top-N sort, and the page's
//! children one more pass; a family is one pass. Either way only the selected rows are decoded
//! and an event row is never read.

use std::{
    collections::{BTreeMap, HashMap},
    sync::Arc,
};

use rusqlite::{Connection, types::Value};
use session_core::SessionId;
use session_persistence::{
    CorruptKind, HeaderPage, Listing, Location, LogFault, PageKey, PageRequest, PersistenceError, Result, StoredHeader,
};
use tokio_util::sync::CancellationToken;

use crate::{
    order::Order,
    sessions::{SESSION_COLUMNS, StoredSession, row_label},
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

/// A row read back: its header or its fault.
type Decoded = std::result::Result<StoredHeader, Box<LogFault>>;

/// The rows one part of an answer selected, decoded, and how many there were.
#[derive(Default)]
struct Rows {
    headers: Vec<StoredHeader>,
    faults: Vec<LogFault>,
    n_rows: usize,
}

impl Rows {
    fn push(&mut self, row: Decoded) {
        self.n_rows += 1;
        match row {
            Ok(stored) => self.headers.push(stored),
            Err(fault) => self.faults.push(*fault),
        }
    }

    fn into_listing(self) -> Listing {
        let mut listing = Listing { headers: self.headers, faults: self.faults };
        listing.sort();
        listing
    }
}

impl FromIterator<Decoded> for Rows {
    fn from_iter<I: IntoIterator<Item = Decoded>>(rows: I) -> Rows {
        let mut collected = Rows::default();
        for row in rows {
            collected.push(row);
        }
        collected
    }
}

/// Where a page's rows come from.
enum Source<'a> {
    Sql(&'a Filter),
    Order(&'a Order),
}

fn check_cancel(cancel: &CancellationToken) -> Result<()> {
    if cancel.is_cancelled() { Err(PersistenceError::Cancelled) } else { Ok(()) }
}

impl SqliteStore {
    /// `parent`, its children and their children (as `Listing::family_of` cuts them from the
    /// whole listing); rows that do not decode are faults without a header, which no family keeps.
    pub(crate) fn family(&self, parent: &SessionId, cancel: &CancellationToken) -> Result<Listing> {
        check_cancel(cancel)?;
        let ordered = self.ordered(|connection, order| {
            let rows = self.rows_by_rowid(connection, order, &order.family_rows(parent.as_str()))?;
            Ok(rows.map(|rows| rows.into_iter().map(|(_, row)| row).collect::<Rows>().into_listing()))
        })?;
        let listing = match ordered {
            Some(listing) => listing,
            None => {
                let filter = " WHERE id = ?1 OR parent_session = ?1 \
                              OR parent_session IN (SELECT id FROM sessions WHERE parent_session = ?1)";
                self.listing(filter, [parent.as_str()], cancel)?
            }
        };
        check_cancel(cancel)?;
        Ok(listing.family_of(parent))
    }

    /// The `sessions` rows with `created_at >= since_ms`; as the default, rows that do not
    /// decode are left out.
    pub(crate) fn created(&self, since_ms: u64, cancel: &CancellationToken) -> Result<Listing> {
        check_cancel(cancel)?;
        let since = i64::try_from(since_ms).unwrap_or(i64::MAX);
        let ordered = self.ordered(|connection, order| {
            let rows = self.rows_by_rowid(connection, order, &order.created_since(since))?;
            Ok(rows.map(|rows| rows.into_iter().map(|(_, row)| row).collect::<Rows>().into_listing()))
        })?;
        let mut listing = match ordered {
            Some(listing) => listing,
            None => self.listing(" WHERE created_at >= ?1", [since], cancel)?,
        };
        check_cancel(cancel)?;
        listing.faults.clear();
        Ok(listing)
    }

    /// The page `request` asks for, in one read transaction: at most `limit + 1` rows of the
    /// range in page order (more when some of them do not decode: those are the page's faults,
    /// and the rows are asked again with room for them), then the page's children.
    pub(crate) fn page(&self, request: &PageRequest, cancel: &CancellationToken) -> Result<HeaderPage> {
        check_cancel(cancel)?;
        let ordered = self.ordered(|connection, order| self.page_from(connection, request, Source::Order(order)))?;
        let page = match ordered {
            Some(page) => page,
            None => self.with_reader(|connection| {
                let filter = page_filter(request);
                let transaction = connection.transaction().map_err(self.sql_error())?;
                // Invariant: the SQL source is never out of date.
                let page = self.page_from(&transaction, request, Source::Sql(&filter))?.expect("SQL pages are current");
                transaction.commit().map_err(self.sql_error())?;
                Ok(page)
            })?,
        };
        check_cancel(cancel)?;
        Ok(page)
    }

    /// The page from `source`; `None` when the order turned out to be out of date.
    fn page_from(
        &self,
        connection: &Connection,
        request: &PageRequest,
        source: Source<'_>,
    ) -> Result<Option<HeaderPage>> {
        let mut page = HeaderPage::default();
        let mut room = request.limit.saturating_add(1);
        let mut headers = loop {
            let rows = match &source {
                Source::Sql(filter) => self.page_rows(connection, filter, room)?,
                Source::Order(order) => {
                    let Some(rows) = self.rows_by_rowid(connection, order, &order.page_rows(request, room))? else {
                        return Ok(None);
                    };
                    rows.into_iter().map(|(_, row)| row).collect()
                }
            };
            let Rows { headers, faults, n_rows } = rows;
            let headers: Vec<StoredHeader> =
                headers.into_iter().filter(|stored| request.admits(&stored.header)).collect();
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
        let children = match &source {
            Source::Sql(_) => self.page_children_sql(connection, &page, request)?,
            Source::Order(order) => {
                let rowids: Vec<i64> = page
                    .headers
                    .iter()
                    .flat_map(|stored| order.subagent_children(stored.header.id.as_str(), request.owner.as_deref()))
                    .collect();
                let Some(rows) = self.rows_by_rowid(connection, order, &rowids)? else { return Ok(None) };
                rows.into_iter().filter_map(|(_, row)| row.ok()).collect()
            }
        };
        page.children = children_of(children);
        Ok(Some(page))
    }

    /// The first `room` rows `filter` selects in page order.
    fn page_rows(&self, connection: &Connection, filter: &Filter, room: usize) -> Result<Rows> {
        let sql = format!(
            "SELECT {SESSION_COLUMNS} FROM sessions{} ORDER BY created_at DESC, id LIMIT {}",
            filter.sql,
            i64::try_from(room).unwrap_or(i64::MAX)
        );
        let mut statement = connection.prepare_cached(&sql).map_err(self.sql_error())?;
        let mut rows = statement.query(rusqlite::params_from_iter(filter.params.iter())).map_err(self.sql_error())?;
        let mut read = Rows::default();
        while let Some(row) = rows.next().map_err(self.sql_error())? {
            read.push(self.stored_row(row));
        }
        Ok(read)
    }

    /// The stored direct subagent children of the page's sessions, of the request's owner (every
    /// owner's for none): one query over the page's ids.
    fn page_children_sql(
        &self,
        connection: &Connection,
        page: &HeaderPage,
        request: &PageRequest,
    ) -> Result<Vec<StoredHeader>> {
        if page.headers.is_empty() {
            return Ok(Vec::new());
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
        let mut children = Vec::new();
        while let Some(row) = rows.next().map_err(self.sql_error())? {
            if let Ok(stored) = self.stored_row(row) {
                children.push(stored);
            }
        }
        Ok(children)
    }

    /// `answer` from the store's order, in one read transaction of the order's connection after
    /// the order caught up with it; `None` for a store without an order (`:memory:`). An answer
    /// that finds the order out of date (`None`) rebuilds it and is asked again.
    fn ordered<T>(&self, answer: impl Fn(&Connection, &Order) -> Result<Option<T>>) -> Result<Option<T>> {
        let Some((slot, file)) = self.order_slot() else { return Ok(None) };
        let mut slot = slot.lock();
        let (mut connection, mut order, built) = match slot.take() {
            Some((connection, order)) => (connection, order, true),
            None => (self.open_reader(file)?, Order::default(), false),
        };
        let answered = (|| {
            let transaction = connection.transaction().map_err(self.sql_error())?;
            order.catch_up(&transaction, built).map_err(self.sql_error())?;
            let answered = match answer(&transaction, &order)? {
                Some(answered) => answered,
                None => {
                    order.build(&transaction).map_err(self.sql_error())?;
                    answer(&transaction, &order)?.ok_or_else(|| {
                        let message = "the in-memory sessions order disagrees with the rows it was just built from";
                        PersistenceError::io(self.path(), std::io::Error::other(message))
                    })?
                }
            };
            transaction.commit().map_err(self.sql_error())?;
            Ok(answered)
        })();
        // A failed read leaves nothing behind: the next one opens and builds afresh.
        if answered.is_ok() {
            *slot = Some((connection, order));
        }
        answered.map(Some)
    }

    /// The rows `rowids` names, read in `connection`'s transaction and decoded, in `rowids`'
    /// order; `None` when one of them is missing or differs from its entry in `order` (the
    /// order is out of date). A query per 500 rowids.
    fn rows_by_rowid(
        &self,
        connection: &Connection,
        order: &Order,
        rowids: &[i64],
    ) -> Result<Option<Vec<(i64, Decoded)>>> {
        let mut found: HashMap<i64, Decoded> = HashMap::with_capacity(rowids.len());
        for chunk in rowids.chunks(500) {
            let placeholders = vec!["?"; chunk.len()].join(", ");
            let sql = format!("SELECT {SESSION_COLUMNS}, rowid FROM sessions WHERE rowid IN ({placeholders})");
            let mut statement = connection.prepare_cached(&sql).map_err(self.sql_error())?;
            let mut rows = statement.query(rusqlite::params_from_iter(chunk.iter())).map_err(self.sql_error())?;
            while let Some(row) = rows.next().map_err(self.sql_error())? {
                let rowid: i64 = row.get(12).map_err(self.sql_error())?;
                let kept = order.columns(rowid).map(|columns| columns.is_session_row(row)).transpose();
                if kept.map_err(self.sql_error())? != Some(true) {
                    return Ok(None);
                }
                found.insert(rowid, self.stored_row(row));
            }
        }
        let mut rows = Vec::with_capacity(rowids.len());
        for rowid in rowids {
            let Some(row) = found.remove(rowid) else { return Ok(None) };
            rows.push((*rowid, row));
        }
        Ok(Some(rows))
    }
    /// A `sessions` row as a listing sees it: its header, or the row's own fault (a format
    /// version this build cannot read, or a row that does not decode).
    pub(crate) fn stored_row(&self, row: &rusqlite::Row<'_>) -> std::result::Result<StoredHeader, Box<LogFault>> {
        let (id, error) = match StoredSession::read(row) {
            Ok(session) if u32::try_from(session.version).is_ok() => {
                return Ok(StoredHeader {
                    revision: self.revision_of(&session),
                    header: Arc::new(session.header),
                    n_bytes: None,
                });
            }
            Ok(session) => {
                let id = session.header.id.clone();
                let message = session.unsupported_version().unwrap_or_default();
                (id.clone(), PersistenceError::FormatUnsupported { id, message, location: None })
            }
            Err(message) => {
                let id = SessionId::from(row_label(row));
                let error =
                    PersistenceError::corrupt(CorruptKind::Header, Location::Session { id: id.clone() }, message);
                (id, error)
            }
        };
        Err(Box::new(LogFault { error, id, path: None, header: None }))
    }

    /// The `sessions` rows `filter` (a `WHERE` clause or nothing) selects, in id order; a row
    /// that does not decode is its own fault.
    pub(crate) fn listing<P: rusqlite::Params>(
        &self,
        filter: &str,
        params: P,
        cancel: &CancellationToken,
    ) -> Result<Listing> {
        if cancel.is_cancelled() {
            return Err(PersistenceError::Cancelled);
        }
        let mut listing = self.with_reader(|connection| {
            let mut statement = connection
                .prepare_cached(&format!("SELECT {SESSION_COLUMNS} FROM sessions{filter}"))
                .map_err(self.sql_error())?;
            let mut rows = statement.query(params).map_err(self.sql_error())?;
            let mut listing = Listing::default();
            while let Some(row) = rows.next().map_err(self.sql_error())? {
                match self.stored_row(row) {
                    Ok(stored) => listing.headers.push(stored),
                    Err(fault) => listing.faults.push(*fault),
                }
            }
            Ok(listing)
        })?;
        if cancel.is_cancelled() {
            return Err(PersistenceError::Cancelled);
        }
        listing.sort();
        Ok(listing)
    }
}

/// Subagent children by parent, each parent's sorted by id.
fn children_of(children: Vec<StoredHeader>) -> BTreeMap<SessionId, Vec<SessionId>> {
    let mut by_parent: BTreeMap<SessionId, Vec<SessionId>> = BTreeMap::new();
    for stored in children {
        let header = &stored.header;
        if !header.is_subagent() {
            continue;
        }
        if let Some(parent) = &header.parent_session {
            by_parent.entry(parent.clone()).or_default().push(header.id.clone());
        }
    }
    for ids in by_parent.values_mut() {
        ids.sort();
    }
    by_parent
}
