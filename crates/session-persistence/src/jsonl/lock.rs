//! The store's writer lock: one process at a time may write a store.
//!
//! The lock is an exclusive `flock` on the store's root directory itself, held through an open
//! descriptor for the store's lifetime. Nothing inside the root can break it: deleting or
//! replacing `<root>/.lock` (or any other file) leaves the directory's inode, and its lock,
//! where they are. The lock on `<root>/.lock` that earlier builds took is taken as well, so a
//! process of an earlier build and one of this build still exclude each other.
//!
//! Replacing the root directory itself (renaming it away and creating another) makes a new
//! store; the writer notices before every write, since it re-checks that the root path still
//! names the directory it locked, and refuses to write into a directory it does not hold.
//!
//! An `flock` dies with its process, so a crashed writer never blocks recovery.

use std::{
    fs::{self, File, OpenOptions},
    io,
    os::unix::fs::{MetadataExt, OpenOptionsExt},
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use super::{faults::Hooks, files::io_error};
use crate::error::{PersistenceError, Result};

/// The file earlier builds locked; still created and locked for them.
pub(super) const LOCK_FILE: &str = ".lock";

/// How long [`JsonlStore::open`](super::JsonlStore::open) waits for a held lock. A lock is an
/// `flock`, shared by every descriptor of its open file: it outlives its store for a moment
/// when the process spawned a child between `fork` and `exec`, or when a writer is just
/// closing. A real second writer still holds it after the wait.
pub const LOCK_WAIT: Duration = Duration::from_millis(500);

/// A held writer lock. Dropping it releases the lock.
#[derive(Debug)]
pub(super) struct StoreLock {
    root: PathBuf,
    /// The locked root directory (held open: the lock lives as long as the descriptor), and its
    /// identity when it was locked.
    _dir: File,
    dev: u64,
    ino: u64,
    /// The locked `<root>/.lock`, for earlier builds.
    _legacy: File,
}

fn open_dir(root: &Path) -> Result<File> {
    OpenOptions::new().read(true).custom_flags(libc::O_DIRECTORY | libc::O_CLOEXEC).open(root).map_err(io_error(root))
}

impl StoreLock {
    /// Takes the lock of the store at `root` (an existing directory), waiting up to
    /// [`LOCK_WAIT`] for a holder to let go. A second writer, in this process or another, gets
    /// [`PersistenceError::Locked`]. `hooks` hear when the wait starts.
    pub(super) fn acquire(root: &Path, hooks: &Hooks) -> Result<StoreLock> {
        let dir = open_dir(root)?;
        match take(&dir, root, hooks) {
            Ok(()) => {}
            // Some network file systems emulate `flock` with record locks, which a directory
            // (never open for writing) cannot take: the lock file alone guards such a store.
            Err(PersistenceError::Io { source, .. }) if unsupported(&source) => {
                tracing::warn!(
                    root = %root.display(),
                    error = %source,
                    "the file system cannot lock the store directory; relying on the lock file alone (deleting it while a writer runs is then unsafe)"
                );
            }
            Err(error) => return Err(error),
        }
        let metadata = dir.metadata().map_err(io_error(root))?;
        let lock_path = root.join(LOCK_FILE);
        // Only a regular file: a FIFO or device there is refused before it is opened.
        let legacy = session_storage_io::fsio::create_regular(&lock_path, 0o600).map_err(io_error(&lock_path))?;
        take(&legacy, root, hooks)?;
        Ok(StoreLock { root: root.to_owned(), _dir: dir, dev: metadata.dev(), ino: metadata.ino(), _legacy: legacy })
    }

    /// Fails unless the root path still names the directory this lock holds: a store whose root
    /// was replaced is not this writer's to write.
    pub(super) fn check(&self) -> Result<()> {
        let current = fs::metadata(&self.root).map_err(io_error(&self.root))?;
        if current.dev() == self.dev && current.ino() == self.ino {
            return Ok(());
        }
        Err(PersistenceError::io(
            &self.root,
            io::Error::other("the store directory was replaced after it was opened; this writer no longer holds it"),
        ))
    }
}

/// Whether the lock error `error` says the file system cannot lock this kind of file at all.
fn unsupported(error: &io::Error) -> bool {
    matches!(error.raw_os_error(), Some(libc::EBADF | libc::ENOLCK | libc::EINVAL | libc::EOPNOTSUPP))
}

/// Whether a writer holds the store at `root` right now (another process, or another handle of
/// this one): a non-blocking shared probe of the directory's lock, and of the lock file, which
/// writers of earlier builds lock alone. A read-only reader asks, to know that open turns may be
/// live. Each probe is released at once.
pub(super) fn held_by_writer(root: &Path) -> Result<bool> {
    let dir = match open_dir(root) {
        Ok(dir) => dir,
        Err(PersistenceError::Io { source, .. }) if source.kind() == io::ErrorKind::NotFound => return Ok(false),
        Err(error) => return Err(error),
    };
    if probe(&dir, root)? {
        return Ok(true);
    }
    let lock_path = root.join(LOCK_FILE);
    match session_storage_io::fsio::open_regular(&lock_path) {
        Ok(Some(file)) => probe(&file, &lock_path),
        Ok(None) => Ok(false),
        Err(error) => Err(PersistenceError::io(&lock_path, error)),
    }
}

/// Whether someone holds `file`'s exclusive lock; a file system that cannot lock it says no.
fn probe(file: &File, path: &Path) -> Result<bool> {
    match file.try_lock_shared() {
        Ok(()) => Ok(false),
        Err(fs::TryLockError::WouldBlock) => Ok(true),
        Err(fs::TryLockError::Error(error)) if unsupported(&error) => Ok(false),
        Err(fs::TryLockError::Error(error)) => Err(PersistenceError::io(path, error)),
    }
}

/// Takes the exclusive lock on `file`, waiting up to [`LOCK_WAIT`] for a holder to let go.
fn take(file: &File, root: &Path, hooks: &Hooks) -> Result<()> {
    let deadline = Instant::now() + LOCK_WAIT;
    let mut waiting = false;
    loop {
        match file.try_lock() {
            Ok(()) => return Ok(()),
            Err(fs::TryLockError::WouldBlock) if Instant::now() < deadline => {
                if !std::mem::replace(&mut waiting, true) {
                    hooks.lock_wait();
                }
                // A true delay, not a wait for an event: `flock` offers no wait with a deadline
                // and no notice when a holder lets go, so the lock is tried again every 5 ms.
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(fs::TryLockError::WouldBlock) => return Err(PersistenceError::Locked { path: root.to_owned() }),
            Err(fs::TryLockError::Error(error)) => return Err(PersistenceError::io(root, error)),
        }
    }
}
