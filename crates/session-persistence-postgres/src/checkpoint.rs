//! `PgCheckpointStore`: the projection cache's checkpoint records in the session store's
//! database, in the `checkpoints` table of its schema, one row per session: the record's JSON
//! with its format name, version and CRC-32, as the disk store's files hold them. A row that fails
//! a check is discarded with a warning, never an error: records are derived data.

use std::{io, sync::Arc};

use session_core::SessionId;
use session_projection_cache::{CacheError, CheckpointRecord, CheckpointStore, RECORD_FORMAT, RECORD_VERSION};

use crate::{db::plain, schema::qualify, store::PgStore};

/// Checkpoint records beside the sessions of a [`PgStore`]. See the module documentation.
#[derive(Debug)]
pub struct PgCheckpointStore {
    store: Arc<PgStore>,
    get_sql: String,
    put_sql: String,
    remove_sql: String,
}

fn cache_error(store: &PgStore, error: session_persistence::PersistenceError) -> CacheError {
    match error {
        session_persistence::PersistenceError::Io { path, source } => CacheError::io(path, source),
        other => CacheError::io(store.shown(), io::Error::other(other.to_string())),
    }
}

impl PgCheckpointStore {
    /// The checkpoint table of `store`'s schema (created by the store's setup step).
    pub fn new(store: Arc<PgStore>) -> PgCheckpointStore {
        let schema = store.schema().to_owned();
        PgCheckpointStore {
            get_sql: qualify(
                "SELECT format, version, crc32, record FROM {s}.checkpoints WHERE session_id = $1",
                &schema,
            ),
            put_sql: qualify(
                "INSERT INTO {s}.checkpoints (session_id, format, version, crc32, record) VALUES ($1, $2, $3, $4, $5) \
                 ON CONFLICT (session_id) DO UPDATE SET format = excluded.format, version = excluded.version, \
                 crc32 = excluded.crc32, record = excluded.record",
                &schema,
            ),
            remove_sql: qualify("DELETE FROM {s}.checkpoints WHERE session_id = $1", &schema),
            store,
        }
    }

    /// The record a row holds, or why it cannot be used.
    fn decode(id: &SessionId, format: &str, version: i64, crc: i64, text: &str) -> Result<CheckpointRecord, String> {
        if format != RECORD_FORMAT {
            return Err(format!("foreign: the row's format is {format:?}, not {RECORD_FORMAT:?}"));
        }
        if u64::try_from(version).ok() != Some(RECORD_VERSION) {
            return Err(format!("version-mismatched: version {version}, this build reads {RECORD_VERSION}"));
        }
        if i64::from(crc32fast::hash(text.as_bytes())) != crc {
            return Err("corrupt: the record fails its checksum".to_owned());
        }
        let record: CheckpointRecord =
            serde_json::from_str(text).map_err(|error| format!("corrupt: {error} (session {id})"))?;
        record.validate().map_err(|error| format!("corrupt: {error}"))?;
        Ok(record)
    }
}

impl CheckpointStore for PgCheckpointStore {
    fn get(&self, id: &SessionId) -> session_projection_cache::Result<Option<CheckpointRecord>> {
        let db = self.store.db();
        let row = db
            .run(async |client| {
                db.timed("reading a checkpoint", plain(client).query_opt(&self.get_sql, &[&id.as_str()])).await
            })
            .map_err(|error| cache_error(&self.store, error))?;
        let Some(row) = row else { return Ok(None) };
        let (format, version, crc, text): (String, i64, i64, String) = (row.get(0), row.get(1), row.get(2), row.get(3));
        match Self::decode(id, &format, version, crc, &text) {
            Ok(record) => Ok(Some(record)),
            Err(detail) => {
                tracing::warn!(
                    session = %id,
                    store = %self.store.shown(),
                    "session projection cache: discarding the record of \"{id}\" ({detail}); the next write replaces it"
                );
                Ok(None)
            }
        }
    }

    fn put(&self, id: &SessionId, record: &CheckpointRecord) -> session_projection_cache::Result<()> {
        // Rows hold JSON values and every map is keyed by strings, so serialization cannot fail.
        let text = serde_json::to_string(record).expect("a checkpoint record serializes to JSON");
        let crc = i64::from(crc32fast::hash(text.as_bytes()));
        let version = RECORD_VERSION as i64;
        let db = self.store.db();
        db.run(async |client| {
            db.timed(
                "writing a checkpoint",
                plain(client).execute(&self.put_sql, &[&id.as_str(), &RECORD_FORMAT, &version, &crc, &text]),
            )
            .await
        })
        .map_err(|error| cache_error(&self.store, error))?;
        Ok(())
    }

    fn remove(&self, id: &SessionId) -> session_projection_cache::Result<bool> {
        let db = self.store.db();
        let removed = db
            .run(async |client| {
                db.timed("removing a checkpoint", plain(client).execute(&self.remove_sql, &[&id.as_str()])).await
            })
            .map_err(|error| cache_error(&self.store, error))?;
        Ok(removed > 0)
    }
}
