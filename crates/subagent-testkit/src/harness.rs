//! One test's composition over a storage setup: a backend behind a coordinator, a live session
//! store, the projection registry, the optional projection cache and a subagent runtime reading
//! through [`Counting`], with the helpers that write children.

use std::{
    fmt,
    path::{Path, PathBuf},
    sync::Arc,
    time::Duration,
};

use serde_json::Value;
use session_core::{CreateOptions, HeaderMeta, ManualClock, Session, SessionEvent, SessionHeader, SessionStore};
use session_persistence::{
    Backend, Compression, Coordinator, CoordinatorConfig, JsonlConfig, JsonlStore, SessionPersistence,
};
use session_projection::{ProjectionRegistry, StoreAttachment};
use session_projection_cache::{CacheAttachment, CacheConfig, MemoryCheckpointStore, ProjectionCache};
use subagent::{
    CheckpointSource, ChildOptions, ListAgentsTool, OneShotDescriptor, SubagentListEntry, SubagentRuntime,
    SubagentServices, create_continuable_child, create_one_shot_child,
};

use crate::{
    counting::Counting,
    fixtures::{append, continuable_descriptor, id, run_turn, token},
};

/// One storage configuration a test runs under: the backend that holds the logs, and whether the
/// projection cache is on.
pub trait Setup: Copy + fmt::Debug {
    /// Whether the harness runs the projection cache.
    fn cache(&self) -> bool;

    /// Whether the setup can run here; [`run_each`] skips it otherwise (a database server that is
    /// not configured, say).
    fn available(&self) -> bool {
        true
    }

    /// Opens a fresh backend at `root`, a path in the harness's temp dir.
    fn open(&self, root: &Path) -> Opened;
}

/// A backend a [`Setup`] opened, with what must outlive it.
pub struct Opened {
    /// The backend the coordinator writes to.
    pub backend: Arc<dyn Backend>,
    /// Dropped after everything else in the harness (a scratch database schema, say).
    pub keep: Option<Box<dyn Send + Sync>>,
}

impl fmt::Debug for Opened {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Opened").field("keep", &self.keep.is_some()).finish_non_exhaustive()
    }
}

/// A JSONL directory in `compression` (chunks packed), with or without the projection cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Jsonl {
    /// The JSONL encoding.
    pub compression: Compression,
    /// Whether the harness runs the projection cache.
    pub cache: bool,
}

impl Jsonl {
    /// Opens a JSONL store at `root` in `compression`.
    pub fn open_store(root: &Path, compression: Compression) -> Arc<dyn Backend> {
        Arc::new(JsonlStore::open(JsonlConfig { root: root.to_owned(), compression, pack_chunks: true }).unwrap())
    }
}

impl Setup for Jsonl {
    fn cache(&self) -> bool {
        self.cache
    }

    fn open(&self, root: &Path) -> Opened {
        Opened { backend: Jsonl::open_store(root, self.compression), keep: None }
    }
}

/// Raw and zstd JSONL, each without and then with the projection cache.
pub const JSONL: [Jsonl; 4] = [
    Jsonl { compression: Compression::None, cache: false },
    Jsonl { compression: Compression::Zstd, cache: false },
    Jsonl { compression: Compression::None, cache: true },
    Jsonl { compression: Compression::Zstd, cache: true },
];

/// A multi-threaded Tokio runtime with two workers and every driver enabled.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
}

/// Runs `test` once per available setup, each in a fresh runtime and a fresh temp dir, and shuts
/// the harness down after it.
pub fn run_each<S: Setup, F: AsyncFnMut(&Harness<S>)>(setups: &[S], mut test: F) {
    for setup in setups.iter().filter(|setup| setup.available()) {
        let runtime = runtime();
        runtime.block_on(async {
            let harness = Harness::new(*setup);
            test(&harness).await;
            harness.shutdown().await;
        });
    }
}

/// The composition of one test.
pub struct Harness<S> {
    /// The setup it was built on.
    pub setup: S,
    _dir: tempfile::TempDir,
    /// The clock of the store and the cache, at 1,000 ms to begin with.
    pub clock: Arc<ManualClock>,
    /// The live session store, with the coordinator, the registry and the cache attached.
    pub store: Arc<SessionStore>,
    /// The projection registry.
    pub registry: Arc<ProjectionRegistry>,
    /// The coordinator over the setup's backend.
    pub coordinator: Coordinator,
    /// The wrapper the runtime (and the cache) read through.
    pub persistence: Arc<Counting>,
    /// The projection cache, if the setup has one.
    pub cache: Option<ProjectionCache>,
    /// The subagent runtime over all of the above.
    pub runtime: Arc<SubagentRuntime>,
    _cache_attachment: Option<CacheAttachment>,
    _registry_attachment: StoreAttachment,
    /// Dropped last, after everything above lets go of the backend.
    _keep: Option<Box<dyn Send + Sync>>,
}

impl<S: fmt::Debug> fmt::Debug for Harness<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Harness").field("setup", &self.setup).finish_non_exhaustive()
    }
}

impl<S: Setup> Harness<S> {
    /// A harness over a fresh store in a fresh temp dir.
    pub fn new(setup: S) -> Harness<S> {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("store");
        Harness::over(setup, dir, root)
    }

    /// A harness over the store at `root` (for the golden fixtures), keeping `dir` until dropped.
    pub fn over(setup: S, dir: tempfile::TempDir, root: PathBuf) -> Harness<S> {
        let clock = Arc::new(ManualClock::new(1_000));
        let store = Arc::new(SessionStore::new(clock.clone()));
        let Opened { backend, keep } = setup.open(&root);
        let config =
            CoordinatorConfig { write_batch_max_delay: Duration::from_millis(5), ..CoordinatorConfig::default() };
        let coordinator = Coordinator::new(backend, config).unwrap();
        coordinator.attach(&store).unwrap();
        let registry = ProjectionRegistry::new();
        let cache = setup.cache().then(|| {
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
            _keep: keep,
        }
    }
}

impl<S> Harness<S> {
    async fn shutdown(&self) {
        if let Some(cache) = &self.cache {
            cache.settle().await;
        }
        self.coordinator.close().await.unwrap();
    }

    /// The harness's services, for building another runtime over them.
    pub fn services(&self) -> SubagentServices {
        self.runtime.services().clone()
    }

    /// Another runtime over the same services with `cache` as the checkpoint source.
    pub fn runtime_with_cache(&self, cache: Option<Arc<dyn CheckpointSource>>) -> SubagentRuntime {
        SubagentRuntime::new(SubagentServices { cache, ..self.services() }).unwrap()
    }

    /// The `list_agents` tool over the harness's runtime, with live status.
    pub fn list_agents_tool(&self) -> ListAgentsTool {
        ListAgentsTool::with_live_status(self.runtime.clone())
    }

    /// The children of `parent`.
    pub async fn list(&self, parent: &str) -> Vec<SubagentListEntry> {
        self.runtime.list_children(&id(parent), &token()).await.unwrap()
    }

    /// The children of `parent`, as JSON.
    pub async fn list_json(&self, parent: &str) -> Value {
        serde_json::to_value(self.list(parent).await).unwrap()
    }

    /// The descendants of `root`, as JSON.
    pub async fn descendants_json(&self, root: &str) -> Value {
        serde_json::to_value(self.runtime.list_descendants(&id(root), &token()).await.unwrap()).unwrap()
    }

    /// Writes a stored session straight through the persistence API (a cold child that never
    /// went through the live store, like the reference tests' `authorChild`).
    pub async fn author(&self, header: SessionHeader, events: Vec<Arc<SessionEvent>>) {
        self.coordinator.create(header.clone(), &token()).await.unwrap();
        self.coordinator.append(&header.id, events, &token()).await.unwrap();
    }

    /// Writes a stored log through the backend, bypassing the coordinator's append checks, so a
    /// log the read side rejects can be stored.
    pub fn author_unchecked(&self, header: SessionHeader, events: Vec<Arc<SessionEvent>>) {
        // A synchronous backend call straight from async code: every store allows it, the
        // PostgreSQL one included.
        self.coordinator.backend().append_batch(&header, &events, false).unwrap();
    }

    /// Creates and publishes a live session with `header`'s metadata and appends `events` (their
    /// kinds and payloads; seqs and times come from the session).
    pub fn live(&self, header: SessionHeader, events: &[Arc<SessionEvent>]) -> Arc<Session> {
        let meta = HeaderMeta::from(&header);
        let session = self.store.create(Some(header.id.clone()), CreateOptions { seed: None, meta }).unwrap();
        for event in events {
            append(&session, &event.kind, event.data.to_value().unwrap());
        }
        session
    }

    /// A live parent with one completed turn.
    pub fn parent(&self, name: &str) -> Arc<Session> {
        let session = self.store.create(Some(id(name)), CreateOptions::default()).unwrap();
        run_turn(&session, 1, None::<fn()>);
        session
    }

    /// Flushes a live session, takes it out of the store, releases it from the coordinator (as
    /// the gateway's `session.release` does), and waits until its cache record (if any) is
    /// written: it is cold from now on. Without the release, the coordinator's own retire runs in
    /// the background, and a read before it ends still answers from the live copy.
    pub async fn settle(&self, session: &Arc<Session>) {
        self.store.flush(session.id()).await.unwrap();
        self.store.detach(session.id()).unwrap();
        self.coordinator.release(session.id(), &token()).await.unwrap();
        if let Some(cache) = &self.cache {
            cache.settle().await;
        }
    }

    /// A real continuable child: created by the crate's helper, one completed turn, then settled.
    pub async fn start_continuable(&self, parent: &Arc<Session>, child: &str, label: &str) -> Arc<Session> {
        let descriptor = continuable_descriptor(label);
        let options = ChildOptions { id: Some(id(child)), ..ChildOptions::default() };
        let session = create_continuable_child(&self.store, parent, descriptor, options).unwrap();
        run_turn(&session, 1, None::<fn()>);
        self.settle(&session).await;
        session
    }

    /// A real one-shot child: its descriptor is appended when the first step is entered.
    pub async fn start_one_shot(&self, parent: &Arc<Session>, child: &str, label: Option<&str>) -> Arc<Session> {
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
    pub fn reads(&self, child: &str) -> u64 {
        self.persistence.reads(&id(child))
    }

    /// How many reads a real child (one that went through the live store) costs per listing:
    /// zero when the cache holds its record, else one.
    pub fn real_child_reads(&self) -> u64 {
        if self.cache.is_some() { 0 } else { 1 }
    }
}
