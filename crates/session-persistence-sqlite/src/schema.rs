//! The database's identity and schema (reference 05 §2.2–§3): the exact schema text, the
//! identity pragmas, and the checks every connection runs when it opens and every mutating
//! transaction runs again before it writes.

use std::{
    path::Path,
    sync::OnceLock,
    time::{Duration, Instant},
};

use rusqlite::{Connection, ErrorCode, OpenFlags, OptionalExtension, Transaction, TransactionBehavior};
use session_persistence::PersistenceError;

use crate::{
    config::{Access, JournalMode},
    error::sqlite_error,
};

/// `PRAGMA application_id`: 0x44534850, ASCII `DSHP`.
pub const APPLICATION_ID: i64 = 1_146_308_688;
/// `PRAGMA user_version`: the reference's schema 18.
pub const USER_VERSION: i64 = 18;

/// The schema, statement by statement, in the reference's exact text (SQLite stores it as
/// written, and the reference compares it, whitespace collapsed, on every open).
pub const SCHEMA: [&str; 3] = [
    "CREATE TABLE persistence_state (\n  singleton INTEGER PRIMARY KEY CHECK (singleton = 1),\n  store_id  TEXT NOT NULL\n) STRICT",
    "CREATE TABLE sessions (\n  id               TEXT PRIMARY KEY,\n  version          INTEGER NOT NULL,\n  created_at       INTEGER NOT NULL,\n  cwd              TEXT,\n  parent_session   TEXT,\n  seed_length      INTEGER,\n  origin           TEXT,\n  delegation_depth INTEGER,\n  agent_preset     TEXT,\n  owner            TEXT,\n  incarnation      TEXT NOT NULL,\n  revision         INTEGER NOT NULL\n) STRICT",
    "CREATE TABLE events (\n  session_id        TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,\n  seq               INTEGER NOT NULL,\n  type              TEXT NOT NULL,\n  time              INTEGER NOT NULL,\n  data              ANY NOT NULL,\n  source_event_seqs ANY,\n  surface_op        TEXT,\n  ignorable         INTEGER CHECK (ignorable IS NULL OR ignorable IN (0, 1)),\n  PRIMARY KEY (session_id, seq)\n) STRICT",
];

const SELECT_SCHEMA_OBJECTS: &str =
    "SELECT type, name, tbl_name, sql FROM sqlite_schema WHERE name NOT GLOB 'sqlite_*' ORDER BY type, name";

/// One row of [`SELECT_SCHEMA_OBJECTS`], its `sql` with whitespace collapsed.
type SchemaObject = (String, String, String, Option<String>);

/// Collapses every run of whitespace to one space and trims the ends.
fn collapse(sql: &str) -> String {
    sql.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn schema_objects(connection: &Connection) -> rusqlite::Result<Vec<SchemaObject>> {
    let mut statement = connection.prepare_cached(SELECT_SCHEMA_OBJECTS)?;
    let rows = statement.query_map([], |row| {
        let sql: Option<String> = row.get(3)?;
        Ok((row.get(0)?, row.get(1)?, row.get(2)?, sql.as_deref().map(collapse)))
    })?;
    rows.collect()
}

/// The schema objects of a fresh database built from [`SCHEMA`], as the reference computes them:
/// one table per statement, named by it, in [`SELECT_SCHEMA_OBJECTS`]' order (its primary keys'
/// indexes are `sqlite_*` objects, which the query leaves out). Derived from the text rather than
/// by building the schema in a database, which cost every process that opens a store about as
/// much as the rest of its open (test `the_expected_objects_are_those_of_a_fresh_database`).
fn expected_objects() -> &'static [SchemaObject] {
    static EXPECTED: OnceLock<Vec<SchemaObject>> = OnceLock::new();
    EXPECTED.get_or_init(|| {
        let mut objects: Vec<SchemaObject> = SCHEMA
            .iter()
            .map(|sql| {
                // Invariant: every statement of `SCHEMA` is `CREATE TABLE <name> (...`.
                let name = sql.split_whitespace().nth(2).expect("a CREATE TABLE statement names its table");
                ("table".to_owned(), name.to_owned(), name.to_owned(), Some(collapse(sql)))
            })
            .collect();
        objects.sort();
        objects
    })
}

/// What a connection is for: the writer may initialize a pristine file and sets the journal
/// mode; a reader only checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    Writer,
    Reader,
}

/// Everything an open needs to know.
#[derive(Debug, Clone, Copy)]
pub(crate) struct OpenSpec<'a> {
    /// The file, or `None` for `:memory:`.
    pub(crate) file: Option<&'a Path>,
    /// The path messages name.
    pub(crate) shown: &'a Path,
    pub(crate) access: Access,
    pub(crate) role: Role,
    pub(crate) journal_mode: JournalMode,
    pub(crate) busy_timeout: Duration,
}

impl OpenSpec<'_> {
    fn refused(&self, message: String) -> PersistenceError {
        PersistenceError::Refused { path: self.shown.to_owned(), message }
    }

    fn error(&self) -> impl Fn(rusqlite::Error) -> PersistenceError + '_ {
        move |error| sqlite_error(self.shown, error)
    }

    fn at(&self) -> String {
        format!("session database at \"{}\"", self.shown.display())
    }
}

/// Opens a connection and runs the reference's open sequence (§2.2): connection pragmas read
/// back, the identity and schema checked (a pristine file initialized by a writer) in one
/// transaction, the journal mode set, `synchronous = FULL` read back, and the store identity
/// read. Returns the connection and the store id.
pub(crate) fn open_connection(spec: &OpenSpec<'_>) -> Result<(Connection, String), PersistenceError> {
    let error = spec.error();
    let mut connection = match spec.file {
        None => Connection::open_in_memory().map_err(&error)?,
        Some(path) => {
            let flags = OpenFlags::SQLITE_OPEN_NO_MUTEX | OpenFlags::SQLITE_OPEN_URI;
            match spec.access {
                Access::ReadWrite => Connection::open_with_flags(path, flags | OpenFlags::SQLITE_OPEN_READ_WRITE),
                Access::ReadOnly => Connection::open_with_flags(path, flags | OpenFlags::SQLITE_OPEN_READ_ONLY),
                Access::Immutable => {
                    Connection::open_with_flags(immutable_uri(path), flags | OpenFlags::SQLITE_OPEN_READ_ONLY)
                }
            }
            .map_err(&error)?
        }
    };
    connection.busy_timeout(spec.busy_timeout).map_err(&error)?;
    stable_plans(&connection).map_err(&error)?;
    let pragma = |connection: &Connection, name: &str| -> Result<i64, PersistenceError> {
        connection.query_row(&format!("PRAGMA {name}"), [], |row| row.get(0)).map_err(&error)
    };
    connection.execute_batch("PRAGMA trusted_schema = OFF;").map_err(&error)?;
    let trusted = pragma(&connection, "trusted_schema")?;
    if trusted != 0 {
        return Err(spec.refused(format!("{} retained trusted_schema={trusted}, expected 0", spec.at())));
    }
    connection.execute_batch("PRAGMA mmap_size = 0;").map_err(&error)?;
    if spec.file.is_some() {
        let mmap = pragma(&connection, "mmap_size")?;
        if mmap != 0 {
            return Err(spec.refused(format!("{} retained mmap_size={mmap}, expected 0", spec.at())));
        }
    }
    connection.execute_batch("PRAGMA foreign_keys = ON;").map_err(&error)?;
    check_identity(spec, &mut connection)?;
    if spec.access == Access::ReadWrite && spec.role == Role::Writer {
        set_journal_mode(spec, &connection)?;
    }
    connection.execute_batch("PRAGMA synchronous = FULL;").map_err(&error)?;
    let synchronous = pragma(&connection, "synchronous")?;
    if synchronous != 2 {
        return Err(spec.refused(format!("{} retained synchronous={synchronous}, expected FULL (2)", spec.at())));
    }
    let store_id: Option<String> = connection
        .query_row("SELECT store_id FROM persistence_state WHERE singleton = 1", [], |row| row.get(0))
        .optional()
        .map_err(&error)?;
    match store_id {
        Some(store_id) if is_reference_uuid(&store_id) => Ok((connection, store_id)),
        _ => Err(spec.refused(format!("{} has no valid store identity", spec.at()))),
    }
}

/// Turns on the query planner stability guarantee (`SQLITE_DBCONFIG_ENABLE_QPSG`) for
/// `connection`. Without it, this build of SQLite (with STAT4) marks a statement whose plan may
/// depend on a bound value (`seq >= ?2`, say) to be prepared again after every new binding: a
/// cached statement then costs a full parse and plan per use, which was 40 % of a listing's
/// 1,000 cold reads. Every statement here is a key lookup or a range on a key, so one plan
/// serves every value. Tested by `tests::cached_statements_are_not_prepared_again_per_binding`.
pub(crate) fn stable_plans(connection: &Connection) -> rusqlite::Result<()> {
    connection.set_db_config(rusqlite::config::DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG, true).map(|_| ())
}

/// The `file:` URI that opens `path` with `immutable=1`.
fn immutable_uri(path: &Path) -> String {
    let mut uri = String::from("file:");
    for byte in path.as_os_str().as_encoded_bytes() {
        match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'/' | b'-' | b'_' | b'.' | b'~' => uri.push(char::from(*byte)),
            other => uri.push_str(&format!("%{other:02X}")),
        }
    }
    uri.push_str("?immutable=1");
    uri
}

/// §2.2 step 5: the identity pragmas and the schema, in one transaction (immediate for a writer,
/// which initializes a pristine file inside it).
fn check_identity(spec: &OpenSpec<'_>, connection: &mut Connection) -> Result<(), PersistenceError> {
    let error = spec.error();
    let writer = spec.access == Access::ReadWrite && spec.role == Role::Writer;
    let behavior = if writer { TransactionBehavior::Immediate } else { TransactionBehavior::Deferred };
    let transaction = connection.transaction_with_behavior(behavior).map_err(&error)?;
    let version: i64 = transaction.query_row("PRAGMA user_version", [], |row| row.get(0)).map_err(&error)?;
    let application_id: i64 = transaction.query_row("PRAGMA application_id", [], |row| row.get(0)).map_err(&error)?;
    let n_objects: i64 = transaction
        .query_row("SELECT COUNT(*) AS count FROM sqlite_schema WHERE name NOT GLOB 'sqlite_*'", [], |row| row.get(0))
        .map_err(&error)?;
    if version == 0 && (application_id != 0 || n_objects > 0) {
        return Err(spec.refused(format!("{} has an unversioned schema or application identity", spec.at())));
    }
    if version != 0 && version != USER_VERSION {
        return Err(spec.refused(format!(
            "{} has schema version {version}, incompatible with this build ({USER_VERSION})",
            spec.at()
        )));
    }
    if version != 0 && application_id != APPLICATION_ID {
        return Err(
            spec.refused(format!("{} has application id {application_id}, expected {APPLICATION_ID}", spec.at()))
        );
    }
    if version == 0 {
        if !writer {
            return Err(spec.refused(format!(
                "{} is empty (no schema yet); a read-only store cannot initialize it: open it read-write once",
                spec.at()
            )));
        }
        initialize(&transaction).map_err(&error)?;
    }
    check_schema(&transaction, spec.shown)?;
    transaction.commit().map_err(&error)
}

/// §2.3: the schema, the store identity row and the identity pragmas of a pristine file.
fn initialize(transaction: &Transaction<'_>) -> rusqlite::Result<()> {
    for statement in SCHEMA {
        transaction.execute_batch(statement)?;
    }
    let store_id = uuid::Uuid::new_v4().to_string();
    transaction.execute("INSERT INTO persistence_state (singleton, store_id) VALUES (1, ?)", [store_id])?;
    transaction
        .execute_batch(&format!("PRAGMA application_id = {APPLICATION_ID}; PRAGMA user_version = {USER_VERSION};"))
}

/// §3.2: the schema objects must equal the reference's, statement text included.
pub(crate) fn check_schema(connection: &Connection, shown: &Path) -> Result<(), PersistenceError> {
    let objects = schema_objects(connection).map_err(|error| sqlite_error(shown, error))?;
    if objects != expected_objects() {
        return Err(PersistenceError::Refused {
            path: shown.to_owned(),
            message: format!(
                "session database at \"{}\" does not contain the required schema objects",
                shown.display()
            ),
        });
    }
    Ok(())
}

/// §6 step 3: identity and schema again, inside a mutating transaction, in the reference's order.
pub(crate) fn check_before_mutation(connection: &Connection, shown: &Path) -> Result<(), PersistenceError> {
    let error = |error| sqlite_error(shown, error);
    let refused = |message: String| PersistenceError::Refused { path: shown.to_owned(), message };
    let application_id: i64 = connection.query_row("PRAGMA application_id", [], |row| row.get(0)).map_err(error)?;
    if application_id != APPLICATION_ID {
        return Err(refused(format!(
            "session database application id changed before mutation (expected {APPLICATION_ID}, got {application_id})"
        )));
    }
    check_schema(connection, shown)?;
    let version: i64 = connection.query_row("PRAGMA user_version", [], |row| row.get(0)).map_err(error)?;
    if version != USER_VERSION {
        return Err(refused(format!(
            "session database schema changed before mutation (expected {USER_VERSION}, got {version})"
        )));
    }
    Ok(())
}

/// §2.2 step 6: sets the journal mode, retrying while another connection holds the database,
/// until the busy timeout measured from now.
fn set_journal_mode(spec: &OpenSpec<'_>, connection: &Connection) -> Result<(), PersistenceError> {
    let deadline = Instant::now() + spec.busy_timeout;
    let wanted = spec.journal_mode.as_str();
    let sql = format!("PRAGMA journal_mode = {}", wanted.to_uppercase());
    let mode: String = loop {
        match connection.query_row(&sql, [], |row| row.get::<_, String>(0)) {
            Ok(mode) => break mode,
            Err(error) if error.sqlite_error_code() == Some(ErrorCode::DatabaseBusy) && Instant::now() < deadline => {
                // A true delay, not a test's wait: another connection's lock has no wake-up to
                // wait on, so the open retries the pragma every few milliseconds until the busy
                // timeout, as SQLite's own busy handler does for a statement.
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(error) => return Err(sqlite_error(spec.shown, error)),
        }
    };
    let mode = mode.to_lowercase();
    let expected = if spec.file.is_none() { "memory" } else { wanted };
    if mode != expected {
        return Err(spec.refused(format!("{} selected journal mode {mode}, expected {expected}", spec.at())));
    }
    Ok(())
}

/// The reference's UUID pattern, case-insensitive:
/// `^[0-9a-f]{8}-[0-9a-f]{4}-[1-8][0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`.
pub(crate) fn is_reference_uuid(text: &str) -> bool {
    let bytes = text.as_bytes();
    if bytes.len() != 36 {
        return false;
    }
    bytes.iter().enumerate().all(|(idx, byte)| {
        let lower = byte.to_ascii_lowercase();
        match idx {
            8 | 13 | 18 | 23 => lower == b'-',
            14 => (b'1'..=b'8').contains(&lower),
            19 => matches!(lower, b'8' | b'9' | b'a' | b'b'),
            _ => lower.is_ascii_hexdigit(),
        }
    })
}

#[cfg(test)]
mod tests {
    use rusqlite::StatementStatus;

    use crate::{SqliteConfig, SqliteStore, codec::ROW_COLUMNS};

    /// The objects derived from the schema's text are those SQLite reports for a fresh database
    /// built from it, which is what an open compares a file's with.
    #[test]
    fn the_expected_objects_are_those_of_a_fresh_database() {
        let connection = rusqlite::Connection::open_in_memory().unwrap();
        for statement in super::SCHEMA {
            connection.execute_batch(statement).unwrap();
        }
        let built = super::schema_objects(&connection).unwrap();
        assert_eq!(built.len(), super::SCHEMA.len());
        assert_eq!(super::expected_objects(), built.as_slice());
    }

    /// A cached statement bound to one session and then another is not parsed again: every read
    /// of a listing's many cold children reuses its plan.
    #[test]
    fn cached_statements_are_not_prepared_again_per_binding() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(SqliteConfig::file(dir.path().join("sessions.db"))).unwrap();
        let sql = format!("SELECT {ROW_COLUMNS} FROM events WHERE session_id = ?1 AND seq >= ?2 ORDER BY seq");
        store
            .with_reader(|connection| {
                for (idx, id) in ["a", "b", "c", "d"].into_iter().enumerate() {
                    let mut statement = connection.prepare_cached(&sql).unwrap();
                    let mut rows = statement.query(rusqlite::params![id, idx as i64]).unwrap();
                    assert!(rows.next().unwrap().is_none());
                    drop(rows);
                    assert_eq!(statement.get_status(StatementStatus::RePrepare), 0, "after {id}");
                }
                Ok(())
            })
            .unwrap();
        let checkpoints =
            crate::SqliteCheckpointStore::open(&crate::config::Target::File(dir.path().join("cache.db"))).unwrap();
        let connection = checkpoints.connection_for_tests();
        let mut statement = connection.prepare("SELECT record FROM checkpoint_records WHERE id = ?1").unwrap();
        for id in ["a", "b", "c"] {
            assert!(statement.query([id]).unwrap().next().unwrap().is_none());
        }
        assert_eq!(statement.get_status(StatementStatus::RePrepare), 0);
    }
}
