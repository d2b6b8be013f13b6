//! Concurrency helpers the storage layers share: a registry of per-session async locks that
//! holds an entry only while someone holds or awaits it, and the hop to Tokio's blocking pool
//! that every file-touching call takes.

use std::{collections::HashMap, fmt, future::Future, sync::Arc};

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

/// A call sent to Tokio's blocking pool that never ran to its end because the runtime shut down
/// first (the pool drops queued calls at shutdown, and refuses new ones once it has begun). Not a
/// bug, so not a panic: the caller reports it as its own cancellation (for the storage crates,
/// `PersistenceError::Cancelled`, through the `From` impl beside that error).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the blocking call was cancelled: the runtime is shutting down")]
pub struct BlockingCancelled;

/// Runs `call` on Tokio's blocking pool and waits for it. This is the one hop to the blocking pool
/// of the workspace: every file-touching or connection-blocking call of the storage layers goes
/// through here, so no runtime thread ever waits on the disk or a database.
///
/// The call is handed to the pool when this function is called (not when the future is first
/// polled), so several calls started side by side run side by side. A panic in `call` resumes in
/// the caller; a call the runtime dropped at shutdown is [`BlockingCancelled`].
///
/// # Panics
///
/// Outside a Tokio runtime's context (as `tokio::task::spawn_blocking` does), and when `call`
/// panics.
pub fn run_blocking<T: Send + 'static>(
    call: impl FnOnce() -> T + Send + 'static,
) -> impl Future<Output = std::result::Result<T, BlockingCancelled>> + Send + 'static {
    let task = tokio::task::spawn_blocking(call);
    joined(task)
}

/// Waits for a spawned task (a blocking call's, or a task a caller must not cut short): its
/// output, a panic in it resumed in the caller, or [`BlockingCancelled`] when the runtime dropped
/// it at shutdown.
pub async fn joined<T>(task: tokio::task::JoinHandle<T>) -> std::result::Result<T, BlockingCancelled> {
    match task.await {
        Ok(result) => Ok(result),
        Err(join_error) => match join_error.try_into_panic() {
            Ok(payload) => std::panic::resume_unwind(payload),
            // The only other way a task ends early: the runtime cancelled it.
            Err(_cancelled) => Err(BlockingCancelled),
        },
    }
}

/// [`run_blocking`] for a fallible call with a shared handle: `call` gets `&S` on the blocking
/// pool, and a cancellation becomes the call's own error type (`Cancelled`).
pub fn run_blocking_with<S, T, E>(
    shared: &Arc<S>,
    call: impl FnOnce(&S) -> std::result::Result<T, E> + Send + 'static,
) -> impl Future<Output = std::result::Result<T, E>> + Send + 'static
where
    S: ?Sized + Send + Sync + 'static,
    T: Send + 'static,
    E: From<BlockingCancelled> + Send + 'static,
{
    let shared = Arc::clone(shared);
    let task = run_blocking(move || call(&shared));
    async move { task.await? }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A caller's own error type, as the storage crates' error enums are.
    #[derive(Debug)]
    enum CallError {
        Cancelled,
        Io(std::io::Error),
    }

    impl From<BlockingCancelled> for CallError {
        fn from(_: BlockingCancelled) -> CallError {
            CallError::Cancelled
        }
    }

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
        assert_eq!(run_blocking(|| 7).await, Ok(7));
    }

    #[tokio::test]
    async fn a_fallible_call_keeps_its_own_error() {
        let shared = Arc::new(5u64);
        let doubled: Result<u64, CallError> = run_blocking_with(&shared, |n| Ok(n * 2)).await;
        assert_eq!(doubled.unwrap(), 10);
        let failed: Result<u64, CallError> =
            run_blocking_with(&shared, |_| Err(CallError::Io(std::io::Error::other("refused")))).await;
        assert!(matches!(&failed, Err(CallError::Io(error)) if error.to_string() == "refused"), "{failed:?}");
    }

    /// A runtime that has shut down drops the calls handed to its blocking pool: the caller gets a
    /// cancellation, not a panic (what `Ctrl-C` on a gateway used to print).
    #[test]
    fn a_call_on_a_runtime_that_shut_down_is_cancelled_not_a_panic() {
        for flavor in ["current_thread", "multi_thread"] {
            let runtime = match flavor {
                "current_thread" => tokio::runtime::Builder::new_current_thread().build().unwrap(),
                _ => tokio::runtime::Builder::new_multi_thread().worker_threads(1).build().unwrap(),
            };
            let handle = runtime.handle().clone();
            runtime.shutdown_background();
            let ran = Arc::new(std::sync::atomic::AtomicBool::new(false));
            let (plain, fallible) = {
                let _entered = handle.enter();
                let flag = Arc::clone(&ran);
                let plain = run_blocking(move || flag.store(true, std::sync::atomic::Ordering::SeqCst));
                let fallible = run_blocking_with(&Arc::new(()), |()| Ok::<_, CallError>(1));
                (plain, fallible)
            };
            assert_eq!(futures::executor::block_on(plain), Err(BlockingCancelled), "{flavor}");
            let fallible = futures::executor::block_on(fallible);
            assert!(matches!(fallible, Err(CallError::Cancelled)), "{flavor}: {fallible:?}");
            assert!(!ran.load(std::sync::atomic::Ordering::SeqCst), "{flavor}: a cancelled call never runs");
        }
    }
}
