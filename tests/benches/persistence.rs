//! Persistence benchmarks (issue: workspace foundation): durable append throughput, cold
//! `inspect` throughput against a decompress-only pass over the same file, and `list()` over
//! 10,000 sessions against a bare directory walk.

use std::{
    hint::black_box,
    io::Read,
    path::{Path, PathBuf},
    sync::Arc,
    time::Duration,
};

use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use e2e::workload::TranscriptBuilder;
use session_core::{SessionHeader, SessionId};
use session_persistence::{
    Compression, Coordinator, CoordinatorConfig, JsonlConfig, JsonlStore, SessionPersistence,
    format::{FrameEncoder, encode_batch, encode_header_line},
};
use tokio_util::sync::CancellationToken;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
}

fn coordinator(root: &Path, compression: Compression) -> Coordinator {
    let store = JsonlStore::open(JsonlConfig { root: root.to_path_buf(), compression, pack_chunks: true }).unwrap();
    Coordinator::new(Arc::new(store), CoordinatorConfig::default()).unwrap()
}

fn header(id: &str, created_at: u64) -> SessionHeader {
    let mut header = SessionHeader::new(SessionId::from(id), created_at);
    header.cwd = Some("/bench/project".into());
    header
}

fn label(compression: Compression) -> &'static str {
    compression.as_str()
}

/// Durable appends, one 11-event turn per batch (one fsync each), as a live host writes them.
fn append_throughput(c: &mut Criterion) {
    let runtime = runtime();
    let mut group = c.benchmark_group("append_durable");
    group.sample_size(10).measurement_time(Duration::from_secs(10));
    const N_TURNS: usize = 50;
    for compression in [Compression::None, Compression::Zstd] {
        let n_events = {
            let mut builder = TranscriptBuilder::new(1, 0, None);
            (0..N_TURNS).map(|_| builder.turn().len() as u64).sum::<u64>()
        };
        group.throughput(Throughput::Elements(n_events));
        group.bench_function(label(compression), |b| {
            b.iter_batched(
                || {
                    let dir = tempfile::tempdir().unwrap();
                    let mut builder = TranscriptBuilder::new(1, 0, None);
                    let turns: Vec<_> = (0..N_TURNS).map(|_| builder.turn()).collect();
                    (dir, turns)
                },
                |(dir, turns)| {
                    runtime.block_on(async {
                        let persistence = coordinator(&dir.path().join("store"), compression);
                        let id = SessionId::from("s-append");
                        persistence.create(header("s-append", 1), &CancellationToken::new()).await.unwrap();
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

/// Writes one session of `n_events` in 11-event batches and returns the root.
fn write_session(root: &Path, compression: Compression, id: &str, n_events: u64) {
    let runtime = runtime();
    runtime.block_on(async {
        let persistence = coordinator(root, compression);
        persistence.create(header(id, 1), &CancellationToken::new()).await.unwrap();
        let mut builder = TranscriptBuilder::new(7, 0, Some("bench child".into()));
        let batches = builder.transcript(n_events);
        // One durable append per turn, as the reference's workload flushes: a zstd log holds one
        // frame per turn, and small frames cost the decoder more than large ones.
        for turn in batches {
            persistence.append(&SessionId::from(id), turn, &CancellationToken::new()).await.unwrap();
        }
    });
}

fn log_path(root: &Path, compression: Compression, id: &str) -> PathBuf {
    root.join("--bench-project--").join(id).join(compression.file_name())
}

/// Cold `inspect` of a 100,000-event session (MB/s of decompressed JSONL) and, in the same run,
/// a decompress-only pass over the same file.
fn cold_inspect(c: &mut Criterion) {
    const N_EVENTS: u64 = 100_000;
    let runtime = runtime();
    let mut group = c.benchmark_group("cold_inspect_100k");
    group.sample_size(10).measurement_time(Duration::from_secs(15));
    for compression in [Compression::None, Compression::Zstd] {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("store");
        write_session(&root, compression, "s-big", N_EVENTS);
        let path = log_path(&root, compression, "s-big");
        let plaintext_len = match compression {
            Compression::Zstd => zstd::stream::decode_all(std::fs::File::open(&path).unwrap()).unwrap().len(),
            Compression::None => std::fs::metadata(&path).unwrap().len() as usize,
        };
        group.throughput(Throughput::Bytes(plaintext_len as u64));
        group.bench_function(format!("decompress_only/{}", label(compression)), |b| {
            b.iter(|| {
                let file = std::fs::File::open(&path).unwrap();
                let mut reader: Box<dyn Read> = match compression {
                    Compression::Zstd => Box::new(zstd::stream::read::Decoder::new(file).unwrap()),
                    Compression::None => Box::new(file),
                };
                let mut buffer = vec![0u8; 256 << 10];
                let mut total = 0;
                loop {
                    let n = reader.read(&mut buffer).unwrap();
                    if n == 0 {
                        break;
                    }
                    total += n;
                }
                assert_eq!(total, plaintext_len);
            });
        });
        let persistence = coordinator(&root, compression);
        let id = SessionId::from("s-big");
        group.bench_function(format!("inspect/{}", label(compression)), |b| {
            b.iter(|| {
                // A fresh coordinator per read: the inspection cache must not serve it.
                let fresh = Coordinator::new(persistence.backend().clone(), CoordinatorConfig::default()).unwrap();
                let inspection = runtime.block_on(fresh.inspect(&id, &CancellationToken::new())).unwrap();
                assert!(inspection.events.len() as u64 >= N_EVENTS);
                black_box(inspection);
            });
        });
        group.bench_function(format!("inspect_stream/{}", label(compression)), |b| {
            b.iter(|| {
                let fresh = Coordinator::new(persistence.backend().clone(), CoordinatorConfig::default()).unwrap();
                let (_, summary) = runtime
                    .block_on(session_persistence::inspect_into(&fresh, &id, &CancellationToken::new(), CountSink(0)))
                    .unwrap();
                black_box(summary);
            });
        });
    }
    group.finish();
}

struct CountSink(u64);

impl session_persistence::ScanSink for CountSink {
    fn event(&mut self, _event: Arc<session_core::SessionEvent>) -> session_persistence::Result<()> {
        self.0 += 1;
        Ok(())
    }
}

/// Writes `n` small sessions directly with the format encoders (no fsync), for listing.
fn write_many(root: &Path, compression: Compression, n: usize) {
    let project = root.join("--bench-project--");
    let mut builder = TranscriptBuilder::new(3, 0, None);
    let turn = builder.turn();
    for idx in 0..n {
        let id = format!("s-{idx:05}");
        let dir = project.join(&id);
        std::fs::create_dir_all(&dir).unwrap();
        let mut header_line = encode_header_line(&header(&id, 1_000 + idx as u64)).into_bytes();
        header_line.push(b'\n');
        let mut batch = Vec::new();
        encode_batch(&turn, true, &mut batch).unwrap();
        let bytes = match compression {
            Compression::None => [header_line, batch].concat(),
            Compression::Zstd => {
                let mut encoder = FrameEncoder::new().unwrap();
                [encoder.encode(&header_line).unwrap(), encoder.encode(&batch).unwrap()].concat()
            }
        };
        std::fs::write(dir.join(compression.file_name()), bytes).unwrap();
    }
}

/// Stats every log of the store: the floor any listing pays.
fn bare_walk(root: &Path, compression: Compression) -> usize {
    let mut n = 0;
    for project in std::fs::read_dir(root).unwrap() {
        let project = project.unwrap();
        if !project.file_type().unwrap().is_dir() {
            continue;
        }
        for session in std::fs::read_dir(project.path()).unwrap() {
            let path = session.unwrap().path().join(compression.file_name());
            if std::fs::metadata(&path).is_ok() {
                n += 1;
            }
        }
    }
    n
}

fn list_many(c: &mut Criterion) {
    const N_SESSIONS: usize = 10_000;
    let runtime = runtime();
    let mut group = c.benchmark_group("list_10k");
    group.sample_size(10).measurement_time(Duration::from_secs(10));
    for compression in [Compression::None, Compression::Zstd] {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("store");
        write_many(&root, compression, N_SESSIONS);
        group.bench_function(format!("bare_walk/{}", label(compression)), |b| {
            b.iter(|| assert_eq!(bare_walk(&root, compression), N_SESSIONS));
        });
        group.bench_function(format!("first_list/{}", label(compression)), |b| {
            b.iter_batched(
                || coordinator(&root, compression),
                |persistence| {
                    let listed = runtime.block_on(persistence.list(&CancellationToken::new())).unwrap();
                    assert_eq!(listed.len(), N_SESSIONS);
                    persistence
                },
                BatchSize::PerIteration,
            );
        });
        let persistence = coordinator(&root, compression);
        runtime.block_on(persistence.list(&CancellationToken::new())).unwrap();
        group.bench_function(format!("repeated_list/{}", label(compression)), |b| {
            b.iter(|| {
                let listed = runtime.block_on(persistence.list(&CancellationToken::new())).unwrap();
                assert_eq!(listed.len(), N_SESSIONS);
            });
        });
    }
    group.finish();
}

criterion_group!(benches, append_throughput, cold_inspect, list_many);
criterion_main!(benches);
