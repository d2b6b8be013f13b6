//! Integration tests of the SQLite store: the reference's database read back with its own
//! answers, the backend test kit's contracts, torn and corrupt rows, racing writers, file rules,
//! following a shared file, and the checkpoint store.

mod checkpoint;
mod contract;
mod fixture;
mod lease;
mod rows;
mod rules;
mod watch;
mod writes;

use std::{
    fs,
    os::unix::fs::PermissionsExt,
    path::{Path, PathBuf},
    sync::Arc,
};

use session_core::{SessionEvent, SessionId, SurfaceOp};
use session_persistence_sqlite::{SqliteConfig, SqliteStore};

/// The database the reference wrote, with its answers. Never opened in place: tests copy it.
pub(crate) fn fixture_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("test_data/reference-sqlite")
}

pub(crate) fn expected() -> serde_json::Value {
    let text = fs::read_to_string(fixture_dir().join("expected.json")).expect("expected.json is readable");
    serde_json::from_str(&text).expect("expected.json is JSON")
}

/// A private copy of the reference's database (a git checkout makes it 0644, which the path rules
/// refuse): a 0700 directory holding the file at 0600. Lives as long as the returned guard.
pub(crate) fn fixture_copy() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let private = dir.path().join("private");
    fs::create_dir(&private).unwrap();
    fs::set_permissions(&private, fs::Permissions::from_mode(0o700)).unwrap();
    let path = private.join("sessions.db");
    fs::copy(fixture_dir().join("sessions.db"), &path).unwrap();
    fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).unwrap();
    (dir, path)
}

pub(crate) fn open(path: &Path) -> SqliteStore {
    SqliteStore::open(SqliteConfig::file(path)).expect("the store opens")
}

pub(crate) fn id(text: &str) -> SessionId {
    SessionId::from(text)
}

/// `JSON.stringify(events)` as the reference computes it for its `sha256` answers: stored events
/// put `sourceEventSeqs` before `surfaceOp`, synthesized closers (the last `n_closers`) after it.
pub(crate) fn reference_json(events: &[Arc<SessionEvent>], n_closers: usize) -> String {
    let mut out = Vec::from(*b"[");
    let first_closer = events.len() - n_closers;
    for (idx, event) in events.iter().enumerate() {
        if idx > 0 {
            out.push(b',');
        }
        if idx < first_closer || event.source_event_seqs.is_none() || event.surface_op.is_none() {
            event.write_json(&mut out);
            continue;
        }
        let mut plain = SessionEvent::clone(event);
        let sources = plain.source_event_seqs.take().unwrap_or_default();
        plain.surface_op = None;
        let mut text = Vec::new();
        plain.write_json(&mut text);
        text.pop();
        out.extend_from_slice(&text);
        match event.surface_op {
            Some(SurfaceOp::Append) => out.extend_from_slice(b",\"surfaceOp\":\"append\""),
            other => panic!("a closer with surfaceOp {other:?}"),
        }
        let list: Vec<String> = sources.iter().map(u64::to_string).collect();
        out.extend_from_slice(format!(",\"sourceEventSeqs\":[{}]}}", list.join(",")).as_bytes());
    }
    out.push(b']');
    String::from_utf8(out).unwrap()
}

pub(crate) fn sha256(text: &str) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(text.as_bytes()).iter().map(|byte| format!("{byte:02x}")).collect()
}
