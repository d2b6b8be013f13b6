//! Unit tests of the store's failure paths, with injected I/O faults.

use std::{
    fs::{self, File},
    io::{self, Write},
    path::Path,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
};

use parking_lot::Mutex;
use session_core::{JsonData, SessionEvent, SessionHeader, SessionId};
use tokio_util::sync::CancellationToken;

use super::{JsonlConfig, JsonlStore};
use crate::{Backend, CollectSink, Compression, PersistenceError, ScanSink};

type Hook = Box<dyn FnOnce(&Path) + Send>;

/// One-shot I/O faults, armed by a test before an operation.
#[derive(Default)]
pub(super) struct Faults {
    partial_write: AtomicBool,
    sync: AtomicBool,
    rollback: AtomicBool,
    after_read: Mutex<Vec<Hook>>,
}

impl std::fmt::Debug for Faults {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Faults")
    }
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

    /// Runs the next armed hook between a scan's read and its second `stat`.
    pub(super) fn after_read(&self, path: &Path) {
        let hook = self.after_read.lock().pop();
        if let Some(hook) = hook {
            hook(path);
        }
    }
}

fn event(kind: &str, seq: u64) -> Arc<SessionEvent> {
    Arc::new(SessionEvent::new(kind, seq, 7, JsonData::from_text(format!("{{\"n\":{seq}}}")).unwrap()))
}

fn batch(range: std::ops::Range<u64>) -> Vec<Arc<SessionEvent>> {
    range.map(|seq| event("note/added", seq)).collect()
}

fn store(dir: &Path, compression: Compression) -> (JsonlStore, SessionHeader) {
    let store = JsonlStore::open(JsonlConfig { compression, ..JsonlConfig::new(dir) }).unwrap();
    let header = SessionHeader::new(SessionId::from("s"), 1);
    store.append_batch(&header, &batch(0..3), false).unwrap();
    (store, header)
}

fn scan_all(store: &JsonlStore) -> Vec<SessionEvent> {
    let mut sink = CollectSink::default();
    store.scan(&SessionId::from("s"), &CancellationToken::new(), &mut sink).unwrap().unwrap();
    sink.events
}

#[test]
fn a_failed_write_is_rolled_back_and_retryable() {
    for compression in [Compression::Zstd, Compression::None] {
        let dir = tempfile::tempdir().unwrap();
        let (store, header) = store(dir.path(), compression);
        let path = store.log_path(&header).unwrap();
        let before = fs::read(&path).unwrap();
        store.faults.partial_write.store(true, Ordering::SeqCst);
        let error = store.append_batch(&header, &batch(3..6), true).unwrap_err();
        assert!(matches!(error, PersistenceError::Io { .. }), "{error:?}");
        assert_eq!(fs::read(&path).unwrap(), before, "the partial write was cut off");
        store.append_batch(&header, &batch(3..6), true).unwrap();
        assert_eq!(scan_all(&store).len(), 6);
    }
}

#[test]
fn a_failed_fsync_poisons_the_session() {
    let dir = tempfile::tempdir().unwrap();
    let (store, header) = store(dir.path(), Compression::Zstd);
    let path = store.log_path(&header).unwrap();
    let before = fs::read(&path).unwrap();
    store.faults.sync.store(true, Ordering::SeqCst);
    let error = store.append_batch(&header, &batch(3..4), true).unwrap_err();
    assert!(matches!(error, PersistenceError::Io { .. }), "{error:?}");
    assert_eq!(fs::read(&path).unwrap(), before);
    let error = store.append_batch(&header, &batch(3..4), true).unwrap_err();
    assert!(matches!(&error, PersistenceError::Poisoned { message } if message.contains("fsync")), "{error:?}");
    assert!(matches!(store.commit_repair(&header, None, &[]), Err(PersistenceError::Poisoned { .. })));
    // Other sessions keep writing, and reads are unaffected.
    let other = SessionHeader::new(SessionId::from("t"), 1);
    store.append_batch(&other, &batch(0..1), false).unwrap();
    assert_eq!(scan_all(&store).len(), 3);
}

#[test]
fn a_failed_rollback_poisons_the_session() {
    let dir = tempfile::tempdir().unwrap();
    let (store, header) = store(dir.path(), Compression::None);
    store.faults.partial_write.store(true, Ordering::SeqCst);
    store.faults.rollback.store(true, Ordering::SeqCst);
    let error = store.append_batch(&header, &batch(3..6), true).unwrap_err();
    let PersistenceError::Poisoned { message } = &error else { panic!("{error:?}") };
    assert!(message.starts_with("failed to roll back append to"), "{message}");
    assert!(message.contains("injected write failure") && message.contains("injected rollback failure"));
    assert!(matches!(store.append_batch(&header, &batch(3..6), true), Err(PersistenceError::Poisoned { .. })));
}

/// A sink that cannot start over.
#[derive(Debug, Default)]
struct OnceSink {
    events: Vec<SessionEvent>,
}

impl ScanSink for OnceSink {
    fn event(&mut self, event: Arc<SessionEvent>) -> crate::Result<()> {
        self.events.push(Arc::unwrap_or_clone(event));
        Ok(())
    }
}

fn append_raw(path: &Path, bytes: &[u8]) {
    fs::OpenOptions::new().append(true).open(path).unwrap().write_all(bytes).unwrap();
}

#[test]
fn a_scan_that_races_a_writer_starts_over() {
    let dir = tempfile::tempdir().unwrap();
    let (store, header) = store(dir.path(), Compression::None);
    let line = br#"{"type":"note/added","seq":3,"time":7,"data":{"n":3}}"#;
    let extra: Vec<u8> = [&line[..], b"\n"].concat();
    let appended = extra.clone();
    store.faults.after_read.lock().push(Box::new(move |path| append_raw(path, &appended)));
    let mut sink = CollectSink::default();
    let outcome = store.scan(&header.id, &CancellationToken::new(), &mut sink).unwrap().unwrap();
    assert_eq!(sink.events.len(), 4, "the second read sees the append, and the first read was forgotten");
    assert_eq!(Some(outcome.revision), store.revision(&header.id).unwrap());

    // A sink that cannot restart keeps a consistent older state when the file only grew.
    let again = extra.iter().map(|byte| if *byte == b'3' { b'4' } else { *byte }).collect::<Vec<u8>>();
    store.faults.after_read.lock().push(Box::new(move |path| append_raw(path, &again)));
    let mut once = OnceSink::default();
    let outcome = store.scan(&header.id, &CancellationToken::new(), &mut once).unwrap().unwrap();
    assert_eq!(once.events.len(), 4);
    assert_ne!(Some(outcome.revision), store.revision(&header.id).unwrap(), "the revision names the older state");

    // A rewrite (not an append) under a sink that cannot restart is an error.
    store.faults.after_read.lock().push(Box::new(|path| {
        let bytes = fs::read(path).unwrap();
        fs::write(path, &bytes[..bytes.len() - 10]).unwrap();
    }));
    let mut once = OnceSink::default();
    let error = store.scan(&header.id, &CancellationToken::new(), &mut once).unwrap_err();
    assert!(error.to_string().contains("kept changing while it was being read"), "{error}");
}

#[test]
fn a_log_replaced_by_a_device_is_refused_without_writing() {
    if !Path::new("/dev/full").exists() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (store, header) = store(dir.path(), Compression::None);
    let path = store.log_path(&header).unwrap();
    fs::remove_file(&path).unwrap();
    std::os::unix::fs::symlink("/dev/full", &path).unwrap();
    // Only regular files are opened: neither an append nor a read touches the device, and the
    // session's writer is not poisoned (nothing was written).
    for _ in 0..2 {
        let error = store.append_batch(&header, &batch(3..4), true).unwrap_err();
        assert!(error.to_string().contains("the file is a device, not a regular file"), "{error}");
    }
    let error = store.scan(&header.id, &CancellationToken::new(), &mut CollectSink::default()).unwrap_err();
    assert!(error.to_string().contains("not a regular file"), "{error}");
}
