//! Integration tests of the subagent crate, over the real JSONL backend (raw and zstd, in temp
//! dirs), with and without the projection cache. Reads are counted by an instrumented persistence
//! wrapper (`subagent_testkit::Counting`, which the e2e listing matrix shares) so the listing's
//! cost model is asserted, not assumed.

mod cancellation;
mod concurrency;
mod create;
mod descriptor;
mod deviations;
mod golden;
mod identity;
mod ladder;
mod list_agents;
mod list_children;
mod list_descendants;
mod properties;
mod resume;
mod scope;
mod support;
mod timing;
