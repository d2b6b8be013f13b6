//! The `SessionPersistence` trait: what the upper layers need from durable storage.

use std::{any::Any, fmt, path::PathBuf, sync::Arc};

use session_core::{SessionEvent, SessionHeader, SessionId};
use tokio_util::sync::CancellationToken;

use crate::{
    backend::{Revision, ScanSink, StoredHeader},
    error::Result,
};

/// An immutable view of one session's log.
#[derive(Debug, Clone)]
pub struct Inspection {
    pub header: Arc<SessionHeader>,
    pub events: Arc<[Arc<SessionEvent>]>,
    /// The stored revision the view was read at; `None` for a live snapshot.
    pub revision: Option<Revision>,
    /// Whether the view is a snapshot of a live session (which may end inside an open turn).
    pub live: bool,
    /// How many events at the end are crash closers synthesized in memory (not stored).
    pub n_closers: u64,
}

/// What a streaming inspection delivered besides its events.
#[derive(Debug, Clone)]
pub struct StreamSummary {
    pub header: Arc<SessionHeader>,
    /// Events delivered, closers included.
    pub n_events: u64,
    /// Synthesized closers among them (0 for a live snapshot).
    pub n_closers: u64,
    pub live: bool,
    pub revision: Option<Revision>,
}

/// A sink that can travel to the blocking pool and come back.
pub trait StreamSink: ScanSink + Send + Any {}

impl<T: ScanSink + Send + Any> StreamSink for T {}

/// Durable storage of session logs, shared by every upper layer.
///
/// Every operation takes a cancellation token: a call whose token fires returns
/// [`PersistenceError::Cancelled`](crate::PersistenceError::Cancelled) and leaves nothing half-written.
#[async_trait::async_trait]
pub trait SessionPersistence: Send + Sync + fmt::Debug {
    /// Registers intent to store a new session. Nothing is written until the first non-empty append.
    async fn create(&self, header: SessionHeader, cancel: &CancellationToken) -> Result<()>;

    /// Durably appends events that continue the stored log. Resolves after they are durable.
    async fn append(&self, id: &SessionId, events: Vec<Arc<SessionEvent>>, cancel: &CancellationToken) -> Result<()>;

    /// Headers of every stored session (not of sessions that were created but never written).
    async fn list(&self, cancel: &CancellationToken) -> Result<Vec<Arc<SessionHeader>>>;

    /// Headers with their revisions, without reading the logs.
    async fn list_snapshots(&self, cancel: &CancellationToken) -> Result<Vec<StoredHeader>>;

    /// The balanced view of a session, without changing storage: a cold log gets its crash
    /// closers in memory; a live session gets its current snapshot.
    async fn inspect(&self, id: &SessionId, cancel: &CancellationToken) -> Result<Inspection>;

    /// Like [`inspect`](Self::inspect), but streams the events into `sink` as they are decoded,
    /// so memory does not grow with the log. Returns the sink with a summary.
    async fn inspect_stream(
        &self,
        id: &SessionId,
        cancel: &CancellationToken,
        sink: Box<dyn StreamSink>,
    ) -> Result<(Box<dyn StreamSink>, StreamSummary)>;

    /// The stored events with `seq >= from_seq`: no closers, no repair, no caching.
    async fn read_from(&self, id: &SessionId, from_seq: u64, cancel: &CancellationToken) -> Result<Inspection>;

    /// The balanced view of a session, committing any repair durably (cut the torn tail, append
    /// the closers). A live session with an open turn cannot be loaded.
    async fn load(&self, id: &SessionId, cancel: &CancellationToken) -> Result<Inspection>;

    /// Waits until everything a live session appended so far is durable.
    async fn flush(&self, id: &SessionId, cancel: &CancellationToken) -> Result<()>;

    /// Lets go of a live session that its store no longer holds: writes what it buffered, then
    /// forgets the binding, so the id is served cold from then on and may be resumed at once.
    /// Idempotent; the default only flushes.
    async fn release(&self, id: &SessionId, cancel: &CancellationToken) -> Result<()> {
        self.flush(id, cancel).await
    }

    /// Where `header`'s log lives, if the backend has files.
    fn locate(&self, header: &SessionHeader) -> Option<PathBuf>;
}

/// Streams `id` into a concrete sink and hands it back typed.
pub async fn inspect_into<S: StreamSink>(
    persistence: &dyn SessionPersistence,
    id: &SessionId,
    cancel: &CancellationToken,
    sink: S,
) -> Result<(S, StreamSummary)> {
    let (sink, summary) = persistence.inspect_stream(id, cancel, Box::new(sink)).await?;
    let sink: Box<dyn Any> = sink;
    let sink = sink.downcast::<S>().expect("inspect_stream returns the sink it was given");
    Ok((*sink, summary))
}
