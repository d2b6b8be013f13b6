//! Logs in the reference's earlier event shapes (reference 01 §3.7, §7.2 items 9–11) that only
//! the JSONL store holds: the hand-written legacy golden store, read in both encodings. The
//! legacy-log cases every backend must pass are in the test kit's persistence contract
//! (`persistence-testkit`), which `contract` runs.

use std::{fs, sync::Arc};

use persistence_testkit::inspect::{data, kinds, message_id, message_ids, resume};
use serde_json::{Value, json};
use session_core::SessionId;
use session_persistence::{Coordinator, SessionPersistence};
use tokio_util::sync::CancellationToken;

fn cancel() -> CancellationToken {
    CancellationToken::new()
}

/// The hand-written legacy store (`test_data/legacy-store`), read-only.
fn legacy_store(compression: session_persistence::Compression) -> Coordinator {
    let root =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("test_data/legacy-store").join(compression.as_str());
    let store = session_persistence::JsonlStore::open_read_only(crate::config(&root, compression)).unwrap();
    Coordinator::new(Arc::new(store), session_persistence::CoordinatorConfig::default()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_legacy_golden_store_reads_as_current_in_both_encodings() {
    let [zstd, raw] = crate::ENCODINGS.map(legacy_store);
    let listing = raw.list_snapshots(&cancel()).await.unwrap();
    assert!(listing.faults.is_empty(), "{listing:?}");
    let ids: Vec<&str> = listing.headers.iter().map(|stored| stored.header.id.as_str()).collect();
    assert_eq!(ids, ["l-child-continuable", "l-child-oneshot", "l-parent"]);
    for stored in &listing.headers {
        let id = &stored.header.id;
        // The twins hold the same bytes and read the same.
        let raw_path = raw.locate(&stored.header).unwrap();
        let frames = fs::read(zstd.locate(&stored.header).unwrap()).unwrap();
        assert_eq!(zstd::stream::decode_all(frames.as_slice()).unwrap(), fs::read(raw_path).unwrap(), "{id}");
        let inspected = raw.inspect(id, &cancel()).await.unwrap();
        assert_eq!(inspected.events.to_vec(), zstd.inspect(id, &cancel()).await.unwrap().events.to_vec(), "{id}");
        assert_eq!(inspected.n_closers, 0, "{id} is closed");
        assert!(!kinds(&inspected.events).contains(&"steering/message"), "{id}");
        let resumed = resume(&inspected);
        assert_eq!(resumed.len(), inspected.events.len() as u64 + 1, "{id}: a resume adds the end-seed marker");
    }

    let id = SessionId::from("l-parent");
    let parent = raw.inspect(&id, &cancel()).await.unwrap();
    let legacy = |seq: u64| json!(format!("legacy-message:l-parent:{seq}"));
    assert_eq!(
        message_ids(&parent.events),
        [legacy(1), legacy(3), legacy(5), legacy(8), legacy(9), legacy(13), legacy(5), legacy(16)]
    );
    let ends: Vec<Value> = parent
        .events
        .iter()
        .filter(|event| event.kind == "turn/end")
        .map(|event| data(event)["reason"].clone())
        .collect();
    assert_eq!(
        ends,
        [
            json!({"kind": "completed"}),
            json!({"kind": "aborted", "reason": {"kind": "disposed"}}),
            json!({"kind": "error", "error": {"message": "provider overloaded", "code": "OVERLOADED", "status": 529}}),
        ]
    );
    assert_eq!(resume(&parent).surface_nodes(), [1, 3, 15, 8, 9, 13, 16]);
    let suffix = raw.read_from(&id, 15, &cancel()).await.unwrap();
    assert_eq!(message_id(&suffix.events[0]), legacy(5), "a suffix read past the target keeps the inherited id");

    let oneshot = raw.inspect(&SessionId::from("l-child-oneshot"), &cancel()).await.unwrap();
    assert_eq!(message_ids(&oneshot.events), [json!("m-ttl"), json!("legacy-message:l-child-oneshot:4")]);
    assert_eq!(
        data(&oneshot.events[6])["reason"],
        json!({"kind": "error", "error": {"message": "tool budget exhausted", "code": "UNKNOWN"}})
    );
    let continuable = raw.inspect(&SessionId::from("l-child-continuable"), &cancel()).await.unwrap();
    assert_eq!(data(&continuable.events[7])["reason"], json!({"kind": "aborted", "reason": {"kind": "legacy"}}));
}
