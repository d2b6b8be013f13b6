//! Setup and faults: the explicit setup step (created, then current; a newer schema refused by
//! setup and open alike; an unset schema refused by open; version 1 migrated, its rows read as
//! they were), the password kept out of every message, a damaged row or a missing one read as
//! `Corrupt` (runs of events too), a bad header row as its own
//! listing fault, a column of an unexpected type as a typed error, and a connection the server
//! drops: a typed error, then recovery by itself.

use std::sync::Arc;

use session_core::{JsonData, SessionEvent, SessionHeader, SessionId};
use session_persistence::{Backend, CollectSink, CorruptKind, DatabaseFault, PersistenceError};
use session_persistence_postgres::{PgConfig, PgStore, SetupOutcome, redact_url};
use tokio_util::sync::CancellationToken;

use crate::{TestSchema, server_url};

fn header(id: &str) -> SessionHeader {
    let mut header = SessionHeader::new(SessionId::from(id), 1_000);
    header.cwd = Some("/w".to_owned());
    header
}

fn events(range: std::ops::Range<u64>) -> Vec<Arc<SessionEvent>> {
    range
        .map(|seq| Arc::new(SessionEvent::new("test/n", seq, 1, JsonData::from_text(seq.to_string()).unwrap())))
        .collect()
}

fn scan(store: &dyn Backend, id: &str) -> Result<usize, PersistenceError> {
    let mut sink = CollectSink::default();
    store.scan(&SessionId::from(id), &CancellationToken::new(), &mut sink)?;
    Ok(sink.events.len())
}

#[test]
fn setup_is_explicit_and_a_newer_schema_is_refused() {
    let Some(schema) = TestSchema::bare() else { return };
    let error = PgStore::open(schema.config()).unwrap_err();
    assert!(matches!(&error, PersistenceError::Refused { .. }), "{error:?}");
    assert!(error.to_string().contains("is not set up") && error.to_string().contains("apiproxy setup"), "{error}");
    assert_eq!(PgStore::setup(schema.config()).unwrap().1, SetupOutcome::Created);
    assert_eq!(PgStore::setup(schema.config()).unwrap().1, SetupOutcome::Current);
    let store_id = PgStore::open(schema.config()).unwrap().store_id().to_owned();
    assert_eq!(PgStore::open(schema.config()).unwrap().store_id(), store_id, "the id is the store's, not the opener's");
    schema.sql("UPDATE {s}.store_meta SET schema_version = 7");
    for error in [PgStore::open(schema.config()).unwrap_err(), PgStore::setup(schema.config()).unwrap_err()] {
        assert!(
            error.to_string().contains("has schema version 7, newer than this build's 2")
                && error.to_string().contains("upgrade"),
            "{error}"
        );
    }
}

#[test]
fn the_password_never_appears_in_a_message() {
    let url = "postgres://someone:pa55-w0rd-xyz@127.0.0.1:1/test?connect_timeout=2";
    let config = PgConfig::from_url(url).unwrap();
    assert_eq!(config.shown(), "postgres://someone@127.0.0.1:1/test?schema=public");
    assert!(!format!("{config:?}").contains("pa55"));
    assert_eq!(redact_url(url), "postgres://someone:***@127.0.0.1:1/test?connect_timeout=2");
    // Nothing listens on port 1: the open fails, and says where without the password.
    let error = PgStore::open(&config).unwrap_err();
    assert!(!error.to_string().contains("pa55") && !format!("{error:?}").contains("pa55"), "{error:?}");
    assert!(error.to_string().contains("postgres://someone@127.0.0.1:1/test"), "{error}");
    let error = PgConfig::from_url("postgres://someone:pa55-w0rd-xyz@127.0.0.1:notaport/test").unwrap_err();
    assert!(!error.to_string().contains("pa55"), "{error}");
    let error = PgConfig::from_url("postgres://u:pa55-w0rd-xyz@h/d?schema=Bad-Name").unwrap_err();
    assert!(!error.to_string().contains("pa55") && error.to_string().contains("schema"), "{error}");
    // A password given as a parameter is kept out as well.
    assert_eq!(redact_url("postgres://u@h/d?password=pa55-w0rd-xyz&x=1"), "postgres://u@h/d?password=***&x=1");
    let error = PgConfig::from_url("postgres://u@h/d?password=pa55-w0rd-xyz&bogus_option=1").unwrap_err();
    assert!(!error.to_string().contains("pa55"), "{error}");
    let config = PgConfig::from_url("postgres://u@127.0.0.1:1/d?password=pa55-w0rd-xyz&connect_timeout=2").unwrap();
    assert!(!format!("{config:?}").contains("pa55") && !config.shown().contains("pa55"));
    let error = PgStore::open(&config).unwrap_err();
    assert!(!error.to_string().contains("pa55"), "{error}");
}

#[test]
fn damaged_and_missing_rows_are_corrupt_and_a_bad_header_is_its_own_fault() {
    let Some(schema) = TestSchema::new() else { return };
    let store = schema.open();
    // One event per append: one row per event, as schema version 1 wrote every row.
    for id in ["a", "b", "c"] {
        for seq in 0..5 {
            store.append_batch(&header(id), &events(seq..seq + 1), false).unwrap();
        }
    }
    schema.sql("UPDATE {s}.events SET record = '{\"type\":' WHERE session_id = 'a' AND seq = 2");
    let error = scan(&store, "a").unwrap_err();
    assert!(matches!(&error, PersistenceError::Corrupt { kind: CorruptKind::Record, .. }), "{error:?}");
    schema.sql("DELETE FROM {s}.events WHERE session_id = 'b' AND seq = 4");
    let error = scan(&store, "b").unwrap_err();
    assert!(matches!(&error, PersistenceError::Corrupt { kind: CorruptKind::SeqGap, .. }), "{error:?}");
    schema.sql("UPDATE {s}.sessions SET header = 'not json' WHERE id = 'c'");
    let listing = store.list(&CancellationToken::new()).unwrap();
    assert_eq!(listing.headers.iter().map(|stored| stored.header.id.as_str()).collect::<Vec<_>>(), ["a", "b"]);
    assert_eq!(listing.faults.len(), 1);
    assert_eq!(listing.faults[0].id.as_str(), "c");
}

#[test]
fn a_dropped_connection_is_a_typed_error_and_the_store_recovers_by_itself() {
    let Some(schema) = TestSchema::new() else { return };
    let name = format!("pg-drop-{}", schema.name());
    let url = format!("{}?application_name={name}", server_url().unwrap());
    let config = PgConfig::from_url(&url).unwrap().with_schema(schema.name()).unwrap().with_pool_size(1);
    let store = PgStore::open(&config).unwrap();
    store.append_batch(&header("s"), &events(0..3), false).unwrap();
    let killed = schema.value(&format!(
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = '{name}'"
    ));
    assert_eq!(killed.as_deref(), Some("1"));
    // The pooled connection is gone: at most one call fails, as an I/O error, and no call hangs.
    let mut outcomes = Vec::new();
    for _ in 0..3 {
        let outcome = scan(&store, "s");
        let done = outcome.is_ok();
        outcomes.push(outcome);
        if done {
            break;
        }
    }
    let (failures, successes): (Vec<_>, Vec<_>) = outcomes.into_iter().partition(Result::is_err);
    assert_eq!(successes.len(), 1, "the store reconnects by itself: {failures:?}");
    assert!(failures.len() <= 1, "{failures:?}");
    for failure in failures {
        let error = failure.unwrap_err();
        assert!(matches!(error, PersistenceError::Database { kind: DatabaseFault::Connection, .. }), "{error:?}");
    }
    // Nothing acknowledged was lost, and appends go on.
    store.append_batch(&header("s"), &events(3..5), true).unwrap();
    assert_eq!(scan(&store, "s").unwrap(), 5);
}

/// An append whose connection the server drops while it waits for the session row's lock fails
/// typed, and its connection is not handed out again: the next append succeeds at once (once the
/// lock is free), on a pool of one.
#[test]
fn an_append_dropped_while_it_waits_for_the_row_lock_fails_typed_and_the_next_one_succeeds() {
    let Some(schema) = TestSchema::new() else { return };
    let name = format!("pg-lock-drop-{}", schema.name());
    let url = format!("{}?application_name={name}", server_url().unwrap());
    let config = PgConfig::from_url(&url).unwrap().with_schema(schema.name()).unwrap().with_pool_size(1);
    let store = PgStore::open(&config).unwrap();
    store.append_batch(&header("s"), &events(0..3), false).unwrap();
    let poll = |query: &str| {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while schema.value(query).as_deref() != Some("1") {
            assert!(std::time::Instant::now() < deadline, "{query} never held");
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    };
    std::thread::scope(|scope| {
        // Another connection holds the session row's lock for a while.
        let holder = scope.spawn(|| {
            schema.sql("BEGIN; SELECT next_seq FROM {s}.sessions WHERE id = 's' FOR UPDATE; SELECT pg_sleep(3); COMMIT")
        });
        poll("SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'PgSleep' AND query LIKE '%{s}.sessions%'");
        let appending = scope.spawn(|| store.append_batch(&header("s"), &events(3..4), true));
        let waiting = format!(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = '{name}' AND wait_event_type = 'Lock'"
        );
        poll(&waiting);
        let killed = schema.value(&format!(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = '{name}' \
             AND wait_event_type = 'Lock'"
        ));
        assert_eq!(killed.as_deref(), Some("1"));
        let error = appending.join().unwrap().unwrap_err();
        assert!(matches!(error, PersistenceError::Database { kind: DatabaseFault::Connection, .. }), "{error:?}");
        assert_eq!(store.pooled_connections(), 0, "the failed connection left the pool");
        // At once, on the pool's one connection: a new one, not the dropped one.
        store.append_batch(&header("s"), &events(3..5), true).unwrap();
        holder.join().unwrap();
    });
    assert_eq!(scan(&store, "s").unwrap(), 5);
}

/// A batch that starts at the stored next seq while a stored run reaches past it (a hand edit)
/// is refused by the one-statement append's guard, and moves nothing.
#[test]
fn an_append_to_a_stored_session_into_a_run_past_the_next_seq_moves_nothing() {
    let Some(schema) = TestSchema::new() else { return };
    let store = schema.open();
    store.append_batch(&header("over"), &events(0..10), false).unwrap();
    store.append_batch(&header("over"), &events(10..12), true).unwrap();
    schema.sql("UPDATE {s}.sessions SET next_seq = 5 WHERE id = 'over'");
    let row =
        || schema.value("SELECT next_seq || '/' || revision || '/' || n_bytes FROM {s}.sessions WHERE id = 'over'");
    let before = row();
    let error = store.append_batch(&header("over"), &events(5..8), true).unwrap_err();
    assert!(matches!(&error, PersistenceError::Inconsistent { .. }), "{error:?}");
    assert!(error.to_string().contains("holds event rows from seq 5 on, past its stored next seq"), "{error}");
    assert_eq!(row(), before);
    assert_eq!(schema.value("SELECT count(*) FROM {s}.events WHERE session_id = 'over'"), Some("2".to_owned()));
}

#[test]
fn a_server_that_never_answers_is_a_bounded_typed_error() {
    // A listener that accepts connections and never says a word: the connection's startup waits
    // for it, bounded by the connect timeout.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let held = std::thread::spawn(move || {
        let (socket, _) = listener.accept().unwrap();
        socket
    });
    let config = PgConfig::from_url(&format!("postgres://nobody:pa55-w0rd-xyz@127.0.0.1:{port}/test"))
        .unwrap()
        .with_connect_timeout(std::time::Duration::from_millis(300))
        .with_query_timeout(std::time::Duration::from_millis(600));
    let error = PgStore::open(&config).unwrap_err();
    assert!(matches!(error, PersistenceError::Database { kind: DatabaseFault::Timeout, .. }), "{error:?}");
    assert!(!error.to_string().contains("pa55"), "{error}");
    drop(held.join().unwrap());
}

/// A column holding another type than the schema's (altered by SQL behind the store's back) is a
/// typed `Database` error naming the column on every read of it, never the driver's panic.
#[test]
fn a_column_of_an_unexpected_type_is_a_typed_error() {
    let Some(schema) = TestSchema::new() else { return };
    schema.open().append_batch(&header("s"), &events(0..2), false).unwrap();
    schema.sql("ALTER TABLE {s}.sessions ALTER COLUMN revision TYPE text USING revision::text");
    // A fresh store, whose statements are prepared against the altered tables.
    let store = schema.open();
    let cancel = CancellationToken::new();
    let check = |what: &str, result: Result<(), PersistenceError>, column: &str| {
        let error = result.expect_err(what);
        assert!(matches!(error, PersistenceError::Database { kind: DatabaseFault::Other, .. }), "{what}: {error:?}");
        assert!(error.to_string().contains(column), "{what}: the message names the column: {error}");
    };
    check("revision", store.revision(&SessionId::from("s")).map(drop), "(revision)");
    check("list", store.list(&cancel).map(drop), "(revision)");
    check("header", store.header(&SessionId::from("s"), &cancel).map(drop), "(revision)");
    check("scan", scan(&store, "s").map(drop), "(revision)");
}

#[test]
fn a_version_1_schema_is_migrated_and_its_rows_read_as_before() {
    let Some(schema) = TestSchema::new() else { return };
    let store = schema.open();
    // Rows of one event each, then the schema taken back to version 1's shape.
    for seq in 0..6 {
        store.append_batch(&header("old"), &events(seq..seq + 1), false).unwrap();
    }
    drop(store);
    schema.sql("ALTER TABLE {s}.events DROP COLUMN n_events; UPDATE {s}.store_meta SET schema_version = 1");
    let error = PgStore::open(schema.config()).unwrap_err();
    assert!(error.to_string().contains("has schema version 1; run the setup step to migrate it"), "{error}");
    assert_eq!(PgStore::setup(schema.config()).unwrap().1, SetupOutcome::Migrated { from: 1 });
    assert_eq!(PgStore::setup(schema.config()).unwrap().1, SetupOutcome::Current);
    let store = PgStore::open(schema.config()).unwrap();
    assert_eq!(scan(&store, "old").unwrap(), 6);
    // New appends after the old rows are runs.
    store.append_batch(&header("old"), &events(6..20), false).unwrap();
    let mut sink = CollectSink::default();
    store.scan(&SessionId::from("old"), &CancellationToken::new(), &mut sink).unwrap();
    assert_eq!(sink.events.iter().map(|event| event.seq).collect::<Vec<_>>(), (0..20).collect::<Vec<_>>());
    assert_eq!(schema.value("SELECT count(*) FROM {s}.events"), Some("7".to_owned()));
}

#[test]
fn a_damaged_run_is_corrupt() {
    let Some(schema) = TestSchema::new() else { return };
    let store = schema.open();
    for id in ["short", "long", "gap"] {
        store.append_batch(&header(id), &events(0..10), false).unwrap();
        store.append_batch(&header(id), &events(10..20), false).unwrap();
    }
    assert_eq!(
        schema.value("SELECT n_events FROM {s}.events WHERE session_id = 'short' AND seq = 10"),
        Some("10".to_owned())
    );
    schema.sql("UPDATE {s}.events SET n_events = 9 WHERE session_id = 'short' AND seq = 10");
    schema.sql("UPDATE {s}.events SET n_events = 11 WHERE session_id = 'long' AND seq = 0");
    schema.sql("DELETE FROM {s}.events WHERE session_id = 'gap' AND seq = 0");
    for (id, kind) in [("short", CorruptKind::Record), ("long", CorruptKind::Record), ("gap", CorruptKind::SeqGap)] {
        let error = scan(&store, id).unwrap_err();
        assert!(matches!(&error, PersistenceError::Corrupt { kind: found, .. } if *found == kind), "{id}: {error:?}");
        let mut sink = CollectSink::default();
        let error = store.scan_from(&SessionId::from(id), 5, &CancellationToken::new(), &mut sink).unwrap_err();
        assert!(matches!(&error, PersistenceError::Corrupt { .. }), "{id} from 5: {error:?}");
    }
}

#[test]
fn an_append_into_a_stored_run_past_the_next_seq_is_refused() {
    let Some(schema) = TestSchema::new() else { return };
    let store = schema.open();
    store.append_batch(&header("over"), &events(0..10), false).unwrap();
    // The row's next seq taken back into the run (as a hand edit might): no row starts at 5, so
    // only the guard on the last run's end sees the overlap.
    schema.sql("UPDATE {s}.sessions SET next_seq = 5 WHERE id = 'over'");
    let error = store.append_batch(&header("over"), &events(5..8), false).unwrap_err();
    assert!(matches!(&error, PersistenceError::Inconsistent { .. }), "{error:?}");
    assert!(error.to_string().contains("holds event rows from seq 5 on, past its stored next seq"), "{error}");
    assert_eq!(schema.value("SELECT count(*) FROM {s}.events WHERE session_id = 'over'"), Some("1".to_owned()));
}
