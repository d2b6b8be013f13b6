//! `list_children`: reference 03 §9.1 cases 1–35 and 41–42 (cancellation cases 36–40 live in
//! `cancellation.rs`), over raw and zstd JSONL, with and without the projection cache. The cases
//! that run on every backend are the e2e package's `listing_matrix`.

use std::sync::Arc;

use serde_json::{Value, json};
use session_core::{ManualClock, SessionStore};
use session_projection::ProjectionRegistry;
use subagent::{SubagentError, SubagentRuntime, SubagentServices};

use crate::support::*;

/// Case 1: a live-only deployment (store, registry and service; no persistence, no agents) lists
/// a live child.
#[test]
fn live_only_deployment_lists_a_live_child() {
    runtime().block_on(async {
        let store = Arc::new(SessionStore::new(Arc::new(ManualClock::new(10))));
        let registry = ProjectionRegistry::new();
        let _attached = registry.attach(&store);
        let services = SubagentServices {
            sessions: Some(store.clone()),
            projections: Some(registry),
            ..SubagentServices::default()
        };
        let runtime = SubagentRuntime::new(services).unwrap();
        let meta = session_core::HeaderMeta {
            parent_session: Some(id("p")),
            origin: Some(session_core::Origin::Subagent),
            delegation_depth: 1,
            ..Default::default()
        };
        let child_session =
            store.create(Some(id("live-child")), session_core::CreateOptions { seed: None, meta }).unwrap();
        append(&child_session, "turn/start", json!({"turn": 1}));
        append(&child_session, "subagent/descriptor", continuable("live child"));
        let rows = runtime.list_children(&id("p"), &token()).await.unwrap();
        assert_eq!(
            serde_json::to_value(rows).unwrap(),
            json!([child("live-child", "continuable", Some("live child"), "running", false)])
        );
    });
}

/// Cases 2, 3 and 42: the two required services are checked in order, before any read, even
/// with zero children; the error is a coded `SubagentError`.
#[test]
fn missing_registry_or_store_fails_loudly_before_any_read() {
    run_each(&NO_CACHE, async |h| {
        let no_registry = SubagentRuntime::new(SubagentServices { projections: None, ..h.services() }).unwrap();
        let error = no_registry.list_children(&id("nobody"), &token()).await.unwrap_err();
        assert!(matches!(error, SubagentError::ProjectionsUnavailable), "{error:?}");
        assert_eq!(error.code().unwrap().as_str(), "SUBAGENT_CONTROL_PROJECTIONS_UNAVAILABLE");
        assert_eq!(error.name(), "SubagentError");
        assert_eq!(
            error.to_string(),
            "listing subagents requires the sessionProjections registry (load @monotykamary/dsh-session-projection)"
        );

        let no_store = SubagentRuntime::new(SubagentServices { sessions: None, ..h.services() }).unwrap();
        let error = no_store.list_children(&id("nobody"), &token()).await.unwrap_err();
        assert_eq!(error.code().unwrap().as_str(), "SUBAGENT_CONTROL_SESSION_STORE_UNAVAILABLE");
        assert_eq!(error.to_string(), "listing subagents requires the session store (load @monotykamary/dsh-session)");

        let neither =
            SubagentRuntime::new(SubagentServices { sessions: None, projections: None, ..h.services() }).unwrap();
        assert_code(neither.list_children(&id("p"), &token()).await, "SUBAGENT_CONTROL_PROJECTIONS_UNAVAILABLE");
        assert_eq!(h.persistence.lists(), 0, "no listing was attempted");
        assert_eq!(h.persistence.total_reads(), 0);
    });
}

/// Ids tie-break by ordinal byte order (uppercase before lowercase), not by locale collation.
#[test]
fn id_ties_break_by_byte_order() {
    run_each(&NO_CACHE, async |h| {
        let events = child_events(continuable("x"));
        for name in ["b", "B", "a", "A"] {
            h.live(created(child_header(name, "p"), 7), &events);
        }
        let rows = h.list("p").await;
        let ids: Vec<&str> = rows.iter().map(|row| row.id().as_str()).collect();
        assert_eq!(ids, ["A", "B", "a", "b"]);
    });
}

/// Case 14: rung 2 serves an own-suffix identity directly: the row uses the cached label and the
/// log is never read.
#[test]
fn a_cached_own_identity_is_used_without_a_read() {
    run_each(&NO_CACHE, async |h| {
        h.author(child_header("c", "p"), child_events(continuable("on disk"))).await;
        let stub = StubCache::new("c", Stub::Value(json!({"mode": "continuable", "label": "cached own", "seq": 2})));
        let runtime = h.runtime_with_cache(Some(stub.clone()));
        let rows = runtime.list_children(&id("p"), &token()).await.unwrap();
        assert_eq!(
            serde_json::to_value(rows).unwrap(),
            json!([child("c", "continuable", Some("cached own"), "inactive", false)])
        );
        assert_eq!(h.reads("c"), 0);
        assert_eq!(stub.calls(), 1);
    });
}

/// Case 15: a cached identity from the fork seed (seq 2 < seedLength 4) fails the gate; the
/// refold serves the own descriptor.
#[test]
fn a_cached_seed_identity_fails_the_seq_gate() {
    run_each(&NO_CACHE, async |h| {
        h.author(fork_child_header("c", "p"), fork_child_events("ancestor label", Some("own label"))).await;
        let stub =
            StubCache::new("c", Stub::Value(json!({"mode": "continuable", "label": "ancestor label", "seq": 2})));
        let runtime = h.runtime_with_cache(Some(stub));
        let rows = runtime.list_children(&id("p"), &token()).await.unwrap();
        assert_eq!(
            serde_json::to_value(rows).unwrap(),
            json!([child("c", "continuable", Some("own label"), "inactive", false)])
        );
        assert_eq!(h.reads("c"), 1);
    });
}

/// Fields outside the witness (origin, agentPreset, owner) do not matter.
#[test]
fn fields_outside_the_witness_are_not_compared() {
    run_each(&NO_CACHE, async |h| {
        h.author(child_header("a", "p"), child_events(continuable("fine"))).await;
        h.persistence.set_read_fault(
            "a",
            Some(ReadFault::Tamper(|header| {
                header.agent_preset = Some("preset".to_owned());
                header.owner = Some("someone".to_owned());
                header.origin = None;
            })),
        );
        assert_eq!(h.list_json("p").await, json!([child("a", "continuable", Some("fine"), "inactive", false)]));
    });
}

/// Case 17: a cached `null` sentinel is not a verdict: the refold decides.
#[test]
fn a_cached_null_falls_through_to_the_refold() {
    run_each(&NO_CACHE, async |h| {
        h.author(child_header("c", "p"), child_events(continuable("actually valid"))).await;
        let runtime = h.runtime_with_cache(Some(StubCache::new("c", Stub::Value(Value::Null))));
        let rows = runtime.list_children(&id("p"), &token()).await.unwrap();
        assert_eq!(
            serde_json::to_value(rows).unwrap(),
            json!([child("c", "continuable", Some("actually valid"), "inactive", false)])
        );
        assert_eq!(h.reads("c"), 1);
    });
}

/// A cached snapshot that reports a unit failure is a miss too (the refold decides).
#[test]
fn a_cached_snapshot_with_a_failure_falls_through() {
    run_each(&NO_CACHE, async |h| {
        h.author(child_header("c", "p"), child_events(continuable("refolded"))).await;
        let stub = Stub::ValueWithFailure(json!({"mode": "continuable", "label": "cached", "seq": 2}));
        let runtime = h.runtime_with_cache(Some(StubCache::new("c", stub)));
        let rows = runtime.list_children(&id("p"), &token()).await.unwrap();
        assert_eq!(
            serde_json::to_value(rows).unwrap(),
            json!([child("c", "continuable", Some("refolded"), "inactive", false)])
        );
        assert_eq!(h.reads("c"), 1);
    });
}
/// Case 30: the real cache: once a settled child's checkpoint record has landed, listing serves
/// it with zero reads.
#[test]
fn the_real_cache_serves_a_settled_child_without_a_read() {
    run_each(&WITH_CACHE, async |h| {
        let parent = h.parent("p");
        h.start_continuable(&parent, "c", "cached for real").await;
        for _ in 0..3 {
            assert_eq!(
                h.list_json("p").await,
                json!([child("c", "continuable", Some("cached for real"), "inactive", false)])
            );
        }
        assert_eq!(h.reads("c"), 0);
    });
}

/// Case 31: the real cache without a record for a child costs one read; a source serving a
/// snapshot without the `subagent` key costs one more.
#[test]
fn a_cache_miss_or_a_row_without_the_key_costs_one_read() {
    run_each(&WITH_CACHE, async |h| {
        h.author(child_header("c", "p"), child_events(continuable("foreign"))).await;
        let expected = json!([child("c", "continuable", Some("foreign"), "inactive", false)]);
        assert_eq!(h.list_json("p").await, expected);
        assert_eq!(h.reads("c"), 1);
        let runtime = h.runtime_with_cache(Some(StubCache::new("c", Stub::NoKey)));
        let rows = runtime.list_children(&id("p"), &token()).await.unwrap();
        assert_eq!(serde_json::to_value(rows).unwrap(), expected);
        assert_eq!(h.reads("c"), 2);
    });
}

/// Case 32: without a cache, a settled child costs exactly one read per listing.
#[test]
fn without_a_cache_a_settled_child_costs_one_read() {
    run_each(&NO_CACHE, async |h| {
        let parent = h.parent("p");
        h.start_continuable(&parent, "c", "uncached").await;
        h.list("p").await;
        assert_eq!(h.reads("c"), 1);
        let runtime = h.runtime_with_cache(Some(StubCache::new("c", Stub::Nothing)));
        runtime.list_children(&id("p"), &token()).await.unwrap();
        assert_eq!(h.reads("c"), 2);
    });
}

/// Case 33: a checkpoint source that panics (a poisoned row detonating) is a silent miss.
#[test]
fn a_panicking_cache_falls_through_silently() {
    run_each(&NO_CACHE, async |h| {
        h.author(child_header("c", "p"), child_events(continuable("still fine"))).await;
        let runtime = h.runtime_with_cache(Some(StubCache::new("c", Stub::Panic)));
        let rows = runtime.list_children(&id("p"), &token()).await.unwrap();
        assert_eq!(
            serde_json::to_value(rows).unwrap(),
            json!([child("c", "continuable", Some("still fine"), "inactive", false)])
        );
        assert_eq!(h.reads("c"), 1);
    });
}

/// A negative event time makes the timing view refuse its value: the live child is corrupt.
#[test]
fn a_timing_view_failure_makes_a_live_child_corrupt() {
    run_each(&NO_CACHE, async |h| {
        h.clock.set(-50);
        let open_turn = [ev("turn/start", 0, json!({"turn": 1})), descriptor_event(1, continuable("time traveller"))];
        h.live(child_header("c", "p"), &open_turn);
        assert_eq!(h.list_json("p").await, json!([diagnostic("c", "corrupt")]));
    });
}

/// The listing future can be spawned on a multi-threaded runtime.
#[test]
fn listing_futures_are_send() {
    fn assert_send<T: Send>(_: &T) {}
    run_each(&NO_CACHE[..1], async |h| {
        let cancel = token();
        let parent = id("p");
        let children = h.runtime.list_children(&parent, &cancel);
        assert_send(&children);
        children.await.unwrap();
        let descendants = h.runtime.list_descendants(&parent, &cancel);
        assert_send(&descendants);
        descendants.await.unwrap();
    });
}
