//! Internal to this workspace's storage crates: what they share below the persistence API.
//!
//! This crate is not part of any documented API and makes no semver promise; hosts use
//! `session-persistence` and the backend crates instead. It holds two mechanisms that each have
//! exactly one home in the workspace:
//!
//! - [`keyed`]: the registry of per-session async locks ([`KeyedLocks`](keyed::KeyedLocks)) and
//!   the hop to Tokio's blocking pool ([`run_blocking`](keyed::run_blocking)), which turns a call
//!   the runtime drops at shutdown into [`BlockingCancelled`](keyed::BlockingCancelled) instead
//!   of a panic;
//! - [`fsio`]: bounded, non-blocking file primitives: only regular files are opened, reads stop
//!   at a size limit, directories are fsynced through a descriptor that can only be a directory.

pub mod fsio;
pub mod keyed;
