//! File-system primitives of the JSONL store: opening only regular files (never blocking on a
//! FIFO or a device), existence checks that surface every error but `NotFound`, directory
//! creation and fsync, positioned reads bounded to a length, and revision tokens.

use std::{
    fs::{self, DirBuilder, File, Metadata, OpenOptions},
    io,
    os::unix::fs::{DirBuilderExt, FileExt, MetadataExt},
    path::{Path, PathBuf},
    sync::atomic::{AtomicU64, Ordering},
    time::SystemTime,
};

use crate::{
    backend::Revision,
    error::{PersistenceError, Result},
    format::ByteSource,
};
use session_storage_io::fsio;

pub(super) fn io_error(path: &Path) -> impl FnOnce(io::Error) -> PersistenceError + '_ {
    move |error| PersistenceError::io(path, error)
}

/// Whether `path` exists. Only `NotFound` means absent; every other failure (a symlink loop,
/// a denied search permission) is surfaced.
pub(super) fn exists(path: &Path) -> Result<bool> {
    match fs::metadata(path) {
        Ok(_) => Ok(true),
        Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(error) => Err(PersistenceError::io(path, error)),
    }
}

/// Opens the regular file at `path` with `options`; see [`fsio::open_regular_with`].
pub(super) fn open_regular(path: &Path, options: &mut OpenOptions) -> Result<Option<(File, Metadata)>> {
    fsio::open_regular_with(path, options).map_err(io_error(path))
}

/// Opens the regular file at `path` for reading; see [`open_regular`].
pub(super) fn open_for_reading(path: &Path) -> Result<Option<(File, Metadata)>> {
    open_regular(path, OpenOptions::new().read(true))
}

/// The metadata of the log at `path`, following symlinks: `Ok(None)` if nothing is there, an
/// error if something other than a regular file is (a dangling symlink included: a log that
/// went missing, not one that never was).
pub(super) fn log_metadata(path: &Path) -> Result<Option<Metadata>> {
    fsio::regular_metadata(path).map_err(io_error(path))
}

/// Fsyncs the directory `dir`; see [`fsio::sync_dir`].
pub(super) fn sync_dir(dir: &Path) -> Result<()> {
    fsio::sync_dir(dir).map_err(io_error(dir))
}

/// Creates `dir` (mode 0700) if needed and fsyncs its parent so the entry is durable.
pub(super) fn ensure_dir(dir: &Path) -> Result<()> {
    match DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => {}
        Err(error) if error.kind() == io::ErrorKind::AlreadyExists && dir.is_dir() => {}
        Err(error) => return Err(PersistenceError::io(dir, error)),
    }
    match dir.parent() {
        Some(parent) => sync_dir(parent),
        None => Ok(()),
    }
}

/// Whether two spellings name one file (case aliases, symlinked project directories).
pub(super) fn same_file(a: &Path, b: &Path) -> Result<bool> {
    let canonical = |path: &Path| match fs::canonicalize(path) {
        Ok(path) => Ok(Some(path)),
        Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(error) => Err(PersistenceError::io(path, error)),
    };
    Ok(match (canonical(a)?, canonical(b)?) {
        (Some(a), Some(b)) => a == b,
        _ => false,
    })
}

/// `"<dev>:<ino>:<size>:<mtimeNs>:<ctimeNs>"`, the reference's revision token.
pub(super) fn revision_of(metadata: &Metadata) -> Revision {
    let nanos = |secs: i64, nsecs: i64| i128::from(secs) * 1_000_000_000 + i128::from(nsecs);
    Revision::new(format!(
        "{}:{}:{}:{}:{}",
        metadata.dev(),
        metadata.ino(),
        metadata.size(),
        nanos(metadata.mtime(), metadata.mtime_nsec()),
        nanos(metadata.ctime(), metadata.ctime_nsec()),
    ))
}

pub(super) fn random_suffix() -> String {
    use std::hash::{BuildHasher, Hasher};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map_or(0, |since| since.as_nanos()));
    hasher.write_u32(std::process::id());
    hasher.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    format!("{:012x}", hasher.finish() & 0xFFFF_FFFF_FFFF)
}

/// The directories directly under `dir`, sorted; symlinks and files are skipped.
pub(super) fn subdirectories(dir: &Path) -> Result<Vec<PathBuf>> {
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(error) => return Err(PersistenceError::io(dir, error)),
    };
    let mut dirs = Vec::new();
    for entry in entries {
        let entry = entry.map_err(io_error(dir))?;
        if entry.file_type().map_err(io_error(&entry.path()))?.is_dir() {
            dirs.push(entry.path());
        }
    }
    dirs.sort();
    Ok(dirs)
}

/// Positioned reads of an open file, bounded to the length it had when the read began.
pub(super) struct FileSource<'f> {
    pub(super) file: &'f File,
    pub(super) len: u64,
}

impl ByteSource for FileSource<'_> {
    fn len(&self) -> u64 {
        self.len
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<usize> {
        let left = usize::try_from(self.len.saturating_sub(offset)).unwrap_or(usize::MAX);
        let n = buf.len().min(left);
        if n == 0 {
            return Ok(0);
        }
        self.file.read_at(&mut buf[..n], offset)
    }
}
