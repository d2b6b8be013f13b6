//! Following a store that other processes write too: the change signals a backend raises, and the
//! positions a follower reads to confirm them.
//!
//! A signal is only a wake-up. It may be late, coalesced, duplicated or lost (a listening
//! connection that drops loses what was sent meanwhile), so a follower never trusts one for data:
//! it reads [`Backend::positions`](crate::Backend::positions) and then each session's tail from the last seq it delivered
//! ([`Backend::scan_from`](crate::Backend::scan_from)). What it must be told is that something may have changed; a
//! [`StoreChange::Sweep`] says "something may have changed, look at everything you follow", and a
//! backend raises one after every (re)connect of its signal, since signals sent while it was away
//! are gone.

use std::{
    fmt,
    hash::{BuildHasher, Hasher},
    panic::{self, AssertUnwindSafe},
    sync::Arc,
    time::Duration,
};

use session_core::SessionId;

/// What a backend's change signal says happened to one session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ChangeKind {
    /// The session's log was created (its first events may have come with it).
    Created,
    /// Events were appended (or a repair committed) to the session's log.
    Appended,
    /// The writer that held the session live let go of it ([`Backend::end_lease`](crate::Backend::end_lease)).
    Released,
}

impl ChangeKind {
    /// The kind's name in a notification payload: `created`, `appended` or `released`.
    pub fn as_str(self) -> &'static str {
        match self {
            ChangeKind::Created => "created",
            ChangeKind::Appended => "appended",
            ChangeKind::Released => "released",
        }
    }

    /// The kind a payload names, if any.
    pub fn parse(name: &str) -> Option<ChangeKind> {
        match name {
            "created" => Some(ChangeKind::Created),
            "appended" => Some(ChangeKind::Appended),
            "released" => Some(ChangeKind::Released),
            _ => None,
        }
    }
}

/// One wake-up from a backend's change signal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreChange {
    /// Something happened to `id`; `next_seq` is the log's next seq after it, when the signal
    /// carries it (a hint: the follower reads the position itself).
    Session {
        /// The session.
        id: SessionId,
        /// What happened.
        kind: ChangeKind,
        /// The next seq the writer left, if the signal says.
        next_seq: Option<u64>,
    },
    /// Anything may have changed (the signal reconnected, or carried no id): sweep everything.
    Sweep,
}

/// Where a signal goes. Called on the backend's own thread: it must return quickly and never
/// block (queue the change and wake a task).
pub trait ChangeSink: Send + Sync + 'static {
    /// One wake-up.
    fn changed(&self, change: StoreChange);
}

impl<F: Fn(StoreChange) + Send + Sync + 'static> ChangeSink for F {
    fn changed(&self, change: StoreChange) {
        self(change)
    }
}

/// Hands `change` to `sink`, containing a panic of the sink's: a backend calls its sink through
/// this, so a sink that panics loses that one change (logged as an error; a lost wake-up, which a
/// follower's sweep makes good) and the signal goes on instead of ending silently with its
/// thread or task.
pub fn deliver(sink: &dyn ChangeSink, change: StoreChange) {
    if let Err(payload) = panic::catch_unwind(AssertUnwindSafe(|| sink.changed(change))) {
        let panic = session_core::panic_text(payload.as_ref());
        tracing::error!(%panic, "a change sink panicked; its change is lost and the signal goes on");
    }
}

/// A reconnect wait: `delay` jittered, a time drawn evenly from its second half, so that
/// followers that lost their signal together (a server restart, a partition healing) do not all
/// come back at once. Backends keep the un-jittered delay for the next doubling.
pub fn jittered(delay: Duration) -> Duration {
    let half = delay / 2;
    // A fresh `RandomState` has fresh keys, so hashing nothing with it is a random draw.
    let bits = std::collections::hash_map::RandomState::new().build_hasher().finish();
    let spread = u64::try_from((delay - half).as_nanos()).unwrap_or(u64::MAX);
    half + Duration::from_nanos(bits % spread.saturating_add(1))
}

/// How a backend runs its change signal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatchOptions {
    /// How often a backend without notifications polls its change counter (SQLite's
    /// `data_version`): 100 ms by default.
    pub poll_interval: Duration,
    /// The first delay before a lost listening connection is opened again; it doubles, jittered,
    /// up to [`reconnect_max`](Self::reconnect_max). 250 ms by default.
    pub reconnect_min: Duration,
    /// The longest delay between reconnect attempts: 10 s by default.
    pub reconnect_max: Duration,
}

impl Default for WatchOptions {
    fn default() -> WatchOptions {
        WatchOptions {
            poll_interval: Duration::from_millis(100),
            reconnect_min: Duration::from_millis(250),
            reconnect_max: Duration::from_secs(10),
        }
    }
}

/// A running change signal. Dropping it stops the signal (the listening connection closes, the
/// poller ends); no call to the sink starts after the drop returns.
pub struct Watch {
    stop: Option<Box<dyn FnOnce() + Send + Sync>>,
}

impl Watch {
    /// A watch that runs `stop` when dropped.
    pub fn new(stop: impl FnOnce() + Send + Sync + 'static) -> Watch {
        Watch { stop: Some(Box::new(stop)) }
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            stop();
        }
    }
}

impl fmt::Debug for Watch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Watch").finish_non_exhaustive()
    }
}

/// Where one session stands in the store, as a follower's sweep reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionPosition {
    /// The session.
    pub id: SessionId,
    /// The seq the next stored event will have: the number of events stored.
    pub next_seq: u64,
    /// Whether a writer other than this store handle (another process, or another handle in
    /// this one) holds the session's writer lease right now; `None` when the backend cannot tell,
    /// as a backend whose probe cannot see past this handle's own lease says while it holds it.
    /// This handle's own lease never counts: a session it is letting go of is not "held
    /// elsewhere" for the moment its lease outlives it.
    pub held: Option<bool>,
}

/// The shared handle a follower keeps to a signal's sink.
pub type SharedChangeSink = Arc<dyn ChangeSink>;

#[cfg(test)]
mod tests {
    use std::{sync::Arc, time::Duration};

    use parking_lot::Mutex;
    use session_core::SessionId;

    use super::{ChangeKind, StoreChange, deliver, jittered};

    #[test]
    fn a_jittered_delay_stays_in_the_second_half_and_varies() {
        for delay in [Duration::ZERO, Duration::from_nanos(1), Duration::from_millis(250), Duration::from_secs(10)] {
            for _ in 0..100 {
                let wait = jittered(delay);
                assert!(wait >= delay / 2 && wait <= delay, "{delay:?}: {wait:?}");
            }
        }
        let draws: std::collections::HashSet<Duration> = (0..100).map(|_| jittered(Duration::from_secs(10))).collect();
        assert!(draws.len() > 90, "100 draws over 5 s gave only {} distinct waits", draws.len());
    }

    #[test]
    fn a_panicking_sink_loses_its_change_and_the_next_one_is_delivered() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let kept = Arc::clone(&seen);
        let sink = move |change: StoreChange| {
            if change == StoreChange::Sweep {
                panic!("a sweep is refused");
            }
            kept.lock().push(change);
        };
        // Without the containment the first call's panic would unwind through this test.
        deliver(&sink, StoreChange::Sweep);
        let next = StoreChange::Session { id: SessionId::from("s"), kind: ChangeKind::Appended, next_seq: Some(2) };
        deliver(&sink, next.clone());
        assert_eq!(*seen.lock(), [next]);
    }
}
