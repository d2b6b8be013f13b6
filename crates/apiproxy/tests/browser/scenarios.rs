//! The scenarios: each its own test, its own gateway, browser and store.

use std::time::Duration;

use expect_test::{ExpectFile, expect_file};
use serde_json::json;
use session_persistence_postgres::testing::ScratchSchema;

use crate::harness::{Browser, Gateway, Viewer, browser_available, keys, turn};

/// A gateway with the demo on a fresh JSONL store, and a browser; `None` when skipped.
async fn demo_jsonl(flags: &[&str]) -> Option<(tempfile::TempDir, Gateway, Browser)> {
    if !browser_available() {
        return None;
    }
    let dir = tempfile::tempdir().unwrap();
    let gateway = Gateway::start(dir.path().join("store").to_str().unwrap(), flags);
    let browser = Browser::start().await;
    Some((dir, gateway, browser))
}

/// The accessibility dump of the element `css` finds (see `a11y.js`).
async fn a11y(browser: &Browser, css: &str) -> String {
    let script = include_str!("a11y.js");
    let value = browser.js_with(script, vec![json!(css)]).await;
    // The demo's live child goes in and out of its turns: its activity is volatile.
    let dump = value.as_str().unwrap_or_default();
    let dump = dump
        .replace("4 subagents, 1 running", "4 subagents")
        .replace("watch the nightly rerun continuable · inactive", "watch the nightly rerun continuable · running");
    dump + "\n"
}

async fn assert_golden(browser: &Browser, css: &str, golden: ExpectFile) {
    golden.assert_eq(&a11y(browser, css).await);
}

/// The list, the parent, its tree with the diagnostic row, and a child's history: the core
/// scenario every store runs.
async fn core(gateway: &Gateway, browser: &Browser, screens: &str) {
    browser.open(&gateway.url()).await;
    browser.wait_for("document.querySelector('#session-list .session-row')", Duration::from_secs(5)).await;
    // The parent is listed with its children counted; the children themselves are hidden.
    let parent = r#"#session-list .session-row[data-session-id="demo-parent"]"#;
    let count = browser.text(&format!("{parent} .child-count")).await;
    assert!(count.starts_with("4 subagents"), "{count}");
    let rows = browser
        .js("return [...document.querySelectorAll('#session-list .session-row')].map(r => r.dataset.sessionId);")
        .await;
    assert!(
        !rows.as_array().unwrap().iter().any(|id| id.as_str().is_some_and(|id| id.starts_with("demo-child-"))),
        "{rows}"
    );
    browser.screenshot(&format!("{screens}-list")).await;
    // Open the parent: its tree lists the four children, the settled one as a diagnostic.
    browser.find(&format!("{parent} a.session-link")).await.click().await;
    browser.wait_for("location.hash === '#/s/demo-parent'", Duration::from_secs(5)).await;
    browser.wait_ready().await;
    browser
        .wait_for("document.querySelectorAll('#subagent-tree > [role=treeitem]').length === 4", Duration::from_secs(5))
        .await;
    let settled = r#"#subagent-tree [role=treeitem][data-session-id="demo-child-settled"]"#;
    assert_eq!(browser.attr(settled, "aria-disabled").await.as_deref(), Some("true"));
    assert!(browser.attr(settled, "class").await.unwrap_or_default().contains("diagnostic"));
    let reason = browser.text(&format!("{settled} .diagnostic-reason")).await;
    assert!(reason.starts_with("corrupt:"), "{reason}");
    assert!(reason.contains("apiproxy verify --store"), "{reason}");
    browser.screenshot(&format!("{screens}-session")).await;
    // Enter on a child's treeitem opens it, with its history.
    let child = browser.find(r#"#subagent-tree [role=treeitem][data-session-id="demo-child-continuable"]"#).await;
    child.send_keys(keys::ENTER).await;
    browser.wait_for("location.hash === '#/s/demo-child-continuable'", Duration::from_secs(5)).await;
    browser.wait_ready().await;
    browser.wait_for("document.querySelectorAll('#history li.event').length > 0", Duration::from_secs(5)).await;
    let crumbs = browser.text("#breadcrumbs").await;
    assert!(crumbs.contains("demo-parent") && crumbs.contains("demo-child-continuable"), "{crumbs}");
    browser.screenshot(&format!("{screens}-child")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_core_scenario_on_jsonl() {
    let Some((_dir, gateway, browser)) = demo_jsonl(&[]).await else { return };
    core(&gateway, &browser, "jsonl").await;
    browser.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_core_scenario_on_sqlite() {
    if !browser_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let gateway = Gateway::start(&format!("sqlite:{}", dir.path().join("sessions.db").display()), &[]);
    let browser = Browser::start().await;
    core(&gateway, &browser, "sqlite").await;
    browser.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_core_scenario_on_postgres() {
    let Some(schema) = ScratchSchema::bare() else { return };
    if !browser_available() {
        return;
    }
    let gateway = Gateway::start(schema.url(), &[]);
    let browser = Browser::start().await;
    core(&gateway, &browser, "postgres").await;
    browser.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_subagent_toggle_shows_the_children() {
    let Some((_dir, gateway, browser)) = demo_jsonl(&[]).await else { return };
    browser.open(&gateway.url()).await;
    let toggle = browser.find("#filter-subagents").await;
    assert_eq!(browser.js("return document.querySelector('#filter-subagents').checked;").await, json!(false));
    toggle.click().await;
    browser
        .wait_for(
            r#"document.querySelector('#session-list .session-row[data-session-id="demo-child-continuable"]')"#,
            Duration::from_secs(5),
        )
        .await;
    browser.screenshot("list-with-subagents").await;
    browser.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tree_expands_and_answers_the_keyboard() {
    let Some((_dir, gateway, browser)) = demo_jsonl(&[]).await else { return };
    // A family of three generations so the tree has a branch to expand.
    gateway.ok("session.create", json!({"sessionId": "tree-root"}));
    let spawn = |parent: &str, child: &str| {
        gateway.ok(
            "subagent.spawn",
            json!({"parentSessionId": parent, "childSessionId": child, "mode": "continuable", "label": child}),
        )
    };
    spawn("tree-root", "tree-child");
    spawn("tree-child", "tree-grandchild");
    browser.open(&format!("{}#/s/tree-root", gateway.url())).await;
    let branch = r#"#subagent-tree [role=treeitem][data-session-id="tree-child"]"#;
    assert_eq!(browser.attr(branch, "aria-expanded").await.as_deref(), Some("false"));
    assert_eq!(browser.attr(branch, "aria-level").await.as_deref(), Some("1"));
    browser.find(branch).await.send_keys(keys::RIGHT).await;
    browser
        .wait_for(
            &format!("document.querySelector({:?}).getAttribute('aria-expanded') === 'true'", branch),
            Duration::from_secs(5),
        )
        .await;
    let leaf = format!(r#"{branch} [role=group] [role=treeitem][data-session-id="tree-grandchild"]"#);
    assert_eq!(browser.attr(&leaf, "aria-level").await.as_deref(), Some("2"));
    browser.screenshot("tree-expanded").await;
    // Left collapses it again.
    browser.find(branch).await.send_keys(keys::LEFT).await;
    browser
        .wait_for(
            &format!("document.querySelector({:?}).getAttribute('aria-expanded') === 'false'", branch),
            Duration::from_secs(5),
        )
        .await;
    browser.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deep_link_to_a_seq_survives_a_reload() {
    let Some((_dir, gateway, browser)) = demo_jsonl(&[]).await else { return };
    let id = "deep-linked";
    gateway.ok("session.create", json!({"sessionId": id}));
    for n in 1..=3 {
        gateway.ok("session.append", json!({"sessionId": id, "events": turn(n)}));
    }
    browser.open(&format!("{}#/s/{id}/seq/7", gateway.url())).await;
    let selected = "#history li.event.selected";
    browser.wait_for(&format!("document.querySelector('{selected}')"), Duration::from_secs(5)).await;
    assert_eq!(browser.attr(selected, "data-seq").await.as_deref(), Some("7"));
    browser.refresh().await;
    browser.wait_ready().await;
    browser.wait_for(&format!("document.querySelector('{selected}')"), Duration::from_secs(5)).await;
    assert_eq!(browser.attr(selected, "data-seq").await.as_deref(), Some("7"));
    let focused = browser.js("return document.activeElement && document.activeElement.dataset.seq;").await;
    assert_eq!(focused, json!("7"));
    browser.screenshot("deep-link").await;
    browser.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_appended_event_appears_within_two_seconds() {
    let Some((_dir, gateway, browser)) = demo_jsonl(&[]).await else { return };
    let id = "live-one";
    gateway.ok("session.create", json!({"sessionId": id}));
    // Durable: the gateway is killed below, and what it had not yet written behind would be lost.
    gateway.ok("session.append", json!({"sessionId": id, "events": turn(1), "durable": true}));
    browser.open(&format!("{}#/s/{id}", gateway.url())).await;
    browser.wait_for("document.querySelector('#conn').textContent === 'live'", Duration::from_secs(5)).await;
    let before = browser.js("return document.querySelectorAll('#history li.event').length;").await;
    gateway.ok("session.append", json!({"sessionId": id, "events": turn(2)}));
    browser
        .wait_for(
            &format!("document.querySelectorAll('#history li.event').length === {} + 6", before),
            Duration::from_secs(2),
        )
        .await;
    browser.close().await;
}

/// The seqs `session.history` holds for `id`, every page.
fn stored_seqs(gateway: &Gateway, id: &str) -> Vec<u64> {
    let history = gateway.ok("session.history", json!({"sessionId": id, "maxMessages": 10_000}));
    history["events"].as_array().unwrap().iter().map(|entry| entry["event"]["seq"].as_u64().unwrap()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reconnect_leaves_no_gap_and_no_duplicate() {
    let Some((dir, gateway, browser)) = demo_jsonl(&[]).await else { return };
    let store = dir.path().join("store");
    let store = store.to_str().unwrap();
    let id = "reconnected";
    gateway.ok("session.create", json!({"sessionId": id}));
    gateway.ok("session.append", json!({"sessionId": id, "events": turn(1)}));
    browser.open(&format!("{}#/s/{id}", gateway.url())).await;
    browser.wait_for("document.querySelector('#conn').textContent === 'live'", Duration::from_secs(5)).await;
    // The server goes away (its sockets drop), comes back on the same store and port, and the
    // session grows while the page reconnects.
    let port = gateway.port();
    gateway.kill();
    browser.wait_for("document.querySelector('#conn').textContent !== 'live'", Duration::from_secs(5)).await;
    let gateway = Gateway::start_on(store, port, &[]);
    // The new gateway serves the session cold until a client resumes it.
    gateway.ok("session.create", json!({"sessionId": id}));
    gateway.ok("session.append", json!({"sessionId": id, "events": turn(2)}));
    browser.wait_for("document.querySelector('#conn').textContent === 'live'", Duration::from_secs(15)).await;
    gateway.ok("session.append", json!({"sessionId": id, "events": turn(3)}));
    let stored = stored_seqs(&gateway, id);
    browser.wait_for(&format!("window.__dsh.seqs({id:?}).length === {}", stored.len()), Duration::from_secs(5)).await;
    let seen: Vec<u64> =
        serde_json::from_value(browser.js(&format!("return window.__dsh.seqs({id:?});")).await).unwrap();
    assert_eq!(seen, stored, "the page's seqs against session.history");
    browser.screenshot("reconnected").await;
    browser.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owner_never_sees_another_owners_sessions() {
    let flags = ["--owner-token", "A=token-a", "--owner-token", "B=token-b"];
    let Some((dir, gateway, browser)) = demo_jsonl(&flags).await else { return };
    let port = gateway.port();
    let as_a = gateway.with_token("token-a");
    as_a.ok("session.create", json!({"sessionId": "secret-of-owner-a"}));
    as_a.ok("session.append", json!({"sessionId": "secret-of-owner-a", "events": turn(1)}));
    let as_b = Gateway::attach(port, "token-b");
    as_b.ok("session.create", json!({"sessionId": "seen-by-owner-b"}));
    as_b.ok("session.append", json!({"sessionId": "seen-by-owner-b", "events": turn(1)}));
    browser.goto(&as_a.url()).await;
    browser.js("sessionStorage.setItem('dsh.token', 'token-b'); return true;").await;
    browser.refresh().await;
    browser.wait_ready().await;
    browser
        .wait_for(
            r#"document.querySelector('#session-list .session-row[data-session-id="seen-by-owner-b"]')"#,
            Duration::from_secs(5),
        )
        .await;
    browser.find("#filter-subagents").await.click().await;
    browser.wait_ready().await;
    let source = browser.source().await;
    let text = browser.js("return document.body.innerText;").await;
    assert!(!source.contains("secret-of-owner-a"), "owner A's id in owner B's page source");
    assert!(!text.as_str().unwrap_or_default().contains("secret-of-owner-a"), "owner A's id in owner B's page text");
    browser.screenshot("owner-b").await;
    browser.close().await;
    drop((as_a, dir));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_token_prompt_refuses_a_wrong_token_and_takes_the_right_one() {
    let Some((_dir, gateway, browser)) = demo_jsonl(&["--token", "right-token"]).await else { return };
    browser.goto(&gateway.url()).await;
    browser.find("#token-form").await;
    browser.find("#token-input").await.send_keys("wrong-token").await;
    browser.find("#token-form button[type=submit]").await.click().await;
    browser
        .wait_for(
            "document.querySelector('#token-error').textContent === 'the token was refused'",
            Duration::from_secs(5),
        )
        .await;
    browser.screenshot("token-refused").await;
    let input = browser.find("#token-input").await;
    input.clear().await;
    input.send_keys("right-token").await;
    browser.find("#token-form button[type=submit]").await.click().await;
    browser.wait_for("document.querySelector('#conn').textContent === 'live'", Duration::from_secs(5)).await;
    browser.wait_for("document.querySelector('#session-list .session-row')", Duration::from_secs(5)).await;
    let stored = browser.js("return sessionStorage.getItem('dsh.token');").await;
    assert_eq!(stored, json!("right-token"));
    assert!(!browser.current_url().await.contains("right-token"));
    browser.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn accessibility_goldens() {
    let Some((_dir, gateway, browser)) = demo_jsonl(&[]).await else { return };
    browser.open(&gateway.url()).await;
    browser.wait_for("document.querySelector('#session-list .session-row')", Duration::from_secs(5)).await;
    assert_golden(&browser, "#list-view", expect_file!["goldens/list.txt"]).await;
    browser.open(&format!("{}#/s/demo-parent", gateway.url())).await;
    browser
        .wait_for("document.querySelectorAll('#subagent-tree > [role=treeitem]').length === 4", Duration::from_secs(5))
        .await;
    assert_golden(&browser, "#subagent-tree", expect_file!["goldens/tree.txt"]).await;
    browser.open(&format!("{}#/s/demo-child-continuable", gateway.url())).await;
    browser.wait_for("document.querySelectorAll('#history li.event').length > 0", Duration::from_secs(5)).await;
    assert_golden(&browser, "#history", expect_file!["goldens/history.txt"]).await;
    browser.close().await;
}

/// A child created while its parent's branch is open appears in that branch (the page refreshes
/// an open branch, debounced, on the host downlink's `host/session-added`), and so does a new
/// child of the open session itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_created_under_an_open_branch_appears_in_it() {
    let Some((_dir, gateway, browser)) = demo_jsonl(&[]).await else { return };
    gateway.ok("session.create", json!({"sessionId": "tree-root"}));
    let spawn = |parent: &str, child: &str| {
        gateway.ok(
            "subagent.spawn",
            json!({"parentSessionId": parent, "childSessionId": child, "mode": "continuable", "label": child}),
        )
    };
    spawn("tree-root", "tree-child");
    spawn("tree-child", "tree-grandchild");
    browser.open(&format!("{}#/s/tree-root", gateway.url())).await;
    browser.wait_for("document.querySelector('#conn').textContent === 'live'", Duration::from_secs(5)).await;
    let branch = r#"#subagent-tree [role=treeitem][data-session-id="tree-child"]"#;
    browser.find(branch).await.send_keys(keys::RIGHT).await;
    let group = format!("{branch} > [role=group]");
    browser.wait_for(&format!("document.querySelector({:?})", group), Duration::from_secs(5)).await;
    let in_group = |id: &str| format!("document.querySelector({:?})", format!(r#"{group} [data-session-id="{id}"]"#));
    assert_eq!(browser.js(&format!("return !!{};", in_group("tree-grandchild-2"))).await, json!(false));

    // A second grandchild, spawned over HTTP while the branch is open.
    spawn("tree-child", "tree-grandchild-2");
    browser.wait_for(&in_group("tree-grandchild-2"), Duration::from_secs(5)).await;
    let level = browser.attr(&format!(r#"{group} [data-session-id="tree-grandchild-2"]"#), "aria-level").await;
    assert_eq!(level.as_deref(), Some("2"));
    // The branch stayed open and still holds the first grandchild.
    assert_eq!(browser.attr(branch, "aria-expanded").await.as_deref(), Some("true"));
    browser.wait_for(&in_group("tree-grandchild"), Duration::from_secs(1)).await;

    // A new direct child of the open session joins the top level.
    spawn("tree-root", "tree-child-2");
    browser
        .wait_for(
            r#"document.querySelector('#subagent-tree > [role=treeitem][data-session-id="tree-child-2"]')"#,
            Duration::from_secs(5),
        )
        .await;
    browser.screenshot("tree-live-child").await;
    browser.close().await;
}

/// Counts the page's WebSocket attempts per path (`window.__sockets`) and the `visibilitychange`
/// listeners it adds (`window.__visibilityWaits`), and lets the test say whether the tab is
/// hidden (`window.__setHidden(bool)`: `document.hidden` and `visibilityState` follow, and a
/// `visibilitychange` event is dispatched).
const VISIBILITY_PROBE: &str = r#"
    window.__sockets = {};
    const Native = window.WebSocket;
    window.WebSocket = function (url, protocols) {
        const path = new URL(url).pathname;
        window.__sockets[path] = (window.__sockets[path] || 0) + 1;
        return new Native(url, protocols);
    };
    window.WebSocket.prototype = Native.prototype;
    window.__visibilityWaits = 0;
    const add = document.addEventListener.bind(document);
    document.addEventListener = (type, listener, options) => {
        if (type === 'visibilitychange') window.__visibilityWaits += 1;
        return add(type, listener, options);
    };
    let hidden = false;
    Object.defineProperty(document, 'hidden', { configurable: true, get: () => hidden });
    Object.defineProperty(document, 'visibilityState', { configurable: true, get: () => (hidden ? 'hidden' : 'visible') });
    window.__setHidden = (value) => {
        hidden = value;
        document.dispatchEvent(new Event('visibilitychange'));
    };
    return true;
"#;

/// While the tab is hidden the page does not reconnect: once the backoff's delay is over it
/// waits for `visibilitychange` instead of opening a socket, and connects as soon as the tab is
/// shown again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reconnect_waits_while_the_tab_is_hidden() {
    let Some((dir, gateway, browser)) = demo_jsonl(&[]).await else { return };
    let store = dir.path().join("store");
    let store = store.to_str().unwrap();
    browser.open(&gateway.url()).await;
    browser.wait_for("document.querySelector('#conn').textContent === 'live'", Duration::from_secs(5)).await;
    browser.js(VISIBILITY_PROBE).await;
    browser.js("window.__setHidden(true); return true;").await;
    let port = gateway.port();
    gateway.kill();
    // Both downlinks close; after the backoff delay each reaches the hidden tab and waits.
    browser.wait_for("window.__visibilityWaits === 2", Duration::from_secs(10)).await;
    let _gateway = Gateway::start_on(store, port, &[]);
    let sockets = browser.js("return window.__sockets;").await;
    assert_eq!(sockets, json!({}), "no socket is opened while the tab is hidden");
    assert_ne!(browser.text("#conn").await, "live");
    browser.screenshot("reconnect-hidden").await;
    // Shown again: one attempt per downlink, and the page is live.
    browser.js("window.__setHidden(false); return true;").await;
    browser.wait_for("document.querySelector('#conn').textContent === 'live'", Duration::from_secs(5)).await;
    browser.wait_for("window.__sockets['/api/events.host'] === 1", Duration::from_secs(5)).await;
    let sockets = browser.js("return window.__sockets;").await;
    assert_eq!(sockets, json!({"/api/events.mux": 1, "/api/events.host": 1}));
    browser.close().await;
}

/// Paging back through a long session keeps at most 2,000 event rows in the DOM: the oldest
/// page pushes the newest rows out, and the rows shown are exactly the window's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paging_back_keeps_at_most_two_thousand_rows_in_the_dom() {
    let Some((_dir, gateway, browser)) = demo_jsonl(&[]).await else { return };
    let id = "long-one";
    gateway.ok("session.create", json!({"sessionId": id}));
    // 600 turns of 6 events: 3,600 events, appended 100 turns at a time.
    for batch in 0..6 {
        let events: Vec<_> = (1..=100).flat_map(|n| turn(batch * 100 + n)).collect();
        gateway.ok("session.append", json!({"sessionId": id, "events": events}));
    }
    browser.open(&format!("{}#/s/{id}", gateway.url())).await;
    browser.wait_for("document.querySelectorAll('#history li.event').length > 0", Duration::from_secs(5)).await;
    let first_seq = "window.__dsh.seqs('long-one')[0]";
    let dom_rows = "document.querySelectorAll('#history li.event').length";
    let tail_first = browser.js(&format!("return {first_seq};")).await.as_u64().unwrap();
    assert!(tail_first > 3_000, "the history opens at the tail: {tail_first}");
    let mut max_rows = 0;
    let mut before = tail_first;
    let mut pages = 0;
    while before > 0 {
        browser.js("document.getElementById('history-older').click(); return true;").await;
        browser.wait_for(&format!("{first_seq} < {before}"), Duration::from_secs(5)).await;
        before = browser.js(&format!("return {first_seq};")).await.as_u64().unwrap();
        let rows = browser.js(&format!("return {dom_rows};")).await.as_u64().unwrap();
        assert!(rows <= 2_000, "{rows} event rows in the DOM at seq {before}");
        max_rows = max_rows.max(rows);
        pages += 1;
        assert!(pages < 100, "paging back never reached seq 0");
    }
    assert_eq!(max_rows, 2_000, "the window filled up to its cap");
    // The DOM shows exactly the window: seqs 0..1999, in order.
    let shown = browser
        .js("return [...document.querySelectorAll('#history li.event')].map(li => Number(li.dataset.seq));")
        .await;
    let expected: Vec<u64> = (0..2_000).collect();
    assert_eq!(shown, json!(expected));
    assert_eq!(browser.js("return window.__dsh.seqs('long-one');").await, json!(expected));
    // Nothing is older than seq 0.
    assert_eq!(browser.js("return document.querySelector('#history-older').hidden;").await, json!(true));
    browser.screenshot("history-capped").await;
    browser.close().await;
}
