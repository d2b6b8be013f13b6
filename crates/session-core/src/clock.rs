//! Time as an injected value: the `Clock` trait, a manual clock for tests and replays, the system
//! clock for hosts, and the bounded clock a service stamps stored times with.
//!
//! Nothing in this crate reads the time of its own accord: it reads only the clock it is given.
//! A host passes one that reads the system time ([`SystemClock`], best wrapped in a
//! [`BoundedClock`]); tests pass a [`ManualClock`] so every `time` and `createdAt` is
//! deterministic.

use std::{
    fmt,
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicI64, Ordering},
    },
};

use crate::json::MAX_SAFE_INTEGER;

/// A source of the current time in Unix epoch milliseconds.
///
/// Readings need not be monotonic: event `time` is not required to increase (reference 01 §1.3).
pub trait Clock: Send + Sync + fmt::Debug {
    /// The current time in Unix epoch milliseconds. May be negative (before 1970) and may go
    /// backwards between calls; a session stamps it into each event's `time` as read.
    fn now_ms(&self) -> i64;
}

/// A clock that only moves when told to. Safe to share between threads.
#[derive(Debug)]
pub struct ManualClock {
    now_ms: AtomicI64,
}

impl ManualClock {
    /// A clock that reads `start_ms` (Unix epoch milliseconds) until it is set or advanced.
    pub fn new(start_ms: i64) -> ManualClock {
        ManualClock { now_ms: AtomicI64::new(start_ms) }
    }

    /// Sets the reading to `now_ms`, forwards or backwards; every reader sees it at once.
    pub fn set(&self, now_ms: i64) {
        self.now_ms.store(now_ms, Ordering::SeqCst);
    }

    /// Moves the clock by `delta_ms` (which may be negative) and returns the new reading.
    pub fn advance(&self, delta_ms: i64) -> i64 {
        self.now_ms.fetch_add(delta_ms, Ordering::SeqCst).wrapping_add(delta_ms)
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> i64 {
        self.now_ms.load(Ordering::SeqCst)
    }
}

/// The one clock that reads the system time, for embedders to pass to a
/// [`SessionStore`](crate::SessionStore) (or a projection cache): the time as it is, negative
/// before 1970, saturating at the ends of `i64`. Nothing in the workspace's libraries constructs
/// it; a host does. A system clock is not the host's to trust (it may read before 1970 or be set
/// far ahead), so a service wraps it in a [`BoundedClock`], which keeps every stored time readable:
///
/// ```
/// use std::sync::Arc;
///
/// use session_core::{BoundedClock, Clock, SessionStore, SystemClock};
///
/// let clock: Arc<dyn Clock> = Arc::new(BoundedClock::new(Arc::new(SystemClock)));
/// let store = SessionStore::new(clock);
/// # drop(store);
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> i64 {
        let now = std::time::SystemTime::now();
        match now.duration_since(std::time::UNIX_EPOCH) {
            Ok(since) => i64::try_from(since.as_millis()).unwrap_or(i64::MAX),
            Err(before) => i64::try_from(before.duration().as_millis()).map_or(i64::MIN, |before| -before),
        }
    }
}

/// The latest reading a [`BoundedClock`] gives: the largest safe integer, the largest `time` a
/// reader accepts (about the year 287396).
pub const MAX_CLOCK_MS: i64 = MAX_SAFE_INTEGER as i64;

/// A clock that keeps another's readings within what every stored `time` and `createdAt` can
/// hold: `0..=MAX_CLOCK_MS` (1970 to the largest safe integer). A reading before the epoch reads
/// 0, one past the bound reads [`MAX_CLOCK_MS`]; the first such reading of each spell out of range
/// logs a warning (and the first one back in range says so), so a wrong system clock is visible
/// without flooding the log.
///
/// A session stamps its clock's reading as read, and a reader refuses a `time` beyond the safe
/// integers (and a `createdAt` below 0), so a service whose clock is not its own to trust (a
/// system clock) wraps it in this one.
#[derive(Debug)]
pub struct BoundedClock {
    inner: Arc<dyn Clock>,
    /// Whether the last reading was out of range.
    out_of_range: AtomicBool,
}

impl BoundedClock {
    /// Bounds the readings of `inner`.
    pub fn new(inner: Arc<dyn Clock>) -> BoundedClock {
        BoundedClock { inner, out_of_range: AtomicBool::new(false) }
    }
}

impl Clock for BoundedClock {
    fn now_ms(&self) -> i64 {
        let reading = self.inner.now_ms();
        let bounded = reading.clamp(0, MAX_CLOCK_MS);
        let outside = bounded != reading;
        if self.out_of_range.swap(outside, Ordering::Relaxed) != outside {
            if outside {
                tracing::warn!(
                    reading_ms = reading,
                    stamped_ms = bounded,
                    "the clock reads outside 1970-01-01 to the largest safe integer of milliseconds; times are \
                     clamped to that range until it is back"
                );
            } else {
                tracing::warn!(reading_ms = reading, "the clock reads within range again");
            }
        }
        bounded
    }
}
