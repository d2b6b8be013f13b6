//! Size bounds at the gateway: a header field or an event that the log could not store is a
//! `bad-request` with a `too_big` issue naming it, and nothing is created or appended.

use std::sync::Arc;

use apiproxy::{AccessConfig, ApiProxy, OwnerToken, ProxyConfig, ProxyParts, SessionStore};
use serde_json::{Value, json};
use session_core::{MAX_AGENT_PRESET_BYTES, MAX_CWD_BYTES, MAX_OWNER_BYTES, ManualClock};
use session_projection::ProjectionRegistry;

use crate::support::{Server, turn};

fn listed_ids(list: &Value) -> Vec<String> {
    let mut ids: Vec<String> =
        list["items"].as_array().unwrap().iter().map(|row| row["sessionId"].as_str().unwrap().to_owned()).collect();
    ids.sort();
    ids
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_cwd_or_agent_preset_creates_nothing() {
    let server = Server::start().await;
    server.ok(None, "session.create", json!({"sessionId": "keep", "cwd": "/w"})).await;
    server.ok(None, "session.append", json!({"sessionId": "keep", "events": turn(1)})).await;
    server.ok(None, "session.release", json!({"sessionId": "keep"})).await;

    let huge_cwd = format!("/{}", "d".repeat(2 << 20));
    let cases = [
        (
            json!({"sessionId": "big", "cwd": huge_cwd}),
            "cwd",
            "session header cwd is 2097153 bytes, over the 4096-byte limit",
        ),
        (
            json!({"sessionId": "big", "agentPreset": "p".repeat(MAX_AGENT_PRESET_BYTES + 1)}),
            "agentPreset",
            "session header agentPreset is 1025 bytes, over the 1024-byte limit",
        ),
        // Without an explicit id the gateway would mint one; still nothing is created.
        (
            json!({"cwd": format!("/{}", "d".repeat(MAX_CWD_BYTES))}),
            "cwd",
            "session header cwd is 4097 bytes, over the 4096-byte limit",
        ),
    ];
    for (payload, key, message) in cases {
        let error = server.err(None, "session.create", payload, "bad-request").await;
        assert_eq!(error["details"]["issues"], json!([{"code": "too_big", "path": [key], "message": message}]));
        assert_eq!(error["message"], "invalid payload for session.create");
    }

    // Nothing was created: the id is unknown, the live store holds nothing, the others still list.
    server.err(None, "session.history", json!({"sessionId": "big"}), "session-not-found").await;
    assert!(server.store().list().is_empty());
    let list = server.ok(None, "session.list", json!({})).await;
    assert_eq!(listed_ids(&list), ["keep"]);
    server.stop().await;
}

/// A cwd and a preset at their bounds are accepted, stored, and read back after release.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fields_at_their_bounds_are_stored_and_read_back() {
    let server = Server::start().await;
    let cwd = format!("/{}", "d".repeat(MAX_CWD_BYTES - 1));
    let preset = "p".repeat(MAX_AGENT_PRESET_BYTES);
    let payload = json!({"sessionId": "edge", "cwd": cwd, "agentPreset": preset});
    server.ok(None, "session.create", payload).await;
    server.ok(None, "session.append", json!({"sessionId": "edge", "events": turn(1)})).await;
    server.ok(None, "session.release", json!({"sessionId": "edge"})).await;
    assert!(server.store().list().is_empty(), "the session is cold");
    let list = server.ok(None, "session.list", json!({})).await;
    let row = &list["items"][0];
    assert_eq!((row["sessionId"].as_str(), row["cwd"].as_str()), (Some("edge"), Some(cwd.as_str())));
    let history = server.ok(None, "session.history", json!({"sessionId": "edge"})).await;
    assert_eq!(history["events"].as_array().map(Vec::len), Some(6), "{}", history["hasMore"]);
    server.stop().await;
}

/// An event over the event bound is refused at its `data`, and a spawn whose descriptor would be
/// over it creates no child. The gateway's bound is set small here, so the payloads are small;
/// the session's own bound (the default) is checked the same way in session-core's tests.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_event_or_descriptor_is_refused() {
    const LIMIT: usize = 4096;
    let server = Server::start_with(ProxyConfig { max_event_bytes: LIMIT, ..ProxyConfig::default() }).await;
    server.ok(None, "session.create", json!({"sessionId": "s", "cwd": "/w"})).await;
    let blob = "x".repeat(LIMIT);
    let events = json!([turn(1)[0], {"type": "request/context", "data": {"provider": blob}}]);
    let error = server.err(None, "session.append", json!({"sessionId": "s", "events": events}), "bad-request").await;
    let issues = error["details"]["issues"].as_array().unwrap();
    assert_eq!(issues.len(), 1, "{issues:?}");
    assert_eq!((issues[0]["code"].as_str(), &issues[0]["path"]), (Some("too_big"), &json!(["events", 1, "data"])));
    let message = issues[0]["message"].as_str().unwrap();
    assert!(message.starts_with("session event \"request/context\" at seq 1 is "), "{message}");
    assert!(message.ends_with(&format!("bytes, over the {LIMIT}-byte limit")), "{message}");
    assert!(error["message"].as_str().unwrap().contains("events through seq 0 were appended"), "{error}");
    assert_eq!(server.store().list()[0].len(), 1, "only the event before the refused one was appended");

    let spawn = json!({"parentSessionId": "s", "childSessionId": "child", "mode": "continuable", "label": blob});
    let error = server.err(None, "subagent.spawn", spawn, "bad-request").await;
    assert_eq!(error["details"]["issues"][0]["code"], "too_big", "{}", error["details"]);
    assert_eq!(error["details"]["issues"][0]["path"], json!(["label"]));
    assert_eq!(server.store().list().len(), 1, "no child was created");
    server.err(None, "session.history", json!({"sessionId": "child"}), "session-not-found").await;
    server.stop().await;
}

/// Configured values that end up in headers are checked when the gateway is built, not at the
/// first creation that would use them.
#[test]
fn configured_header_values_over_their_bounds_are_refused() {
    let build = |config: ProxyConfig| {
        let store = Arc::new(SessionStore::new(Arc::new(ManualClock::new(0))));
        let parts = ProxyParts { store, persistence: None, registry: ProjectionRegistry::new(), cache: None };
        ApiProxy::new(parts, config).map(|_| ()).map_err(|error| error.to_string())
    };
    let long_cwd = ProxyConfig { default_cwd: format!("/{}", "d".repeat(MAX_CWD_BYTES)), ..ProxyConfig::default() };
    assert_eq!(
        build(long_cwd),
        Err("invalid configuration: session header cwd is 4097 bytes, over the 4096-byte limit".to_owned())
    );
    let owner = OwnerToken { owner: "o".repeat(MAX_OWNER_BYTES + 1), token: "secret".to_owned() };
    let access = AccessConfig { owner_tokens: vec![owner], ..AccessConfig::default() };
    let long_owner = ProxyConfig { default_cwd: "/w".to_owned(), access, ..ProxyConfig::default() };
    assert_eq!(
        build(long_owner),
        Err("invalid configuration: session header owner is 257 bytes, over the 256-byte limit".to_owned())
    );
}
