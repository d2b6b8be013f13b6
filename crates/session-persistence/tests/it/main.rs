//! Integration tests of the JSONL store and its on-disk format.

mod bounds;
mod contract;
mod damage;
mod golden;
mod layout;
mod legacy;
mod lock;
mod round_trip;
mod rows;
mod survey;

use std::{
    fs,
    path::{Path, PathBuf},
    sync::Arc,
};

use session_core::{JsonData, SessionEvent, SessionHeader, SessionId, SurfaceOp};
use session_persistence::{Backend, CollectSink, Compression, JsonlConfig, JsonlStore, PersistenceError, ScanOutcome};
use tokio_util::sync::CancellationToken;

/// The golden stores written by the reference implementation. Never written to: tests copy them.
pub(crate) fn fixture_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("test_data/reference-store")
}

pub(crate) fn fixture_store(compression: Compression) -> PathBuf {
    fixture_root().join(compression.as_str())
}

pub(crate) fn expected() -> serde_json::Value {
    let text = fs::read_to_string(fixture_root().join("expected.json")).expect("expected.json is readable");
    serde_json::from_str(text.as_str()).expect("expected.json is JSON")
}

pub(crate) fn copy_dir(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for entry in fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            fs::copy(entry.path(), &target).unwrap();
        }
    }
}

/// A private copy of one golden store, in a temp dir that lives as long as the returned guard.
pub(crate) fn fixture_copy(compression: Compression) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("store");
    copy_dir(&fixture_store(compression), &root);
    (dir, root)
}

pub(crate) fn config(root: &Path, compression: Compression) -> JsonlConfig {
    JsonlConfig { compression, ..JsonlConfig::new(root) }
}

pub(crate) fn open(root: &Path, compression: Compression) -> JsonlStore {
    JsonlStore::open(config(root, compression)).expect("the store opens")
}

pub(crate) const ENCODINGS: [Compression; 2] = [Compression::Zstd, Compression::None];

pub(crate) fn id(text: &str) -> SessionId {
    SessionId::from(text)
}

/// Scans `id` into memory.
pub(crate) fn scan(store: &JsonlStore, id: &str) -> Result<Option<(ScanOutcome, Vec<SessionEvent>)>, PersistenceError> {
    let mut sink = CollectSink::default();
    let outcome = store.scan(&SessionId::from(id), &CancellationToken::new(), &mut sink)?;
    Ok(outcome.map(|outcome| (outcome, sink.events)))
}

pub(crate) fn scan_ok(store: &JsonlStore, id: &str) -> (ScanOutcome, Vec<SessionEvent>) {
    scan(store, id).expect("the scan succeeds").expect("the session is stored")
}

pub(crate) fn header(id: &str, cwd: Option<&str>) -> SessionHeader {
    let mut header = SessionHeader::new(SessionId::from(id), 1_772_442_000_000);
    header.cwd = cwd.map(str::to_owned);
    header
}

pub(crate) fn event(kind: &str, seq: u64, time: i64, data: &str) -> SessionEvent {
    let mut event = SessionEvent::new(kind, seq, time, JsonData::from_text(data).expect("valid JSON"));
    if session_core::is_surface_eligible(kind) {
        event.surface_op = Some(SurfaceOp::Append);
    }
    event
}

pub(crate) fn text_delta(seq: u64, time: i64, text: &str) -> SessionEvent {
    let data = serde_json::json!({"turn": 1, "step": 1, "chunk": {"type": "text-delta", "index": 0, "text": text}});
    event("assistant/chunk", seq, time, &data.to_string())
}

/// A small realistic turn starting at `seq0`: start, deltas that pack, and an end.
pub(crate) fn turn(seq0: u64, n_deltas: u64) -> Vec<SessionEvent> {
    let mut events = vec![event("turn/start", seq0, 10, r#"{"turn":1}"#)];
    for k in 0..n_deltas {
        events.push(text_delta(seq0 + 1 + k, 20 + k as i64, &format!("part {k} ")));
    }
    let end = seq0 + 1 + n_deltas;
    events.push(event("turn/end", end, 99, r#"{"turn":1,"reason":{"kind":"completed"}}"#));
    events
}

pub(crate) fn arcs(events: &[SessionEvent]) -> Vec<Arc<SessionEvent>> {
    events.iter().cloned().map(Arc::new).collect()
}
