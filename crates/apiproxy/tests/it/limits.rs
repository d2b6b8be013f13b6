//! Connection limits through raw sockets: the header-read, body-read and idle timeouts (each test
//! makes one of them short and the others an hour, so only that one can close the connection), the
//! connection cap, graceful shutdown letting an open request finish, and the configurations
//! `ApiProxy::new` refuses (empty tokens, zero limits), and the memory an idle downlink holds.

use std::{sync::Arc, time::Duration};

use apiproxy::{AccessConfig, ApiProxy, OwnerToken, ProxyConfig, ProxyParts, SessionStore};
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use serde_json::json;
use session_core::ManualClock;
use session_projection::ProjectionRegistry;
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
};

use crate::support::{Server, WAIT};

const SHORT: Duration = Duration::from_secs(1);
const LONG: Duration = Duration::from_secs(3600);

/// Every connection timeout an hour long.
fn long_limits() -> ProxyConfig {
    ProxyConfig { header_read_timeout: LONG, body_read_timeout: LONG, idle_timeout: LONG, ..ProxyConfig::default() }
}

const DESCRIBE_BODY: &str = r#"{"type":"client-request","rpcId":"r","method":"host.describe","payload":{}}"#;

fn describe_request() -> String {
    format!(
        "POST /api/host.describe HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n\
         content-length: {}\r\n\r\n{DESCRIBE_BODY}",
        DESCRIBE_BODY.len()
    )
}

/// Reads until the server closes the connection (end of stream or a reset) and returns what came.
async fn read_until_closed(stream: &mut TcpStream) -> String {
    let mut received = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let read = tokio::time::timeout(WAIT, stream.read(&mut chunk)).await.expect("the server closes the connection");
        match read {
            Ok(0) | Err(_) => return String::from_utf8_lossy(&received).into_owned(),
            Ok(n) => received.extend_from_slice(&chunk[..n]),
        }
    }
}

/// Reads one response (its head and a `content-length` body), leaving the connection open.
async fn read_response(stream: &mut TcpStream) -> String {
    let mut received = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(head_end) = received.windows(4).position(|window| window == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&received[..head_end]).to_ascii_lowercase();
            let length = head
                .lines()
                .find_map(|line| line.strip_prefix("content-length:"))
                .map_or(0, |value| value.trim().parse::<usize>().unwrap());
            if received.len() >= head_end + 4 + length {
                return String::from_utf8(received).unwrap();
            }
        }
        let n = tokio::time::timeout(WAIT, stream.read(&mut chunk)).await.expect("a timely response").unwrap();
        assert!(n > 0, "the connection closed before the whole response: {}", String::from_utf8_lossy(&received));
        received.extend_from_slice(&chunk[..n]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partial_header_is_cut_off_after_the_header_timeout() {
    let server = Server::start_with(ProxyConfig { header_read_timeout: SHORT, ..long_limits() }).await;
    // A new connection that starts a header and stops is closed without an answer.
    let mut slow = TcpStream::connect(server.addr).await.unwrap();
    slow.write_all(b"POST /api/host.describe HTTP/1.1\r\nhost: 127.0.0.1\r\n").await.unwrap();
    assert_eq!(read_until_closed(&mut slow).await, "");
    // So is a keep-alive connection whose next header stops halfway (it was idle before, and the
    // idle timeout is an hour).
    let mut keep_alive = TcpStream::connect(server.addr).await.unwrap();
    keep_alive.write_all(describe_request().as_bytes()).await.unwrap();
    let answer = read_response(&mut keep_alive).await;
    assert!(answer.starts_with("HTTP/1.1 200 "), "{answer}");
    keep_alive.write_all(b"POST /api/host.describe HTTP/1.1\r\nhost: 127.0").await.unwrap();
    assert_eq!(read_until_closed(&mut keep_alive).await, "");
    // The server keeps serving.
    server.ok(None, "host.describe", json!({})).await;
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partial_body_gets_408_after_the_body_timeout() {
    let server = Server::start_with(ProxyConfig { body_read_timeout: SHORT, ..long_limits() }).await;
    let mut slow = TcpStream::connect(server.addr).await.unwrap();
    let head = "POST /api/host.describe HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n\
                content-length: 100\r\n\r\n{\"type\":";
    slow.write_all(head.as_bytes()).await.unwrap();
    let answer = read_until_closed(&mut slow).await;
    assert!(answer.starts_with("HTTP/1.1 408 "), "{answer}");
    assert!(answer.to_ascii_lowercase().contains("\r\nconnection: close\r\n"), "{answer}");
    assert!(answer.ends_with("\r\n\r\nrequest body timed out"), "{answer}");
    server.ok(None, "host.describe", json!({})).await;
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_keep_alive_connection_is_closed_after_the_idle_timeout() {
    let server = Server::start_with(ProxyConfig { idle_timeout: SHORT, ..long_limits() }).await;
    let mut idle = TcpStream::connect(server.addr).await.unwrap();
    for _ in 0..2 {
        idle.write_all(describe_request().as_bytes()).await.unwrap();
        let answer = read_response(&mut idle).await;
        assert!(answer.starts_with("HTTP/1.1 200 "), "{answer}");
        assert!(!answer.to_ascii_lowercase().contains("connection: close"), "kept alive: {answer}");
    }
    assert_eq!(read_until_closed(&mut idle).await, "");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_over_the_cap_are_refused_until_one_closes() {
    let server = Server::start_with(ProxyConfig { max_connections: 2, ..long_limits() }).await;
    let mut open = server.proxy.watch_connections();
    let first = TcpStream::connect(server.addr).await.unwrap();
    let _second = TcpStream::connect(server.addr).await.unwrap();
    tokio::time::timeout(WAIT, open.wait_for(|n| *n == 2)).await.expect("both are accepted").unwrap();
    // The third is answered at once and closed, not queued.
    let mut third = TcpStream::connect(server.addr).await.unwrap();
    let answer = read_until_closed(&mut third).await;
    assert!(answer.starts_with("HTTP/1.1 503 "), "{answer}");
    assert!(answer.to_ascii_lowercase().contains("\r\nconnection: close\r\n"), "{answer}");
    assert!(answer.ends_with("\r\n\r\nconnection limit reached"), "{answer}");
    assert_eq!(server.proxy.n_connections(), 2);
    // A slot frees when a connection ends.
    drop(first);
    tokio::time::timeout(WAIT, open.wait_for(|n| *n < 2)).await.expect("the slot frees").unwrap();
    server.ok(None, "host.describe", json!({})).await;
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_lets_an_open_request_finish() {
    let server = Server::start_with(long_limits()).await;
    // An idle keep-alive connection: shutdown closes it at once, which tells this test that
    // shutdown has begun.
    let stream = TcpStream::connect(server.addr).await.unwrap();
    let (mut sender, idle) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await.unwrap();
    let idle = tokio::spawn(idle);
    let request = hyper::Request::post("/api/host.describe")
        .header("host", "127.0.0.1")
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(DESCRIBE_BODY)))
        .unwrap();
    let response = tokio::time::timeout(WAIT, sender.send_request(request)).await.unwrap().unwrap();
    assert_eq!(response.status(), 200);
    response.into_body().collect().await.unwrap();
    // A request in its handler: the server asks for the body (100 Continue) only once it reads it.
    let mut busy = TcpStream::connect(server.addr).await.unwrap();
    let head = format!(
        "POST /api/host.describe HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n\
         expect: 100-continue\r\ncontent-length: {}\r\n\r\n",
        DESCRIBE_BODY.len()
    );
    busy.write_all(head.as_bytes()).await.unwrap();
    let interim = read_response(&mut busy).await;
    assert!(interim.starts_with("HTTP/1.1 100 "), "{interim}");

    let stopping = tokio::spawn(server.stop());
    tokio::time::timeout(WAIT, idle).await.expect("the idle connection closes").unwrap().unwrap();
    busy.write_all(DESCRIBE_BODY.as_bytes()).await.unwrap();
    let answer = read_until_closed(&mut busy).await;
    assert!(answer.starts_with("HTTP/1.1 200 "), "{answer}");
    assert!(answer.contains(r#""rpcId":"r""#), "{answer}");
    tokio::time::timeout(WAIT, stopping).await.expect("serve returns").unwrap();
    drop(sender);
}

#[test]
fn empty_tokens_and_zero_limits_are_refused() {
    let check = |config: ProxyConfig, expected: &str| {
        let store = Arc::new(SessionStore::new(Arc::new(ManualClock::new(0))));
        let parts = ProxyParts { store, persistence: None, registry: ProjectionRegistry::new(), cache: None };
        let config = ProxyConfig { default_cwd: "/w".to_owned(), ..config };
        let error = ApiProxy::new(parts, config).map(|_| ()).unwrap_err().to_string();
        assert_eq!(error, format!("invalid configuration: {expected}"));
    };
    let operator = |token: &str| ProxyConfig {
        access: AccessConfig { operator_tokens: vec![token.to_owned()], ..AccessConfig::default() },
        ..ProxyConfig::default()
    };
    let owner = |owner: &str, token: &str| ProxyConfig {
        access: AccessConfig {
            owner_tokens: vec![OwnerToken { owner: owner.to_owned(), token: token.to_owned() }],
            ..AccessConfig::default()
        },
        ..ProxyConfig::default()
    };
    check(operator(""), "a bearer token must not be empty");
    check(operator("secret "), "a bearer token must not start or end with a space");
    check(owner("alice", ""), "a bearer token must not be empty");
    check(owner("", "secret"), "an owner token needs a non-empty owner");
    let positive = "max_body_bytes, push_queue_frames and max_connections must be positive";
    check(ProxyConfig { max_connections: 0, ..ProxyConfig::default() }, positive);
    for zero in [
        ProxyConfig { header_read_timeout: Duration::ZERO, ..ProxyConfig::default() },
        ProxyConfig { body_read_timeout: Duration::ZERO, ..ProxyConfig::default() },
        ProxyConfig { idle_timeout: Duration::ZERO, ..ProxyConfig::default() },
        ProxyConfig { push_close_timeout: Duration::ZERO, ..ProxyConfig::default() },
        ProxyConfig {
            follow: apiproxy::FollowConfig { sweep_interval: Duration::ZERO, ..Default::default() },
            ..ProxyConfig::default()
        },
    ] {
        check(zero, "every timeout must be positive");
    }
    check(
        ProxyConfig {
            follow: apiproxy::FollowConfig {
                sweep_interval: Duration::from_millis(100),
                round_gap: Duration::from_millis(101),
                ..Default::default()
            },
            ..ProxyConfig::default()
        },
        "the follower's round gap must not exceed its sweep interval",
    );
    check(
        ProxyConfig { max_incoming_message_bytes: 124, ..ProxyConfig::default() },
        "max_incoming_message_bytes must be at least 125 (a close frame), got 124",
    );
    let positive = "history_page_bytes and history_inflight_bytes must be positive";
    check(ProxyConfig { history_page_bytes: 0, ..ProxyConfig::default() }, positive);
    check(ProxyConfig { history_inflight_bytes: 0, ..ProxyConfig::default() }, positive);
    check(ProxyConfig { history_wait: Duration::ZERO, ..ProxyConfig::default() }, "every timeout must be positive");
    let bound = session_core::MAX_EVENT_BYTES;
    assert_eq!(ProxyConfig::default().max_event_bytes, bound, "the default is the session's own bound");
    for refused in [0, bound + 1] {
        check(
            ProxyConfig { max_event_bytes: refused, ..ProxyConfig::default() },
            &format!("max_event_bytes must be from 1 to {bound}, got {refused}"),
        );
    }
}

/// The gateway's resident memory, in KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|line| line.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// An idle WebSocket downlink costs the gateway a few KiB: its read buffer holds what a client
/// may send (control frames and messages of `max_incoming_message_bytes`), not the 128 KiB
/// WebSocket libraries allocate and zero before every read by default. 200 downlinks, each read
/// from (a ping answered), grow the gateway process by less than 48 KiB each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_downlink_holds_no_large_read_buffer() {
    const DOWNLINKS: u64 = 200;
    let dir = tempfile::tempdir().unwrap();
    let gateway = crate::support::Gateway::start(dir.path().to_str().unwrap());
    // The first connections warm the runtime, the allocator's arenas and the pump's code.
    let mut warm = Vec::new();
    for _ in 0..8 {
        let mut ws = crate::support::Ws::connect(gateway.addr(), "/api/events.host", None).await;
        ws.ping_pong().await;
        warm.push(ws);
    }
    let before = rss_kib(gateway.pid());
    let mut downlinks = Vec::new();
    for _ in 0..DOWNLINKS {
        let mut ws = crate::support::Ws::connect(gateway.addr(), "/api/events.host", None).await;
        ws.ping_pong().await;
        downlinks.push(ws);
    }
    let after = rss_kib(gateway.pid());
    let per_downlink = after.saturating_sub(before) / DOWNLINKS;
    assert!(per_downlink < 48, "each idle downlink took {per_downlink} KiB ({before} KiB before, {after} KiB after)");
    // Every downlink still answers.
    for ws in downlinks.iter_mut().chain(&mut warm) {
        ws.ping_pong().await;
    }
}
