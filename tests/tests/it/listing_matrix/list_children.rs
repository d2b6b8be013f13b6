//! `list_children`: reference 03 §9.1 cases 1–35 and 41–42 (cancellation cases 36–40 live in
//! `cancellation.rs`): the cases that run on every backend of the matrix; the rest are the
//! `subagent` crate's own tests.

use std::sync::Arc;

use serde_json::{Value, json};
use session_core::{SessionHeader, SurfaceOp};
use subagent::SubagentError;

use super::support::*;

/// Cases 23 and 24: the hostile-unit probe. A foreign unit failing on one child's log makes that
/// child corrupt on the cold path and on the live path (even though it is running); siblings and
/// the listing are unaffected. Three kinds of failure: a view that detonates, an apply error, a
/// view panic.
#[test]
fn a_foreign_unit_failing_on_a_child_makes_it_corrupt_on_both_paths() {
    for hostility in [Hostility::ViewDetonates, Hostility::ApplyFails, Hostility::ViewPanics] {
        run(async |h| {
            let _hostile = h.registry.register(HostileUnit(hostility)).unwrap();
            h.author(child_header("cold-poisoned", "p"), child_events(continuable("poison me"))).await;
            h.author(created(child_header("cold-healthy", "p"), 2), child_events(continuable("fine"))).await;
            h.live(created(child_header("live-poisoned", "p"), 3), &child_events(continuable("poison me")));
            h.live(created(child_header("live-healthy", "p"), 4), &child_events(continuable("also fine")));
            assert_eq!(
                h.list_json("p").await,
                json!([
                    diagnostic("cold-poisoned", "corrupt"),
                    child("cold-healthy", "continuable", Some("fine"), "inactive", false),
                    diagnostic("live-poisoned", "corrupt"),
                    child("live-healthy", "continuable", Some("also fine"), "running", false),
                ]),
                "{hostility:?}"
            );
        });
    }
}

/// Case 4: a real continuable child, settled (cold), lists as an inactive continuable row.
#[test]
fn a_settled_continuable_child_lists_inactive_with_its_label() {
    run(async |h| {
        let parent = h.parent("p");
        h.start_continuable(&parent, "c", "summarize the doc").await;
        assert_eq!(
            h.list_json("p").await,
            json!([child("c", "continuable", Some("summarize the doc"), "inactive", false)])
        );
        assert_eq!(h.reads("c"), h.real_child_reads());
    });
}

/// Case 5: a one-shot without a label and a continuable under one parent.
#[test]
fn one_shot_and_continuable_children_list_with_their_modes() {
    run(async |h| {
        let parent = h.parent("p");
        h.clock.set(2_000);
        h.start_one_shot(&parent, "a-one-shot", None).await;
        h.clock.set(3_000);
        h.start_continuable(&parent, "b-continuable", "summarize the doc").await;
        let rows = h.list_json("p").await;
        assert_eq!(
            rows,
            json!([
                child("a-one-shot", "one-shot", None, "inactive", false),
                child("b-continuable", "continuable", Some("summarize the doc"), "inactive", false),
            ])
        );
        assert!(rows[0].get("label").is_none(), "an unlabelled one-shot omits label, never null");
    });
}

/// Case 6: a parent that exists only in persistence (the restart shape) lists its child.
#[test]
fn a_persisted_only_parent_lists_its_child() {
    run(async |h| {
        h.author(plain_header("p", 1), stored_turn(0, 1)).await;
        h.author(child_header("c", "p"), child_events(continuable("from disk"))).await;
        assert!(h.store.get(&id("p")).is_none());
        assert_eq!(h.list_json("p").await, json!([child("c", "continuable", Some("from disk"), "inactive", false)]));
    });
}

/// Case 7: createdAt ascending, then id in byte order; an ordinary fork with a valid descriptor
/// is not a candidate.
#[test]
fn rows_are_ordered_by_created_at_then_id_and_ordinary_forks_are_absent() {
    run(async |h| {
        let late = "00000000-0000-4000-8000-000000000009";
        let tie_b = "00000000-0000-4000-8000-000000000002";
        let tie_a = "00000000-0000-4000-8000-000000000001";
        let events = child_events(continuable("x"));
        h.live(created(child_header(late, "p"), 9), &events);
        h.live(created(child_header(tie_b, "p"), 5), &events);
        h.live(created(child_header(tie_a, "p"), 5), &events);
        let mut fork = created(child_header("fork", "p"), 1);
        fork.origin = None;
        h.live(fork, &events);
        let rows = h.list("p").await;
        let ids: Vec<&str> = rows.iter().map(|row| row.id().as_str()).collect();
        assert_eq!(ids, [tie_a, tie_b, late]);
        assert!(rows.iter().all(|row| row.as_child().is_some()));
    });
}

/// Case 8: a live child without a descriptor yet is in its creation window: omitted.
#[test]
fn a_live_child_without_a_descriptor_is_omitted() {
    run(async |h| {
        h.live(child_header("c", "p"), &[ev("turn/start", 0, json!({"turn": 1}))]);
        assert_eq!(h.list_json("p").await, json!([]));
    });
}

/// Case 9: an authored one-shot with a label.
#[test]
fn an_authored_labelled_one_shot_lists_with_its_label() {
    run(async |h| {
        h.author(child_header("c", "p"), child_events(one_shot(Some("labeled one-shot")))).await;
        assert_eq!(
            h.list_json("p").await,
            json!([child("c", "one-shot", Some("labeled one-shot"), "inactive", false)])
        );
        assert_eq!(h.reads("c"), 1);
    });
}

/// Case 10: a settled child and a live child side by side.
#[test]
fn settled_and_live_children_list_together() {
    run(async |h| {
        let parent = h.parent("p");
        h.clock.set(2_000);
        h.start_continuable(&parent, "settled", "done already").await;
        h.live(created(child_header("running", "p"), 3_000), &child_events(continuable("still going")));
        assert_eq!(
            h.list_json("p").await,
            json!([
                child("settled", "continuable", Some("done already"), "inactive", false),
                child("running", "continuable", Some("still going"), "running", false),
            ])
        );
        assert_eq!(h.reads("running"), 0);
    });
}

/// Case 11: two descriptors resolve last-wins (not corrupt); a healthy sibling is intact.
#[test]
fn two_descriptors_resolve_to_the_last() {
    run(async |h| {
        let mut events = child_events(continuable("twice"));
        events.push(descriptor_event(4, continuable("twice again")));
        h.author(child_header("a", "p"), events).await;
        h.author(created(child_header("b", "p"), 2), child_events(continuable("healthy"))).await;
        assert_eq!(
            h.list_json("p").await,
            json!([
                child("a", "continuable", Some("twice again"), "inactive", false),
                child("b", "continuable", Some("healthy"), "inactive", false),
            ])
        );
    });
}

/// Case 12: on a live child, a malformed later descriptor resets the identity to the `null`
/// sentinel (kept through a JSON round trip), and the running child is omitted.
#[test]
fn a_live_child_reset_by_a_malformed_descriptor_is_omitted() {
    run(async |h| {
        let session = h.live(child_header("c", "p"), &child_events(continuable("was valid")));
        append(&session, "subagent/descriptor", json!({"version": 2, "mode": "continuable", "provider": 7}));
        let snapshot = h.registry.snapshot(&session);
        let round_trip: Value = serde_json::from_str(&serde_json::to_string(&snapshot.values).unwrap()).unwrap();
        assert_eq!(round_trip.get("subagent"), Some(&Value::Null));
        assert_eq!(h.list_json("p").await, json!([]));
    });
}

/// Case 13: the same shape, settled: a corrupt diagnostic.
#[test]
fn a_settled_child_reset_by_a_malformed_descriptor_is_corrupt() {
    run(async |h| {
        let mut events = child_events(continuable("was valid"));
        events.push(descriptor_event(4, json!({"version": 2, "mode": "continuable", "provider": 7})));
        h.author(child_header("c", "p"), events).await;
        assert_eq!(h.list_json("p").await, json!([diagnostic("c", "corrupt")]));
    });
}

/// Case 16: the lifecycle witness. An inspection that returns another lifecycle on any of the
/// seven fields makes that child corrupt; the sibling is intact.
#[test]
fn a_different_lifecycle_on_any_witness_field_is_corrupt() {
    type Tamper = fn(&mut SessionHeader);
    let tampers: [(&str, Tamper); 7] = [
        ("version", |header| header.version += 1),
        ("id", |header| header.id = id("someone-else")),
        ("createdAt", |header| header.created_at += 1),
        ("cwd", |header| header.cwd = Some("/elsewhere".to_owned())),
        ("parentSession", |header| header.parent_session = Some(id("other-parent"))),
        ("seedLength", |header| header.seed_length = Some(1)),
        ("delegationDepth", |header| header.delegation_depth += 1),
    ];
    for (field, tamper) in tampers {
        run(async |h| {
            h.author(child_header("a", "p"), child_events(continuable("tampered"))).await;
            h.author(created(child_header("b", "p"), 2), child_events(continuable("healthy"))).await;
            h.persistence.set_read_fault("a", Some(ReadFault::Tamper(tamper)));
            assert_eq!(
                h.list_json("p").await,
                json!([diagnostic("a", "corrupt"), child("b", "continuable", Some("healthy"), "inactive", false)]),
                "witness field {field}"
            );
        });
    }
}

/// Case 18: a stored log the read side rejects (a surface-eligible `user/message` without
/// `surfaceOp`) is `unavailable`, not corrupt.
#[test]
fn a_stored_log_that_fails_validation_is_unavailable() {
    run(async |h| {
        let mut events = child_events(continuable("damaged"));
        let mut bare = (*events[1]).clone();
        bare.surface_op = None;
        events[1] = Arc::new(bare);
        h.author_unchecked(child_header("c", "p"), events);
        assert_eq!(h.list_json("p").await, json!([diagnostic("c", "unavailable")]));
        assert_eq!(h.reads("c"), 1);
    });
}

/// Cases 19 and 20: a malformed descriptor and a foreign version fold to `null`: corrupt.
#[test]
fn malformed_and_foreign_version_descriptors_are_corrupt() {
    run(async |h| {
        h.author(child_header("a", "p"), child_events(json!({"version": 2, "mode": "continuable", "provider": 7})))
            .await;
        h.author(
            created(child_header("b", "p"), 2),
            child_events(json!({"version": 3, "mode": "continuable", "provider": "spawn", "label": "future"})),
        )
        .await;
        assert_eq!(h.list_json("p").await, json!([diagnostic("a", "corrupt"), diagnostic("b", "corrupt")]));
    });
}

/// Case 21 (accepted deviation 1): a fork child whose log is only its seed lists under the
/// ancestor's identity.
#[test]
fn a_stillborn_fork_lists_under_the_ancestor_identity() {
    run(async |h| {
        h.author(fork_child_header("c", "p"), fork_child_events("ancestor label", None)).await;
        assert_eq!(
            h.list_json("p").await,
            json!([child("c", "continuable", Some("ancestor label"), "inactive", false)])
        );
    });
}

/// Case 22: the establishing provider need not be mounted.
#[test]
fn a_child_of_an_unmounted_provider_is_listed() {
    run(async |h| {
        let descriptor = json!({"version": 2, "mode": "continuable", "provider": "not-mounted", "label": "orphaned"});
        h.author(child_header("c", "p"), child_events(descriptor)).await;
        assert_eq!(h.list_json("p").await, json!([child("c", "continuable", Some("orphaned"), "inactive", false)]));
    });
}

/// Case 25: a failing persistence listing fails the whole listing with the original error.
#[test]
fn a_failing_persistence_listing_fails_with_the_original_error() {
    run(async |h| {
        h.author(child_header("c", "p"), child_events(continuable("x"))).await;
        h.persistence.set_list_fault(ListFault::Fail("backend listing failed"));
        let error = h.runtime.list_children(&id("p"), &token()).await.unwrap_err();
        assert!(matches!(error, SubagentError::Listing(_)), "{error:?}");
        assert_eq!(error.to_string(), "backend listing failed");
        assert_eq!(error.code(), None);
    });
}

/// Case 26: a failed cold read is an `unavailable` row for that child only, and the next
/// listing reads it again (nothing is memoized).
#[test]
fn a_failed_cold_read_is_unavailable_and_retried_on_the_next_listing() {
    run(async |h| {
        h.author(child_header("a", "p"), child_events(continuable("flaky"))).await;
        h.author(created(child_header("b", "p"), 2), child_events(continuable("healthy"))).await;
        h.persistence.set_read_fault("a", Some(ReadFault::Fail));
        assert_eq!(
            h.list_json("p").await,
            json!([diagnostic("a", "unavailable"), child("b", "continuable", Some("healthy"), "inactive", false)])
        );
        h.persistence.set_read_fault("a", None);
        assert_eq!(
            h.list_json("p").await,
            json!([
                child("a", "continuable", Some("flaky"), "inactive", false),
                child("b", "continuable", Some("healthy"), "inactive", false),
            ])
        );
        assert_eq!(h.reads("a"), 2);
    });
}

/// Case 27: a compacted twin (a surface replace after the descriptor) lists exactly like the
/// uncompacted one.
#[test]
fn compacted_and_uncompacted_twins_list_identically() {
    run(async |h| {
        let mut plain = child_events(continuable("twin"));
        plain.extend(stored_turn(4, 2));
        let mut compacted = plain.clone();
        let mut summary = (*ev("user/message", 10, user_message_data(10, "summary of the work"))).clone();
        summary.surface_op = Some(SurfaceOp::Replace { start: 1, end: 7 });
        summary.source_event_seqs = Some(vec![1, 5, 7].into_boxed_slice());
        compacted.push(Arc::new(summary));
        h.author(created(child_header("plain", "p"), 1), plain).await;
        h.author(created(child_header("compacted", "p"), 2), compacted).await;
        assert_eq!(
            h.list_json("p").await,
            json!([
                child("plain", "continuable", Some("twin"), "inactive", false),
                child("compacted", "continuable", Some("twin"), "inactive", false),
            ])
        );
    });
}

/// Case 28: a subagent grandchild makes its parent `hasChildren` without ever being read.
#[test]
fn a_subagent_grandchild_sets_has_children_without_being_read() {
    run(async |h| {
        let parent = h.parent("p");
        let child_session = h.start_continuable(&parent, "c", "middle").await;
        h.author(child_header("g", child_session.id().as_str()), child_events(continuable("leaf"))).await;
        assert_eq!(h.list_json("p").await, json!([child("c", "continuable", Some("middle"), "inactive", true)]));
        assert_eq!(h.reads("g"), 0);
        assert_eq!(h.reads("c"), h.real_child_reads());
    });
}

/// Case 29: the cost model. Two cold children are read exactly once each per listing, a live
/// child never.
#[test]
fn cold_children_cost_one_read_per_listing_and_live_children_none() {
    run(async |h| {
        h.author(created(child_header("cold-a", "p"), 1), child_events(continuable("a"))).await;
        h.author(created(child_header("cold-b", "p"), 2), child_events(continuable("b"))).await;
        h.live(created(child_header("live", "p"), 3), &child_events(continuable("c")));
        assert_eq!(h.list("p").await.len(), 3);
        assert_eq!((h.reads("cold-a"), h.reads("cold-b"), h.reads("live")), (1, 1, 0));
        assert_eq!(h.list("p").await.len(), 3);
        assert_eq!((h.reads("cold-a"), h.reads("cold-b"), h.reads("live")), (2, 2, 0));
        assert_eq!(h.persistence.materialized_reads(), 0, "cold reads stream; no log is materialized");
        assert_eq!(h.persistence.batches(), 2, "each listing hands its cold reads to the read lanes at once");
    });
}

/// Case 34: a grandchild without the origin marker does not count toward `hasChildren`.
#[test]
fn an_ordinary_grandchild_does_not_set_has_children() {
    run(async |h| {
        h.author(child_header("c", "p"), child_events(continuable("middle"))).await;
        let mut fork = child_header("g", "c");
        fork.origin = None;
        h.author(fork, child_events(continuable("fork with a descriptor"))).await;
        assert_eq!(h.list_json("p").await, json!([child("c", "continuable", Some("middle"), "inactive", false)]));
    });
}

/// Case 35: a subagent grandchild with a malformed descriptor is corrupt when its parent is
/// listed, and still sets `hasChildren` one level up.
#[test]
fn a_corrupt_grandchild_still_sets_has_children() {
    run(async |h| {
        h.author(child_header("c", "p"), child_events(continuable("middle"))).await;
        h.author(child_header("g", "c"), child_events(json!({"version": 2, "mode": "one-shot", "provider": 7}))).await;
        assert_eq!(h.list_json("c").await, json!([diagnostic("g", "corrupt")]));
        assert_eq!(h.list_json("p").await, json!([child("c", "continuable", Some("middle"), "inactive", true)]));
    });
}

/// Case 41: a parent without children (or unknown: accepted deviation 5) lists nothing.
#[test]
fn a_parent_without_children_lists_nothing() {
    run(async |h| {
        h.parent("p");
        assert_eq!(h.list_json("p").await, json!([]));
        assert_eq!(h.list_json("never-existed").await, json!([]));
    });
}

/// A settled child without any descriptor (died before its first step) is a corrupt diagnostic,
/// not silently omitted.
#[test]
fn a_descriptorless_settled_child_is_corrupt() {
    run(async |h| {
        let events = vec![
            ev("turn/start", 0, json!({"turn": 1})),
            ev("turn/end", 1, json!({"turn": 1, "reason": {"kind": "interrupted"}})),
        ];
        h.author(child_header("c", "p"), events).await;
        assert_eq!(h.list_json("p").await, json!([diagnostic("c", "corrupt")]));
    });
}

/// `list_child` gives exactly the row `list_children` gives the same child, or `None` where the
/// listing has no row for it, and reads no sibling.
#[test]
fn list_child_gives_the_listing_row_and_reads_no_sibling() {
    run(async |h| {
        let parent = h.parent("p");
        let middle = h.start_continuable(&parent, "c", "middle").await;
        h.author(child_header("g", middle.id().as_str()), child_events(continuable("leaf"))).await;
        h.author(created(child_header("one", "p"), 2), child_events(one_shot(Some("once")))).await;
        h.author(
            created(child_header("bad", "p"), 3),
            child_events(json!({"version": 2, "mode": "continuable", "provider": 7})),
        )
        .await;
        h.live(created(child_header("window", "p"), 4), &[ev("turn/start", 0, json!({"turn": 1}))]);
        h.author(created(child_header("elsewhere", "q"), 5), child_events(continuable("not p's"))).await;
        h.author(plain_header("plain", 6), vec![ev("turn/start", 0, json!({"turn": 1}))]).await;

        let listed = h.list("p").await;
        assert_eq!(listed.len(), 3, "c, one and bad have rows; the creation window is omitted");
        for child_id in ["c", "one", "bad", "window", "elsewhere", "plain", "g", "nobody"] {
            let expected = listed.iter().find(|entry| entry.id().as_str() == child_id).cloned();
            let before: Vec<u64> = listed.iter().map(|entry| h.reads(entry.id().as_str())).collect();
            let row = h.runtime.list_child(&id("p"), &id(child_id), &token()).await.unwrap();
            assert_eq!(serde_json::to_value(&row).unwrap(), serde_json::to_value(&expected).unwrap(), "{child_id}");
            for (entry, reads) in listed.iter().zip(before) {
                let read_now = h.reads(entry.id().as_str()) - reads;
                let allowed = u64::from(entry.id().as_str() == child_id);
                assert!(read_now <= allowed, "list_child({child_id}) read {} {read_now} times", entry.id());
            }
        }
    });
}
