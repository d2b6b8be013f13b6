//! Unit tests of the store's failure paths, with injected I/O faults.

use std::{
    fs::File,
    io::{self, Write},
    sync::atomic::{AtomicBool, Ordering},
};

/// One-shot I/O faults, armed by a test before a write.
#[derive(Debug, Default)]
pub(super) struct Faults {
    partial_write: AtomicBool,
    sync: AtomicBool,
    rollback: AtomicBool,
}

impl Faults {
    /// With a partial-write fault armed: writes half the bytes, then fails.
    pub(super) fn write(&self, file: &mut File, bytes: &[u8]) -> Option<io::Result<()>> {
        if !self.partial_write.swap(false, Ordering::SeqCst) {
            return None;
        }
        Some(file.write_all(&bytes[..bytes.len() / 2]).and(Err(io::Error::other("injected write failure"))))
    }

    pub(super) fn sync(&self) -> io::Result<()> {
        if self.sync.swap(false, Ordering::SeqCst) {
            return Err(io::Error::other("injected fsync failure"));
        }
        Ok(())
    }

    pub(super) fn rollback(&self) -> io::Result<()> {
        if self.rollback.swap(false, Ordering::SeqCst) {
            return Err(io::Error::other("injected rollback failure"));
        }
        Ok(())
    }
}
