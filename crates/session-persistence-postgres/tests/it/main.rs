//! Integration tests of the PostgreSQL store, each in a schema of its own that is dropped after
//! it (so they run in parallel on one server): the copied persistence and coordinator contracts,
//! lossless rows, racing writers, schema versions, the family and page queries, faults (a server
//! restarted under a writer among them), the checkpoint store, every call made from async code
//! on either runtime flavor, and the change signal (notifications, the watch, positions).
//!
//! The server comes from `SESSION_PG_URL` (for example
//! `postgres://postgres@127.0.0.1:5432/test`). Without it each test prints that it was skipped and
//! passes, except under CI (`CI` set), where a missing URL fails the test: CI must run them.

mod checkpoint;
mod contract;
mod faults;
mod lease;
mod queries;
mod read_ahead;
mod restart;
mod runtimes;
mod settings;
mod tls;
mod watch;
mod writes;

pub(crate) use session_persistence_postgres::testing::{ScratchSchema as TestSchema, server_url};
