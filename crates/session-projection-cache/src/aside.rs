//! Moving a damaged checkpoint store aside: records are derived data, so a store that cannot be
//! opened is renamed out of the way (kept for a post-mortem, never deleted) and a fresh one takes
//! its place; a backfill (`cache warm`) fills it again.

use std::{
    ffi::OsString,
    fs, io,
    path::{Path, PathBuf},
};

use crate::error::{CacheError, Result};

/// A checkpoint store that could not be opened and was renamed out of the way.
#[derive(Debug, Clone)]
pub struct MovedAside {
    /// Where the store was (and where a fresh, empty one now is).
    pub from: PathBuf,
    /// Where it is now.
    pub to: PathBuf,
    /// Why it could not be opened.
    pub error: CacheError,
}

/// `path` with `.damaged-<stamp>` appended, and `-<n>` after it if that name is taken.
fn aside_path(path: &Path, stamp: &str) -> PathBuf {
    let mut base = OsString::from(path.as_os_str());
    base.push(format!(".damaged-{stamp}"));
    let mut candidate = PathBuf::from(&base);
    let mut n = 1;
    while fs::symlink_metadata(&candidate).is_ok() {
        let mut numbered = base.clone();
        numbered.push(format!("-{n}"));
        candidate = PathBuf::from(numbered);
        n += 1;
    }
    candidate
}

/// Renames `path` (a file or a directory) to `<path>.damaged-<stamp>`, and each existing
/// `<path><suffix>` for the `side_suffixes` (SQLite's `-wal` and `-shm`) to the new name with the
/// same suffix, so the moved store keeps its side files and the fresh one starts without them.
/// Returns the new path of `path`.
pub(crate) fn move_aside(path: &Path, stamp: &str, side_suffixes: &[&str]) -> Result<PathBuf> {
    let to = aside_path(path, stamp);
    match fs::rename(path, &to) {
        Ok(()) => {}
        // Nothing is there (the open failed for another reason): only side files can be in the way.
        Err(error) if error.kind() == io::ErrorKind::NotFound => {}
        Err(source) => return Err(CacheError::io(path, source)),
    }
    for suffix in side_suffixes {
        let (mut side, mut side_to) = (OsString::from(path.as_os_str()), OsString::from(to.as_os_str()));
        side.push(suffix);
        side_to.push(suffix);
        match fs::rename(&side, &side_to) {
            Ok(()) => {}
            Err(error) if error.kind() == io::ErrorKind::NotFound => {}
            Err(source) => return Err(CacheError::io(PathBuf::from(side), source)),
        }
    }
    if let Some(parent) = path.parent().filter(|parent| !parent.as_os_str().is_empty()) {
        // The renames are durable once the directory is; a lost rename only repeats this one.
        if let Err(error) = fs::File::open(parent).and_then(|dir| dir.sync_all()) {
            tracing::debug!(path = %parent.display(), %error, "cannot fsync a directory after moving a cache aside");
        }
    }
    Ok(to)
}

/// Opens the store at `path` with `open`; if that fails, moves it aside (renamed to `<name>.damaged-<stamp>`) and
/// opens a fresh one. The second failure, if any, is returned.
pub fn open_or_move_aside<T>(
    path: &Path,
    stamp: &str,
    side_suffixes: &[&str],
    open: impl Fn() -> Result<T>,
) -> Result<(T, Option<MovedAside>)> {
    match open() {
        Ok(store) => Ok((store, None)),
        Err(error) => {
            let to = move_aside(path, stamp, side_suffixes)?;
            let store = open()?;
            Ok((store, Some(MovedAside { from: path.to_owned(), to, error })))
        }
    }
}
