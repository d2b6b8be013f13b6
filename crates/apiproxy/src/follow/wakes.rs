//! The follower's wake-up queue: what the store's signal said since the last round, coalesced
//! per session, and the round loop's wake-up.

use std::collections::HashMap;

use parking_lot::Mutex;
use session_core::SessionId;
use session_persistence::{ChangeKind, ChangeSink, StoreChange};
use tokio::sync::Notify;

/// What the signal said since the last round.
#[derive(Default)]
pub(super) struct Pending {
    pub(super) sweep: bool,
    /// Whether the sweep also reads where every stored session stands (after the signal
    /// (re)connected, or wake-ups were dropped): whatever it missed, idle sessions another writer
    /// took meanwhile included, is found.
    pub(super) rescan: bool,
    /// Each session woken, and whether one of its wake-ups was its creation.
    pub(super) sessions: HashMap<SessionId, bool>,
    /// The highest next seq the appends among those wake-ups announced, for the sessions whose
    /// wake-ups were all appends: a followed one among them needs no position read, only its tail.
    pub(super) appended: HashMap<SessionId, u64>,
}

/// The signal's sink: queues wake-ups (coalescing them per session) and wakes the round loop.
#[derive(Default)]
pub(super) struct Wakes {
    pub(super) pending: Mutex<Pending>,
    pub(super) notify: Notify,
}

/// A wake-up queue never holds more sessions than this; past it, the round is a sweep.
const MAX_PENDING: usize = 100_000;

impl Wakes {
    /// A sweep at the next round, not a rescan, and the loop woken for it.
    pub(super) fn sweep_soon(&self) {
        self.pending.lock().sweep = true;
        self.notify.notify_one();
    }

    /// Hands `sessions` (each with whether it was seen created) on to the next round, and a
    /// sweep with them if `sweep`, without waking the loop: the next wake-up or safety poll
    /// starts that round.
    pub(super) fn carry(&self, sessions: Vec<(SessionId, bool)>, sweep: bool) {
        let mut pending = self.pending.lock();
        pending.sweep |= sweep;
        if pending.sessions.len() + sessions.len() > MAX_PENDING {
            // The next sweep reads every session's position: it finds them all.
            tracing::warn!(
                sessions = sessions.len(),
                "following the store: the wake-up queue is full; a sweep follows"
            );
            (pending.sweep, pending.rescan) = (true, true);
            return;
        }
        for (id, created) in sessions {
            *pending.sessions.entry(id).or_default() |= created;
        }
    }
}

impl ChangeSink for Wakes {
    fn changed(&self, change: StoreChange) {
        {
            let mut pending = self.pending.lock();
            match change {
                StoreChange::Sweep => (pending.sweep, pending.rescan) = (true, true),
                StoreChange::Session { id, kind, next_seq } => {
                    if pending.sessions.len() >= MAX_PENDING {
                        (pending.sweep, pending.rescan) = (true, true);
                    } else {
                        let first = !pending.sessions.contains_key(&id);
                        match (kind, next_seq) {
                            (ChangeKind::Appended, Some(next_seq)) if first || pending.appended.contains_key(&id) => {
                                let hint = pending.appended.entry(id.clone()).or_default();
                                *hint = (*hint).max(next_seq);
                            }
                            _ => {
                                pending.appended.remove(&id);
                            }
                        }
                        *pending.sessions.entry(id).or_default() |= kind == ChangeKind::Created;
                    }
                }
            }
        }
        self.notify.notify_one();
    }
}
