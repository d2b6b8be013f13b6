//! The path and permission rules of a database file (reference 05 §2.1): a parent directory that
//! is a real directory owned by the current user and not group- or world-writable, and a file
//! that is a regular file (not a symlink) owned by the current user with no group or world bits.
//! Each refusal says which rule failed and how to fix it.

use std::{
    fs::{self, DirBuilder, Metadata, OpenOptions},
    io,
    os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt},
    path::{Path, PathBuf},
};

use session_persistence::PersistenceError;

/// What the database is: `session database` for the log store, another noun for another file.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Subject(pub(crate) &'static str);

pub(crate) const SESSION_DATABASE: Subject = Subject("session database");

fn refused(path: &Path, message: String) -> PersistenceError {
    PersistenceError::Refused { path: path.to_owned(), message }
}

fn io_error(path: &Path) -> impl FnOnce(io::Error) -> PersistenceError + '_ {
    move |error| PersistenceError::io(path, error)
}

fn current_uid() -> u32 {
    rustix::process::getuid().as_raw()
}

/// Resolves `path` to an absolute path (without following symlinks).
pub(crate) fn absolute(path: &Path) -> Result<PathBuf, PersistenceError> {
    std::path::absolute(path).map_err(io_error(path))
}

/// The directory that holds `path`.
pub(crate) fn parent_of(path: &Path) -> PathBuf {
    path.parent().filter(|parent| !parent.as_os_str().is_empty()).unwrap_or(Path::new("/")).to_owned()
}

/// Creates the parent directory of `path` (and its ancestors) with mode 0700 if it is missing.
pub(crate) fn create_parent(path: &Path) -> Result<(), PersistenceError> {
    let parent = parent_of(path);
    DirBuilder::new().recursive(true).mode(0o700).create(&parent).map_err(io_error(&parent))?;
    Ok(())
}

/// The parent rule: a real directory, owned by the current user, not group- or world-writable.
pub(crate) fn check_parent(subject: Subject, path: &Path) -> Result<(), PersistenceError> {
    let dir = parent_of(path);
    let metadata = fs::symlink_metadata(&dir).map_err(io_error(&dir))?;
    let shown = dir.display();
    let noun = subject.0;
    if !metadata.file_type().is_dir() {
        let what = if metadata.file_type().is_symlink() { "a symbolic link" } else { "not a directory" };
        return Err(refused(
            &dir,
            format!(
                "{noun} parent \"{shown}\" must be a real directory: it is {what}; put the database in a real directory \
                 (not through a symbolic link)"
            ),
        ));
    }
    let uid = current_uid();
    let mode = metadata.mode() & 0o7777;
    if metadata.uid() != uid || mode & 0o022 != 0 {
        let fix = if metadata.uid() != uid {
            format!("it is owned by uid {}, not {uid}; use a directory you own, or chown it", metadata.uid())
        } else {
            format!("it has mode {mode:04o}; run `chmod go-w \"{shown}\"`")
        };
        return Err(refused(
            &dir,
            format!("{noun} parent \"{shown}\" must be owned by the current user and not group/world-writable: {fix}"),
        ));
    }
    Ok(())
}

/// The file rule: a regular file, not a symlink, owned by the current user, mode without group
/// or world bits. `Ok(None)` if nothing is at `path`.
pub(crate) fn check_file(subject: Subject, path: &Path) -> Result<Option<Metadata>, PersistenceError> {
    let metadata = match fs::symlink_metadata(path) {
        Ok(metadata) => metadata,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(error) => return Err(PersistenceError::io(path, error)),
    };
    check_regular(subject, path, &metadata)?;
    let uid = current_uid();
    let mode = metadata.mode() & 0o7777;
    if metadata.uid() != uid || mode & 0o077 != 0 {
        let shown = path.display();
        let fix = if metadata.uid() != uid {
            format!(
                "it is owned by uid {}, not {uid}; copy it to a file you own (and `chmod 600` the copy)",
                metadata.uid()
            )
        } else {
            format!("it has mode {mode:04o}; run `chmod 600 \"{shown}\"`")
        };
        return Err(refused(
            path,
            format!(
                "{} \"{shown}\" must be owned by the current user and accessible only by that user: {fix}",
                subject.0
            ),
        ));
    }
    Ok(Some(metadata))
}

/// The part of the file rule a read-only open keeps: a regular file, not a symlink.
pub(crate) fn check_regular(subject: Subject, path: &Path, metadata: &Metadata) -> Result<(), PersistenceError> {
    if metadata.file_type().is_file() {
        return Ok(());
    }
    let what = if metadata.file_type().is_symlink() {
        "it is a symbolic link; point the store at the file itself"
    } else {
        "it is not a regular file"
    };
    Err(refused(
        path,
        format!("{} \"{}\" must be a regular file, not a symbolic link: {what}", subject.0, path.display()),
    ))
}

/// Creates the file with mode 0600 unless it exists, then checks the file rule, which must now
/// find a file.
pub(crate) fn create_file(subject: Subject, path: &Path) -> Result<Metadata, PersistenceError> {
    match OpenOptions::new().write(true).create_new(true).mode(0o600).open(path) {
        Ok(_) => {
            session_storage_io::fsio::sync_dir(&parent_of(path)).map_err(io_error(path))?;
        }
        Err(error) if error.kind() == io::ErrorKind::AlreadyExists => {}
        Err(error) => return Err(PersistenceError::io(path, error)),
    }
    match check_file(subject, path)? {
        Some(metadata) => Ok(metadata),
        None => Err(PersistenceError::io(
            path,
            io::Error::new(io::ErrorKind::NotFound, "the file vanished after it was created"),
        )),
    }
}
