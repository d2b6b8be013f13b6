//! The subagent listing matrix over every backend: the catalog's cases that must answer the
//! same on raw and zstd JSONL (each with and without the projection cache), on SQLite and on
//! PostgreSQL (a scratch schema of `SESSION_PG_URL`'s server), each with and without the cache.
//! They reach each backend's own queries (`list_children`, `list_page` and `stored_header`
//! answered by SQL on the databases) through the real coordinator; the `subagent` crate's own
//! tests cover the rest of its logic over JSONL.
//!
//! One module per area of the catalog (as in `crates/subagent/tests/it`), and `support`: the
//! setups over every backend for `subagent-testkit`'s harness (a backend behind a coordinator, a
//! live session store, the projection registry, the optional cache and the read-counting
//! persistence wrapper, shared with the `subagent` crate's tests).

mod cancellation;
mod concurrency;
mod create;
mod deviations;
mod list_agents;
mod list_children;
mod list_descendants;
mod resume;
mod support;
