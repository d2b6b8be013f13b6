//! Profiling aid: writes one large session once, then cold-inspects it repeatedly.

use std::sync::Arc;

use e2e::workload::TranscriptBuilder;
use session_core::{SessionHeader, SessionId};
use session_persistence::{Compression, Coordinator, CoordinatorConfig, JsonlConfig, JsonlStore, SessionPersistence};
use tokio_util::sync::CancellationToken;

fn main() {
    let compression =
        if std::env::args().nth(1).as_deref() == Some("zstd") { Compression::Zstd } else { Compression::None };
    let root = std::path::PathBuf::from(format!("/tmp/scan-profile-{}", compression.as_str()));
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    runtime.block_on(async {
        let store = JsonlStore::open(JsonlConfig { root: root.clone(), compression, pack_chunks: true }).unwrap();
        let persistence = Coordinator::new(Arc::new(store), CoordinatorConfig::default()).unwrap();
        let id = SessionId::from("s-big");
        if persistence.inspect(&id, &CancellationToken::new()).await.is_err() {
            let mut header = SessionHeader::new(id.clone(), 1);
            header.cwd = Some("/bench/project".into());
            persistence.create(header, &CancellationToken::new()).await.unwrap();
            let batches = TranscriptBuilder::new(7, 0, Some("x".into())).transcript(100_000);
            for chunk in batches.chunks(100) {
                persistence
                    .append(&id, chunk.iter().flatten().cloned().collect(), &CancellationToken::new())
                    .await
                    .unwrap();
            }
        }
        let started = std::time::Instant::now();
        for _ in 0..20 {
            let fresh = Coordinator::new(persistence.backend().clone(), CoordinatorConfig::default()).unwrap();
            let inspection = fresh.inspect(&id, &CancellationToken::new()).await.unwrap();
            std::hint::black_box(inspection);
        }
        eprintln!("{:?} per inspect", started.elapsed() / 20);
    });
}
