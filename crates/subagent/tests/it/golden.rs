//! The reference's own stores: `list_children("s-parent")` over a copy of the golden JSONL stores
//! (zstd and raw) equals the reference's answer in `expected.json`, key order included. The
//! legacy store (`legacy-store`, logs in the reference's earlier event shapes) lists its children
//! as healthy rows, as the reference's imports make them.

use std::{
    fs,
    path::{Path, PathBuf},
};

use serde_json::{Value, json};

use crate::support::*;

fn fixture_root() -> PathBuf {
    test_data().join("reference-store")
}

fn test_data() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../session-persistence/test_data")
}

fn copy_dir(from: &Path, to: &Path) {
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

#[test]
fn the_reference_store_lists_the_reference_rows() {
    let expected: Value =
        serde_json::from_str(&fs::read_to_string(fixture_root().join("expected.json")).unwrap()).unwrap();
    for setup in MATRIX {
        let encoding = setup.compression.as_str();
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("store");
        copy_dir(&fixture_root().join(encoding), &root);
        runtime().block_on(async {
            let h = Harness::over(setup, dir, root);
            let rows = h.list("s-parent").await;
            let want = &expected[encoding]["listChildren"]["s-parent"];
            assert_eq!(serde_json::to_value(&rows).unwrap(), *want, "{setup:?}");
            assert_eq!(serde_json::to_string(&rows).unwrap(), serde_json::to_string(want).unwrap(), "key order");
            assert_eq!(h.reads("s-child-continuable"), 1);
            assert_eq!(h.reads("s-child-oneshot"), 1);
            assert_eq!(h.persistence.total_reads(), 2, "the fork and unrelated sessions are never read");
            let descendants = h.runtime.list_descendants(&id("s-parent"), &token()).await.unwrap();
            assert_eq!(descendants.len(), 2);
            assert!(descendants.iter().all(|row| row.depth == 1 && row.parent_id.as_str() == "s-parent"));
        });
    }
}

#[test]
fn the_legacy_store_lists_healthy_child_rows() {
    for setup in MATRIX {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("store");
        copy_dir(&test_data().join("legacy-store").join(setup.compression.as_str()), &root);
        runtime().block_on(async {
            let h = Harness::over(setup, dir, root);
            let rows = json!([
                {"kind": "child", "id": "l-child-continuable", "mode": "continuable", "label": "triage the cache tests",
                 "activity": "inactive", "hasChildren": false},
                {"kind": "child", "id": "l-child-oneshot", "mode": "one-shot", "label": "check the TTL default",
                 "activity": "inactive", "hasChildren": false},
            ]);
            assert_eq!(h.list_json("l-parent").await, rows, "{setup:?}");
            assert_eq!((h.reads("l-child-continuable"), h.reads("l-child-oneshot")), (1, 1), "{setup:?}");
            assert_eq!(h.persistence.total_reads(), 2, "the parent is never read");

            // A legacy child whose log holds a malformed legacy record cannot be read: it is an
            // `unavailable` row, as any child whose read fails.
            let mut broken = child_header("l-child-broken", "l-parent");
            broken.cwd = Some("/srv/legacy".to_owned());
            broken.created_at = 1_700_000_060_300;
            h.author_unchecked(
                broken,
                vec![
                    descriptor_event(0, continuable("a broken helper")),
                    ev("turn/start", 1, json!({"turn": 1, "trigger": {"kind": "message"}})),
                    ev("turn/end", 2, json!({"turn": 1, "reason": {"kind": "disposed", "at": 5}})),
                ],
            );
            let mut with_broken = rows.as_array().unwrap().clone();
            with_broken.push(json!({"kind": "diagnostic", "id": "l-child-broken", "reason": "unavailable"}));
            assert_eq!(h.list_json("l-parent").await, Value::Array(with_broken), "{setup:?}");
        });
    }
}
