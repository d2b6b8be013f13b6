//! The listing matrix's harness (the `subagent` crate's own, over every backend): a JSONL
//! directory, a SQLite database or a PostgreSQL scratch schema behind a coordinator, a live
//! session store, the projection registry, the optional projection cache, the instrumented
//! persistence wrapper (read counts, list and read faults), a hostile foreign unit, and event
//! builders.

use std::{
    collections::{HashMap, HashSet},
    fmt,
    path::PathBuf,
    sync::{
        Arc,
        atomic::{AtomicU64, AtomicUsize, Ordering},
    },
    time::Duration,
};

use parking_lot::Mutex;
use serde::{Deserialize, Serialize, Serializer};
use serde_json::{Value, json};
use session_core::{
    CreateOptions, HeaderMeta, JsonData, ManualClock, Origin, Session, SessionEvent, SessionHeader, SessionId,
    SessionStore, SurfaceIntent, SurfaceOp, is_surface_eligible,
};
use session_persistence::{
    Backend, Compression, Coordinator, CoordinatorConfig, HeaderPage, Inspection, JsonlConfig, JsonlStore, Listing,
    PageRequest, PersistenceError, SessionPersistence, StoredHeader, StreamSink, StreamSummary,
};
use session_persistence_postgres::testing::{ScratchSchema, server_url};
use session_persistence_sqlite::{SqliteConfig, SqliteStore};
use session_projection::{ClientView, ProjectionRegistry, ProjectionUnit, StoreAttachment, UnitError};
use session_projection_cache::{CacheAttachment, CacheConfig, MemoryCheckpointStore, ProjectionCache};
use subagent::{
    CheckpointSource, ChildOptions, ContinuableDescriptor, OneShotDescriptor, SubagentError, SubagentListEntry,
    SubagentRuntime, SubagentServices, create_continuable_child, create_one_shot_child,
};
use tokio::sync::{Notify, oneshot};
use tokio_util::sync::CancellationToken;

/// The backend a listing test's logs live in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Backing {
    /// A JSONL directory, in the setup's `compression`.
    Jsonl,
    /// A SQLite database (`session-persistence-sqlite`).
    Sqlite,
    /// A scratch schema of the PostgreSQL test server (`session-persistence-postgres`).
    Postgres,
}

/// One storage configuration a listing test runs under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Setup {
    pub(crate) backing: Backing,
    /// The JSONL encoding (unused by the other backings).
    pub(crate) compression: Compression,
    pub(crate) cache: bool,
}

impl Setup {
    const fn jsonl(compression: Compression, cache: bool) -> Setup {
        Setup { backing: Backing::Jsonl, compression, cache }
    }

    const fn on(backing: Backing, cache: bool) -> Setup {
        Setup { backing, compression: Compression::None, cache }
    }
}

/// Raw and zstd, each with and without the projection cache.
pub(crate) const MATRIX: [Setup; 4] = [
    Setup::jsonl(Compression::None, false),
    Setup::jsonl(Compression::Zstd, false),
    Setup::jsonl(Compression::None, true),
    Setup::jsonl(Compression::Zstd, true),
];

/// The SQLite backend, without and with the projection cache.
pub(crate) const SQLITE: [Setup; 2] = [Setup::on(Backing::Sqlite, false), Setup::on(Backing::Sqlite, true)];

/// The PostgreSQL backend, without and with the projection cache (skipped, after saying so,
/// without a configured server outside CI; a failure under CI).
pub(crate) const POSTGRES: [Setup; 2] = [Setup::on(Backing::Postgres, false), Setup::on(Backing::Postgres, true)];

pub(crate) fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
}

/// Runs `test` once per setup, each in a fresh runtime and a fresh temp dir.
pub(crate) fn run_each<F: AsyncFnMut(&Harness)>(setups: &[Setup], mut test: F) {
    for setup in setups {
        if setup.backing == Backing::Postgres && server_url().is_none() {
            continue;
        }
        let runtime = runtime();
        runtime.block_on(async {
            let harness = Harness::new(*setup);
            test(&harness).await;
            harness.shutdown().await;
        });
    }
}

/// Runs `test` on every JSONL setup of [`MATRIX`], on both [`SQLITE`] setups and on both
/// [`POSTGRES`] setups.
pub(crate) fn run<F: AsyncFnMut(&Harness)>(mut test: F) {
    run_each(&MATRIX, &mut test);
    run_each(&SQLITE, &mut test);
    run_each(&POSTGRES, test);
}

pub(crate) fn id(text: &str) -> SessionId {
    SessionId::from(text)
}

pub(crate) fn token() -> CancellationToken {
    CancellationToken::new()
}

/// The composition of one test.
pub(crate) struct Harness {
    pub(crate) setup: Setup,
    _dir: tempfile::TempDir,
    pub(crate) clock: Arc<ManualClock>,
    pub(crate) store: Arc<SessionStore>,
    pub(crate) registry: Arc<ProjectionRegistry>,
    pub(crate) coordinator: Coordinator,
    pub(crate) persistence: Arc<Counting>,
    pub(crate) cache: Option<ProjectionCache>,
    pub(crate) runtime: Arc<SubagentRuntime>,
    _cache_attachment: Option<CacheAttachment>,
    _registry_attachment: StoreAttachment,
    /// The PostgreSQL schema, dropped after everything above lets go of the store.
    _schema: Option<ScratchSchema>,
}

impl Harness {
    pub(crate) fn new(setup: Setup) -> Harness {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("store");
        Harness::over(setup, dir, root)
    }

    /// A harness over an existing store root (for the golden fixtures).
    pub(crate) fn over(setup: Setup, dir: tempfile::TempDir, root: PathBuf) -> Harness {
        let clock = Arc::new(ManualClock::new(1_000));
        let store = Arc::new(SessionStore::new(clock.clone()));
        let mut schema = None;
        let backend: Arc<dyn Backend> = match setup.backing {
            Backing::Jsonl => Arc::new(
                JsonlStore::open(JsonlConfig { root, compression: setup.compression, pack_chunks: true }).unwrap(),
            ),
            Backing::Sqlite => Arc::new(SqliteStore::open(SqliteConfig::file(root.with_extension("db"))).unwrap()),
            Backing::Postgres => {
                Arc::new(schema.insert(ScratchSchema::new().expect("the PostgreSQL server is configured")).open())
            }
        };
        let config =
            CoordinatorConfig { write_batch_max_delay: Duration::from_millis(5), ..CoordinatorConfig::default() };
        let coordinator = Coordinator::new(backend, config).unwrap();
        coordinator.attach(&store).unwrap();
        let registry = ProjectionRegistry::new();
        let cache = setup.cache.then(|| {
            ProjectionCache::new(
                registry.clone(),
                Arc::new(coordinator.clone()),
                Arc::new(MemoryCheckpointStore::new()),
                clock.clone(),
                CacheConfig::new(100, 60_000).unwrap(),
            )
            .unwrap()
        });
        let cache_attachment = cache.as_ref().map(|cache| cache.attach(&store).unwrap());
        let registry_attachment = registry.attach(&store);
        let persistence = Arc::new(Counting::new(Arc::new(coordinator.clone())));
        let services = SubagentServices {
            sessions: Some(store.clone()),
            projections: Some(registry.clone()),
            persistence: Some(persistence.clone()),
            cache: cache.clone().map(|cache| Arc::new(cache) as Arc<dyn CheckpointSource>),
        };
        let runtime = Arc::new(SubagentRuntime::new(services).unwrap());
        Harness {
            setup,
            _dir: dir,
            clock,
            store,
            registry,
            coordinator,
            persistence,
            cache,
            runtime,
            _cache_attachment: cache_attachment,
            _registry_attachment: registry_attachment,
            _schema: schema,
        }
    }

    async fn shutdown(&self) {
        if let Some(cache) = &self.cache {
            cache.settle().await;
        }
        self.coordinator.close().await.unwrap();
    }

    pub(crate) async fn list(&self, parent: &str) -> Vec<SubagentListEntry> {
        self.runtime.list_children(&id(parent), &token()).await.unwrap()
    }

    pub(crate) async fn list_json(&self, parent: &str) -> Value {
        serde_json::to_value(self.list(parent).await).unwrap()
    }

    pub(crate) async fn descendants_json(&self, root: &str) -> Value {
        serde_json::to_value(self.runtime.list_descendants(&id(root), &token()).await.unwrap()).unwrap()
    }

    /// Writes a stored session straight through the persistence API (a cold child that never
    /// went through the live store, like the reference tests' `authorChild`).
    pub(crate) async fn author(&self, header: SessionHeader, events: Vec<Arc<SessionEvent>>) {
        self.coordinator.create(header.clone(), &token()).await.unwrap();
        self.coordinator.append(&header.id, events, &token()).await.unwrap();
    }

    /// Writes a stored log through the backend, bypassing the coordinator's append checks, so a
    /// log the read side rejects can be stored.
    pub(crate) fn author_unchecked(&self, header: SessionHeader, events: Vec<Arc<SessionEvent>>) {
        // A synchronous backend call straight from async code: every store allows it, the
        // PostgreSQL one included.
        self.coordinator.backend().append_batch(&header, &events, false).unwrap();
    }

    /// Creates and publishes a live session with `header`'s metadata and appends `events` (their
    /// kinds and payloads; seqs and times come from the session).
    pub(crate) fn live(&self, header: SessionHeader, events: &[Arc<SessionEvent>]) -> Arc<Session> {
        let meta = HeaderMeta {
            cwd: header.cwd.clone(),
            parent_session: header.parent_session.clone(),
            created_at: Some(header.created_at),
            seed_length: header.seed_length,
            origin: header.origin,
            delegation_depth: header.delegation_depth,
            agent_preset: header.agent_preset.clone(),
            owner: header.owner.clone(),
        };
        let session = self.store.create(Some(header.id.clone()), CreateOptions { seed: None, meta }).unwrap();
        for event in events {
            append(&session, &event.kind, event.data.to_value().unwrap());
        }
        session
    }

    /// A live parent with one completed turn.
    pub(crate) fn parent(&self, name: &str) -> Arc<Session> {
        let session = self.store.create(Some(id(name)), CreateOptions::default()).unwrap();
        run_turn(&session, 1, None::<fn()>);
        session
    }

    /// Flushes a live session, takes it out of the store, and waits until its cache record (if
    /// any) is written: it is cold from now on.
    pub(crate) async fn settle(&self, session: &Arc<Session>) {
        self.store.flush(session.id()).await.unwrap();
        self.store.detach(session.id()).unwrap();
        if let Some(cache) = &self.cache {
            cache.settle().await;
        }
    }

    /// A real continuable child: created by the crate's helper, one completed turn, then settled.
    pub(crate) async fn start_continuable(&self, parent: &Arc<Session>, child: &str, label: &str) -> Arc<Session> {
        let descriptor = continuable_descriptor(label);
        let options = ChildOptions { id: Some(id(child)), ..ChildOptions::default() };
        let session = create_continuable_child(&self.store, parent, descriptor, options).unwrap();
        run_turn(&session, 1, None::<fn()>);
        self.settle(&session).await;
        session
    }

    /// A real one-shot child: its descriptor is appended when the first step is entered.
    pub(crate) async fn start_one_shot(&self, parent: &Arc<Session>, child: &str, label: Option<&str>) -> Arc<Session> {
        let descriptor = OneShotDescriptor { provider: "spawn".to_owned(), label: label.map(str::to_owned) };
        let options = ChildOptions { id: Some(id(child)), ..ChildOptions::default() };
        let child = create_one_shot_child(&self.store, parent, descriptor, options).unwrap();
        run_turn(
            child.session(),
            1,
            Some(|| {
                child.enter_first_step().unwrap();
            }),
        );
        let session = child.session().clone();
        self.settle(&session).await;
        session
    }

    /// The number of stored reads of `child` so far.
    pub(crate) fn reads(&self, child: &str) -> u64 {
        self.persistence.reads(&id(child))
    }

    /// How many reads a real child (one that went through the live store) costs per listing:
    /// zero when the cache holds its record, else one.
    pub(crate) fn real_child_reads(&self) -> u64 {
        if self.setup.cache { 0 } else { 1 }
    }
}

pub(crate) fn continuable_descriptor(label: &str) -> ContinuableDescriptor {
    ContinuableDescriptor {
        provider: "spawn".to_owned(),
        label: label.to_owned(),
        agent_provider: Some("demo-llm".to_owned()),
        agent_model: Some("scripted-1".to_owned()),
        persona: None,
        tool_filter: None,
    }
}

/// Appends `kind` with `data` to a live session; surface-eligible kinds are appended to the
/// surface.
pub(crate) fn append(session: &Session, kind: &str, data: Value) -> Arc<SessionEvent> {
    let surface = is_surface_eligible(kind).then(SurfaceIntent::append);
    session.append(kind, &data, surface).unwrap()
}

/// One complete turn on a live session; `at_first_step` runs right before `step/start`.
pub(crate) fn run_turn(session: &Session, turn: u64, at_first_step: Option<impl FnOnce()>) {
    append(session, "turn/start", json!({"turn": turn}));
    append(session, "user/message", user_message_data(session.len(), "do the work"));
    if let Some(at_first_step) = at_first_step {
        at_first_step();
    }
    append(session, "step/start", json!({"turn": turn, "step": 1}));
    append(session, "assistant/message", assistant_message_data(session.len(), turn));
    append(session, "step/end", json!({"turn": turn, "step": 1}));
    append(session, "turn/end", json!({"turn": turn, "reason": {"kind": "completed"}}));
}

pub(crate) fn user_message_data(seq: u64, text: &str) -> Value {
    json!({"id": format!("m-{seq}"), "role": "user", "source": {"kind": "user"},
           "content": [{"type": "text", "text": text}]})
}

pub(crate) fn assistant_message_data(seq: u64, turn: u64) -> Value {
    json!({"turn": turn, "step": 1, "message": {"id": format!("a-{seq}"), "role": "assistant",
           "source": {"kind": "model", "provider": "p", "model": "m"},
           "content": [{"type": "text", "text": "done"}]}})
}

/// An event at `seq` with time `100 + seq`; surface-eligible kinds get `surfaceOp: append`.
pub(crate) fn ev(kind: &str, seq: u64, data: Value) -> Arc<SessionEvent> {
    ev_at(kind, seq, 100 + seq as i64, data)
}

pub(crate) fn ev_at(kind: &str, seq: u64, time: i64, data: Value) -> Arc<SessionEvent> {
    let mut event = SessionEvent::new(kind, seq, time, JsonData::from_value(&data).unwrap());
    if is_surface_eligible(kind) {
        event.surface_op = Some(SurfaceOp::Append);
    }
    Arc::new(event)
}

pub(crate) fn descriptor_event(seq: u64, payload: Value) -> Arc<SessionEvent> {
    ev("subagent/descriptor", seq, payload)
}

pub(crate) fn continuable(label: &str) -> Value {
    json!({"version": 2, "mode": "continuable", "provider": "spawn", "label": label})
}

pub(crate) fn one_shot(label: Option<&str>) -> Value {
    match label {
        Some(label) => json!({"version": 2, "mode": "one-shot", "provider": "spawn", "label": label}),
        None => json!({"version": 2, "mode": "one-shot", "provider": "spawn"}),
    }
}

/// The reference tests' `childEvents(desc)`: turn/start 0, user/message 1, descriptor 2,
/// turn/end 3.
pub(crate) fn child_events(descriptor: Value) -> Vec<Arc<SessionEvent>> {
    vec![
        ev("turn/start", 0, json!({"turn": 1})),
        ev("user/message", 1, user_message_data(1, "hello")),
        descriptor_event(2, descriptor),
        ev("turn/end", 3, json!({"turn": 1, "reason": {"kind": "completed"}})),
    ]
}

/// A complete turn of stored events starting at `seq0`.
pub(crate) fn stored_turn(seq0: u64, turn: u64) -> Vec<Arc<SessionEvent>> {
    vec![
        ev("turn/start", seq0, json!({"turn": turn})),
        ev("user/message", seq0 + 1, user_message_data(seq0 + 1, "hello")),
        ev("step/start", seq0 + 2, json!({"turn": turn, "step": 1})),
        ev("assistant/message", seq0 + 3, assistant_message_data(seq0 + 3, turn)),
        ev("step/end", seq0 + 4, json!({"turn": turn, "step": 1})),
        ev("turn/end", seq0 + 5, json!({"turn": turn, "reason": {"kind": "completed"}})),
    ]
}

/// A header builder: `child_header("c", "p")` is a subagent-origin child of `p` at depth 1,
/// created at 1, with a cwd.
pub(crate) fn child_header(child: &str, parent: &str) -> SessionHeader {
    let mut header = SessionHeader::new(id(child), 1);
    header.cwd = Some("/work/project".to_owned());
    header.parent_session = Some(id(parent));
    header.origin = Some(Origin::Subagent);
    header.delegation_depth = 1;
    header
}

pub(crate) fn plain_header(session: &str, created_at: u64) -> SessionHeader {
    let mut header = SessionHeader::new(id(session), created_at);
    header.cwd = Some("/work/project".to_owned());
    header
}

pub(crate) fn created(mut header: SessionHeader, created_at: u64) -> SessionHeader {
    header.created_at = created_at;
    header
}

/// Asserts that `result` is the coded subagent error `code`.
pub(crate) fn assert_code<T: fmt::Debug>(result: Result<T, SubagentError>, code: &str) {
    match result {
        Err(error) => assert_eq!(error.code().map(|code| code.as_str()), Some(code), "{error}"),
        Ok(value) => panic!("expected {code}, got {value:?}"),
    }
}

/// What the instrumented wrapper does to `list`.
#[derive(Debug, Clone, Default)]
pub(crate) enum ListFault {
    #[default]
    None,
    /// Fail with this message (no cancellation involved).
    Fail(&'static str),
    /// Cancel this token, then list normally.
    CancelThenOk(CancellationToken),
    /// Wait until the caller's token fires, then fail with `Cancelled` (a backend that rejects on
    /// abort).
    PendUntilCancelled,
}

/// What the instrumented wrapper does to a read of one id.
#[derive(Debug, Clone)]
pub(crate) enum ReadFault {
    Fail,
    /// Wait until the read's token fires, then fail with `Cancelled`.
    PendUntilCancelled,
    /// Read normally, then cancel this token before returning.
    CancelAfterOk(CancellationToken),
    /// Cancel this token, then fail.
    CancelThenFail(CancellationToken),
    /// Read normally, then change the returned header.
    Tamper(fn(&mut SessionHeader)),
}

/// Holds reads until the test releases them one by one.
#[derive(Debug, Default)]
pub(crate) struct Gate {
    waiting: Mutex<Vec<(SessionId, oneshot::Sender<()>)>>,
    changed: Notify,
}

impl Gate {
    /// Waits until exactly `n` reads are held, and returns their ids in arrival order.
    pub(crate) async fn held(&self, n: usize) -> Vec<SessionId> {
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let waiting = self.waiting.lock();
                assert!(waiting.len() <= n, "{} reads held, expected at most {n}", waiting.len());
                if waiting.len() == n {
                    return waiting.iter().map(|(id, _)| id.clone()).collect();
                }
            }
            notified.await;
        }
    }

    pub(crate) fn release(&self, child: &SessionId) {
        let sender = {
            let mut waiting = self.waiting.lock();
            let idx = waiting.iter().position(|(id, _)| id == child).expect("the read is held");
            waiting.remove(idx).1
        };
        sender.send(()).unwrap();
    }

    async fn hold(&self, child: &SessionId) {
        let (sender, receiver) = oneshot::channel();
        self.waiting.lock().push((child.clone(), sender));
        self.changed.notify_waiters();
        receiver.await.unwrap();
    }
}

/// A `SessionPersistence` that forwards to a real one, counts reads per id, and injects faults.
#[derive(Debug)]
pub(crate) struct Counting {
    inner: Arc<dyn SessionPersistence>,
    reads: Mutex<HashMap<SessionId, u64>>,
    /// Reads that materialize a whole log (`inspect`, `read_from`, `load`), as opposed to streams.
    materialized: AtomicU64,
    lists: AtomicU64,
    /// Batches handed whole to the real persistence.
    batches: AtomicU64,
    list_fault: Mutex<ListFault>,
    read_faults: Mutex<HashMap<SessionId, ReadFault>>,
    gate: Mutex<Option<Arc<Gate>>>,
    in_flight: AtomicUsize,
    max_in_flight: AtomicUsize,
    /// The tokens reads were given, by id, most recent last.
    tokens: Mutex<HashMap<SessionId, CancellationToken>>,
    /// Fires whenever a read or a list starts.
    pub(crate) entered: Notify,
    entered_ids: Mutex<HashSet<SessionId>>,
}

impl Counting {
    pub(crate) fn new(inner: Arc<dyn SessionPersistence>) -> Counting {
        Counting {
            inner,
            reads: Mutex::new(HashMap::new()),
            materialized: AtomicU64::new(0),
            lists: AtomicU64::new(0),
            batches: AtomicU64::new(0),
            list_fault: Mutex::new(ListFault::None),
            read_faults: Mutex::new(HashMap::new()),
            gate: Mutex::new(None),
            in_flight: AtomicUsize::new(0),
            max_in_flight: AtomicUsize::new(0),
            tokens: Mutex::new(HashMap::new()),
            entered: Notify::new(),
            entered_ids: Mutex::new(HashSet::new()),
        }
    }

    pub(crate) fn reads(&self, child: &SessionId) -> u64 {
        self.reads.lock().get(child).copied().unwrap_or(0)
    }

    pub(crate) fn total_reads(&self) -> u64 {
        self.reads.lock().values().sum()
    }

    pub(crate) fn materialized_reads(&self) -> u64 {
        self.materialized.load(Ordering::SeqCst)
    }

    pub(crate) fn lists(&self) -> u64 {
        self.lists.load(Ordering::SeqCst)
    }

    /// How many batches of reads went whole to the real persistence's read lanes.
    pub(crate) fn batches(&self) -> u64 {
        self.batches.load(Ordering::SeqCst)
    }

    pub(crate) fn max_in_flight(&self) -> usize {
        self.max_in_flight.load(Ordering::SeqCst)
    }

    pub(crate) fn set_list_fault(&self, fault: ListFault) {
        *self.list_fault.lock() = fault;
    }

    pub(crate) fn set_read_fault(&self, child: &str, fault: Option<ReadFault>) {
        let mut faults = self.read_faults.lock();
        match fault {
            Some(fault) => faults.insert(id(child), fault),
            None => faults.remove(&id(child)),
        };
    }

    pub(crate) fn set_gate(&self, gate: Option<Arc<Gate>>) {
        *self.gate.lock() = gate;
    }

    /// Waits until a read of `child` has started.
    pub(crate) async fn wait_entered(&self, child: &str) {
        loop {
            let notified = self.entered.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.entered_ids.lock().contains(&id(child)) {
                return;
            }
            notified.await;
        }
    }

    /// Waits until `list` has been called at least once.
    pub(crate) async fn wait_listed(&self) {
        loop {
            let notified = self.entered.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.lists() > 0 {
                return;
            }
            notified.await;
        }
    }

    /// A listing through the list fault: counted, then `list` (the real persistence's listing)
    /// unless the fault answers instead.
    async fn listed(
        &self,
        cancel: &CancellationToken,
        list: impl Future<Output = session_persistence::Result<Listing>>,
    ) -> session_persistence::Result<Listing> {
        self.lists.fetch_add(1, Ordering::SeqCst);
        self.entered.notify_waiters();
        let fault = self.list_fault.lock().clone();
        match fault {
            ListFault::None => list.await,
            ListFault::Fail(message) => Err(injected(message)),
            ListFault::CancelThenOk(token) => {
                token.cancel();
                list.await
            }
            ListFault::PendUntilCancelled => {
                cancel.cancelled().await;
                Err(PersistenceError::Cancelled)
            }
        }
    }

    fn count_read(&self, child: &SessionId, cancel: &CancellationToken) {
        *self.reads.lock().entry(child.clone()).or_default() += 1;
        self.tokens.lock().insert(child.clone(), cancel.clone());
        self.entered_ids.lock().insert(child.clone());
        self.entered.notify_waiters();
    }
}

struct InFlight<'a>(&'a Counting);

impl<'a> InFlight<'a> {
    fn enter(counting: &'a Counting) -> InFlight<'a> {
        let now = counting.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        counting.max_in_flight.fetch_max(now, Ordering::SeqCst);
        InFlight(counting)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

fn injected(message: &str) -> PersistenceError {
    PersistenceError::InvalidInput { message: message.to_owned() }
}

#[async_trait::async_trait]
impl SessionPersistence for Counting {
    async fn create(&self, header: SessionHeader, cancel: &CancellationToken) -> session_persistence::Result<()> {
        self.inner.create(header, cancel).await
    }

    async fn append(
        &self,
        id: &SessionId,
        events: Vec<Arc<SessionEvent>>,
        cancel: &CancellationToken,
    ) -> session_persistence::Result<()> {
        self.inner.append(id, events, cancel).await
    }

    async fn list_snapshots(&self, cancel: &CancellationToken) -> session_persistence::Result<Listing> {
        self.listed(cancel, self.inner.list_snapshots(cancel)).await
    }

    /// Counted and failed as a listing, and answered by the real persistence's own query (over
    /// PostgreSQL, `PgStore::list_children`'s SQL).
    async fn list_children(
        &self,
        parent: &SessionId,
        cancel: &CancellationToken,
    ) -> session_persistence::Result<Listing> {
        self.listed(cancel, self.inner.list_children(parent, cancel)).await
    }

    async fn list_page(
        &self,
        request: &PageRequest,
        cancel: &CancellationToken,
    ) -> session_persistence::Result<HeaderPage> {
        self.inner.list_page(request, cancel).await
    }

    async fn stored_header(
        &self,
        id: &SessionId,
        cancel: &CancellationToken,
    ) -> session_persistence::Result<Option<StoredHeader>> {
        self.inner.stored_header(id, cancel).await
    }

    fn durable_len(&self, id: &SessionId) -> Option<u64> {
        self.inner.durable_len(id)
    }

    fn fence(&self, id: &SessionId) -> Option<String> {
        self.inner.fence(id)
    }

    async fn inspect(&self, id: &SessionId, cancel: &CancellationToken) -> session_persistence::Result<Inspection> {
        self.count_read(id, cancel);
        self.materialized.fetch_add(1, Ordering::SeqCst);
        self.inner.inspect(id, cancel).await
    }

    async fn inspect_stream(
        &self,
        id: &SessionId,
        cancel: &CancellationToken,
        sink: Box<dyn StreamSink>,
    ) -> session_persistence::Result<StreamSummary> {
        self.count_read(id, cancel);
        let _in_flight = InFlight::enter(self);
        let gate = self.gate.lock().clone();
        if let Some(gate) = gate {
            gate.hold(id).await;
        }
        let fault = self.read_faults.lock().get(id).cloned();
        match fault {
            None => self.inner.inspect_stream(id, cancel, sink).await,
            Some(ReadFault::Fail) => Err(injected("injected read failure")),
            Some(ReadFault::PendUntilCancelled) => {
                cancel.cancelled().await;
                Err(PersistenceError::Cancelled)
            }
            Some(ReadFault::CancelAfterOk(token)) => {
                let read = self.inner.inspect_stream(id, cancel, sink).await;
                token.cancel();
                read
            }
            Some(ReadFault::CancelThenFail(token)) => {
                token.cancel();
                Err(injected("injected read failure"))
            }
            Some(ReadFault::Tamper(tamper)) => {
                let mut summary = self.inner.inspect_stream(id, cancel, sink).await?;
                let mut header = (*summary.header).clone();
                tamper(&mut header);
                summary.header = Arc::new(header);
                Ok(summary)
            }
        }
    }

    /// Reads one by one through `inspect_stream` (and its gate and faults) when a gate or a fault
    /// is set; otherwise hands the batch to the real persistence, so its read lanes are tested.
    async fn inspect_streams(
        &self,
        reads: Vec<(SessionId, Box<dyn StreamSink>)>,
        lanes: usize,
        cancel: &CancellationToken,
    ) -> Vec<session_persistence::Result<StreamSummary>> {
        if self.gate.lock().is_some() || !self.read_faults.lock().is_empty() {
            return session_persistence::stream_each(self, reads, lanes, cancel).await;
        }
        self.batches.fetch_add(1, Ordering::SeqCst);
        for (id, _) in &reads {
            self.count_read(id, cancel);
        }
        self.inner.inspect_streams(reads, lanes, cancel).await
    }

    async fn read_from(
        &self,
        id: &SessionId,
        from_seq: u64,
        cancel: &CancellationToken,
    ) -> session_persistence::Result<Inspection> {
        self.count_read(id, cancel);
        self.materialized.fetch_add(1, Ordering::SeqCst);
        self.inner.read_from(id, from_seq, cancel).await
    }

    async fn load(&self, id: &SessionId, cancel: &CancellationToken) -> session_persistence::Result<Inspection> {
        self.count_read(id, cancel);
        self.materialized.fetch_add(1, Ordering::SeqCst);
        self.inner.load(id, cancel).await
    }

    async fn flush(&self, id: &SessionId, cancel: &CancellationToken) -> session_persistence::Result<()> {
        self.inner.flush(id, cancel).await
    }

    async fn release(&self, id: &SessionId, cancel: &CancellationToken) -> session_persistence::Result<()> {
        self.inner.release(id, cancel).await
    }

    fn locate(&self, header: &SessionHeader) -> Option<PathBuf> {
        self.inner.locate(header)
    }
}

/// How the hostile foreign unit misbehaves on a log whose descriptor is labelled `poison me`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Hostility {
    /// `apply` poisons the state lazily, `view` then fails to serialize (the reference's probe).
    ViewDetonates,
    /// `apply` returns an error.
    ApplyFails,
    /// `view` panics.
    ViewPanics,
}

/// A foreign unit that misbehaves only for children labelled `poison me`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct HostileUnit(pub(crate) Hostility);

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct HostileState {
    poisoned: bool,
}

pub(crate) struct HostileView(bool);

impl Serialize for HostileView {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        if self.0 {
            return Err(serde::ser::Error::custom("hostile view detonated"));
        }
        serializer.serialize_bool(false)
    }
}

impl ProjectionUnit for HostileUnit {
    type State = HostileState;

    fn key(&self) -> &str {
        "hostile"
    }

    fn state_version(&self) -> u64 {
        1
    }

    fn init(&self) -> HostileState {
        HostileState::default()
    }

    fn reads(&self) -> Option<&'static [&'static str]> {
        Some(&["subagent/descriptor"])
    }

    fn apply(&self, _state: &HostileState, event: &SessionEvent) -> Result<Option<HostileState>, UnitError> {
        let poisoned = event.data.to_value().unwrap().get("label") == Some(&json!("poison me"));
        if !poisoned {
            return Ok(None);
        }
        if self.0 == Hostility::ApplyFails {
            return Err("hostile apply refused the log".into());
        }
        Ok(Some(HostileState { poisoned: true }))
    }
}

impl ClientView for HostileUnit {
    type View = HostileView;

    fn view(&self, state: &HostileState) -> HostileView {
        assert!(!(state.poisoned && self.0 == Hostility::ViewPanics), "hostile view panicked");
        HostileView(state.poisoned)
    }
}
