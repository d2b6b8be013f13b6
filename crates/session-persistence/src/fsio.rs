//! Bounded, non-blocking file reads for the crates that keep files beside the logs (the
//! projection cache's records): a FIFO, device or socket put where a file belongs is refused
//! instead of blocking the reader, and a file is never read past a size limit.

use std::{
    fs::{File, OpenOptions},
    io::{self, Read},
    os::unix::fs::OpenOptionsExt,
    path::Path,
};

/// Opens the regular file at `path` for reading without ever blocking on the open (it is made
/// with `O_NONBLOCK`, which does nothing to regular files) and checks its type on the open
/// descriptor. `Ok(None)` if nothing is there; an `InvalidInput` error for anything but a
/// regular file.
pub fn open_regular(path: &Path) -> io::Result<Option<File>> {
    let file = match OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC).open(path) {
        Ok(file) => file,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(error) => return Err(error),
    };
    if !file.metadata()?.is_file() {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "not a regular file"));
    }
    Ok(Some(file))
}

/// Reads the whole regular file at `path`, refusing one over `limit` bytes. `Ok(None)` if
/// nothing is there; see [`open_regular`].
pub fn read_regular(path: &Path, limit: u64) -> io::Result<Option<Vec<u8>>> {
    let Some(file) = open_regular(path)? else { return Ok(None) };
    let mut bytes = Vec::new();
    file.take(limit.saturating_add(1)).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > limit {
        return Err(io::Error::new(io::ErrorKind::InvalidData, format!("the file is over the {limit}-byte limit")));
    }
    Ok(Some(bytes))
}
