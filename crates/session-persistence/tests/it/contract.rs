//! The persistence and coordinator contracts of the backend test kit (`persistence-testkit`), run
//! on the memory store, on the memory store read ahead in runs of three (as a database backend's
//! batched reads are), and on the JSONL store raw and zstd. The places here also serve the
//! bounds tests (`bounds`).

use std::{fs, path::PathBuf, sync::Arc, time::Duration};

use session_core::SessionHeader;
use session_persistence::{
    Backend, Compression, Coordinator, CoordinatorConfig, CountingBackend, JsonlConfig, JsonlStore, MemoryStore,
};

/// One kind of storage, reopenable as a fresh coordinator over the same bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Memory,
    /// The memory store behind a backend that reads ahead ([`Backend::prefetch`]) in runs of 3.
    MemoryReadAhead,
    JsonlRaw,
    JsonlZstd,
}

pub(crate) const KINDS: [Kind; 3] = [Kind::Memory, Kind::JsonlRaw, Kind::JsonlZstd];

/// A fresh storage place of one kind: a shared memory store, or a JSONL root in a temp dir.
pub(crate) struct Harness {
    kind: Kind,
    memory: Arc<MemoryStore>,
    dir: tempfile::TempDir,
}

impl Harness {
    pub(crate) fn new(kind: Kind) -> Harness {
        Harness { kind, memory: Arc::new(MemoryStore::new()), dir: tempfile::tempdir().unwrap() }
    }

    pub(crate) fn root(&self) -> PathBuf {
        self.dir.path().join("store")
    }

    fn config(&self) -> Option<JsonlConfig> {
        let compression = match self.kind {
            Kind::Memory | Kind::MemoryReadAhead => return None,
            Kind::JsonlRaw => Compression::None,
            Kind::JsonlZstd => Compression::Zstd,
        };
        Some(JsonlConfig { root: self.root(), compression, pack_chunks: true })
    }

    /// A fresh coordinator over the same storage. Drop the previous one first: a JSONL store
    /// holds the root's write lock for as long as it lives.
    pub(crate) fn open(&self) -> Coordinator {
        let config =
            CoordinatorConfig { write_batch_max_delay: Duration::from_millis(20), ..CoordinatorConfig::default() };
        Coordinator::new(persistence_testkit::Place::open(self), config).unwrap()
    }
}

impl persistence_testkit::Place for Harness {
    fn open(&self) -> Arc<dyn Backend> {
        match self.config() {
            None if self.kind == Kind::MemoryReadAhead => {
                let counting = CountingBackend::new(self.memory.clone());
                counting.read_ahead_by_scans(3);
                Arc::new(counting)
            }
            None => self.memory.clone(),
            Some(config) => Arc::new(JsonlStore::open(config).unwrap()),
        }
    }

    /// The log's file, found by a read-only store (readers take no lock, so a writer may be open).
    fn log_bytes(&self, header: &SessionHeader) -> Option<Vec<u8>> {
        let store = JsonlStore::open_read_only(self.config()?).unwrap();
        Some(fs::read(store.locate(header).expect("a JSONL log has a path")).unwrap())
    }
}

persistence_testkit::persistence_contract!(memory_persistence, || Harness::new(Kind::Memory));
persistence_testkit::persistence_contract!(jsonl_raw_persistence, || Harness::new(Kind::JsonlRaw));
persistence_testkit::persistence_contract!(jsonl_zstd_persistence, || Harness::new(Kind::JsonlZstd));
persistence_testkit::persistence_contract!(memory_read_ahead_persistence, || Harness::new(Kind::MemoryReadAhead));
persistence_testkit::coordinator_contract!(memory_coordinator, || Harness::new(Kind::Memory));
persistence_testkit::coordinator_contract!(memory_read_ahead_coordinator, || Harness::new(Kind::MemoryReadAhead));
persistence_testkit::coordinator_contract!(jsonl_raw_coordinator, || Harness::new(Kind::JsonlRaw));
persistence_testkit::coordinator_contract!(jsonl_zstd_coordinator, || Harness::new(Kind::JsonlZstd));
