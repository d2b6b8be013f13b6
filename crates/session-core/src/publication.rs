//! The publication protocol of one session: who may tell a store's observers about it, when, and
//! what happens to a detach that arrives while they are being told.
//!
//! A session owns one [`Publication`]. Its lock is per session and re-entrant: an appender or a
//! publishing store holds it from the checks through the commit and every observer's call
//! ([`Held`]), so observers see one session's events in seq order even when several threads
//! append, and an observer on the publishing thread can call back into the session (reads
//! succeed; an append sees [`Held::is_publishing`] and is refused). While observers run, the
//! publishing flag is raised ([`Held::announce`]); a detach of the session from inside that
//! announcement, on the same thread, is deferred ([`Held::defer_detach`]) and reported when the
//! announcement unwinds, so the caller detaches then and `Disposed` is the last thing an
//! observer hears. A detach from another thread takes the lock, so it waits for the running
//! publication to finish.
//!
//! The attachment (the store the session is live in) is bound and unbound only with the lock
//! held, so a publication sees one store from start to end.

use std::{
    cell::Cell,
    sync::{Arc, Weak},
};

use parking_lot::{Mutex, ReentrantMutex, ReentrantMutexGuard};

use crate::store::StoreShared;

#[cfg(test)]
mod tests;

/// One session's publication lock, its state, and the store it is attached to.
#[derive(Debug, Default)]
pub(crate) struct Publication {
    state: ReentrantMutex<Cell<State>>,
    /// The store this session is live in, if any.
    attachment: Mutex<Option<Weak<StoreShared>>>,
}

/// What the thread holding the lock is doing.
#[derive(Debug, Clone, Copy, Default)]
struct State {
    /// Observers are being told about this session (an append, or its creation).
    publishing: bool,
    /// A detach arrived from inside that announcement; it runs when the announcement unwinds.
    detach_requested: bool,
}

/// What became of a detach requested from inside an announcement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use = "a detach requested during the announcement must be finished by the caller"]
pub(crate) enum AfterAnnounce {
    /// Nothing to do.
    Done,
    /// An observer detached the session: the caller finishes the detach now, still holding the
    /// lock.
    Detach,
}

/// The publication lock, held: one publication of this session at a time (re-entrant on the
/// holding thread).
pub(crate) struct Held<'a> {
    guard: ReentrantMutexGuard<'a, Cell<State>>,
    publication: &'a Publication,
}

impl Publication {
    /// Takes the lock, waiting for another thread's publication of this session to finish.
    pub(crate) fn lock(&self) -> Held<'_> {
        Held { guard: self.state.lock(), publication: self }
    }

    /// The store the session is live in, if it is still alive.
    pub(crate) fn store(&self) -> Option<Arc<StoreShared>> {
        self.attachment.lock().as_ref().and_then(Weak::upgrade)
    }
}

impl Held<'_> {
    /// Whether observers are being told about this session on this thread (the caller is one of
    /// them, or is called by one).
    pub(crate) fn is_publishing(&self) -> bool {
        self.guard.get().publishing
    }

    /// Runs `announce` (telling the observers) with the publishing flag raised, and says whether
    /// a detach arrived from inside it. The flags are cleared when `announce` returns, and also
    /// if an observer's panic escapes containment.
    pub(crate) fn announce<R>(&self, announce: impl FnOnce() -> R) -> (R, AfterAnnounce) {
        let flag = Flag::raise(&self.guard);
        let result = announce();
        let after = if self.guard.get().detach_requested { AfterAnnounce::Detach } else { AfterAnnounce::Done };
        drop(flag);
        (result, after)
    }

    /// Defers a detach requested from inside an announcement on this thread: `true` if one is
    /// running (its [`announce`](Self::announce) then reports [`AfterAnnounce::Detach`]), `false`
    /// if none is and the caller detaches now, holding this lock.
    pub(crate) fn defer_detach(&self) -> bool {
        let state = self.guard.get();
        if state.publishing {
            self.guard.set(State { detach_requested: true, ..state });
        }
        state.publishing
    }

    /// The store the session is live in, if it is still alive.
    pub(crate) fn store(&self) -> Option<Arc<StoreShared>> {
        self.publication.store()
    }

    /// Attaches the session to `store`; `false` (and nothing changes) if it is attached already.
    pub(crate) fn bind(&self, store: &Arc<StoreShared>) -> bool {
        let mut attachment = self.publication.attachment.lock();
        if attachment.is_some() {
            return false;
        }
        *attachment = Some(Arc::downgrade(store));
        true
    }

    /// Detaches the session from its store: later appends tell no one.
    pub(crate) fn unbind(&self) {
        *self.publication.attachment.lock() = None;
    }
}

/// Sets `publishing` for the lifetime of the guard and clears both flags when dropped.
struct Flag<'a> {
    cell: &'a Cell<State>,
}

impl<'a> Flag<'a> {
    fn raise(cell: &'a Cell<State>) -> Flag<'a> {
        cell.set(State { publishing: true, detach_requested: false });
        Flag { cell }
    }
}

impl Drop for Flag<'_> {
    fn drop(&mut self) {
        self.cell.set(State::default());
    }
}
