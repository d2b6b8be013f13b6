//! `SqliteStore`: the [`Backend`] over one SQLite database (reference 05): atomic appends with
//! the stale-writer check in one immediate transaction, atomic repair, seek reads, per-row faults
//! in listings.
//!
//! Connections: a writable file store writes through one connection and reads through a small
//! pool of its own connections, so reads run beside each other and beside the writer (WAL). An
//! in-memory store has one connection for everything; its reads decode under the connection's
//! lock and hand the events on after it is released, so a slow sink never holds the database.

use std::{
    collections::HashMap,
    fmt,
    fs::{File, Metadata},
    os::unix::fs::MetadataExt,
    path::{Path, PathBuf},
    sync::Arc,
};

use parking_lot::Mutex;
use rusqlite::{Connection, Transaction, TransactionBehavior};
use session_core::{SessionEvent, SessionHeader, SessionId};
use session_persistence::{
    Backend, CorruptKind, FencedWrite, HeaderPage, Listing, Location, PageRequest, PersistenceError, Result, Revision,
    ScanOutcome, ScanSink, SessionPosition, SharedChangeSink, StoredHeader, SurveyEntry, TornTail, Watch, WatchOptions,
};
use tokio_util::sync::CancellationToken;

use crate::{
    ahead,
    codec::{NewRow, pack_batch, scalar_row},
    config::{Access, SqliteConfig, Target},
    error::sqlite_error,
    lease::{Lease, RepairHold, hold_writer_lock, writer_lock_held},
    order::OrderSlot,
    position::{ChangeMark, next_seqs_at_once, with_holds},
    rules::{self, SESSION_DATABASE},
    scan::{RowScan, ScanContext, next_seq, scan_rows, seek_base, to_sql_seq},
    schema::{OpenSpec, Role, check_before_mutation, open_connection},
    sessions::{StoredSession, checked_session, read_session, upsert_session},
    watch::{self, OwnWrites, WatchSpec},
};

/// The SQLite backend. See the module documentation.
pub struct SqliteStore {
    config: SqliteConfig,
    /// The absolute database file; `None` for `:memory:`.
    file: Option<PathBuf>,
    /// The path messages name.
    shown: PathBuf,
    /// `file:<dev>:<ino>:<birthtimeNs>:store:<store_id>` or `memory:store:<store_id>` (§2.2 step 9).
    store_identity: String,
    /// The writing connection (the only connection of an in-memory store); `None` when read-only.
    writer: Option<Mutex<Connection>>,
    /// Idle read connections of a file store.
    readers: Mutex<Vec<Connection>>,
    /// Set when a failed write could not be rolled back: every later write is refused.
    poisoned: Mutex<Option<String>>,
    /// The shared lock a writable file store holds on `<database>.writer-lock` while it lives.
    _writer_lock: Option<File>,
    /// The writer leases this store holds: one per session live in this process (file stores).
    leases: Mutex<HashMap<SessionId, Lease>>,
    /// What this handle's commits and releases leave for its watches to skip.
    own_writes: Arc<OwnWrites>,
    /// A file store's newest-first order of its rows and the connection it lives on (see the
    /// `order` module); empty until a page, family or `created_since` first asks.
    order: Option<OrderSlot>,
}

impl fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqliteStore")
            .field("path", &self.shown)
            .field("access", &self.config.access)
            .field("store_identity", &self.store_identity)
            .finish_non_exhaustive()
    }
}

impl SqliteStore {
    /// Opens the database `config` names. A writable file store applies the path rules (creating
    /// the parent directory with mode 0700 and the file with mode 0600 if they are missing),
    /// initializes a pristine file and sets the journal mode; every store checks the identity,
    /// the schema and the connection settings. Blocks on I/O and on other connections' locks (up
    /// to the busy timeout): async callers run it on the blocking pool.
    pub fn open(config: SqliteConfig) -> Result<SqliteStore> {
        if config.busy_timeout.as_millis() > 2_147_483_647 {
            return Err(PersistenceError::invalid_input("busyTimeoutMs must be an integer from 0 to 2147483647"));
        }
        let (file, shown) = match &config.target {
            Target::Memory => {
                if config.access.is_read_only() {
                    return Err(PersistenceError::invalid_input(
                        "an in-memory session database cannot be opened read-only: it would always be empty",
                    ));
                }
                (None, PathBuf::from(":memory:"))
            }
            Target::File(path) => {
                let path = rules::absolute(path)?;
                (Some(path.clone()), path)
            }
        };
        let metadata = match &file {
            None => None,
            Some(path) => Some(prepare_file(path, config.access)?),
        };
        let spec = OpenSpec {
            file: file.as_deref(),
            shown: &shown,
            access: config.access,
            role: Role::Writer,
            journal_mode: config.journal_mode,
            busy_timeout: config.busy_timeout,
        };
        let (connection, store_id) = open_connection(&spec)?;
        let store_identity = match &metadata {
            None => format!("memory:store:{store_id}"),
            Some(metadata) => format!("{}:store:{store_id}", file_identity(metadata)),
        };
        let writer_lock = match &file {
            Some(path) if config.access == Access::ReadWrite => Some(hold_writer_lock(path)?),
            _ => None,
        };
        let (writer, readers) = if config.access.is_read_only() {
            (None, vec![connection])
        } else {
            (Some(Mutex::new(connection)), Vec::new())
        };
        let order = file.as_ref().map(|_| Mutex::new(None));
        Ok(SqliteStore {
            config,
            file,
            shown,
            store_identity,
            writer,
            readers: Mutex::new(readers),
            poisoned: Mutex::new(None),
            _writer_lock: writer_lock,
            leases: Mutex::new(HashMap::new()),
            own_writes: Arc::new(OwnWrites::default()),
            order,
        })
    }

    /// Opens the database at `path` for reading: through SQLite's locks, so a writer may run
    /// meanwhile; or, where that cannot work because the file's directory is read-only (SQLite
    /// could not create the `-shm` file), immutable.
    pub fn open_for_reading(path: impl Into<PathBuf>) -> Result<SqliteStore> {
        let path = path.into();
        match SqliteStore::open(SqliteConfig::file(&path).with_access(Access::ReadOnly)) {
            Err(error) if is_read_only_place(&error) => {
                SqliteStore::open(SqliteConfig::file(&path).with_access(Access::Immutable))
            }
            opened => opened,
        }
    }

    /// Whether a writable store (of this crate, in any process) has the database open right now.
    /// A read-only store asks before it judges open turns: while a writer runs, a log that ends
    /// inside a turn may be live. A writable store answers `false`. Writers of other programs
    /// (the reference) take no such lock and are not seen.
    pub fn writer_active(&self) -> Result<bool> {
        let Some(path) = self.file.as_deref().filter(|_| self.is_read_only()) else { return Ok(false) };
        writer_lock_held(path)
    }

    /// The database file (absolute), or `:memory:`.
    pub fn path(&self) -> &Path {
        &self.shown
    }

    /// How the store was opened.
    pub fn access(&self) -> Access {
        self.config.access
    }

    /// Whether the store refuses writes ([`Access::ReadOnly`] or [`Access::Immutable`]).
    pub fn is_read_only(&self) -> bool {
        self.config.access.is_read_only()
    }

    /// The store's identity as revisions carry it: the file's device, inode and birth time with
    /// the database's `store_id`.
    pub fn store_identity(&self) -> &str {
        &self.store_identity
    }

    /// The record of this handle's own writes, for the poller's unit tests.
    #[cfg(test)]
    pub(crate) fn own_writes(&self) -> Arc<OwnWrites> {
        Arc::clone(&self.own_writes)
    }

    fn ctx<'a>(&'a self, id: &'a SessionId) -> ScanContext<'a> {
        ScanContext { id, shown: &self.shown }
    }

    pub(crate) fn revision_of(&self, session: &StoredSession) -> Revision {
        Revision::new(format!(
            "{}:incarnation:{}:revision:{}",
            self.store_identity, session.incarnation, session.revision
        ))
    }

    pub(crate) fn sql_error(&self) -> impl Fn(rusqlite::Error) -> PersistenceError + '_ {
        move |error| sqlite_error(&self.shown, error)
    }

    /// Runs `read` on a read connection: the in-memory store's one connection, else an idle
    /// pooled one or a new one, returned to the pool afterwards.
    pub(crate) fn with_reader<T>(&self, read: impl FnOnce(&mut Connection) -> Result<T>) -> Result<T> {
        let Some(file) = &self.file else {
            // Invariant: an in-memory store is always writable, so its one connection is the writer.
            let writer = self.writer.as_ref().expect("an in-memory store has its connection");
            return read(&mut writer.lock());
        };
        let pooled = self.readers.lock().pop();
        let mut connection = match pooled {
            Some(connection) => connection,
            None => self.open_reader(file)?,
        };
        let result = read(&mut connection);
        // A connection left inside a transaction by a failed read is not reused.
        if connection.is_autocommit() {
            let mut idle = self.readers.lock();
            if idle.len() < self.config.max_idle_readers.max(1) {
                idle.push(connection);
            }
        }
        result
    }

    /// A new read connection to the file store's database at `file`.
    pub(crate) fn open_reader(&self, file: &Path) -> Result<Connection> {
        let spec = OpenSpec {
            file: Some(file),
            shown: &self.shown,
            access: self.config.access,
            role: Role::Reader,
            journal_mode: self.config.journal_mode,
            busy_timeout: self.config.busy_timeout,
        };
        Ok(open_connection(&spec)?.0)
    }

    /// The file store's order and its connection; `None` for `:memory:`.
    pub(crate) fn order_slot(&self) -> Option<(&OrderSlot, &Path)> {
        self.order.as_ref().zip(self.file.as_deref())
    }

    /// Runs `write` in one immediate transaction on the writing connection, after the identity
    /// and schema checks (§6 step 3); commits on success, rolls back on failure. A rollback that
    /// fails poisons the store.
    ///
    /// `write` returns the change mark its revision bump left on `id`'s row, which a running
    /// watch of this handle is told with the commit (see the `watch` module).
    fn write_transaction(
        &self,
        what: &str,
        id: &SessionId,
        write: impl FnOnce(&Transaction<'_>) -> Result<ChangeMark>,
    ) -> Result<()> {
        let Some(writer) = &self.writer else {
            return Err(PersistenceError::invalid_input(format!(
                "session database \"{}\" is open read-only ({}); writes are refused: open it read-write to {what}",
                self.shown.display(),
                if self.config.access == Access::Immutable { "immutable" } else { "read-only" },
            )));
        };
        if let Some(message) = self.poisoned.lock().clone() {
            return Err(PersistenceError::Poisoned { message });
        }
        let mut connection = writer.lock();
        let transaction =
            connection.transaction_with_behavior(TransactionBehavior::Immediate).map_err(self.sql_error())?;
        let written = check_before_mutation(&transaction, &self.shown).and_then(|()| write(&transaction));
        match written {
            Ok(mark) => self.own_writes.commit(id, mark, || transaction.commit().map_err(self.sql_error())),
            Err(error) => {
                if let Err(rollback) = transaction.rollback() {
                    let message = format!(
                        "session-persistence-sqlite {what} failed and rollback also failed: {error}; rollback: {rollback}"
                    );
                    *self.poisoned.lock() = Some(message.clone());
                    return Err(PersistenceError::Poisoned { message });
                }
                Err(error)
            }
        }
    }

    /// Reads the `sessions` row of `id` and its rows from `from_seq` on (a whole log for 0), in
    /// one read transaction, handing the header and then each event to `sink`. A long read of a
    /// file store whose sink allows it steps its statements on a helper thread ([`ahead`]).
    fn read_log(
        &self,
        connection: &mut Connection,
        id: &SessionId,
        from_seq: u64,
        cancel: &CancellationToken,
        sink: &mut dyn ScanSink,
    ) -> Result<Option<(StoredSession, RowScan)>> {
        let ctx = self.ctx(id);
        if self.file.is_some()
            && sink.read_ahead()
            && ahead::worth_it(connection, ctx, from_seq)?
            && let Some(read) = ahead::read_log(connection, ctx, from_seq, cancel, sink)
        {
            return read;
        }
        let transaction = connection.transaction().map_err(self.sql_error())?;
        let found = read_session(&transaction, id).map_err(self.sql_error())?;
        let Some(session) = checked_session(id, found)? else {
            return Ok(None);
        };
        sink.header(&Arc::new(session.header.clone()))?;
        let base = if from_seq == 0 { 0 } else { seek_base(&transaction, ctx, from_seq)? };
        let scan = scan_rows(&transaction, ctx, base, from_seq, cancel, &mut |event| sink.event(Arc::new(event)))?;
        transaction.commit().map_err(self.sql_error())?;
        Ok(Some((session, scan)))
    }

    /// [`read_log`](Self::read_log) into `sink`. A file store streams as it decodes; an in-memory
    /// store decodes under its connection's lock and streams afterwards.
    fn read_into(
        &self,
        id: &SessionId,
        from_seq: u64,
        cancel: &CancellationToken,
        sink: &mut dyn ScanSink,
    ) -> Result<Option<ScanOutcome>> {
        if cancel.is_cancelled() {
            return Err(PersistenceError::Cancelled);
        }
        let read = if self.file.is_some() {
            self.with_reader(|connection| self.read_log(connection, id, from_seq, cancel, sink))?
        } else {
            let mut held = Held::default();
            let read = self.with_reader(|connection| self.read_log(connection, id, from_seq, cancel, &mut held))?;
            if read.is_some() {
                held.replay(cancel, sink)?;
            }
            read
        };
        let Some((session, scan)) = read else { return Ok(None) };
        Ok(Some(ScanOutcome {
            revision: self.revision_of(&session),
            header: Arc::new(session.header),
            n_events: scan.n_events,
            // A seek read's tail is what it saw, not a repair marker.
            torn: scan
                .torn_from
                .filter(|_| from_seq == 0)
                .map(|seq| TornTail { truncate_to: seq, recovered: Vec::new() }),
            n_bytes: scan.n_bytes,
        }))
    }

    fn insert_rows(&self, transaction: &Transaction<'_>, id: &SessionId, rows: &[NewRow<'_>]) -> Result<()> {
        let mut statement = transaction
            .prepare_cached(
                "INSERT INTO events (session_id, seq, type, time, data, source_event_seqs, surface_op, ignorable) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            )
            .map_err(self.sql_error())?;
        for row in rows {
            statement
                .execute(rusqlite::params![
                    id.as_str(),
                    to_sql_seq(row.seq),
                    row.kind,
                    row.time,
                    row.data,
                    row.sources,
                    row.surface_op,
                    row.ignorable,
                ])
                .map_err(self.sql_error())?;
        }
        Ok(())
    }

    /// Adds 1 to `id`'s revision and returns the row's change mark after it.
    fn bump_revision(&self, transaction: &Transaction<'_>, id: &SessionId) -> Result<ChangeMark> {
        let mut statement = transaction
            .prepare_cached("UPDATE sessions SET revision = revision + 1 WHERE id = ?1 RETURNING incarnation, revision")
            .map_err(self.sql_error())?;
        let marks: Vec<ChangeMark> = statement
            .query_map([id.as_str()], |row| {
                Ok(ChangeMark { incarnation: row.get::<_, String>(0).unwrap_or_default(), revision: row.get(1)? })
            })
            .map_err(self.sql_error())?
            .collect::<rusqlite::Result<_>>()
            .map_err(self.sql_error())?;
        match <[ChangeMark; 1]>::try_from(marks) {
            Ok([mark]) => Ok(mark),
            Err(_) => Err(metadata_missing(id)),
        }
    }
}

fn metadata_missing(id: &SessionId) -> PersistenceError {
    PersistenceError::inconsistent(id, format!("session {id} metadata row is missing"))
}

/// What an in-memory store's read decoded, held until the connection is free again.
#[derive(Default)]
struct Held {
    header: Option<Arc<SessionHeader>>,
    events: Vec<Arc<SessionEvent>>,
}

impl ScanSink for Held {
    fn header(&mut self, header: &Arc<SessionHeader>) -> Result<()> {
        self.header = Some(Arc::clone(header));
        Ok(())
    }

    fn event(&mut self, event: Arc<SessionEvent>) -> Result<()> {
        self.events.push(event);
        Ok(())
    }
}

impl Held {
    fn replay(self, cancel: &CancellationToken, sink: &mut dyn ScanSink) -> Result<()> {
        if let Some(header) = &self.header {
            sink.header(header)?;
        }
        for (idx, event) in self.events.into_iter().enumerate() {
            if idx.is_multiple_of(4096) && cancel.is_cancelled() {
                return Err(PersistenceError::Cancelled);
            }
            sink.event(event)?;
        }
        Ok(())
    }
}

/// Applies the path rules before any SQLite call and returns the file's metadata (§2.1).
fn prepare_file(path: &Path, access: Access) -> Result<Metadata> {
    match access {
        Access::ReadWrite => {
            rules::create_parent(path)?;
            rules::check_parent(SESSION_DATABASE, path)?;
            rules::check_file(SESSION_DATABASE, path)?;
            rules::create_file(SESSION_DATABASE, path)
        }
        Access::ReadOnly | Access::Immutable => {
            let metadata = std::fs::symlink_metadata(path).map_err(|error| PersistenceError::io(path, error))?;
            rules::check_regular(SESSION_DATABASE, path, &metadata)?;
            if access == Access::Immutable {
                refuse_pending_wal(path)?;
            }
            Ok(metadata)
        }
    }
}

/// Whether an open failed because SQLite could not write beside the file (a read-only place).
fn is_read_only_place(error: &PersistenceError) -> bool {
    let PersistenceError::Io { source, .. } = error else { return false };
    source
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rusqlite::Error>())
        .and_then(rusqlite::Error::sqlite_error_code)
        .is_some_and(|code| matches!(code, rusqlite::ErrorCode::ReadOnly | rusqlite::ErrorCode::CannotOpen))
}

/// An immutable open reads the main file only: commits still in a `-wal` file would be missed.
fn refuse_pending_wal(path: &Path) -> Result<()> {
    let mut wal = path.as_os_str().to_owned();
    wal.push("-wal");
    let wal = PathBuf::from(wal);
    match std::fs::metadata(&wal) {
        Ok(metadata) if metadata.len() > 0 => Err(PersistenceError::Refused {
            path: path.to_owned(),
            message: format!(
                "session database \"{}\" has a write-ahead log ({}) that an immutable read would not see; open it \
                 read-write (in a writable directory) once to fold the log into the file",
                path.display(),
                wal.display()
            ),
        }),
        _ => Ok(()),
    }
}

/// `file:<dev>:<ino>:<birthtimeNs>` of the database file.
fn file_identity(metadata: &Metadata) -> String {
    let birth = metadata
        .created()
        .ok()
        .and_then(|created| created.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |since| since.as_nanos());
    format!("file:{}:{}:{birth}", metadata.dev(), metadata.ino())
}

impl Backend for SqliteStore {
    fn name(&self) -> &'static str {
        "sqlite"
    }

    fn scan(&self, id: &SessionId, cancel: &CancellationToken, sink: &mut dyn ScanSink) -> Result<Option<ScanOutcome>> {
        self.read_into(id, 0, cancel, sink)
    }

    /// A seek read (§10): the rows from the lowest packed row that covers `from_seq` on, so a
    /// read of a suffix costs the suffix. Only events with `seq >= from_seq` are streamed.
    fn scan_from(
        &self,
        id: &SessionId,
        from_seq: u64,
        cancel: &CancellationToken,
        sink: &mut dyn ScanSink,
    ) -> Result<Option<ScanOutcome>> {
        self.read_into(id, from_seq, cancel, sink)
    }

    fn revision(&self, id: &SessionId) -> Result<Option<Revision>> {
        self.with_reader(|connection| match read_session(connection, id).map_err(self.sql_error())? {
            None => Ok(None),
            Some(Ok(session)) => Ok(Some(self.revision_of(&session))),
            Some(Err(message)) => {
                Err(PersistenceError::corrupt(CorruptKind::Header, Location::Session { id: id.clone() }, message))
            }
        })
    }

    fn header(&self, id: &SessionId, cancel: &CancellationToken) -> Result<Option<StoredHeader>> {
        if cancel.is_cancelled() {
            return Err(PersistenceError::Cancelled);
        }
        self.with_reader(|connection| match read_session(connection, id).map_err(self.sql_error())? {
            None => Ok(None),
            Some(Ok(session)) => Ok(Some(StoredHeader {
                revision: self.revision_of(&session),
                header: Arc::new(session.header),
                n_bytes: None,
            })),
            Some(Err(message)) => {
                Err(PersistenceError::corrupt(CorruptKind::Header, Location::Session { id: id.clone() }, message))
            }
        })
    }

    /// One immediate transaction (§6): the identity and schema checks, the stale-writer check
    /// (the batch must start at the seq after the stored tail), the `sessions` row with the first
    /// batch, the packed rows, and the revision bump.
    fn append_batch(&self, header: &SessionHeader, events: &[Arc<SessionEvent>], materialized: bool) -> Result<()> {
        if events.is_empty() {
            return Ok(());
        }
        header.check_sizes()?;
        for event in events {
            event.check_size()?;
        }
        let id = &header.id;
        let rows = pack_batch(events);
        self.write_transaction("append", id, |transaction| {
            let stored_next = next_seq(transaction, self.ctx(id))?;
            let first = events[0].seq;
            if first != stored_next {
                // Another writer appended first, or created the session after this one found
                // the id free: the writer fence.
                return Err(PersistenceError::fenced(id, FencedWrite::Append, first, stored_next));
            }
            if !materialized {
                upsert_session(transaction, header).map_err(self.sql_error())?;
            }
            self.insert_rows(transaction, id, &rows)?;
            self.bump_revision(transaction, id)
        })?;
        if !materialized
            && let Some((slot, _)) = self.order_slot()
            && let Some((_, order)) = slot.lock().as_mut()
        {
            order.touch(id.as_str());
        }
        Ok(())
    }

    /// One immediate transaction (§11): the current torn tail must be the one the caller saw; it
    /// is deleted, the closers are inserted as scalar rows, and the revision is bumped.
    fn commit_repair(&self, header: &SessionHeader, torn: Option<&TornTail>, closers: &[SessionEvent]) -> Result<()> {
        let recovered: &[SessionEvent] = torn.map_or(&[], |torn| &torn.recovered);
        if torn.is_none() && closers.is_empty() {
            return Ok(());
        }
        let id = &header.id;
        // A session that a live writer elsewhere holds is not this repair's to close; the hold
        // keeps writers from leasing it until the transaction commits.
        let _hold = match &self.file {
            Some(file) if !self.leases.lock().contains_key(id) => Some(RepairHold::take(file, id)?),
            _ => None,
        };
        self.write_transaction("repair", id, |transaction| {
            if read_session(transaction, id).map_err(self.sql_error())?.is_none() {
                return Err(metadata_missing(id));
            }
            let scan = scan_rows(transaction, self.ctx(id), 0, u64::MAX, &CancellationToken::new(), &mut |_| Ok(()))?;
            match (torn, scan.torn_from) {
                (Some(marker), current) => {
                    if current != Some(marker.truncate_to) {
                        // Another writer repaired or wrote the tail since it was read.
                        return Err(PersistenceError::fenced(
                            id,
                            FencedWrite::TornTail,
                            marker.truncate_to,
                            scan.next_seq,
                        ));
                    }
                    transaction
                        .execute(
                            "DELETE FROM events WHERE session_id = ?1 AND seq >= ?2",
                            rusqlite::params![id.as_str(), to_sql_seq(marker.truncate_to)],
                        )
                        .map_err(self.sql_error())?;
                }
                (None, Some(current)) => {
                    return Err(PersistenceError::inconsistent(
                        id,
                        format!("session {id} repair omitted current torn tail at seq {current}"),
                    ));
                }
                (None, None) => {}
            }
            let appended: Vec<&SessionEvent> = recovered.iter().chain(closers).collect();
            if let Some(first) = appended.first()
                && first.seq != scan.next_seq
            {
                return Err(PersistenceError::fenced(id, FencedWrite::Repair, first.seq, scan.next_seq));
            }
            // Closers and repairs are never packed.
            let rows: Vec<NewRow<'_>> = appended.into_iter().map(scalar_row).collect();
            self.insert_rows(transaction, id, &rows)?;
            self.bump_revision(transaction, id)
        })
    }

    /// A lease file in `<database>.leases/` (see the `lease` module); none for an in-memory or
    /// read-only store.
    fn lease(&self, id: &SessionId) -> Result<()> {
        let Some(file) = self.file.as_deref().filter(|_| !self.is_read_only()) else { return Ok(()) };
        let mut leases = self.leases.lock();
        if !leases.contains_key(id) {
            leases.insert(id.clone(), Lease::take(file, id)?);
            self.own_writes.leased(id);
        }
        Ok(())
    }

    /// The lease ends under the leases' lock, so `positions` never probes a lease this handle
    /// is still letting go of as another writer's.
    fn end_lease(&self, id: &SessionId) {
        let mut leases = self.leases.lock();
        if let Some(lease) = leases.remove(id) {
            self.own_writes.released(id);
            lease.end();
        }
    }

    /// The listing's rows, and every session id that has event rows but no `sessions` row (a
    /// reader cannot read it and a writer cannot create it: its first batch would not start at
    /// the stored next seq), each on its own line as corrupt.
    fn survey(&self, cancel: &CancellationToken) -> Result<Vec<SurveyEntry>> {
        let listing = self.list(cancel)?;
        let orphans = self.with_reader(|connection| {
            let mut statement = connection
                .prepare_cached(
                    "SELECT session_id, COUNT(*), MAX(seq) FROM events \
                     WHERE session_id NOT IN (SELECT id FROM sessions) GROUP BY session_id",
                )
                .map_err(self.sql_error())?;
            let rows = statement
                .query_map([], |row| Ok((row.get::<_, String>(0)?, row.get::<_, i64>(1)?, row.get::<_, i64>(2)?)))
                .map_err(self.sql_error())?;
            rows.collect::<rusqlite::Result<Vec<_>>>().map_err(self.sql_error())
        })?;
        let mut entries: Vec<SurveyEntry> = listing
            .headers
            .into_iter()
            .map(|stored| SurveyEntry { id: stored.header.id.clone(), path: None, header: Ok(stored) })
            .chain(listing.faults.into_iter().map(|fault| SurveyEntry {
                id: fault.id,
                path: fault.path,
                header: Err(fault.error),
            }))
            .collect();
        for (id, n_rows, max_seq) in orphans {
            let id = SessionId::from(id);
            let message = format!(
                "session {id} has {n_rows} event row(s) (seqs up to {max_seq}) but no sessions row: it cannot be read, \
                 and creating it would fail; remove the rows (DELETE FROM events WHERE session_id = '{}') or \
                 restore the sessions row",
                id.as_str().replace('\'', "''")
            );
            let error = PersistenceError::corrupt(CorruptKind::Header, Location::Session { id: id.clone() }, message);
            entries.push(SurveyEntry { id, path: None, header: Err(error) });
        }
        entries.sort_by(|a, b| a.id.cmp(&b.id).then_with(|| a.path.cmp(&b.path)));
        Ok(entries)
    }

    /// Every `sessions` row, in id order; a row that does not decode is its own fault (the
    /// reference fails the whole listing instead). Event rows are not read.
    fn list(&self, cancel: &CancellationToken) -> Result<Listing> {
        self.listing("", [], cancel)
    }

    /// One page, or one family, from the order (the `page` module): only their rows are decoded.
    fn list_page(&self, request: &PageRequest, cancel: &CancellationToken) -> Result<HeaderPage> {
        self.page(request, cancel)
    }

    fn list_children(&self, parent: &SessionId, cancel: &CancellationToken) -> Result<Listing> {
        self.family(parent, cancel)
    }

    /// A follower of the database watches it by polling its change counter (see the `watch`
    /// module): a `sqlite-watch` thread with a read connection of its own. `None` for
    /// `:memory:` (no other connection can write it) and for an immutable open (SQLite takes the
    /// file as unchanging, so no change would be seen).
    fn watch(&self, options: &WatchOptions, sink: SharedChangeSink) -> Result<Option<Watch>> {
        let Some(file) = &self.file else { return Ok(None) };
        if self.config.access == Access::Immutable {
            return Ok(None);
        }
        let spec = WatchSpec {
            file: file.clone(),
            shown: self.shown.clone(),
            access: self.config.access,
            journal_mode: self.config.journal_mode,
            busy_timeout: self.config.busy_timeout,
        };
        watch::start(spec, options, sink, Arc::clone(&self.own_writes)).map(Some)
    }

    /// One read transaction: each session's next seq from its last row (a query per 500 ids, two
    /// primary-key seeks per session, see the `position` module), then `held` from the lease
    /// files (one directory read, and a non-blocking probe of each present file of an asked id;
    /// `None` for a session whose lease this handle holds, which the probe cannot see past, for
    /// one whose probe failed, and for every session of `:memory:`, which keeps no leases).
    fn positions(&self, ids: &[SessionId], cancel: &CancellationToken) -> Result<Vec<SessionPosition>> {
        if cancel.is_cancelled() {
            return Err(PersistenceError::Cancelled);
        }
        let next = self.with_reader(|connection| next_seqs_at_once(connection, &self.shown, ids))?;
        if cancel.is_cancelled() {
            return Err(PersistenceError::Cancelled);
        }
        with_holds(self.file.as_deref(), next, &self.leases)
    }

    /// The `sessions` rows with `created_at >= since_ms`, from the order (the `page` module);
    /// as the default, rows that do not decode are left out.
    fn created_since(&self, since_ms: u64, cancel: &CancellationToken) -> Result<Listing> {
        self.created(since_ms, cancel)
    }
}
