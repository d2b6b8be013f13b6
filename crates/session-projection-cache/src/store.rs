//! `CheckpointStore`: where checkpoint records live, one record per session, and the in-memory
//! implementation.

use std::{collections::BTreeMap, fmt};

use parking_lot::Mutex;
use session_core::SessionId;

use crate::{error::Result, record::CheckpointRecord};

/// Durable storage of checkpoint records, one per session id.
///
/// Calls are synchronous and may block on I/O: the cache makes every call on the blocking pool
/// (`ProjectionCache::cached_snapshot_blocking` calls `get` on the caller's thread, which must be
/// allowed to block). `get` should cost one read of one record at most (the disk store reads
/// only a regular file, and at most 256 MiB of it). Do not call a store from async code
/// directly: hop to the blocking pool (`session_storage_io::keyed::run_blocking`).
///
/// Contract:
/// - `put` replaces the whole record of `id` atomically: a concurrent `get` sees the old record
///   or the new one, never a mix, and a crash leaves one of the two.
/// - `get` returns `Ok(None)` for a record it cannot trust (damaged, written by another format
///   version, or belonging to another id), after logging a warning: the cache is derived data,
///   so such a record is discarded, never an error. `Err` means the storage itself failed.
/// - Records of different ids are independent: writing one never rewrites another.
pub trait CheckpointStore: Send + Sync + fmt::Debug + 'static {
    /// The record of `id`, or `None` if there is none or it cannot be trusted.
    fn get(&self, id: &SessionId) -> Result<Option<CheckpointRecord>>;

    /// [`get`](Self::get) of each of `ids`, in order. The default asks one at a time; a store
    /// whose every read is a round trip (a database server) reads them all in one.
    fn get_many(&self, ids: &[SessionId]) -> Vec<Result<Option<CheckpointRecord>>> {
        ids.iter().map(|id| self.get(id)).collect()
    }

    /// Replaces the whole record of `id` with `record`, durably and atomically, before returning.
    fn put(&self, id: &SessionId, record: &CheckpointRecord) -> Result<()>;

    /// Deletes the record of `id`; returns whether there was one.
    fn remove(&self, id: &SessionId) -> Result<bool>;
}

/// Records in process memory, for tests and hosts without a disk.
#[derive(Debug, Default)]
pub struct MemoryCheckpointStore {
    records: Mutex<BTreeMap<SessionId, CheckpointRecord>>,
}

impl MemoryCheckpointStore {
    /// An empty store.
    pub fn new() -> MemoryCheckpointStore {
        MemoryCheckpointStore::default()
    }

    /// The number of records held.
    pub fn len(&self) -> usize {
        self.records.lock().len()
    }

    /// Whether the store holds no record.
    pub fn is_empty(&self) -> bool {
        self.records.lock().is_empty()
    }

    /// The ids that have a record, in id order.
    pub fn ids(&self) -> Vec<SessionId> {
        self.records.lock().keys().cloned().collect()
    }
}

impl CheckpointStore for MemoryCheckpointStore {
    fn get(&self, id: &SessionId) -> Result<Option<CheckpointRecord>> {
        Ok(self.records.lock().get(id).cloned())
    }

    fn put(&self, id: &SessionId, record: &CheckpointRecord) -> Result<()> {
        self.records.lock().insert(id.clone(), record.clone());
        Ok(())
    }

    fn remove(&self, id: &SessionId) -> Result<bool> {
        Ok(self.records.lock().remove(id).is_some())
    }
}
