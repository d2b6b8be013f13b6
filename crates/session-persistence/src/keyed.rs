//! Concurrency helpers the storage layers share: a registry of per-session async locks that
//! holds an entry only while someone holds or awaits it, and the hop to Tokio's blocking pool
//! that every file-touching call takes.

use std::{collections::HashMap, fmt, sync::Arc};

use parking_lot::Mutex;
use session_core::SessionId;
use tokio::sync::{Mutex as AsyncMutex, OwnedMutexGuard};

/// One async mutex per session id, created on first use and dropped once nobody holds or awaits
/// it, so the registry does not grow with the number of ids ever touched.
#[derive(Default)]
pub struct KeyedLocks {
    locks: Mutex<HashMap<SessionId, Arc<AsyncMutex<()>>>>,
}

impl fmt::Debug for KeyedLocks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedLocks").field("held", &self.len()).finish()
    }
}

/// Holds one id's lock; dropping it lets the next waiter in.
#[must_use = "the lock is released when the guard is dropped"]
pub struct KeyedGuard<'a> {
    locks: &'a KeyedLocks,
    id: SessionId,
    guard: Option<OwnedMutexGuard<()>>,
}

impl fmt::Debug for KeyedGuard<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedGuard").field("id", &self.id).finish()
    }
}

impl KeyedLocks {
    /// An empty registry.
    pub fn new() -> KeyedLocks {
        KeyedLocks::default()
    }

    fn entry(&self, id: &SessionId) -> Arc<AsyncMutex<()>> {
        Arc::clone(self.locks.lock().entry(id.clone()).or_default())
    }

    /// Waits for `id`'s lock.
    pub async fn lock(&self, id: &SessionId) -> KeyedGuard<'_> {
        let guard = self.entry(id).lock_owned().await;
        KeyedGuard { locks: self, id: id.clone(), guard: Some(guard) }
    }

    /// [`lock`](Self::lock) for a blocking thread. Never call it from an async context: it
    /// would block the runtime.
    pub fn lock_blocking(&self, id: &SessionId) -> KeyedGuard<'_> {
        let guard = self.entry(id).blocking_lock_owned();
        KeyedGuard { locks: self, id: id.clone(), guard: Some(guard) }
    }

    /// How many ids are held or awaited right now.
    pub fn len(&self) -> usize {
        self.locks.lock().len()
    }

    /// Whether no id is held or awaited.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Drop for KeyedGuard<'_> {
    fn drop(&mut self) {
        let Some(guard) = self.guard.take() else { return };
        let mutex = Arc::clone(OwnedMutexGuard::mutex(&guard));
        drop(guard);
        let mut locks = self.locks.locks.lock();
        // Under the map lock, two references (the map's and `mutex`) mean no holder and no
        // waiter: a waiter keeps a clone until it holds the lock.
        if locks.get(&self.id).is_some_and(|entry| Arc::ptr_eq(entry, &mutex) && Arc::strong_count(entry) == 2) {
            locks.remove(&self.id);
        }
    }
}

/// Runs `call` on Tokio's blocking pool and waits for it; a panic in `call` resumes in the
/// caller. Every file-touching call of the storage layers goes through here, so no runtime
/// thread ever waits on the disk.
pub async fn run_blocking<T: Send + 'static>(call: impl FnOnce() -> T + Send + 'static) -> T {
    match tokio::task::spawn_blocking(call).await {
        Ok(result) => result,
        Err(join_error) => std::panic::resume_unwind(join_error.into_panic()),
    }
}

/// [`run_blocking`] with a shared handle: `call` gets `&S` on the blocking pool.
pub async fn run_blocking_with<S, T>(shared: &Arc<S>, call: impl FnOnce(&S) -> T + Send + 'static) -> T
where
    S: ?Sized + Send + Sync + 'static,
    T: Send + 'static,
{
    let shared = Arc::clone(shared);
    run_blocking(move || call(&shared)).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn entries_live_only_while_held_or_awaited() {
        let locks = Arc::new(KeyedLocks::new());
        let id = SessionId::from("s");
        let first = locks.lock(&id).await;
        assert_eq!(locks.len(), 1);
        let waiter = tokio::spawn({
            let (locks, id) = (Arc::clone(&locks), id.clone());
            async move {
                let _second = locks.lock(&id).await;
                locks.len()
            }
        });
        // The waiter is parked on the same entry; releasing the first guard must not drop it.
        while Arc::strong_count(&locks.entry(&id)) < 4 {
            tokio::task::yield_now().await;
        }
        drop(first);
        assert_eq!(waiter.await.unwrap(), 1, "the waiter held the same entry");
        assert!(locks.is_empty(), "the last holder removed the entry");
    }

    #[tokio::test]
    async fn a_panic_on_the_blocking_pool_resumes_in_the_caller() {
        let caught = tokio::spawn(run_blocking(|| -> u8 { std::panic::panic_any("boom") })).await.unwrap_err();
        assert_eq!(*caught.into_panic().downcast::<&str>().unwrap(), "boom");
        assert_eq!(run_blocking(|| 7).await, 7);
    }
}
