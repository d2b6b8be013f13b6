//! The `list_agents` tool (reference 03 §7, §9.4): schemas, row projection, status source, and
//! the rendered text, pinned with `expect-test` snapshots.

use std::{collections::HashMap, sync::Arc};

use expect_test::expect;
use serde_json::{Value, json};
use session_core::SessionId;
use subagent::{AgentStatus, AgentStatusSource, ChildOptions, ListAgentsTool, create_continuable_child};

use super::support::*;

/// A status source with fixed answers (`ready` for anyone else).
#[derive(Debug, Default)]
struct FixedStatus(HashMap<SessionId, AgentStatus>);

impl AgentStatusSource for FixedStatus {
    fn status(&self, id: &SessionId) -> AgentStatus {
        self.0.get(id).copied().unwrap_or(AgentStatus::Ready)
    }
}

async fn text(tool: &ListAgentsTool, caller: &str, arguments: Value) -> String {
    let outcome = tool.execute(Some(&id(caller)), &arguments, &token()).await;
    assert!(!outcome.is_error, "{}", outcome.text);
    outcome.text
}

/// (3) One-shot children are dropped; status comes from the agent registry, not `activity`;
/// diagnostics are rows, not errors.
#[test]
fn rows_render_with_registry_status() {
    run(async |h| {
        let parent = h.parent("parent");
        h.clock.set(2_000);
        h.start_one_shot(&parent, "one-shot-child", Some("not listed")).await;
        h.clock.set(3_000);
        h.start_continuable(&parent, "real-child", "real child").await;
        h.live(created(child_header("running-child", "parent"), 4_000), &child_events(continuable("still working")));
        h.live(
            created(child_header("waiting-child", "parent"), 5_000),
            &child_events(continuable("waiting on descendants")),
        );
        let broken = vec![
            ev("turn/start", 0, json!({"turn": 1})),
            ev("turn/end", 1, json!({"turn": 1, "reason": {"kind": "interrupted"}})),
        ];
        h.author(created(child_header("broken-child", "parent"), 6_000), broken).await;
        let status = FixedStatus(HashMap::from([
            (id("running-child"), AgentStatus::Running),
            (id("waiting-child"), AgentStatus::Idle),
        ]));
        let tool = ListAgentsTool::new(h.runtime.clone(), Arc::new(status));
        let outcome = tool.execute(Some(&id("parent")), &json!({}), &token()).await;
        assert!(!outcome.is_error);
        expect![[r#"
            real-child [ready] — real child
            running-child [running] — still working
            waiting-child [idle] — waiting on descendants
            broken-child [diagnostic: corrupt]"#]]
        .assert_eq(&outcome.text);
        expect![[r#"[{"kind":"child","id":"real-child","label":"real child","status":"ready"},{"kind":"child","id":"running-child","label":"still working","status":"running"},{"kind":"child","id":"waiting-child","label":"waiting on descendants","status":"idle"},{"kind":"diagnostic","id":"broken-child","reason":"corrupt"}]"#]]
        .assert_eq(&serde_json::to_string(&outcome.rows.unwrap()).unwrap());
    });
}

/// (5) A real one-shot and a real settled continuable: only the continuable, `ready`.
#[test]
fn a_settled_continuable_renders_ready() {
    run(async |h| {
        let parent = h.parent("p");
        h.clock.set(2_000);
        h.start_one_shot(&parent, "once", None).await;
        h.clock.set(3_000);
        h.start_continuable(&parent, "33333333-3333-4333-8333-333333333333", "summarize the doc").await;
        expect!["33333333-3333-4333-8333-333333333333 [ready] — summarize the doc"]
            .assert_eq(&text(&h.list_agents_tool(), "p", json!({})).await);
    });
}

/// (10) A real tree in the descendants scope with the default status source: the child is live
/// between turns (`idle`), the grandchild is working (`running`).
#[test]
fn a_live_tree_renders_positions_and_default_status() {
    run(async |h| {
        let parent = h.parent("parent");
        h.clock.set(2_000);
        let child = create_continuable_child(
            &h.store,
            &parent,
            continuable_descriptor("waiting branch"),
            ChildOptions { id: Some(id("child")), ..ChildOptions::default() },
        )
        .unwrap();
        run_turn(&child, 1, None::<fn()>);
        h.clock.set(3_000);
        let grandchild = create_continuable_child(
            &h.store,
            &child,
            continuable_descriptor("nested leaf"),
            ChildOptions { id: Some(id("grandchild")), ..ChildOptions::default() },
        )
        .unwrap();
        append(&grandchild, "turn/start", json!({"turn": 1}));
        expect![[r#"
            child [idle] parent=parent depth=1 — waiting branch
            grandchild [running] parent=child depth=2 — nested leaf"#]]
        .assert_eq(&text(&h.list_agents_tool(), "parent", json!({"scope": "descendants"})).await);
        expect!["child [idle] — waiting branch"].assert_eq(&text(&h.list_agents_tool(), "parent", json!({})).await);
    });
}

/// (11) Descendants: a one-shot intermediate is dropped but its continuable leaf is listed; a
/// positioned diagnostic.
#[test]
fn descendants_render_through_one_shot_intermediates() {
    run(async |h| {
        h.author(created(child_header("one-shot-mid", "p"), 1), child_events(one_shot(Some("mid")))).await;
        h.author(created(child_header("deep-leaf", "one-shot-mid"), 2), child_events(continuable("deep leaf"))).await;
        h.author(created(child_header("broken-node", "p"), 3), child_events(continuable("unreadable"))).await;
        h.persistence.set_read_fault("broken-node", Some(ReadFault::Fail));
        let outcome = h.list_agents_tool().execute(Some(&id("p")), &json!({"scope": "descendants"}), &token()).await;
        assert!(!outcome.is_error, "diagnostics are not errors");
        expect![[r#"
            deep-leaf [ready] parent=one-shot-mid depth=2 — deep leaf
            broken-node [diagnostic: unavailable] parent=p depth=1"#]]
        .assert_eq(&outcome.text);
        expect![[r#"[{"kind":"child","id":"deep-leaf","label":"deep leaf","status":"ready","parent":"one-shot-mid","depth":2},{"kind":"diagnostic","id":"broken-node","reason":"unavailable","parent":"p","depth":1}]"#]]
        .assert_eq(&serde_json::to_string(&outcome.rows.unwrap()).unwrap());
    });
}

/// The `subagent-diagnostic` fixture: descriptor-less settled debris is surfaced as corrupt.
#[test]
fn descriptorless_debris_renders_as_a_corrupt_diagnostic() {
    run(async |h| {
        h.author(plain_header("subagent-diagnostic-parent", 1), stored_turn(0, 1)).await;
        let events = vec![
            ev("turn/start", 0, json!({"turn": 1})),
            ev("turn/end", 1, json!({"turn": 1, "reason": {"kind": "interrupted"}})),
        ];
        let header = created(child_header("subagent-diagnostic-child", "subagent-diagnostic-parent"), 2);
        h.author(header, events).await;
        let outcome = h.list_agents_tool().execute(Some(&id("subagent-diagnostic-parent")), &json!({}), &token()).await;
        assert!(!outcome.is_error);
        expect!["subagent-diagnostic-child [diagnostic: corrupt]"].assert_eq(&outcome.text);
    });
}
