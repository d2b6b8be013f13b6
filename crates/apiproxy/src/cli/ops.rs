//! Store operations behind the operator CLI: open a store (a JSONL directory, a SQLite database
//! named `sqlite:PATH`, or a PostgreSQL schema named by a `postgres://` URL), list and show
//! sessions, list subagents, and verify (optionally repair) every log.

use std::{path::PathBuf, sync::Arc};

use apiproxy::{
    ProxyError,
    export::{self, ChunkSink, EventsOnly},
};
use serde_json::{Value, json};
use session_core::{BoundedClock, Clock, SessionHeader, SessionId, SessionStore, SystemClock};
use session_persistence::{
    Compression, Coordinator, CoordinatorConfig, Inspection, JsonlConfig, JsonlStore, Listing, PersistenceError,
    ScanSink, SessionPersistence, StoreEncoding, inspect_into,
};
use session_persistence_postgres::{PgCheckpointStore, PgConfig, PgEnv, PgStore, SetupOutcome, is_postgres_url};
use session_persistence_sqlite::{SqliteCheckpointStore, SqliteConfig, SqliteStore};
use session_projection::ProjectionRegistry;
use session_storage_io::keyed::run_blocking_with;
use tokio_util::sync::CancellationToken;

/// Where a store lives and how it is encoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StoreOptions {
    /// The store's root directory.
    pub(crate) dir: PathBuf,
    /// The encoding of its logs (see [`detect_compression`]).
    pub(crate) compression: Compression,
}

/// The encoding of the store at `dir` when none is asked for: the one its logs use, or zstd for
/// an empty or new store. A store holding both kinds is refused, with a count of each and one
/// file of each.
pub(crate) fn detect_compression(dir: &std::path::Path) -> Result<Compression, ProxyError> {
    match session_persistence::detect_encoding(dir)? {
        StoreEncoding::Empty => Ok(Compression::Zstd),
        StoreEncoding::Uniform(compression) => Ok(compression),
        StoreEncoding::Mixed { raw: (n_raw, raw), zstd: (n_zstd, zstd) } => {
            Err(ProxyError::MixedStore { path: dir.to_owned(), n_raw, raw, n_zstd, zstd })
        }
    }
}

/// Which store a command works on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum StoreLocation {
    /// A JSONL store directory.
    Jsonl(StoreOptions),
    /// A SQLite session database (the reference's format); its projection checkpoints live in a
    /// second database beside it.
    Sqlite {
        /// The session database file.
        path: PathBuf,
    },
    /// A schema of a PostgreSQL database, shared by any number of gateways and hosts; its
    /// projection checkpoints live in the same schema.
    Postgres(Box<PgLocation>),
}

/// A PostgreSQL store: its settings, and the URL as messages show it (never the password).
#[derive(Debug, Clone)]
pub(crate) struct PgLocation {
    /// The connection and store settings.
    pub(crate) config: PgConfig,
    shown: PathBuf,
}

impl PartialEq for PgLocation {
    fn eq(&self, other: &PgLocation) -> bool {
        self.shown == other.shown
    }
}

impl Eq for PgLocation {}

impl PgLocation {
    /// The location of the store `config` names.
    pub(crate) fn new(config: PgConfig) -> PgLocation {
        PgLocation { shown: PathBuf::from(config.shown()), config }
    }
}

/// The prefix of a `--store` argument that names a SQLite database.
pub(crate) const SQLITE_PREFIX: &str = "sqlite:";

impl StoreLocation {
    /// How many cold reads of a listing run side by side here: a PostgreSQL store serves as many
    /// as its pool holds connections (its reads mostly wait on round trips); a local one the
    /// reference's bound for local media.
    pub(crate) fn cold_read_lanes(&self) -> usize {
        match self {
            StoreLocation::Postgres(pg) => pg.config.pool_size.clamp(1, subagent::MAX_COLD_READ_LANES),
            StoreLocation::Jsonl(_) | StoreLocation::Sqlite { .. } => subagent::COLD_READ_CONCURRENCY,
        }
    }

    /// Reads a `--store` argument: a `postgres://` (or `postgresql://`) URL is a PostgreSQL
    /// store (what it leaves out comes from libpq's environment variables and password file in
    /// the process environment: see [`PgConfig::from_url_and_env`]), `sqlite:PATH` a SQLite
    /// database file, anything else a JSONL store directory with `compression`, or, without one,
    /// the encoding its logs use (see [`detect_compression`]).
    pub(crate) fn parse(text: &str, compression: Option<Compression>) -> Result<StoreLocation, ProxyError> {
        if is_postgres_url(text) {
            let config = PgConfig::from_url_and_env(text, &PgEnv::from_process())?;
            return Ok(StoreLocation::Postgres(Box::new(PgLocation::new(config))));
        }
        match text.strip_prefix(SQLITE_PREFIX) {
            Some(path) => Ok(StoreLocation::Sqlite { path: PathBuf::from(path) }),
            None => {
                let dir = PathBuf::from(text);
                let compression = match compression {
                    Some(compression) => compression,
                    None => detect_compression(&dir)?,
                };
                Ok(StoreLocation::Jsonl(StoreOptions { dir, compression }))
            }
        }
    }

    /// [`parse`](Self::parse) for a command that reads the one session `id` (and, for an export,
    /// its family): a JSONL store without `compression` takes the encoding of that session's own
    /// log, found by one probe per project directory instead of a walk of every session. Where
    /// the session has no single log, the store's encoding is detected as for any command.
    pub(crate) fn parse_for_session(
        text: &str,
        compression: Option<Compression>,
        id: &str,
    ) -> Result<StoreLocation, ProxyError> {
        if compression.is_none() && !is_postgres_url(text) && !text.starts_with(SQLITE_PREFIX) {
            let dir = PathBuf::from(text);
            if let Ok(Some(compression)) = session_persistence::detect_session_encoding(&dir, id) {
                return Ok(StoreLocation::Jsonl(StoreOptions { dir, compression }));
            }
        }
        StoreLocation::parse(text, compression)
    }

    /// The directory or file (for PostgreSQL, the URL without its password), for messages.
    pub(crate) fn path(&self) -> &std::path::Path {
        match self {
            StoreLocation::Jsonl(options) => &options.dir,
            StoreLocation::Sqlite { path } => path,
            StoreLocation::Postgres(location) => &location.shown,
        }
    }
}

fn backend_coordinator(backend: Arc<dyn session_persistence::Backend>) -> Result<Arc<Coordinator>, ProxyError> {
    Ok(Arc::new(Coordinator::new(backend, CoordinatorConfig::default())?))
}

/// Opens a store for writing: a JSONL directory (see [`open_writable`]), or a SQLite database
/// (created on first use, with the reference's file rules).
pub(crate) fn open_location_writable(location: &StoreLocation) -> Result<Arc<Coordinator>, ProxyError> {
    match location {
        StoreLocation::Jsonl(options) => open_writable(options),
        StoreLocation::Sqlite { path } => backend_coordinator(Arc::new(SqliteStore::open(SqliteConfig::file(path))?)),
        StoreLocation::Postgres(location) => {
            let (store, outcome) = PgStore::setup(&location.config)?;
            match outcome {
                SetupOutcome::Created => {
                    tracing::info!(store = %location.shown.display(), "created the session store schema")
                }
                SetupOutcome::Migrated { from } => {
                    tracing::info!(store = %location.shown.display(), from, "migrated the session store schema")
                }
                SetupOutcome::Current => {}
            }
            let store = Arc::new(store);
            #[cfg(feature = "fault-hooks")]
            crate::cli::faults::install(&store);
            backend_coordinator(store)
        }
    }
}

/// The explicit setup step of a store: creates (or migrates) a PostgreSQL store's schema and
/// says what it did; other stores need none (`None`).
pub(crate) fn setup_location(location: &StoreLocation) -> Result<Option<SetupOutcome>, ProxyError> {
    match location {
        StoreLocation::Postgres(location) => Ok(Some(PgStore::setup(&location.config)?.1)),
        StoreLocation::Jsonl(_) | StoreLocation::Sqlite { .. } => Ok(None),
    }
}

/// Opens an existing store for reading while a server may be writing it. A SQLite database in a
/// read-only place is read immutable.
pub(crate) fn open_location_read_only(location: &StoreLocation) -> Result<Arc<Coordinator>, ProxyError> {
    match location {
        StoreLocation::Jsonl(options) => open_read_only(options),
        StoreLocation::Sqlite { path } => {
            if !path.exists() {
                return Err(ProxyError::StoreMissing { path: path.clone() });
            }
            backend_coordinator(Arc::new(SqliteStore::open_for_reading(path)?))
        }
        StoreLocation::Postgres(location) => backend_coordinator(Arc::new(PgStore::open(&location.config)?)),
    }
}

/// Whether a writer (a running `apiproxy serve`, say) holds the store right now.
pub(crate) fn location_writer_active(location: &StoreLocation) -> Result<bool, ProxyError> {
    match location {
        StoreLocation::Jsonl(options) => writer_active(options),
        StoreLocation::Sqlite { path } => Ok(SqliteStore::open_for_reading(path)?.writer_active()?),
        // Any number of gateways and hosts may write a shared database at any time.
        StoreLocation::Postgres(_) => Ok(true),
    }
}

/// The projection cache's checkpoint store of a store: `.projection-cache/` inside a JSONL
/// directory, a `.projection-cache` database beside a SQLite one (never inside the session
/// database, which must hold the reference's schema only), the `checkpoints` table of a
/// PostgreSQL store's schema. Blocks: run it on the blocking pool.
///
/// Checkpoints are derived data, so a directory or database that cannot be opened (damaged,
/// unreadable, a newer build's) is moved aside to `<name>.damaged-<UTC time>`, with a warning,
/// and a fresh, empty one is opened in its place (`cache warm` fills it again). Only a fresh one
/// that cannot be opened either is an error.
pub(crate) fn open_checkpoints(
    location: &StoreLocation,
) -> Result<Arc<dyn session_projection_cache::CheckpointStore>, session_projection_cache::CacheError> {
    let stamp = file_stamp(service_clock().now_ms());
    let warn = |moved: Option<session_projection_cache::MovedAside>| {
        if let Some(moved) = moved {
            tracing::warn!(
                path = %moved.from.display(),
                moved_to = %moved.to.display(),
                error = %moved.error,
                "the projection cache could not be opened, so it was moved aside and recreated empty; it holds \
                 derived data only (checkpoints), which `apiproxy cache warm` or the background backfill writes \
                 again, and the moved copy may be deleted"
            );
        }
    };
    match location {
        StoreLocation::Jsonl(options) => {
            let root = options.dir.join(CHECKPOINT_DIR);
            let (store, moved) = session_projection_cache::DiskCheckpointStore::open_or_move_aside(root, &stamp)?;
            warn(moved);
            Ok(Arc::new(store))
        }
        StoreLocation::Sqlite { path } => {
            let records = session_persistence_sqlite::Target::File(SqliteCheckpointStore::beside(path));
            let (store, moved) = SqliteCheckpointStore::open_or_move_aside(&records, &stamp)?;
            warn(moved);
            Ok(Arc::new(store))
        }
        StoreLocation::Postgres(location) => {
            let store = PgStore::open(&location.config)
                .map_err(|error| session_projection_cache::CacheError::Storage { message: error.to_string() })?;
            Ok(Arc::new(PgCheckpointStore::new(Arc::new(store))))
        }
    }
}

/// `ms` as a compact UTC time for file names, `YYYYMMDDTHHMMSSZ` (clamped to 1970..=9999).
pub(crate) fn file_stamp(ms: i64) -> String {
    let (year, month, day, secs_of_day) = crate::calendar::utc(ms);
    format!(
        "{year:04}{month:02}{day:02}T{:02}{:02}{:02}Z",
        secs_of_day / 3600,
        secs_of_day % 3600 / 60,
        secs_of_day % 60
    )
}

/// The projection cache's directory inside a JSONL store root.
pub(crate) const CHECKPOINT_DIR: &str = ".projection-cache";

/// The clock of `apiproxy serve`: the system time, bounded to what a stored time can hold, so
/// stored times stay readable whatever the system clock says.
pub(crate) fn service_clock() -> Arc<dyn Clock> {
    Arc::new(BoundedClock::new(Arc::new(SystemClock)))
}

fn coordinator(store: JsonlStore) -> Result<Arc<Coordinator>, ProxyError> {
    Ok(Arc::new(Coordinator::new(Arc::new(store), CoordinatorConfig::default())?))
}

/// Opens a store for writing (creating the directory on first use) and takes its lock.
pub(crate) fn open_writable(options: &StoreOptions) -> Result<Arc<Coordinator>, ProxyError> {
    let config = JsonlConfig { root: options.dir.clone(), compression: options.compression, pack_chunks: true };
    coordinator(JsonlStore::open(config)?)
}

/// Opens an existing store for reading, without its lock (a server may be writing it).
pub(crate) fn open_read_only(options: &StoreOptions) -> Result<Arc<Coordinator>, ProxyError> {
    if !options.dir.is_dir() {
        return Err(ProxyError::StoreMissing { path: options.dir.clone() });
    }
    let config = JsonlConfig { root: options.dir.clone(), compression: options.compression, pack_chunks: true };
    coordinator(JsonlStore::open_read_only(config)?)
}

/// Every stored header, sorted by id, and every log that cannot be listed, each on its own.
pub(crate) async fn list_sessions(persistence: &dyn SessionPersistence) -> Result<Listing, ProxyError> {
    Ok(persistence.list_snapshots(&CancellationToken::new()).await?)
}

/// Whether a writer (a running `apiproxy serve`, say) holds the store's lock right now.
pub(crate) fn writer_active(options: &StoreOptions) -> Result<bool, ProxyError> {
    let config = JsonlConfig { root: options.dir.clone(), compression: options.compression, pack_chunks: true };
    Ok(JsonlStore::open_read_only(config)?.writer_active()?)
}

/// The balanced view of one stored session (crash closers synthesized in memory).
pub(crate) async fn show_session(persistence: &dyn SessionPersistence, id: &str) -> Result<Inspection, ProxyError> {
    match persistence.inspect(&SessionId::from(id), &CancellationToken::new()).await {
        Ok(inspection) => Ok(inspection),
        Err(PersistenceError::NotFound { .. } | PersistenceError::InvalidInput { .. }) => {
            Err(ProxyError::SessionNotFound { id: id.to_owned() })
        }
        Err(error) => Err(error.into()),
    }
}

/// Writes one chunk of lines to standard output.
fn to_stdout(chunk: &[u8]) -> session_persistence::Result<()> {
    use std::io::Write;
    std::io::stdout().lock().write_all(chunk).map_err(|source| PersistenceError::io("standard output", source))
}

fn not_found_as_missing(id: &str, error: PersistenceError) -> ProxyError {
    match error {
        PersistenceError::NotFound { .. } | PersistenceError::InvalidInput { .. } => {
            ProxyError::SessionNotFound { id: id.to_owned() }
        }
        error => error.into(),
    }
}

/// Writes the balanced view of one stored session to standard output as JSON Lines, one compact
/// event per line, streamed as the log is read: memory does not grow with the log. The lines are
/// [`apiproxy::export`]'s, so an export holds exactly these bytes for the session.
pub(crate) async fn stream_session(persistence: &dyn SessionPersistence, id: &str) -> Result<(), ProxyError> {
    let sink = EventsOnly(ChunkSink::new(Box::new(|chunk| to_stdout(&chunk))));
    let (sink, _) = inspect_into(persistence, &SessionId::from(id), &CancellationToken::new(), sink)
        .await
        .map_err(|error| not_found_as_missing(id, error))?;
    to_stdout(&sink.0.finish())?;
    Ok(())
}

/// Writes the export of `id` (with `descendants`, its subagents too) to standard output.
pub(crate) async fn export_sessions(
    persistence: &dyn SessionPersistence,
    id: &str,
    descendants: bool,
) -> Result<(), ProxyError> {
    let cancel = CancellationToken::new();
    let root = persistence
        .stored_header(&SessionId::from(id), &cancel)
        .await
        .map_err(|error| not_found_as_missing(id, error))?
        .ok_or_else(|| ProxyError::SessionNotFound { id: id.to_owned() })?;
    let sessions = export::plan(persistence, root.header, descendants, &|_| true, &cancel).await?;
    for header in sessions {
        let rest = export::write_session(persistence, &header, &cancel, Box::new(|chunk| to_stdout(&chunk))).await;
        match rest {
            Ok(rest) => to_stdout(&rest)?,
            Err(PersistenceError::NotFound { .. }) => {}
            Err(error) => return Err(error.into()),
        }
    }
    Ok(())
}

/// The subagents of `parent` in a stored (cold) store, as wire `SubagentListEntry` rows; with
/// `descendants`, every subagent below it with `parentId` and `depth`.
pub(crate) async fn list_subagents(
    location: &StoreLocation,
    parent: &str,
    descendants: bool,
) -> Result<Vec<Value>, ProxyError> {
    let persistence: Arc<dyn SessionPersistence> = open_location_read_only(location)?;
    let store = Arc::new(SessionStore::new(service_clock()));
    let runtime = subagent::SubagentRuntime::new(subagent::SubagentServices {
        sessions: Some(store),
        projections: Some(ProjectionRegistry::new()),
        persistence: Some(persistence),
        cache: None,
    })?
    .with_cold_read_lanes(location.cold_read_lanes());
    let cancel = CancellationToken::new();
    let parent = SessionId::from(parent);
    let failed =
        |error: subagent::SubagentError| ProxyError::Session { message: format!("listing subagents failed: {error}") };
    let rows: Result<Vec<Value>, _> = if descendants {
        runtime.list_descendants(&parent, &cancel).await.map_err(failed)?.iter().map(serde_json::to_value).collect()
    } else {
        runtime.list_children(&parent, &cancel).await.map_err(failed)?.iter().map(serde_json::to_value).collect()
    };
    rows.map_err(|error| ProxyError::Session { message: format!("listing subagents failed: {error}") })
}

/// What `verify` found in one log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum LogStatus {
    /// Every committed byte decodes and validates, and nothing needs closing.
    Healthy,
    /// The physical tail is not committed (a crash mid-write); a repair cuts it.
    Torn,
    /// The log ends inside a turn (a crash mid-turn); a repair appends the closers.
    Interrupted {
        /// How many closer events a repair would append.
        closers: u64,
    },
    /// The log ends inside a turn, or with a torn tail, while a writer holds the store (a
    /// read-only verify) or the session's writer lease (a repair, which then leaves it alone):
    /// the turn may be live and the tail an append in flight, so neither can be judged. Not a
    /// defect.
    InUse {
        /// Who holds the session's lease (host and pid), when a repair was refused by it.
        holder: Option<String>,
    },
    /// Committed bytes are damaged; nothing can repair it automatically.
    Corrupt {
        /// What is damaged, and where.
        message: String,
    },
    /// Intact, but this build cannot read it (newer format, unknown event type, retired legacy
    /// vocabulary such as `mode/set`).
    Unsupported {
        /// What this build does not read.
        message: String,
    },
    /// The log could not be read at all (I/O).
    Unreadable {
        /// The I/O error.
        message: String,
    },
    /// Was torn or interrupted; `--repair` committed the repair.
    Repaired {
        /// What the repair did: `cut the torn tail and closed the log`, or `closed the
        /// interrupted turn`.
        what: &'static str,
    },
}

impl LogStatus {
    /// Whether the log needs nothing.
    pub(crate) fn is_healthy(&self) -> bool {
        matches!(self, LogStatus::Healthy | LogStatus::Repaired { .. } | LogStatus::InUse { .. })
    }

    /// A short label: `healthy`, `torn`, `interrupted`, `in-use`, `corrupt`, `unsupported`,
    /// `unreadable`, `repaired`.
    pub(crate) fn label(&self) -> &'static str {
        match self {
            LogStatus::Healthy => "healthy",
            LogStatus::Torn => "torn",
            LogStatus::Interrupted { .. } => "interrupted",
            LogStatus::InUse { .. } => "in-use",
            LogStatus::Corrupt { .. } => "corrupt",
            LogStatus::Unsupported { .. } => "unsupported",
            LogStatus::Unreadable { .. } => "unreadable",
            LogStatus::Repaired { .. } => "repaired",
        }
    }
}

/// One log's verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LogReport {
    /// The log's id as its location names it.
    pub(crate) id: SessionId,
    /// Where the log lives, when its backend has files to name (`None` for backends without).
    pub(crate) path: Option<PathBuf>,
    /// Events in the balanced view (0 when unreadable).
    pub(crate) n_events: u64,
    /// The verdict.
    pub(crate) status: LogStatus,
}

/// Counts what a scan streams.
#[derive(Debug, Default)]
struct CountSink {
    n_events: u64,
}

impl ScanSink for CountSink {
    fn event(&mut self, _event: Arc<session_core::SessionEvent>) -> session_persistence::Result<()> {
        self.n_events += 1;
        Ok(())
    }

    fn restart(&mut self) -> bool {
        self.n_events = 0;
        true
    }
}

fn classify(error: PersistenceError) -> LogStatus {
    match error {
        // An id stored twice, or rows and metadata that disagree, is damage to the store, not a
        // read failure.
        PersistenceError::Corrupt { .. } | PersistenceError::Inconsistent { .. } => {
            LogStatus::Corrupt { message: error.to_string() }
        }
        PersistenceError::FormatUnsupported { .. } => LogStatus::Unsupported { message: error.to_string() },
        other => LogStatus::Unreadable { message: other.to_string() },
    }
}

/// How `verify` runs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct VerifyOptions {
    /// Commit the repairs of torn and interrupted logs.
    pub(crate) repair: bool,
    /// Another process holds the store for writing, so a log that ends inside a turn may be
    /// live, and a torn tail may be an append in flight: both are reported as in use.
    pub(crate) writer_active: bool,
}

/// Checks one log from its validating streamed inspection (`read`: structure, torn tail, session
/// rules, crash closers; a raw scan for the torn tail only when the inspection came from memory).
/// With `repair`, a torn or interrupted log is loaded, which cuts the torn tail and appends the
/// closers durably.
async fn judge_log(
    coordinator: &Coordinator,
    header: &SessionHeader,
    read: Result<(CountSink, session_persistence::StreamSummary), PersistenceError>,
    options: VerifyOptions,
) -> LogReport {
    let repair = options.repair;
    let id = header.id.clone();
    let cancel = CancellationToken::new();
    let path = coordinator.locate(header);
    let report = |n_events, status| LogReport { id: id.clone(), path: path.clone(), n_events, status };
    let (n_events, closers, torn) = match read {
        Ok((sink, summary)) => (sink.n_events, summary.n_closers, summary.torn),
        Err(PersistenceError::NotFound { .. }) => {
            return report(0, LogStatus::Unreadable { message: "the log vanished during the scan".to_owned() });
        }
        Err(error) => return report(0, classify(error)),
    };
    let torn = match torn {
        Some(torn) => torn,
        // Read from memory: a raw scan of the stored log tells.
        None => {
            let (scan_id, scan_cancel) = (id.clone(), cancel.clone());
            let scanned = run_blocking_with(coordinator.backend(), move |backend| {
                let mut sink = CountSink::default();
                backend.scan(&scan_id, &scan_cancel, &mut sink)
            })
            .await;
            match scanned {
                Ok(Some(outcome)) => outcome.torn.is_some(),
                Ok(None) => {
                    return report(0, LogStatus::Unreadable { message: "the log vanished during the scan".to_owned() });
                }
                Err(error) => return report(0, classify(error)),
            }
        }
    };
    let status = match (torn, closers) {
        (false, 0) => return report(n_events, LogStatus::Healthy),
        // Beside a running writer, an open turn may be live and a torn tail an append in flight.
        _ if options.writer_active => return report(n_events, LogStatus::InUse { holder: None }),
        (true, _) => LogStatus::Torn,
        (false, closers) => LogStatus::Interrupted { closers },
    };
    if !repair {
        return report(n_events, status);
    }
    match coordinator.load(&id, &cancel).await {
        Ok(loaded) => {
            let what = if torn { "cut the torn tail and closed the log" } else { "closed the interrupted turn" };
            report(loaded.events.len() as u64, LogStatus::Repaired { what })
        }
        // A live writer holds the session: its open turn is left alone.
        Err(PersistenceError::Held { holder, .. }) => report(n_events, LogStatus::InUse { holder: Some(holder) }),
        Err(error) => {
            tracing::error!(session = %id, %error, "repair failed");
            report(n_events, status)
        }
    }
}

/// Surveys the store and verifies every log, calling `progress(done, total)` after each one. The
/// logs' validating reads go in batches of [`VERIFY_BATCH`], [`VERIFY_LANES`] at a time (one
/// batched read, so a backend that reads short logs ahead reads many in one round trip). A log
/// whose header cannot be read is reported (corrupt, unsupported or unreadable) instead of hiding
/// the others.
pub(crate) async fn verify(
    coordinator: &Coordinator,
    options: VerifyOptions,
    mut progress: impl FnMut(usize, usize, &LogReport),
) -> Result<Vec<LogReport>, ProxyError> {
    let cancel = CancellationToken::new();
    let survey = run_blocking_with(coordinator.backend(), |backend| backend.survey(&CancellationToken::new())).await?;
    let total = survey.len();
    let mut reports = Vec::with_capacity(total);
    let mut entries = survey.into_iter().peekable();
    while entries.peek().is_some() {
        let mut headers = Vec::with_capacity(VERIFY_BATCH);
        for entry in entries.by_ref().take(VERIFY_BATCH) {
            match entry.header {
                Ok(stored) => headers.push(stored.header),
                Err(error) => {
                    let report = LogReport { id: entry.id, path: entry.path, n_events: 0, status: classify(error) };
                    progress(reports.len() + 1, total, &report);
                    reports.push(report);
                }
            }
        }
        let reads = headers.iter().map(|header| (header.id.clone(), CountSink::default())).collect();
        let read = session_persistence::inspect_each_into(coordinator, reads, VERIFY_LANES, &cancel).await;
        for (header, read) in headers.iter().zip(read) {
            let report = judge_log(coordinator, header, read, options).await;
            progress(reports.len() + 1, total, &report);
            reports.push(report);
        }
    }
    reports.sort_by(|a, b| a.id.cmp(&b.id));
    Ok(reports)
}

/// Logs `verify` reads at once: on PostgreSQL each read is a round trip, so several in flight keep
/// the server (and both cores of a local store) busy.
const VERIFY_LANES: usize = 8;

/// Logs `verify` hands to one batched read.
const VERIFY_BATCH: usize = 512;

/// The header and balanced events of a session as one JSON value.
pub(crate) fn inspection_json(inspection: &Inspection) -> Value {
    json!({"header": inspection.header, "events": inspection.events})
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::json;
    use session_core::{JsonData, SessionEvent, SessionHeader};
    use session_persistence::Backend;

    use super::*;

    #[test]
    fn file_stamps_are_compact_utc_times() {
        assert_eq!(file_stamp(784_111_777_000), "19941106T084937Z");
        assert_eq!(file_stamp(-1), "19700101T000000Z");
    }

    #[test]
    fn a_store_without_an_encoding_asked_for_gets_the_one_its_logs_use_else_zstd() {
        let dir = tempfile::tempdir().unwrap();
        let raw_root = dir.path().join("raw");
        let zstd_root = dir.path().join("zstd");
        let header = SessionHeader::new(SessionId::from("z"), 1);
        let events = [SessionEvent::new("turn/start", 0, 1, JsonData::from_value(&json!({"turn": 1})).unwrap())];
        for (root, compression) in [(&raw_root, Compression::None), (&zstd_root, Compression::Zstd)] {
            let config = JsonlConfig { root: root.clone(), compression, pack_chunks: true };
            let backend = JsonlStore::open(config).unwrap();
            backend.append_batch(&header, &events.clone().map(Arc::new), false).unwrap();
        }
        assert_eq!(detect_compression(&raw_root).unwrap(), Compression::None);
        assert_eq!(detect_compression(&zstd_root).unwrap(), Compression::Zstd);
        let empty = dir.path().join("empty");
        std::fs::create_dir_all(&empty).unwrap();
        assert_eq!(detect_compression(&empty).unwrap(), Compression::Zstd);
        assert_eq!(detect_compression(&dir.path().join("absent")).unwrap(), Compression::Zstd);
    }
}
