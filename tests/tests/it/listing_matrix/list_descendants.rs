//! `list_descendants`: reference 03 §9.1 cases 43–53.

use serde_json::json;

use super::support::*;

/// Case 43: pre-order with positions: A (t1) with its grandchild (t2), then B (t3).
#[test]
fn descendants_are_listed_in_pre_order_with_positions() {
    run(async |h| {
        h.author(created(child_header("A", "root"), 1), child_events(continuable("a"))).await;
        h.author(created(child_header("grandchild", "A"), 2), child_events(continuable("g"))).await;
        h.author(created(child_header("B", "root"), 3), child_events(continuable("b"))).await;
        assert_eq!(
            h.descendants_json("root").await,
            json!([
                child_at("A", "continuable", Some("a"), "inactive", true, "root", 1),
                child_at("grandchild", "continuable", Some("g"), "inactive", false, "A", 2),
                child_at("B", "continuable", Some("b"), "inactive", false, "root", 1),
            ])
        );
    });
}

/// Case 44: no descendants.
#[test]
fn a_root_without_descendants_lists_nothing() {
    run(async |h| {
        h.parent("root");
        assert_eq!(h.descendants_json("root").await, json!([]));
    });
}

/// Case 45: a live node in its creation window is omitted, but its subtree is still walked.
#[test]
fn an_omitted_creation_window_node_is_walked_through() {
    run(async |h| {
        h.live(child_header("window", "root"), &[ev("turn/start", 0, json!({"turn": 1}))]);
        h.author(created(child_header("below", "window"), 2), child_events(continuable("below"))).await;
        assert_eq!(
            h.descendants_json("root").await,
            json!([child_at("below", "continuable", Some("below"), "inactive", false, "window", 2)])
        );
    });
}

/// Case 46: a parent cycle in corrupt data terminates; the root is never emitted.
#[test]
fn a_parent_cycle_terminates() {
    run(async |h| {
        let mut root = plain_header("root", 1);
        root.parent_session = Some(id("node"));
        h.author(root, stored_turn(0, 1)).await;
        h.author(created(child_header("node", "root"), 2), child_events(continuable("in a cycle"))).await;
        assert_eq!(
            h.descendants_json("root").await,
            json!([child_at("node", "continuable", Some("in a cycle"), "inactive", false, "root", 1)])
        );
    });
}

/// Case 48: an ordinary fork and a real one-shot child are intermediates: the fork is not
/// listed, the one-shot is, and the continuables below both are found at depth 2.
#[test]
fn ordinary_and_one_shot_intermediates_are_walked_through() {
    run(async |h| {
        let root = h.parent("root");
        h.clock.set(2_000);
        let fork = h.store.fork_session(&root, None, Some(id("fork"))).unwrap();
        h.settle(&fork).await;
        h.clock.set(3_000);
        h.start_one_shot(&root, "one-shot", Some("intermediate")).await;
        h.author(created(child_header("under-fork", "fork"), 4_000), child_events(continuable("below fork"))).await;
        h.author(
            created(child_header("under-one-shot", "one-shot"), 5_000),
            child_events(continuable("below one-shot")),
        )
        .await;
        assert_eq!(
            h.descendants_json("root").await,
            json!([
                child_at("under-fork", "continuable", Some("below fork"), "inactive", false, "fork", 2),
                child_at("one-shot", "one-shot", Some("intermediate"), "inactive", true, "root", 1),
                child_at("under-one-shot", "continuable", Some("below one-shot"), "inactive", false, "one-shot", 2),
            ])
        );
    });
}

/// Cases 49 and 50: a settled descriptor-less node and a version-999 node are corrupt with their
/// positions; the children below them are still listed.
#[test]
fn corrupt_nodes_keep_their_positions_and_subtrees() {
    run(async |h| {
        let descriptorless = vec![
            ev("turn/start", 0, json!({"turn": 1})),
            ev("turn/end", 1, json!({"turn": 1, "reason": {"kind": "interrupted"}})),
        ];
        h.author(created(child_header("no-descriptor", "root"), 1), descriptorless).await;
        h.author(created(child_header("below-1", "no-descriptor"), 2), child_events(continuable("one"))).await;
        let future = json!({"version": 999, "mode": "continuable", "provider": "spawn", "label": "future"});
        h.author(created(child_header("future", "root"), 3), child_events(future)).await;
        h.author(created(child_header("below-2", "future"), 4), child_events(continuable("two"))).await;
        assert_eq!(
            h.descendants_json("root").await,
            json!([
                diagnostic_at("no-descriptor", "corrupt", "root", 1),
                child_at("below-1", "continuable", Some("one"), "inactive", false, "no-descriptor", 2),
                diagnostic_at("future", "corrupt", "root", 1),
                child_at("below-2", "continuable", Some("two"), "inactive", false, "future", 2),
            ])
        );
    });
}

/// Case 51: an inspection returning another `parentSession` is corrupt, with its position.
#[test]
fn a_witness_mismatch_is_corrupt_with_its_position() {
    run(async |h| {
        h.author(child_header("c", "root"), child_events(continuable("moved"))).await;
        h.persistence.set_read_fault("c", Some(ReadFault::Tamper(|header| header.parent_session = Some(id("other")))));
        assert_eq!(h.descendants_json("root").await, json!([diagnostic_at("c", "corrupt", "root", 1)]));
    });
}
