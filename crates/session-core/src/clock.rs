//! Time as an injected value: the `Clock` trait and a manual clock for tests and replays.
//!
//! This crate never reads the system clock. A host passes a clock that does; tests pass a
//! [`ManualClock`] so every `time` and `createdAt` is deterministic.

use std::{
    fmt,
    sync::atomic::{AtomicI64, Ordering},
};

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
