//! The write policy (reference 02 §8.1): a store observer that writes a live session's checkpoint
//! at `turn/end` and at disposal (mandatory), and after `write_every_events` events or
//! `write_interval_ms` of the injected clock (throttles).
//!
//! The cut is taken on the appending thread, at the event that triggered the write; the flush and
//! the store run on the Tokio runtime captured at attach, so a write never blocks an append. A
//! failed write is logged and puts its events back into the session's throttle state (reference
//! W9), so the next throttle point or `turn/end` heals the record.

use std::{
    collections::HashMap,
    fmt,
    sync::{
        Arc, Weak,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use parking_lot::Mutex;
use session_core::{
    ObserverError, ObserverId, Session, SessionEvent, SessionId, SessionStore, StoreEvent, StoreObserver,
};
use tokio::runtime::Handle;
use tokio_util::sync::CancellationToken;

use crate::{
    cache::{Background, ProjectionCache},
    error::{CacheError, Result},
    record::{CheckpointRecord, RecordIdentity},
};

/// Keeps the write policy attached to a store; dropping it detaches the policy, disarms every
/// interval timer and forgets every session's throttle state (armed but unfired writes are lost,
/// as in the reference). Writes already started run to completion.
#[must_use = "dropping the attachment detaches the write policy from the store"]
pub struct CacheAttachment {
    policy: Arc<Policy>,
    store: Weak<SessionStore>,
    observer: ObserverId,
}

/// Why a background write runs; shown in its failure warning (reference 02 §7.6).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Trigger {
    TurnEnd,
    Count,
    Interval,
    Detach,
}

impl fmt::Display for Trigger {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Trigger::TurnEnd => "turn/end",
            Trigger::Count => "count threshold",
            Trigger::Interval => "interval",
            Trigger::Detach => "detach",
        })
    }
}

struct Policy {
    /// The `Arc` this policy lives in, for the tasks it spawns.
    this: Weak<Policy>,
    cache: ProjectionCache,
    runtime: Handle,
    sessions: Mutex<HashMap<SessionId, Dirty>>,
    /// Cancelled when the attachment goes: timers stop, events are ignored.
    shutdown: CancellationToken,
    next_timer: AtomicU64,
}

/// A live session's writes owed since its last write.
struct Dirty {
    session: Weak<Session>,
    /// Events (other than `turn/end`) since the last write.
    pending: u64,
    /// Clock time of the first of them.
    since_ms: Option<i64>,
    timer: Option<Timer>,
}

#[derive(Debug, Clone, Copy)]
struct Timer {
    id: u64,
    due_ms: i64,
}

/// The throttle state a write took over, given back if the write fails.
#[derive(Debug, Clone, Copy, Default)]
struct Owed {
    pending: u64,
    since_ms: Option<i64>,
}

enum Decision {
    Nothing,
    Write(Trigger),
    Arm(Timer),
}

impl Dirty {
    fn new(session: &Arc<Session>) -> Dirty {
        Dirty { session: Arc::downgrade(session), pending: 0, since_ms: None, timer: None }
    }

    fn is(&self, session: &Arc<Session>) -> bool {
        Weak::ptr_eq(&self.session, &Arc::downgrade(session))
    }

    /// Resets the throttles for a write and returns what it owed.
    fn take(&mut self) -> Owed {
        self.timer = None;
        Owed { pending: std::mem::take(&mut self.pending), since_ms: self.since_ms.take() }
    }
}

impl ProjectionCache {
    /// Attaches the write policy to `store`: from now on every committed event of a live session
    /// drives the throttles, and `turn/end` and disposal write the session's checkpoint. Must be
    /// called inside a Tokio runtime with time enabled; background writes and timers run on it.
    ///
    /// The order against the registry's own attachment does not change any cut (the registry
    /// folds a session's cells up to its end on every read). Attaching the cache first saves a
    /// refold at disposal, where the registry drops the session's cells.
    pub fn attach(&self, store: &Arc<SessionStore>) -> Result<CacheAttachment> {
        let runtime = Handle::try_current().map_err(|_| CacheError::InvalidInput {
            message: "ProjectionCache::attach must be called inside a Tokio runtime".to_owned(),
        })?;
        let policy = Arc::new_cyclic(|this| Policy {
            this: this.clone(),
            cache: self.clone(),
            runtime,
            sessions: Mutex::new(HashMap::new()),
            shutdown: CancellationToken::new(),
            next_timer: AtomicU64::new(1),
        });
        let observer = store.add_observer(Arc::clone(&policy) as Arc<dyn StoreObserver>);
        Ok(CacheAttachment { policy, store: Arc::downgrade(store), observer })
    }
}

impl CacheAttachment {
    /// Starts the interval writes that are due by the injected clock now, and returns how many.
    /// The attachment's timers do this by themselves when the clock is wall time; a host whose
    /// clock moves otherwise (a test or a replay) calls this after moving it.
    pub fn run_due_timers(&self) -> usize {
        self.policy.run_due_timers()
    }

    /// The number of live sessions with writes owed.
    pub fn dirty_sessions(&self) -> usize {
        self.policy.sessions.lock().values().filter(|dirty| dirty.pending > 0).count()
    }

    /// Detaches the policy (the same as dropping the attachment).
    pub fn detach(self) {}
}

impl Drop for CacheAttachment {
    fn drop(&mut self) {
        if let Some(store) = self.store.upgrade() {
            store.remove_observer(self.observer);
        }
        self.policy.shutdown.cancel();
        self.policy.sessions.lock().clear();
    }
}

impl fmt::Debug for CacheAttachment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CacheAttachment")
            .field("sessions", &self.policy.sessions.lock().len())
            .field("detached", &self.policy.shutdown.is_cancelled())
            .finish_non_exhaustive()
    }
}

impl StoreObserver for Policy {
    /// Never fails: a write's failure is the write's business, never the append's.
    fn notify(&self, event: &StoreEvent<'_>) -> std::result::Result<(), ObserverError> {
        if self.shutdown.is_cancelled() {
            return Ok(());
        }
        match event {
            StoreEvent::Created(_) => {}
            StoreEvent::Event(session, event) => self.on_event(session, event),
            StoreEvent::Disposed(session) => self.on_disposed(session),
        }
        Ok(())
    }
}

impl Policy {
    fn on_event(&self, session: &Arc<Session>, event: &SessionEvent) {
        if event.kind == "turn/end" {
            // Mandatory: the turn-final value is what cold reads want. The write resets the
            // throttles; `turn/end` itself does not count.
            self.write(session, Trigger::TurnEnd);
            return;
        }
        let now_ms = self.cache.inner.clock.now_ms();
        let config = self.cache.inner.config;
        let decision = {
            let mut sessions = self.sessions.lock();
            let dirty = sessions.entry(session.id().clone()).or_insert_with(|| Dirty::new(session));
            if !dirty.is(session) {
                // A new lifetime of the id: the old one's state is gone with it.
                *dirty = Dirty::new(session);
            }
            dirty.pending += 1;
            let since_ms = *dirty.since_ms.get_or_insert(now_ms);
            if dirty.pending >= config.write_every_events {
                Decision::Write(Trigger::Count)
            } else if let Some(timer) = dirty.timer {
                if now_ms >= timer.due_ms { Decision::Write(Trigger::Interval) } else { Decision::Nothing }
            } else {
                let due_ms = since_ms.saturating_add(config.write_interval_ms as i64);
                if now_ms >= due_ms {
                    Decision::Write(Trigger::Interval)
                } else {
                    let timer = Timer { id: self.next_timer.fetch_add(1, Ordering::Relaxed), due_ms };
                    dirty.timer = Some(timer);
                    Decision::Arm(timer)
                }
            }
        };
        match decision {
            Decision::Nothing => {}
            Decision::Write(trigger) => self.write(session, trigger),
            Decision::Arm(timer) => self.arm(session.id().clone(), timer),
        }
    }

    fn on_disposed(&self, session: &Arc<Session>) {
        {
            let mut sessions = self.sessions.lock();
            if sessions.get(session.id()).is_some_and(|dirty| dirty.is(session)) {
                sessions.remove(session.id());
            }
        }
        // Mandatory: the live-to-cold moment.
        self.write(session, Trigger::Detach);
    }

    /// Takes the cut now and stores it in the background.
    fn write(&self, session: &Arc<Session>, trigger: Trigger) {
        let owed = {
            let mut sessions = self.sessions.lock();
            match sessions.get_mut(session.id()) {
                Some(dirty) if dirty.is(session) => dirty.take(),
                _ => Owed::default(),
            }
        };
        let inner = &self.cache.inner;
        let checkpoint = inner.registry.checkpoint(session);
        let record = CheckpointRecord::from_checkpoint(RecordIdentity::of(session.header()), &checkpoint);
        let running = Background::start(inner);
        let (inner, policy, session) = (Arc::clone(inner), self.this.clone(), Arc::clone(session));
        self.runtime.spawn(async move {
            let _running = running;
            let id = session.id();
            let result = match record {
                Ok(record) => inner.write_cut(id, record).await,
                Err(error) => Err(error),
            };
            if let Err(error) = result {
                tracing::warn!(
                    session = %id,
                    "session projection cache: {trigger} write for \"{id}\" failed (cache stays stale): {error}"
                );
                if trigger != Trigger::Detach
                    && let Some(policy) = policy.upgrade()
                {
                    policy.owe(&session, owed);
                }
            }
        });
    }

    /// Gives a failed write's events back to a session that is still live, so that its next
    /// throttle point (or `turn/end`) writes again. No timer is armed here: a store that keeps
    /// failing is retried at the pace of the session's own events, never in a loop.
    fn owe(&self, session: &Arc<Session>, owed: Owed) {
        if self.shutdown.is_cancelled() || !session.is_attached() || owed.pending == 0 {
            return;
        }
        let mut sessions = self.sessions.lock();
        let dirty = sessions.entry(session.id().clone()).or_insert_with(|| Dirty::new(session));
        if !dirty.is(session) {
            return;
        }
        dirty.pending += owed.pending;
        dirty.since_ms = match (dirty.since_ms, owed.since_ms) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
    }

    /// Sleeps until the injected clock reaches the timer's due time, then writes if the timer is
    /// still the session's (no write reset it meanwhile).
    fn arm(&self, id: SessionId, timer: Timer) {
        let (policy, clock, shutdown) = (self.this.clone(), Arc::clone(&self.cache.inner.clock), self.shutdown.clone());
        self.runtime.spawn(async move {
            loop {
                let remaining_ms = timer.due_ms.saturating_sub(clock.now_ms());
                if remaining_ms <= 0 {
                    break;
                }
                // A true delay, not a wait for an event: the write-behind timer waits for its due
                // time, then checks the injected clock again (a manual clock may not have moved).
                tokio::select! {
                    () = shutdown.cancelled() => return,
                    () = tokio::time::sleep(Duration::from_millis(remaining_ms as u64)) => {}
                }
            }
            if let Some(policy) = policy.upgrade() {
                policy.fire(&id, timer.id);
            }
        });
    }

    fn fire(&self, id: &SessionId, timer_id: u64) {
        if self.shutdown.is_cancelled() {
            return;
        }
        let session = {
            let sessions = self.sessions.lock();
            sessions
                .get(id)
                .filter(|dirty| dirty.timer.is_some_and(|timer| timer.id == timer_id))
                .and_then(|dirty| dirty.session.upgrade())
        };
        if let Some(session) = session {
            self.write(&session, Trigger::Interval);
        }
    }

    fn run_due_timers(&self) -> usize {
        if self.shutdown.is_cancelled() {
            return 0;
        }
        let now_ms = self.cache.inner.clock.now_ms();
        let due: Vec<Arc<Session>> = {
            let sessions = self.sessions.lock();
            sessions
                .values()
                .filter(|dirty| dirty.timer.is_some_and(|timer| timer.due_ms <= now_ms))
                .filter_map(|dirty| dirty.session.upgrade())
                .collect()
        };
        for session in &due {
            self.write(session, Trigger::Interval);
        }
        due.len()
    }
}
