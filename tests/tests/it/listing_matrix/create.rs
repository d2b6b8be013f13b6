//! Child creation (reference 03 §2.5, §3.3, §3.5): the child header, descriptor placement for
//! each mode (spawn and fork), and the delegation depth rules.

use serde_json::json;
use session_persistence::SessionPersistence;
use subagent::{ChildOptions, OneShotDescriptor, create_continuable_child, create_one_shot_child};

use super::support::*;

#[test]
fn a_one_shot_child_that_never_stepped_is_corrupt_once_settled() {
    run(async |h| {
        let parent = h.parent("p");
        let descriptor = OneShotDescriptor { provider: "spawn".to_owned(), label: None };
        let options = ChildOptions { id: Some(id("stillborn")), ..Default::default() };
        let child = create_one_shot_child(&h.store, &parent, descriptor, options).unwrap();
        append(child.session(), "turn/start", json!({"turn": 1}));
        assert_eq!(h.list_json("p").await, json!([]), "running without a descriptor: creation window");
        append(child.session(), "turn/end", json!({"turn": 1, "reason": {"kind": "interrupted"}}));
        let session = child.session().clone();
        h.settle(&session).await;
        assert_eq!(h.list_json("p").await, json!([{"kind": "diagnostic", "id": "stillborn", "reason": "corrupt"}]));
    });
}

/// A created child is persisted with the same header and layout, and a forked continuable child
/// lists and resumes under its own identity.
#[test]
fn created_children_persist_and_list() {
    run(async |h| {
        let parent = h.parent("p");
        h.clock.set(5_000);
        let options = ChildOptions { id: Some(id("forked")), fork: true, ..Default::default() };
        let child = create_continuable_child(&h.store, &parent, continuable_descriptor("own label"), options).unwrap();
        run_turn(&child, 2, None::<fn()>);
        h.settle(&child).await;
        let stored = h.coordinator.inspect(&id("forked"), &token()).await.unwrap();
        assert_eq!(*stored.header, **child.header());
        assert_eq!(stored.events.len() as u64, child.len());
        assert_eq!(
            h.list_json("p").await,
            json!([{"kind": "child", "id": "forked", "mode": "continuable", "label": "own label", "activity": "inactive", "hasChildren": false}])
        );
        let authorization = h.runtime.authorize_resume(&parent, &id("forked"), &token()).await.unwrap();
        assert_eq!(authorization.descriptor.label, "own label");
    });
}
