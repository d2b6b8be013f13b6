//! The backend test kit (`persistence-testkit`) on SQLite: the persistence and coordinator
//! contracts on a database file and on `:memory:`, and the checkpoint-store contract on
//! `SqliteCheckpointStore` in a file (with the damage hook) and in memory.

use std::{path::PathBuf, sync::Arc};

use persistence_testkit::{CheckpointPlace, Damage, Place};
use session_core::SessionId;
use session_persistence::Backend;
use session_persistence_sqlite::{SqliteCheckpointStore, SqliteConfig, SqliteStore, Target};
use session_projection_cache::{CheckpointStore, RECORD_VERSION};

/// A fresh SQLite session database: a file in a temp dir, reopened as a new set of connections,
/// or an in-memory database shared by every open (it is gone when its last connection closes).
enum Sessions {
    File(tempfile::TempDir),
    Memory(Arc<SqliteStore>),
}

impl Sessions {
    fn file() -> Sessions {
        Sessions::File(tempfile::tempdir().unwrap())
    }

    fn memory() -> Sessions {
        Sessions::Memory(Arc::new(SqliteStore::open(SqliteConfig::memory()).unwrap()))
    }
}

impl Place for Sessions {
    fn open(&self) -> Arc<dyn Backend> {
        match self {
            Sessions::File(dir) => {
                Arc::new(SqliteStore::open(SqliteConfig::file(dir.path().join("db").join("sessions.db"))).unwrap())
            }
            Sessions::Memory(store) => store.clone(),
        }
    }

    /// Two opens of one file are two writers of one database, fenced by the stale-writer check.
    fn shared_writers(&self) -> bool {
        matches!(self, Sessions::File(_))
    }
}

persistence_testkit::persistence_contract!(file_persistence, Sessions::file);
persistence_testkit::persistence_contract!(memory_persistence, Sessions::memory);
persistence_testkit::coordinator_contract!(file_coordinator, Sessions::file);
persistence_testkit::coordinator_contract!(memory_coordinator, Sessions::memory);

/// A fresh SQLite checkpoint database: a file in a temp dir (damaged through a connection of
/// its own), or an in-memory one shared by every open.
enum Checkpoints {
    File(tempfile::TempDir),
    Memory(Arc<SqliteCheckpointStore>),
}

impl Checkpoints {
    fn path(dir: &tempfile::TempDir) -> PathBuf {
        dir.path().join("private").join("cache.db")
    }
}

impl CheckpointPlace for Checkpoints {
    fn open(&self) -> Arc<dyn CheckpointStore> {
        match self {
            Checkpoints::File(dir) => Arc::new(SqliteCheckpointStore::open(&Target::File(Self::path(dir))).unwrap()),
            Checkpoints::Memory(store) => store.clone(),
        }
    }

    fn damage(&self, id: &SessionId, damage: &Damage) -> bool {
        use rusqlite::types::Value;
        let Checkpoints::File(dir) = self else { return false };
        let connection = rusqlite::Connection::open(Self::path(dir)).unwrap();
        let text: String = connection
            .query_row("SELECT record FROM checkpoint_records WHERE id = ?1", [id.as_str()], |row| row.get(0))
            .unwrap();
        let mut bytes = text.into_bytes();
        let middle = bytes.len() / 2;
        let (column, value) = match damage {
            Damage::Truncated => ("record", Value::Text(String::from_utf8_lossy(&bytes[..middle]).into_owned())),
            Damage::FlippedBit => {
                bytes[middle] ^= 0x01;
                ("record", Value::Text(String::from_utf8_lossy(&bytes).into_owned()))
            }
            Damage::NewerVersion => ("version", Value::Integer(RECORD_VERSION as i64 + 1)),
            Damage::Garbage => ("record", Value::Text("not json at all".to_owned())),
            // A row is keyed by its session and does not name it, so another session's row in
            // its place is a valid record, not a damaged one.
            _ => return false,
        };
        let sql = format!("UPDATE checkpoint_records SET {column} = ?2 WHERE id = ?1");
        assert_eq!(connection.execute(&sql, rusqlite::params![id.as_str(), value]).unwrap(), 1, "{damage:?}");
        true
    }
}

persistence_testkit::checkpoint_store_contract!(checkpoint_file, || Checkpoints::File(tempfile::tempdir().unwrap()));
persistence_testkit::checkpoint_store_contract!(checkpoint_memory, || {
    Checkpoints::Memory(Arc::new(SqliteCheckpointStore::open(&Target::Memory).unwrap()))
});
