//! Durable session logs: the [`SessionPersistence`] trait, one shared coordinator, and the
//! in-memory and on-disk JSONL backends.
//!
//! This is the only crate of the workspace (besides the projection cache) that touches files.

mod backend;
mod error;

pub use crate::{
    backend::{Backend, CollectSink, Revision, ScanOutcome, ScanSink, StoredHeader, TornTail},
    error::{CorruptKind, Location, PersistenceError, Result},
};
