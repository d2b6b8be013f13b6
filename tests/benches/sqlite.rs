//! SQLite backend benchmarks (issue 17), each against the JSONL zstd store on the same workload
//! (`e2e::workload`): durable append throughput (one turn per transaction), the cold listing of
//! 100 children × 10,000 events, and a checkpoint's tail read (`cold_snapshot` from a record
//! 1,000 events before the end of a 100,001-event log), where SQLite seeks and JSONL scans; and
//! listings of a 100,000-session store: the first page and a family of 1,000 children, from the
//! file store's in-memory order, against the SQL passes over the `sessions` table that
//! `:memory:` still makes (what every SQLite page cost before the order) and JSONL.

use std::{path::Path, sync::Arc, time::Duration};

use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use e2e::{
    fleet::{self, CountUnit, Fleet},
    workload::TranscriptBuilder,
};
use session_core::{SessionEvent, SessionHeader, SessionId};
use session_persistence::{
    Backend, Coordinator, CoordinatorConfig, JsonlConfig, JsonlStore, PageRequest, SessionPersistence,
};
use session_persistence_sqlite::{SqliteConfig, SqliteStore};
use session_projection::{CheckpointRows, ProjectionRegistry};
use session_projection_cache::{
    CacheConfig, CheckpointRecord, CheckpointStore, MemoryCheckpointStore, ProjectionCache, RecordIdentity,
};
use subagent::SubagentListEntry;
use tokio_util::sync::CancellationToken;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
}

/// The two stores compared: SQLite, and JSONL with zstd frames.
#[derive(Debug, Clone, Copy)]
enum Kind {
    Sqlite,
    JsonlZstd,
}

const KINDS: [Kind; 2] = [Kind::Sqlite, Kind::JsonlZstd];

impl Kind {
    fn label(self) -> &'static str {
        match self {
            Kind::Sqlite => "sqlite",
            Kind::JsonlZstd => "jsonl_zstd",
        }
    }

    /// A writable store under `dir`.
    fn open(self, dir: &Path) -> Arc<dyn Backend> {
        match self {
            Kind::Sqlite => Arc::new(SqliteStore::open(SqliteConfig::file(dir.join("sessions.db"))).unwrap()),
            Kind::JsonlZstd => Arc::new(JsonlStore::open(JsonlConfig::new(dir.join("store"))).unwrap()),
        }
    }

    /// The same store, for reading only.
    fn open_read_only(self, dir: &Path) -> Arc<dyn Backend> {
        match self {
            Kind::Sqlite => Arc::new(SqliteStore::open_for_reading(dir.join("sessions.db")).unwrap()),
            Kind::JsonlZstd => Arc::new(JsonlStore::open_read_only(JsonlConfig::new(dir.join("store"))).unwrap()),
        }
    }
}

fn header(id: &str) -> SessionHeader {
    let mut header = SessionHeader::new(SessionId::from(id), 1);
    header.cwd = Some("/bench/project".into());
    header
}

/// Durable appends, one 11-event turn per batch (one commit and fsync each).
fn append_throughput(c: &mut Criterion) {
    const N_TURNS: usize = 50;
    let runtime = runtime();
    let mut group = c.benchmark_group("sqlite/append_durable");
    group.sample_size(10).measurement_time(Duration::from_secs(10));
    let n_events: u64 = {
        let mut builder = TranscriptBuilder::new(1, 0, None);
        (0..N_TURNS).map(|_| builder.turn().len() as u64).sum()
    };
    group.throughput(Throughput::Elements(n_events));
    for kind in KINDS {
        group.bench_function(kind.label(), |b| {
            b.iter_batched(
                || {
                    let mut builder = TranscriptBuilder::new(1, 0, None);
                    (tempfile::tempdir().unwrap(), (0..N_TURNS).map(|_| builder.turn()).collect::<Vec<_>>())
                },
                |(dir, turns)| {
                    runtime.block_on(async {
                        let persistence =
                            Coordinator::new(kind.open(dir.path()), CoordinatorConfig::default()).unwrap();
                        let id = SessionId::from("s-append");
                        persistence.create(header("s-append"), &CancellationToken::new()).await.unwrap();
                        for turn in turns {
                            persistence.append(&id, turn, &CancellationToken::new()).await.unwrap();
                        }
                    });
                    dir
                },
                BatchSize::PerIteration,
            );
        });
    }
    group.finish();
}

fn assert_children(rows: &[SubagentListEntry], n_children: usize) {
    assert_eq!(rows.len(), n_children);
    assert!(rows.iter().all(|row| matches!(row, SubagentListEntry::Child(_))), "every row is a child row");
}

/// The cold listing of a parent with 100 children of 10,000 events each: one streamed read per
/// child, four at a time.
fn cold_listing(c: &mut Criterion) {
    const N_CHILDREN: usize = 100;
    const N_EVENTS: u64 = 10_000;
    let runtime = runtime();
    let mut group = c.benchmark_group("sqlite/list_children_cold_100x10k");
    group.sample_size(10).measurement_time(Duration::from_secs(20));
    for kind in KINDS {
        let dir = tempfile::tempdir().unwrap();
        runtime.block_on(fleet::write_fleet_into(kind.open(dir.path()), N_CHILDREN, N_EVENTS));
        let cold = Fleet::over(kind.open_read_only(dir.path()));
        let catalog = cold.runtime(None);
        let before = cold.backend.scans();
        assert_children(&runtime.block_on(fleet::list(&catalog)), N_CHILDREN);
        eprintln!(
            "sqlite/list_children_cold_100x10k/{}: one listing read {} logs",
            kind.label(),
            cold.backend.scans() - before
        );
        group.bench_function(kind.label(), |b| {
            b.iter(|| assert_children(&runtime.block_on(fleet::list(&catalog)), N_CHILDREN));
        });
    }
    group.finish();
}

/// `cold_snapshot` of a 100,001-event log from a record 1,000 events before its end: the cache
/// reads the log from the record's watermark (`read_from`). SQLite seeks to it; JSONL scans the
/// whole log and drops the prefix.
fn checkpoint_tail(c: &mut Criterion) {
    const N_EVENTS: u64 = 100_001;
    const TAIL: usize = 1_000;
    let runtime = runtime();
    let id = SessionId::from("s-big");
    let events: Vec<Arc<SessionEvent>> =
        TranscriptBuilder::new(7, 0, None).transcript(N_EVENTS).into_iter().flatten().collect();
    let registry = ProjectionRegistry::new();
    let _unit = registry.register(CountUnit).unwrap();
    let restored = registry
        .restore(&CheckpointRows::new(), events.iter().take(events.len() - TAIL).map(|event| &**event), 0)
        .unwrap();
    let record = CheckpointRecord::from_checkpoint(RecordIdentity::of(&header("s-big")), &restored.checkpoint).unwrap();
    let mut group = c.benchmark_group("sqlite/checkpoint_tail_read_100k");
    group.sample_size(10).measurement_time(Duration::from_secs(10));
    for kind in KINDS {
        let dir = tempfile::tempdir().unwrap();
        let backend = kind.open(dir.path());
        runtime.block_on(async {
            let persistence = Coordinator::new(backend.clone(), CoordinatorConfig::default()).unwrap();
            persistence.create(header("s-big"), &CancellationToken::new()).await.unwrap();
            let batches = TranscriptBuilder::new(7, 0, None).transcript(N_EVENTS);
            for chunk in batches.chunks(100) {
                let batch: Vec<_> = chunk.iter().flatten().cloned().collect();
                persistence.append(&id, batch, &CancellationToken::new()).await.unwrap();
            }
        });
        let cache_over = || {
            let records = Arc::new(MemoryCheckpointStore::new());
            records.put(&id, &record).unwrap();
            let persistence = Coordinator::new(backend.clone(), CoordinatorConfig::default()).unwrap();
            ProjectionCache::new(
                registry.clone(),
                Arc::new(persistence),
                records,
                Arc::new(session_core::ManualClock::new(0)),
                CacheConfig::new(200, 5_000).unwrap(),
            )
            .unwrap()
        };
        let probe = cache_over();
        let snapshot = runtime.block_on(probe.cold_snapshot(&id, &CancellationToken::new())).unwrap();
        let stats = probe.stats();
        assert_eq!((stats.tail_reads, stats.full_reads), (1, 0), "{}: a tail read", kind.label());
        assert_eq!(snapshot.values["bench/count"], serde_json::json!(events.len()));
        group.bench_function(kind.label(), |b| {
            b.iter_batched(
                cache_over,
                |cache| {
                    let snapshot = runtime.block_on(cache.cold_snapshot(&id, &CancellationToken::new())).unwrap();
                    assert_eq!(snapshot.as_of_seq, events.len() as i64 - 1);
                    cache
                },
                BatchSize::PerIteration,
            );
        });
    }
    group.finish();
}

/// A store of `n_sessions` one-event sessions, the last `n_children` of them subagent children
/// of `parent` (the newest session), written straight through `append_batch`.
fn write_sessions(backend: &dyn Backend, n_sessions: usize, n_children: usize) {
    let event =
        Arc::new(SessionEvent::new("turn/start", 0, 10, session_core::JsonData::from_text(r#"{"turn":1}"#).unwrap()));
    let parent = SessionId::from("parent");
    let mut parent_header = header("parent");
    // The newest session, so the first page holds it.
    parent_header.created_at = 1_000 + n_sessions as u64;
    backend.append_batch(&parent_header, std::slice::from_ref(&event), false).unwrap();
    for i in 0..n_sessions {
        let mut header = header(&format!("s{i:06}"));
        header.created_at = 1_000 + i as u64;
        if i >= n_sessions - n_children {
            header.parent_session = Some(parent.clone());
            header.origin = Some(session_core::Origin::Subagent);
            header.delegation_depth = 1;
        }
        backend.append_batch(&header, std::slice::from_ref(&event), false).unwrap();
    }
}

/// The first page of a 100,000-session store (50 rows, children hidden, as the viewer asks) and
/// the family of a parent with 1,000 children (`list_children`, what `subagent.list` reads).
fn listings_100k(c: &mut Criterion) {
    const N_SESSIONS: usize = 100_000;
    const N_CHILDREN: usize = 1_000;
    let mut group = c.benchmark_group("sqlite/listings_100k");
    group.sample_size(20).measurement_time(Duration::from_secs(5));
    // In /dev/shm where there is one: 100,000 durable commits on a disk take minutes.
    let shm = Path::new("/dev/shm");
    let dir = if shm.is_dir() { tempfile::tempdir_in(shm) } else { tempfile::tempdir() }.unwrap();
    let stores: [(&str, Arc<dyn Backend>); 3] = [
        ("sqlite", Kind::Sqlite.open(dir.path())),
        ("sqlite_sql_passes", Arc::new(SqliteStore::open(SqliteConfig::memory()).unwrap())),
        ("jsonl_zstd", Kind::JsonlZstd.open(dir.path())),
    ];
    let request = PageRequest { limit: 50, exclude_subagents: true, ..PageRequest::default() };
    let parent = SessionId::from("parent");
    let cancel = CancellationToken::new();
    for (label, backend) in stores {
        write_sessions(&*backend, N_SESSIONS, N_CHILDREN);
        let page = backend.list_page(&request, &cancel).unwrap();
        assert_eq!(page.headers.len(), 50, "{label}");
        assert_eq!(page.children.get(&parent).map(Vec::len), Some(N_CHILDREN), "{label}: the parent is on the page");
        assert_eq!(backend.list_children(&parent, &cancel).unwrap().headers.len(), N_CHILDREN + 1, "{label}");
        group.bench_function(format!("{label}/first_page"), |b| {
            b.iter(|| backend.list_page(&request, &cancel).unwrap());
        });
        // After an append elsewhere in the store, so the order catches up (a changed data_version).
        let mut seq = 1;
        let event_at = |seq: u64| {
            Arc::new(SessionEvent::new(
                "turn/start",
                seq,
                10,
                session_core::JsonData::from_text(r#"{"turn":1}"#).unwrap(),
            ))
        };
        group.bench_function(format!("{label}/first_page_after_an_append"), |b| {
            b.iter_batched(
                || {
                    let mut header = header("s000000");
                    header.created_at = 1_000;
                    backend.append_batch(&header, &[event_at(seq)], true).unwrap();
                    seq += 1;
                },
                |()| backend.list_page(&request, &cancel).unwrap(),
                BatchSize::PerIteration,
            );
        });
        group.bench_function(format!("{label}/family_of_1000"), |b| {
            b.iter(|| backend.list_children(&parent, &cancel).unwrap());
        });
    }
    group.finish();
}

criterion_group!(benches, append_throughput, cold_listing, checkpoint_tail, listings_100k);
criterion_main!(benches);
