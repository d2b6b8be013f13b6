//! Shared helpers for the cross-crate end-to-end tests and benchmarks.

pub mod crash;
pub mod fleet;
pub mod gateway;
pub mod probe;
pub mod workload;
