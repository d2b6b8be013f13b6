//! The store's advisory write lock.

use std::process::Command;

use session_persistence::{Backend, Compression, JsonlStore, PersistenceError};

use crate::{config, open};

const PROBE_ROOT: &str = "SESSION_PERSISTENCE_LOCK_PROBE_ROOT";

#[test]
fn a_second_writer_in_this_process_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let first = open(dir.path(), Compression::Zstd);
    // `flock` locks belong to an open file description, so a second open conflicts even here.
    let error = JsonlStore::open(config(dir.path(), Compression::Zstd)).unwrap_err();
    assert!(
        matches!(&error, PersistenceError::Locked { path } if path == &std::path::absolute(dir.path()).unwrap()),
        "{error:?}"
    );
    assert!(error.to_string().contains("is locked by another process"));
    // Readers take no lock.
    JsonlStore::open_read_only(config(dir.path(), Compression::Zstd)).unwrap();
    drop(first);
    open(dir.path(), Compression::Zstd);
}

// That a lock let go while an open waits for it is taken is a unit test
// (`jsonl::tests::a_lock_released_during_the_wait_is_taken`): the release happens from the
// waiting open's own hook, so it lands inside the wait without a sleep.

/// Run as a child: try to open the store named by the environment and report what happened.
#[test]
fn lock_probe() {
    let Some(root) = std::env::var_os(PROBE_ROOT) else { return };
    match JsonlStore::open(config(std::path::Path::new(&root), Compression::Zstd)) {
        Ok(_) => println!("PROBE: opened"),
        Err(PersistenceError::Locked { .. }) => println!("PROBE: locked"),
        Err(error) => println!("PROBE: error {error}"),
    }
}

fn probe(root: &std::path::Path) -> String {
    let output = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "lock::lock_probe", "--nocapture", "--test-threads=1"])
        .env(PROBE_ROOT, root)
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    let stdout = String::from_utf8(output.stdout).unwrap();
    stdout
        .lines()
        .find_map(|line| line.split_once("PROBE: ").map(|(_, outcome)| outcome))
        .expect("the probe ran")
        .to_owned()
}

#[test]
fn a_second_writer_process_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path(), Compression::Zstd);
    assert_eq!(probe(dir.path()), "locked");
    drop(store);
    assert_eq!(probe(dir.path()), "opened");
}

/// The lock is on the store directory itself: deleting (or replacing) `.lock` while a writer runs
/// does not let a second writer in, in this process or another.
#[test]
fn deleting_the_lock_file_does_not_admit_a_second_writer() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path(), Compression::Zstd);
    let lock_file = dir.path().join(".lock");
    assert!(lock_file.is_file(), "the lock file of earlier builds is still created");
    std::fs::remove_file(&lock_file).unwrap();
    let error = JsonlStore::open(config(dir.path(), Compression::Zstd)).unwrap_err();
    assert!(matches!(error, PersistenceError::Locked { .. }), "{error:?}");
    assert_eq!(probe(dir.path()), "locked");
    // A new `.lock` (as a second writer of an earlier build would make) changes nothing either.
    std::fs::write(&lock_file, b"").unwrap();
    assert_eq!(probe(dir.path()), "locked");
    assert!(!store.is_read_only());
    drop(store);
    assert_eq!(probe(dir.path()), "opened");
}

/// A writer whose root directory was replaced under it refuses to write into the new one.
#[test]
fn a_writer_whose_root_was_replaced_refuses_to_write() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("store");
    let store = open(&root, Compression::None);
    std::fs::rename(&root, dir.path().join("moved")).unwrap();
    std::fs::create_dir(&root).unwrap();
    let header = crate::header("s", Some("/p"));
    let error = store.append_batch(&header, &crate::arcs(&crate::turn(0, 1)), false).unwrap_err();
    assert!(error.to_string().contains("the store directory was replaced"), "{error}");
    assert_eq!(std::fs::read_dir(&root).unwrap().count(), 0, "nothing was written into the new directory");
}

/// A read-only handle can tell that a writer holds the store.
#[test]
fn a_reader_sees_whether_a_writer_is_active() {
    let dir = tempfile::tempdir().unwrap();
    let reader = JsonlStore::open_read_only(config(dir.path(), Compression::Zstd)).unwrap();
    assert!(!reader.writer_active().unwrap());
    let writer = open(dir.path(), Compression::Zstd);
    assert!(reader.writer_active().unwrap());
    assert!(!writer.writer_active().unwrap(), "a writer does not count itself");
    drop(writer);
    assert!(!reader.writer_active().unwrap());
    let absent = JsonlStore::open_read_only(config(&dir.path().join("absent"), Compression::Zstd)).unwrap();
    assert!(!absent.writer_active().unwrap());
}

/// A writer of an earlier build locks only `.lock`: a reader still sees it.
#[test]
fn a_reader_sees_a_writer_of_an_earlier_build() {
    let dir = tempfile::tempdir().unwrap();
    let reader = JsonlStore::open_read_only(config(dir.path(), Compression::Zstd)).unwrap();
    let legacy = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(dir.path().join(".lock"))
        .unwrap();
    assert!(!reader.writer_active().unwrap());
    legacy.lock().unwrap();
    assert!(reader.writer_active().unwrap());
    // And this build's writer waits for it, then gives up, like for any other writer.
    assert!(matches!(JsonlStore::open(config(dir.path(), Compression::Zstd)), Err(PersistenceError::Locked { .. })));
    legacy.unlock().unwrap();
    assert!(!reader.writer_active().unwrap());
}
