//! The schema: its tables and indexes, its version, and the one explicit step that creates or
//! migrates it (`setup`). Opening a store checks the version and refuses an unknown newer one.

use std::path::PathBuf;

use session_persistence::{PersistenceError, Result};

use tokio_postgres::GenericClient;

use crate::{
    config::quote_ident,
    db::{Client, Db},
};

/// The schema version this build writes and reads.
pub const SCHEMA_VERSION: i32 = 2;

/// The tables and indexes of the current version, `{s}` standing for the schema name.
///
/// - `store_meta`: one row, the schema version and the store's random id (part of revisions).
/// - `sessions`: one row per stored session: the header line exactly as a JSONL log's first line
///   (`header`), the columns queries filter on (`created_at`, `cwd`, `parent_session`,
///   `origin`, `owner`), the lifetime's `incarnation`, the `revision` every append and repair
///   bumps, the `next_seq` an append must start at (the writer fence), and the bytes stored.
/// - `events`: one row per run of a batch's consecutive events (`n_events` of them; version 1
///   wrote one event per row), keyed by `(session_id, seq)`, the first event's seq: their
///   canonical JSON records (`record`, exactly JSONL lines, joined by newlines) or, from 4 KiB
///   when shorter, one zstd frame of them (`record_zstd`); the first event's `type` and `time` as
///   columns.
/// - `checkpoints`: the projection cache's records, one row per session.
const TABLES_V1: &str = "
CREATE TABLE {s}.store_meta (
  singleton      boolean PRIMARY KEY DEFAULT true CHECK (singleton),
  schema_version integer NOT NULL,
  store_id       text NOT NULL
);
CREATE TABLE {s}.sessions (
  id             text PRIMARY KEY,
  header         text NOT NULL,
  created_at     bigint NOT NULL,
  cwd            text,
  parent_session text,
  origin         text,
  owner          text,
  incarnation    text NOT NULL,
  revision       bigint NOT NULL,
  next_seq       bigint NOT NULL,
  n_bytes        bigint NOT NULL
);
CREATE INDEX sessions_by_parent ON {s}.sessions (parent_session, origin, created_at, id)
  WHERE parent_session IS NOT NULL;
CREATE INDEX sessions_by_created ON {s}.sessions (created_at DESC, id);
CREATE INDEX sessions_by_owner_created ON {s}.sessions (owner, created_at DESC, id);
CREATE TABLE {s}.events (
  session_id  text NOT NULL REFERENCES {s}.sessions (id),
  seq         bigint NOT NULL,
  type        text NOT NULL,
  time        bigint NOT NULL,
  record      text,
  record_zstd bytea,
  n_events    integer NOT NULL DEFAULT 1 CHECK (n_events >= 1),
  PRIMARY KEY (session_id, seq),
  CHECK ((record IS NULL) <> (record_zstd IS NULL))
);
CREATE TABLE {s}.checkpoints (
  session_id text PRIMARY KEY,
  format     text NOT NULL,
  version    bigint NOT NULL,
  crc32      bigint NOT NULL,
  record     text NOT NULL
);
";

/// From version 1 to 2: rows may hold runs of events. Every version-1 row is a run of one, so the
/// column's default is the whole migration: no row is rewritten, and the check is added
/// `NOT VALID` (enforced for new rows, without a scan of the table under its lock).
const MIGRATE_V1_V2: &str = "
ALTER TABLE {s}.events ADD COLUMN n_events integer NOT NULL DEFAULT 1;
ALTER TABLE {s}.events ADD CONSTRAINT events_n_events_check CHECK (n_events >= 1) NOT VALID;
UPDATE {s}.store_meta SET schema_version = 2;
";

/// `sql` with `{s}` replaced by the schema name, quoted (so a reserved word such as `user` or
/// `select` names the schema).
pub(crate) fn qualify(sql: &str, schema: &str) -> String {
    sql.replace("{s}", &quote_ident(schema))
}

/// What `setup` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SetupOutcome {
    /// The tables were created at [`SCHEMA_VERSION`].
    Created,
    /// The schema was at an older version and was migrated.
    Migrated {
        /// The version the schema was at before.
        from: i32,
    },
    /// The schema was already at [`SCHEMA_VERSION`].
    Current,
}

fn refused(db: &Db, message: String) -> PersistenceError {
    PersistenceError::Refused { path: PathBuf::from(&db.shown), message }
}

fn newer(db: &Db, version: i32) -> PersistenceError {
    refused(
        db,
        format!(
            "session store {} has schema version {version}, newer than this build's {SCHEMA_VERSION}: it was set up \
             by a newer release; upgrade this program (or point it at another schema)",
            db.shown
        ),
    )
}

/// The schema version and store id, or `None` if the schema holds no store.
async fn read_meta(db: &Db, client: &impl GenericClient, schema: &str) -> Result<Option<(i32, String)>> {
    let exists = db
        .timed(
            "checking the schema",
            client.query_one("SELECT to_regclass($1) IS NOT NULL", &[&qualify("{s}.store_meta", schema)]),
        )
        .await?;
    if !db.column::<bool>(&exists, 0)? {
        return Ok(None);
    }
    let sql = qualify("SELECT schema_version, store_id FROM {s}.store_meta", schema);
    let row = db.timed("reading the schema version", client.query_opt(&sql, &[])).await?;
    match row {
        Some(row) => Ok(Some((db.column(&row, 0)?, db.column(&row, 1)?))),
        None => Err(refused(db, format!("session store {} has an empty store_meta table", db.shown))),
    }
}

/// Creates the schema and its tables if they are missing, or migrates an older version, in one
/// transaction under an advisory lock (so two gateways starting at once do it once). Refuses a
/// newer version. Returns the store id.
pub(crate) async fn setup(db: &Db, client: &mut Client, schema: &str) -> Result<(String, SetupOutcome)> {
    let transaction = db.timed("starting setup", client.transaction()).await?;
    let lock_key = format!("session-persistence-postgres:{schema}");
    db.timed("locking the schema", transaction.execute("SELECT pg_advisory_xact_lock(hashtext($1))", &[&lock_key]))
        .await?;
    db.timed("creating the schema", transaction.batch_execute(&qualify("CREATE SCHEMA IF NOT EXISTS {s}", schema)))
        .await?;
    let (store_id, outcome) = match read_meta(db, &*transaction, schema).await? {
        None => {
            let store_id = uuid::Uuid::new_v4().to_string();
            db.timed("creating the tables", transaction.batch_execute(&qualify(TABLES_V1, schema))).await?;
            let insert = qualify("INSERT INTO {s}.store_meta (schema_version, store_id) VALUES ($1, $2)", schema);
            db.timed("stamping the schema version", transaction.execute(&insert, &[&SCHEMA_VERSION, &store_id]))
                .await?;
            (store_id, SetupOutcome::Created)
        }
        Some((version, _)) if version > SCHEMA_VERSION => return Err(newer(db, version)),
        Some((version, store_id)) if version == SCHEMA_VERSION => (store_id, SetupOutcome::Current),
        Some((1, store_id)) => {
            db.timed("migrating the schema to version 2", transaction.batch_execute(&qualify(MIGRATE_V1_V2, schema)))
                .await?;
            (store_id, SetupOutcome::Migrated { from: 1 })
        }
        // Version 1 is the first: an older version is not one this crate ever wrote.
        Some((version, _)) => {
            return Err(refused(
                db,
                format!(
                    "session store {} has schema version {version}, which no release wrote; this build migrates \
                     from version 1 on",
                    db.shown
                ),
            ));
        }
    };
    db.timed("committing setup", transaction.commit()).await?;
    Ok((store_id, outcome))
}

/// Checks that the schema holds a store at [`SCHEMA_VERSION`] and returns its id: a missing
/// store is refused with the setup step to run, a newer one with the upgrade to make.
pub(crate) async fn check(db: &Db, client: &Client, schema: &str) -> Result<String> {
    match read_meta(db, crate::db::plain(client), schema).await? {
        None => Err(refused(
            db,
            format!(
                "session store {} is not set up (no store_meta table in schema {schema}): run `apiproxy setup --store \
                 <url>` or start `apiproxy serve` on it once",
                db.shown
            ),
        )),
        Some((version, _)) if version > SCHEMA_VERSION => Err(newer(db, version)),
        Some((version, _)) if version < SCHEMA_VERSION => Err(refused(
            db,
            format!("session store {} has schema version {version}; run the setup step to migrate it", db.shown),
        )),
        Some((_, store_id)) => Ok(store_id),
    }
}
