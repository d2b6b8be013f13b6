//! The JSONL write path's fault hooks without the `faults` feature: an empty type whose hooks do
//! nothing and compile away (see `faults.rs` for what they do with the feature).

use std::{io, path::Path};

/// The hook points of the JSONL write path; without the `faults` feature, none does anything.
#[derive(Debug)]
pub(super) struct Hooks;

impl Hooks {
    /// The hooks of a store without a simulated disk.
    #[inline(always)]
    pub(super) fn none() -> Hooks {
        Hooks
    }

    #[inline(always)]
    pub(super) fn opened(&self, _path: &Path, _len: u64) {}

    #[inline(always)]
    pub(super) fn tear(&self, _len: usize) -> Option<usize> {
        None
    }

    #[inline(always)]
    pub(super) fn fsync(&self) -> io::Result<()> {
        Ok(())
    }

    #[inline(always)]
    pub(super) fn dir_fsync(&self) -> io::Result<()> {
        Ok(())
    }

    #[inline(always)]
    pub(super) fn rollback(&self) -> io::Result<()> {
        Ok(())
    }

    #[inline(always)]
    pub(super) fn synced(&self, _path: &Path, _len: u64) {}

    #[inline(always)]
    pub(super) fn linked(&self, _path: &Path, _len: u64) {}

    #[inline(always)]
    pub(super) fn dir_synced(&self, _dir: &Path) {}

    #[inline(always)]
    pub(super) fn after_read(&self, _path: &Path) {}

    #[inline(always)]
    pub(super) fn lock_wait(&self) {}
}
