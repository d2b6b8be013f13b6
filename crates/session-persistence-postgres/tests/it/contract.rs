//! The backend test kit (`persistence-testkit`) on PostgreSQL: the persistence and coordinator
//! contracts and the checkpoint-store contract on `PgCheckpointStore`, every case on a schema of
//! its own (dropped after). Without a configured server they are skipped outside CI and fail under
//! CI (`server_url`).

use std::sync::Arc;

use persistence_testkit::{CheckpointPlace, Place};
use session_persistence::Backend;
use session_persistence_postgres::{PgCheckpointStore, PgStore};
use session_projection_cache::CheckpointStore;

use crate::{TestSchema, server_url};

/// One schema of the test server: every open is a new store (a new pool) over the same tables.
struct Schema(TestSchema);

impl Schema {
    fn fresh() -> Schema {
        Schema(TestSchema::new().expect("the server is configured"))
    }
}

/// Opens a store on a thread of its own: the kit opens places inside its runtime, and a store
/// blocks on a runtime of its own while it connects.
fn open_store(schema: &TestSchema) -> Arc<PgStore> {
    std::thread::scope(|scope| Arc::new(scope.spawn(|| schema.open()).join().expect("the store opens")))
}

impl Place for Schema {
    fn open(&self) -> Arc<dyn Backend> {
        open_store(&self.0)
    }
}

impl CheckpointPlace for Schema {
    fn open(&self) -> Arc<dyn CheckpointStore> {
        Arc::new(PgCheckpointStore::new(open_store(&self.0)))
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
