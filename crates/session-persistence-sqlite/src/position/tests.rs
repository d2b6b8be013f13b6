//! The positions query's plan on the reference's schema: seeks of the two primary keys, never a
//! scan, so a position costs the same however long the logs and however many the sessions.

use rusqlite::Connection;

use super::positions_sql;
use crate::SCHEMA;

#[test]
fn the_positions_query_seeks_the_primary_keys_and_scans_nothing() {
    let connection = Connection::open_in_memory().unwrap();
    for statement in SCHEMA {
        connection.execute_batch(statement).unwrap();
    }
    let mut statement = connection.prepare(&format!("EXPLAIN QUERY PLAN {}", positions_sql(3))).unwrap();
    let plan: Vec<String> =
        statement.query_map(["a", "b", "c"], |row| row.get::<_, String>(3)).unwrap().collect::<Result<_, _>>().unwrap();
    assert!(plan.iter().all(|step| !step.starts_with("SCAN")), "{plan:#?}");
    assert!(plan.iter().any(|step| step.contains("sqlite_autoindex_sessions_1")), "{plan:#?}");
    assert_eq!(plan.iter().filter(|step| step.contains("sqlite_autoindex_events_1")).count(), 2, "{plan:#?}");
}
