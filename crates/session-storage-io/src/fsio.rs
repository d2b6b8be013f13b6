//! Bounded, non-blocking file primitives for every file the storage crates touch (the JSONL
//! store's logs, the projection cache's records): only a regular file is ever opened (a FIFO,
//! device or socket where a file belongs is refused instead of blocking the reader or acting on
//! its open), a file is never read past a size limit, and a directory is fsynced through a
//! descriptor that can only be a directory.

use std::{
    fs::{self, File, Metadata, OpenOptions},
    io::{self, Read},
    os::unix::fs::{FileTypeExt, OpenOptionsExt},
    path::Path,
};

/// What kind of file `metadata` describes, for messages.
fn kind_of(metadata: &Metadata) -> &'static str {
    let file_type = metadata.file_type();
    if file_type.is_dir() {
        "a directory"
    } else if file_type.is_fifo() {
        "a FIFO"
    } else if file_type.is_socket() {
        "a socket"
    } else if file_type.is_block_device() || file_type.is_char_device() {
        "a device"
    } else {
        "not a regular file"
    }
}

/// The `InvalidInput` error for something other than a regular file where one belongs.
pub fn not_regular(metadata: &Metadata) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, format!("the file is {}, not a regular file", kind_of(metadata)))
}

/// The `InvalidInput` error for something other than a directory where one belongs.
pub fn not_regular_dir(metadata: &Metadata) -> io::Error {
    let kind = if metadata.file_type().is_symlink() {
        "a symlink"
    } else if metadata.is_file() {
        "a regular file"
    } else {
        kind_of(metadata)
    };
    io::Error::new(io::ErrorKind::InvalidInput, format!("the path is {kind}, not a directory"))
}

/// The metadata of the regular file at `path`, following symlinks: `Ok(None)` if nothing is
/// there, an `InvalidInput` error if something other than a regular file is, a `NotFound` error
/// for a symlink whose target is missing (a file that went missing, not one that never was).
pub fn regular_metadata(path: &Path) -> io::Result<Option<Metadata>> {
    match fs::metadata(path) {
        Ok(metadata) if metadata.is_file() => Ok(Some(metadata)),
        Ok(metadata) => Err(not_regular(&metadata)),
        Err(error) if error.kind() == io::ErrorKind::NotFound => match fs::symlink_metadata(path) {
            Ok(_) => {
                Err(io::Error::new(io::ErrorKind::NotFound, "the file is a symlink to nothing (its target is missing)"))
            }
            Err(_) => Ok(None),
        },
        Err(error) => Err(error),
    }
}

/// Opens the regular file at `path` with `options`. Anything else is refused before it is opened
/// (a device may act on being opened), and the open itself never blocks: it is made with
/// `O_NONBLOCK` and `O_NOCTTY`, so a FIFO or device swapped in after the check cannot hang the
/// caller or become its terminal, and the type is checked again on the open descriptor.
/// `O_NONBLOCK` does nothing to regular files. `Ok(None)` if nothing is there.
pub fn open_regular_with(path: &Path, options: &mut OpenOptions) -> io::Result<Option<(File, Metadata)>> {
    if regular_metadata(path)?.is_none() {
        return Ok(None);
    }
    let file = match options.custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC).open(path) {
        Ok(file) => file,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(error) => return Err(error),
    };
    let metadata = file.metadata()?;
    if !metadata.is_file() {
        return Err(not_regular(&metadata));
    }
    Ok(Some((file, metadata)))
}

/// Opens the regular file at `path` for reading and writing, creating it with `mode` if nothing
/// is there (a lock or side file): as [`open_regular_with`], anything else there is refused
/// before it is opened, the open never blocks, and the type is checked again on the descriptor.
pub fn create_regular(path: &Path, mode: u32) -> io::Result<File> {
    regular_metadata(path)?;
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(mode)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC)
        .open(path)?;
    let metadata = file.metadata()?;
    if !metadata.is_file() {
        return Err(not_regular(&metadata));
    }
    Ok(file)
}

/// Opens the regular file at `path` for reading; see [`open_regular_with`].
pub fn open_regular(path: &Path) -> io::Result<Option<File>> {
    Ok(open_regular_with(path, OpenOptions::new().read(true))?.map(|(file, _)| file))
}

/// Reads the whole regular file at `path`, refusing one over `limit` bytes. `Ok(None)` if
/// nothing is there; see [`open_regular_with`].
pub fn read_regular(path: &Path, limit: u64) -> io::Result<Option<Vec<u8>>> {
    let Some(file) = open_regular(path)? else { return Ok(None) };
    let mut bytes = Vec::new();
    file.take(limit.saturating_add(1)).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > limit {
        return Err(io::Error::new(io::ErrorKind::InvalidData, format!("the file is over the {limit}-byte limit")));
    }
    Ok(Some(bytes))
}

/// Fsyncs the directory `dir`, opened with `O_DIRECTORY` so that anything else fails at once.
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    OpenOptions::new().read(true).custom_flags(libc::O_DIRECTORY | libc::O_CLOEXEC).open(dir)?.sync_all()
}
