//! End-to-end tests across the workspace crates.

mod crash;
mod listing;

/// Held while a test of this binary spawns a process or has a store open. A store's lock is an
/// `flock`, which a child shares with its parent from `fork` until `exec` closes the descriptor:
/// a process spawned by one test while another test has a store open would hold that store's
/// lock for a moment, and the other test's next open of the same root could find it locked.
static SPAWN_OR_OPEN: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Takes [`SPAWN_OR_OPEN`], whatever a panicking holder left behind.
pub(crate) fn spawn_or_open() -> std::sync::MutexGuard<'static, ()> {
    SPAWN_OR_OPEN.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
