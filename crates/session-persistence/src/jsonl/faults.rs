//! Simulated storage faults for the JSONL store (cargo feature `faults`): a [`SimulatedDisk`]
//! given to [`JsonlStore::open_with_disk`](super::JsonlStore::open_with_disk) fails an fsync,
//! tears a write at a chosen byte, fails a rollback, and at a simulated power loss drops every
//! byte that was not yet fsynced.
//!
//! The disk is a model kept beside the real files, not a second file system: the store still
//! writes real files, and the disk records, per log, the length its last successful fsync made
//! durable and whether the log's name is durable (a new log's name is once its session directory
//! was fsynced after the `link`). [`SimulatedDisk::power_loss`] then cuts each log back to its
//! durable length and removes each log whose name never became durable, which is what a machine
//! that lost power mid-run shows after reboot. Simplifications, each on the side of losing less
//! than a real disk could: a cut that was not fsynced stays cut (the disk keeps no old bytes to
//! bring back), a removed name stays removed (the store only removes its temp names, which readers
//! ignore), and directories are not modelled (the store fsyncs each parent when it creates one).
//!
//! Each armed fault fires once, at the next operation of its kind on any store opened with the
//! disk. Without the feature none of this is compiled: the write path's hooks (`Hooks`) are empty.

use std::{
    collections::HashMap,
    fmt, fs, io,
    path::{Path, PathBuf},
    sync::Arc,
};

use parking_lot::Mutex;

type ReadHook = Box<dyn FnOnce(&Path) + Send>;
type LockWaitHook = Box<dyn FnOnce() + Send>;

/// A simulated disk under one or more [`JsonlStore`](super::JsonlStore)s: faults to inject, and a
/// power loss that drops what was not fsynced. Clones share one disk. See the module documentation.
#[derive(Clone, Default)]
pub struct SimulatedDisk {
    state: Arc<Mutex<DiskState>>,
}

#[derive(Default)]
struct DiskState {
    /// Every log a store with this disk wrote since the last power loss, by path.
    logs: HashMap<PathBuf, LogState>,
    fail_fsync: bool,
    fail_dir_fsync: bool,
    fail_rollback: bool,
    tear_at: Option<usize>,
    after_read: Vec<ReadHook>,
    lock_wait: Option<LockWaitHook>,
    /// How many stores opened with this disk are alive.
    open_stores: usize,
}

/// What the disk knows of one log.
#[derive(Debug, Clone, Copy)]
struct LogState {
    /// The length the last successful fsync of the file made durable.
    durable_len: u64,
    /// Whether the file's name survives a power loss (its directory was fsynced after it appeared).
    name_durable: bool,
}

/// What a [`SimulatedDisk::power_loss`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PowerLossReport {
    /// Logs cut back, with the number of bytes each lost.
    pub cut: Vec<(PathBuf, u64)>,
    /// Logs removed because their creation was never made durable.
    pub removed: Vec<PathBuf>,
}

impl fmt::Debug for SimulatedDisk {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.state.lock();
        f.debug_struct("SimulatedDisk")
            .field("logs", &state.logs.len())
            .field("open_stores", &state.open_stores)
            .finish_non_exhaustive()
    }
}

fn injected(what: &str) -> io::Error {
    io::Error::other(format!("injected {what} failure (simulated disk)"))
}

impl SimulatedDisk {
    /// A disk with no fault armed.
    pub fn new() -> SimulatedDisk {
        SimulatedDisk::default()
    }

    /// The next fsync of a log's data (after an append, after a repair's cut, or of a new log's
    /// temp file) fails and does nothing: what it should have made durable is not. A failed fsync
    /// of a log poisons the session's writer, as a real one does.
    pub fn fail_next_fsync(&self) {
        self.state.lock().fail_fsync = true;
    }

    /// The next fsync of a session directory after a new log was linked into it fails: the log
    /// is there, but its name is not durable (a power loss removes it), and the writer is poisoned.
    pub fn fail_next_dir_fsync(&self) {
        self.state.lock().fail_dir_fsync = true;
    }

    /// The next write of log bytes (an append, a repair's batch, a new log's temp file) writes
    /// only its first `at` bytes (all of them if it has fewer) and then fails.
    pub fn tear_next_write(&self, at: usize) {
        self.state.lock().tear_at = Some(at);
    }

    /// The next rollback of a failed append (the cut back to the prior size and its fsync) fails
    /// before it cuts, leaving whatever the append wrote: the session's writer is poisoned.
    pub fn fail_next_rollback(&self) {
        self.state.lock().fail_rollback = true;
    }

    /// Runs `hook` with the log's path once, the next time a scan has read a log and before it
    /// checks whether the file changed meanwhile: a writer that races the read.
    pub fn after_next_read(&self, hook: impl FnOnce(&Path) + Send + 'static) {
        self.state.lock().after_read.push(Box::new(hook));
    }

    /// Runs `hook` once, when an open with this disk finds the store's lock held and starts to
    /// wait for it: a holder can let go exactly while the open waits.
    pub fn on_lock_wait(&self, hook: impl FnOnce() + Send + 'static) {
        self.state.lock().lock_wait = Some(Box::new(hook));
    }

    /// Simulates a power loss: every log written through this disk is cut back to the length its
    /// last successful fsync made durable, and a log whose name never became durable is removed.
    /// Afterwards everything on disk counts as durable and no fault is armed. Every store opened
    /// with the disk must be dropped first (a process loses its handles with the power); with
    /// one still open this fails with `InvalidInput` and changes nothing.
    pub fn power_loss(&self) -> io::Result<PowerLossReport> {
        self.power_loss_keeping(0)
    }

    /// As [`SimulatedDisk::power_loss`], but each log keeps up to `unsynced` bytes past its durable
    /// length, as a disk that had written part of what was never fsynced before the power went.
    pub fn power_loss_keeping(&self, unsynced: u64) -> io::Result<PowerLossReport> {
        let mut state = self.state.lock();
        if state.open_stores > 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("a simulated power loss with {} store(s) still open on the disk", state.open_stores),
            ));
        }
        let mut report = PowerLossReport::default();
        let mut logs: Vec<(PathBuf, LogState)> = state.logs.drain().collect();
        logs.sort_by(|a, b| a.0.cmp(&b.0));
        for (path, log) in logs {
            if !log.name_durable {
                match fs::remove_file(&path) {
                    Ok(()) => report.removed.push(path),
                    Err(error) if error.kind() == io::ErrorKind::NotFound => {}
                    Err(error) => return Err(error),
                }
                continue;
            }
            let len = match fs::metadata(&path) {
                Ok(metadata) => metadata.len(),
                Err(error) if error.kind() == io::ErrorKind::NotFound => continue,
                Err(error) => return Err(error),
            };
            let keep = log.durable_len.saturating_add(unsynced);
            if len > keep {
                fs::OpenOptions::new().write(true).open(&path)?.set_len(keep)?;
                report.cut.push((path, len - keep));
            }
        }
        *state = DiskState::default();
        Ok(report)
    }
}

/// The hook points of the JSONL write path. With a [`SimulatedDisk`] they inject its faults and
/// keep its model; without one (and without the feature, where this type is empty) they do nothing.
#[derive(Debug)]
pub(super) struct Hooks {
    disk: Option<SimulatedDisk>,
}

impl Hooks {
    /// The hooks of a store without a simulated disk: they do nothing.
    pub(super) fn none() -> Hooks {
        Hooks { disk: None }
    }

    /// The hooks of a store opened with `disk`, counted as open until dropped.
    pub(super) fn with_disk(disk: &SimulatedDisk) -> Hooks {
        disk.state.lock().open_stores += 1;
        Hooks { disk: Some(disk.clone()) }
    }

    fn with_state<T: Default>(&self, action: impl FnOnce(&mut DiskState) -> T) -> T {
        match &self.disk {
            Some(disk) => action(&mut disk.state.lock()),
            None => T::default(),
        }
    }

    /// Before the store first changes the log at `path` (now `len` bytes long): a log the disk
    /// has not seen is durable as it stands.
    pub(super) fn opened(&self, path: &Path, len: u64) {
        self.with_state(|state| {
            state.logs.entry(path.to_owned()).or_insert(LogState { durable_len: len, name_durable: true });
        });
    }

    /// How many of the `len` bytes of the next write reach the file before it fails; `None`
    /// writes them all.
    pub(super) fn tear(&self, len: usize) -> Option<usize> {
        self.with_state(|state| state.tear_at.take().map(|at| at.min(len)))
    }

    /// Before a data fsync: an armed fsync fault fails it.
    pub(super) fn fsync(&self) -> io::Result<()> {
        match self.with_state(|state| std::mem::take(&mut state.fail_fsync)) {
            true => Err(injected("fsync")),
            false => Ok(()),
        }
    }

    /// Before the directory fsync that publishes a new log: an armed directory fault fails it.
    pub(super) fn dir_fsync(&self) -> io::Result<()> {
        match self.with_state(|state| std::mem::take(&mut state.fail_dir_fsync)) {
            true => Err(injected("directory fsync")),
            false => Ok(()),
        }
    }

    /// Before a rollback: an armed rollback fault fails it.
    pub(super) fn rollback(&self) -> io::Result<()> {
        match self.with_state(|state| std::mem::take(&mut state.fail_rollback)) {
            true => Err(injected("rollback")),
            false => Ok(()),
        }
    }

    /// After a successful fsync of the log at `path`, now `len` bytes long.
    pub(super) fn synced(&self, path: &Path, len: u64) {
        self.with_state(|state| {
            let log = state.logs.entry(path.to_owned()).or_insert(LogState { durable_len: len, name_durable: true });
            log.durable_len = len;
        });
    }

    /// After a new log of `len` fsynced bytes was linked at `path`: its name is not durable yet.
    pub(super) fn linked(&self, path: &Path, len: u64) {
        self.with_state(|state| {
            state.logs.insert(path.to_owned(), LogState { durable_len: len, name_durable: false });
        });
    }

    /// After a successful fsync of the directory `dir`: the names in it are durable.
    pub(super) fn dir_synced(&self, dir: &Path) {
        self.with_state(|state| {
            for (path, log) in &mut state.logs {
                if path.parent() == Some(dir) {
                    log.name_durable = true;
                }
            }
        });
    }

    /// Between a scan's read of the log at `path` and its second `stat`.
    pub(super) fn after_read(&self, path: &Path) {
        if let Some(hook) = self.with_state(|state| state.after_read.pop()) {
            hook(path);
        }
    }

    /// When an open finds the store's lock held and starts to wait.
    pub(super) fn lock_wait(&self) {
        if let Some(hook) = self.with_state(|state| state.lock_wait.take()) {
            hook();
        }
    }
}

impl Drop for Hooks {
    fn drop(&mut self) {
        self.with_state(|state| state.open_stores -= 1);
    }
}
