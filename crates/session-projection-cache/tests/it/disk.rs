//! The on-disk checkpoint store: layout, atomic replace, and records it must discard (damaged,
//! foreign, other versions) without ever failing to open.

use std::{fs, path::Path, sync::Arc};

use serde_json::{Value, json};
use session_core::SessionId;
use session_projection::CheckpointRow;
use session_projection_cache::{
    CheckpointRecord, CheckpointStore, DiskCheckpointStore, ProjectionCache, RECORD_VERSION, RecordIdentity,
};
use tokio_util::sync::CancellationToken;

use crate::support::{Call, Logs, World, WorldOptions, event, header};

fn record(seq: i64) -> CheckpointRecord {
    let mut rows = session_projection::CheckpointRows::new();
    rows.insert("test/marks".into(), CheckpointRow { ver: 1, seq, val: json!({"marks": ["a"]}) });
    CheckpointRecord {
        identity: RecordIdentity { created_at: 0, cwd: None },
        as_of_seq: seq,
        rows,
        failures: Default::default(),
    }
}

fn entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> =
        fs::read_dir(dir).unwrap().map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    names
}

#[test]
fn records_round_trip_one_file_per_session() {
    let dir = tempfile::tempdir().unwrap();
    let store = DiskCheckpointStore::open(dir.path()).unwrap();
    let (a, b) = (SessionId::from("a"), SessionId::from("odd/id ~ é"));
    store.put(&a, &record(1)).unwrap();
    store.put(&b, &record(2)).unwrap();
    store.put(&a, &record(3)).unwrap();
    assert_eq!(store.get(&a).unwrap(), Some(record(3)));
    assert_eq!(store.get(&b).unwrap(), Some(record(2)));
    assert_eq!(store.get(&SessionId::from("c")).unwrap(), None);
    assert_eq!(entries(&dir.path().join("records")), vec!["a".to_owned(), "odd~002Fid~0020~007E~0020~00E9".to_owned()]);
    assert_eq!(entries(&dir.path().join("tmp")), Vec::<String>::new(), "no temporary file is left behind");
    assert_eq!(store.record_path(&b).unwrap(), dir.path().join("records").join("odd~002Fid~0020~007E~0020~00E9"));

    assert!(store.remove(&a).unwrap());
    assert!(!store.remove(&a).unwrap());
    assert_eq!(store.get(&a).unwrap(), None);

    // Reopening finds the records; leftovers of an interrupted write are swept.
    fs::write(dir.path().join("tmp").join("99-0.tmp"), b"half a rec").unwrap();
    let reopened = DiskCheckpointStore::open(dir.path()).unwrap();
    assert_eq!(reopened.get(&b).unwrap(), Some(record(2)));
    assert_eq!(entries(&dir.path().join("tmp")), Vec::<String>::new());
}

#[test]
fn an_id_too_long_for_a_file_name_is_refused_on_write_and_absent_on_read() {
    let dir = tempfile::tempdir().unwrap();
    let store = DiskCheckpointStore::open(dir.path()).unwrap();
    let long = SessionId::from("x".repeat(300));
    assert!(store.put(&long, &record(1)).is_err());
    assert_eq!(store.get(&long).unwrap(), None);
}

/// Ways to damage a stored record, each of which must make `get` discard it.
fn damages(path: &Path, other_path: &Path) -> Vec<(&'static str, Vec<u8>)> {
    let good = fs::read(path).unwrap();
    let text = String::from_utf8(good.clone()).unwrap();
    let mut flipped = good.clone();
    let at = text.find("\"marks\"").unwrap() + 3;
    flipped[at] ^= 0x01;
    let mut envelope: Value = serde_json::from_str(&text).unwrap();
    envelope["version"] = json!(RECORD_VERSION + 1);
    let newer = serde_json::to_vec(&envelope).unwrap();
    envelope["version"] = json!(RECORD_VERSION);
    envelope["format"] = json!("something-else");
    let foreign_format = serde_json::to_vec(&envelope).unwrap();
    let mut invalid: Value = serde_json::from_str(&text).unwrap();
    invalid["record"]["asOfSeq"] = json!(-7);
    let body = serde_json::to_string(&invalid["record"]).unwrap();
    let invalid = format!(
        "{{\"format\":\"session-projection-cache\",\"version\":1,\"id\":\"s\",\"crc32\":{},\"record\":{body}}}\n",
        crc32_of(&body)
    )
    .into_bytes();
    vec![
        ("empty", Vec::new()),
        ("garbage", b"\x00\xffnot json at all".to_vec()),
        ("truncated", good[..good.len() / 2].to_vec()),
        ("flipped bit", flipped),
        ("newer version", newer),
        ("foreign format", foreign_format),
        ("another session's record", fs::read(other_path).unwrap()),
        ("invalid record under a valid checksum", invalid),
        ("a bare JSON value", b"42\n".to_vec()),
    ]
}

fn crc32_of(text: &str) -> u32 {
    // The reference CRC-32 (IEEE), bitwise, independent of the store's table.
    let mut crc = !0u32;
    for &byte in text.as_bytes() {
        crc ^= u32::from(byte);
        for _ in 0..8 {
            crc = if crc & 1 == 1 { (crc >> 1) ^ 0xEDB8_8320 } else { crc >> 1 };
        }
    }
    !crc
}

#[test]
fn damaged_foreign_and_version_mismatched_records_are_discarded_with_a_warning() {
    let (logs, _guard) = Logs::capture();
    let dir = tempfile::tempdir().unwrap();
    let store = DiskCheckpointStore::open(dir.path()).unwrap();
    let (id, other) = (SessionId::from("s"), SessionId::from("t"));
    store.put(&id, &record(1)).unwrap();
    store.put(&other, &record(5)).unwrap();
    let path = store.record_path(&id).unwrap();
    for (name, bytes) in damages(&path, &store.record_path(&other).unwrap()) {
        fs::write(&path, &bytes).unwrap();
        assert_eq!(store.get(&id).unwrap(), None, "{name}");
        assert!(DiskCheckpointStore::open(dir.path()).is_ok(), "{name}: the store still opens");
        store.put(&id, &record(1)).unwrap();
        assert_eq!(store.get(&id).unwrap(), Some(record(1)), "{name}: the next write replaces it");
    }
    let messages = logs.all();
    for kind in ["corrupt", "foreign", "version-mismatched"] {
        let needle = format!("session projection cache: discarding the {kind} record of \"s\"");
        assert!(messages.iter().any(|message| message.contains(&needle)), "{needle} in {messages:?}");
    }
}

#[test]
fn a_directory_in_place_of_a_record_is_an_io_error_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let store = DiskCheckpointStore::open(dir.path()).unwrap();
    let id = SessionId::from("s");
    fs::create_dir(store.record_path(&id).unwrap()).unwrap();
    assert!(store.get(&id).is_err());
    assert!(store.put(&id, &record(1)).is_err());
    assert_eq!(entries(&dir.path().join("tmp")), Vec::<String>::new());
}

/// A FIFO in a record's place is refused without being opened for a blocking read: the
/// read returns an error at once (a blocking open would hang this test, which no writer feeds).
#[test]
fn a_fifo_in_place_of_a_record_is_an_error_not_a_hang() {
    let dir = tempfile::tempdir().unwrap();
    let store = DiskCheckpointStore::open(dir.path()).unwrap();
    let id = SessionId::from("s");
    let path = store.record_path(&id).unwrap();
    assert!(std::process::Command::new("mkfifo").arg(&path).status().unwrap().success());
    let error = store.get(&id).unwrap_err();
    assert!(error.to_string().contains("not a regular file"), "{error}");
}

#[tokio::test]
async fn a_cache_over_a_damaged_disk_store_serves_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let disk = Arc::new(DiskCheckpointStore::open(dir.path()).unwrap());
    let world = World::new(WorldOptions { records: disk.clone(), policy: false, ..WorldOptions::default() });
    let events = vec![event(0, "test/mark", json!({"marks": ["a"]})), event(1, "test/other", json!({}))];
    world.stored_log(header("s", 0), events).await;
    let id = SessionId::from("s");
    let first = world.cache.cold_snapshot(&id, &CancellationToken::new()).await.unwrap();
    assert_eq!(world.take_reads("s"), vec![Call::Stream]);
    assert_eq!(
        world.cache.cached_snapshot(&header("s", 0)).await.map(|snapshot| snapshot.values),
        Some(first.values.clone())
    );

    fs::write(disk.record_path(&id).unwrap(), b"{\"format\":\"session-projection-cache\",\"ver").unwrap();
    assert_eq!(world.cache.cached_snapshot(&header("s", 0)).await, None);
    let again = world.cache.cold_snapshot(&id, &CancellationToken::new()).await.unwrap();
    assert_eq!(again, first);
    assert_eq!(world.take_reads("s"), vec![Call::Stream], "only the read count changes");
    assert!(world.cache.cached_snapshot(&header("s", 0)).await.is_some(), "the write-back healed the record");

    // A second cache over the same root sees the healed record.
    let reopened = ProjectionCache::new(
        world.registry.clone(),
        world.persistence.clone(),
        Arc::new(DiskCheckpointStore::open(dir.path()).unwrap()),
        world.clock.clone(),
        world.cache.config(),
    )
    .unwrap();
    assert_eq!(reopened.cold_snapshot(&id, &CancellationToken::new()).await.unwrap(), first);
    assert_eq!(world.take_reads("s"), vec![Call::ReadFrom(1)]);
}

/// A cache root that cannot be opened (a file where the directory should be) is moved aside under
/// a name with the stamp, and a fresh, empty store opens in its place; a healthy root is opened
/// as it is.
#[test]
fn a_root_that_cannot_be_opened_is_moved_aside() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join(".projection-cache");
    fs::write(&root, b"not a directory").unwrap();
    assert!(DiskCheckpointStore::open(&root).is_err());
    let (store, moved) = DiskCheckpointStore::open_or_move_aside(&root, "20261202T003000Z").unwrap();
    let moved = moved.expect("the file was moved aside");
    assert_eq!(
        (moved.from.as_path(), moved.to.as_path()),
        (root.as_path(), dir.path().join(".projection-cache.damaged-20261202T003000Z").as_path())
    );
    assert_eq!(fs::read(&moved.to).unwrap(), b"not a directory");
    let id = SessionId::from("s");
    assert_eq!(store.get(&id).unwrap(), None);
    store.put(&id, &record(3)).unwrap();
    drop(store);
    let (store, moved) = DiskCheckpointStore::open_or_move_aside(&root, "20261202T003000Z").unwrap();
    assert!(moved.is_none(), "a healthy root is opened as it is");
    assert_eq!(store.get(&id).unwrap(), Some(record(3)));
}
