//! `DiskCheckpointStore`: one file per session under a cache root, replaced atomically.
//!
//! Layout: `<root>/records/<encode_segment(id)>` holds one record; `<root>/tmp/` holds files
//! being written. A record file is one line of JSON:
//!
//! ```text
//! {"format":"session-projection-cache","version":1,"id":"<id>","crc32":<n>,"record":{...}}
//! ```
//!
//! `crc32` is the CRC-32 (IEEE) of the exact bytes of `record`. A write goes to a new temporary
//! file, which is fsynced, renamed over the record, and the records directory is fsynced, so a
//! crash leaves the old record or the new one. A record that does not parse, fails its checksum,
//! names another id or format, or has another version is discarded with a warning when read; it
//! never stops the store from opening.

use std::{
    fs::{self, OpenOptions},
    io::{self, Write},
    path::{Path, PathBuf},
    sync::atomic::{AtomicU64, Ordering},
};

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use session_core::SessionId;
use session_persistence::encode_segment;

use crate::{
    error::{CacheError, Result},
    record::CheckpointRecord,
    store::CheckpointStore,
};

/// The `format` stamp of every record file.
pub const RECORD_FORMAT: &str = "session-projection-cache";
/// The only record `version` this build reads and writes.
pub const RECORD_VERSION: u64 = 1;

/// The largest record file a read accepts; a bigger one is an error, like a damaged one.
const MAX_RECORD_FILE_BYTES: u64 = 256 << 20;

const RECORDS_DIR: &str = "records";
const TMP_DIR: &str = "tmp";

/// Checkpoint records on disk, one file per session.
#[derive(Debug)]
pub struct DiskCheckpointStore {
    root: PathBuf,
    records: PathBuf,
    tmp: PathBuf,
    next_tmp: AtomicU64,
}

#[derive(Serialize)]
struct EnvelopeOut<'a> {
    format: &'static str,
    version: u64,
    id: &'a str,
    crc32: u32,
    record: &'a RawValue,
}

#[derive(Deserialize)]
struct EnvelopeIn<'a> {
    format: Option<String>,
    version: Option<u64>,
    id: Option<String>,
    crc32: Option<u32>,
    #[serde(borrow)]
    record: Option<&'a RawValue>,
}

/// Why a record file is not used.
#[derive(Debug)]
enum Discard {
    /// Damaged bytes or an invalid record.
    Corrupt(String),
    /// Not a record of this store for this id.
    Foreign(String),
    /// A record of another format version.
    VersionMismatch(u64),
}

impl DiskCheckpointStore {
    /// Opens (creating if needed) the store under `root`. Leftover temporary files of interrupted
    /// writes are removed. Records are not read here, so no record can stop the store from opening.
    pub fn open(root: impl Into<PathBuf>) -> Result<DiskCheckpointStore> {
        let root = root.into();
        let records = root.join(RECORDS_DIR);
        let tmp = root.join(TMP_DIR);
        for dir in [&root, &records, &tmp] {
            create_dir_durably(dir)?;
        }
        let leftovers = fs::read_dir(&tmp).map_err(|source| CacheError::io(&tmp, source))?;
        for entry in leftovers {
            let entry = entry.map_err(|source| CacheError::io(&tmp, source))?;
            let path = entry.path();
            if let Err(error) = fs::remove_file(&path) {
                tracing::warn!(path = %path.display(), %error, "session projection cache: cannot remove a leftover temporary file");
            }
        }
        Ok(DiskCheckpointStore { root, records, tmp, next_tmp: AtomicU64::new(0) })
    }

    /// Opens the store at `root` like [`DiskCheckpointStore::open`]; if that fails (`root` is
    /// a file, say, or unreadable), moves it aside to `<root>.damaged-<stamp>` and opens a fresh,
    /// empty one, saying what it moved.
    pub fn open_or_move_aside(
        root: impl Into<PathBuf>,
        stamp: &str,
    ) -> Result<(DiskCheckpointStore, Option<crate::MovedAside>)> {
        let root = root.into();
        crate::open_or_move_aside(&root, stamp, &[], || DiskCheckpointStore::open(root.clone()))
    }

    /// The cache root the store was opened under (it holds `records/` and `tmp/`).
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The file that holds `id`'s record.
    pub fn record_path(&self, id: &SessionId) -> Result<PathBuf> {
        let segment =
            encode_segment(id.as_str()).map_err(|error| CacheError::InvalidInput { message: error.to_string() })?;
        Ok(self.records.join(segment))
    }

    fn temp_path(&self) -> PathBuf {
        let n = self.next_tmp.fetch_add(1, Ordering::Relaxed);
        self.tmp.join(format!("{}-{n}.tmp", std::process::id()))
    }
}

/// Creates `dir` if it is missing, and fsyncs its parent so the new entry is durable.
fn create_dir_durably(dir: &Path) -> Result<()> {
    match fs::create_dir(dir) {
        Ok(()) => {
            if let Some(parent) = dir.parent().filter(|parent| !parent.as_os_str().is_empty()) {
                sync_dir(parent)?;
            }
            Ok(())
        }
        Err(error) if error.kind() == io::ErrorKind::AlreadyExists && dir.is_dir() => Ok(()),
        Err(error) if error.kind() == io::ErrorKind::NotFound => {
            fs::create_dir_all(dir).map_err(|source| CacheError::io(dir, source))
        }
        Err(error) => Err(CacheError::io(dir, error)),
    }
}

fn sync_dir(dir: &Path) -> Result<()> {
    session_storage_io::fsio::sync_dir(dir).map_err(|source| CacheError::io(dir, source))
}

/// Encodes `record` as the file content for `id`.
pub(crate) fn encode(id: &SessionId, record: &CheckpointRecord) -> Vec<u8> {
    // Rows hold JSON values and every map is keyed by strings, so serialization cannot fail.
    let body = serde_json::value::to_raw_value(record).expect("a checkpoint record serializes to JSON");
    let envelope = EnvelopeOut {
        format: RECORD_FORMAT,
        version: RECORD_VERSION,
        id: id.as_str(),
        crc32: crc32(body.get().as_bytes()),
        record: &body,
    };
    let mut bytes = serde_json::to_vec(&envelope).expect("a record envelope serializes to JSON");
    bytes.push(b'\n');
    bytes
}

/// Decodes a record file's content, checking that it is an intact record of `id`.
fn decode(id: &SessionId, bytes: &[u8]) -> std::result::Result<CheckpointRecord, Discard> {
    let text = std::str::from_utf8(bytes).map_err(|_| Discard::Corrupt("the file is not UTF-8".to_owned()))?;
    let envelope: EnvelopeIn<'_> =
        serde_json::from_str(text.trim_end_matches('\n')).map_err(|error| Discard::Corrupt(error.to_string()))?;
    if envelope.format.as_deref() != Some(RECORD_FORMAT) {
        return Err(Discard::Foreign(format!("the file's format is {:?}, not {RECORD_FORMAT:?}", envelope.format)));
    }
    match envelope.version {
        Some(RECORD_VERSION) => {}
        Some(version) => return Err(Discard::VersionMismatch(version)),
        None => return Err(Discard::Corrupt("the file has no version".to_owned())),
    }
    if envelope.id.as_deref() != Some(id.as_str()) {
        return Err(Discard::Foreign(format!("the record belongs to session {:?}", envelope.id)));
    }
    let (Some(crc), Some(record)) = (envelope.crc32, envelope.record) else {
        return Err(Discard::Corrupt("the file has no checksum or no record".to_owned()));
    };
    if crc32(record.get().as_bytes()) != crc {
        return Err(Discard::Corrupt("the record fails its checksum".to_owned()));
    }
    let record: CheckpointRecord =
        serde_json::from_str(record.get()).map_err(|error| Discard::Corrupt(error.to_string()))?;
    record.validate().map_err(Discard::Corrupt)?;
    Ok(record)
}

impl CheckpointStore for DiskCheckpointStore {
    fn get(&self, id: &SessionId) -> Result<Option<CheckpointRecord>> {
        // An id that cannot name a file can never have been stored.
        let Ok(path) = self.record_path(id) else { return Ok(None) };
        // Only a regular file is read, and only up to a bound: a FIFO in a record's place never
        // blocks a listing.
        let bytes = match session_storage_io::fsio::read_regular(&path, MAX_RECORD_FILE_BYTES) {
            Ok(Some(bytes)) => bytes,
            Ok(None) => return Ok(None),
            Err(error) => return Err(CacheError::io(&path, error)),
        };
        match decode(id, &bytes) {
            Ok(record) => Ok(Some(record)),
            Err(discard) => {
                let (kind, detail) = match discard {
                    Discard::Corrupt(detail) => ("corrupt", detail),
                    Discard::Foreign(detail) => ("foreign", detail),
                    Discard::VersionMismatch(version) => {
                        ("version-mismatched", format!("version {version}, this build reads {RECORD_VERSION}"))
                    }
                };
                tracing::warn!(
                    session = %id,
                    path = %path.display(),
                    "session projection cache: discarding the {kind} record of \"{id}\" ({detail}); the next write replaces it"
                );
                Ok(None)
            }
        }
    }

    fn put(&self, id: &SessionId, record: &CheckpointRecord) -> Result<()> {
        let path = self.record_path(id)?;
        let bytes = encode(id, record);
        let temp = self.temp_path();
        let written = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&temp)
            .and_then(|mut file| file.write_all(&bytes).and_then(|()| file.sync_all()))
            .map_err(|source| CacheError::io(&temp, source))
            .and_then(|()| fs::rename(&temp, &path).map_err(|source| CacheError::io(&path, source)));
        if let Err(error) = written {
            let _ = fs::remove_file(&temp);
            return Err(error);
        }
        sync_dir(&self.records)
    }

    fn remove(&self, id: &SessionId) -> Result<bool> {
        let Ok(path) = self.record_path(id) else { return Ok(false) };
        match fs::remove_file(&path) {
            Ok(()) => {
                sync_dir(&self.records)?;
                Ok(true)
            }
            Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(error) => Err(CacheError::io(&path, error)),
        }
    }
}

/// The CRC-32 (IEEE 802.3, reflected, as in zlib) of `bytes`.
pub(crate) fn crc32(bytes: &[u8]) -> u32 {
    crc32fast::hash(bytes)
}
