//! `LiveWriter`: write-behind batching for one live session (reference 01 §3.5).
//!
//! Events are buffered as the session appends them. The first buffered event arms a timer (a
//! fixed window, not a debounce); when it fires, everything buffered is written as one batch.
//! `drain` is the flush barrier: it writes until nothing is buffered. A failed write puts its
//! batch back in front, in order, and pauses the timer until the next event or flush.

use std::{fmt, sync::Arc};

use parking_lot::Mutex;
use session_core::{Session, SessionEvent};
use tokio::sync::Mutex as AsyncMutex;

use crate::{coordinator::Inner, error::Result};

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
                if let Err(err) = writer.drain(&inner).await {
                    tracing::warn!(session = %writer.session.id(), error = %err, "background session write failed; will retry at the next event or flush");
                }
            });
        }
    }

    /// Writes everything buffered, including events that arrive while it writes.
    pub(crate) async fn drain(&self, inner: &Arc<Inner>) -> Result<()> {
        let mut progress = self.write.lock().await;
        if !progress.initialized {
            inner.init_live(&self.session).await?;
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
                return Err(err);
            }
        }
    }
}
