//! The helper threads of one read (a decoder decompressing ahead, a validating thread): spawned
//! through [`std::thread::Builder`], so that a thread the system refuses (a process at its thread
//! or memory limit) is an error the read falls back from, never a panic.

use std::{
    io,
    thread::{Scope, ScopedJoinHandle},
};

#[cfg(test)]
thread_local! {
    /// Makes every helper this thread asks for fail to start (see [`without_helpers`]).
    static REFUSE_HELPERS: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs `work` with every helper this thread asks for refused, as a system at its thread limit
/// would; helpers are allowed again afterwards, even if `work` panics.
#[cfg(test)]
pub(crate) fn without_helpers<T>(work: impl FnOnce() -> T) -> T {
    struct Allow;
    impl Drop for Allow {
        fn drop(&mut self) {
            REFUSE_HELPERS.with(|refuse| refuse.set(false));
        }
    }
    REFUSE_HELPERS.with(|refuse| refuse.set(true));
    let _allow = Allow;
    work()
}

/// Starts `work` on a thread of `scope`, or says why the system would not start one.
pub(crate) fn spawn_helper<'scope, T: Send + 'scope>(
    scope: &'scope Scope<'scope, '_>,
    work: impl FnOnce() -> T + Send + 'scope,
) -> io::Result<ScopedJoinHandle<'scope, T>> {
    #[cfg(test)]
    if REFUSE_HELPERS.with(std::cell::Cell::get) {
        return Err(io::Error::other("no helper threads in this test"));
    }
    std::thread::Builder::new().spawn_scoped(scope, work)
}
