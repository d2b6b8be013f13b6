//! `LiveWriter`: write-behind batching for one live session (reference 01 §3.5).
//!
//! Events are buffered as the session appends them. The first buffered event arms a timer (a
//! fixed window, not a debounce); when it fires, everything buffered is written as one batch.
//! `drain` is the flush barrier: it writes until nothing is buffered. A failed write puts its
//! batch back in front, in order, and pauses the timer until the next event or flush.
//!
//! A write refused because the stored log moved on without this live copy (another process or
//! host wrote the session: the writer fence) never succeeds on a retry. The writer is then
//! *fenced*: it stops writing, and every later flush fails at once with the first fence's
//! [`PersistenceError::Fenced`], until the session is released (which unbinds it without writing)
//! and resumed from the store. The first write of a new session that finds a log another writer
//! created meanwhile is fenced the same way. A refusal whose batch turns out to be stored (an
//! earlier attempt committed and its reply was lost) is a success, and other failures are retried
//! as any failed write is.

use std::{fmt, sync::Arc};

use parking_lot::Mutex;
use session_core::{Session, SessionEvent};
use tokio::sync::Mutex as AsyncMutex;

use crate::{
    coordinator::Inner,
    error::{FencedWrite, PersistenceError, Result},
};

pub(crate) struct LiveWriter {
    session: Arc<Session>,
    pending: Mutex<Pending>,
    /// Held while writing, so batches of one session reach storage one at a time, in order.
    write: AsyncMutex<Progress>,
}

#[derive(Default)]
struct Pending {
    events: Vec<Arc<SessionEvent>>,
    timer_armed: bool,
    paused: bool,
    /// Why this live copy can no longer be written (the first fence), once it cannot.
    fenced: Option<Fence>,
}

/// The fence that stopped a live writer: the seq its write started at, and the stored next seq.
#[derive(Debug, Clone, Copy)]
struct Fence {
    write: FencedWrite,
    seq: u64,
    stored_next_seq: u64,
}

#[derive(Default)]
struct Progress {
    initialized: bool,
}

impl fmt::Debug for LiveWriter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LiveWriter").field("session", self.session.id()).finish_non_exhaustive()
    }
}

impl LiveWriter {
    pub(crate) fn new(session: Arc<Session>) -> LiveWriter {
        LiveWriter { session, pending: Mutex::new(Pending::default()), write: AsyncMutex::new(Progress::default()) }
    }

    pub(crate) fn session(&self) -> &Arc<Session> {
        &self.session
    }

    /// Buffers one event and arms the batch timer if it is not running.
    pub(crate) fn enqueue(
        self: &Arc<Self>,
        inner: &Arc<Inner>,
        runtime: &tokio::runtime::Handle,
        event: Arc<SessionEvent>,
    ) {
        let arm = {
            let mut pending = self.pending.lock();
            pending.events.push(event);
            if pending.fenced.is_some() {
                return;
            }
            let arm = pending.paused || !pending.timer_armed;
            pending.paused = false;
            pending.timer_armed = true;
            arm
        };
        if arm {
            // The timer holds no strong references: dropping the coordinator (and with it the
            // backend and its store lock) is never delayed by a pending window.
            let (writer, weak_inner) = (Arc::downgrade(self), Arc::downgrade(inner));
            let delay = inner.config.write_batch_max_delay;
            runtime.spawn(async move {
                tokio::time::sleep(delay).await;
                let (Some(writer), Some(inner)) = (writer.upgrade(), weak_inner.upgrade()) else {
                    return;
                };
                // A fenced writer said so once, when the fence stopped it.
                if let Err(err) = writer.drain(&inner).await
                    && writer.fenced().is_none()
                {
                    tracing::warn!(session = %writer.session.id(), error = %err, "background session write failed; will retry at the next event or flush");
                }
            });
        }
    }

    /// Why this live copy can no longer be written, once a write met the fence.
    pub(crate) fn fenced(&self) -> Option<String> {
        self.fence_error().map(|error| error.to_string())
    }

    /// Writes everything buffered, including events that arrive while it writes.
    pub(crate) async fn drain(&self, inner: &Arc<Inner>) -> Result<()> {
        let mut progress = self.write.lock().await;
        self.check_fence()?;
        if !progress.initialized {
            if let Err(err) = inner.init_live(&self.session).await {
                return Err(self.fence_on(inner, err));
            }
            progress.initialized = true;
        }
        loop {
            let batch = {
                let mut pending = self.pending.lock();
                pending.timer_armed = false;
                std::mem::take(&mut pending.events)
            };
            if batch.is_empty() {
                return Ok(());
            }
            if let Err(err) = inner.append_live(&self.session, batch.clone()).await {
                let mut pending = self.pending.lock();
                let newer = std::mem::replace(&mut pending.events, batch);
                pending.events.extend(newer);
                pending.paused = true;
                drop(pending);
                return Err(self.fence_on(inner, err));
            }
        }
    }

    /// The fence's error, if this writer is fenced.
    fn check_fence(&self) -> Result<()> {
        match self.pending.lock().fenced {
            Some(fence) => {
                Err(PersistenceError::fenced(self.session.id(), fence.write, fence.seq, fence.stored_next_seq))
            }
            None => Ok(()),
        }
    }

    /// The fence's error, if this writer is fenced.
    pub(crate) fn fence_error(&self) -> Option<PersistenceError> {
        self.check_fence().err()
    }

    /// Fences this writer if `err` says another writer moved its log on (which no retry heals);
    /// answers the error to report.
    fn fence_on(&self, inner: &Inner, err: PersistenceError) -> PersistenceError {
        let PersistenceError::Fenced { write, seq, stored_next_seq, .. } = err else { return err };
        if !inner.is_stale(&self.session) {
            return err;
        }
        let reason = err.to_string();
        let n_unwritten = {
            let mut pending = self.pending.lock();
            pending.fenced = Some(Fence { write, seq, stored_next_seq });
            pending.events.len()
        };
        tracing::warn!(
            session = %self.session.id(),
            reason = %reason,
            unwritten = n_unwritten,
            "a live session's write met the writer fence: it is not written from this process any more; \
             release it and resume it from the store"
        );
        err
    }
}
