//! The backend test kit (`persistence-testkit`) on PostgreSQL: the persistence and coordinator
//! contracts and the checkpoint-store contract on `PgCheckpointStore`, every case on a schema of
//! its own (dropped after). Without a configured server they are skipped outside CI and fail under
//! CI (`server_url`).

use std::sync::Arc;

use persistence_testkit::{CheckpointPlace, Place};
use session_persistence::Backend;
use session_persistence_postgres::PgCheckpointStore;
use session_projection_cache::CheckpointStore;

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
}

#[test]
fn a_postgres_schema_passes_the_persistence_contract() {
    if server_url().is_some() {
        persistence_testkit::run_persistence_contract(Schema::fresh);
    }
}

#[test]
fn a_postgres_schema_passes_the_coordinator_contract() {
    if server_url().is_some() {
        persistence_testkit::run_coordinator_contract(Schema::fresh);
    }
}

#[test]
fn a_postgres_checkpoint_store_passes_the_checkpoint_store_contract() {
    if server_url().is_some() {
        persistence_testkit::run_checkpoint_store_contract(Schema::fresh);
    }
}
