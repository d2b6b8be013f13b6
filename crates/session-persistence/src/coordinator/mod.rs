//! `Coordinator`: the one implementation of [`SessionPersistence`] over any [`Backend`].
//!
//! It owns everything that is not bytes. This module is the public type and its trait impl, each
//! method a delegation to the module of its concern:
//!
//! - `state`: what the concerns share (the backend, the per-id locks and durable state
//!   `IdState`, the inspection cache, the fault log) and a whole validated cold read;
//! - `ids`: creating a session, appending to it, and the writer fence;
//! - `live`: the live write path (binding an attached store's sessions, write-behind batches, the
//!   flush barrier, release and retirement);
//! - `reads`: cold reads, streamed reads and their lanes, `read_from` and `load`;
//! - `listing`: listings, reporting each log that cannot be listed once (`faults`);
//! - `cache`: the inspection cache; `config`: [`CoordinatorConfig`].
//!
//! Modules import downwards only: `state` imports none of the concerns, no concern imports this
//! module, and `reads` (which serves a live session from its snapshot) is the only one that
//! imports `live`.

mod cache;
mod config;
mod faults;
mod ids;
mod listing;
mod live;
mod reads;
mod state;

use std::{fmt, path::PathBuf, sync::Arc};

use session_core::{SessionEvent, SessionHeader, SessionId, SessionStore};
use tokio_util::sync::CancellationToken;

pub use self::config::CoordinatorConfig;
use self::{live::LiveSessions, state::Inner};
use crate::{
    backend::{Backend, HeaderPage, Listing, PageRequest, StoredHeader},
    error::Result,
    persistence::{Inspection, ReadLimit, SessionPersistence, StreamSink, StreamSummary, Suffix},
    watch::{SessionPosition, SharedChangeSink, Watch, WatchOptions},
};

/// Persists session logs through a [`Backend`]. Cheap to clone; clones share everything.
#[derive(Clone)]
pub struct Coordinator {
    inner: Arc<Inner>,
    live: Arc<LiveSessions>,
}

impl fmt::Debug for Coordinator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Coordinator").field("backend", &self.inner.backend.name()).finish_non_exhaustive()
    }
}

impl Coordinator {
    /// A coordinator over `backend`, with nothing cached and no session tracked yet: the first
    /// call for an id reads its state from the backend.
    ///
    /// Fails with `InvalidInput` when `config` is out of range (an inspection cache of zero
    /// entries, or a write-behind delay outside 1 ms to 2^31 − 1 ms); nothing is read or written.
    pub fn new(backend: Arc<dyn Backend>, config: CoordinatorConfig) -> Result<Coordinator> {
        config.validate()?;
        let inner = Arc::new(Inner::new(backend, config));
        let live = Arc::new(LiveSessions::new(Arc::clone(&inner)));
        Ok(Coordinator { inner, live })
    }

    /// The backend this coordinator drives. Calling it directly bypasses the per-id
    /// serialization, validation and repair the coordinator adds; tests and operator tools use it
    /// to look at stored state.
    pub fn backend(&self) -> &Arc<dyn Backend> {
        &self.inner.backend
    }

    /// Makes every session of `store` durable: sessions already live are adopted now, later ones
    /// when they are published. Events are written behind, in batches, and `store.flush(id)` or
    /// [`SessionPersistence::flush`] waits for them.
    ///
    /// Must be called inside a Tokio runtime: the write-behind timers run on it.
    ///
    /// The store's sessions accept the event types this coordinator's reads accept
    /// ([`CoordinatorConfig::known_types`]): `attach` gives them to the store, for the sessions it
    /// creates from then on, so a host registers its own types once. It fails with
    /// `InvalidInput`, attaching nothing, when the store already accepts a type these reads would
    /// refuse, or when this coordinator already has the store (each event would be written twice).
    pub fn attach(&self, store: &Arc<SessionStore>) -> Result<()> {
        self.live.attach(store)
    }

    /// Drains every live session's buffered events. Errors are collected; the first is returned.
    pub async fn close(&self) -> Result<()> {
        self.live.close().await
    }

    /// How many ids currently have a storage lock entry (held or awaited).
    pub fn n_locked_ids(&self) -> usize {
        self.inner.n_locked_ids()
    }

    /// The number of cached inspections and the payload bytes they hold.
    pub fn inspect_cache_usage(&self) -> (usize, u64) {
        self.inner.cache.lock().usage()
    }
}

#[async_trait::async_trait]
impl SessionPersistence for Coordinator {
    async fn create(&self, header: SessionHeader, cancel: &CancellationToken) -> Result<()> {
        self.inner.create(header, cancel).await
    }

    async fn append(&self, id: &SessionId, events: Vec<Arc<SessionEvent>>, cancel: &CancellationToken) -> Result<()> {
        let live = Arc::clone(&self.live);
        self.inner.append(id, events, cancel, move |id| live.session(id).is_some()).await
    }

    async fn list_snapshots(&self, cancel: &CancellationToken) -> Result<Listing> {
        self.inner.list_snapshots(cancel).await
    }

    async fn list_children(&self, parent: &SessionId, cancel: &CancellationToken) -> Result<Listing> {
        self.inner.list_children(parent, cancel).await
    }

    async fn list_page(&self, request: &PageRequest, cancel: &CancellationToken) -> Result<HeaderPage> {
        self.inner.list_page(request, cancel).await
    }

    async fn stored_header(&self, id: &SessionId, cancel: &CancellationToken) -> Result<Option<StoredHeader>> {
        self.inner.stored_header(id, cancel).await
    }

    fn durable_len(&self, id: &SessionId) -> Option<u64> {
        self.inner.durable_len(id)
    }

    fn fence(&self, id: &SessionId) -> Option<String> {
        self.live.fence(id)
    }

    async fn fence_if_overtaken(&self, id: &SessionId, cancel: &CancellationToken) -> Result<bool> {
        if cancel.is_cancelled() {
            return Err(crate::PersistenceError::Cancelled);
        }
        self.live.fence_if_overtaken(id).await
    }

    async fn inspect(&self, id: &SessionId, cancel: &CancellationToken) -> Result<Inspection> {
        reads::inspect(&self.inner, &self.live, id, cancel).await
    }

    async fn inspect_stream(
        &self,
        id: &SessionId,
        cancel: &CancellationToken,
        sink: Box<dyn StreamSink>,
    ) -> Result<StreamSummary> {
        reads::inspect_stream(&self.inner, &self.live, id, cancel, sink).await
    }

    async fn inspect_streams(
        &self,
        reads: Vec<(SessionId, Box<dyn StreamSink>)>,
        lanes: usize,
        cancel: &CancellationToken,
    ) -> Vec<Result<StreamSummary>> {
        reads::inspect_streams(&self.inner, &self.live, reads, lanes, cancel).await
    }

    async fn read_from(&self, id: &SessionId, from_seq: u64, cancel: &CancellationToken) -> Result<Inspection> {
        reads::read_from(&self.inner, id, from_seq, cancel).await
    }

    async fn read_from_many(
        &self,
        reads: &[(SessionId, u64)],
        limit: ReadLimit,
        cancel: &CancellationToken,
    ) -> Vec<Result<Suffix>> {
        reads::read_from_many(&self.inner, reads, limit, cancel).await
    }

    async fn load(&self, id: &SessionId, cancel: &CancellationToken) -> Result<Inspection> {
        reads::load(&self.inner, &self.live, id, cancel).await
    }

    async fn flush(&self, id: &SessionId, cancel: &CancellationToken) -> Result<()> {
        state::check_cancel(cancel)?;
        self.live.flush(id).await
    }

    async fn release(&self, id: &SessionId, cancel: &CancellationToken) -> Result<()> {
        state::check_cancel(cancel)?;
        self.live.release(id).await
    }

    fn locate(&self, header: &SessionHeader) -> Option<PathBuf> {
        self.inner.backend.locate(header)
    }

    fn watch(&self, options: &WatchOptions, sink: SharedChangeSink) -> Result<Option<Watch>> {
        self.inner.backend.watch(options, sink)
    }

    async fn positions(&self, ids: &[SessionId], cancel: &CancellationToken) -> Result<Vec<SessionPosition>> {
        self.inner.positions(ids, cancel).await
    }

    async fn created_since(&self, since_ms: u64, cancel: &CancellationToken) -> Result<Listing> {
        self.inner.created_since(since_ms, cancel).await
    }
}
