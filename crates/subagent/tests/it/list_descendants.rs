//! `list_descendants`: reference 03 §9.1 cases 43–53.

use std::sync::Arc;

use serde_json::json;
use session_core::{CreateOptions, HeaderMeta};
use subagent::{SubagentRuntime, SubagentServices};

use crate::support::*;

/// Case 47: a 10,000-deep chain of ordinary live sessions ending in a live subagent leaf: one
/// row at depth 10,000, no stack exhaustion.
#[test]
fn a_ten_thousand_deep_chain_is_walked_without_recursion() {
    run_each(&NO_CACHE[..1], async |h| {
        let depth = 10_000u64;
        let mut parent = id("root");
        for level in 1..depth {
            let node = id(&format!("node-{level}"));
            let meta = HeaderMeta { parent_session: Some(parent), ..HeaderMeta::default() };
            h.store.create(Some(node.clone()), CreateOptions { seed: None, meta }).unwrap();
            parent = node;
        }
        h.live(child_header("leaf", parent.as_str()), &child_events(continuable("deep leaf")));
        let rows = h.runtime.list_descendants(&id("root"), &token()).await.unwrap();
        assert_eq!(rows.len(), 1);
        assert_eq!(
            serde_json::to_value(&rows[0]).unwrap(),
            child_at("leaf", "continuable", Some("deep leaf"), "running", false, parent.as_str(), depth)
        );
    });
}

/// Cases 52 and 53: a pre-cancelled call reads nothing; an absent registry fails loudly.
#[test]
fn descendants_share_the_preconditions() {
    run_each(&NO_CACHE, async |h| {
        let cancel = token();
        cancel.cancel();
        assert_code(h.runtime.list_descendants(&id("root"), &cancel).await, "CANCELLED");
        assert_eq!(h.persistence.lists(), 0);
        let no_registry = SubagentRuntime::new(SubagentServices { projections: None, ..h.services() }).unwrap();
        assert_code(
            no_registry.list_descendants(&id("root"), &token()).await,
            "SUBAGENT_CONTROL_PROJECTIONS_UNAVAILABLE",
        );
        let no_store = SubagentRuntime::new(SubagentServices { sessions: None, ..h.services() }).unwrap();
        assert_code(
            no_store.list_descendants(&id("root"), &token()).await,
            "SUBAGENT_CONTROL_SESSION_STORE_UNAVAILABLE",
        );
    });
}

/// Without persistence the walk is live-only.
#[test]
fn descendants_without_persistence_are_live_only() {
    run_each(&NO_CACHE, async |h| {
        h.author(child_header("cold", "root"), child_events(continuable("cold"))).await;
        h.live(created(child_header("live", "root"), 2), &child_events(continuable("live")));
        let live_only = Arc::new(
            SubagentRuntime::new(SubagentServices { persistence: None, cache: None, ..h.services() }).unwrap(),
        );
        let rows = live_only.list_descendants(&id("root"), &token()).await.unwrap();
        assert_eq!(
            serde_json::to_value(rows).unwrap(),
            json!([child_at("live", "continuable", Some("live"), "running", false, "root", 1)])
        );
        assert_eq!(h.persistence.lists(), 0);
    });
}
