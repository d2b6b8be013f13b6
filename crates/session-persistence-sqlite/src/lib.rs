//! A SQLite backend for session logs, file-compatible with the reference's databases
//! (reference 05), and a SQLite checkpoint store for the projection cache.
//!
//! - [`SqliteStore`]: a [`session_persistence::Backend`] over one database file (or `:memory:`):
//!   the reference's identity (`application_id` 0x44534850, `user_version` 18), schema text,
//!   scalar and packed rows, zstd `data` and varint `source_event_seqs`; atomic appends with the
//!   stale-writer check, atomic repair and seek reads. The shared `Coordinator` drives it.
//! - [`SqliteCheckpointStore`]: a [`session_projection_cache::CheckpointStore`] in a second
//!   database beside the session database (the reference refuses a session database that holds
//!   any object of another schema).
//!
//! Modules: `config` (what to open and how), `rules` (the path and permission rules), `schema`
//! (identity, schema text, the open sequence), `sessions` (the `sessions` row), `codec` (the
//! `events` row encodings and packing), `scan` (committed, torn and corrupt rows, seek reads),
//! `store` (the backend), `checkpoint` (the checkpoint store).

mod checkpoint;
mod codec;
mod config;
mod error;
mod rules;
mod scan;
mod schema;
mod sessions;
mod store;
#[cfg(test)]
mod tests;

pub use crate::{
    checkpoint::{CHECKPOINT_APPLICATION_ID, CHECKPOINT_USER_VERSION, SqliteCheckpointStore},
    codec::{COMPRESS_MIN_BYTES, MAX_PACKED_DATA_BYTES, MAX_PACKED_MEMBERS, ZSTD_LEVEL},
    config::{Access, JournalMode, SqliteConfig, Target},
    schema::{APPLICATION_ID, SCHEMA, USER_VERSION},
    store::SqliteStore,
};
