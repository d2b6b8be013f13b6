//! Finding logs: the project and session directories of the root, one id's log, the binding of
//! a log to the path its header names, and the listing walk, which reports every log it cannot
//! list as that log's own fault and goes on with the others.

use std::{
    collections::{HashMap, HashSet},
    fs, io,
    os::unix::fs::MetadataExt,
    path::{Path, PathBuf},
    sync::Arc,
    sync::atomic::Ordering,
};

use session_core::{SessionHeader, SessionId};
use tokio_util::sync::CancellationToken;

use super::{
    JsonlStore,
    files::{exists, log_metadata, same_file},
    header_cache::Listed,
    layout::{decode_segment, encode_segment},
};
use crate::{
    backend::{Listing, LogFault, StoredHeader},
    error::{CorruptKind, Location, PersistenceError, Result},
    format::Compression,
};

/// One entry of a project directory.
enum ProjectEntry {
    /// A session directory (or a symlink to one).
    Session(PathBuf),
    /// Anything else where a session directory belongs, with why it is not one.
    Foreign(PathBuf, PersistenceError),
}

pub(super) fn check_cancel(cancel: &CancellationToken) -> Result<()> {
    if cancel.is_cancelled() { Err(PersistenceError::Cancelled) } else { Ok(()) }
}

impl JsonlStore {
    /// The project directories of the root. Hidden directories (a leading `.`) are not projects:
    /// project keys never start with a dot, so a host may keep its own data there (the gateway
    /// keeps its projection checkpoints in `.projection-cache`). Symlinks are not followed. An
    /// unreadable root fails: that is a fault of the whole store.
    pub(super) fn project_dirs(&self) -> Result<Vec<PathBuf>> {
        project_dirs(&self.root)
    }

    /// The entries of a project directory, sorted: session directories, and everything else
    /// that is not one (a transcript file of the retired flat layout, a file or FIFO in a session
    /// directory's place, a dangling or looping symlink). Hidden non-directories are ignored.
    fn project_entries(&self, project: &Path) -> Result<Vec<ProjectEntry>> {
        let entries = match fs::read_dir(project) {
            Ok(entries) => entries,
            Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(error) => return Err(PersistenceError::io(project, error)),
        };
        let mut found = Vec::new();
        for entry in entries {
            // One entry's failure is that entry's own; an entry deleted meanwhile is gone.
            let entry = match entry {
                Ok(entry) => entry,
                Err(error) => {
                    found.push(ProjectEntry::Foreign(project.to_owned(), PersistenceError::io(project, error)));
                    break;
                }
            };
            let path = entry.path();
            let file_type = match entry.file_type() {
                Ok(file_type) => file_type,
                Err(error) if error.kind() == io::ErrorKind::NotFound => continue,
                Err(error) => {
                    found.push(ProjectEntry::Foreign(path.clone(), PersistenceError::io(&path, error)));
                    continue;
                }
            };
            if file_type.is_dir() {
                found.push(ProjectEntry::Session(path));
                continue;
            }
            let name = entry.file_name().to_string_lossy().into_owned();
            if file_type.is_symlink() {
                match fs::metadata(&path) {
                    Ok(metadata) if metadata.is_dir() => found.push(ProjectEntry::Session(path)),
                    Ok(_) => {
                        found.push(ProjectEntry::Foreign(path.clone(), not_a_session_dir(&path, "a symlink to a file")))
                    }
                    Err(error) => found.push(ProjectEntry::Foreign(path.clone(), PersistenceError::io(&path, error))),
                }
                continue;
            }
            if file_type.is_file() && (name.ends_with(".jsonl") || name.ends_with(".jsonl.zstd")) {
                found.push(ProjectEntry::Foreign(path.clone(), flat_layout(&path)));
            } else if !name.starts_with('.') {
                let what = if file_type.is_file() { "a file" } else { "a special file" };
                found.push(ProjectEntry::Foreign(path.clone(), not_a_session_dir(&path, what)));
            }
        }
        found.sort_by(|a, b| entry_path(a).cmp(entry_path(b)));
        Ok(found)
    }

    pub(super) fn reject_opposite(&self, session_dir: &Path) -> Result<()> {
        let opposite = session_dir.join(self.compression.opposite().file_name());
        if exists(&opposite)? {
            return Err(self.encoding_mismatch(&opposite));
        }
        Ok(())
    }

    fn encoding_mismatch(&self, path: &Path) -> PersistenceError {
        PersistenceError::FormatUnsupported {
            id: artifact_id(path),
            message: format!(
                "session artifact {:?} uses {}, but this backend is configured for compression {:?}; use a separate \
                 root or select the matching compression mode",
                path.display().to_string(),
                self.compression.opposite().suffix(),
                self.compression.as_str(),
            ),
            location: Some(Location::file(path)),
        }
    }

    /// The indexed log path of `id`, unchecked but for the other encoding beside it: whoever
    /// opens it learns whether it still exists.
    pub(super) fn indexed_log(&self, id: &SessionId) -> Result<Option<PathBuf>> {
        let Some(path) = self.index.lock().get(id).cloned() else { return Ok(None) };
        if let Some(dir) = path.parent() {
            self.reject_opposite(dir)?;
        }
        Ok(Some(path))
    }

    /// Finds the one log of `id`: through the index, or by probing every project directory.
    /// Only `id`'s own session directories are looked at, so damage elsewhere in the store
    /// never keeps this id from being found: a project that cannot be probed fails the lookup
    /// only if the id is found nowhere else. A refusal that concerns this id (a flat-layout
    /// file, the other encoding, something other than a regular file at its log path, two
    /// copies) fails it.
    pub(super) fn find_log(&self, id: &SessionId, cancel: &CancellationToken) -> Result<Option<PathBuf>> {
        let segment = encode_segment(id.as_str())?;
        let indexed = self.index.lock().get(id).cloned();
        if let Some(path) = indexed {
            if let Some(dir) = path.parent() {
                self.reject_opposite(dir)?;
            }
            if log_metadata(&path)?.is_some() {
                return Ok(Some(path));
            }
            self.index.lock().remove(id);
        }
        let mut matches = Vec::new();
        let mut unprobed: Option<PersistenceError> = None;
        for project in self.project_dirs()? {
            check_cancel(cancel)?;
            match self.probe(&project, &segment) {
                Ok(Some(path)) => matches.push(path),
                Ok(None) => {}
                Err(error @ PersistenceError::FormatUnsupported { .. }) => return Err(error),
                Err(error @ PersistenceError::Io { .. }) if is_search_failure(&error) => {
                    unprobed.get_or_insert(error);
                }
                Err(error) => return Err(error),
            }
        }
        if matches.len() > 1 {
            return Err(duplicate(id));
        }
        let Some(found) = matches.pop() else {
            return match unprobed {
                Some(error) => Err(error),
                None => Ok(None),
            };
        };
        self.index.lock().insert(id.clone(), found.clone());
        Ok(Some(found))
    }

    /// The log of the session directory `segment` under `project`, if there is one.
    fn probe(&self, project: &Path, segment: &str) -> Result<Option<PathBuf>> {
        for compression in [Compression::Zstd, Compression::None] {
            let flat = project.join(format!("{segment}{}", compression.suffix()));
            if exists(&flat)? {
                return Err(flat_layout(&flat));
            }
        }
        let dir = project.join(segment);
        self.reject_opposite(&dir)?;
        let path = dir.join(self.compression.file_name());
        Ok(log_metadata(&path)?.map(|_| path))
    }

    /// Identity binding: the header names the requested id, and its id and cwd name this file.
    pub(super) fn check_identity(
        &self,
        path: &Path,
        header: &SessionHeader,
        expected: Option<&SessionId>,
    ) -> Result<()> {
        let corrupt = |message: String| PersistenceError::corrupt(CorruptKind::Identity, Location::file(path), message);
        if let Some(expected) = expected
            && *expected != header.id
        {
            return Err(corrupt(format!(
                "corrupt session log \"{}\": requested id \"{expected}\" does not match header id \"{}\"",
                path.display(),
                header.id
            )));
        }
        let Ok(expected_path) = self.log_path(header) else {
            return Err(corrupt(format!(
                "corrupt session log \"{}\": header id cannot name a storage path",
                path.display()
            )));
        };
        if path != expected_path && !same_file(path, &expected_path)? {
            return Err(corrupt(format!(
                "corrupt session log \"{}\": header id \"{}\" and cwd identify \"{}\"",
                path.display(),
                header.id,
                expected_path.display()
            )));
        }
        Ok(())
    }

    /// Every log of the store: listable headers, and every log that cannot be listed as its own
    /// fault. Only an unreadable root or a cancellation fails the walk.
    pub(super) fn walk(&self, cancel: &CancellationToken) -> Result<Listing> {
        check_cancel(cancel)?;
        let listing = self.listings.fetch_add(1, Ordering::Relaxed) + 1;
        let mut found = Listing::default();
        let mut headers: Vec<(PathBuf, StoredHeader)> = Vec::new();
        let fault = |path: PathBuf, error: PersistenceError| LogFault {
            id: artifact_id(&path),
            path: Some(path),
            header: None,
            error,
        };
        for project in self.project_dirs()? {
            check_cancel(cancel)?;
            let entries = match self.project_entries(&project) {
                Ok(entries) => entries,
                Err(error) => {
                    found.faults.push(fault(project, error));
                    continue;
                }
            };
            for entry in entries {
                check_cancel(cancel)?;
                let dir = match entry {
                    ProjectEntry::Session(dir) => dir,
                    ProjectEntry::Foreign(path, error) => {
                        found.faults.push(fault(path, error));
                        continue;
                    }
                };
                let path = dir.join(self.compression.file_name());
                match self.listed_header(&path, cancel, listing) {
                    Ok(Listed::Header(stored)) => headers.push((path, stored)),
                    Ok(Listed::Absent) => {}
                    Ok(Listed::Skipped) => {
                        let error = PersistenceError::corrupt(
                            CorruptKind::Header,
                            Location::file(&path),
                            "corrupt session log: the first line is missing or is not a session header",
                        );
                        found.faults.push(fault(path, error));
                    }
                    Err(PersistenceError::Cancelled) => return Err(PersistenceError::Cancelled),
                    Err(error) => found.faults.push(fault(path, error)),
                }
            }
        }
        check_cancel(cancel)?;
        self.headers.lock().retain(|_, cached| cached.listing == listing);
        separate_duplicates(&mut found, headers, |header| self.log_path(header).ok());
        found.sort();
        Ok(found)
    }
}

/// What encoding the logs under a store root use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreEncoding {
    /// No log at all (an empty or new store): any encoding will do.
    Empty,
    /// Every log is in this encoding.
    Uniform(Compression),
    /// Both kinds are there: such a store cannot be opened in either.
    Mixed {
        /// How many raw logs, and one of them.
        raw: (u64, PathBuf),
        /// How many zstd logs, and one of them.
        zstd: (u64, PathBuf),
    },
}

/// Counts the logs of each encoding under `root` (a missing root is empty). Reads directories
/// only, never a log; unreadable project directories are skipped.
pub fn detect_encoding(root: &Path) -> Result<StoreEncoding> {
    let mut raw: (u64, Option<PathBuf>) = (0, None);
    let mut zstd: (u64, Option<PathBuf>) = (0, None);
    for project in &project_dirs(root)? {
        let Ok(sessions) = super::files::subdirectories(project) else { continue };
        for dir in sessions {
            for (compression, seen) in [(Compression::None, &mut raw), (Compression::Zstd, &mut zstd)] {
                let path = dir.join(compression.file_name());
                if fs::symlink_metadata(&path).is_ok() {
                    seen.0 += 1;
                    seen.1.get_or_insert(path);
                }
            }
        }
    }
    Ok(match (raw, zstd) {
        ((n_raw, Some(raw_path)), (n_zstd, Some(zstd_path))) => {
            StoreEncoding::Mixed { raw: (n_raw, raw_path), zstd: (n_zstd, zstd_path) }
        }
        ((_, Some(_)), _) => StoreEncoding::Uniform(Compression::None),
        (_, (_, Some(_))) => StoreEncoding::Uniform(Compression::Zstd),
        _ => StoreEncoding::Empty,
    })
}

/// The project directories of the store at `root`: its subdirectories but the hidden ones
/// (`.projection-cache`, say).
fn project_dirs(root: &Path) -> Result<Vec<PathBuf>> {
    let mut dirs = super::files::subdirectories(root)?;
    dirs.retain(|dir| !dir.file_name().is_some_and(|name| name.to_string_lossy().starts_with('.')));
    Ok(dirs)
}

/// The encoding of the one session `id` in the store at `root`, found from its own directory (one
/// probe per project directory, not a walk of every session): `None` when no project holds a log
/// of it, or its directories hold more than one log (the caller then decides as for the store).
pub fn detect_session_encoding(root: &Path, id: &str) -> Result<Option<Compression>> {
    let segment = super::layout::encode_segment(id)?;
    let mut found = Vec::new();
    for project in project_dirs(root)? {
        let dir = project.join(&segment);
        for compression in [Compression::None, Compression::Zstd] {
            if fs::symlink_metadata(dir.join(compression.file_name())).is_ok() {
                found.push(compression);
            }
        }
    }
    Ok(match found.as_slice() {
        [compression] => Some(*compression),
        _ => None,
    })
}

/// Lists `headers`, where each id is found once. An id found several times is listed once if
/// every copy is the same file seen through aliases (a symlinked session directory): the copy at
/// its header's own path is kept, or the first. Distinct files under one id are all reported as
/// faults, each with its header, and none is listed.
fn separate_duplicates(
    found: &mut Listing,
    headers: Vec<(PathBuf, StoredHeader)>,
    own_path: impl Fn(&SessionHeader) -> Option<PathBuf>,
) {
    let mut by_id: HashMap<SessionId, Vec<(PathBuf, StoredHeader)>> = HashMap::new();
    for (path, stored) in headers {
        by_id.entry(stored.header.id.clone()).or_default().push((path, stored));
    }
    for (id, mut copies) in by_id {
        if copies.len() == 1 {
            found.headers.extend(copies.pop().map(|(_, stored)| stored));
            continue;
        }
        let identities: HashSet<Option<(u64, u64)>> = copies
            .iter()
            .map(|(path, _)| fs::metadata(path).ok().map(|metadata| (metadata.dev(), metadata.ino())))
            .collect();
        if identities.len() == 1 && !identities.contains(&None) {
            let own = own_path(&copies[0].1.header);
            let keep = copies.iter().position(|(path, _)| Some(path) == own.as_ref()).unwrap_or(0);
            found.headers.push(copies.swap_remove(keep).1);
            continue;
        }
        for (path, stored) in copies {
            found.faults.push(LogFault {
                id: id.clone(),
                path: Some(path),
                error: duplicate(&id),
                header: Some(Arc::clone(&stored.header)),
            });
        }
    }
}

/// Whether `error` says a directory could not be searched (so whether it holds the id is
/// unknown), as opposed to something found at the id's own path.
fn is_search_failure(error: &PersistenceError) -> bool {
    let PersistenceError::Io { source, .. } = error else { return false };
    source.kind() == io::ErrorKind::PermissionDenied || source.raw_os_error() == Some(libc::ELOOP)
}

fn entry_path(entry: &ProjectEntry) -> &Path {
    match entry {
        ProjectEntry::Session(path) | ProjectEntry::Foreign(path, _) => path,
    }
}

fn not_a_session_dir(path: &Path, what: &str) -> PersistenceError {
    PersistenceError::io(
        path,
        io::Error::new(io::ErrorKind::InvalidInput, format!("{what} stands where a session directory belongs")),
    )
}

/// The id a refused artifact stands for: its session directory's (or flat file's) name,
/// decoded when it is an encoded id.
pub(super) fn artifact_id(path: &Path) -> SessionId {
    let name = if path.file_name().is_some_and(|name| name.to_string_lossy().starts_with("session.")) {
        path.parent().and_then(Path::file_name)
    } else {
        path.file_name()
    };
    let name = name.map(|name| name.to_string_lossy().into_owned()).unwrap_or_default();
    let stem = name.strip_suffix(".jsonl.zstd").or_else(|| name.strip_suffix(".jsonl")).unwrap_or(&name);
    SessionId::from(decode_segment(stem).unwrap_or_else(|| stem.to_owned()).as_str())
}

fn flat_layout(path: &Path) -> PersistenceError {
    PersistenceError::FormatUnsupported {
        id: artifact_id(path),
        message: format!(
            "session artifact {:?} uses the unsupported flat-file layout; use a separate root or move it into a \
             project/session directory before loading",
            path.display().to_string()
        ),
        location: Some(Location::file(path)),
    }
}

pub(super) fn duplicate(id: &SessionId) -> PersistenceError {
    PersistenceError::inconsistent(
        id,
        format!("duplicate JSONL session id \"{id}\" appears in multiple project directories"),
    )
}
