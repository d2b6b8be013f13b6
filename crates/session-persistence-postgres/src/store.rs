//! `PgStore`: the [`Backend`] over one PostgreSQL schema. Appends and repairs are one transaction
//! each, fenced on the session row (`SELECT … FOR UPDATE`, then the batch must start at the
//! stored `next_seq`); reads run in one repeatable-read snapshot and page through the events by
//! `(session_id, seq)`, so a suffix costs the suffix; listings of one parent's family and pages
//! of the newest-first order are index scans. Each append, repair and release notifies the
//! schema's channel in the same transaction, or, for an append within the handle's notify gap
//! of its last, together with the others of its burst once the gap has passed (`notify`); a
//! follower's positions are one query over the ids and `pg_locks`.

use std::{collections::BTreeMap, fmt, path::PathBuf, sync::Arc};

use session_core::{SessionEvent, SessionHeader, SessionId};
use session_persistence::{
    AppendFuture, Backend, ChangeKind, CorruptKind, DatabaseFault, HeaderPage, Listing, Location, LogFault, PageKey,
    PageRequest, PersistenceError, PrefetchedLog, Result, Revision, ScanOutcome, ScanSink, SessionPosition,
    SharedChangeSink, StoredHeader, TornTail, Watch, WatchOptions, decode_header_line,
};
use tokio_postgres::{Row, types::ToSql};
use tokio_util::sync::CancellationToken;

use crate::{
    codec::{self, EncodedRow},
    config::PgConfig,
    db::{Db, plain},
    listen,
    notify::{Notifier, Pacer, Turn},
    schema::{self, SetupOutcome, qualify},
};

mod append;
mod headers;
mod positions;
mod read;
mod sql;

use sql::{HEADER_COLUMNS, Sql};

/// The prefix of the `application_name` of a store's leases connection; the holder's name follows.
const LEASE_APPLICATION: &str = "session lease: ";

/// The PostgreSQL backend. See the module documentation.
pub struct PgStore {
    db: Db,
    schema: String,
    /// The random id of the store, part of every revision.
    store_id: String,
    sql: Sql,
    /// The writer leases this store holds (see [`Leases`]).
    leases: parking_lot::Mutex<Leases>,
    /// The schema's notification channel and this handle's tag.
    notifier: Notifier,
    /// The pace of this handle's append notifications.
    pacer: Pacer,
    headers: headers::HeaderCache,
    /// How long one statement of a long read may stream before the read goes on in another (half
    /// the query timeout, which the server enforces on each statement).
    statement_span: std::time::Duration,
}

/// The writer leases of one store: a shared session-level advisory lock per session live in
/// this process, keyed by (schema, session id), on a connection of their own whose
/// `application_name` names the holder (host and pid). The locks die with the connection, so
/// with the process. A repair takes the same key's exclusive transaction-level lock, and is
/// refused while any writer holds the shared one.
#[derive(Default)]
struct Leases {
    connection: Option<deadpool_postgres::ClientWrapper>,
    held: std::collections::HashSet<SessionId>,
}

/// The advisory lock key of `id`'s lease in `schema`.
fn lease_key(schema: &str, id: &SessionId) -> i64 {
    i64::from_ne_bytes(session_persistence::lease::lease_key(&[schema, id.as_str()]).to_ne_bytes())
}

impl fmt::Debug for PgStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PgStore").field("url", &self.db.shown).field("store_id", &self.store_id).finish_non_exhaustive()
    }
}

/// A `sessions` row as read: the decoded header, or why it does not decode.
struct SessionRow {
    id: SessionId,
    header: Result<Arc<SessionHeader>>,
    incarnation: String,
    revision: i64,
    n_bytes: i64,
}

fn to_sql_seq(seq: u64) -> i64 {
    i64::try_from(seq).unwrap_or(i64::MAX)
}

impl PgStore {
    /// Creates the schema's tables if they are missing (or migrates an older version), then
    /// opens the store: the explicit setup step a gateway runs on start. Refuses a schema of a
    /// newer version. Blocks (from any thread; see the crate documentation): async callers run it on
    /// the blocking pool.
    pub fn setup(config: &PgConfig) -> Result<(PgStore, SetupOutcome)> {
        let db = Db::new(config)?;
        let schema = config.schema.clone();
        let (store_id, outcome) = db.run(async |client| schema::setup(&db, client, &schema).await)?;
        Ok((PgStore::with(db, config, store_id), outcome))
    }

    /// Opens a store that is set up at this build's schema version; a missing store is refused
    /// with the setup step to run. Blocks (from any thread; see the crate documentation): async
    /// callers run it on the blocking pool.
    pub fn open(config: &PgConfig) -> Result<PgStore> {
        let db = Db::new(config)?;
        let schema = config.schema.clone();
        let store_id = db.run(async |client| schema::check(&db, client, &schema).await)?;
        Ok(PgStore::with(db, config, store_id))
    }

    fn with(db: Db, config: &PgConfig, store_id: String) -> PgStore {
        let schema = config.schema.clone();
        let sql = Sql::new(&schema);
        let notifier = Notifier::new(&schema);
        let pacer = Pacer::new(config.notify_gap);
        let leases = parking_lot::Mutex::new(Leases::default());
        let statement_span = config.query_timeout / 2;
        let headers = headers::HeaderCache::default();
        PgStore { db, schema, store_id, sql, leases, notifier, pacer, headers, statement_span }
    }

    /// The store as messages name it (no password).
    pub fn shown(&self) -> &str {
        &self.db.shown
    }

    /// The PostgreSQL schema this store keeps its tables in.
    pub fn schema(&self) -> &str {
        &self.schema
    }

    /// The store's identity, written once at setup: one value per store, whatever process opens it.
    pub fn store_id(&self) -> &str {
        &self.store_id
    }

    /// The channel this store's writes notify on (`LISTEN` on it sees them): `dsh_` and 16 hex
    /// digits of a hash of the schema name (`docs/storage-format.md`, "Change notifications").
    pub fn notification_channel(&self) -> &str {
        &self.notifier.channel
    }

    /// Stops (`true`) or restarts (`false`) this handle's change notifications, as if each were
    /// lost on the way: its writes commit as ever, and another gateway's follower finds them by
    /// its sweep alone. A fault hook for tests (the `testing` feature).
    #[cfg(feature = "testing")]
    pub fn suppress_notifications(&self, suppressed: bool) {
        self.notifier.suppress(suppressed);
    }

    /// Sets how long one statement of a long read streams before the read goes on in another
    /// (zero: one row per statement). A hook for tests (the `testing` feature).
    #[cfg(feature = "testing")]
    pub fn set_statement_span(&mut self, span: std::time::Duration) {
        self.statement_span = span;
    }

    /// How many connections the store's pool holds, idle or in use: a connection that failed is
    /// dropped from it. A hook for tests (the `testing` feature).
    #[cfg(feature = "testing")]
    pub fn pooled_connections(&self) -> usize {
        self.db.pool_size()
    }

    /// Runs `work` with a pooled connection (for this crate's checkpoint store).
    pub(crate) fn db(&self) -> &Db {
        &self.db
    }

    fn revision_of(&self, incarnation: &str, revision: i64) -> Revision {
        Revision::new(format!("postgres:{}:{incarnation}:{revision}", self.store_id))
    }

    fn location(&self, id: &SessionId) -> PathBuf {
        PathBuf::from(format!("{}#{}", self.db.shown, id))
    }

    /// A session row's columns. A column of another type than the schema's fails the whole call
    /// (the schema is not what this build set up), unlike a damaged header, which is that one
    /// log's own fault.
    fn session_row(&self, row: &Row) -> Result<SessionRow> {
        let db = &self.db;
        let id = SessionId::from(db.column::<String>(row, 0)?);
        let line: &str = db.column(row, 1)?;
        let header = self.headers.decoded(&id, line, || {
            let header = decode_header_line(line.as_bytes(), &self.location(&id))?;
            if header.id != id {
                return Err(PersistenceError::corrupt(
                    CorruptKind::Identity,
                    Location::Session { id: id.clone() },
                    format!("the stored header names session {:?}, not {:?}", header.id.as_str(), id.as_str()),
                ));
            }
            Ok(header)
        });
        Ok(SessionRow {
            id,
            header,
            incarnation: db.column(row, 2)?,
            revision: db.column(row, 3)?,
            n_bytes: db.column(row, 4)?,
        })
    }

    fn stored(&self, row: SessionRow) -> std::result::Result<StoredHeader, Box<LogFault>> {
        match row.header {
            Ok(header) => Ok(StoredHeader {
                revision: self.revision_of(&row.incarnation, row.revision),
                header,
                n_bytes: u64::try_from(row.n_bytes).ok(),
            }),
            Err(error) => Err(Box::new(LogFault { id: row.id, path: None, header: None, error })),
        }
    }

    fn listing(&self, rows: Vec<Row>) -> Result<Listing> {
        let mut listing = Listing::default();
        for row in rows {
            match self.stored(self.session_row(&row)?) {
                Ok(stored) => listing.headers.push(stored),
                Err(fault) => listing.faults.push(*fault),
            }
        }
        Ok(listing)
    }

    /// Appends `events` with the one-statement append (`store::append`, in the transaction a
    /// first batch or a repair needs) and notifies the schema's channel: in the statement, or
    /// paced after it (`notify::Pacer`).
    fn write(&self, header: &SessionHeader, events: &[&SessionEvent], materialize: bool, repair: bool) -> Result<()> {
        if events.is_empty() {
            return Ok(());
        }
        let plan = self.plan_write(header, events, materialize, repair);
        self.db.block(self.write_planned(header, events, plan))
    }

    /// Writes as `plan` says, then schedules its paced notification.
    async fn write_planned(&self, header: &SessionHeader, events: &[&SessionEvent], plan: WritePlan) -> Result<()> {
        let written = self.append(plan.around, header, events, &plan.encoded, plan.in_transaction()).await;
        self.after_write(&header.id, plan, &written);
        written
    }

    /// What a write of `events` (at least one) sends, decided before it waits on the database:
    /// its rows, the transaction around the statement, its notification and when that goes.
    fn plan_write(
        &self,
        header: &SessionHeader,
        events: &[&SessionEvent],
        materialize: bool,
        repair: bool,
    ) -> WritePlan {
        let id = &header.id;
        let encoded: Vec<EncodedRow> = codec::encode_runs(events);
        // A repair of a session that no lease of this store covers must hold the lease key
        // exclusively: refused while a live writer anywhere holds it, and no writer leases it
        // until the repair commits.
        let fence_repair = repair && !self.leases.lock().held.contains(id);
        // A session's first batch is its creation, sent by its transaction (so only on commit);
        // an append's goes there too after a quiet stretch, else after the commit, paced.
        let notification = self.notifier.enabled().then(|| {
            let kind = if materialize { ChangeKind::Created } else { ChangeKind::Appended };
            let turn = if materialize { Turn::Now } else { self.pacer.turn() };
            (turn, self.notifier.payload(kind, id, events[events.len() - 1].seq.saturating_add(1)))
        });
        // Every write is the one-statement append (`store::append`): alone, after its session
        // row's insert for a session's first batch, or after the repair lock for a repair that
        // takes it.
        let around = match (fence_repair, materialize) {
            (true, _) => append::Around::RepairLock,
            (false, true) => append::Around::Creation,
            (false, false) => append::Around::Alone,
        };
        WritePlan { around, encoded, notification }
    }

    /// Schedules the paced notification of a write that may have committed.
    fn after_write(&self, id: &SessionId, plan: WritePlan, written: &Result<()>) {
        // A timeout or a lost connection may hide a commit: a wake-up for nothing costs a
        // follower one read, a missing one a sweep's wait.
        let maybe_committed = match written {
            Ok(()) => true,
            Err(PersistenceError::Database { kind, .. }) => {
                matches!(kind, DatabaseFault::Timeout | DatabaseFault::Connection)
            }
            Err(_) => false,
        };
        if let Some((Turn::Later, payload)) = plan.notification
            && maybe_committed
            && let Some(deferred) = self.pacer.defer(id, payload)
        {
            deferred.send_when_due(&self.db, self.notifier.channel.clone());
        }
    }

    /// Runs `work` on the leases' connection, opening it (and taking every held lease on it
    /// again) when there is none.
    fn on_lease_connection<T>(
        &self,
        leases: &mut Leases,
        work: impl AsyncFnOnce(&tokio_postgres::Client) -> Result<T>,
    ) -> Result<T> {
        let db = &self.db;
        let keys: Vec<i64> = leases.held.iter().map(|id| lease_key(&self.schema, id)).collect();
        let fresh = async |client: &tokio_postgres::Client| {
            let name = format!("{}{}", self.own_leases(), session_persistence::lease::holder_name());
            db.timed(
                "naming the lease holder",
                client.execute("SELECT set_config('application_name', $1, false)", &[&name]),
            )
            .await?;
            for key in &keys {
                db.timed("taking a writer lease", client.execute("SELECT pg_advisory_lock_shared($1)", &[key])).await?;
            }
            Ok(())
        };
        db.run_detached(&mut leases.connection, fresh, work)
    }

    /// How the `application_name` of this handle's leases' connections begins: [`LEASE_APPLICATION`]
    /// and the handle's tag in brackets (the holder, host and pid, follows). Every connection this
    /// handle ever took leases on has it, including one it gave up on that the server has not yet
    /// dropped, so `positions` can tell this handle's own leases from other writers'. At 26 bytes
    /// of ASCII it is always within the 63 the server keeps of a name.
    fn own_leases(&self) -> String {
        format!("{LEASE_APPLICATION}[{}] ", self.notifier.tag)
    }

    /// Drops the schema and everything in it. For tests and benchmarks that made their own.
    pub fn drop_schema(&self) -> Result<()> {
        let db = &self.db;
        let sql = qualify("DROP SCHEMA IF EXISTS {s} CASCADE", &self.schema);
        db.run(async |client| db.timed("dropping the schema", plain(client).batch_execute(&sql)).await)
    }

    /// The stored direct subagent children of the page's sessions, one grouped query over the
    /// page's ids through the `(parent_session, origin, …)` index.
    fn page_children(&self, page: &HeaderPage, request: &PageRequest) -> Result<BTreeMap<SessionId, Vec<SessionId>>> {
        let mut children: BTreeMap<SessionId, Vec<SessionId>> = BTreeMap::new();
        if page.headers.is_empty() {
            return Ok(children);
        }
        let parents: Vec<String> = page.headers.iter().map(|stored| stored.header.id.as_str().to_owned()).collect();
        let owner = request.owner.clone();
        let db = &self.db;
        let rows = db.run(async |client| {
            let statement = db.prepared(client, &self.sql.page_children).await?;
            db.timed("counting a page's children", client.query(&statement, &[&parents, &owner])).await
        })?;
        for row in &rows {
            let parent: String = db.column(row, 0)?;
            let ids: Vec<String> = db.column(row, 1)?;
            children.insert(SessionId::from(parent), ids.into_iter().map(SessionId::from).collect());
        }
        Ok(children)
    }
}

/// A write decided before it waits on the database ([`PgStore::plan_write`]).
struct WritePlan {
    around: append::Around,
    encoded: Vec<EncodedRow>,
    notification: Option<(Turn, String)>,
}

impl WritePlan {
    /// The notification the statement sends in its own transaction.
    fn in_transaction(&self) -> Option<&String> {
        match &self.notification {
            Some((Turn::Now, payload)) => Some(payload),
            _ => None,
        }
    }
}

/// `events` checked against the size bounds every write checks, borrowed for the write.
fn checked<'e>(header: &SessionHeader, events: &'e [Arc<SessionEvent>]) -> Result<Vec<&'e SessionEvent>> {
    header.check_sizes()?;
    for event in events {
        event.check_size()?;
    }
    Ok(events.iter().map(|event| &**event).collect())
}

/// The largest batch an append writes without the blocking pool
/// ([`Backend::append_batch_async`]): its runs are encoded (and compressed) on the caller's
/// async thread, which a batch of a few events barely notices.
const ASYNC_APPEND_MAX_EVENTS: usize = 64;
/// The same bound on the batch's payloads (`data`).
const ASYNC_APPEND_MAX_BYTES: usize = 64 << 10;

impl Backend for PgStore {
    fn name(&self) -> &'static str {
        "postgres"
    }

    fn scan(&self, id: &SessionId, cancel: &CancellationToken, sink: &mut dyn ScanSink) -> Result<Option<ScanOutcome>> {
        self.read(id, 0, cancel, sink)
    }

    /// A seek read: the rows from `(id, from_seq)` on, through the primary key.
    fn scan_from(
        &self,
        id: &SessionId,
        from_seq: u64,
        cancel: &CancellationToken,
        sink: &mut dyn ScanSink,
    ) -> Result<Option<ScanOutcome>> {
        self.read(id, from_seq, cancel, sink)
    }

    fn prefetch_batch(&self) -> usize {
        read::PREFETCH_SESSIONS
    }

    /// Short logs, many in one statement: see `store::read`.
    fn prefetch(&self, ids: &[SessionId], cancel: &CancellationToken) -> Result<Vec<(SessionId, PrefetchedLog)>> {
        self.read_ahead(ids, cancel)
    }

    /// Short tails, many in one statement: see `store::read`.
    fn prefetch_tails(
        &self,
        reads: &[(SessionId, u64)],
        cancel: &CancellationToken,
    ) -> Result<Vec<(SessionId, PrefetchedLog)>> {
        self.read_tails_ahead(reads, cancel)
    }

    fn revision(&self, id: &SessionId) -> Result<Option<Revision>> {
        let db = &self.db;
        let row = db.run(async |client| {
            let statement = db.prepared(client, &self.sql.revision).await?;
            db.timed("reading a revision", client.query_opt(&statement, &[&id.as_str()])).await
        })?;
        row.map(|row| Ok(self.revision_of(&db.column::<String>(&row, 0)?, db.column(&row, 1)?))).transpose()
    }

    fn header(&self, id: &SessionId, cancel: &CancellationToken) -> Result<Option<StoredHeader>> {
        if cancel.is_cancelled() {
            return Err(PersistenceError::Cancelled);
        }
        let db = &self.db;
        let row = db.run(async |client| {
            let statement = db.prepared(client, &self.sql.session).await?;
            db.timed("reading a session", client.query_opt(&statement, &[&id.as_str()])).await
        })?;
        match row {
            None => Ok(None),
            Some(row) => self.stored(self.session_row(&row)?).map(Some).map_err(|fault| fault.error),
        }
    }

    /// One transaction: the session row with the first batch, the fence, the rows. A stale
    /// writer (another process appended first, or created the session meanwhile) gets
    /// [`PersistenceError::Fenced`] and stores nothing.
    fn append_batch(&self, header: &SessionHeader, events: &[Arc<SessionEvent>], materialized: bool) -> Result<()> {
        if events.is_empty() {
            return Ok(());
        }
        let events = checked(header, events)?;
        self.write(header, &events, !materialized, false)
    }

    /// The same write as [`append_batch`](Backend::append_batch), as a task on the store's
    /// runtime: the statement's round trip waits on no thread of the blocking pool. Batches of
    /// at most 64 events and 64 KiB of payloads (a coordinator's appends, a live session's
    /// write-behind batches); a larger one is `None`, for the blocking pool.
    fn append_batch_async(
        self: Arc<Self>,
        header: &Arc<SessionHeader>,
        events: &[Arc<SessionEvent>],
        materialized: bool,
    ) -> Option<AppendFuture> {
        let bytes: usize = events.iter().map(|event| event.data.as_str().len()).sum();
        if events.is_empty() || events.len() > ASYNC_APPEND_MAX_EVENTS || bytes > ASYNC_APPEND_MAX_BYTES {
            return None;
        }
        let plan = match checked(header, events) {
            Ok(borrowed) => self.plan_write(header, &borrowed, !materialized, false),
            Err(error) => return Some(Box::pin(std::future::ready(Err(error)))),
        };
        let (header, events) = (Arc::clone(header), events.to_vec());
        let store = Arc::clone(&self);
        Some(Box::pin(self.db.spawn_call(async move {
            let events: Vec<&SessionEvent> = events.iter().map(|event| &**event).collect();
            store.write_planned(&header, &events, plan).await
        })))
    }

    /// Logs here are never torn (a transaction commits whole), so a repair appends the closers
    /// as one fenced transaction.
    fn commit_repair(&self, header: &SessionHeader, torn: Option<&TornTail>, closers: &[SessionEvent]) -> Result<()> {
        if let Some(torn) = torn {
            return Err(PersistenceError::invalid_input(format!(
                "session {} has no torn tail in a PostgreSQL store (asked to cut at {})",
                header.id, torn.truncate_to
            )));
        }
        let closers: Vec<&SessionEvent> = closers.iter().collect();
        self.write(header, &closers, false, true)
    }

    /// A shared session-level advisory lock, keyed by the schema and the id, on a connection of
    /// the store's own (`docs/storage-format.md`, "Writer leases"); it waits, within the query
    /// timeout, for a repair of the session to commit.
    fn lease(&self, id: &SessionId) -> Result<()> {
        let mut leases = self.leases.lock();
        if leases.held.contains(id) {
            return Ok(());
        }
        let key = lease_key(&self.schema, id);
        let db = &self.db;
        self.on_lease_connection(&mut leases, async |client| {
            db.timed("taking a writer lease", client.execute("SELECT pg_advisory_lock_shared($1)", &[&key])).await
        })?;
        leases.held.insert(id.clone());
        Ok(())
    }

    /// Unlocks the lease (if held) and notifies the release, in one statement on the leases'
    /// connection; without a lease there, the notification goes through the pool.
    fn end_lease(&self, id: &SessionId) {
        let mut leases = self.leases.lock();
        let held = leases.held.remove(id) && leases.connection.is_some();
        let notify = self.notifier.enabled();
        if notify {
            // The release's notification says where the session ends: an append's waiting one
            // would only wake followers again after it.
            self.pacer.forget(id);
        }
        let (head, tail) = self.notifier.parts(ChangeKind::Released, id);
        let channel = self.notifier.channel.as_str();
        let db = &self.db;
        if held {
            let key = lease_key(&self.schema, id);
            let ended = self.on_lease_connection(&mut leases, async |client| {
                let name = id.as_str();
                let (sql, params): (&str, Vec<&(dyn ToSql + Sync)>) = if notify {
                    (&self.sql.unlock_notify_release, vec![&channel, &head, &name, &tail, &key])
                } else {
                    ("SELECT pg_advisory_unlock_shared($1)", vec![&key])
                };
                db.timed("ending a writer lease", client.execute(sql, &params)).await
            });
            if let Err(error) = ended {
                tracing::warn!(session = %id, %error, "cannot end the session's writer lease; it ends with the connection");
            }
            return;
        }
        drop(leases);
        if notify {
            let notified = db.run(async |client| {
                let params: [&(dyn ToSql + Sync); 4] = [&channel, &head, &id.as_str(), &tail];
                let statement = db.prepared(client, &self.sql.notify_release).await?;
                db.timed("notifying a release", client.execute(&statement, &params)).await
            });
            if let Err(error) = notified {
                tracing::warn!(session = %id, %error, "cannot notify the session's release; followers find it by their sweep");
            }
        }
    }

    fn list(&self, cancel: &CancellationToken) -> Result<Listing> {
        if cancel.is_cancelled() {
            return Err(PersistenceError::Cancelled);
        }
        let db = &self.db;
        let rows = db.run(async |client| {
            let statement = db.prepared(client, &self.sql.list).await?;
            db.timed("listing sessions", client.query(&statement, &[])).await
        })?;
        if cancel.is_cancelled() {
            return Err(PersistenceError::Cancelled);
        }
        let mut listing = self.listing(rows)?;
        listing.sort();
        Ok(listing)
    }

    /// `parent`, its children and, of each child's subagent children, one per owner, through the
    /// parent index.
    fn list_children(&self, parent: &SessionId, cancel: &CancellationToken) -> Result<Listing> {
        if cancel.is_cancelled() {
            return Err(PersistenceError::Cancelled);
        }
        let db = &self.db;
        let rows = db.run(async |client| {
            let statement = db.prepared(client, &self.sql.family).await?;
            db.timed("listing a family", client.query(&statement, &[&parent.as_str()])).await
        })?;
        let mut listing = self.listing(rows)?;
        listing.sort();
        Ok(listing)
    }

    /// One page through the `(created_at DESC, id)` index (or the owner's), starting after the
    /// request's key: the range condition `created_at <= after` lets the scan start there.
    fn list_page(&self, request: &PageRequest, cancel: &CancellationToken) -> Result<HeaderPage> {
        if cancel.is_cancelled() {
            return Err(PersistenceError::Cancelled);
        }
        let mut conditions = Vec::new();
        let mut params: Vec<Box<dyn ToSql + Sync + Send>> = Vec::new();
        if let Some(owner) = &request.owner {
            params.push(Box::new(owner.clone()));
            conditions.push(format!("owner = ${}", params.len()));
        }
        if request.require_cwd {
            conditions.push("cwd IS NOT NULL".to_owned());
        }
        if request.exclude_subagents {
            conditions.push("origin IS NULL".to_owned());
        }
        if let Some(cwd) = &request.cwd {
            params.push(Box::new(cwd.clone()));
            conditions.push(format!("cwd = ${}", params.len()));
        }
        if let Some(after) = &request.after {
            params.push(Box::new(to_sql_seq(after.created_at)));
            let created = params.len();
            params.push(Box::new(after.id.as_str().to_owned()));
            let id = params.len();
            conditions.push(format!("created_at <= ${created} AND (created_at < ${created} OR id > ${id})"));
        }
        let limit = i64::try_from(request.limit).unwrap_or(i64::MAX - 1);
        params.push(Box::new(limit.saturating_add(1)));
        let where_clause =
            if conditions.is_empty() { String::new() } else { format!("WHERE {}", conditions.join(" AND ")) };
        let sql = qualify(
            &format!(
                "SELECT {HEADER_COLUMNS}, created_at FROM {{s}}.sessions {where_clause} ORDER BY created_at DESC, id \
                 LIMIT ${}",
                params.len()
            ),
            &self.schema,
        );
        let db = &self.db;
        let rows = db.run(async |client| {
            let refs: Vec<&(dyn ToSql + Sync)> = params.iter().map(|param| &**param as &(dyn ToSql + Sync)).collect();
            db.timed("listing a page", plain(client).query(&sql, &refs)).await
        })?;
        let more = rows.len() as i64 > limit;
        let mut page = HeaderPage::default();
        let mut last = None;
        for row in rows.iter().take(request.limit) {
            let session = self.session_row(row)?;
            let created_at: i64 = db.column(row, 5)?;
            last = Some(PageKey { created_at: u64::try_from(created_at).unwrap_or(0), id: session.id.clone() });
            match self.stored(session) {
                Ok(stored) => page.headers.push(stored),
                Err(fault) => page.faults.push(*fault),
            }
        }
        page.next = if more { last } else { None };
        page.children = self.page_children(&page, request)?;
        Ok(page)
    }

    /// One listening connection of its own (`listen`): see `docs/storage-format.md`, "Change
    /// notifications".
    fn watch(&self, options: &WatchOptions, sink: SharedChangeSink) -> Result<Option<Watch>> {
        Ok(Some(listen::start(&self.db, &self.notifier, options, sink)))
    }

    fn positions(&self, ids: &[SessionId], cancel: &CancellationToken) -> Result<Vec<SessionPosition>> {
        self.read_positions(ids, cancel)
    }

    fn created_since(&self, since_ms: u64, cancel: &CancellationToken) -> Result<Listing> {
        self.read_created_since(since_ms, cancel)
    }
}
