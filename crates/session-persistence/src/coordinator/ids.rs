//! The id protocol: a session's durable state (`IdState`) from its creation to each appended
//! batch, and the writer fence: how a batch a backend refused as stale is told apart from one
//! whose reply was lost, and when a log has moved on without this writer.

use std::sync::Arc;

use session_core::{SessionEvent, SessionHeader, SessionId};
use tokio_util::sync::CancellationToken;

use super::state::{IdState, Inner, blocking, check_cancel, to_the_end};
use crate::{
    backend::CollectSink,
    error::{PersistenceError, Result},
};

impl Inner {
    /// Registers a new session that is neither tracked nor stored. Nothing is written.
    pub(super) async fn create(&self, header: SessionHeader, cancel: &CancellationToken) -> Result<()> {
        check_cancel(cancel)?;
        header.validate(&header.id).map_err(PersistenceError::invalid_header)?;
        let id = header.id.clone();
        let _guard = self.lock_id(&id).await;
        if self.states.lock().contains_key(&id) {
            return Err(PersistenceError::collision(&id, format!("session \"{id}\" already exists in this backend")));
        }
        let probe = id.clone();
        if blocking(&self.backend, move |backend| backend.revision(&probe)).await?.is_some() {
            return Err(PersistenceError::collision(
                &id,
                format!("session \"{id}\" already has a persisted log on disk; load/resume it instead of creating"),
            ));
        }
        check_cancel(cancel)?;
        self.states.lock().insert(id, IdState::unowned(Arc::new(header), 0, false));
        Ok(())
    }

    /// Appends a caller's batch to a log no live session writes; `written_live` says, under the
    /// id lock, whether one does (the batch is then refused). A stored log this coordinator does
    /// not track yet is adopted first (its repair committed).
    ///
    /// The write runs to its end even if the caller stops waiting ([`to_the_end`]).
    pub(super) async fn append(
        self: &Arc<Self>,
        id: &SessionId,
        events: Vec<Arc<SessionEvent>>,
        cancel: &CancellationToken,
        written_live: impl FnOnce(&SessionId) -> bool + Send + 'static,
    ) -> Result<()> {
        check_cancel(cancel)?;
        if events.is_empty() {
            return Ok(());
        }
        let (inner, id, cancel) = (Arc::clone(self), id.clone(), cancel.clone());
        to_the_end(async move { inner.append_here(&id, events, &cancel, written_live).await }).await
    }

    /// [`append`](Self::append), on the task that runs it.
    async fn append_here(
        &self,
        id: &SessionId,
        events: Vec<Arc<SessionEvent>>,
        cancel: &CancellationToken,
        written_live: impl FnOnce(&SessionId) -> bool,
    ) -> Result<()> {
        let _guard = self.lock_id(id).await;
        if written_live(id) {
            return Err(PersistenceError::collision(
                id,
                format!("session \"{id}\" is written by a live session; append through the session instead"),
            ));
        }
        let tracked = self.states.lock().get(id).cloned();
        let mut state = match tracked {
            Some(state) => state,
            None => self.adopt_cold(id, cancel).await?,
        };
        check_cancel(cancel)?;
        let result = self.append_tracked(&mut state, events).await;
        self.states.lock().insert(id.clone(), state);
        result
    }

    /// The storable check of a repair's closers (built by `session-core`, so a refusal here is a
    /// bug, but a repair is a write like any other: nothing a reader would refuse is stored).
    pub(super) fn check_repair(&self, id: &SessionId, closers: &[SessionEvent]) -> Result<()> {
        for (index, closer) in closers.iter().enumerate() {
            session_core::check_storable(id, closer, &self.config.known_types)
                .map_err(|refused| PersistenceError::unstorable(id, index, refused))?;
        }
        Ok(())
    }

    /// Adopts a stored log that this coordinator does not track yet: repairs it durably (cut the
    /// torn tail, append closers) and returns the state positioned after it.
    async fn adopt_cold(&self, id: &SessionId, cancel: &CancellationToken) -> Result<IdState> {
        let Some(log) = self.read_cold(id, cancel).await? else {
            return Err(PersistenceError::NotFound { id: id.clone() });
        };
        let header = log.outcome.header.clone();
        let cursor = log.events.len() as u64 + log.closers.len() as u64;
        if log.outcome.torn.is_some() || !log.closers.is_empty() {
            check_cancel(cancel)?;
            let (torn, closers) = (log.outcome.torn, log.closers);
            self.check_repair(id, &closers)?;
            let repair_header = header.clone();
            blocking(&self.backend, move |backend| backend.commit_repair(&repair_header, torn.as_ref(), &closers))
                .await?;
            self.cache.lock().remove(id);
        }
        Ok(IdState::unowned(header, cursor, true))
    }

    /// Appends a validated, contiguous batch for a tracked id. The caller holds the id lock.
    /// Every event is checked (its seq, then the storable check against the configured known
    /// types: what a reader would refuse, or could not hold) before the backend sees any of
    /// them, so a refused batch stores nothing.
    pub(super) async fn append_tracked(&self, state: &mut IdState, events: Vec<Arc<SessionEvent>>) -> Result<()> {
        if events.is_empty() {
            return Ok(());
        }
        let id = state.header.id.clone();
        for (idx, event) in events.iter().enumerate() {
            let expected = state.cursor + idx as u64;
            if event.seq != expected {
                return Err(PersistenceError::invalid_input(format!(
                    "append seq mismatch for \"{id}\": expected {expected} at index {idx}, got {}",
                    event.seq
                )));
            }
            // The storable check: a backend gets only what a reader accepts (and can hold).
            session_core::check_storable(&id, event, &self.config.known_types)
                .map_err(|refused| PersistenceError::unstorable(&id, idx, refused))?;
        }
        let mut events = events;
        loop {
            let header = state.header.clone();
            let materialized = state.materialized;
            let written = match Arc::clone(&self.backend).append_batch_async(&header, &events, materialized) {
                Some(write) => write.await,
                None => {
                    let sent = events.clone();
                    blocking(&self.backend, move |backend| backend.append_batch(&header, &sent, materialized)).await
                }
            };
            match written {
                Ok(()) => break,
                // A backend that fences writers (a database many processes share) refused the
                // batch: earlier attempts of this very write may have committed with their
                // replies lost, or another writer moved the log on. A first write (the log not
                // materialized yet) that meets a log another writer created meanwhile is the same
                // fence: what is stored is not this copy's.
                Err(err @ PersistenceError::Fenced { .. }) => {
                    let stored = self.stored_from(&id, state.cursor).await?;
                    let ours = stored.iter().zip(&events).take_while(|(stored, sent)| *stored == &***sent).count();
                    if ours > 0 {
                        tracing::info!(session = %id, first_seq = state.cursor, n_events = ours, "appends whose replies were lost had committed; they are not written again");
                        state.cursor += ours as u64;
                        state.materialized = true;
                        self.cache.lock().remove(&id);
                    }
                    if ours == events.len() {
                        return Ok(());
                    }
                    if ours < stored.len() {
                        // Past what this writer wrote, the log holds another writer's events.
                        state.stale = true;
                        return Err(err);
                    }
                    if ours == 0 {
                        return Err(err);
                    }
                    // Only part of the batch was stored: write the rest.
                    events.drain(..ours);
                }
                Err(err) => return Err(err),
            }
        }
        let n_events = events.len() as u64;
        state.cursor += n_events;
        state.materialized = true;
        self.cache.lock().remove(&id);
        Ok(())
    }

    /// The stored events of `id` from `cursor` on.
    async fn stored_from(&self, id: &SessionId, cursor: u64) -> Result<Vec<SessionEvent>> {
        let probe = id.clone();
        blocking(&self.backend, move |backend| {
            let mut sink = CollectSink::default();
            backend.scan_from(&probe, cursor, &CancellationToken::new(), &mut sink)?;
            Ok(sink.events.into_iter().filter(|event| event.seq >= cursor).collect())
        })
        .await
    }

    /// How many events of the live session that owns `id` are durable.
    pub(super) fn durable_len(&self, id: &SessionId) -> Option<u64> {
        let states = self.states.lock();
        let state = states.get(id)?;
        state.owner()?;
        Some(state.cursor)
    }

    /// Whether the live session `session` writes a log that moved on without it (see
    /// [`IdState::stale`]).
    pub(super) fn is_stale(&self, session: &Arc<session_core::Session>) -> bool {
        self.states.lock().get(session.id()).is_some_and(|state| state.stale && state.is_owned_by(session))
    }
}
