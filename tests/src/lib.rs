//! Shared helpers for the cross-crate end-to-end tests and benchmarks.

pub mod workload;
