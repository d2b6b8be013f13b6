//! Projection benchmarks (issue: projection registry and checkpoint cache): the per-event cost of
//! driving 1, 8 and 32 units on append (against 0 units), `restore` throughput over a 100,000-event
//! log, and `cold_snapshot` of a 100,001-event JSONL log with and without a usable checkpoint
//! (time, and log reads from the cache's counters).

use std::{hint::black_box, path::Path, sync::Arc, time::Duration};

use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use e2e::workload::TranscriptBuilder;
use serde::{Deserialize, Serialize};
use session_core::{
    CreateOptions, ManualClock, Session, SessionEvent, SessionHeader, SessionId, SessionStore, SurfaceIntent,
};
use session_persistence::{Compression, Coordinator, CoordinatorConfig, JsonlConfig, JsonlStore, SessionPersistence};
use session_projection::{CheckpointRows, ClientView, ProjectionRegistry, ProjectionUnit, Registration, UnitError};
use session_projection_cache::{CacheConfig, CheckpointStore, MemoryCheckpointStore, ProjectionCache};
use tokio_util::sync::CancellationToken;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
}

// ---------------------------------------------------------------------------------------------
// Units shaped like the reference's: a turn counter, an event counter (host-only), a usage sum
// that parses assistant messages, and a last-tool unit that parses tool calls.

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
struct Turns {
    turns: u64,
    open: bool,
}

struct TurnUnit(String);

impl ProjectionUnit for TurnUnit {
    type State = Turns;

    fn key(&self) -> &str {
        &self.0
    }

    fn state_version(&self) -> u64 {
        1
    }

    fn init(&self) -> Turns {
        Turns::default()
    }

    fn reads(&self) -> Option<&'static [&'static str]> {
        Some(&["turn/start", "turn/end"])
    }

    fn apply(&self, state: &Turns, event: &SessionEvent) -> Result<Option<Turns>, UnitError> {
        let open = event.kind == "turn/start";
        Ok(Some(Turns { turns: state.turns + u64::from(open), open }))
    }
}

impl ClientView for TurnUnit {
    type View = Turns;

    fn view(&self, state: &Turns) -> Turns {
        state.clone()
    }
}

struct CountUnit(String);

impl ProjectionUnit for CountUnit {
    type State = u64;

    fn key(&self) -> &str {
        &self.0
    }

    fn state_version(&self) -> u64 {
        1
    }

    fn init(&self) -> u64 {
        0
    }

    fn apply(&self, state: &u64, _event: &SessionEvent) -> Result<Option<u64>, UnitError> {
        Ok(Some(state + 1))
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
struct Usage {
    input: u64,
    output: u64,
}

struct UsageUnit(String);

impl ProjectionUnit for UsageUnit {
    type State = Usage;

    fn key(&self) -> &str {
        &self.0
    }

    fn state_version(&self) -> u64 {
        1
    }

    fn init(&self) -> Usage {
        Usage::default()
    }

    fn reads(&self) -> Option<&'static [&'static str]> {
        Some(&["assistant/message"])
    }

    fn apply(&self, state: &Usage, event: &SessionEvent) -> Result<Option<Usage>, UnitError> {
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Sample {
            input_tokens: u64,
            output_tokens: u64,
        }
        #[derive(Deserialize)]
        struct Message {
            usage: Option<Sample>,
        }
        let message: Message = event.data.parse()?;
        Ok(message
            .usage
            .map(|usage| Usage { input: state.input + usage.input_tokens, output: state.output + usage.output_tokens }))
    }
}

impl ClientView for UsageUnit {
    type View = Usage;

    fn view(&self, state: &Usage) -> Usage {
        state.clone()
    }
}

struct ToolUnit(String);

impl ProjectionUnit for ToolUnit {
    type State = Option<String>;

    fn key(&self) -> &str {
        &self.0
    }

    fn state_version(&self) -> u64 {
        1
    }

    fn init(&self) -> Option<String> {
        None
    }

    fn reads(&self) -> Option<&'static [&'static str]> {
        Some(&["tool/call"])
    }

    fn apply(&self, state: &Option<String>, event: &SessionEvent) -> Result<Option<Option<String>>, UnitError> {
        #[derive(Deserialize)]
        struct Call {
            name: String,
        }
        let call: Call = event.data.parse()?;
        Ok((state.as_deref() != Some(call.name.as_str())).then_some(Some(call.name)))
    }
}

impl ClientView for ToolUnit {
    type View = Option<String>;

    fn view(&self, state: &Option<String>) -> Option<String> {
        state.clone()
    }
}

/// `n` units, cycling through the four shapes.
fn register(registry: &Arc<ProjectionRegistry>, n: usize) -> Vec<Registration> {
    (0..n)
        .map(|idx| match idx % 4 {
            0 => registry.register(TurnUnit(format!("turns/{idx}"))),
            1 => registry.register_host_only(CountUnit(format!("count/{idx}"))),
            2 => registry.register(UsageUnit(format!("usage/{idx}"))),
            _ => registry.register(ToolUnit(format!("tool/{idx}"))),
        })
        .map(Result::unwrap)
        .collect()
}

fn workload(n_events: u64) -> Vec<Arc<SessionEvent>> {
    TranscriptBuilder::new(7, 0, Some("bench child".into())).transcript(n_events).into_iter().flatten().collect()
}

fn append_like(session: &Session, event: &SessionEvent) {
    let surface = event.surface_op.map(|_| match &event.source_event_seqs {
        Some(sources) => SurfaceIntent::append().with_sources(sources.to_vec()),
        None => SurfaceIntent::append(),
    });
    session.append_data(event.kind.clone(), event.data.clone(), surface).unwrap();
}

/// Appends to a live session with the registry attached: every append drives every unit.
fn drive(c: &mut Criterion) {
    const N_EVENTS: u64 = 1_100;
    let events = workload(N_EVENTS);
    let mut group = c.benchmark_group("drive_per_event");
    group.sample_size(20).throughput(Throughput::Elements(N_EVENTS));
    for n_units in [0, 1, 8, 32] {
        let store = Arc::new(SessionStore::new(Arc::new(ManualClock::new(0))));
        let registry = ProjectionRegistry::new();
        let _units = register(&registry, n_units);
        let _attachment = registry.attach(&store);
        let mut next = 0u64;
        group.bench_function(format!("{n_units}_units"), |b| {
            b.iter_batched(
                || {
                    next += 1;
                    store.create(Some(SessionId::from(format!("s-{next}"))), CreateOptions::default()).unwrap()
                },
                |session| {
                    for event in &events {
                        append_like(&session, event);
                    }
                    store.detach(session.id());
                    session
                },
                BatchSize::PerIteration,
            );
        });
    }
    group.finish();
}

/// `restore` from zero over a 100,000-event log held in memory.
fn restore(c: &mut Criterion) {
    const N_EVENTS: u64 = 100_000;
    let events = workload(N_EVENTS);
    let mut group = c.benchmark_group("restore_100k");
    group.sample_size(10).measurement_time(Duration::from_secs(10)).throughput(Throughput::Elements(N_EVENTS));
    for n_units in [1, 8, 32] {
        let registry = ProjectionRegistry::new();
        let _units = register(&registry, n_units);
        group.bench_function(format!("{n_units}_units"), |b| {
            b.iter(|| {
                let restored =
                    registry.restore(&CheckpointRows::new(), events.iter().map(|event| &**event), 0).unwrap();
                assert_eq!(restored.snapshot.as_of_seq, N_EVENTS as i64 - 1);
                black_box(restored);
            });
        });
    }
    group.finish();
}

fn write_log(root: &Path, id: &SessionId, n_events: u64) -> Arc<JsonlStore> {
    let store = Arc::new(
        JsonlStore::open(JsonlConfig { root: root.to_path_buf(), compression: Compression::None, pack_chunks: true })
            .unwrap(),
    );
    runtime().block_on(async {
        let persistence = Coordinator::new(store.clone(), CoordinatorConfig::default()).unwrap();
        let mut header = SessionHeader::new(id.clone(), 1);
        header.cwd = Some("/bench/project".into());
        persistence.create(header, &CancellationToken::new()).await.unwrap();
        let batches = TranscriptBuilder::new(7, 0, None).transcript(n_events);
        for chunk in batches.chunks(100) {
            let events: Vec<_> = chunk.iter().flatten().cloned().collect();
            persistence.append(id, events, &CancellationToken::new()).await.unwrap();
        }
    });
    store
}

/// `cold_snapshot` of a 100,001-event raw JSONL log (9,091 complete turns) with 8 units: without a
/// record (a streamed fold of the whole log), with a record at the log end (a tail of one event),
/// and with a record at half the log (a tail of 50,000 events). A fresh coordinator and cache per
/// read, so neither the inspection cache nor a write-back serves it.
fn cold_snapshot(c: &mut Criterion) {
    // Whole turns: a log cut inside a turn has crash closers, and a whole-log fold then reads the
    // stored log a second time to leave them out.
    const N_EVENTS: u64 = 100_001;
    let runtime = runtime();
    let dir = tempfile::tempdir().unwrap();
    let id = SessionId::from("s-big");
    let backend = write_log(&dir.path().join("store"), &id, N_EVENTS);
    let registry = ProjectionRegistry::new();
    let _units = register(&registry, 8);
    let clock = Arc::new(ManualClock::new(0));
    let config = CacheConfig::new(200, 5_000).unwrap();
    let cache_over = |records: Arc<dyn CheckpointStore>| {
        let persistence = Coordinator::new(backend.clone(), CoordinatorConfig::default()).unwrap();
        ProjectionCache::new(registry.clone(), Arc::new(persistence), records, clock.clone(), config).unwrap()
    };

    // Records to start from: at the end (written back by a first cold read) and at half the log.
    let at_end = Arc::new(MemoryCheckpointStore::new());
    let seeded = cache_over(at_end.clone());
    runtime.block_on(seeded.cold_snapshot(&id, &CancellationToken::new())).unwrap();
    let mut half = at_end.get(&id).unwrap().unwrap();
    let events: Vec<_> = TranscriptBuilder::new(7, 0, None).transcript(N_EVENTS).into_iter().flatten().collect();
    let restored = registry
        .restore(&CheckpointRows::new(), events.iter().take(N_EVENTS as usize / 2).map(|event| &**event), 0)
        .unwrap();
    half.as_of_seq = restored.checkpoint.as_of_seq;
    half.rows = restored.checkpoint.rows;
    let at_half = Arc::new(MemoryCheckpointStore::new());
    at_half.put(&id, &half).unwrap();

    let mut group = c.benchmark_group("cold_snapshot_100k");
    group.sample_size(10).measurement_time(Duration::from_secs(15)).throughput(Throughput::Elements(N_EVENTS));
    let variants: [(&str, Option<Arc<MemoryCheckpointStore>>); 3] =
        [("no_checkpoint", None), ("checkpoint_at_end", Some(at_end)), ("checkpoint_at_half", Some(at_half))];
    for (name, records) in variants {
        let fresh_records = || -> Arc<dyn CheckpointStore> {
            match &records {
                // Each read starts from the same record: copy it into a fresh store.
                Some(records) => {
                    let copy = Arc::new(MemoryCheckpointStore::new());
                    copy.put(&id, &records.get(&id).unwrap().unwrap()).unwrap();
                    copy
                }
                None => Arc::new(MemoryCheckpointStore::new()),
            }
        };
        let probe = cache_over(fresh_records());
        let snapshot = runtime.block_on(probe.cold_snapshot(&id, &CancellationToken::new())).unwrap();
        let stats = probe.stats();
        eprintln!(
            "cold_snapshot_100k/{name}: {} log read(s) ({} tail, {} whole), as_of_seq {}, {} record(s) written back",
            stats.log_reads(),
            stats.tail_reads,
            stats.full_reads,
            snapshot.as_of_seq,
            stats.records_stored
        );
        group.bench_function(name, |b| {
            b.iter_batched(
                || cache_over(fresh_records()),
                |cache| {
                    let snapshot = runtime.block_on(cache.cold_snapshot(&id, &CancellationToken::new())).unwrap();
                    assert_eq!(snapshot.as_of_seq, N_EVENTS as i64 - 1);
                    cache
                },
                BatchSize::PerIteration,
            );
        });
    }
    group.finish();
}

criterion_group!(benches, drive, restore, cold_snapshot);
criterion_main!(benches);
