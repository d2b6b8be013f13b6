//! The checkpoint-store contract: what every `CheckpointStore` does with the projection cache's
//! records (round trip, whole-record replace, absent ids, removal, reopening, independence of
//! records) and what a damaged record does (absent, never an error, healed by the next write).

use std::sync::Arc;

use serde_json::{Value, json};
use session_core::SessionId;
use session_projection_cache::{CheckpointRecord, CheckpointStore};

use crate::{CheckpointPlace, Damage};

/// A checkpoint case's context: its place.
pub(crate) type Cx<'a> = crate::runner::Cx<'a, dyn CheckpointPlace>;

impl Cx<'_> {
    /// The place's store, called off the case's async threads, as the projection
    /// cache calls a store (on the blocking pool): a store may block on a runtime of its own.
    fn open(&self) -> Arc<dyn CheckpointStore> {
        Arc::new(OffRuntime(self.place.open()))
    }
}

/// Runs `call` on a thread of its own and waits for it: outside any async context.
fn off_runtime<T: Send>(call: impl FnOnce() -> T + Send) -> T {
    std::thread::scope(|scope| match scope.spawn(call).join() {
        Ok(value) => value,
        Err(payload) => std::panic::resume_unwind(payload),
    })
}

/// A checkpoint store whose every call runs off the caller's thread.
#[derive(Debug)]
struct OffRuntime(Arc<dyn CheckpointStore>);

impl CheckpointStore for OffRuntime {
    fn get(&self, id: &SessionId) -> session_projection_cache::Result<Option<CheckpointRecord>> {
        off_runtime(|| self.0.get(id))
    }

    fn get_many(&self, ids: &[SessionId]) -> Vec<session_projection_cache::Result<Option<CheckpointRecord>>> {
        off_runtime(|| self.0.get_many(ids))
    }

    fn put(&self, id: &SessionId, record: &CheckpointRecord) -> session_projection_cache::Result<()> {
        off_runtime(|| self.0.put(id, record))
    }

    fn remove(&self, id: &SessionId) -> session_projection_cache::Result<bool> {
        off_runtime(|| self.0.remove(id))
    }
}

fn record_of(value: Value) -> CheckpointRecord {
    let record: CheckpointRecord = serde_json::from_value(value).expect("the kit's records are well formed");
    record.validate().expect("the kit's records are valid");
    record
}

/// A small record cut at `seq`, with one row.
fn record(seq: i64) -> CheckpointRecord {
    record_of(json!({
        "identity": {"createdAt": 1, "cwd": null}, "asOfSeq": seq,
        "rows": {"test/marks": {"ver": 1, "seq": seq, "val": {"marks": ["a"]}}}, "failures": {}
    }))
}

pub(crate) async fn records_round_trip(h: &Cx<'_>) {
    let store = h.open();
    let (a, b) = (SessionId::from("a"), SessionId::from("odd/id ~ é"));
    store.put(&a, &record(1)).unwrap();
    store.put(&b, &record(2)).unwrap();
    store.put(&a, &record(3)).unwrap();
    assert_eq!(store.get(&a).unwrap(), Some(record(3)));
    assert_eq!(store.get(&b).unwrap(), Some(record(2)), "writing one record never touches another");
    assert_eq!(store.get(&SessionId::from("c")).unwrap(), None);
}

pub(crate) async fn a_put_replaces_the_whole_record(h: &Cx<'_>) {
    let store = h.open();
    let id = SessionId::from("s-replace");
    let first = record_of(json!({
        "identity": {"createdAt": 7, "cwd": "/work/one"}, "asOfSeq": 9,
        "rows": {
            "test/marks": {"ver": 1, "seq": 9, "val": {"marks": ["a", "b"]}},
            "test/count": {"ver": 2, "seq": 8, "val": 3},
        },
        "failures": {"test/broken": {"ver": 1, "seq": 4, "panicked": true, "message": "boom"}}
    }));
    let second = record_of(json!({
        "identity": {"createdAt": 7, "cwd": "/work/one"}, "asOfSeq": 12,
        "rows": {"test/sum": {"ver": 1, "seq": 12, "val": {"sum": 10}}}, "failures": {}
    }));
    store.put(&id, &first).unwrap();
    assert_eq!(store.get(&id).unwrap(), Some(first));
    store.put(&id, &second).unwrap();
    assert_eq!(store.get(&id).unwrap(), Some(second), "no row or failure of the replaced record remains");
}

pub(crate) async fn absent_ids_read_as_none_and_remove_as_false(h: &Cx<'_>) {
    let store = h.open();
    let id = SessionId::from("s-absent");
    assert_eq!(store.get(&id).unwrap(), None);
    assert!(!store.remove(&id).unwrap(), "removing an absent record reports there was none");
    store.put(&id, &record(1)).unwrap();
    assert!(store.remove(&id).unwrap());
    assert_eq!(store.get(&id).unwrap(), None);
    assert!(!store.remove(&id).unwrap());
}

pub(crate) async fn get_many_answers_what_get_answers_in_order(h: &Cx<'_>) {
    let store = h.open();
    let ids: Vec<SessionId> = (0..600).map(|i| SessionId::from(format!("s-many-{i:03}"))).collect();
    for (i, id) in ids.iter().enumerate().filter(|(i, _)| i % 3 != 1) {
        store.put(id, &record(i as i64)).unwrap();
    }
    // Asked out of order, with absent ids and one id twice.
    let mut asked: Vec<SessionId> = ids.iter().rev().cloned().collect();
    asked.push(SessionId::from("s-never"));
    asked.push(ids[4].clone());
    let many = store.get_many(&asked);
    assert_eq!(many.len(), asked.len());
    for (id, got) in asked.iter().zip(many) {
        assert_eq!(got.unwrap(), store.get(id).unwrap(), "{id}");
    }
    assert!(store.get_many(&[]).is_empty());
}

pub(crate) async fn removing_a_record_leaves_the_others(h: &Cx<'_>) {
    let store = h.open();
    let (a, b) = (SessionId::from("s-a"), SessionId::from("s-b"));
    store.put(&a, &record(3)).unwrap();
    store.put(&b, &record(4)).unwrap();
    assert!(store.remove(&a).unwrap());
    assert!(!store.remove(&a).unwrap());
    assert_eq!(store.get(&a).unwrap(), None);
    assert_eq!(store.get(&b).unwrap(), Some(record(4)));
    store.put(&a, &record(5)).unwrap();
    assert_eq!(store.get(&a).unwrap(), Some(record(5)), "a removed id can be written again");
}

pub(crate) async fn records_survive_reopening(h: &Cx<'_>) {
    let store = h.open();
    let (kept, removed) = (SessionId::from("s-kept"), SessionId::from("s-removed"));
    store.put(&kept, &record(1)).unwrap();
    store.put(&removed, &record(2)).unwrap();
    store.put(&kept, &record(3)).unwrap();
    assert!(store.remove(&removed).unwrap());
    drop(store);
    let reopened = h.open();
    assert_eq!(reopened.get(&kept).unwrap(), Some(record(3)), "a put is durable before it returns");
    assert_eq!(reopened.get(&removed).unwrap(), None, "so is a remove");
}

pub(crate) async fn records_keep_every_field(h: &Cx<'_>) {
    let store = h.open();
    let id = SessionId::from("s-fields");
    let full = record_of(json!({
        "identity": {"createdAt": 9_007_199_254_740_991u64, "cwd": "/wörk/\"quoted\"/😀"},
        "asOfSeq": 9_007_199_254_740_991u64,
        "rows": {
            "test/empty": {"ver": 0, "seq": -1, "val": null},
            "test/nested": {"ver": 9_007_199_254_740_991u64, "seq": 5, "val": {
                "list": [1, -2, "three", false, null, {"deep": ["\u{0001}", "é"]}],
                "text": "line\nbreak\ttab",
            }},
            "unicode/ключ": {"ver": 1, "seq": 0, "val": "значение"},
        },
        "failures": {
            "test/err": {"ver": 3, "seq": 2, "panicked": false, "message": "a unit error"},
            "test/panic": {"ver": 1, "seq": 0, "panicked": true, "message": "panicked at 'boom' 😀"},
        }
    }));
    store.put(&id, &full).unwrap();
    assert_eq!(store.get(&id).unwrap(), Some(full.clone()));
    let bare = record_of(json!({"identity": {"createdAt": 0}, "asOfSeq": -1, "rows": {}}));
    store.put(&id, &bare).unwrap();
    assert_eq!(store.get(&id).unwrap(), Some(bare), "an empty log's record, without cwd or failures");
    drop(store);
    let reopened = h.open();
    reopened.put(&id, &full).unwrap();
    drop(reopened);
    assert_eq!(h.open().get(&id).unwrap(), Some(full), "every field survives reopening");
}

pub(crate) async fn a_damaged_record_reads_as_absent_and_the_next_put_replaces_it(h: &Cx<'_>) {
    let store = h.open();
    let (id, other) = (SessionId::from("s"), SessionId::from("t"));
    store.put(&id, &record(1)).unwrap();
    store.put(&other, &record(5)).unwrap();
    let damages = [
        Damage::Truncated,
        Damage::FlippedBit,
        Damage::NewerVersion,
        Damage::Garbage,
        Damage::AnotherSessionsRecord { of: other.clone() },
    ];
    let mut skipped = Vec::new();
    for damage in &damages {
        if !h.place.damage(&id, damage) {
            skipped.push(match damage {
                Damage::AnotherSessionsRecord { .. } => "AnotherSessionsRecord".to_owned(),
                other => format!("{other:?}"),
            });
            continue;
        }
        assert_eq!(store.get(&id).unwrap(), None, "{damage:?}: a damaged record is absent, not an error");
        let reopened = h.open();
        assert_eq!(reopened.get(&id).unwrap(), None, "{damage:?}: the store still opens, without the record");
        drop(reopened);
        assert_eq!(store.get(&other).unwrap(), Some(record(5)), "{damage:?}: the other record is untouched");
        store.put(&id, &record(1)).unwrap();
        assert_eq!(store.get(&id).unwrap(), Some(record(1)), "{damage:?}: the next write replaces it");
    }
    if skipped.len() == damages.len() {
        h.note("skipped: the place damages no stored record");
    } else if !skipped.is_empty() {
        h.note(format!("skipped the damages the place cannot make: {}", skipped.join(", ")));
    }
}
