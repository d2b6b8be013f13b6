//! Durable session logs: the [`SessionPersistence`] trait, one shared [`Coordinator`], and the
//! in-memory and on-disk JSONL backends.
//!
//! This is the only crate of the workspace (besides the projection cache) that touches files.

mod backend;
mod coordinator;
mod counting;
mod error;
pub mod format;
pub mod fsio;
mod jsonl;
pub mod keyed;
mod live;
mod memory;
mod persistence;
mod validate;

pub use crate::{
    backend::{
        Backend, CollectSink, HeaderPage, Listing, LogFault, PageKey, PageRequest, Revision, ScanOutcome, ScanSink,
        StoredHeader, SurveyEntry, TornTail,
    },
    coordinator::{Coordinator, CoordinatorConfig},
    counting::CountingBackend,
    error::{CorruptKind, Location, PersistenceError, Result},
    format::Compression,
    jsonl::{
        HeaderCacheStats, JsonlConfig, JsonlStore, LOCK_WAIT, StoreEncoding, detect_encoding, encode_segment,
        project_key,
    },
    memory::MemoryStore,
    persistence::{
        Inspection, SessionPersistence, StreamSink, StreamSummary, Streamed, inspect_each_into, inspect_into,
        stream_each,
    },
    validate::{KnownTypes, ReadThreads},
};
