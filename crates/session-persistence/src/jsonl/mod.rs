//! `JsonlStore`: the on-disk JSONL backend (reference 01 §4). One append-only file per session,
//! raw or zstd-framed, under a project directory derived from the session's cwd.
//!
//! Durability: a log appears atomically (temp file, fsync, `link`, directory fsync); appends are
//! written and fsynced, and rolled back to the prior size on failure; a failed fsync or rollback
//! poisons the session's writer. A store opened for writing holds an exclusive advisory lock on
//! `<root>/.lock`, so a second writing process gets [`PersistenceError::Locked`].

mod layout;
#[cfg(test)]
mod tests;

use std::{
    collections::{HashMap, HashSet},
    fmt,
    fs::{self, DirBuilder, File, Metadata, OpenOptions},
    io::{self, Write},
    os::unix::fs::{DirBuilderExt, FileExt, MetadataExt, OpenOptionsExt},
    path::{Path, PathBuf},
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::SystemTime,
};

use parking_lot::Mutex;
use session_core::{SessionEvent, SessionHeader, SessionId};
use tokio_util::sync::CancellationToken;

use self::layout::project_dir_name;
pub use self::layout::{encode_segment, project_key};
use crate::{
    backend::{Backend, Revision, ScanOutcome, ScanSink, StoredHeader, SurveyEntry},
    error::{CorruptKind, Location, PersistenceError, Result},
    format::{
        ByteSource, Compression, FrameEncoder, HeaderRead, KnownHeader, encode_batch, encode_header_line, read_header,
        scan_log_known,
    },
};

/// How often a scan re-reads a log that changed while it was being read before giving up.
const MAX_READ_ATTEMPTS: u32 = 3;

const LOCK_FILE: &str = ".lock";

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

/// Counters of the listing's header cache.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HeaderCacheStats {
    /// Headers served from the cache without reading the file.
    pub hits: u64,
    /// Headers read from their file.
    pub misses: u64,
    pub entries: usize,
    /// Scans offered a listed header whose file kept its identity; a scan uses it only if the
    /// log still starts with the header's stored bytes.
    pub scan_offers: u64,
}

/// A decoded header, valid while the file keeps its identity (headers are never rewritten).
#[derive(Debug, Clone)]
struct CachedHeader {
    identity: FileIdentity,
    header: Arc<SessionHeader>,
    /// The header's stored bytes, if it decoded without error: a scan of a log that still starts
    /// with them skips decoding the header again.
    known: Option<KnownHeader>,
    /// The listing that last saw this file; entries no listing saw are dropped.
    listing: u64,
}

/// What tells one log file from another at the same path. Headers are never rewritten, so a file
/// with the same identity has the same header. Where the file system records no birth time, the
/// change time stands in: it moves on every append, which only costs a re-read, while inode reuse
/// could otherwise pass a replaced file off as the cached one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FileIdentity {
    dev: u64,
    ino: u64,
    created: Option<SystemTime>,
    ctime_ns: Option<i128>,
}

impl FileIdentity {
    fn of(metadata: &Metadata) -> FileIdentity {
        let created = metadata.created().ok();
        let ctime_ns = match created {
            Some(_) => None,
            None => Some(i128::from(metadata.ctime()) * 1_000_000_000 + i128::from(metadata.ctime_nsec())),
        };
        FileIdentity { dev: metadata.dev(), ino: metadata.ino(), created, ctime_ns }
    }
}

/// The JSONL backend. See the module documentation.
pub struct JsonlStore {
    root: PathBuf,
    compression: Compression,
    pack_chunks: bool,
    /// The locked `<root>/.lock`; `None` for a read-only store.
    lock: Option<File>,
    root_checked: AtomicBool,
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
    #[cfg(test)]
    faults: tests::Faults,
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

/// How long [`JsonlStore::open`] waits for a held lock. A lock is an `flock`, shared by every
/// descriptor of its open file: it outlives its store for a moment when the process spawned a
/// child between `fork` and `exec`, or when a writer is just closing. A real second writer still
/// holds it after the wait.
pub const LOCK_WAIT: std::time::Duration = std::time::Duration::from_millis(500);

/// Takes the exclusive lock on `lock`, waiting up to [`LOCK_WAIT`] for a holder to let go.
fn take_lock(lock: &File, lock_path: &Path) -> Result<()> {
    let deadline = std::time::Instant::now() + LOCK_WAIT;
    loop {
        match lock.try_lock() {
            Ok(()) => return Ok(()),
            Err(fs::TryLockError::WouldBlock) if std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            Err(fs::TryLockError::WouldBlock) => return Err(PersistenceError::Locked { path: lock_path.to_owned() }),
            Err(fs::TryLockError::Error(error)) => return Err(PersistenceError::io(lock_path, error)),
        }
    }
}

fn io_error(path: &Path) -> impl FnOnce(io::Error) -> PersistenceError + '_ {
    move |error| PersistenceError::io(path, error)
}

/// Whether `path` exists. Only `NotFound` means absent; every other failure is surfaced.
fn exists(path: &Path) -> Result<bool> {
    match fs::metadata(path) {
        Ok(_) => Ok(true),
        Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(error) => Err(PersistenceError::io(path, error)),
    }
}

fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir).and_then(|dir| dir.sync_all()).map_err(io_error(dir))
}

/// `"<dev>:<ino>:<size>:<mtimeNs>:<ctimeNs>"`, the reference's revision token.
fn revision_of(metadata: &Metadata) -> Revision {
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

fn random_suffix() -> String {
    use std::hash::{BuildHasher, Hasher};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map_or(0, |since| since.as_nanos()));
    hasher.write_u32(std::process::id());
    hasher.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    format!("{:012x}", hasher.finish() & 0xFFFF_FFFF_FFFF)
}

/// Positioned reads of an open file, bounded to the length it had when the read began.
struct FileSource<'f> {
    file: &'f File,
    len: u64,
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

/// Checks the header's identity before anything reaches the caller's sink.
struct BoundSink<'a> {
    store: &'a JsonlStore,
    path: &'a Path,
    id: &'a SessionId,
    inner: &'a mut dyn ScanSink,
}

impl ScanSink for BoundSink<'_> {
    fn header(&mut self, header: &Arc<SessionHeader>) -> Result<()> {
        self.store.check_identity(self.path, header, Some(self.id))?;
        self.inner.header(header)
    }

    fn event(&mut self, event: Arc<SessionEvent>) -> Result<()> {
        self.inner.event(event)
    }

    fn restart(&mut self) -> bool {
        self.inner.restart()
    }

    fn read_ahead(&self) -> bool {
        self.inner.read_ahead()
    }
}

impl JsonlStore {
    /// Opens the store at `config.root` for reading and writing, creating the root (mode 0700)
    /// if it is absent, and takes the store's exclusive advisory lock for the store's lifetime.
    /// A lock held elsewhere is waited for up to [`LOCK_WAIT`], then the open fails with
    /// [`PersistenceError::Locked`].
    pub fn open(config: JsonlConfig) -> Result<JsonlStore> {
        let root = std::path::absolute(&config.root).map_err(io_error(&config.root))?;
        match fs::metadata(&root) {
            Ok(_) => {}
            Err(error) if error.kind() == io::ErrorKind::NotFound => {
                DirBuilder::new().recursive(true).mode(0o700).create(&root).map_err(io_error(&root))?;
                if let Some(parent) = root.parent() {
                    sync_dir(parent)?;
                }
            }
            Err(error) => return Err(PersistenceError::io(&root, error)),
        }
        check_root_dir(&root)?;
        let lock_path = root.join(LOCK_FILE);
        let lock = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(&lock_path)
            .map_err(io_error(&lock_path))?;
        take_lock(&lock, &lock_path)?;
        Ok(JsonlStore::new(root, &config, Some(lock)))
    }

    /// Opens the store without the lock, for inspection while a writer may be running.
    /// Every write fails with [`PersistenceError::InvalidInput`]. An absent root lists nothing.
    pub fn open_read_only(config: JsonlConfig) -> Result<JsonlStore> {
        let root = std::path::absolute(&config.root).map_err(io_error(&config.root))?;
        if exists(&root)? {
            check_root_dir(&root)?;
        }
        Ok(JsonlStore::new(root, &config, None))
    }

    fn new(root: PathBuf, config: &JsonlConfig, lock: Option<File>) -> JsonlStore {
        JsonlStore {
            root,
            compression: config.compression,
            pack_chunks: config.pack_chunks,
            lock,
            root_checked: AtomicBool::new(false),
            index: Mutex::default(),
            headers: Mutex::default(),
            header_hits: AtomicU64::new(0),
            listings: AtomicU64::new(0),
            header_misses: AtomicU64::new(0),
            scan_offers: AtomicU64::new(0),
            poisoned: Mutex::default(),
            encoders: Mutex::default(),
            #[cfg(test)]
            faults: tests::Faults::default(),
        }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn compression(&self) -> Compression {
        self.compression
    }

    pub fn is_read_only(&self) -> bool {
        self.lock.is_none()
    }

    pub fn header_cache_stats(&self) -> HeaderCacheStats {
        HeaderCacheStats {
            hits: self.header_hits.load(Ordering::Relaxed),
            misses: self.header_misses.load(Ordering::Relaxed),
            entries: self.headers.lock().len(),
            scan_offers: self.scan_offers.load(Ordering::Relaxed),
        }
    }

    /// The transcript path of `header`'s session (which need not exist yet).
    pub fn log_path(&self, header: &SessionHeader) -> Result<PathBuf> {
        Ok(self
            .root
            .join(project_dir_name(header.cwd.as_deref())?)
            .join(encode_segment(header.id.as_str())?)
            .join(self.compression.file_name()))
    }

    fn check_writable(&self) -> Result<()> {
        if self.lock.is_none() {
            return Err(PersistenceError::invalid_input(format!(
                "session store {} is open read-only",
                self.root.display()
            )));
        }
        Ok(())
    }

    fn check_poisoned(&self, id: &SessionId) -> Result<()> {
        match self.poisoned.lock().get(id) {
            Some(message) => Err(PersistenceError::Poisoned { message: message.clone() }),
            None => Ok(()),
        }
    }

    fn poison(&self, id: &SessionId, message: String) {
        self.poisoned.lock().entry(id.clone()).or_insert(message);
    }

    // --- discovery ---

    /// The real project directories under the root; symlinked entries are not followed.
    /// The project directories of the root. Hidden directories (a leading `.`) are not projects:
    /// project keys never start with a dot, so a host may keep its own data there (the gateway
    /// keeps its projection checkpoints in `.projection-cache`).
    fn project_dirs(&self) -> Result<Vec<PathBuf>> {
        let mut dirs = subdirectories(&self.root)?;
        dirs.retain(|dir| !dir.file_name().is_some_and(|name| name.to_string_lossy().starts_with('.')));
        Ok(dirs)
    }

    /// The session directories of a project; a transcript file directly in the project is the
    /// retired flat layout, which is refused.
    fn session_dirs(&self, project: &Path) -> Result<Vec<PathBuf>> {
        let entries = match fs::read_dir(project) {
            Ok(entries) => entries,
            Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(error) => return Err(PersistenceError::io(project, error)),
        };
        let mut dirs = Vec::new();
        for entry in entries {
            let entry = entry.map_err(io_error(project))?;
            let file_type = entry.file_type().map_err(io_error(&entry.path()))?;
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if file_type.is_file() && (name.ends_with(".jsonl") || name.ends_with(".jsonl.zstd")) {
                return Err(flat_layout(&entry.path()));
            }
            if file_type.is_dir() {
                dirs.push(entry.path());
            }
        }
        Ok(dirs)
    }

    fn reject_opposite(&self, session_dir: &Path) -> Result<()> {
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

    /// Once per store: no session directory under the root holds the other encoding, and no
    /// project uses the flat layout.
    fn check_root(&self, cancel: &CancellationToken) -> Result<()> {
        if self.root_checked.load(Ordering::Acquire) {
            return Ok(());
        }
        for project in self.project_dirs()? {
            for dir in self.session_dirs(&project)? {
                check_cancel(cancel)?;
                self.reject_opposite(&dir)?;
            }
        }
        self.root_checked.store(true, Ordering::Release);
        Ok(())
    }

    /// The indexed log path of `id`, unchecked but for the other encoding beside it: whoever
    /// opens it learns whether it still exists.
    fn indexed_log(&self, id: &SessionId) -> Result<Option<PathBuf>> {
        let Some(path) = self.index.lock().get(id).cloned() else { return Ok(None) };
        if let Some(dir) = path.parent() {
            self.reject_opposite(dir)?;
        }
        Ok(Some(path))
    }

    /// Finds the one log of `id`: through the index, or by probing every project directory.
    fn find_log(&self, id: &SessionId, cancel: &CancellationToken) -> Result<Option<PathBuf>> {
        let segment = encode_segment(id.as_str())?;
        let indexed = self.index.lock().get(id).cloned();
        if let Some(path) = indexed {
            if let Some(dir) = path.parent() {
                self.reject_opposite(dir)?;
            }
            if exists(&path)? {
                return Ok(Some(path));
            }
            self.index.lock().remove(id);
        }
        let mut matches = Vec::new();
        for project in self.project_dirs()? {
            check_cancel(cancel)?;
            for compression in [Compression::Zstd, Compression::None] {
                let flat = project.join(format!("{segment}{}", compression.suffix()));
                if exists(&flat)? {
                    return Err(flat_layout(&flat));
                }
            }
            let dir = project.join(&segment);
            self.reject_opposite(&dir)?;
            let path = dir.join(self.compression.file_name());
            if exists(&path)? {
                matches.push(path);
            }
        }
        if matches.len() > 1 {
            return Err(duplicate(id));
        }
        let found = matches.pop();
        if let Some(path) = &found {
            self.index.lock().insert(id.clone(), path.clone());
        }
        Ok(found)
    }

    /// Identity binding: the header names the requested id, and its id and cwd name this file.
    fn check_identity(&self, path: &Path, header: &SessionHeader, expected: Option<&SessionId>) -> Result<()> {
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

    // --- writing ---

    fn encoder(&self) -> Result<FrameEncoder> {
        match self.encoders.lock().pop() {
            Some(encoder) => Ok(encoder),
            None => FrameEncoder::new().map_err(io_error(&self.root)),
        }
    }

    /// One durable batch in the store's encoding: lines, or one frame of them.
    fn encode_events(&self, events: &[&SessionEvent], path: &Path) -> Result<Vec<u8>> {
        let mut lines = Vec::new();
        encode_batch(events, self.pack_chunks, &mut lines)?;
        self.encode_text(lines, path)
    }

    fn encode_text(&self, text: Vec<u8>, path: &Path) -> Result<Vec<u8>> {
        match self.compression {
            Compression::None => Ok(text),
            Compression::Zstd => {
                let mut encoder = self.encoder()?;
                let frame = encoder.encode(&text).map_err(io_error(path));
                self.encoders.lock().push(encoder);
                frame
            }
        }
    }

    /// Publishes a new log holding the header and the first batch, atomically.
    fn materialize(&self, header: &SessionHeader, events: &[&SessionEvent], path: &Path) -> Result<()> {
        header.validate(&header.id).map_err(PersistenceError::invalid_header)?;
        let session_dir = path.parent().expect("a log path has a session directory");
        let project_dir = session_dir.parent().expect("a session directory has a project directory");

        let mut line = encode_header_line(header).into_bytes();
        line.push(b'\n');
        let mut content = self.encode_text(line, path)?;
        if !events.is_empty() {
            content.extend(self.encode_events(events, path)?);
        }

        if let Some(existing) = self.find_log(&header.id, &CancellationToken::new())? {
            return Err(if existing == path {
                already_materialized(&header.id)
            } else {
                PersistenceError::Conflict {
                    id: header.id.clone(),
                    message: format!(
                        "session \"{}\" already has a persisted log at \"{}\"; load/resume it instead of creating",
                        header.id,
                        existing.display()
                    ),
                }
            });
        }
        ensure_dir(&self.root)?;
        ensure_dir(project_dir)?;
        ensure_dir(session_dir)?;
        self.reject_opposite(session_dir)?;
        if exists(path)? {
            return Err(already_materialized(&header.id));
        }

        let file_name = path.file_name().expect("a log path has a file name").to_string_lossy();
        let temp = session_dir.join(format!("{file_name}.{}.tmp", random_suffix()));
        let written = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&temp)
            .and_then(|mut file| file.write_all(&content).and_then(|()| file.sync_all()));
        if let Err(error) = written {
            let _ = fs::remove_file(&temp);
            return Err(PersistenceError::io(&temp, error));
        }
        // `link` fails if the log appeared meanwhile; `rename` would silently replace it.
        if let Err(error) = fs::hard_link(&temp, path) {
            let _ = fs::remove_file(&temp);
            return Err(match error.kind() {
                io::ErrorKind::AlreadyExists => already_materialized(&header.id),
                _ => PersistenceError::io(path, error),
            });
        }
        let synced = sync_dir(session_dir);
        // The log is published; the temp name is only a second link to it.
        let _ = fs::remove_file(&temp);
        if let Err(error) = synced {
            self.poison(&header.id, format!("the new log \"{}\" may not be durable: {error}", path.display()));
            return Err(error);
        }
        self.index.lock().insert(header.id.clone(), path.to_owned());
        Ok(())
    }

    /// Appends `bytes` and fsyncs. On failure the file is cut back to its prior size; a failed
    /// fsync or a failed rollback poisons the session's writer.
    fn append_bytes(&self, id: &SessionId, path: &Path, bytes: &[u8]) -> Result<()> {
        let mut file = OpenOptions::new().append(true).open(path).map_err(io_error(path))?;
        let before = file.metadata().map_err(io_error(path))?.len();
        let written = self.write_all(&mut file, bytes);
        let (error, fsync_failed) = match written {
            Err(error) => (error, false),
            Ok(()) => match self.sync(&file) {
                Ok(()) => return Ok(()),
                Err(error) => (error, true),
            },
        };
        match self.roll_back(&file, before) {
            Ok(()) => {
                if fsync_failed {
                    self.poison(id, format!("an fsync of \"{}\" failed: {error}", path.display()));
                }
                Err(PersistenceError::io(path, error))
            }
            Err(rollback_error) => {
                let message = format!(
                    "failed to roll back append to \"{}\": {error}; the rollback failed too: {rollback_error}",
                    path.display()
                );
                self.poison(id, message.clone());
                Err(PersistenceError::Poisoned { message })
            }
        }
    }

    fn write_all(&self, file: &mut File, bytes: &[u8]) -> io::Result<()> {
        #[cfg(test)]
        if let Some(written) = self.faults.write(file, bytes) {
            return written;
        }
        file.write_all(bytes)
    }

    fn sync(&self, file: &File) -> io::Result<()> {
        #[cfg(test)]
        self.faults.sync()?;
        file.sync_data()
    }

    fn roll_back(&self, file: &File, size: u64) -> io::Result<()> {
        #[cfg(test)]
        self.faults.rollback()?;
        file.set_len(size)?;
        file.sync_all()
    }

    /// The header a listing decoded from the log at `path`, if the file kept its identity since.
    /// The scan still compares the stored bytes before it trusts it.
    fn known_header(&self, path: &Path, metadata: &Metadata) -> Option<KnownHeader> {
        let identity = FileIdentity::of(metadata);
        let known = self.headers.lock().get(path).filter(|cached| cached.identity == identity)?.known.clone();
        if known.is_some() {
            self.scan_offers.fetch_add(1, Ordering::Relaxed);
        }
        known
    }

    /// Reads the header of one listed transcript, through the cache.
    /// The header of the log at `path` (`None` if there is none). A repeated listing costs one
    /// `stat` per log: a header whose file kept its identity is served from the cache.
    fn listed_header(&self, path: &Path, cancel: &CancellationToken, listing: u64) -> Result<Option<StoredHeader>> {
        let metadata = match fs::metadata(path) {
            Ok(metadata) => Some(metadata),
            Err(error) if error.kind() == io::ErrorKind::NotFound => None,
            Err(error) => return Err(PersistenceError::io(path, error)),
        };
        if let Some(metadata) = &metadata {
            let identity = FileIdentity::of(metadata);
            let cached = self.headers.lock().get_mut(path).filter(|cached| cached.identity == identity).map(|cached| {
                cached.listing = listing;
                Arc::clone(&cached.header)
            });
            if let Some(header) = cached {
                self.header_hits.fetch_add(1, Ordering::Relaxed);
                return Ok(Some(StoredHeader {
                    header,
                    revision: revision_of(metadata),
                    n_bytes: Some(metadata.len()),
                }));
            }
        }
        if let Some(session_dir) = path.parent() {
            self.reject_opposite(session_dir)?;
        }
        if metadata.is_none() {
            return Ok(None);
        }
        let file = match File::open(path) {
            Ok(file) => file,
            Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(error) => return Err(PersistenceError::io(path, error)),
        };
        let metadata = file.metadata().map_err(io_error(path))?;
        let identity = FileIdentity::of(&metadata);
        let source = FileSource { file: &file, len: metadata.len() };
        self.header_misses.fetch_add(1, Ordering::Relaxed);
        let Some(HeaderRead { header, known }) = read_header(&source, self.compression, path, cancel)? else {
            return Ok(None);
        };
        self.check_identity(path, &header, None)?;
        self.headers
            .lock()
            .insert(path.to_owned(), CachedHeader { identity, header: Arc::clone(&header), known, listing });
        self.index.lock().insert(header.id.clone(), path.to_owned());
        Ok(Some(StoredHeader { header, revision: revision_of(&metadata), n_bytes: Some(metadata.len()) }))
    }
}

fn check_cancel(cancel: &CancellationToken) -> Result<()> {
    if cancel.is_cancelled() { Err(PersistenceError::Cancelled) } else { Ok(()) }
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

/// The directories directly under `dir`, sorted; symlinks and files are skipped.
fn subdirectories(dir: &Path) -> Result<Vec<PathBuf>> {
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

/// Creates `dir` (mode 0700) if needed and fsyncs its parent so the entry is durable.
fn ensure_dir(dir: &Path) -> Result<()> {
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
fn same_file(a: &Path, b: &Path) -> Result<bool> {
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

/// A best-effort id for a refused artifact: its session directory's (or flat file's) name.
fn artifact_id(path: &Path) -> SessionId {
    let name = if path.file_name().is_some_and(|name| name.to_string_lossy().starts_with("session.")) {
        path.parent().and_then(Path::file_name)
    } else {
        path.file_name()
    };
    let name = name.map(|name| name.to_string_lossy().into_owned()).unwrap_or_default();
    let stem = name.strip_suffix(".jsonl.zstd").or_else(|| name.strip_suffix(".jsonl")).unwrap_or(&name);
    SessionId::from(stem)
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

fn duplicate(id: &SessionId) -> PersistenceError {
    PersistenceError::Conflict {
        id: id.clone(),
        message: format!("duplicate JSONL session id \"{id}\" appears in multiple project directories"),
    }
}

fn already_materialized(id: &SessionId) -> PersistenceError {
    PersistenceError::Conflict {
        id: id.clone(),
        message: format!("refusing to materialize \"{id}\": a log already exists on disk (load/resume it instead)"),
    }
}

impl Backend for JsonlStore {
    fn name(&self) -> &'static str {
        "jsonl"
    }

    fn scan(&self, id: &SessionId, cancel: &CancellationToken, sink: &mut dyn ScanSink) -> Result<Option<ScanOutcome>> {
        check_cancel(cancel)?;
        self.check_root(cancel)?;
        let mut last_path = self.root.clone();
        for attempt in 1..=MAX_READ_ATTEMPTS {
            // The first attempt trusts the index without a `stat`: opening the file tells.
            let indexed = if attempt == 1 { self.indexed_log(id)? } else { None };
            let path = match indexed {
                Some(path) => path,
                None => match self.find_log(id, cancel)? {
                    Some(path) => path,
                    None => return Ok(None),
                },
            };
            last_path.clone_from(&path);
            let file = match File::open(&path) {
                Ok(file) => file,
                Err(error) if error.kind() == io::ErrorKind::NotFound => {
                    self.index.lock().remove(id);
                    continue;
                }
                Err(error) => return Err(PersistenceError::io(&path, error)),
            };
            let before = file.metadata().map_err(io_error(&path))?;
            let source = FileSource { file: &file, len: before.len() };
            let known = self.known_header(&path, &before);
            let result = {
                let mut bound = BoundSink { store: self, path: &path, id, inner: &mut *sink };
                scan_log_known(&source, self.compression, &path, cancel, known.as_ref(), &mut bound)
            };
            #[cfg(test)]
            self.faults.after_read(&path);
            let after = match fs::metadata(&path) {
                Ok(after) => Some(after),
                Err(error) if error.kind() == io::ErrorKind::NotFound => None,
                Err(error) => return Err(PersistenceError::io(&path, error)),
            };
            let revision = revision_of(&before);
            let stable = after.as_ref().is_some_and(|after| revision_of(after) == revision);
            let outcome = |scan: crate::format::LogScan| ScanOutcome {
                header: scan.header,
                revision: revision.clone(),
                n_events: scan.n_events,
                torn: scan.torn,
                n_bytes: scan.n_bytes,
            };
            if stable || matches!(result, Err(PersistenceError::Cancelled)) {
                return result.map(|scan| Some(outcome(scan)));
            }
            // The file changed under the read. Start over if the sink can forget what it got.
            if attempt < MAX_READ_ATTEMPTS && sink.restart() {
                continue;
            }
            // An append on the same file leaves the bytes read a consistent (older) state, and
            // whatever the read found in them, event or defect, still stands.
            let appended = after.as_ref().is_some_and(|after| {
                FileIdentity::of(after) == FileIdentity::of(&before) && after.len() >= before.len()
            });
            if appended {
                return result.map(|scan| Some(outcome(scan)));
            }
            break;
        }
        Err(PersistenceError::io(
            last_path,
            io::Error::other(format!("the log of session \"{id}\" kept changing while it was being read")),
        ))
    }

    fn revision(&self, id: &SessionId) -> Result<Option<Revision>> {
        let cancel = CancellationToken::new();
        self.check_root(&cancel)?;
        let Some(path) = self.find_log(id, &cancel)? else { return Ok(None) };
        match fs::metadata(&path) {
            Ok(metadata) => Ok(Some(revision_of(&metadata))),
            Err(error) if error.kind() == io::ErrorKind::NotFound => {
                self.index.lock().remove(id);
                Ok(None)
            }
            Err(error) => Err(PersistenceError::io(&path, error)),
        }
    }

    fn append_batch(&self, header: &SessionHeader, events: &[Arc<SessionEvent>], materialized: bool) -> Result<()> {
        self.check_writable()?;
        self.check_poisoned(&header.id)?;
        self.check_root(&CancellationToken::new())?;
        let path = self.log_path(header)?;
        let events: Vec<&SessionEvent> = events.iter().map(|event| &**event).collect();
        if !materialized {
            return self.materialize(header, &events, &path);
        }
        if events.is_empty() {
            return Ok(());
        }
        let bytes = self.encode_events(&events, &path)?;
        self.append_bytes(&header.id, &path, &bytes)
    }

    fn commit_repair(
        &self,
        header: &SessionHeader,
        torn: Option<&crate::backend::TornTail>,
        closers: &[SessionEvent],
    ) -> Result<()> {
        self.check_writable()?;
        self.check_poisoned(&header.id)?;
        let path = self.log_path(header)?;
        if let Some(torn) = torn {
            let file = OpenOptions::new().write(true).open(&path).map_err(io_error(&path))?;
            let len = file.metadata().map_err(io_error(&path))?.len();
            if torn.truncate_to > len {
                return Err(PersistenceError::Conflict {
                    id: header.id.clone(),
                    message: format!(
                        "stale torn tail for session \"{}\": cannot cut \"{}\" to {} bytes, it holds {len}",
                        header.id,
                        path.display(),
                        torn.truncate_to
                    ),
                });
            }
            file.set_len(torn.truncate_to).map_err(io_error(&path))?;
            if let Err(error) = file.sync_all() {
                self.poison(&header.id, format!("an fsync of \"{}\" failed: {error}", path.display()));
                return Err(PersistenceError::io(&path, error));
            }
        }
        let events: Vec<&SessionEvent> =
            torn.into_iter().flat_map(|torn| torn.recovered.iter()).chain(closers.iter()).collect();
        if events.is_empty() {
            return Ok(());
        }
        let bytes = self.encode_events(&events, &path)?;
        self.append_bytes(&header.id, &path, &bytes)
    }

    fn list(&self, cancel: &CancellationToken) -> Result<Vec<StoredHeader>> {
        check_cancel(cancel)?;
        self.check_root(cancel)?;
        let mut listed: Vec<StoredHeader> = Vec::new();
        let mut ids: HashSet<SessionId> = HashSet::new();
        let listing = self.listings.fetch_add(1, Ordering::Relaxed) + 1;
        for project in self.project_dirs()? {
            check_cancel(cancel)?;
            for dir in self.session_dirs(&project)? {
                check_cancel(cancel)?;
                let path = dir.join(self.compression.file_name());
                let Some(stored) = self.listed_header(&path, cancel, listing)? else { continue };
                if !ids.insert(stored.header.id.clone()) {
                    return Err(duplicate(&stored.header.id));
                }
                listed.push(stored);
            }
        }
        check_cancel(cancel)?;
        self.headers.lock().retain(|_, cached| cached.listing == listing);
        listed.sort_by(|a, b| a.header.id.cmp(&b.header.id));
        Ok(listed)
    }

    fn locate(&self, header: &SessionHeader) -> Option<PathBuf> {
        self.log_path(header).ok()
    }

    fn survey(&self, cancel: &CancellationToken) -> Result<Vec<SurveyEntry>> {
        check_cancel(cancel)?;
        let mut entries = Vec::new();
        let listing = self.listings.fetch_add(1, Ordering::Relaxed) + 1;
        for project in self.project_dirs()? {
            check_cancel(cancel)?;
            let dirs = match self.session_dirs(&project) {
                Ok(dirs) => dirs,
                Err(error) => {
                    entries.push(SurveyEntry { id: artifact_id(&project), path: Some(project), header: Err(error) });
                    continue;
                }
            };
            for dir in dirs {
                check_cancel(cancel)?;
                let path = dir.join(self.compression.file_name());
                let id = artifact_id(&path);
                let opposite = dir.join(self.compression.opposite().file_name());
                let header = match exists(&opposite) {
                    Ok(true) => Err(self.encoding_mismatch(&opposite)),
                    Err(error) => Err(error),
                    Ok(false) if !exists(&path)? => continue,
                    Ok(false) => self.listed_header(&path, cancel, listing).and_then(|header| {
                        header.ok_or_else(|| {
                            PersistenceError::corrupt(
                                CorruptKind::Header,
                                Location::file(&path),
                                "corrupt session log: the first line is missing or is not a session header",
                            )
                        })
                    }),
                };
                entries.push(SurveyEntry { id, path: Some(path), header });
            }
        }
        Ok(entries)
    }
}
