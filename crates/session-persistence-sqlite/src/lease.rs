//! The side files beside a session database, each opened only if it is a regular file (a FIFO,
//! device or directory there is an error at once, never a blocked open): `<db>.writer-lock`,
//! whose shared lock every writable store holds, and the writer leases in `<db>.leases/`, one
//! lock file per session a live writer holds, so that a repair from any other store or process
//! leaves that session's open turn alone.
//!
//! A lease is a shared `flock` on `<db>.leases/<key>` (the key a hash of the session id), held
//! by each writer of the session while it is live and dying with its process; the file names
//! the last holder (host and pid). A repair takes the file's exclusive lock for the length of
//! its transaction: held by a writer, the repair is refused ([`PersistenceError::Held`]); taken,
//! no writer can lease the session until the repair commits. A writer that lets go of the last
//! lease of a file removes it; a writer whose file was removed while it waited for the lock
//! opens the new one.

use std::{
    collections::HashSet,
    fs::{self, DirBuilder, File, TryLockError},
    io::{self, Read},
    os::unix::fs::{DirBuilderExt, FileExt, MetadataExt},
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use session_core::SessionId;
use session_persistence::{LOCK_WAIT, PersistenceError, Result, lease};
use session_storage_io::fsio;

/// The file whose shared lock marks a writable store: `<database>.writer-lock`, beside it.
pub(crate) fn writer_lock_path(path: &Path) -> PathBuf {
    sibling(path, ".writer-lock")
}

/// The directory of the writer leases: `<database>.leases`, beside it.
pub(crate) fn leases_dir(path: &Path) -> PathBuf {
    sibling(path, ".leases")
}

fn sibling(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

/// The 64-bit key that names `id`'s lease file.
pub(crate) fn lease_key_of(id: &SessionId) -> u64 {
    lease::lease_key(&[id.as_str()])
}

/// The lease file of `id` in `dir`.
fn lease_path(dir: &Path, id: &SessionId) -> PathBuf {
    dir.join(format!("{:016x}", lease_key_of(id)))
}

/// The keys of the lease files in `<database>.leases/` right now (held or left behind by a
/// holder that died): one directory read. No directory is no lease. Names that are not a key are
/// not this crate's and are skipped.
pub(crate) fn lease_keys(database: &Path) -> Result<HashSet<u64>> {
    let dir = leases_dir(database);
    if !check_dir(&dir)? {
        return Ok(HashSet::new());
    }
    let entries = fs::read_dir(&dir).map_err(|error| PersistenceError::io(&dir, error))?;
    let mut keys = HashSet::new();
    for entry in entries {
        let entry = entry.map_err(|error| PersistenceError::io(&dir, error))?;
        let name = entry.file_name();
        if let Some(key) =
            name.to_str().filter(|name| name.len() == 16).and_then(|name| u64::from_str_radix(name, 16).ok())
        {
            keys.insert(key);
        }
    }
    Ok(keys)
}

/// Whether a writer (a process, or another store handle of this one) holds `id`'s lease right
/// now: a non-blocking probe of the lease file's exclusive lock, released at once (as
/// [`writer_lock_held`] probes the writer lock). No file is no holder. The probe holds the
/// exclusive lock for the instant between the try and the close: a repair elsewhere that tries
/// the same lock in that instant is refused as if a writer held the session.
pub(crate) fn lease_held(database: &Path, id: &SessionId) -> Result<bool> {
    let path = lease_path(&leases_dir(database), id);
    let Some(file) = fsio::open_regular(&path).map_err(|error| PersistenceError::io(&path, error))? else {
        return Ok(false);
    };
    match file.try_lock() {
        Ok(()) => Ok(false),
        Err(TryLockError::WouldBlock) => Ok(true),
        Err(TryLockError::Error(error)) => Err(PersistenceError::io(&path, error)),
    }
}

/// Takes the shared lock on `<database>.writer-lock` (created with mode 0600) that a writable
/// store holds while it lives.
pub(crate) fn hold_writer_lock(path: &Path) -> Result<File> {
    let lock_path = writer_lock_path(path);
    let file = fsio::create_regular(&lock_path, 0o600).map_err(|error| PersistenceError::io(&lock_path, error))?;
    file.lock_shared().map_err(|error| PersistenceError::io(&lock_path, error))?;
    Ok(file)
}

/// Whether a writable store holds `<database>.writer-lock` right now: a non-blocking probe of its
/// exclusive lock, released at once. Nothing there is no writer.
pub(crate) fn writer_lock_held(path: &Path) -> Result<bool> {
    let lock_path = writer_lock_path(path);
    let Some(file) = fsio::open_regular(&lock_path).map_err(|error| PersistenceError::io(&lock_path, error))? else {
        return Ok(false);
    };
    match file.try_lock() {
        Ok(()) => Ok(false),
        Err(TryLockError::WouldBlock) => Ok(true),
        Err(TryLockError::Error(error)) => Err(PersistenceError::io(&lock_path, error)),
    }
}

/// The leases directory, created (mode 0700) if missing; anything but a directory there is an error.
fn ensure_dir(dir: &Path) -> Result<()> {
    match DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => Ok(()),
        Err(error) if error.kind() == io::ErrorKind::AlreadyExists => check_dir(dir).map(|_| ()),
        Err(error) => Err(PersistenceError::io(dir, error)),
    }
}

/// Whether the leases directory exists (it must be a directory, not a symlink to one).
fn check_dir(dir: &Path) -> Result<bool> {
    match fs::symlink_metadata(dir) {
        Ok(metadata) if metadata.is_dir() => Ok(true),
        Ok(metadata) => Err(PersistenceError::io(dir, fsio::not_regular_dir(&metadata))),
        Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(error) => Err(PersistenceError::io(dir, error)),
    }
}

/// Whether `file` is still the file at `path` (a lease file removed by its last holder is not).
fn still_at(file: &File, path: &Path) -> Result<bool> {
    let held = file.metadata().map_err(|error| PersistenceError::io(path, error))?;
    match fs::symlink_metadata(path) {
        Ok(current) => Ok(current.dev() == held.dev() && current.ino() == held.ino()),
        Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(error) => Err(PersistenceError::io(path, error)),
    }
}

/// A writer's lease on one session: the lease file, shared-locked.
#[derive(Debug)]
pub(crate) struct Lease {
    file: File,
    path: PathBuf,
}

impl Lease {
    /// Takes `id`'s lease for a writer of the database at `database`, waiting up to
    /// [`LOCK_WAIT`] for a repair that holds it to commit.
    pub(crate) fn take(database: &Path, id: &SessionId) -> Result<Lease> {
        let dir = leases_dir(database);
        let path = lease_path(&dir, id);
        let deadline = Instant::now() + LOCK_WAIT;
        loop {
            ensure_dir(&dir)?;
            let file = fsio::create_regular(&path, 0o600).map_err(|error| PersistenceError::io(&path, error))?;
            match file.try_lock_shared() {
                Ok(()) => {}
                Err(TryLockError::WouldBlock) if Instant::now() < deadline => {
                    // A true delay, not a test's wait: a file lock has no wake-up to wait on
                    // (`flock` would block without a bound), so a writer retries a held lease
                    // every few milliseconds until `LOCK_WAIT` has passed.
                    std::thread::sleep(Duration::from_millis(5));
                    continue;
                }
                Err(TryLockError::WouldBlock) => return Err(PersistenceError::Locked { path }),
                Err(TryLockError::Error(error)) => return Err(PersistenceError::io(&path, error)),
            }
            if !still_at(&file, &path)? {
                continue;
            }
            // Who holds it, for a refused repair's message; with several holders, the last one.
            let name = lease::holder_name();
            file.set_len(0)
                .and_then(|()| file.write_all_at(name.as_bytes(), 0))
                .map_err(|error| PersistenceError::io(&path, error))?;
            return Ok(Lease { file, path });
        }
    }

    /// Lets go of the lease; the last holder removes the file (under its exclusive lock, so no
    /// writer holds the file removed).
    pub(crate) fn end(self) {
        if self.file.try_lock().is_ok() && still_at(&self.file, &self.path).unwrap_or(false) {
            let _ = fs::remove_file(&self.path);
        }
    }
}

/// A repair's hold on one session: the lease file's exclusive lock, or nothing when no lease
/// file exists (no writer holds the session, and one that comes now waits for the transaction).
#[derive(Debug)]
pub(crate) struct RepairHold {
    _file: Option<File>,
}

impl RepairHold {
    /// Takes `id`'s lease file exclusively for a repair, or refuses with
    /// [`PersistenceError::Held`] naming the holder while a live writer holds it.
    pub(crate) fn take(database: &Path, id: &SessionId) -> Result<RepairHold> {
        let dir = leases_dir(database);
        if !check_dir(&dir)? {
            return Ok(RepairHold { _file: None });
        }
        let path = lease_path(&dir, id);
        let Some(file) = fsio::open_regular(&path).map_err(|error| PersistenceError::io(&path, error))? else {
            return Ok(RepairHold { _file: None });
        };
        match file.try_lock() {
            Ok(()) => Ok(RepairHold { _file: Some(file) }),
            Err(TryLockError::WouldBlock) => {
                let mut named = String::new();
                let _ = (&file).take(256).read_to_string(&mut named);
                let holder = if named.trim().is_empty() { "a writer of this database".to_owned() } else { named };
                Err(PersistenceError::Held { id: id.clone(), holder: holder.trim().to_owned() })
            }
            Err(TryLockError::Error(error)) => Err(PersistenceError::io(&path, error)),
        }
    }
}
