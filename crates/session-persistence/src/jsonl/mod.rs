//! `JsonlStore`: the on-disk JSONL backend (reference 01 §4). One append-only file per session,
//! raw or zstd-framed, under a project directory derived from the session's cwd.
//!
//! Durability: a log appears atomically (temp file, fsync, `link`, directory fsync); appends are
//! written and fsynced, and rolled back to the prior size on failure; a failed fsync or rollback
//! poisons the session's writer. A store opened for writing holds an exclusive lock on its root
//! directory (`lock`), so a second writing process gets [`PersistenceError::Locked`].
//!
//! Isolation: every enumeration reports a log it cannot list as that log's own fault, and only
//! regular files are ever opened (`files`), so one damaged, swapped or special file never takes
//! down more than itself.
//!
//! Modules: `files` (file-system primitives), `lock` (the writer lock), `layout` (names),
//! `discovery` (finding logs, identity binding, the listing walk), `header_cache` (headers kept
//! by file identity), `read` (scanning one log), `write` (materialize, append, repair), `faults`
//! (the simulated disk of the `faults` feature, and the write path's hooks into it; without the
//! feature `no_faults`, whose hooks do nothing).

mod discovery;
#[cfg(any(test, feature = "faults"))]
pub mod faults;
#[cfg(not(any(test, feature = "faults")))]
#[path = "no_faults.rs"]
mod faults;
mod files;
mod header_cache;
mod kept;
mod layout;
mod lock;
mod read;
#[cfg(test)]
mod tests;
mod write;

use std::{
    collections::HashMap,
    fmt, fs,
    os::unix::fs::DirBuilderExt,
    path::{Path, PathBuf},
    sync::{Arc, atomic::AtomicU64},
};

use parking_lot::Mutex;
use session_core::{SessionEvent, SessionHeader, SessionId};
use tokio_util::sync::CancellationToken;

pub use self::{
    discovery::{StoreEncoding, detect_encoding, detect_session_encoding},
    header_cache::HeaderCacheStats,
    layout::{encode_segment, project_key},
    lock::LOCK_WAIT,
};
use self::{
    faults::Hooks,
    files::{exists, io_error, sync_dir},
    header_cache::CachedHeader,
    layout::project_dir_name,
    lock::StoreLock,
};
use crate::{
    backend::{Backend, HeaderPage, Listing, PageRequest, Revision, ScanOutcome, ScanSink, StoredHeader, TornTail},
    error::{PersistenceError, Result},
    format::{Compression, FrameEncoder},
};

/// Where and how a [`JsonlStore`] keeps its logs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JsonlConfig {
    /// The store's root directory; made absolute once at open.
    pub root: PathBuf,
    /// The physical encoding; one root holds one encoding.
    pub compression: Compression,
    /// Pack runs of chunk deltas into rows when writing (reading always decodes rows).
    pub pack_chunks: bool,
}

impl JsonlConfig {
    /// The default configuration for `root`: zstd, packed chunk rows.
    pub fn new(root: impl Into<PathBuf>) -> JsonlConfig {
        JsonlConfig { root: root.into(), compression: Compression::Zstd, pack_chunks: true }
    }
}

/// The JSONL backend. See the module documentation.
pub struct JsonlStore {
    root: PathBuf,
    compression: Compression,
    pack_chunks: bool,
    /// The writer lock; `None` for a read-only store.
    lock: Option<StoreLock>,
    /// Where each known id's log lives, so lookups need not scan every project directory.
    index: Mutex<HashMap<SessionId, PathBuf>>,
    headers: Mutex<HashMap<PathBuf, CachedHeader>>,
    header_hits: AtomicU64,
    /// Counts listings, to tell which cached headers the last one saw.
    listings: AtomicU64,
    header_misses: AtomicU64,
    scan_offers: AtomicU64,
    /// Sessions whose writer failed in a way that leaves the file untrustworthy.
    poisoned: Mutex<HashMap<SessionId, String>>,
    encoders: Mutex<Vec<FrameEncoder>>,
    /// The hooks of a simulated disk (feature `faults`); without one they do nothing.
    hooks: Hooks,
    /// A writable store's kept listing (`kept`), and the logs it published since that took them in.
    kept: Mutex<Option<kept::Kept>>,
    created: Mutex<Vec<kept::Created>>,
}

impl fmt::Debug for JsonlStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JsonlStore")
            .field("root", &self.root)
            .field("compression", &self.compression)
            .field("pack_chunks", &self.pack_chunks)
            .field("read_only", &self.lock.is_none())
            .finish_non_exhaustive()
    }
}

impl JsonlStore {
    /// Opens the store at `config.root` for reading and writing, creating the root (mode 0700)
    /// if it is absent, and takes the store's exclusive lock for the store's lifetime. A lock
    /// held elsewhere is waited for up to [`LOCK_WAIT`], then the open fails with
    /// [`PersistenceError::Locked`]. This blocks (briefly): async callers run it on the
    /// blocking pool.
    pub fn open(config: JsonlConfig) -> Result<JsonlStore> {
        JsonlStore::open_hooked(config, Hooks::none())
    }

    /// Opens the store at `config.root` as [`JsonlStore::open`] does, on the simulated disk
    /// `disk`: its armed faults hit this store's writes, and its
    /// [`power_loss`](faults::SimulatedDisk::power_loss) drops what this store wrote but did not
    /// fsync. Only with the cargo feature `faults`, for tests.
    #[cfg(any(test, feature = "faults"))]
    pub fn open_with_disk(config: JsonlConfig, disk: &faults::SimulatedDisk) -> Result<JsonlStore> {
        JsonlStore::open_hooked(config, Hooks::with_disk(disk))
    }

    fn open_hooked(config: JsonlConfig, hooks: Hooks) -> Result<JsonlStore> {
        let root = std::path::absolute(&config.root).map_err(io_error(&config.root))?;
        match fs::metadata(&root) {
            Ok(_) => {}
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                fs::DirBuilder::new().recursive(true).mode(0o700).create(&root).map_err(io_error(&root))?;
                if let Some(parent) = root.parent() {
                    sync_dir(parent)?;
                }
            }
            Err(error) => return Err(PersistenceError::io(&root, error)),
        }
        check_root_dir(&root)?;
        let lock = StoreLock::acquire(&root, &hooks)?;
        Ok(JsonlStore::new(root, &config, Some(lock), hooks))
    }

    /// Opens the store without the lock, for inspection while a writer may be running.
    /// Every write fails with [`PersistenceError::InvalidInput`]. An absent root lists nothing.
    pub fn open_read_only(config: JsonlConfig) -> Result<JsonlStore> {
        let root = std::path::absolute(&config.root).map_err(io_error(&config.root))?;
        if exists(&root)? {
            check_root_dir(&root)?;
        }
        Ok(JsonlStore::new(root, &config, None, Hooks::none()))
    }

    fn new(root: PathBuf, config: &JsonlConfig, lock: Option<StoreLock>, hooks: Hooks) -> JsonlStore {
        JsonlStore {
            root,
            compression: config.compression,
            pack_chunks: config.pack_chunks,
            lock,
            index: Mutex::default(),
            headers: Mutex::default(),
            header_hits: AtomicU64::new(0),
            listings: AtomicU64::new(0),
            header_misses: AtomicU64::new(0),
            scan_offers: AtomicU64::new(0),
            poisoned: Mutex::default(),
            encoders: Mutex::default(),
            hooks,
            kept: Mutex::default(),
            created: Mutex::default(),
        }
    }

    /// The store's root directory, made absolute at open.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The encoding this handle reads and writes; a log in the other encoding is reported as a
    /// fault, not read.
    pub fn compression(&self) -> Compression {
        self.compression
    }

    /// Whether this handle was opened with [`JsonlStore::open_read_only`] (it holds no lock,
    /// and every write fails).
    pub fn is_read_only(&self) -> bool {
        self.lock.is_none()
    }

    /// Whether another handle, in this process or another, holds the store's writer lock right
    /// now. A read-only handle asks before it judges open turns: while a writer runs, a log that
    /// ends inside a turn may be live, not interrupted. A writable handle answers `false`.
    pub fn writer_active(&self) -> Result<bool> {
        if self.lock.is_some() {
            return Ok(false);
        }
        lock::held_by_writer(&self.root)
    }

    /// The transcript path of `header`'s session (which need not exist yet).
    pub fn log_path(&self, header: &SessionHeader) -> Result<PathBuf> {
        Ok(self
            .root
            .join(project_dir_name(header.cwd.as_deref())?)
            .join(encode_segment(header.id.as_str())?)
            .join(self.compression.file_name()))
    }
}

fn check_root_dir(root: &Path) -> Result<()> {
    let metadata = fs::metadata(root).map_err(io_error(root))?;
    if !metadata.is_dir() {
        return Err(PersistenceError::invalid_input(format!(
            "session store root {} is not a directory",
            root.display()
        )));
    }
    fs::read_dir(root).map_err(io_error(root))?;
    Ok(())
}

impl Backend for JsonlStore {
    fn name(&self) -> &'static str {
        "jsonl"
    }

    fn scan(&self, id: &SessionId, cancel: &CancellationToken, sink: &mut dyn ScanSink) -> Result<Option<ScanOutcome>> {
        self.scan_log(id, 0, cancel, sink)
    }

    /// Seeks: bisects the file by seq to the last line (raw) or frame (zstd) boundary at or
    /// before `from_seq`, and streams the events from `from_seq` on.
    fn scan_from(
        &self,
        id: &SessionId,
        from_seq: u64,
        cancel: &CancellationToken,
        sink: &mut dyn ScanSink,
    ) -> Result<Option<ScanOutcome>> {
        self.scan_log(id, from_seq, cancel, sink)
    }

    fn revision(&self, id: &SessionId) -> Result<Option<Revision>> {
        self.log_revision(id)
    }

    fn header(&self, id: &SessionId, cancel: &CancellationToken) -> Result<Option<StoredHeader>> {
        self.log_header(id, cancel)
    }

    fn append_batch(&self, header: &SessionHeader, events: &[Arc<SessionEvent>], materialized: bool) -> Result<()> {
        self.append_events(header, events, materialized)
    }

    fn commit_repair(&self, header: &SessionHeader, torn: Option<&TornTail>, closers: &[SessionEvent]) -> Result<()> {
        self.repair(header, torn, closers)
    }

    fn list(&self, cancel: &CancellationToken) -> Result<Listing> {
        self.walk(cancel)
    }

    /// From the listing a writable store keeps (the `kept` module), each named log's header
    /// read again; a walk on a read-only handle.
    fn list_page(&self, request: &PageRequest, cancel: &CancellationToken) -> Result<HeaderPage> {
        self.kept_page(request, cancel)
    }

    fn list_children(&self, parent: &SessionId, cancel: &CancellationToken) -> Result<Listing> {
        self.kept_family(parent, cancel)
    }

    fn created_since(&self, since_ms: u64, cancel: &CancellationToken) -> Result<Listing> {
        self.kept_created_since(since_ms, cancel)
    }

    fn locate(&self, header: &SessionHeader) -> Option<PathBuf> {
        self.log_path(header).ok()
    }
}
