//! A parent with many subagent children on disk, in the shape of `docs/reference/bench.md`, and
//! the catalogs that list it: live, cold, cold with a checkpoint cache, and the design note's
//! "before" baseline. Shared by the listing benchmark and the listing memory probe.

use std::{path::Path, sync::Arc};

use session_core::{
    CreateOptions, HeaderMeta, ManualClock, Origin, SessionEvent, SessionHeader, SessionId, SessionStore,
};
use session_persistence::{
    Backend, Compression, Coordinator, CoordinatorConfig, CountingBackend, JsonlConfig, JsonlStore, SessionPersistence,
};
use session_projection::ProjectionRegistry;
use session_projection_cache::{BackfillOptions, BackfillReport, CacheConfig, MemoryCheckpointStore, ProjectionCache};
use subagent::{SubagentListEntry, SubagentRuntime, SubagentServices};
use tokio_util::sync::CancellationToken;

use crate::workload::TranscriptBuilder;

/// The id of the fleet's parent session.
pub const PARENT: &str = "s-parent";
/// The `cwd` of every fleet session.
pub const CWD: &str = "/srv/agents/bench";

/// The id of child `idx` (`s-child-0000`, ...): zero-padded, so byte order is index order.
pub fn child_id(idx: usize) -> SessionId {
    SessionId::from(format!("s-child-{idx:04}"))
}

fn header(id: &SessionId, created_at: u64, parent: Option<&str>) -> SessionHeader {
    let mut header = SessionHeader::new(id.clone(), created_at);
    header.cwd = Some(CWD.to_owned());
    if let Some(parent) = parent {
        header.parent_session = Some(SessionId::from(parent));
        header.origin = Some(Origin::Subagent);
        header.delegation_depth = 1;
    }
    header
}

/// The transcript of child `idx`: exactly `n_events` events, a continuable descriptor in turn 1.
pub fn child_transcript(idx: usize, n_events: u64) -> Vec<Vec<Arc<SessionEvent>>> {
    TranscriptBuilder::new(1_000 + idx as u64, 1_772_442_000_000, Some(format!("child task {idx}")))
        .transcript(n_events)
}

/// Writes the parent and `n_children` children of `n_events` events each under `root`, one
/// durable append per turn as the reference's workload flushes, so a zstd log holds one frame per turn
/// (the shape of `docs/reference/bench.md`).
pub async fn write_fleet(root: &Path, compression: Compression, n_children: usize, n_events: u64) {
    let store = JsonlStore::open(JsonlConfig { root: root.to_path_buf(), compression, pack_chunks: true })
        .expect("open the fleet store");
    write_fleet_into(Arc::new(store), n_children, n_events).await;
}

/// [`write_fleet`] into any backend (a SQLite database, say).
pub async fn write_fleet_into(backend: Arc<dyn Backend>, n_children: usize, n_events: u64) {
    let persistence = Coordinator::new(backend, CoordinatorConfig::default()).expect("coordinator");
    let cancel = CancellationToken::new();
    let parent = SessionId::from(PARENT);
    persistence.create(header(&parent, 1_000, None), &cancel).await.expect("create the parent");
    let parent_turn = TranscriptBuilder::new(1, 0, None).turn();
    persistence.append(&parent, parent_turn, &cancel).await.expect("write the parent");
    for idx in 0..n_children {
        let id = child_id(idx);
        persistence.create(header(&id, 2_000 + idx as u64, Some(PARENT)), &cancel).await.expect("create a child");
        for turn in child_transcript(idx, n_events) {
            persistence.append(&id, turn, &cancel).await.expect("write a child");
        }
    }
}

/// Everything a listing needs over one fleet store.
pub struct Fleet {
    /// The read-only JSONL store, counted: its scans are the listing's log reads.
    pub backend: Arc<CountingBackend>,
    /// The coordinator over `backend`.
    pub persistence: Arc<Coordinator>,
    /// The live store; empty until [`Fleet::make_children_live`].
    pub sessions: Arc<SessionStore>,
    /// The registry, attached to `sessions`; the runtimes register the subagent units on it.
    pub registry: Arc<ProjectionRegistry>,
    _attachment: session_projection::StoreAttachment,
}

impl std::fmt::Debug for Fleet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fleet").field("scans", &self.backend.scans()).finish_non_exhaustive()
    }
}

impl Fleet {
    /// A cold fleet: nothing is live. Opened read-only, so listings never take the store lock.
    pub fn open(root: &Path, compression: Compression) -> Fleet {
        let store =
            JsonlStore::open_read_only(JsonlConfig { root: root.to_path_buf(), compression, pack_chunks: true })
                .expect("open the fleet store");
        Fleet::over(Arc::new(store))
    }

    /// A cold fleet over any backend holding one (a SQLite database opened for reading, say).
    pub fn over(store: Arc<dyn Backend>) -> Fleet {
        let backend = Arc::new(CountingBackend::new(store));
        let persistence =
            Arc::new(Coordinator::new(backend.clone(), CoordinatorConfig::default()).expect("coordinator"));
        let sessions = Arc::new(SessionStore::new(Arc::new(ManualClock::new(1_772_442_000_000))));
        let registry = ProjectionRegistry::new();
        let attachment = registry.attach(&sessions);
        Fleet { backend, persistence, sessions, registry, _attachment: attachment }
    }

    /// Makes every child live, as a host running them would hold them (their logs in memory).
    pub fn make_children_live(&self, n_children: usize, n_events: u64) {
        for idx in 0..n_children {
            let id = child_id(idx);
            let seed: Vec<Arc<SessionEvent>> = child_transcript(idx, n_events).into_iter().flatten().collect();
            let meta = HeaderMeta {
                cwd: Some(CWD.to_owned()),
                parent_session: Some(SessionId::from(PARENT)),
                created_at: Some(2_000 + idx as u64),
                origin: Some(Origin::Subagent),
                delegation_depth: 1,
                ..HeaderMeta::default()
            };
            self.sessions.create(Some(id), CreateOptions { seed: Some(seed), meta }).expect("a live child");
        }
    }

    /// A checkpoint cache over this fleet, filled the way a store that arrived without
    /// checkpoints is: by the cache's backfill (one cold read of each stored session). Call it
    /// while a runtime from [`Fleet::runtime`] is alive, so the records carry the subagent units'
    /// rows. Returns the cache with what the backfill did.
    pub async fn backfilled_cache(&self) -> (Arc<dyn subagent::CheckpointSource>, BackfillReport) {
        let cache = ProjectionCache::new(
            self.registry.clone(),
            self.persistence.clone() as Arc<dyn SessionPersistence>,
            Arc::new(MemoryCheckpointStore::new()),
            Arc::new(ManualClock::new(0)),
            CacheConfig::new(100, 5_000).expect("a valid cache configuration"),
        )
        .expect("the cache opens");
        let report = cache
            .backfill(BackfillOptions::default(), &CancellationToken::new(), |_| {})
            .await
            .expect("the backfill runs");
        (Arc::new(cache), report)
    }

    /// A subagent runtime over this fleet's store, registry and persistence, with `cache` as its
    /// checkpoint source; it registers the subagent units for as long as it lives.
    pub fn runtime(&self, cache: Option<Arc<dyn subagent::CheckpointSource>>) -> SubagentRuntime {
        SubagentRuntime::new(SubagentServices {
            sessions: Some(self.sessions.clone()),
            projections: Some(self.registry.clone()),
            persistence: Some(self.persistence.clone()),
            cache,
        })
        .expect("the subagent units register")
    }
}

/// Lists the parent's children.
pub async fn list(runtime: &SubagentRuntime) -> Vec<SubagentListEntry> {
    runtime.list_children(&SessionId::from(PARENT), &CancellationToken::new()).await.expect("the listing succeeds")
}

/// A copy of `event` that shares nothing with it, as the reference's `structuredClone` makes.
fn deep_copy(event: &SessionEvent) -> SessionEvent {
    SessionEvent { data: event.data.to_unshared(), ..SessionEvent::clone(event) }
}

/// The design note's "before": per child, two full materializations of the log (`listEvents`
/// and `readEvent`), each followed by a deep copy, then a last-wins scan for the descriptor.
/// Children are read four at a time, like the new listing. Returns the labels found.
pub async fn list_before(persistence: &Arc<Coordinator>, n_children: usize) -> Vec<Option<String>> {
    let cancel = CancellationToken::new();
    let mut labels = Vec::with_capacity(n_children);
    for chunk in (0..n_children).collect::<Vec<_>>().chunks(subagent::COLD_READ_CONCURRENCY) {
        let reads = chunk.iter().map(|&idx| {
            let persistence = persistence.clone();
            let cancel = cancel.clone();
            async move {
                let id = child_id(idx);
                let listed = persistence.read_from(&id, 0, &cancel).await.expect("listEvents");
                let listed_copy: Vec<SessionEvent> = listed.events.iter().map(|event| deep_copy(event)).collect();
                let read = persistence.read_from(&id, 0, &cancel).await.expect("readEvent");
                let read_copy: Vec<SessionEvent> = read.events.iter().map(|event| deep_copy(event)).collect();
                std::hint::black_box(&listed_copy);
                let mut label = None;
                for event in read_copy.iter().filter(|event| event.kind == subagent::DESCRIPTOR_EVENT) {
                    label = match subagent::Descriptor::parse_event(event) {
                        Ok(subagent::DescriptorParse::Supported(descriptor)) => descriptor.label().map(str::to_owned),
                        _ => None,
                    };
                }
                label
            }
        });
        let chunk_labels = futures::future::join_all(reads).await;
        labels.extend(chunk_labels);
    }
    labels
}

/// `bench/count`: counts events, so a checkpoint record's rows say how far it folded
/// (client-visible).
#[derive(Debug)]
pub struct CountUnit;

impl session_projection::ProjectionUnit for CountUnit {
    type State = u64;

    fn key(&self) -> &str {
        "bench/count"
    }

    fn state_version(&self) -> u64 {
        1
    }

    fn init(&self) -> u64 {
        0
    }

    fn apply(&self, state: &u64, _event: &SessionEvent) -> Result<Option<u64>, session_projection::UnitError> {
        Ok(Some(state + 1))
    }
}

impl session_projection::ClientView for CountUnit {
    type View = u64;

    fn view(&self, state: &u64) -> u64 {
        *state
    }
}
