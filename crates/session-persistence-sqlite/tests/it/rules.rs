//! The path and permission rules (reference 05 §2.1), each refusal naming the rule and the fix,
//! and the database identity checks on open.

use std::{
    fs,
    os::unix::fs::{MetadataExt, PermissionsExt},
    path::Path,
};

use session_persistence::PersistenceError;
use session_persistence_sqlite::{SqliteConfig, SqliteStore};

fn refusal(path: &Path) -> String {
    match SqliteStore::open(SqliteConfig::file(path)) {
        Err(PersistenceError::Refused { message, .. }) => message,
        Err(other) => panic!("expected a refusal, got {other:?}"),
        Ok(_) => panic!("{} opened", path.display()),
    }
}

fn mode(path: &Path) -> u32 {
    fs::metadata(path).unwrap().mode() & 0o777
}

#[test]
fn a_new_database_is_private() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nested/deeper/sessions.db");
    drop(SqliteStore::open(SqliteConfig::file(&path)).unwrap());
    assert_eq!(mode(&path), 0o600);
    assert_eq!(mode(path.parent().unwrap()), 0o700);
    assert_eq!(mode(path.parent().unwrap().parent().unwrap()), 0o700);
}

#[test]
fn a_file_readable_by_others_is_refused_with_the_fix() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sessions.db");
    drop(SqliteStore::open(SqliteConfig::file(&path)).unwrap());
    fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
    let message = refusal(&path);
    let rule = format!(
        "session database \"{}\" must be owned by the current user and accessible only by that user",
        path.display()
    );
    assert!(message.starts_with(&rule), "{message}");
    assert!(
        message.contains("mode 0644") && message.contains(&format!("chmod 600 \"{}\"", path.display())),
        "{message}"
    );
    fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).unwrap();
    drop(SqliteStore::open(SqliteConfig::file(&path)).unwrap());
}

#[test]
fn a_parent_writable_by_others_is_refused_with_the_fix() {
    let dir = tempfile::tempdir().unwrap();
    let parent = dir.path().join("shared");
    fs::create_dir(&parent).unwrap();
    fs::set_permissions(&parent, fs::Permissions::from_mode(0o775)).unwrap();
    let message = refusal(&parent.join("sessions.db"));
    let rule = format!(
        "session database parent \"{}\" must be owned by the current user and not group/world-writable",
        parent.display()
    );
    assert!(message.starts_with(&rule), "{message}");
    assert!(message.contains(&format!("chmod go-w \"{}\"", parent.display())), "{message}");
    assert!(!parent.join("sessions.db").exists(), "nothing is created before the rules pass");
}

#[test]
fn symbolic_links_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let real = dir.path().join("real");
    fs::create_dir(&real).unwrap();
    fs::set_permissions(&real, fs::Permissions::from_mode(0o700)).unwrap();
    drop(SqliteStore::open(SqliteConfig::file(real.join("sessions.db"))).unwrap());
    let link = real.join("link.db");
    std::os::unix::fs::symlink(real.join("sessions.db"), &link).unwrap();
    let message = refusal(&link);
    assert!(
        message.starts_with(&format!(
            "session database \"{}\" must be a regular file, not a symbolic link",
            link.display()
        )),
        "{message}"
    );
    let linked_dir = dir.path().join("linked");
    std::os::unix::fs::symlink(&real, &linked_dir).unwrap();
    let message = refusal(&linked_dir.join("sessions.db"));
    assert!(
        message.starts_with(&format!("session database parent \"{}\" must be a real directory", linked_dir.display())),
        "{message}"
    );
}

#[test]
fn a_file_of_another_user_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sessions.db");
    drop(SqliteStore::open(SqliteConfig::file(&path)).unwrap());
    // Only root can give a file away; elsewhere this rule cannot be set up, and the mode rules
    // above cover the same check.
    if std::os::unix::fs::chown(&path, Some(65_534), None).is_err() {
        return;
    }
    let message = refusal(&path);
    assert!(
        message.contains("must be owned by the current user") && message.contains("owned by uid 65534"),
        "{message}"
    );
}

fn execute(path: &Path, sql: &str) {
    rusqlite::Connection::open(path).unwrap().execute_batch(sql).unwrap();
}

#[test]
fn a_database_of_another_schema_or_identity_is_refused() {
    let cases = [
        ("CREATE INDEX extra ON events (type)", "does not contain the required schema objects"),
        ("PRAGMA user_version = 17", "has schema version 17, incompatible with this build (18)"),
        ("PRAGMA application_id = 7", "has application id 7, expected 1146308688"),
        ("DELETE FROM persistence_state", "has no valid store identity"),
    ];
    for (sql, tail) in cases {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sessions.db");
        drop(SqliteStore::open(SqliteConfig::file(&path)).unwrap());
        execute(&path, sql);
        assert_eq!(refusal(&path), format!("session database at \"{}\" {tail}", path.display()), "{sql}");
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("other.db");
    fs::File::create(&path).unwrap();
    fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).unwrap();
    execute(&path, "CREATE TABLE notes (body TEXT)");
    assert_eq!(
        refusal(&path),
        format!("session database at \"{}\" has an unversioned schema or application identity", path.display())
    );
}

#[test]
fn a_changed_schema_is_refused_before_a_write() {
    use std::sync::Arc;

    use session_core::{JsonData, SessionEvent, SessionHeader, SessionId};
    use session_persistence::Backend;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sessions.db");
    let store = SqliteStore::open(SqliteConfig::file(&path)).unwrap();
    execute(&path, "CREATE TABLE checkpoints (id TEXT)");
    let event = Arc::new(SessionEvent::new("turn/start", 0, 1, JsonData::from_text(r#"{"turn":1}"#).unwrap()));
    let error = store
        .append_batch(&SessionHeader::new(SessionId::from("s"), 1), std::slice::from_ref(&event), false)
        .unwrap_err();
    assert_eq!(
        error.to_string(),
        format!("session database at \"{}\" does not contain the required schema objects", path.display())
    );
    execute(&path, "DROP TABLE checkpoints; PRAGMA user_version = 19;");
    let error = store.append_batch(&SessionHeader::new(SessionId::from("s"), 1), &[event], false).unwrap_err();
    assert_eq!(error.to_string(), "session database schema changed before mutation (expected 18, got 19)");
}

#[test]
fn a_reader_can_tell_whether_a_writer_has_the_database_open() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sessions.db");
    let writer = SqliteStore::open(SqliteConfig::file(&path)).unwrap();
    let reader = SqliteStore::open_for_reading(&path).unwrap();
    assert!(reader.is_read_only());
    assert!(reader.writer_active().unwrap());
    assert!(!writer.writer_active().unwrap(), "a writer does not count itself");
    let second = SqliteStore::open(SqliteConfig::file(&path)).unwrap();
    drop(writer);
    assert!(reader.writer_active().unwrap(), "another writer still has it open");
    drop(second);
    assert!(!reader.writer_active().unwrap());
}

#[test]
fn an_immutable_read_is_refused_while_commits_wait_in_the_write_ahead_log() {
    use std::sync::Arc;

    use session_core::{JsonData, SessionEvent, SessionHeader, SessionId};
    use session_persistence::Backend;
    use session_persistence_sqlite::Access;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sessions.db");
    let writer = SqliteStore::open(SqliteConfig::file(&path)).unwrap();
    let event = Arc::new(SessionEvent::new("turn/start", 0, 1, JsonData::from_text(r#"{"turn":1}"#).unwrap()));
    writer.append_batch(&SessionHeader::new(SessionId::from("s"), 1), &[event], false).unwrap();
    let immutable = SqliteConfig::file(&path).with_access(Access::Immutable);
    let message = match SqliteStore::open(immutable.clone()) {
        Err(PersistenceError::Refused { message, .. }) => message,
        other => panic!("expected a refusal, got {other:?}"),
    };
    assert!(message.contains("has a write-ahead log") && message.contains("-wal"), "{message}");
    // Closing the last connection folds the log into the file; then an immutable read sees it all.
    drop(writer);
    let store = SqliteStore::open(immutable).unwrap();
    assert_eq!(store.list(&tokio_util::sync::CancellationToken::new()).unwrap().headers.len(), 1);
}
