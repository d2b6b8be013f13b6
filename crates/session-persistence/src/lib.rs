//! Durable session logs: the [`SessionPersistence`] trait, one shared [`Coordinator`], and the
//! in-memory and on-disk JSONL backends.
//!
//! This is the only crate of the workspace (besides the projection cache) that touches files.

mod backend;
mod coordinator;
mod error;
mod live;
mod memory;
mod persistence;
mod validate;

pub use crate::{
    backend::{Backend, CollectSink, Revision, ScanOutcome, ScanSink, StoredHeader, TornTail},
    coordinator::{Coordinator, CoordinatorConfig},
    error::{CorruptKind, Location, PersistenceError, Result},
    memory::MemoryStore,
    persistence::{Inspection, SessionPersistence, StreamSink, StreamSummary, inspect_into},
    validate::KnownTypes,
};
