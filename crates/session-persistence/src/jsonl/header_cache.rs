//! The listing's header cache: decoded headers kept by file identity, so a repeated listing
//! costs one `stat` per log, and a later scan may skip decoding a header whose stored bytes it
//! finds unchanged.

use std::{fs::Metadata, os::unix::fs::MetadataExt, path::Path, sync::Arc, sync::atomic::Ordering, time::SystemTime};

use session_core::SessionHeader;
use tokio_util::sync::CancellationToken;

use super::{
    JsonlStore,
    files::{FileSource, log_metadata, open_for_reading, revision_of},
};
use crate::{
    backend::StoredHeader,
    error::Result,
    format::{HeaderRead, KnownHeader, read_header},
};

/// Counters of the listing's header cache.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HeaderCacheStats {
    /// Headers served from the cache without reading the file.
    pub hits: u64,
    /// Headers read from their file.
    pub misses: u64,
    /// Headers held in the cache now, one per log file seen by a listing.
    pub entries: usize,
    /// Scans offered a listed header whose file kept its identity; a scan uses it only if the
    /// log still starts with the header's stored bytes.
    pub scan_offers: u64,
}

/// A decoded header, valid while the file keeps its identity (headers are never rewritten).
#[derive(Debug, Clone)]
pub(super) struct CachedHeader {
    identity: FileIdentity,
    header: Arc<SessionHeader>,
    /// The header's stored bytes, if it decoded without error: a scan of a log that still starts
    /// with them skips decoding the header again.
    known: Option<KnownHeader>,
    /// The listing that last saw this file; entries no listing saw are dropped.
    pub(super) listing: u64,
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

/// Whether two `stat`s are of one file (not a replacement at the same path).
pub(super) fn same_identity(a: &Metadata, b: &Metadata) -> bool {
    FileIdentity::of(a) == FileIdentity::of(b)
}

/// What a listing found at one log path.
#[derive(Debug)]
pub(super) enum Listed {
    /// No log there.
    Absent,
    /// A log whose first line or frame is empty, incomplete or not a header: the reference
    /// lists nothing for it.
    Skipped,
    Header(StoredHeader),
}

impl JsonlStore {
    /// The header cache's counters since the store was opened; tests and benchmarks use them to
    /// prove that a second listing reads no header file.
    pub fn header_cache_stats(&self) -> HeaderCacheStats {
        HeaderCacheStats {
            hits: self.header_hits.load(Ordering::Relaxed),
            misses: self.header_misses.load(Ordering::Relaxed),
            entries: self.headers.lock().len(),
            scan_offers: self.scan_offers.load(Ordering::Relaxed),
        }
    }

    /// The header a listing decoded from the log at `path`, if the file kept its identity since.
    /// The scan still compares the stored bytes before it trusts it.
    pub(super) fn known_header(&self, path: &Path, metadata: &Metadata) -> Option<KnownHeader> {
        let identity = FileIdentity::of(metadata);
        let known = self.headers.lock().get(path).filter(|cached| cached.identity == identity)?.known.clone();
        if known.is_some() {
            self.scan_offers.fetch_add(1, Ordering::Relaxed);
        }
        known
    }

    /// The header of the log at `path`, through the cache. A repeated listing costs one `stat`
    /// per log: a header whose file kept its identity is served from the cache. Something other
    /// than a regular file at `path` is an error, and is never opened.
    pub(super) fn listed_header(&self, path: &Path, cancel: &CancellationToken, listing: u64) -> Result<Listed> {
        let metadata = log_metadata(path)?;
        if let Some(metadata) = &metadata {
            let identity = FileIdentity::of(metadata);
            let cached = self.headers.lock().get_mut(path).filter(|cached| cached.identity == identity).map(|cached| {
                cached.listing = listing;
                Arc::clone(&cached.header)
            });
            if let Some(header) = cached {
                self.header_hits.fetch_add(1, Ordering::Relaxed);
                return Ok(Listed::Header(StoredHeader {
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
            return Ok(Listed::Absent);
        }
        let Some((file, metadata)) = open_for_reading(path)? else { return Ok(Listed::Absent) };
        let identity = FileIdentity::of(&metadata);
        let source = FileSource { file: &file, len: metadata.len() };
        self.header_misses.fetch_add(1, Ordering::Relaxed);
        let Some(HeaderRead { header, known }) = read_header(&source, self.compression, path, cancel)? else {
            return Ok(Listed::Skipped);
        };
        self.check_identity(path, &header, None)?;
        self.headers
            .lock()
            .insert(path.to_owned(), CachedHeader { identity, header: Arc::clone(&header), known, listing });
        self.index.lock().insert(header.id.clone(), path.to_owned());
        Ok(Listed::Header(StoredHeader { header, revision: revision_of(&metadata), n_bytes: Some(metadata.len()) }))
    }
}
