//! The subagent catalog's test harness, shared by the `subagent` crate's integration tests (over
//! JSONL) and the e2e package's listing matrix (over every backend).
//!
//! - [`Harness`]: one test's composition over a storage [`Setup`] of the caller's: a backend
//!   behind a [`Coordinator`](session_persistence::Coordinator) attached to a live
//!   [`SessionStore`](session_core::SessionStore), the projection registry, the optional
//!   projection cache, a [`SubagentRuntime`](subagent::SubagentRuntime) over them, and helpers that
//!   write live, settled and authored children; [`run_each`] runs a test once per setup, each on
//!   a fresh runtime and temp dir. [`Jsonl`] is the JSONL setup; the database setups live with
//!   the tests that may depend on their backends.
//! - [`Counting`]: the `SessionPersistence` wrapper every harness reads through: it counts reads
//!   per id and listings, holds reads at a [`Gate`], and injects [`ReadFault`]s and [`ListFault`]s.
//! - [`fixtures`]: event, header and descriptor builders, and the assertions on coded errors;
//!   [`rows`]: the listing rows the cases expect, as JSON.
//!
//! A test-only crate: only `[dev-dependencies]` name it, and it depends on no storage backend
//! crate (the tidy test `test_only_crates_are_dev_dependencies_only` checks the first).

mod counting;
pub mod fixtures;
mod harness;
pub mod rows;

pub use counting::{Counting, Gate, ListFault, ReadFault};
pub use fixtures::*;
pub use harness::{Harness, JSONL, Jsonl, Opened, Setup, run_each, runtime};
