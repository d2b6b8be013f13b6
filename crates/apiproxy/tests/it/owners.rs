//! Owner isolation: for every method and every frame type, another owner's session is exactly
//! an unknown one, and the operator tier sees everything. Forks and children inherit the owner.

use serde_json::{Value, json};

use crate::support::{Server, session_with_turns, turn};

const ALICE: Option<&str> = Some("alice");
const BOB: Option<&str> = Some("bob");

fn ids(list: &Value) -> Vec<String> {
    list["items"].as_array().unwrap().iter().map(|row| row["sessionId"].as_str().unwrap().to_owned()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn methods_are_partitioned() {
    let server = Server::start().await;
    session_with_turns(&server, ALICE, "a1", 1).await;
    session_with_turns(&server, BOB, "b1", 1).await;
    let alice_header = server.store().get(&"a1".into()).unwrap().header().clone();
    assert_eq!(alice_header.owner.as_deref(), Some("alice"));

    assert_eq!(ids(&server.ok(ALICE, "session.list", json!({})).await), ["a1"]);
    assert_eq!(ids(&server.ok(BOB, "session.list", json!({})).await), ["b1"]);
    let mut all = ids(&server.ok(None, "session.list", json!({})).await);
    all.sort();
    assert_eq!(all, ["a1", "b1"]);
    assert_eq!(server.ok(BOB, "host.describe", json!({})).await["attachedSessions"], 1);

    // Every session-addressed method answers bob exactly as for an unknown id.
    let unknown = |method: &'static str, payload: Value| (method, payload);
    for (method, payload) in [
        unknown("session.history", json!({"sessionId": "a1"})),
        unknown("session.fork", json!({"sessionId": "a1"})),
        unknown("session.append", json!({"sessionId": "a1", "events": turn(2)})),
        unknown("session.release", json!({"sessionId": "a1"})),
        unknown("session.create", json!({"sessionId": "a1"})),
    ] {
        let for_bob = server.err(BOB, method, payload.clone(), "session-not-found").await;
        let mut unknown_payload = payload.clone();
        unknown_payload["sessionId"] = json!("zz");
        if method != "session.create" {
            let for_unknown = server.err(BOB, method, unknown_payload, "session-not-found").await;
            assert_eq!(for_bob["message"].as_str().unwrap().replace("a1", "zz"), for_unknown["message"], "{method}");
        }
    }
    // The operator reads everything; alice's fork is alice's.
    server.ok(None, "session.history", json!({"sessionId": "a1"})).await;
    let fork = server.ok(ALICE, "session.fork", json!({"sessionId": "a1"})).await;
    let fork_id = fork["sessionId"].as_str().unwrap().to_owned();
    server.err(BOB, "session.history", json!({"sessionId": fork_id}), "session-not-found").await;
    server.ok(ALICE, "session.history", json!({"sessionId": fork_id})).await;
    let operator_fork = server.ok(None, "session.fork", json!({"sessionId": "a1"})).await;
    let operator_fork = server.store().get(&operator_fork["sessionId"].as_str().unwrap().into()).unwrap();
    assert_eq!(operator_fork.header().owner.as_deref(), Some("alice"), "a fork inherits the source's owner");

    // Cold sessions stay partitioned.
    server.ok(ALICE, "session.release", json!({"sessionId": "a1"})).await;
    server.err(BOB, "session.history", json!({"sessionId": "a1"}), "session-not-found").await;
    server.err(BOB, "session.create", json!({"sessionId": "a1"}), "session-not-found").await;
    assert!(!ids(&server.ok(BOB, "session.list", json!({})).await).contains(&"a1".to_owned()));
    server.ok(ALICE, "session.history", json!({"sessionId": "a1"})).await;

    // Subagents: bob cannot spawn under, list, or read alice's children.
    server.ok(ALICE, "session.create", json!({"sessionId": "a2"})).await;
    let spawned = server
        .ok(
            ALICE,
            "subagent.spawn",
            json!({"parentSessionId": "a2", "childSessionId": "a2-kid", "mode": "continuable", "label": "kid"}),
        )
        .await;
    assert_eq!(spawned["childSessionId"], "a2-kid");
    let kid = server.store().get(&"a2-kid".into()).unwrap();
    assert_eq!(kid.header().owner.as_deref(), Some("alice"), "children inherit the owner");
    let error = server
        .err(
            BOB,
            "subagent.spawn",
            json!({"parentSessionId": "a2", "mode": "continuable", "label": "x"}),
            "subagent-parent-unavailable",
        )
        .await;
    assert_eq!(error["details"], json!({"parentSessionId": "a2"}));
    let catalog = server.ok(BOB, "subagent.list", json!({"parentSessionId": "a2"})).await;
    assert_eq!(catalog, json!({"entries": [], "parentAvailable": false}));
    let catalog = server.ok(ALICE, "subagent.list", json!({"parentSessionId": "a2"})).await;
    assert_eq!(catalog["entries"].as_array().unwrap().len(), 1);
    assert_eq!(catalog["parentAvailable"], true);
    let address = json!({"parentSessionId": "a2", "childSessionId": "a2-kid", "mode": "continuable"});
    let error = server.err(BOB, "subagent.history", address.clone(), "subagent-not-found").await;
    assert_eq!(error["details"], json!({"parentSessionId": "a2", "childSessionId": "a2-kid"}));
    server.ok(ALICE, "subagent.history", address).await;
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frames_are_partitioned() {
    let server = Server::start().await;
    server.ok(ALICE, "session.create", json!({"sessionId": "a1"})).await;
    server.ok(BOB, "session.create", json!({"sessionId": "b1"})).await;
    let mut bob_mux = server.ws("/api/events.mux", BOB).await;
    let mut bob_host = server.ws("/api/events.host", BOB).await;
    let mut alice_mux = server.ws("/api/events.mux", ALICE).await;
    let mut operator_mux = server.ws("/api/events.mux", None).await;

    let baseline = bob_mux.next().await.unwrap();
    assert_eq!(baseline, json!({"type": "session/subscribed", "sessionId": "b1", "lastSeq": -1}));
    // Alice's session produces every frame type: subscribed (create), event, projection, and
    // host added / status / removed; then bob's own marker.
    server.ok(ALICE, "session.create", json!({"sessionId": "a2"})).await;
    server.ok(ALICE, "session.append", json!({"sessionId": "a1", "events": turn(1)})).await;
    server.ok(ALICE, "session.release", json!({"sessionId": "a2"})).await;
    server.ok(BOB, "session.append", json!({"sessionId": "b1", "events": turn(1)})).await;
    server.ok(BOB, "session.create", json!({"sessionId": "b-marker"})).await;

    let frames = bob_mux.until(|frame| frame["sessionId"] == "b-marker").await;
    assert!(frames.iter().all(|frame| frame["sessionId"] != "a1" && frame["sessionId"] != "a2"), "{frames:?}");
    for kind in ["session/event", "session/projection", "session/subscribed"] {
        assert!(frames.iter().any(|frame| frame["type"] == kind), "bob sees his own {kind}: {frames:?}");
    }
    let host = bob_host.until(|frame| frame["sessionId"] == "b-marker").await;
    assert!(host.iter().all(|frame| frame["sessionId"].as_str().is_some_and(|id| id.starts_with('b'))), "{host:?}");
    assert!(host.iter().any(|frame| frame["type"] == "host/session-status"), "{host:?}");

    let alice = alice_mux.until(|frame| frame["type"] == "session/event" && frame["event"]["type"] == "turn/end").await;
    assert!(alice.iter().all(|frame| frame["sessionId"] == "a1" || frame["sessionId"] == "a2"), "{alice:?}");
    assert!(alice.iter().any(|frame| frame["type"] == "session/projection"));
    let operator = operator_mux.until(|frame| frame["sessionId"] == "b-marker").await;
    for id in ["a1", "a2", "b1"] {
        assert!(operator.iter().any(|frame| frame["sessionId"] == id), "the operator sees {id}");
    }
    server.stop().await;
}
