//! The test kit's checkpoint-store contract (`persistence-testkit`) on the built-in stores:
//! `MemoryCheckpointStore`, and `DiskCheckpointStore` with its record files damaged on request.

use std::{fs, sync::Arc};

use persistence_testkit::{CheckpointPlace, Damage};
use serde_json::{Value, json};
use session_core::SessionId;
use session_projection_cache::{CheckpointStore, DiskCheckpointStore, MemoryCheckpointStore, RECORD_VERSION};

/// A memory store is its own storage: opening it again is sharing it.
struct Memory(Arc<MemoryCheckpointStore>);

impl CheckpointPlace for Memory {
    fn open(&self) -> Arc<dyn CheckpointStore> {
        self.0.clone()
    }
}

/// A cache root in a temp dir, opened again as a new `DiskCheckpointStore` over the same files.
struct Disk(tempfile::TempDir);

impl CheckpointPlace for Disk {
    fn open(&self) -> Arc<dyn CheckpointStore> {
        Arc::new(DiskCheckpointStore::open(self.0.path()).unwrap())
    }

    fn damage(&self, id: &SessionId, damage: &Damage) -> bool {
        let store = DiskCheckpointStore::open(self.0.path()).unwrap();
        let path = store.record_path(id).unwrap();
        let mut bytes = fs::read(&path).unwrap();
        let damaged = match damage {
            Damage::Truncated => bytes[..bytes.len() / 2].to_vec(),
            Damage::FlippedBit => {
                let middle = bytes.len() / 2;
                bytes[middle] ^= 0x01;
                bytes
            }
            Damage::NewerVersion => {
                let mut envelope: Value = serde_json::from_slice(&bytes).unwrap();
                envelope["version"] = json!(RECORD_VERSION + 1);
                serde_json::to_vec(&envelope).unwrap()
            }
            Damage::Garbage => b"\x00\xffnot json at all".to_vec(),
            Damage::AnotherSessionsRecord { of } => fs::read(store.record_path(of).unwrap()).unwrap(),
            _ => return false,
        };
        fs::write(&path, damaged).unwrap();
        true
    }
}

persistence_testkit::checkpoint_store_contract!(memory, || Memory(Arc::new(MemoryCheckpointStore::new())));
persistence_testkit::checkpoint_store_contract!(disk, || Disk(tempfile::tempdir().unwrap()));
