//! The order's answers against the whole listing's, after every kind of change another handle,
//! another program or this handle makes: sessions created elsewhere, rows deleted (the largest
//! rowid among them, then reused), a header rewritten by this handle's first batch, one rewritten
//! in place by another program, and rows that do not decode.

use std::path::Path;

use persistence_testkit::answers::{check_answers_agree_with_the_listing, create_session, listed_header as header};
use rusqlite::Connection;
use session_persistence::{Backend, PageRequest};
use tokio_util::sync::CancellationToken;

use crate::{SqliteConfig, SqliteStore};

fn cancel() -> CancellationToken {
    CancellationToken::new()
}

fn first_batch(store: &SqliteStore, header: &session_core::SessionHeader) {
    create_session(store, header);
}

fn check(store: &SqliteStore, parents: &[&str]) {
    check_answers_agree_with_the_listing(store, parents);
}

fn order_len(store: &SqliteStore) -> usize {
    let (slot, _) = store.order_slot().unwrap();
    slot.lock().as_ref().map_or(0, |(_, order)| order.len())
}

fn raw(path: &Path) -> Connection {
    Connection::open(path).unwrap()
}

fn delete(connection: &Connection, id: &str) {
    connection.execute("DELETE FROM events WHERE session_id = ?1", [id]).unwrap();
    connection.execute("DELETE FROM sessions WHERE id = ?1", [id]).unwrap();
}

#[test]
fn the_order_follows_every_change_to_the_sessions_table() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sessions.db");
    let store = SqliteStore::open(SqliteConfig::file(&path)).unwrap();
    let other = SqliteStore::open(SqliteConfig::file(&path)).unwrap();
    for (i, owner) in [(0, Some("ann")), (1, None), (2, Some("bob")), (3, Some("ann"))] {
        first_batch(&store, &header(&format!("p{i}"), 1_000 + i * 100, i as u32 % 2, owner, None));
    }
    first_batch(&store, &header("c0", 1_050, 1, Some("ann"), Some("p0")));
    check(&store, &["p0", "p1"]);
    assert_eq!(order_len(&store), 5, "the first page built the order");

    // Created through another handle, and through this one: children, grandchildren, ties.
    first_batch(&other, &header("c1", 2_000, 1, Some("ann"), Some("p0")));
    first_batch(&other, &header("g0", 2_100, 0, Some("bob"), Some("c0")));
    first_batch(&store, &header("t-b", 2_200, 1, None, None));
    first_batch(&store, &header("t-a", 2_200, 1, None, None));
    check(&store, &["p0", "c0", "p3"]);
    assert_eq!(order_len(&store), 9);

    // Another program deletes a row that is not the last, then the last one, and a new session
    // takes the last one's rowid.
    let program = raw(&path);
    let gap: i64 = program.query_row("SELECT rowid FROM sessions WHERE id = 'c1'", [], |r| r.get(0)).unwrap();
    delete(&program, "c1");
    check(&store, &["p0"]);
    assert_eq!(order_len(&store), 8);
    let last: String =
        program.query_row("SELECT id FROM sessions ORDER BY rowid DESC LIMIT 1", [], |r| r.get(0)).unwrap();
    delete(&program, &last);
    first_batch(&other, &header("reused", 3_000, 0, Some("ann"), Some("p3")));
    check(&store, &["p0", "p3"]);
    // ... and inserts a row at a rowid of its own choosing, in the gap the deletion left.
    program
        .execute(
            "INSERT INTO sessions (rowid, id, version, created_at, cwd, owner, incarnation, revision) \
             VALUES (?1, 'gap', 0, 1200, '/w/1', 'ann', '0b3f9a52-7c1e-4d8a-9f6b-2e5c8d1a4b7f', 0)",
            [gap],
        )
        .unwrap();
    check(&store, &["p0"]);

    // This handle's first batch rewrites the header of a row whose events are gone.
    program.execute("DELETE FROM events WHERE session_id = 'p1'", []).unwrap();
    first_batch(&store, &header("p1", 3_500, 1, Some("ann"), None));
    check(&store, &["p1"]);

    // Another program rewrites a header in place: the next page that reads the row sees it.
    program.execute("UPDATE sessions SET cwd = '/w/1', owner = 'ann' WHERE id = 'p2'", []).unwrap();
    let all = PageRequest { limit: 100, ..PageRequest::default() };
    let page = store.list_page(&all, &cancel()).unwrap();
    let p2 = page.headers.iter().find(|stored| stored.header.id.as_str() == "p2").unwrap();
    assert_eq!(p2.header.cwd.as_deref(), Some("/w/1"));
    check(&store, &["p0"]);

    // A row that does not decode is a fault of the page whose range holds it.
    program
        .execute(
            "INSERT INTO sessions (id, version, created_at, incarnation, revision) VALUES ('bad', 1, 4000, 'x', 0)",
            [],
        )
        .unwrap();
    let page = store.list_page(&all, &cancel()).unwrap();
    assert_eq!(page.faults.iter().map(|fault| fault.id.as_str()).collect::<Vec<_>>(), ["bad"]);
    check(&store, &["p0"]);
}

#[test]
fn a_read_only_handle_orders_what_a_writer_adds_meanwhile() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sessions.db");
    let writer = SqliteStore::open(SqliteConfig::file(&path)).unwrap();
    first_batch(&writer, &header("a", 1_000, 0, None, None));
    let reader = SqliteStore::open_for_reading(&path).unwrap();
    check(&reader, &["a"]);
    for i in 0..20 {
        let parent = (i % 3 == 0).then_some("a");
        first_batch(&writer, &header(&format!("s{i:02}"), 1_000 + i * 37 % 500, i as u32 % 3, Some("ann"), parent));
        check(&reader, &["a"]);
    }
    assert_eq!(order_len(&reader), 21);
}
