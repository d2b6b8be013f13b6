//! `session.history`: message-boundary paging, the projections block on the tail page only, the
//! live and cold arms agreeing, and the byte budget of a page.

use apiproxy::ProxyConfig;
use serde_json::{Value, json};

use crate::support::{Server, session_with_turns, user_message};

fn seqs(page: &Value) -> Vec<u64> {
    page["events"].as_array().unwrap().iter().map(|entry| entry["event"]["seq"].as_u64().unwrap()).collect()
}

/// Walks every page from the tail back; returns the pages' seqs, newest page first.
async fn walk(server: &Server, id: &str, max_messages: u64) -> Vec<Vec<u64>> {
    let mut pages = Vec::new();
    let mut before: Option<u64> = None;
    for _ in 0..1000 {
        let mut payload = json!({"sessionId": id, "maxMessages": max_messages});
        if let Some(before) = before {
            payload["beforeSeq"] = json!(before);
        }
        let page = server.ok(None, "session.history", payload).await;
        assert_eq!(page.get("projections").is_some(), before.is_none(), "the block rides the tail page only");
        let page_seqs = seqs(&page);
        if let (Some(before), Some(last)) = (before, page_seqs.last()) {
            assert_eq!(last + 1, before, "pages are contiguous");
        }
        let has_more = page["hasMore"].as_bool().unwrap();
        before = page_seqs.first().copied();
        pages.push(page_seqs);
        if !has_more {
            return pages;
        }
    }
    panic!("paging did not end");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paging_live_and_cold() {
    let server = Server::start().await;
    session_with_turns(&server, None, "h", 5).await;
    // Each turn is 6 events with two messages (prompt and answer).
    let tail = server.ok(None, "session.history", json!({"sessionId": "h", "maxMessages": 2})).await;
    assert_eq!(seqs(&tail), vec![25, 26, 27, 28, 29]);
    assert_eq!(tail["hasMore"], true);
    assert_eq!(tail["projections"]["asOfSeq"], 29);
    assert_eq!(tail["projections"]["values"]["sessionListMetadata"]["blank"], false);
    assert_eq!(tail["projections"]["values"]["subagent"], Value::Null);
    assert!(tail["projections"]["values"].as_object().unwrap().contains_key("subagent"));
    let entry = &tail["events"][0];
    assert!(entry.get("view").is_none());
    assert_eq!(entry["event"]["type"], "user/message");
    assert_eq!(entry["event"]["surfaceOp"], "append");

    let live_pages = walk(&server, "h", 3).await;
    let flattened: Vec<u64> = live_pages.iter().rev().flatten().copied().collect();
    assert_eq!(flattened, (0..30).collect::<Vec<u64>>());
    // Default page size (50 messages) covers everything.
    let all = server.ok(None, "session.history", json!({"sessionId": "h"})).await;
    assert_eq!(seqs(&all).len(), 30);
    assert_eq!(all["hasMore"], false);

    server.ok(None, "session.release", json!({"sessionId": "h"})).await;
    let cold_pages = walk(&server, "h", 3).await;
    assert_eq!(cold_pages, live_pages, "the cold arm serves the same pages");
    let cold_tail = server.ok(None, "session.history", json!({"sessionId": "h", "maxMessages": 2})).await;
    assert_eq!(cold_tail["projections"], tail["projections"], "a cold fold equals the live cells");
    // A beforeSeq of 0 is an empty first page.
    let empty = server.ok(None, "session.history", json!({"sessionId": "h", "beforeSeq": 0})).await;
    assert_eq!((seqs(&empty), empty["hasMore"].clone()), (vec![], json!(false)));
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cold_history_shows_in_memory_repair() {
    let server = Server::start().await;
    session_with_turns(&server, None, "open", 1).await;
    server
        .ok(
            None,
            "session.append",
            json!({"sessionId": "open", "events": [{"type": "turn/start", "data": {"turn": 2}}]}),
        )
        .await;
    server.ok(None, "session.release", json!({"sessionId": "open"})).await;
    let page = server.ok(None, "session.history", json!({"sessionId": "open"})).await;
    let last = &page["events"].as_array().unwrap().last().unwrap()["event"];
    assert_eq!(last["type"], "turn/end");
    assert_eq!(last["data"]["reason"]["kind"], "interrupted");
    assert_eq!(page["projections"]["asOfSeq"], last["seq"]);
    // The repair stayed in memory: nothing was attached.
    assert!(server.store().get(&"open".into()).is_none());
    server.stop().await;
}

/// The stored JSON size of a page's events, as the budget counts them (the canonical compact
/// line; key order does not change the length).
fn page_bytes(page: &Value) -> Vec<usize> {
    page["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|entry| serde_json::to_string(&entry["event"]).unwrap().len())
        .collect()
}

/// Walks every page from the tail back with the default `maxMessages`; returns the pages, newest
/// first, checking on each that it is contiguous with the one after it.
async fn walk_all(server: &Server, method: &str, address: Value) -> Vec<Value> {
    let mut pages = Vec::new();
    let mut before: Option<u64> = None;
    for _ in 0..1000 {
        let mut payload = address.clone();
        if let Some(before) = before {
            payload["beforeSeq"] = json!(before);
        }
        let page = server.ok(None, method, payload).await;
        let page_seqs = seqs(&page);
        if let (Some(before), Some(last)) = (before, page_seqs.last()) {
            assert_eq!(last + 1, before, "pages are contiguous");
        }
        before = page_seqs.first().copied();
        let has_more = page["hasMore"].as_bool().unwrap();
        pages.push(page);
        if !has_more {
            return pages;
        }
    }
    panic!("paging did not end");
}

const BUDGET: usize = 2000;

/// Every page is at most the budget, or one event alone; the pages cover the log exactly once.
fn check_budget(pages: &[Value], n_events: u64) {
    for page in pages {
        let sizes = page_bytes(page);
        let total: usize = sizes.iter().sum();
        assert!(total <= BUDGET || sizes.len() == 1, "a page of {total} bytes in {} events", sizes.len());
    }
    let flattened: Vec<u64> = pages.iter().rev().flat_map(seqs).collect();
    assert_eq!(flattened, (0..n_events).collect::<Vec<u64>>());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pages_stop_at_the_byte_budget_live_and_cold() {
    let server = Server::start_with(ProxyConfig { history_page_bytes: BUDGET, ..ProxyConfig::default() }).await;
    session_with_turns(&server, None, "big", 0).await;
    // Prompts of about 400 bytes each, then one prompt over the whole budget, then more.
    let prompt = |n: usize, len: usize| user_message(&format!("u{n}"), &"x".repeat(len));
    let events: Vec<Value> = (0..12)
        .map(|n| prompt(n, 400))
        .chain([prompt(12, 3 * BUDGET)])
        .chain((13..16).map(|n| prompt(n, 400)))
        .collect();
    server.ok(None, "session.append", json!({"sessionId": "big", "events": events})).await;

    // The tail page: 50 messages would be the whole log, the budget stops it first.
    let tail = server.ok(None, "session.history", json!({"sessionId": "big"})).await;
    assert_eq!(tail["hasMore"], true);
    assert_eq!(tail["truncated"], true);
    assert_eq!(seqs(&tail), vec![13, 14, 15], "the page stops before the event that would take it over");
    assert_eq!(tail["projections"]["asOfSeq"], 15, "the tail page's projections are the whole log's");
    let live = walk_all(&server, "session.history", json!({"sessionId": "big"})).await;
    check_budget(&live, 16);
    let alone = live.iter().find(|page| seqs(page) == vec![12]).expect("the oversized event is served alone");
    assert!(page_bytes(alone)[0] > BUDGET);
    // A page the budget does not cut says nothing about it.
    let small = server.ok(None, "session.history", json!({"sessionId": "big", "maxMessages": 2})).await;
    assert_eq!((seqs(&small), small.get("truncated")), (vec![14, 15], None));

    server.ok(None, "session.release", json!({"sessionId": "big"})).await;
    let cold = walk_all(&server, "session.history", json!({"sessionId": "big"})).await;
    assert_eq!(cold, live, "the cold arm, which keeps only the page, serves the same pages");
    let cold_small = server.ok(None, "session.history", json!({"sessionId": "big", "maxMessages": 2})).await;
    assert_eq!(cold_small, small);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subagent_history_page_stops_at_the_byte_budget() {
    let server = Server::start_with(ProxyConfig { history_page_bytes: BUDGET, ..ProxyConfig::default() }).await;
    session_with_turns(&server, None, "p", 1).await;
    let spawn = json!({"parentSessionId": "p", "childSessionId": "kid", "mode": "continuable", "label": "kid"});
    server.ok(None, "subagent.spawn", spawn).await;
    let prompts: Vec<Value> = (0..10).map(|n| user_message(&format!("k{n}"), &"y".repeat(500))).collect();
    server.ok(None, "session.append", json!({"sessionId": "kid", "parentSessionId": "p", "events": prompts})).await;
    let address = json!({"parentSessionId": "p", "childSessionId": "kid", "mode": "continuable"});
    let live = walk_all(&server, "subagent.history", address.clone()).await;
    assert!(live.len() > 1, "the budget cut the child's history into pages");
    assert_eq!(live[0]["truncated"], true);
    check_budget(&live, 12);
    server.ok(None, "session.release", json!({"sessionId": "kid", "parentSessionId": "p"})).await;
    let cold = walk_all(&server, "subagent.history", address).await;
    assert_eq!(cold, live);
    server.stop().await;
}
