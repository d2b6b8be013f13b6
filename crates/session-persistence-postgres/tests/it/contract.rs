//! The backend test kit (`persistence-testkit`) on PostgreSQL: the persistence and coordinator
//! contracts and the checkpoint-store contract on `PgCheckpointStore`, every case on a schema of
//! its own (dropped after). Without a configured server they are skipped outside CI and fail under
//! CI (`server_url`).

use std::sync::Arc;

use persistence_testkit::{CheckpointPlace, Damage, Place};
use session_core::SessionId;
use session_persistence::Backend;
use session_persistence_postgres::PgCheckpointStore;
use session_projection_cache::{CheckpointStore, RECORD_VERSION};

use crate::{TestSchema, server_url};

/// One schema of the test server: every open is a new store (a new pool) over the same tables.
struct Schema(TestSchema);

impl Schema {
    fn fresh() -> Schema {
        Schema(TestSchema::new().expect("the server is configured"))
    }
}

impl Place for Schema {
    fn open(&self) -> Arc<dyn Backend> {
        Arc::new(self.0.open())
    }

    /// Every open is a pool of its own over one schema, as each host has.
    fn shared_writers(&self) -> bool {
        true
    }
}

impl CheckpointPlace for Schema {
    fn open(&self) -> Arc<dyn CheckpointStore> {
        Arc::new(PgCheckpointStore::new(Arc::new(self.0.open())))
    }

    /// Damages the row in SQL, behind the store's back.
    fn damage(&self, id: &SessionId, damage: &Damage) -> bool {
        let id = id.as_str();
        let assignment = match damage {
            Damage::Truncated => "record = left(record, length(record) / 2)".to_owned(),
            // One character changed in the middle: the checksum must catch it.
            Damage::FlippedBit => "record = overlay(record placing \
                CASE WHEN substr(record, length(record) / 2, 1) = 'x' THEN 'y' ELSE 'x' END \
                from length(record) / 2 for 1)"
                .to_owned(),
            Damage::NewerVersion => format!("version = {}", RECORD_VERSION + 1),
            Damage::Garbage => "record = 'not json at all'".to_owned(),
            // A row is keyed by its session and does not name it, so another session's row in
            // its place is a valid record, not a damaged one.
            _ => return false,
        };
        let changed = self.0.value(&format!(
            "WITH changed AS (UPDATE {{s}}.checkpoints SET {assignment} WHERE session_id = '{id}' RETURNING 1) \
             SELECT count(*) FROM changed"
        ));
        assert_eq!(changed.as_deref(), Some("1"), "{damage:?}");
        true
    }
}

persistence_testkit::persistence_contract!(persistence, Schema::fresh, when server_url().is_some());
persistence_testkit::coordinator_contract!(coordinator, Schema::fresh, when server_url().is_some());
persistence_testkit::checkpoint_store_contract!(checkpoint_store, Schema::fresh, when server_url().is_some());
