//! The six accepted boundary deviations of the design note, each pinned as documented there.

use std::{fs, sync::Arc};

use serde_json::json;
use session_core::{CreateOptions, HeaderMeta, Origin, Session, SessionStore};
use session_persistence::{Compression, SessionPersistence};
use session_projection_cache::{CheckpointRecord, RecordIdentity};
use subagent::{SubagentRuntime, SubagentServices};

use crate::support::*;

/// Deviation 3: A live and a persisted header of one id that disagree: the live record wins wholesale,
/// unnoticed.
#[test]
fn three_a_live_header_wins_over_a_conflicting_persisted_one() {
    run_each(&NO_CACHE, async |h| {
        h.author(child_header("c", "persisted-parent"), child_events(continuable("from disk"))).await;
        // A second live store that the coordinator does not guard, as another host process would be.
        let other_store = Arc::new(SessionStore::new(h.clock.clone()));
        let meta = HeaderMeta {
            parent_session: Some(id("live-parent")),
            origin: Some(Origin::Subagent),
            delegation_depth: 1,
            ..HeaderMeta::default()
        };
        let live = other_store.create(Some(id("c")), CreateOptions { seed: None, meta }).unwrap();
        append(&live, "subagent/descriptor", continuable("from memory"));
        let runtime = SubagentRuntime::new(SubagentServices { sessions: Some(other_store), ..h.services() }).unwrap();
        let listed = |parent: &'static str| {
            let runtime = &runtime;
            async move { serde_json::to_value(runtime.list_children(&id(parent), &token()).await.unwrap()).unwrap() }
        };
        assert_eq!(listed("persisted-parent").await, json!([]));
        assert_eq!(listed("live-parent").await, json!([continuable_row("c", "from memory", "running")]));
        assert_eq!(h.reads("c"), 0);
    });
}

/// Deviation 4: A read failure on damaged storage is `unavailable` (not corrupt): here a committed line
/// of the raw log that does not parse.
#[test]
fn four_damaged_storage_is_unavailable() {
    run_each(&[MATRIX[0], MATRIX[2]], async |h| {
        assert_eq!(h.setup.compression, Compression::None);
        let header = child_header("damaged", "p");
        h.author(header.clone(), child_events(continuable("was fine"))).await;
        let path = h.coordinator.locate(&header).expect("the JSONL backend has files");
        // Replace a committed event line in the middle of the log with bytes that do not parse.
        let text = fs::read_to_string(&path).unwrap();
        let mut lines: Vec<&str> = text.lines().collect();
        lines[2] = "{\"this is\": not json";
        fs::write(&path, lines.join("\n") + "\n").unwrap();
        assert_eq!(h.list_json("p").await, json!([{"kind": "diagnostic", "id": "damaged", "reason": "unavailable"}]));
    });
}

/// Deviation 6: The rung-2 later-event window: a record landed right after the first own descriptor; a
/// second own descriptor was appended and the process crashed before the next checkpoint. Rung 2
/// keeps serving the first identity (zero reads) while the authoritative refold serves the second.
#[test]
fn six_a_stale_record_keeps_serving_the_first_own_identity() {
    run_each(&WITH_CACHE, async |h| {
        let cache = h.cache.as_ref().unwrap();
        let header = child_header("c", "p");
        // The cut the cache recorded: through the first own descriptor.
        let cut = Session::create(header.clone(), None, h.clock.clone()).unwrap();
        for event in child_events(continuable("first")) {
            append(&cut, &event.kind, event.data.to_value().unwrap());
        }
        let record =
            CheckpointRecord::from_checkpoint(RecordIdentity::of(&header), &h.registry.checkpoint(&cut)).unwrap();
        cache.store().put(&header.id, &record).unwrap();
        // The durable log went on: a second own descriptor.
        let mut events = child_events(continuable("first"));
        events.push(descriptor_event(4, continuable("second")));
        h.author(header, events).await;

        assert_eq!(h.list_json("p").await, json!([continuable_row("c", "first", "inactive")]));
        assert_eq!(h.reads("c"), 0);
        let refold = h.runtime_with_cache(None);
        let rows = refold.list_children(&id("p"), &token()).await.unwrap();
        assert_eq!(serde_json::to_value(rows).unwrap(), json!([continuable_row("c", "second", "inactive")]));
        assert_eq!(h.reads("c"), 1);
    });
}
