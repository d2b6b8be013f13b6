//! The HTTP carrier: status policy, envelopes, the `invalid-request` sentinel, payload validation,
//! the trust fence and tokens. Each bad input gets its documented answer and the server keeps
//! serving.

use apiproxy::{AccessConfig, OwnerToken, ProxyConfig};
use hyper::StatusCode;
use serde_json::{Value, json};

use crate::support::Server;

const JSON: (&str, &str) = ("content-type", "application/json");

/// HTTP method, path, headers, body, expected status, expected plain-text body.
type StatusCase = (&'static str, &'static str, Vec<(&'static str, &'static str)>, String, StatusCode, &'static str);

fn request(method: &str, payload: Value) -> String {
    json!({"type": "client-request", "rpcId": "r", "method": method, "payload": payload}).to_string()
}

async fn still_serves(server: &Server) {
    let value = server.ok(None, "host.describe", json!({})).await;
    assert_eq!(value["cwd"], "/srv/work");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_policy() {
    let server = Server::start_with(ProxyConfig { max_body_bytes: 4096, ..ProxyConfig::default() }).await;
    let describe = request("host.describe", json!({}));
    let cases: Vec<StatusCase> = vec![
        (
            "POST",
            "/api/no.such.method",
            vec![JSON],
            request("no.such.method", json!({})),
            StatusCode::NOT_FOUND,
            "not found",
        ),
        ("POST", "/elsewhere", vec![JSON], describe.clone(), StatusCode::NOT_FOUND, "not found"),
        ("GET", "/api/host.describe", vec![], String::new(), StatusCode::NOT_FOUND, "not found"),
        (
            "POST",
            "/api/host.describe",
            vec![("content-type", "text/plain")],
            describe.clone(),
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "content type must be application/json",
        ),
        (
            "POST",
            "/api/host.describe",
            vec![],
            describe.clone(),
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "content type must be application/json",
        ),
        (
            "POST",
            "/api/host.describe",
            vec![("content-type", "application/x-www-form-urlencoded")],
            describe.clone(),
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "content type must be application/json",
        ),
        ("POST", "/api/host.describe", vec![JSON], "{not json".to_owned(), StatusCode::BAD_REQUEST, "body is not JSON"),
        (
            "POST",
            "/api/host.describe",
            vec![JSON],
            format!("[{}]", "1,".repeat(4096)),
            StatusCode::PAYLOAD_TOO_LARGE,
            "request body too large",
        ),
        ("GET", "/api/events.mux", vec![], String::new(), StatusCode::UPGRADE_REQUIRED, "upgrade required"),
    ];
    for (method, path, headers, body, status, text) in cases {
        let (actual, response_headers, body) = server.raw(method, path, &headers, body).await;
        assert_eq!((actual, String::from_utf8_lossy(&body).as_ref()), (status, text), "{method} {path} {headers:?}");
        if status == StatusCode::PAYLOAD_TOO_LARGE {
            assert_eq!(response_headers["connection"], "close");
        }
        still_serves(&server).await;
    }
    // A media type parameter passes; the type is case-insensitive.
    let (status, _, _) = server
        .raw("POST", "/api/host.describe", &[("content-type", "Application/JSON; charset=utf-8")], describe)
        .await;
    assert_eq!(status, StatusCode::OK);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envelopes_and_sentinel_rpc_id() {
    let server = Server::start().await;
    let check = |body: Value, rpc_id: &'static str, message: &'static str| (body, rpc_id, message);
    let cases = [
        check(json!({"rpcId": "keep-me", "method": "host.describe"}), "keep-me", "invalid client-request message"),
        check(
            json!({"type": "client-request", "rpcId": 7, "method": "host.describe"}),
            "invalid-request",
            "invalid client-request message",
        ),
        check(json!([1, 2]), "invalid-request", "invalid client-request message"),
        check(json!("text"), "invalid-request", "invalid client-request message"),
        check(
            json!({"type": "server-response", "rpcId": "x", "method": "host.describe"}),
            "x",
            "invalid client-request message",
        ),
        check(
            json!({"type": "client-request", "rpcId": "", "method": "session.list", "payload": {}}),
            "",
            "method \"session.list\" does not match path \"host.describe\"",
        ),
    ];
    for (body, rpc_id, message) in cases {
        let (status, _, response) = server.raw("POST", "/api/host.describe", &[JSON], body.to_string()).await;
        assert_eq!(status, StatusCode::OK);
        let response: Value = serde_json::from_slice(&response).unwrap();
        assert_eq!(response["rpcId"], rpc_id, "{body}");
        assert_eq!(response["result"]["ok"], false);
        assert_eq!(response["result"]["error"]["code"], "bad-request");
        assert_eq!(response["result"]["error"]["message"], message, "{body}");
        assert!(response["result"]["error"]["details"]["issues"].is_array());
    }
    // A missing payload is `null`, which host.describe ignores; the rpcId is echoed.
    let (status, _, response) = server
        .raw(
            "POST",
            "/api/host.describe",
            &[JSON],
            json!({"type": "client-request", "rpcId": "abc", "method": "host.describe"}).to_string(),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let response: Value = serde_json::from_slice(&response).unwrap();
    assert_eq!(response["rpcId"], "abc");
    let value = &response["result"]["value"];
    for key in ["version", "cwd", "attachedSessions", "home", "canOpenPath", "operatorEligible"] {
        assert!(!value[key].is_null(), "host.describe lacks {key}: {value}");
    }
    assert_eq!(value["operatorEligible"], true);
    // `respond`: nothing is ever pending here.
    let answer = json!({"type": "client-response", "rpcId": "q", "result": {"ok": true, "value": {}}});
    let (_, _, receipt) = server.raw("POST", "/api/respond", &[JSON], answer.to_string()).await;
    assert_eq!(serde_json::from_slice::<Value>(&receipt).unwrap(), json!({"accepted": false, "reason": "not-pending"}));
    let (_, _, receipt) = server.raw("POST", "/api/respond", &[JSON], "{}").await;
    assert_eq!(
        serde_json::from_slice::<Value>(&receipt).unwrap(),
        json!({"accepted": false, "reason": "bad-response"})
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn payload_validation() {
    let server = Server::start().await;
    let bad = |method: &'static str, payload: Value, path: &'static str| (method, payload, path);
    let cases = [
        bad("session.history", json!({}), "sessionId"),
        bad("session.history", json!(null), ""),
        bad("session.history", json!({"sessionId": ""}), "sessionId"),
        bad("session.history", json!({"sessionId": 5}), "sessionId"),
        bad("session.history", json!({"sessionId": "a\u{0}b"}), "sessionId"),
        bad("session.history", json!({"sessionId": "x".repeat(2000)}), "sessionId"),
        bad("session.history", json!({"sessionId": "s", "beforeSeq": -1}), "beforeSeq"),
        bad("session.history", json!({"sessionId": "s", "beforeSeq": 1.5}), "beforeSeq"),
        bad("session.history", json!({"sessionId": "s", "beforeSeq": "3"}), "beforeSeq"),
        bad("session.history", json!({"sessionId": "s", "maxMessages": 0}), "maxMessages"),
        bad("session.history", json!({"sessionId": "s", "maxMessages": 1e300}), "maxMessages"),
        bad("session.history", json!({"sessionId": "s", "maxMessages": 9007199254740992u64}), "maxMessages"),
        bad("session.fork", json!({"sessionId": "s", "atSeq": -3}), "atSeq"),
        bad("session.create", json!({"sessionId": "../escape"}), "sessionId"),
        bad("session.create", json!({"sessionId": "a/b"}), "sessionId"),
        bad("session.create", json!({"sessionId": ".."}), "sessionId"),
        bad("session.create", json!({"cwd": "relative/dir"}), "cwd"),
        // A value one backend cannot store losslessly is refused by all (PostgreSQL text holds no NUL).
        bad("session.create", json!({"cwd": "/work/a\u{0}b"}), "cwd"),
        bad("session.create", json!({"agentPreset": "p\u{0}"}), "agentPreset"),
        bad("session.create", json!({"cwd": "/a", "workspaceId": "w"}), ""),
        bad("session.append", json!({"sessionId": "s", "events": []}), "events"),
        bad("session.append", json!({"sessionId": "s", "events": [{"data": {}}]}), "events"),
        bad("session.append", json!({"sessionId": "s", "events": [{"type": "turn/start"}]}), "events"),
        bad("subagent.list", json!({}), "parentSessionId"),
        bad("subagent.history", json!({"parentSessionId": "p", "childSessionId": "c", "mode": "both"}), "mode"),
        bad("subagent.spawn", json!({"parentSessionId": "p", "mode": "continuable"}), "label"),
    ];
    for (method, payload, path) in cases {
        let error = server.err(None, method, payload.clone(), "bad-request").await;
        assert_eq!(error["message"], format!("invalid payload for {method}"), "{payload}");
        let issues = error["details"]["issues"].as_array().unwrap();
        assert!(!issues.is_empty());
        let first_path = issues[0]["path"].get(0).and_then(Value::as_str).unwrap_or("");
        assert_eq!(first_path, path, "{method} {payload}: {issues:?}");
        for issue in issues {
            assert!(issue["code"].is_string() && issue["message"].is_string() && issue["path"].is_array());
        }
    }
    // Ids are opaque on lookup: a `/` or `..` is just an unknown session.
    for id in ["a/b", "..", "../../etc/passwd", "C:\\x"] {
        let error = server.err(None, "session.history", json!({"sessionId": id}), "session-not-found").await;
        assert_eq!(error["details"], json!({"sessionId": id}));
        assert_eq!(error["message"], format!("session \"{id}\" not found"));
    }
    // Large but safe integers are accepted; unknown keys are ignored.
    let page = server.ok(None, "session.create", json!({"sessionId": "s", "extra": true})).await;
    assert_eq!(page["sessionId"], "s");
    let page = server
        .ok(None, "session.history", json!({"sessionId": "s", "maxMessages": 9007199254740991u64, "beforeSeq": 5.0}))
        .await;
    assert_eq!(page["events"], json!([]));
    still_serves(&server).await;
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trust_fence_and_tokens() {
    let access = AccessConfig {
        operator_tokens: vec!["op-token".to_owned()],
        owner_tokens: vec![OwnerToken { owner: "alice".to_owned(), token: "alice-token".to_owned() }],
        allowed_hosts: Vec::new(),
    };
    let server = Server::start_with(ProxyConfig { access, ..ProxyConfig::default() }).await;
    let describe = request("host.describe", json!({}));
    let cases: Vec<(Vec<(&str, &str)>, StatusCode)> = vec![
        (vec![JSON], StatusCode::UNAUTHORIZED),
        (vec![JSON, ("authorization", "Bearer wrong")], StatusCode::UNAUTHORIZED),
        (vec![JSON, ("authorization", "Bearer op-token")], StatusCode::OK),
        (vec![JSON, ("authorization", "Bearer op-token"), ("host", "evil.example")], StatusCode::FORBIDDEN),
        (vec![JSON, ("authorization", "Bearer op-token"), ("origin", "http://evil.example")], StatusCode::FORBIDDEN),
        (vec![JSON, ("authorization", "Bearer op-token"), ("origin", "null")], StatusCode::FORBIDDEN),
        (vec![JSON, ("authorization", "Bearer op-token"), ("sec-fetch-site", "cross-site")], StatusCode::FORBIDDEN),
        (vec![JSON, ("authorization", "Bearer alice-token"), ("x-dsh-owner", "bob")], StatusCode::FORBIDDEN),
        (vec![JSON, ("authorization", "Bearer alice-token")], StatusCode::OK),
        (vec![JSON, ("authorization", "Bearer op-token"), ("x-dsh-owner", "bad owner")], StatusCode::BAD_REQUEST),
    ];
    for (headers, status) in cases {
        let (actual, _, body) = server.raw("POST", "/api/host.describe", &headers, describe.clone()).await;
        assert_eq!(actual, status, "{headers:?}: {}", String::from_utf8_lossy(&body));
        if status == StatusCode::UNAUTHORIZED {
            assert_eq!(serde_json::from_slice::<Value>(&body).unwrap(), json!({"error": "unauthenticated"}));
        }
    }
    // An owner token pins the owner: alice is not operator-eligible.
    let (_, _, body) =
        server.raw("POST", "/api/host.describe", &[JSON, ("authorization", "Bearer alice-token")], describe).await;
    let body: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(body["result"]["value"]["operatorEligible"], false);
    // A WebSocket upgrade without a token is refused too.
    let (status, _, _) = server.raw("GET", "/api/events.mux", &[], "").await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn non_loopback_listen_needs_a_token() {
    let server = Server::start().await;
    let public = "0.0.0.0:8420".parse().unwrap();
    let error = server.proxy.check_listen(&public).unwrap_err();
    assert!(error.to_string().contains("without a bearer token"), "{error}");
    assert!(server.proxy.check_listen(&"127.0.0.1:1".parse().unwrap()).is_ok());
    assert!(server.proxy.check_listen(&"[::1]:1".parse().unwrap()).is_ok());
    server.stop().await;
}

/// Sends `head` (request line and headers, without the blank line) with `body` on a fresh
/// connection, exactly as written, and returns the whole answer.
async fn exact(server: &Server, head: &str, body: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(server.addr).await.unwrap();
    let request = format!(
        "{head}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(crate::support::WAIT, stream.read_to_end(&mut answer))
        .await
        .expect("a timely answer")
        .unwrap();
    String::from_utf8_lossy(&answer).into_owned()
}

/// Two `Host`, `Origin` or `x-dsh-owner` headers, or an absolute-form target naming another
/// authority than `Host`, get 400 and are not dispatched: the session they would create does not exist.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ambiguous_authorities_are_refused_before_dispatch() {
    let server = Server::start().await;
    let addr = server.addr.to_string();
    let create = request("session.create", json!({"sessionId": "smuggled"}));
    let cases = [
        (format!("POST /api/session.create HTTP/1.1\r\nHost: {addr}\r\nHost: {addr}"), "more than one Host header"),
        (
            format!("POST /api/session.create HTTP/1.1\r\nHost: {addr}\r\nHost: evil.example"),
            "more than one Host header",
        ),
        (
            format!(
                "POST /api/session.create HTTP/1.1\r\nHost: {addr}\r\nOrigin: http://{addr}\r\nOrigin: http://{addr}"
            ),
            "more than one Origin header",
        ),
        (
            format!("POST /api/session.create HTTP/1.1\r\nHost: {addr}\r\nx-dsh-owner: alice\r\nx-dsh-owner: bob"),
            "more than one x-dsh-owner header",
        ),
        (
            format!("POST http://evil.example/api/session.create HTTP/1.1\r\nHost: {addr}"),
            "the request target names another authority than the Host header",
        ),
        (
            format!("POST http://127.0.0.1:1/api/session.create HTTP/1.1\r\nHost: {addr}"),
            "the request target names another authority than the Host header",
        ),
    ];
    for (head, message) in &cases {
        let answer = exact(&server, head, &create).await;
        assert!(answer.starts_with("HTTP/1.1 400 "), "{head}: {answer}");
        assert!(answer.ends_with(message), "{head}: {answer}");
    }
    assert!(server.store().list().is_empty(), "a refused request was dispatched");
    // An absolute-form target naming the Host authority is served.
    let head = format!("POST http://{addr}/api/session.create HTTP/1.1\r\nHost: {addr}");
    let answer = exact(&server, &head, &create).await;
    assert!(answer.starts_with("HTTP/1.1 200 "), "{answer}");
    assert!(answer.contains(r#""sessionId":"smuggled""#), "{answer}");
    still_serves(&server).await;
    server.stop().await;
}

/// Opens `events.mux` with the given subprotocols (and optional extra header); the handshake's
/// status and the subprotocol the gateway echoed.
async fn upgrade_with(server: &Server, protocols: &str, authorization: Option<&str>) -> (u16, Option<String>) {
    use tokio_tungstenite::tungstenite::{self, client::IntoClientRequest};
    let mut request = format!("ws://{}/api/events.mux", server.addr).into_client_request().unwrap();
    request.headers_mut().insert("sec-websocket-protocol", protocols.parse().unwrap());
    if let Some(authorization) = authorization {
        request.headers_mut().insert("authorization", authorization.parse().unwrap());
    }
    match tokio_tungstenite::connect_async(request).await {
        Ok((_socket, response)) => (
            response.status().as_u16(),
            response.headers().get("sec-websocket-protocol").map(|value| value.to_str().unwrap().to_owned()),
        ),
        Err(tungstenite::Error::Http(response)) => (response.status().as_u16(), None),
        Err(error) => panic!("handshake failed: {error}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_browser_sends_its_token_as_a_websocket_subprotocol() {
    let access = AccessConfig {
        owner_tokens: vec![OwnerToken { owner: "alice".to_owned(), token: "alice-token".to_owned() }],
        ..AccessConfig::default()
    };
    let server = Server::start_with(ProxyConfig { access, ..ProxyConfig::default() }).await;
    // "YWxpY2UtdG9rZW4" is base64url("alice-token"), "d3Jvbmc" base64url("wrong").
    let cases = [
        ("dsh.v1, dsh.bearer.YWxpY2UtdG9rZW4", None, (101, Some("dsh.v1"))),
        ("dsh.v1, dsh.bearer.d3Jvbmc", None, (401, None)),
        ("dsh.v1, dsh.bearer.not*base64", None, (401, None)),
        ("dsh.v1", None, (401, None)),
        ("dsh.v1, dsh.bearer.YWxpY2UtdG9rZW4, dsh.bearer.YWxpY2UtdG9rZW4", None, (400, None)),
        ("dsh.v1, dsh.bearer.YWxpY2UtdG9rZW4", Some("Bearer alice-token"), (400, None)),
        // A header client keeps working, with or without offering the version.
        ("dsh.v1", Some("Bearer alice-token"), (101, Some("dsh.v1"))),
    ];
    for (protocols, authorization, (status, echoed)) in cases {
        let (actual, actual_echo) = upgrade_with(&server, protocols, authorization).await;
        assert_eq!((actual, actual_echo.as_deref()), (status, echoed), "{protocols} / {authorization:?}");
    }
    // The subprotocol is only read on an upgrade: a unary call with it alone is unauthenticated.
    let (status, _, _) = server
        .raw(
            "POST",
            "/api/host.describe",
            &[JSON, ("sec-websocket-protocol", "dsh.bearer.YWxpY2UtdG9rZW4")],
            request("host.describe", json!({})),
        )
        .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    server.stop().await;
}
