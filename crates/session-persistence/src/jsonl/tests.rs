//! Unit tests of the store's failure paths, with faults injected through a simulated disk.

use std::{
    fs,
    io::Write,
    path::Path,
    sync::{Arc, mpsc},
};

use session_core::{JsonData, SessionEvent, SessionHeader, SessionId};
use tokio_util::sync::CancellationToken;

use super::{JsonlConfig, JsonlStore, faults::SimulatedDisk};
use crate::{Backend, CollectSink, Compression, PersistenceError, ScanSink};

fn event(kind: &str, seq: u64) -> Arc<SessionEvent> {
    Arc::new(SessionEvent::new(kind, seq, 7, JsonData::from_text(format!("{{\"n\":{seq}}}")).unwrap()))
}

fn batch(range: std::ops::Range<u64>) -> Vec<Arc<SessionEvent>> {
    range.map(|seq| event("note/added", seq)).collect()
}

fn store(dir: &Path, compression: Compression) -> (JsonlStore, SessionHeader, SimulatedDisk) {
    let disk = SimulatedDisk::new();
    let store = JsonlStore::open_with_disk(JsonlConfig { compression, ..JsonlConfig::new(dir) }, &disk).unwrap();
    let header = SessionHeader::new(SessionId::from("s"), 1);
    store.append_batch(&header, &batch(0..3), false).unwrap();
    (store, header, disk)
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
        let (store, header, disk) = store(dir.path(), compression);
        let path = store.log_path(&header).unwrap();
        let before = fs::read(&path).unwrap();
        disk.tear_next_write(10);
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
    let (store, header, disk) = store(dir.path(), Compression::Zstd);
    let path = store.log_path(&header).unwrap();
    let before = fs::read(&path).unwrap();
    disk.fail_next_fsync();
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
    let (store, header, disk) = store(dir.path(), Compression::None);
    disk.tear_next_write(10);
    disk.fail_next_rollback();
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
    let (store, header, disk) = store(dir.path(), Compression::None);
    let line = br#"{"type":"note/added","seq":3,"time":7,"data":{"n":3}}"#;
    let extra: Vec<u8> = [&line[..], b"\n"].concat();
    let appended = extra.clone();
    disk.after_next_read(move |path| append_raw(path, &appended));
    let mut sink = CollectSink::default();
    let outcome = store.scan(&header.id, &CancellationToken::new(), &mut sink).unwrap().unwrap();
    assert_eq!(sink.events.len(), 4, "the second read sees the append, and the first read was forgotten");
    assert_eq!(Some(outcome.revision), store.revision(&header.id).unwrap());

    // A sink that cannot restart keeps a consistent older state when the file only grew.
    let again = extra.iter().map(|byte| if *byte == b'3' { b'4' } else { *byte }).collect::<Vec<u8>>();
    disk.after_next_read(move |path| append_raw(path, &again));
    let mut once = OnceSink::default();
    let outcome = store.scan(&header.id, &CancellationToken::new(), &mut once).unwrap().unwrap();
    assert_eq!(once.events.len(), 4);
    assert_ne!(Some(outcome.revision), store.revision(&header.id).unwrap(), "the revision names the older state");

    // A rewrite (not an append) under a sink that cannot restart is an error.
    disk.after_next_read(|path| {
        let bytes = fs::read(path).unwrap();
        fs::write(path, &bytes[..bytes.len() - 10]).unwrap();
    });
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
    let (store, header, _disk) = store(dir.path(), Compression::None);
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

#[test]
fn a_power_loss_drops_what_was_not_fsynced() {
    for compression in [Compression::Zstd, Compression::None] {
        let dir = tempfile::tempdir().unwrap();
        let (store, header, disk) = store(dir.path(), compression);
        let path = store.log_path(&header).unwrap();
        let durable = fs::read(&path).unwrap();
        // A failed fsync whose rollback fails too leaves the whole batch written, never synced.
        disk.fail_next_fsync();
        disk.fail_next_rollback();
        assert!(matches!(store.append_batch(&header, &batch(3..6), true), Err(PersistenceError::Poisoned { .. })));
        let written = fs::read(&path).unwrap();
        assert!(written.len() > durable.len());
        // A power loss with the store open is refused and changes nothing.
        assert!(disk.power_loss().is_err());
        drop(store);

        let report = disk.power_loss().unwrap();
        assert_eq!(report.cut, vec![(path.clone(), (written.len() - durable.len()) as u64)]);
        assert_eq!(fs::read(&path).unwrap(), durable, "the log is back at its last fsync");
        let store =
            JsonlStore::open_with_disk(JsonlConfig { compression, ..JsonlConfig::new(dir.path()) }, &disk).unwrap();
        assert_eq!(scan_all(&store).len(), 3);
        // The reopened store writes again, and what it fsyncs survives the next loss.
        store.append_batch(&header, &batch(3..5), true).unwrap();
        drop(store);
        assert_eq!(disk.power_loss().unwrap(), Default::default());
        let store = JsonlStore::open(JsonlConfig { compression, ..JsonlConfig::new(dir.path()) }).unwrap();
        assert_eq!(scan_all(&store).len(), 5);
    }
}

#[test]
fn a_power_loss_may_keep_part_of_an_unsynced_write() {
    let dir = tempfile::tempdir().unwrap();
    let (store, header, disk) = store(dir.path(), Compression::None);
    let path = store.log_path(&header).unwrap();
    let durable = fs::read(&path).unwrap();
    disk.tear_next_write(30);
    disk.fail_next_rollback();
    assert!(matches!(store.append_batch(&header, &batch(3..6), true), Err(PersistenceError::Poisoned { .. })));
    drop(store);
    disk.power_loss_keeping(12).unwrap();
    assert_eq!(fs::read(&path).unwrap().len(), durable.len() + 12, "12 of the 30 torn bytes were kept");
    let store =
        JsonlStore::open(JsonlConfig { compression: Compression::None, ..JsonlConfig::new(dir.path()) }).unwrap();
    let mut sink = CollectSink::default();
    let outcome = store.scan(&header.id, &CancellationToken::new(), &mut sink).unwrap().unwrap();
    assert_eq!(sink.events.len(), 3, "a cut line is not committed");
    assert_eq!(outcome.torn.map(|torn| torn.truncate_to), Some(durable.len() as u64));
}

#[test]
fn a_new_log_whose_directory_fsync_failed_is_lost_at_a_power_loss() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _header, disk) = store(dir.path(), Compression::Zstd);
    let other = SessionHeader::new(SessionId::from("t"), 1);
    let other_path = store.log_path(&other).unwrap();
    disk.fail_next_dir_fsync();
    let error = store.append_batch(&other, &batch(0..2), false).unwrap_err();
    assert!(error.to_string().contains("injected directory fsync failure"), "{error}");
    assert!(other_path.exists(), "the log was linked");
    assert!(matches!(store.append_batch(&other, &batch(0..2), true), Err(PersistenceError::Poisoned { .. })));
    drop(store);
    let report = disk.power_loss().unwrap();
    assert_eq!(report.removed, vec![other_path.clone()]);
    assert!(!other_path.exists());
    let store = JsonlStore::open(JsonlConfig::new(dir.path())).unwrap();
    assert_eq!(scan_all(&store).len(), 3, "the first session's log is durable");
    assert!(store.scan(&other.id, &CancellationToken::new(), &mut CollectSink::default()).unwrap().is_none());
}

/// A lock let go while an open waits for it is taken: the first store is dropped from the
/// waiting open's own hook, so the release lands inside the wait by construction.
#[test]
fn a_lock_released_during_the_wait_is_taken() {
    let dir = tempfile::tempdir().unwrap();
    let config = JsonlConfig::new(dir.path());
    let first = JsonlStore::open(config.clone()).unwrap();
    let disk = SimulatedDisk::new();
    let (waited, wait) = mpsc::channel();
    disk.on_lock_wait(move || {
        drop(first);
        waited.send(()).unwrap();
    });
    let second = JsonlStore::open_with_disk(config, &disk);
    assert!(second.is_ok(), "{:?}", second.err());
    wait.try_recv().expect("the open waited for the lock");
}
