//! The reference's own stores: `list_children("s-parent")` over a copy of the golden JSONL stores
//! (zstd and raw) equals the reference's answer in `expected.json`, key order included.

use std::{
    fs,
    path::{Path, PathBuf},
};

use serde_json::Value;

use crate::support::*;

fn fixture_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../session-persistence/test_data/reference-store")
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
