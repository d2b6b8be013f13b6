//! PostgreSQL backend benchmarks (issue 16), each against a JSONL store on the same workload:
//! durable append throughput (one commit per batch against one fsync per batch), the cold listing
//! of 100 children × 10,000 events (against JSONL zstd), the catalog of a store of 100,000
//! sessions (a parent's 100 children with checkpoints, and one page of 100 of the newest-first
//! listing), a checkpoint's tail read, and what following costs (issue 24): a sweep's queries over
//! 10,000 sessions and an append's notification with 0, 1 and 4 watches listening.
//!
//! Needs `SESSION_PG_URL` (for example `postgres://postgres@127.0.0.1:5432/test`); without it
//! every benchmark here says it was skipped. Each run works in a schema of its own and drops it.
//! `BENCH_STORE_SESSIONS` changes the store size of the catalog benchmark (100,000 by default).

use std::{
    path::Path,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use e2e::{
    fleet::{self, CountUnit, Fleet},
    workload::TranscriptBuilder,
};
use session_core::{SessionEvent, SessionHeader, SessionId};
use session_persistence::{
    Backend, Compression, Coordinator, CoordinatorConfig, JsonlConfig, JsonlStore, PageRequest, SessionPersistence,
    encode_segment, project_key,
};
use session_persistence_postgres::{PgCheckpointStore, PgStore, TlsMode, testing::ScratchSchema};
use session_projection::{CheckpointRows, ProjectionRegistry};
use session_projection_cache::{
    CacheConfig, CheckpointRecord, CheckpointStore, MemoryCheckpointStore, ProjectionCache, RecordIdentity,
};
use subagent::SubagentListEntry;
use tokio_util::sync::CancellationToken;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
}

/// A schema of this run's own on the benchmark server, dropped at the end; `None` (after saying
/// so) without `SESSION_PG_URL`.
struct BenchSchema(ScratchSchema);

impl BenchSchema {
    fn new(what: &str) -> Option<BenchSchema> {
        if std::env::var("SESSION_PG_URL").is_ok_and(|url| !url.is_empty()) {
            return ScratchSchema::new().map(BenchSchema);
        }
        eprintln!("postgres/{what}: SKIPPED: set SESSION_PG_URL=postgres://postgres@127.0.0.1:5432/test to run it");
        None
    }

    fn open(&self) -> Arc<PgStore> {
        Arc::new(self.0.open())
    }

    /// A store over the schema whose connections are not encrypted (`sslmode=disable`).
    fn open_plain(&self) -> Arc<PgStore> {
        let config = self.0.config().clone().with_tls(TlsMode::Disable, None).unwrap();
        Arc::new(PgStore::open(&config).unwrap())
    }

    /// Runs `sql` (with `{s}` for the schema).
    fn sql(&self, sql: &str) {
        self.0.sql(sql);
    }
}

fn header(id: &str) -> SessionHeader {
    let mut header = SessionHeader::new(SessionId::from(id), 1);
    header.cwd = Some("/bench/project".into());
    header
}

fn jsonl(dir: &Path, compression: Compression) -> Arc<dyn Backend> {
    Arc::new(JsonlStore::open(JsonlConfig { root: dir.join("store"), compression, pack_chunks: true }).unwrap())
}

/// Durable appends, one 11-event turn per batch: one commit each on PostgreSQL, one fsync each
/// on JSONL.
fn append_throughput(c: &mut Criterion) {
    const N_TURNS: usize = 50;
    let Some(schema) = BenchSchema::new("append_durable") else { return };
    let store = schema.open();
    let runtime = runtime();
    let mut group = c.benchmark_group("postgres/append_durable");
    group.sample_size(10).measurement_time(Duration::from_secs(10));
    let n_events: u64 = {
        let mut builder = TranscriptBuilder::new(1, 0, None);
        (0..N_TURNS).map(|_| builder.turn().len() as u64).sum()
    };
    group.throughput(Throughput::Elements(n_events));
    let turns = || {
        let mut builder = TranscriptBuilder::new(1, 0, None);
        (0..N_TURNS).map(|_| builder.turn()).collect::<Vec<_>>()
    };
    let write = |backend: Arc<dyn Backend>, id: String, turns: Vec<Vec<Arc<SessionEvent>>>| {
        runtime.block_on(async {
            let persistence = Coordinator::new(backend, CoordinatorConfig::default()).unwrap();
            let cancel = CancellationToken::new();
            persistence.create(header(&id), &cancel).await.unwrap();
            for turn in turns {
                persistence.append(&SessionId::from(id.as_str()), turn, &cancel).await.unwrap();
            }
        });
    };
    let next_id = AtomicU64::new(0);
    group.bench_function("postgres", |b| {
        b.iter_batched(
            || (format!("s-append-{}", next_id.fetch_add(1, Ordering::Relaxed)), turns()),
            |(id, turns)| write(store.clone(), id, turns),
            BatchSize::PerIteration,
        );
    });
    group.bench_function("jsonl_zstd", |b| {
        b.iter_batched(
            || (tempfile::tempdir().unwrap(), turns()),
            |(dir, turns)| {
                write(jsonl(dir.path(), Compression::Zstd), "s-append".to_owned(), turns);
                dir
            },
            BatchSize::PerIteration,
        );
    });
    group.finish();
}

fn assert_children(rows: &[SubagentListEntry], n_children: usize) {
    assert_eq!(rows.len(), n_children);
    assert!(rows.iter().all(|row| matches!(row, SubagentListEntry::Child(_))), "every row is a child row");
}

/// The cold listing of a parent with 100 children of 10,000 events each, without checkpoints:
/// one streamed read per child, four at a time.
fn cold_listing(c: &mut Criterion) {
    const N_CHILDREN: usize = 100;
    const N_EVENTS: u64 = 10_000;
    let Some(schema) = BenchSchema::new("list_children_cold_100x10k") else { return };
    let runtime = runtime();
    let mut group = c.benchmark_group("postgres/list_children_cold_100x10k");
    group.sample_size(10).measurement_time(Duration::from_secs(20));
    let dir = tempfile::tempdir().unwrap();
    // The same rows read over TLS (`sslmode=prefer`, the default, on a server that offers it)
    // and over plain TCP.
    let stores: [(&str, Arc<dyn Backend>); 3] = [
        ("postgres", schema.open()),
        ("postgres_plain", schema.open_plain()),
        ("jsonl_zstd", jsonl(dir.path(), Compression::Zstd)),
    ];
    for (label, backend) in stores {
        if label != "postgres_plain" {
            runtime.block_on(fleet::write_fleet_into(backend.clone(), N_CHILDREN, N_EVENTS));
        }
        let cold = Fleet::over(backend);
        let catalog = cold.runtime(None);
        let before = cold.backend.scans();
        assert_children(&runtime.block_on(fleet::list(&catalog)), N_CHILDREN);
        eprintln!(
            "postgres/list_children_cold_100x10k/{label}: one listing read {} logs",
            cold.backend.scans() - before
        );
        group.bench_function(label, |b| {
            b.iter(|| assert_children(&runtime.block_on(fleet::list(&catalog)), N_CHILDREN));
        });
    }
    group.finish();
}

/// The header line and one event of a bulk session, as the JSONL store writes them.
fn bulk_log(id: &str, created_at: u64) -> String {
    format!(
        "{{\"type\":\"session\",\"version\":0,\"id\":\"{id}\",\"createdAt\":{created_at},\"cwd\":\"{}\",\"delegationDepth\":0}}\n\
         {{\"type\":\"turn/start\",\"seq\":0,\"time\":1,\"data\":{{\"turn\":1}}}}\n",
        fleet::CWD
    )
}

/// A store of `n_sessions` sessions: `n_sessions - 101` small ones written in bulk (rows by SQL,
/// raw JSONL files directly, as a store that grew over months would hold them), then the fleet's
/// parent and 100 children of 100 events through the backend.
fn catalog_store(schema: &BenchSchema, dir: &Path, n_sessions: usize, runtime: &tokio::runtime::Runtime) {
    let n_bulk = n_sessions.saturating_sub(101);
    schema.sql(&format!(
        "INSERT INTO {{s}}.sessions (id, header, created_at, cwd, incarnation, revision, next_seq, n_bytes) \
         SELECT 'bulk-' || lpad(g::text, 6, '0'), \
                format('{{\"type\":\"session\",\"version\":0,\"id\":\"bulk-%s\",\"createdAt\":%s,\"cwd\":\"{cwd}\",\"delegationDepth\":0}}', \
                       lpad(g::text, 6, '0'), g), \
                g, '{cwd}', gen_random_uuid()::text, 1, 1, 56 \
         FROM generate_series(1, {n_bulk}) g; \
         INSERT INTO {{s}}.events (session_id, seq, type, time, record) \
         SELECT id, 0, 'turn/start', 1, '{{\"type\":\"turn/start\",\"seq\":0,\"time\":1,\"data\":{{\"turn\":1}}}}' \
         FROM {{s}}.sessions; \
         ANALYZE {{s}}.sessions; ANALYZE {{s}}.events;",
        cwd = fleet::CWD
    ));
    let root = dir.join("store");
    let project = root.join(project_key(fleet::CWD).unwrap());
    for idx in 1..=n_bulk {
        let id = format!("bulk-{idx:06}");
        let session_dir = project.join(encode_segment(&id).unwrap());
        std::fs::create_dir_all(&session_dir).unwrap();
        std::fs::write(session_dir.join("session.jsonl"), bulk_log(&id, idx as u64)).unwrap();
    }
    let stores: [Arc<dyn Backend>; 2] = [schema.open(), jsonl(dir, Compression::None)];
    for backend in stores {
        runtime.block_on(fleet::write_fleet_into(backend, 100, 100));
    }
}

/// The catalog of a store of 100,000 sessions: `subagent.list` of a parent's 100 children, each
/// with a checkpoint (zero log reads), and one page of 100 of the newest-first listing.
fn catalog_at_scale(c: &mut Criterion) {
    let n_sessions: usize = std::env::var("BENCH_STORE_SESSIONS").ok().and_then(|n| n.parse().ok()).unwrap_or(100_000);
    let Some(schema) = BenchSchema::new("catalog") else { return };
    let runtime = runtime();
    let dir = tempfile::tempdir().unwrap();
    catalog_store(&schema, dir.path(), n_sessions, &runtime);
    let pg = schema.open();
    /// A store under its label, with where its checkpoints go.
    type Labelled = (&'static str, Arc<dyn Backend>, Arc<dyn CheckpointStore>);
    let stores: [Labelled; 2] = [
        ("postgres", pg.clone(), Arc::new(PgCheckpointStore::new(pg.clone()))),
        ("jsonl", jsonl(dir.path(), Compression::None), Arc::new(MemoryCheckpointStore::new())),
    ];
    let mut children = c.benchmark_group(format!("postgres/list_children_checkpointed_100_of_{n_sessions}"));
    children.sample_size(10).measurement_time(Duration::from_secs(10));
    let mut pages = Vec::new();
    for (label, backend, records) in stores {
        let cold = Fleet::over(backend);
        let catalog = cold.runtime(None);
        let cache = ProjectionCache::new(
            cold.registry.clone(),
            cold.persistence.clone() as Arc<dyn SessionPersistence>,
            records,
            Arc::new(session_core::ManualClock::new(0)),
            CacheConfig::new(100, 5_000).unwrap(),
        )
        .unwrap();
        for idx in 0..100 {
            runtime.block_on(cache.cold_snapshot(&fleet::child_id(idx), &CancellationToken::new())).unwrap();
        }
        let cached = cold.runtime(Some(Arc::new(cache)));
        drop(catalog);
        let before = cold.backend.scans();
        assert_children(&runtime.block_on(fleet::list(&cached)), 100);
        eprintln!(
            "postgres/list_children_checkpointed/{label}: one listing read {} logs",
            cold.backend.scans() - before
        );
        children.bench_function(label, |b| b.iter(|| assert_children(&runtime.block_on(fleet::list(&cached)), 100)));
        pages.push((label, cold));
    }
    children.finish();
    let mut group = c.benchmark_group(format!("postgres/session_page_100_of_{n_sessions}"));
    group.sample_size(10).measurement_time(Duration::from_secs(10));
    let request = PageRequest { limit: 100, require_cwd: true, ..PageRequest::default() };
    for (label, cold) in &pages {
        group.bench_function(*label, |b| {
            b.iter(|| {
                let page = runtime.block_on(cold.persistence.list_page(&request, &CancellationToken::new())).unwrap();
                assert_eq!(page.headers.len(), 100);
            });
        });
    }
    group.finish();
}

/// `cold_snapshot` of a 100,001-event log from a record 1,000 events before its end: PostgreSQL
/// seeks to the record's watermark; JSONL scans the whole log and drops the prefix.
fn checkpoint_tail(c: &mut Criterion) {
    const N_EVENTS: u64 = 100_001;
    const TAIL: usize = 1_000;
    let Some(schema) = BenchSchema::new("checkpoint_tail_read_100k") else { return };
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
    let mut group = c.benchmark_group("postgres/checkpoint_tail_read_100k");
    group.sample_size(10).measurement_time(Duration::from_secs(10));
    let dir = tempfile::tempdir().unwrap();
    let stores: [(&str, Arc<dyn Backend>); 2] =
        [("postgres", schema.open()), ("jsonl_zstd", jsonl(dir.path(), Compression::Zstd))];
    for (label, backend) in stores {
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
        assert_eq!((stats.tail_reads, stats.full_reads), (1, 0), "{label}: a tail read");
        assert_eq!(snapshot.values["bench/count"], serde_json::json!(events.len()));
        group.bench_function(label, |b| {
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

/// What a follower's sweep costs the store: `positions` over 10,000 tracked sessions (one query:
/// their `next_seq` and, from `pg_locks`, whether a lease holds them; 1,000 are leased by
/// another handle) and `created_since` answering 100 of them. And what notifying costs an append:
/// one 5-event batch per iteration with the handle's notifications suppressed, then notifying
/// with 0, 1 and 4 watches listening.
fn follower_queries(c: &mut Criterion) {
    const N_SESSIONS: usize = 10_000;
    const N_LEASED: usize = 1_000;
    let Some(schema) = BenchSchema::new("follower") else { return };
    schema.sql(&format!(
        "INSERT INTO {{s}}.sessions (id, header, created_at, cwd, incarnation, revision, next_seq, n_bytes) \
         SELECT 'tracked-' || lpad(g::text, 5, '0'), \
                format('{{\"type\":\"session\",\"version\":0,\"id\":\"tracked-%s\",\"createdAt\":%s,\"delegationDepth\":0}}', \
                       lpad(g::text, 5, '0'), g), \
                g, NULL, gen_random_uuid()::text, 1, g % 100, 0 \
         FROM generate_series(1, {N_SESSIONS}) g; ANALYZE {{s}}.sessions;"
    ));
    let ids: Vec<SessionId> = (1..=N_SESSIONS).map(|idx| SessionId::from(format!("tracked-{idx:05}"))).collect();
    let holder = schema.open();
    for id in ids.iter().step_by(N_SESSIONS / N_LEASED) {
        holder.lease(id).unwrap();
    }
    let follower = schema.open();
    let cancel = CancellationToken::new();
    let held = follower.positions(&ids, &cancel).unwrap().iter().filter(|position| position.held == Some(true)).count();
    assert_eq!(held, N_LEASED);
    let mut group = c.benchmark_group("postgres/follower");
    group.sample_size(20).measurement_time(Duration::from_secs(10));
    group.bench_function("positions_10k", |b| {
        b.iter(|| assert_eq!(follower.positions(&ids, &cancel).unwrap().len(), N_SESSIONS));
    });
    let since = (N_SESSIONS - 99) as u64;
    group.bench_function("created_since_100_of_10k", |b| {
        b.iter(|| assert_eq!(follower.created_since(since, &cancel).unwrap().headers.len(), 100));
    });
    group.finish();

    let writer = schema.open();
    let next_seq = AtomicU64::new(0);
    let append = || {
        let first = next_seq.fetch_add(5, Ordering::Relaxed);
        let events: Vec<Arc<SessionEvent>> = (first..first + 5)
            .map(|seq| {
                let data = session_core::JsonData::from_text(r#"{"text":"a line of output"}"#).unwrap();
                Arc::new(SessionEvent::new("test/output", seq, 1, data))
            })
            .collect();
        writer.append_batch(&header("s-notify"), &events, first > 0).unwrap();
    };
    append();
    let mut group = c.benchmark_group("postgres/append_notify");
    group.sample_size(20).measurement_time(Duration::from_secs(10)).throughput(Throughput::Elements(5));
    writer.suppress_notifications(true);
    group.bench_function("suppressed", |b| b.iter(append));
    writer.suppress_notifications(false);
    let mut watches = Vec::new();
    for n_watches in [0, 1, 4] {
        while watches.len() < n_watches {
            let (sender, receiver) = std::sync::mpsc::channel::<()>();
            let sink: session_persistence::SharedChangeSink = Arc::new(move |_change| {
                let _ = sender.send(());
            });
            let watch = follower.watch(&session_persistence::WatchOptions::default(), sink).unwrap().unwrap();
            // Listening (its first sweep) before it counts.
            receiver.recv_timeout(Duration::from_secs(30)).unwrap();
            // Drained by nobody: a channel of unit values costs the sink nothing worth measuring.
            watches.push((watch, receiver));
        }
        group.bench_function(format!("notify_{n_watches}_listening"), |b| b.iter(append));
    }
    group.finish();
}

criterion_group!(benches, append_throughput, cold_listing, catalog_at_scale, checkpoint_tail, follower_queries);
criterion_main!(benches);
