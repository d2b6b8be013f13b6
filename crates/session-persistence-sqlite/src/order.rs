//! The `sessions` rows' newest-first order, kept in memory by a file store, so that a page
//! ([`Backend::list_page`]), a family ([`Backend::list_children`]) and the sessions created since
//! a time ([`Backend::created_since`]) cost their own rows instead of a pass over the table. The
//! reference's schema has no index on `created_at` or `parent_session` and may not get one (the
//! reference refuses a database with an extra object): without this, every page of a 100,000-row
//! table is two passes over it and SQLite's top-N sort.
//!
//! What is kept: per row, its rowid and the raw columns pages filter and order on (`id`,
//! `created_at`, `cwd`, `parent_session`, `origin`, `owner`; strings shared), the order by
//! `created_at` descending then id, and each parent's rows. Headers are not kept: the selected
//! rows are read again by rowid in the same read transaction and decoded there, so a page's
//! headers and revisions are the snapshot's, as before.
//!
//! Freshness. The order lives on a read connection of its own. Each use opens a read transaction
//! there and asks `PRAGMA data_version`, which moves when any other connection has committed: this
//! handle's writer, or another process's. When it has not moved, the order is the snapshot's.
//! When it has, the order catches up in that transaction: the rows past the last rowid it saw are
//! added, the sessions whose header this handle wrote since are read again (a first batch may
//! rewrite the header columns of a row without events), and two checks follow: the row at the
//! last rowid seen must still be the same session lifetime (SQLite gives a new row the largest
//! rowid plus one, so a reused rowid means the largest row went), and the row count must match
//! (a row deleted, or one inserted at a rowid of a program's own choosing). A check that fails
//! rebuilds the order from one pass. A row another program rewrote in place (neither
//! we nor the reference do, except as above) is caught when it is read back: every row read by
//! rowid is compared with its entry, and a difference rebuilds the order and answers again.
//!
//! [`Backend::list_page`]: session_persistence::Backend::list_page
//! [`Backend::list_children`]: session_persistence::Backend::list_children
//! [`Backend::created_since`]: session_persistence::Backend::created_since

use std::{
    cmp::Reverse,
    collections::{BTreeSet, HashMap, HashSet},
    ops::Bound,
    sync::Arc,
};

use rusqlite::{Connection, OptionalExtension, Row, types::ValueRef};
use session_persistence::{PageKey, PageRequest};

type Text = Arc<str>;

/// The raw columns of one row that the order is by and filters on, read the same way when the
/// order is built and when a row is read back, so the two compare.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Columns {
    pub(crate) id: Text,
    pub(crate) created_at: i64,
    cwd: Option<Text>,
    parent: Option<Text>,
    origin: Option<Text>,
    owner: Option<Text>,
}

/// The columns [`Columns::read`] takes, after the rowid.
const ORDER_COLUMNS: &str = "id, created_at, cwd, parent_session, origin, owner";

/// A row's place in page order: newest first, then by id, then by rowid (ids are unique; the
/// rowid only keeps two places apart should a damaged row repeat one).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Place {
    newest: Reverse<i64>,
    id: Text,
    rowid: i64,
}

/// Shares equal strings (most rows of a store have one of a few cwds and owners).
#[derive(Default)]
struct Interner(HashSet<Text>);

/// A text column as the order keeps it. The table is STRICT, so any other type is a damaged
/// file: it becomes a marker that equals no text a filter asks for, and the row's decode reports
/// the damage.
fn text_of(value: ValueRef<'_>) -> Option<std::borrow::Cow<'_, str>> {
    match value {
        ValueRef::Null => None,
        ValueRef::Text(bytes) => Some(String::from_utf8_lossy(bytes)),
        _ => Some("\u{0}not text".into()),
    }
}

impl Interner {
    fn text(&mut self, value: ValueRef<'_>) -> Option<Text> {
        let text = text_of(value)?;
        if let Some(shared) = self.0.get(text.as_ref()) {
            return Some(Arc::clone(shared));
        }
        let shared: Text = Arc::from(text.as_ref());
        self.0.insert(Arc::clone(&shared));
        Some(shared)
    }
}

impl Columns {
    /// The columns of `row` from index `at` on, in [`ORDER_COLUMNS`]' order.
    fn read(row: &Row<'_>, at: usize, interner: &mut Interner) -> rusqlite::Result<Columns> {
        Columns::at(row, [at, at + 1, at + 2, at + 3, at + 4, at + 5], interner)
    }

    /// Whether a `SELECT {SESSION_COLUMNS}` row (id 0, created_at 2, cwd 3, parent_session 4,
    /// origin 6, owner 9) holds these columns, read as [`Columns::read`] reads them, without
    /// building them.
    pub(crate) fn is_session_row(&self, row: &Row<'_>) -> rusqlite::Result<bool> {
        let same = |idx: usize, kept: Option<&str>| -> rusqlite::Result<bool> {
            Ok(text_of(row.get_ref(idx)?).as_deref() == kept)
        };
        let created_at = match row.get_ref(2)? {
            ValueRef::Integer(n) => n,
            _ => i64::MIN,
        };
        Ok(created_at == self.created_at
            && same(0, Some(&self.id))?
            && same(3, self.cwd.as_deref())?
            && same(4, self.parent.as_deref())?
            && same(6, self.origin.as_deref())?
            && same(9, self.owner.as_deref())?)
    }

    /// The columns at `[id, created_at, cwd, parent_session, origin, owner]`. Ids are unique, so
    /// they are not shared.
    fn at(
        row: &Row<'_>,
        [id, created_at, cwd, parent, origin, owner]: [usize; 6],
        interner: &mut Interner,
    ) -> rusqlite::Result<Columns> {
        // A NULL id (a damaged row) is kept as empty; `is_session_row` reads it the same way.
        let id = text_of(row.get_ref(id)?).map_or_else(|| Arc::from(""), |text| Arc::from(text.as_ref()));
        let created_at = match row.get_ref(created_at)? {
            ValueRef::Integer(n) => n,
            _ => i64::MIN,
        };
        Ok(Columns {
            id,
            created_at,
            cwd: interner.text(row.get_ref(cwd)?),
            parent: interner.text(row.get_ref(parent)?),
            origin: interner.text(row.get_ref(origin)?),
            owner: interner.text(row.get_ref(owner)?),
        })
    }

    fn place(&self, rowid: i64) -> Place {
        Place { newest: Reverse(self.created_at), id: Arc::clone(&self.id), rowid }
    }

    /// What the page query's `WHERE` clause let through (the decoded rows are checked again).
    fn passes(&self, request: &PageRequest) -> bool {
        let same = |column: &Option<Text>, value: &Option<String>| {
            value.as_deref().is_none_or(|value| column.as_deref() == Some(value))
        };
        same(&self.owner, &request.owner)
            && (!request.require_cwd || self.cwd.is_some())
            && (!request.exclude_subagents || self.origin.is_none())
            && same(&self.cwd, &request.cwd)
    }

    fn is_subagent(&self) -> bool {
        self.origin.as_deref() == Some("subagent")
    }
}

/// The rowid largest when the order last caught up, and the lifetime of its row then.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Last {
    rowid: i64,
    id: Text,
    incarnation: String,
}

/// A file store's order with the read connection it lives on; empty until first asked.
pub(crate) type OrderSlot = parking_lot::Mutex<Option<(Connection, Order)>>;

/// The order itself. See the module documentation.
#[derive(Default)]
pub(crate) struct Order {
    rows: HashMap<i64, Columns>,
    places: BTreeSet<Place>,
    /// Each `parent_session` with the rowids naming it (any origin).
    children: HashMap<Text, BTreeSet<i64>>,
    rowids: HashMap<Text, i64>,
    last: Option<Last>,
    data_version: i64,
    interner: Interner,
    /// Ids whose header this handle wrote since the order last caught up.
    touched: HashSet<String>,
}

impl Order {
    /// Makes the order the current read transaction's: built when `built` is false (never built,
    /// or found wrong), otherwise caught up as the module documentation says.
    pub(crate) fn catch_up(&mut self, connection: &Connection, built: bool) -> rusqlite::Result<()> {
        // A read starts the transaction's snapshot, so the counter below is the snapshot's.
        let largest: Option<i64> = connection.query_row("SELECT max(rowid) FROM sessions", [], |row| row.get(0))?;
        let data_version: i64 = connection.query_row("PRAGMA data_version", [], |row| row.get(0))?;
        if !built {
            return self.build(connection);
        }
        if data_version == self.data_version && self.touched.is_empty() {
            return Ok(());
        }
        let kept = match &self.last {
            None => true,
            Some(last) => last_row(connection, last.rowid)?.is_some_and(|now| now == *last),
        };
        if !kept || largest.unwrap_or(0) < self.last.as_ref().map_or(0, |last| last.rowid) {
            return self.build(connection);
        }
        let after = self.last.as_ref().map_or(i64::MIN, |last| last.rowid);
        self.add_rows(connection, "WHERE rowid > ?1", [after])?;
        for id in std::mem::take(&mut self.touched) {
            if let Some(rowid) = self.rowids.get(id.as_str()).copied() {
                self.remove(rowid);
            }
            self.add_rows(connection, "WHERE id = ?1", [id])?;
        }
        let n_rows: i64 = connection.query_row("SELECT count(*) FROM sessions", [], |row| row.get(0))?;
        if usize::try_from(n_rows).ok() != Some(self.rows.len()) {
            return self.build(connection);
        }
        self.data_version = data_version;
        self.last = last_of_table(connection)?;
        Ok(())
    }

    /// Builds the order from one pass over the table (in the current read transaction).
    pub(crate) fn build(&mut self, connection: &Connection) -> rusqlite::Result<()> {
        let data_version: i64 = connection.query_row("PRAGMA data_version", [], |row| row.get(0))?;
        *self = Order::default();
        self.add_rows(connection, "", [])?;
        self.data_version = data_version;
        self.last = last_of_table(connection)?;
        Ok(())
    }

    /// Records that this handle wrote `id`'s header: the next use reads its row again.
    pub(crate) fn touch(&mut self, id: &str) {
        self.touched.insert(id.to_owned());
    }

    fn add_rows<P: rusqlite::Params>(
        &mut self,
        connection: &Connection,
        filter: &str,
        params: P,
    ) -> rusqlite::Result<()> {
        let mut statement =
            connection.prepare_cached(&format!("SELECT rowid, {ORDER_COLUMNS} FROM sessions {filter}"))?;
        let mut rows = statement.query(params)?;
        while let Some(row) = rows.next()? {
            let rowid: i64 = row.get(0)?;
            let columns = Columns::read(row, 1, &mut self.interner)?;
            self.insert(rowid, columns);
        }
        Ok(())
    }

    fn insert(&mut self, rowid: i64, columns: Columns) {
        if self.rows.contains_key(&rowid) {
            self.remove(rowid);
        }
        self.places.insert(columns.place(rowid));
        if let Some(parent) = &columns.parent {
            self.children.entry(Arc::clone(parent)).or_default().insert(rowid);
        }
        self.rowids.insert(Arc::clone(&columns.id), rowid);
        self.rows.insert(rowid, columns);
    }

    fn remove(&mut self, rowid: i64) {
        let Some(columns) = self.rows.remove(&rowid) else { return };
        self.places.remove(&columns.place(rowid));
        if let Some(parent) = &columns.parent
            && let Some(rowids) = self.children.get_mut(parent)
        {
            rowids.remove(&rowid);
            if rowids.is_empty() {
                self.children.remove(parent);
            }
        }
        if self.rowids.get(&columns.id) == Some(&rowid) {
            self.rowids.remove(&columns.id);
        }
    }

    /// The entry of `rowid`, to compare a row read back with.
    pub(crate) fn columns(&self, rowid: i64) -> Option<&Columns> {
        self.rows.get(&rowid)
    }

    /// The first `room` rows of `request`'s range that its filters let through, in page order.
    pub(crate) fn page_rows(&self, request: &PageRequest, room: usize) -> Vec<i64> {
        let start = match &request.after {
            None => Bound::Unbounded,
            Some(PageKey { created_at, id }) => Bound::Excluded(Place {
                newest: Reverse(i64::try_from(*created_at).unwrap_or(i64::MAX)),
                id: Arc::from(id.as_str()),
                rowid: i64::MAX,
            }),
        };
        self.places
            .range((start, Bound::Unbounded))
            .filter(|place| self.rows.get(&place.rowid).is_some_and(|columns| columns.passes(request)))
            .take(room)
            .map(|place| place.rowid)
            .collect()
    }

    /// The subagent rows naming `parent` as theirs, of `owner` (any owner's for `None`).
    pub(crate) fn subagent_children(&self, parent: &str, owner: Option<&str>) -> Vec<i64> {
        self.children_of(parent)
            .filter(|rowid| {
                self.rows.get(rowid).is_some_and(|columns| {
                    columns.is_subagent() && owner.is_none_or(|owner| columns.owner.as_deref() == Some(owner))
                })
            })
            .collect()
    }

    /// The rows a family of `parent` is cut from: its own, its children's, theirs.
    pub(crate) fn family_rows(&self, parent: &str) -> Vec<i64> {
        let mut rowids: Vec<i64> = self.rowids.get(parent).copied().into_iter().collect();
        for child in self.children_of(parent) {
            rowids.push(child);
            if let Some(columns) = self.rows.get(&child) {
                rowids.extend(self.children_of(&columns.id));
            }
        }
        rowids.sort_unstable();
        rowids.dedup();
        rowids
    }

    /// The rows with `created_at >= since`.
    pub(crate) fn created_since(&self, since: i64) -> Vec<i64> {
        self.places.iter().take_while(|place| place.newest.0 >= since).map(|place| place.rowid).collect()
    }

    fn children_of(&self, parent: &str) -> impl Iterator<Item = i64> + '_ {
        self.children.get(parent).into_iter().flatten().copied()
    }

    /// How many rows the order holds.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.rows.len()
    }
}

/// The row with the largest rowid in the snapshot (the order's too, once it caught up).
fn last_of_table(connection: &Connection) -> rusqlite::Result<Option<Last>> {
    let largest: Option<i64> = connection.query_row("SELECT max(rowid) FROM sessions", [], |row| row.get(0))?;
    match largest {
        Some(rowid) => last_row(connection, rowid),
        None => Ok(None),
    }
}

/// The row at `rowid`: its id and incarnation.
fn last_row(connection: &Connection, rowid: i64) -> rusqlite::Result<Option<Last>> {
    connection
        .prepare_cached("SELECT id, incarnation FROM sessions WHERE rowid = ?1")?
        .query_row([rowid], |row| {
            let text = |idx| match row.get_ref(idx) {
                Ok(ValueRef::Text(bytes)) => String::from_utf8_lossy(bytes).into_owned(),
                _ => String::new(),
            };
            Ok(Last { rowid, id: Arc::from(text(0)), incarnation: text(1) })
        })
        .optional()
}

#[cfg(test)]
mod tests;
