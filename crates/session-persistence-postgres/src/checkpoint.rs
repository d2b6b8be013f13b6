//! `PgCheckpointStore`: the projection cache's checkpoint records in the session store's
//! database, in the `checkpoints` table of its schema, one row per session: the record's JSON
//! with its format name, version and CRC-32, as the disk store's files hold them. A row that fails
//! a check is discarded with a warning, never an error: records are derived data.

use std::{collections::HashMap, sync::Arc};

use session_core::SessionId;
use session_projection_cache::{CacheError, CheckpointRecord, CheckpointStore, RecordRow};

use crate::{schema::qualify, store::PgStore};

/// Checkpoint records beside the sessions of a [`PgStore`]. See the module documentation.
#[derive(Debug)]
pub struct PgCheckpointStore {
    store: Arc<PgStore>,
    get_sql: String,
    get_many_sql: String,
    put_sql: String,
    remove_sql: String,
}

fn cache_error(error: session_persistence::PersistenceError) -> CacheError {
    match error {
        session_persistence::PersistenceError::Io { path, source } => CacheError::io(path, source),
        // A database failure already names the store (never with its password).
        other => CacheError::Storage { message: other.to_string() },
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
            get_many_sql: qualify(
                "SELECT session_id, format, version, crc32, record FROM {s}.checkpoints WHERE session_id = ANY($1)",
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
}

impl PgCheckpointStore {
    /// The record a row holds, or `None` (with a warning) when it fails a check.
    fn decoded(&self, id: &SessionId, row: RecordRow) -> Option<CheckpointRecord> {
        match row.decode(id) {
            Ok(record) => Some(record),
            Err(detail) => {
                tracing::warn!(
                    session = %id,
                    store = %self.store.shown(),
                    "session projection cache: discarding the record of \"{id}\" ({detail}); the next write replaces it"
                );
                None
            }
        }
    }
}

impl CheckpointStore for PgCheckpointStore {
    /// One query for all of `ids` (`session_id = ANY($1)`, through the primary key): a listing
    /// of 1,000 cold children asks once, not 1,000 times.
    fn get_many(&self, ids: &[SessionId]) -> Vec<session_projection_cache::Result<Option<CheckpointRecord>>> {
        let keys: Vec<&str> = ids.iter().map(SessionId::as_str).collect();
        let db = self.store.db();
        let rows = db.run(async |client| {
            let statement = db.prepared(client, &self.get_many_sql).await?;
            let rows = db.timed("reading checkpoints", client.query(&statement, &[&keys])).await?;
            rows.iter()
                .map(|row| {
                    let id: String = db.column(row, 0)?;
                    let row = RecordRow {
                        format: db.column(row, 1)?,
                        version: db.column(row, 2)?,
                        crc32: db.column(row, 3)?,
                        record: db.column(row, 4)?,
                    };
                    Ok((id, row))
                })
                .collect::<session_persistence::Result<HashMap<String, RecordRow>>>()
        });
        let rows = match rows {
            Ok(rows) => rows,
            Err(error) => {
                let message = cache_error(error).to_string();
                return ids.iter().map(|_| Err(CacheError::Storage { message: message.clone() })).collect();
            }
        };
        // An id asked twice gets its record twice.
        ids.iter().map(|id| Ok(rows.get(id.as_str()).cloned().and_then(|row| self.decoded(id, row)))).collect()
    }

    fn get(&self, id: &SessionId) -> session_projection_cache::Result<Option<CheckpointRecord>> {
        let db = self.store.db();
        let row = db
            .run(async |client| {
                let statement = db.prepared(client, &self.get_sql).await?;
                let row = db.timed("reading a checkpoint", client.query_opt(&statement, &[&id.as_str()])).await?;
                row.map(|row| {
                    Ok(RecordRow {
                        format: db.column(&row, 0)?,
                        version: db.column(&row, 1)?,
                        crc32: db.column(&row, 2)?,
                        record: db.column(&row, 3)?,
                    })
                })
                .transpose()
            })
            .map_err(cache_error)?;
        Ok(row.and_then(|row| self.decoded(id, row)))
    }

    fn put(&self, id: &SessionId, record: &CheckpointRecord) -> session_projection_cache::Result<()> {
        let RecordRow { format, version, crc32, record } = RecordRow::encode(record);
        let db = self.store.db();
        db.run(async |client| {
            let statement = db.prepared(client, &self.put_sql).await?;
            let params: [&(dyn tokio_postgres::types::ToSql + Sync); 5] =
                [&id.as_str(), &format, &version, &crc32, &record];
            db.timed("writing a checkpoint", client.execute(&statement, &params)).await
        })
        .map_err(cache_error)?;
        Ok(())
    }

    fn remove(&self, id: &SessionId) -> session_projection_cache::Result<bool> {
        let db = self.store.db();
        let removed = db
            .run(async |client| {
                let statement = db.prepared(client, &self.remove_sql).await?;
                db.timed("removing a checkpoint", client.execute(&statement, &[&id.as_str()])).await
            })
            .map_err(cache_error)?;
        Ok(removed > 0)
    }
}
