//! The six accepted boundary deviations of the design note, each pinned as documented there.

use serde_json::json;

use super::support::*;

/// Deviation 1: A fork child that died in its publication window, with an ancestor descriptor in its
/// seed, lists under the ancestor's identity; resume still refuses it (own-suffix fold).
#[test]
fn one_stillborn_fork_lists_under_its_ancestor_but_cannot_resume() {
    run(async |h| {
        let parent = h.parent("p");
        let mut header = child_header("stillborn", "p");
        header.seed_length = Some(4);
        let mut events = child_events(continuable("ancestor label"));
        events.push(ev("session/end-seed", 4, json!({})));
        h.author(header, events).await;
        assert_eq!(h.list_json("p").await, json!([continuable_row("stillborn", "ancestor label", "inactive")]));
        assert_code(h.runtime.authorize_resume(&parent, &id("stillborn"), &token()).await, "NOT_RESUMABLE");
    });
}

/// Deviation 2: Multiple own descriptors: the list shows the last, resume uses the first.
#[test]
fn two_multiple_own_descriptors_list_the_last_and_resume_the_first() {
    run(async |h| {
        let parent = h.parent("p");
        let mut events = child_events(continuable("first, resumable"));
        events.push(descriptor_event(4, one_shot(Some("second, one-shot"))));
        h.author(child_header("twice", "p"), events).await;
        assert_eq!(
            h.list_json("p").await,
            json!([{"kind": "child", "id": "twice", "mode": "one-shot", "label": "second, one-shot", "activity": "inactive", "hasChildren": false}])
        );
        let authorization = h.runtime.authorize_resume(&parent, &id("twice"), &token()).await.unwrap();
        assert_eq!(authorization.descriptor.label, "first, resumable");
    });
}

/// Deviation 5: An unknown parent lists nothing instead of failing with not-found.
#[test]
fn five_an_unknown_parent_lists_nothing() {
    run(async |h| {
        h.author(child_header("c", "p"), child_events(continuable("x"))).await;
        assert_eq!(h.list_json("nobody-by-this-id").await, json!([]));
        assert_eq!(h.runtime.list_descendants(&id("nobody-by-this-id"), &token()).await.unwrap(), []);
    });
}
