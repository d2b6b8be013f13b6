//! Test units, an instrumented persistence, a failing checkpoint store, a log capture and the
//! world builder shared by the integration tests.

use std::{
    fmt, panic,
    path::PathBuf,
    sync::{
        Arc, Once,
        atomic::{AtomicUsize, Ordering},
    },
};

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use session_core::{
    CreateOptions, HeaderMeta, JsonData, ManualClock, Session, SessionEvent, SessionHeader, SessionId, SessionStore,
};
use session_persistence::{
    Coordinator, CoordinatorConfig, Inspection, KnownTypes, Listing, MemoryStore, PersistenceError, SessionPersistence,
    StreamSink, StreamSummary,
};
use session_projection::{
    CheckpointRows, ClientView, ProjectionRegistry, ProjectionUnit, Registration, StoreAttachment, UnitError,
};
use session_projection_cache::{
    CacheAttachment, CacheConfig, CacheError, CheckpointRecord, CheckpointStore, MemoryCheckpointStore,
    ProjectionCache, RecordIdentity,
};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

/// The event types the test units read, accepted by the persistence reads.
const TEST_TYPES: [&str; 7] =
    ["test/mark", "test/add", "test/touch", "test/other", "test/label", "test/huge", "test/fail"];

pub(crate) fn data(value: Value) -> JsonData {
    JsonData::from_value(&value).expect("test payloads are lossless")
}

pub(crate) fn event(seq: u64, kind: &str, value: Value) -> Arc<SessionEvent> {
    Arc::new(SessionEvent::new(kind, seq, T0 + seq as i64, data(value)))
}

pub(crate) use projection_testkit::{Count, DELIBERATE, Marks, SumState, T0, append, mark, other, quiet_unit_panics};

pub(crate) fn turn_start(session: &Session, turn: u64) -> Arc<SessionEvent> {
    append(session, "turn/start", json!({ "turn": turn }))
}

pub(crate) fn turn_end(session: &Session, turn: u64) -> Arc<SessionEvent> {
    append(session, "turn/end", json!({ "turn": turn, "reason": { "kind": "completed" } }))
}

// ---------------------------------------------------------------------------------------------
// Units (the shared ones come from `projection-testkit`)

/// `test/sum`: accumulates `n` of every `test/add` and remembers which seqs it folded, so a double
/// or a skipped application shows.
pub(crate) struct Sum;

impl ProjectionUnit for Sum {
    type State = SumState;

    fn key(&self) -> &str {
        "test/sum"
    }

    fn state_version(&self) -> u64 {
        3
    }

    fn init(&self) -> SumState {
        SumState { total: 0, seqs: Vec::new() }
    }

    fn reads(&self) -> Option<&'static [&'static str]> {
        Some(&["test/add"])
    }

    fn apply(&self, state: &SumState, event: &SessionEvent) -> Result<Option<SumState>, UnitError> {
        #[derive(Deserialize)]
        struct Add {
            n: i64,
        }
        let add: Add = event.data.parse()?;
        Ok(Some(state.add(event.seq, add.n)))
    }
}

impl ClientView for Sum {
    type View = Value;

    fn view(&self, state: &SumState) -> Value {
        json!({ "total": state.total, "events": state.seqs.len() })
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct TouchState {
    pub(crate) tag: u64,
}

/// `test/touch`: every `test/touch` returns a new state equal to the old one (a change with no
/// visible difference).
pub(crate) struct Touch;

impl ProjectionUnit for Touch {
    type State = TouchState;

    fn key(&self) -> &str {
        "test/touch"
    }

    fn state_version(&self) -> u64 {
        1
    }

    fn init(&self) -> TouchState {
        TouchState { tag: 0 }
    }

    fn reads(&self) -> Option<&'static [&'static str]> {
        Some(&["test/touch"])
    }

    fn apply(&self, state: &TouchState, _event: &SessionEvent) -> Result<Option<TouchState>, UnitError> {
        Ok(Some(state.clone()))
    }
}

impl ClientView for Touch {
    type View = TouchState;

    fn view(&self, state: &TouchState) -> TouchState {
        state.clone()
    }
}

/// `test/flaky`: counts `test/other` events, and fails (an error or a panic) on a `test/fail`
/// event, so one session's log can break it while another's cannot.
pub(crate) struct Flaky;

impl ProjectionUnit for Flaky {
    type State = u64;

    fn key(&self) -> &str {
        "test/flaky"
    }

    fn state_version(&self) -> u64 {
        1
    }

    fn init(&self) -> u64 {
        0
    }

    fn reads(&self) -> Option<&'static [&'static str]> {
        Some(&["test/other", "test/fail"])
    }

    fn apply(&self, state: &u64, event: &SessionEvent) -> Result<Option<u64>, UnitError> {
        if event.kind == "test/fail" {
            #[derive(Deserialize)]
            struct Fail {
                panic: bool,
            }
            let fail: Fail = event.data.parse()?;
            if fail.panic {
                panic!("flaky unit gave up at seq {} {DELIBERATE}", event.seq);
            }
            return Err(format!("flaky unit refused seq {}", event.seq).into());
        }
        Ok(Some(state + 1))
    }
}

impl ClientView for Flaky {
    type View = u64;

    fn view(&self, state: &u64) -> u64 {
        *state
    }
}

/// `test/label`: last-wins over `test/label`; its view panics on the label `poison`, which no test
/// log ever sets, so only a planted (poisoned) row can make it panic.
pub(crate) struct Label;

impl ProjectionUnit for Label {
    type State = Option<String>;

    fn key(&self) -> &str {
        "test/label"
    }

    fn state_version(&self) -> u64 {
        1
    }

    fn init(&self) -> Option<String> {
        None
    }

    fn reads(&self) -> Option<&'static [&'static str]> {
        Some(&["test/label"])
    }

    fn apply(&self, state: &Option<String>, event: &SessionEvent) -> Result<Option<Option<String>>, UnitError> {
        #[derive(Deserialize)]
        struct LabelPayload {
            label: Option<String>,
        }
        let payload: LabelPayload = event.data.parse()?;
        Ok((payload.label != *state).then_some(payload.label))
    }
}

impl ClientView for Label {
    type View = Option<String>;

    fn view(&self, state: &Option<String>) -> Option<String> {
        assert_ne!(state.as_deref(), Some("poison"), "a poisoned label {DELIBERATE}");
        state.clone()
    }
}

/// `test/huge`: host-only; a `test/huge` event sets the state to NaN, which JSON cannot hold.
pub(crate) struct Huge;

impl ProjectionUnit for Huge {
    type State = f64;

    fn key(&self) -> &str {
        "test/huge"
    }

    fn state_version(&self) -> u64 {
        1
    }

    fn init(&self) -> f64 {
        0.0
    }

    fn reads(&self) -> Option<&'static [&'static str]> {
        Some(&["test/huge"])
    }

    fn apply(&self, _state: &f64, _event: &SessionEvent) -> Result<Option<f64>, UnitError> {
        Ok(Some(f64::NAN))
    }
}

/// Which units a world registers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Units {
    /// None at all.
    Zero,
    /// The reference fixtures: `test/marks` and host-only `test/count`.
    Reference,
    /// The property set: last-wins, accumulating, new-but-equal and host-only.
    Property,
    /// The property set plus `test/flaky` and `test/label`.
    Faulty,
    /// The reference fixtures plus `test/huge`.
    Lossy,
}

pub(crate) fn register(registry: &Arc<ProjectionRegistry>, units: Units) -> Vec<Registration> {
    let mut handles = Vec::new();
    let reference = |handles: &mut Vec<Registration>| {
        handles.push(registry.register(Marks).unwrap());
        handles.push(registry.register_host_only(Count).unwrap());
    };
    match units {
        Units::Zero => {}
        Units::Reference => reference(&mut handles),
        Units::Property | Units::Faulty => {
            reference(&mut handles);
            handles.push(registry.register(Sum).unwrap());
            handles.push(registry.register(Touch).unwrap());
            if units == Units::Faulty {
                handles.push(registry.register(Flaky).unwrap());
                handles.push(registry.register(Label).unwrap());
            }
        }
        Units::Lossy => {
            reference(&mut handles);
            handles.push(registry.register_host_only(Huge).unwrap());
        }
    }
    handles
}

// ---------------------------------------------------------------------------------------------
// Instrumented persistence

/// One call a cache made to the persistence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Call {
    /// `read_from(id, from_seq)`.
    ReadFrom(u64),
    /// `inspect_stream(id)`: a streamed whole-log read.
    Stream,
    /// `inspect(id)`.
    Inspect,
    Flush,
}

impl Call {
    pub(crate) fn is_read(&self) -> bool {
        !matches!(self, Call::Flush)
    }
}

/// Delegates to a real persistence and records every call; reads can be held at a gate, and
/// flushes can be made to fail.
pub(crate) struct Counting {
    inner: Arc<dyn SessionPersistence>,
    calls: Mutex<Vec<(SessionId, Call)>>,
    /// When set, every read waits for a permit first.
    gate: Option<Arc<Semaphore>>,
    pub(crate) failing_flushes: AtomicUsize,
}

impl fmt::Debug for Counting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Counting").finish_non_exhaustive()
    }
}

impl Counting {
    pub(crate) fn new(inner: Arc<dyn SessionPersistence>, gate: Option<Arc<Semaphore>>) -> Counting {
        Counting { inner, calls: Mutex::new(Vec::new()), gate, failing_flushes: AtomicUsize::new(0) }
    }

    fn record(&self, id: &SessionId, call: Call) {
        self.calls.lock().push((id.clone(), call));
    }

    async fn pass_gate(&self) {
        if let Some(gate) = &self.gate {
            gate.acquire().await.expect("the gate is never closed").forget();
        }
    }

    /// The reads of `id` since the last call, forgetting them.
    pub(crate) fn take_reads(&self, id: &str) -> Vec<Call> {
        let mut calls = self.calls.lock();
        let reads =
            calls.iter().filter(|(call_id, call)| call_id == id && call.is_read()).map(|(_, call)| call.clone());
        let reads = reads.collect();
        calls.retain(|(call_id, call)| !(call_id == id && call.is_read()));
        reads
    }

    pub(crate) fn flushes(&self, id: &str) -> usize {
        self.calls.lock().iter().filter(|(call_id, call)| call_id == id && *call == Call::Flush).count()
    }
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
        self.inner.list_snapshots(cancel).await
    }

    async fn list_children(
        &self,
        parent: &SessionId,
        cancel: &CancellationToken,
    ) -> session_persistence::Result<Listing> {
        self.inner.list_children(parent, cancel).await
    }

    async fn list_page(
        &self,
        request: &session_persistence::PageRequest,
        cancel: &CancellationToken,
    ) -> session_persistence::Result<session_persistence::HeaderPage> {
        self.inner.list_page(request, cancel).await
    }

    async fn stored_header(
        &self,
        id: &SessionId,
        cancel: &CancellationToken,
    ) -> session_persistence::Result<Option<session_persistence::StoredHeader>> {
        self.inner.stored_header(id, cancel).await
    }

    fn durable_len(&self, id: &SessionId) -> Option<u64> {
        self.inner.durable_len(id)
    }

    fn fence(&self, id: &SessionId) -> Option<String> {
        self.inner.fence(id)
    }

    async fn fence_if_overtaken(
        &self,
        id: &SessionId,
        cancel: &CancellationToken,
    ) -> session_persistence::Result<bool> {
        self.inner.fence_if_overtaken(id, cancel).await
    }

    async fn inspect(&self, id: &SessionId, cancel: &CancellationToken) -> session_persistence::Result<Inspection> {
        self.record(id, Call::Inspect);
        self.pass_gate().await;
        self.inner.inspect(id, cancel).await
    }

    async fn inspect_stream(
        &self,
        id: &SessionId,
        cancel: &CancellationToken,
        sink: Box<dyn StreamSink>,
    ) -> session_persistence::Result<StreamSummary> {
        self.record(id, Call::Stream);
        self.pass_gate().await;
        self.inner.inspect_stream(id, cancel, sink).await
    }

    /// One recorded stream per read, through [`inspect_stream`](Self::inspect_stream).
    async fn inspect_streams(
        &self,
        reads: Vec<(SessionId, Box<dyn StreamSink>)>,
        lanes: usize,
        cancel: &CancellationToken,
    ) -> Vec<session_persistence::Result<StreamSummary>> {
        session_persistence::stream_each(self, reads, lanes, cancel).await
    }

    async fn read_from(
        &self,
        id: &SessionId,
        from_seq: u64,
        cancel: &CancellationToken,
    ) -> session_persistence::Result<Inspection> {
        self.record(id, Call::ReadFrom(from_seq));
        self.pass_gate().await;
        self.inner.read_from(id, from_seq, cancel).await
    }

    async fn read_from_many(
        &self,
        reads: &[(SessionId, u64)],
        limit: session_persistence::ReadLimit,
        cancel: &CancellationToken,
    ) -> Vec<session_persistence::Result<session_persistence::Suffix>> {
        for (id, from_seq) in reads {
            self.record(id, Call::ReadFrom(*from_seq));
        }
        self.pass_gate().await;
        self.inner.read_from_many(reads, limit, cancel).await
    }

    async fn load(&self, id: &SessionId, cancel: &CancellationToken) -> session_persistence::Result<Inspection> {
        self.inner.load(id, cancel).await
    }

    async fn flush(&self, id: &SessionId, cancel: &CancellationToken) -> session_persistence::Result<()> {
        self.record(id, Call::Flush);
        let fail = self.failing_flushes.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1)).is_ok();
        if fail {
            return Err(PersistenceError::invalid_input("disk unavailable (injected)"));
        }
        self.inner.flush(id, cancel).await
    }

    async fn release(&self, id: &SessionId, cancel: &CancellationToken) -> session_persistence::Result<()> {
        self.inner.release(id, cancel).await
    }

    fn locate(&self, header: &SessionHeader) -> Option<PathBuf> {
        self.inner.locate(header)
    }

    fn watch(
        &self,
        options: &session_persistence::WatchOptions,
        sink: session_persistence::SharedChangeSink,
    ) -> session_persistence::Result<Option<session_persistence::Watch>> {
        self.inner.watch(options, sink)
    }

    async fn positions(
        &self,
        ids: &[SessionId],
        cancel: &CancellationToken,
    ) -> session_persistence::Result<Vec<session_persistence::SessionPosition>> {
        self.inner.positions(ids, cancel).await
    }

    async fn created_since(
        &self,
        since_ms: u64,
        cancel: &CancellationToken,
    ) -> session_persistence::Result<session_persistence::Listing> {
        self.inner.created_since(since_ms, cancel).await
    }
}

// ---------------------------------------------------------------------------------------------
// A checkpoint store that fails on demand

/// Wraps a store; `put` fails while `failing_puts` is above zero (counting down).
#[derive(Debug)]
pub(crate) struct FlakyStore {
    pub(crate) inner: Arc<dyn CheckpointStore>,
    pub(crate) failing_puts: AtomicUsize,
}

impl FlakyStore {
    pub(crate) fn new(inner: Arc<dyn CheckpointStore>) -> FlakyStore {
        FlakyStore { inner, failing_puts: AtomicUsize::new(0) }
    }
}

impl CheckpointStore for FlakyStore {
    fn get(&self, id: &SessionId) -> session_projection_cache::Result<Option<CheckpointRecord>> {
        self.inner.get(id)
    }

    fn put(&self, id: &SessionId, record: &CheckpointRecord) -> session_projection_cache::Result<()> {
        if self.failing_puts.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1)).is_ok() {
            return Err(CacheError::Storage { message: "checkpoint storage unavailable (injected)".to_owned() });
        }
        self.inner.put(id, record)
    }

    fn remove(&self, id: &SessionId) -> session_projection_cache::Result<bool> {
        self.inner.remove(id)
    }
}

// ---------------------------------------------------------------------------------------------
// Log capture

/// Records the messages of `tracing` events emitted on the thread that installed it.
///
/// One process-wide subscriber routes each event to the capture of its thread: thread-scoped
/// subscribers race with the callsite interest cache when tests run in parallel.
#[derive(Clone, Default)]
pub(crate) struct Logs {
    messages: Arc<Mutex<Vec<String>>>,
}

thread_local! {
    static CAPTURE: std::cell::RefCell<Option<Logs>> = const { std::cell::RefCell::new(None) };
}

/// Stops the capture of its thread when dropped.
pub(crate) struct CaptureGuard(());

impl Drop for CaptureGuard {
    fn drop(&mut self) {
        CAPTURE.with(|capture| capture.borrow_mut().take());
    }
}

/// The process-wide subscriber.
struct Router;

impl Logs {
    /// Captures the current thread's events until the guard drops.
    pub(crate) fn capture() -> (Logs, CaptureGuard) {
        static INSTALL: Once = Once::new();
        INSTALL.call_once(|| {
            tracing::subscriber::set_global_default(Router).expect("no other global subscriber is installed");
        });
        let logs = Logs::default();
        CAPTURE.with(|capture| *capture.borrow_mut() = Some(logs.clone()));
        (logs, CaptureGuard(()))
    }

    pub(crate) fn contains(&self, needle: &str) -> bool {
        self.messages.lock().iter().any(|message| message.contains(needle))
    }

    pub(crate) fn all(&self) -> Vec<String> {
        self.messages.lock().clone()
    }
}

struct MessageVisitor<'a>(&'a mut String);

impl tracing::field::Visit for MessageVisitor<'_> {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn fmt::Debug) {
        if field.name() == "message" {
            self.0.push_str(&format!("{value:?}"));
        }
    }
}

impl tracing::Subscriber for Router {
    fn enabled(&self, _metadata: &tracing::Metadata<'_>) -> bool {
        true
    }

    fn new_span(&self, _span: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }

    fn record(&self, _span: &tracing::span::Id, _values: &tracing::span::Record<'_>) {}

    fn record_follows_from(&self, _span: &tracing::span::Id, _follows: &tracing::span::Id) {}

    fn event(&self, event: &tracing::Event<'_>) {
        let Some(logs) = CAPTURE.with(|capture| capture.borrow().clone()) else { return };
        let mut message = String::new();
        event.record(&mut MessageVisitor(&mut message));
        logs.messages.lock().push(message);
    }

    fn enter(&self, _span: &tracing::span::Id) {}

    fn exit(&self, _span: &tracing::span::Id) {}
}

// ---------------------------------------------------------------------------------------------
// The world

/// A store with persistence, a registry and a cache, wired as a host wires them.
pub(crate) struct World {
    pub(crate) clock: Arc<ManualClock>,
    pub(crate) store: Arc<SessionStore>,
    pub(crate) registry: Arc<ProjectionRegistry>,
    pub(crate) persistence: Arc<Counting>,
    pub(crate) records: Arc<dyn CheckpointStore>,
    pub(crate) cache: ProjectionCache,
    pub(crate) attachment: Option<CacheAttachment>,
    headers: Mutex<std::collections::HashMap<String, SessionHeader>>,
    _registry_attachment: StoreAttachment,
    _units: Vec<Registration>,
}

pub(crate) struct WorldOptions {
    pub(crate) units: Units,
    pub(crate) config: CacheConfig,
    pub(crate) records: Arc<dyn CheckpointStore>,
    pub(crate) gate: Option<Arc<Semaphore>>,
    /// Attach the write policy to the store.
    pub(crate) policy: bool,
}

impl Default for WorldOptions {
    fn default() -> WorldOptions {
        WorldOptions {
            units: Units::Reference,
            config: CacheConfig::new(100, 60_000).unwrap(),
            records: Arc::new(MemoryCheckpointStore::new()),
            gate: None,
            policy: true,
        }
    }
}

pub(crate) fn known_types() -> KnownTypes {
    KnownTypes::with_extra(TEST_TYPES)
}

impl World {
    /// Must run inside a Tokio runtime (the persistence and the policy attach to it).
    pub(crate) fn new(options: WorldOptions) -> World {
        let clock = Arc::new(ManualClock::new(T0));
        let store = Arc::new(SessionStore::new(clock.clone()));
        let coordinator = Coordinator::new(
            Arc::new(MemoryStore::new()),
            CoordinatorConfig { known_types: known_types(), ..CoordinatorConfig::default() },
        )
        .unwrap();
        coordinator.attach(&store).unwrap();
        let persistence = Arc::new(Counting::new(Arc::new(coordinator), options.gate));
        let registry = ProjectionRegistry::new();
        let units = register(&registry, options.units);
        let cache = ProjectionCache::new(
            registry.clone(),
            persistence.clone(),
            options.records.clone(),
            clock.clone(),
            options.config,
        )
        .unwrap();
        // The cache first, so that a disposal's cut reads the registry's cells before they go.
        let attachment = options.policy.then(|| cache.attach(&store).unwrap());
        let registry_attachment = registry.attach(&store);
        World {
            clock,
            store,
            registry,
            persistence,
            records: options.records,
            cache,
            attachment,
            headers: Mutex::new(std::collections::HashMap::new()),
            _registry_attachment: registry_attachment,
            _units: units,
        }
    }

    pub(crate) fn with_units(units: Units) -> World {
        World::new(WorldOptions { units, ..WorldOptions::default() })
    }

    pub(crate) fn session(&self, id: &str) -> Arc<Session> {
        self.session_with(id, HeaderMeta::default())
    }

    pub(crate) fn session_with(&self, id: &str, meta: HeaderMeta) -> Arc<Session> {
        let session =
            self.store.create(Some(id.into()), CreateOptions { seed: None, meta }).expect("a fresh id is accepted");
        self.headers.lock().insert(id.to_owned(), session.header().as_ref().clone());
        session
    }

    /// The header of a session this world created.
    pub(crate) fn record_header(&self, id: &str) -> SessionHeader {
        self.headers.lock().get(id).cloned().expect("the world created this session")
    }

    /// The stored events of `id`, read without being counted.
    pub(crate) async fn stored_events(&self, id: &str) -> Vec<Arc<SessionEvent>> {
        match self.persistence.inner.read_from(&SessionId::from(id), 0, &CancellationToken::new()).await {
            Ok(inspection) => inspection.events.to_vec(),
            Err(error) if error.is_not_found() => Vec::new(),
            Err(error) => panic!("reading the stored log failed: {error}"),
        }
    }

    /// Stores a cold log directly through the persistence (no live session).
    pub(crate) async fn stored_log(&self, header: SessionHeader, events: Vec<Arc<SessionEvent>>) {
        let cancel = CancellationToken::new();
        let id = header.id.clone();
        self.persistence.create(header, &cancel).await.unwrap();
        self.persistence.append(&id, events, &cancel).await.unwrap();
    }

    /// Detaches a live session, releases it from the persistence (so reads are cold from now
    /// on, not answered by the live copy the coordinator's background retire still holds), and
    /// waits for the writes that follow.
    pub(crate) async fn retire(&self, id: &str) {
        let id = SessionId::from(id);
        self.store.detach(&id).expect("the session is live");
        self.persistence.inner.release(&id, &CancellationToken::new()).await.unwrap();
        self.cache.settle().await;
    }

    pub(crate) fn record(&self, id: &str) -> Option<CheckpointRecord> {
        self.records.get(&SessionId::from(id)).unwrap()
    }

    pub(crate) fn put_record(&self, id: &str, record: &CheckpointRecord) {
        self.records.put(&SessionId::from(id), record).unwrap();
    }

    pub(crate) fn take_reads(&self, id: &str) -> Vec<Call> {
        self.persistence.take_reads(id)
    }

    /// The rows `restore` gives for `events` (folded from zero), as a record of `header`.
    pub(crate) fn record_of(&self, header: &SessionHeader, events: &[Arc<SessionEvent>]) -> CheckpointRecord {
        let restored = self.registry.restore(&CheckpointRows::new(), events.iter().map(|event| &**event), 0).unwrap();
        CheckpointRecord::from_checkpoint(RecordIdentity::of(header), &restored.checkpoint).unwrap()
    }
}

pub(crate) fn header(id: &str, created_at: u64) -> SessionHeader {
    SessionHeader::new(SessionId::from(id), created_at)
}
