//! The reference's own database (`test_data/reference-sqlite`) read back with the reference's
//! answers (`expected.json`): the listing, every balanced `inspect` (closers included, hashed as
//! the reference hashes them), the seek reads and the revisions; opened read-write, read-only and
//! immutable, and again after a read-write open. (The subagent catalog of every id over this
//! database is an end-to-end test: `tests/tests/it/sqlite_reference.rs`.)

use std::{fs, sync::Arc};

use serde_json::Value;
use session_core::{SessionEvent, SessionHeader};
use session_persistence::{Backend, Coordinator, CoordinatorConfig, PersistenceError, SessionPersistence};
use session_persistence_sqlite::{Access, SqliteConfig, SqliteStore};
use tokio_util::sync::CancellationToken;

use crate::{expected, fixture_copy, id, reference_json, sha256};

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
}

fn file_sha256(path: &std::path::Path) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(fs::read(path).unwrap()).iter().map(|byte| format!("{byte:02x}")).collect()
}

/// Every answer of `expected.json` through a fresh coordinator over `backend`.
async fn check_answers(backend: Arc<dyn Backend>, label: &str) {
    let expected = expected();
    let coordinator = Coordinator::new(backend, CoordinatorConfig::default()).unwrap();
    let cancel = CancellationToken::new();

    let listing = coordinator.list_snapshots(&cancel).await.unwrap();
    assert!(listing.faults.is_empty(), "{label}: {:?}", listing.faults);
    let want: Vec<SessionHeader> = expected["headers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|header| SessionHeader::from_json(header, &id(header["id"].as_str().unwrap())).unwrap())
        .collect();
    let listed: Vec<SessionHeader> =
        listing.headers.iter().map(|stored| SessionHeader::clone(&stored.header)).collect();
    assert_eq!(listed, want, "{label}: list");

    let store_id = expected["database"]["storeId"].as_str().unwrap();
    for stored in &listing.headers {
        let answer = &expected["revisions"][stored.header.id.as_str()];
        let token = stored.revision.as_str();
        let suffix = format!(
            ":store:{store_id}:incarnation:{}:revision:{}",
            answer["incarnation"].as_str().unwrap(),
            answer["revision"]
        );
        assert!(token.starts_with("file:") && token.ends_with(&suffix), "{label}: revision {token}");
        let parts: Vec<&str> = token[..token.len() - suffix.len()].split(':').collect();
        assert_eq!(parts.len(), 4, "{label}: file:<dev>:<ino>:<birthtimeNs> in {token}");
    }

    for (session, answer) in expected["inspect"].as_object().unwrap() {
        let session_id = id(session);
        if answer["ok"] == false {
            let error = coordinator.inspect(&session_id, &cancel).await.unwrap_err();
            assert_eq!(error.to_string(), answer["error"].as_str().unwrap(), "{label}: {session}");
            let error = coordinator.read_from(&session_id, 0, &cancel).await.unwrap_err();
            assert_eq!(error.to_string(), answer["readFromError"].as_str().unwrap(), "{label}: {session}");
            continue;
        }
        let inspection = coordinator.inspect(&session_id, &cancel).await.unwrap();
        let n_closers = answer["closers"].as_u64().unwrap() as usize;
        assert_eq!(inspection.events.len() as u64, answer["events"].as_u64().unwrap(), "{label}: {session}");
        assert_eq!(inspection.n_closers as usize, n_closers, "{label}: {session}");
        assert_eq!(
            sha256(&reference_json(&inspection.events, n_closers)),
            answer["sha256"].as_str().unwrap(),
            "{label}: {session} hashes as the reference's inspect"
        );
        if n_closers > 0 {
            let closers: Vec<SessionEvent> = serde_json::from_value(expected["closers"][session].clone()).unwrap();
            let synthesized: Vec<SessionEvent> = inspection.events[inspection.events.len() - n_closers..]
                .iter()
                .map(|event| SessionEvent::clone(event))
                .collect();
            assert_eq!(synthesized, closers, "{label}: {session} closers");
        }
        let stored = coordinator.read_from(&session_id, 0, &cancel).await.unwrap();
        assert_eq!(stored.events.len() as u64, answer["storedEvents"].as_u64().unwrap(), "{label}: {session}");
    }

    for (session, answer) in expected["events"].as_object().unwrap() {
        let inspection = coordinator.inspect(&id(session), &cancel).await.unwrap();
        let meta = SessionHeader::from_json(&answer["meta"], &id(session)).unwrap();
        assert_eq!(*inspection.header, meta, "{label}: {session} meta");
        let events: Vec<Value> =
            inspection.events.iter().map(|event| serde_json::to_value(&**event).unwrap()).collect();
        assert_eq!(Value::Array(events), answer["events"], "{label}: {session} events");
    }

    for (key, answer) in expected["readFrom"].as_object().unwrap() {
        let (session, from) = key.split_once('@').unwrap();
        let from: u64 = from.parse().unwrap();
        match coordinator.read_from(&id(session), from, &cancel).await {
            Ok(read) => {
                assert_eq!(read.events.len() as u64, answer["count"].as_u64().unwrap(), "{label}: {key}");
                assert_eq!(read.events.first().map(|event| event.seq), answer["firstSeq"].as_u64(), "{label}: {key}");
                assert_eq!(read.events.last().map(|event| event.seq), answer["lastSeq"].as_u64(), "{label}: {key}");
                let hash = sha256(&reference_json(&read.events, 0));
                assert_eq!(hash, answer["sha256"].as_str().unwrap(), "{label}: {key}");
            }
            Err(error) => assert_eq!(error.to_string(), answer["error"].as_str().unwrap(), "{label}: {key}"),
        }
    }
}

#[test]
fn the_reference_database_reads_as_the_reference_reads_it() {
    let (_guard, path) = fixture_copy();
    let expected = expected();
    let want_sha = expected["database"]["sha256"].as_str().unwrap();
    assert_eq!(file_sha256(&path), want_sha, "the copy is the reference's file");
    let runtime = runtime();
    for access in [Access::Immutable, Access::ReadOnly, Access::ReadWrite, Access::ReadWrite] {
        let store = SqliteStore::open(SqliteConfig::file(&path).with_access(access)).unwrap();
        runtime.block_on(check_answers(Arc::new(store), &format!("{access:?}")));
    }
    assert_eq!(file_sha256(&path), want_sha, "reading, even read-write, changed no byte of the file");
}

#[test]
fn the_reference_schema_and_identity_are_kept() {
    let (_guard, path) = fixture_copy();
    let expected = expected();
    let fresh_dir = tempfile::tempdir().unwrap();
    let fresh = fresh_dir.path().join("fresh.db");
    drop(SqliteStore::open(SqliteConfig::file(&fresh)).unwrap());
    for (label, file) in [("reference", &path), ("ours", &fresh)] {
        let connection = rusqlite::Connection::open(file).unwrap();
        let pragma =
            |name: &str| -> i64 { connection.query_row(&format!("PRAGMA {name}"), [], |row| row.get(0)).unwrap() };
        assert_eq!(pragma("application_id"), expected["database"]["pragmas"]["application_id"].as_i64().unwrap());
        assert_eq!(pragma("user_version"), expected["database"]["pragmas"]["user_version"].as_i64().unwrap());
        let journal: String = connection.query_row("PRAGMA journal_mode", [], |row| row.get(0)).unwrap();
        assert_eq!(journal, "wal", "{label}");
        let mut statement =
            connection.prepare("SELECT type, name, tbl_name, sql FROM sqlite_schema ORDER BY rowid").unwrap();
        let rows: Vec<Value> = statement
            .query_map([], |row| {
                Ok(serde_json::json!({
                    "type": row.get::<_, String>(0)?, "name": row.get::<_, String>(1)?,
                    "tbl_name": row.get::<_, String>(2)?, "sql": row.get::<_, Option<String>>(3)?,
                }))
            })
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(Value::Array(rows), expected["database"]["schema"], "{label}: the schema text byte for byte");
        let store_id: String = connection
            .query_row("SELECT store_id FROM persistence_state WHERE singleton = 1", [], |row| row.get(0))
            .unwrap();
        assert_eq!(store_id.len(), 36, "{label}");
    }
}

#[test]
fn load_commits_the_reference_repair_of_the_open_turn() {
    let (_guard, path) = fixture_copy();
    let expected = expected();
    runtime().block_on(async {
        let coordinator = Coordinator::new(Arc::new(crate::open(&path)), CoordinatorConfig::default()).unwrap();
        let cancel = CancellationToken::new();
        let loaded = coordinator.load(&id("sq-open-turn"), &cancel).await.unwrap();
        assert_eq!(loaded.events.len(), 67);
        let closers: Vec<SessionEvent> = serde_json::from_value(expected["closers"]["sq-open-turn"].clone()).unwrap();
        let stored: Vec<SessionEvent> = loaded.events[63..].iter().map(|event| SessionEvent::clone(event)).collect();
        assert_eq!(stored, closers);
    });
    let connection = rusqlite::Connection::open(&path).unwrap();
    let rows: Vec<(i64, String, Option<i64>)> = connection
        .prepare("SELECT seq, type, ignorable FROM events WHERE session_id = 'sq-open-turn' AND seq >= 63 ORDER BY seq")
        .unwrap()
        .query_map([], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let kinds: Vec<(i64, &str, Option<i64>)> =
        rows.iter().map(|(seq, kind, flag)| (*seq, kind.as_str(), *flag)).collect();
    assert_eq!(
        kinds,
        [(63, "tool/result", None), (64, "tool/result", None), (65, "step/end", None), (66, "turn/end", None)],
        "four scalar rows"
    );
    let revision: i64 =
        connection.query_row("SELECT revision FROM sessions WHERE id = 'sq-open-turn'", [], |row| row.get(0)).unwrap();
    assert_eq!(revision, 3, "one repair transaction");
    drop(connection);
    // The reference's answers for every other session still hold after the repair.
    runtime().block_on(async {
        let coordinator = Coordinator::new(Arc::new(crate::open(&path)), CoordinatorConfig::default()).unwrap();
        let read = coordinator.read_from(&id("sq-open-turn"), 0, &CancellationToken::new()).await.unwrap();
        assert_eq!(read.events.len(), 67);
    });
}

#[test]
fn a_read_only_store_refuses_writes_clearly() {
    let (_guard, path) = fixture_copy();
    for access in [Access::ReadOnly, Access::Immutable] {
        let store = SqliteStore::open(SqliteConfig::file(&path).with_access(access)).unwrap();
        let header = SessionHeader::new(id("s-new"), 1);
        let event = Arc::new(SessionEvent::new(
            "turn/start",
            0,
            1,
            session_core::JsonData::from_text(r#"{"turn":1}"#).unwrap(),
        ));
        let error = store.append_batch(&header, &[event], false).unwrap_err();
        let PersistenceError::InvalidInput { message } = &error else { panic!("{error:?}") };
        assert!(message.contains("is open read-only") && message.contains("writes are refused"), "{message}");
    }
}
