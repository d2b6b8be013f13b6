//! `session.history`: message-boundary paging, the projections block on the tail page only, and
//! the live and cold arms agreeing.

use serde_json::{Value, json};

use crate::support::{Server, session_with_turns};

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
