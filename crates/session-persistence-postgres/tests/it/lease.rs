//! Writer leases and the rows a writer would trip on: a repair from another store (another pool,
//! as another process has) leaves a session that a live writer leases alone and names the
//! holder, repairs an unheld one, and may repair once every holder's lease ends; a
//! `next_seq` below the stored events is reported as corrupt by a read.

use std::sync::Arc;

use session_core::{JsonData, SessionEvent, SessionHeader, SessionId};
use session_persistence::{Backend, CollectSink, PersistenceError};
use session_persistence_postgres::PgStore;
use tokio_util::sync::CancellationToken;

use crate::TestSchema;

fn event(kind: &str, seq: u64, data: &str) -> Arc<SessionEvent> {
    Arc::new(SessionEvent::new(kind, seq, 10 + seq as i64, JsonData::from_text(data).unwrap()))
}

fn open_turn(store: &PgStore, id: &str) -> SessionHeader {
    let header = SessionHeader::new(SessionId::from(id), 1_000);
    store.append_batch(&header, &[event("turn/start", 0, r#"{"turn":1}"#)], false).unwrap();
    header
}

fn closer() -> SessionEvent {
    SessionEvent::new("turn/end", 1, 20, JsonData::from_text(r#"{"turn":1,"reason":{"kind":"interrupted"}}"#).unwrap())
}

fn scan(store: &PgStore, id: &str) -> session_persistence::Result<usize> {
    let mut sink = CollectSink::default();
    store.scan(&SessionId::from(id), &CancellationToken::new(), &mut sink)?;
    Ok(sink.events.len())
}

#[test]
fn a_repair_leaves_a_leased_session_alone_and_repairs_an_unheld_one() {
    let Some(schema) = TestSchema::new() else { return };
    let writer = schema.open();
    let held = open_turn(&writer, "held");
    let unheld = open_turn(&writer, "unheld");
    writer.lease(&held.id).unwrap();
    writer.lease(&held.id).unwrap();

    let repairer = schema.open();
    let error = repairer.commit_repair(&held, None, &[closer()]).unwrap_err();
    let PersistenceError::Held { id, holder } = &error else { panic!("{error:?}") };
    assert_eq!(id, &held.id);
    assert!(holder.contains(&format!("pid {}", std::process::id())), "the holder names itself: {holder}");
    assert!(holder.starts_with("host "), "without the handle's tag: {holder}");
    assert_eq!(scan(&writer, "held").unwrap(), 1, "the held turn is left open");
    repairer.commit_repair(&unheld, None, &[closer()]).unwrap();
    assert_eq!(scan(&writer, "unheld").unwrap(), 2);

    // The holder's own repair is its own to make.
    writer.commit_repair(&held, None, &[closer()]).unwrap();
    let second = open_turn(&writer, "second");
    writer.lease(&second.id).unwrap();
    let other = schema.open();
    other.lease(&second.id).unwrap();
    writer.end_lease(&second.id);
    assert!(
        matches!(repairer.commit_repair(&second, None, &[closer()]), Err(PersistenceError::Held { .. })),
        "another writer still holds it"
    );
    other.end_lease(&second.id);
    repairer.commit_repair(&second, None, &[closer()]).unwrap();
    assert_eq!(scan(&writer, "second").unwrap(), 2, "no lease is left");
}

#[test]
fn a_next_seq_below_the_stored_events_is_corrupt() {
    let Some(schema) = TestSchema::new() else { return };
    let store = schema.open();
    let header = open_turn(&store, "s");
    store.append_batch(&header, &[event("test/a", 1, "{}"), event("test/b", 2, "{}")], true).unwrap();
    schema.sql("UPDATE {s}.sessions SET next_seq = 1 WHERE id = 's'");
    let error = scan(&store, "s").unwrap_err();
    assert!(matches!(error, PersistenceError::Corrupt { .. }), "{error:?}");
    assert!(
        error.to_string().contains("events are stored up to seq 2, but the session row's next_seq is 1"),
        "{error}"
    );
}
