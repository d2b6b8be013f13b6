//! What one hostile client can take from the others: a WebSocket client that pings and never
//! reads is reset instead of piling up pong replies, and one owner cannot take every connection
//! slot (its share of the cap, `max_owner_connections`).

use std::{sync::Arc, time::Duration};

use apiproxy::{ApiProxy, ProxyConfig, ProxyParts, SessionStore};
use serde_json::json;
use session_core::ManualClock;
use session_projection::ProjectionRegistry;
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpSocket, TcpStream},
};

use crate::support::{Server, WAIT};

const LONG: Duration = Duration::from_secs(3600);

/// Pings the flood test may send before it gives up on the gateway pushing back: many times what
/// the socket buffers on both sides hold.
const MAX_PINGS: usize = 2_000_000;

/// One masked ping frame from a client, with the largest payload a control frame may carry (so
/// each pong owed is as large as a pong can be).
fn masked_ping() -> Vec<u8> {
    let mask = [0x11, 0x22, 0x33, 0x44];
    let mut frame = vec![0x89, 0x80 | 125];
    frame.extend_from_slice(&mask);
    frame.extend((0..125).map(|i| b'p' ^ mask[i % 4]));
    frame
}

/// Reads one response head (up to the blank line) a byte at a time, so nothing after it is read.
async fn read_head(stream: &mut TcpStream) -> String {
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        let byte = tokio::time::timeout(WAIT, stream.read_u8()).await.expect("a timely head").unwrap();
        head.push(byte);
    }
    String::from_utf8(head).unwrap()
}

/// Reads until the server closes the connection and returns what came.
async fn read_until_closed(stream: &mut TcpStream) -> String {
    let mut received = Vec::new();
    let read = tokio::time::timeout(WAIT, stream.read_to_end(&mut received)).await.expect("the server closes");
    assert!(read.is_ok(), "{read:?}");
    String::from_utf8_lossy(&received).into_owned()
}

fn upgrade_request(path: &str, owner: Option<&str>) -> String {
    let owner = owner.map_or_else(String::new, |owner| format!("x-dsh-owner: {owner}\r\n"));
    format!(
        "GET {path} HTTP/1.1\r\nhost: 127.0.0.1\r\nupgrade: websocket\r\nconnection: Upgrade\r\n\
         sec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\nsec-websocket-version: 13\r\n{owner}\r\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_pings_and_never_reads_is_reset() {
    // Only a blocked send (here: a pong) can end this connection within the test: the close
    // timeout is an hour, and nothing else is ever pushed to it.
    let config =
        ProxyConfig { push_send_timeout: Duration::from_secs(1), push_close_timeout: LONG, ..ProxyConfig::default() };
    let server = Server::start_with(config).await;
    let mut open = server.proxy.watch_connections();
    // Small buffers on the client's side, so the pongs it never reads push back early.
    let socket = TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    socket.set_send_buffer_size(4096).unwrap();
    let mut stream = socket.connect(server.addr).await.unwrap();
    stream.write_all(upgrade_request("/api/events.mux", None).as_bytes()).await.unwrap();
    let head = read_head(&mut stream).await;
    assert!(head.starts_with("HTTP/1.1 101 "), "{head}");

    let batch = masked_ping().repeat(1000);
    let flood = tokio::spawn(async move {
        let mut n_sent = 0;
        while n_sent < MAX_PINGS {
            if let Err(error) = stream.write_all(&batch).await {
                return Ok((n_sent, error));
            }
            n_sent += 1000;
        }
        Err(stream)
    });
    // The gateway stops reading pings while a pong cannot be written, and resets the client
    // once that pong has blocked for the send timeout.
    tokio::time::timeout(WAIT, open.wait_for(|n| *n == 0)).await.expect("the socket closes").unwrap();
    assert_eq!(server.proxy.n_stream_connections(), 0);
    let flooded = tokio::time::timeout(WAIT, flood).await.expect("the flood ends").unwrap();
    let (n_sent, error) = flooded.map_err(|_| "the gateway took every ping without pushing back").unwrap();
    assert!(n_sent < MAX_PINGS, "{n_sent}");
    let kinds = [std::io::ErrorKind::ConnectionReset, std::io::ErrorKind::BrokenPipe];
    assert!(kinds.contains(&error.kind()), "{error:?}");
    // Everyone else is still served.
    server.ok(None, "host.describe", json!({})).await;
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_owner_cannot_take_every_connection() {
    let config = ProxyConfig {
        max_connections: 16,
        max_owner_connections: Some(2),
        header_read_timeout: LONG,
        idle_timeout: LONG,
        ..ProxyConfig::default()
    };
    let server = Server::start_with(config).await;
    let mut open = server.proxy.watch_connections();
    let first = server.ws("/api/events.mux", Some("alice")).await;
    let _second = server.ws("/api/events.host", Some("alice")).await;
    // A third downlink of alice's is refused before the upgrade, saying which limit it hit.
    let mut third = TcpStream::connect(server.addr).await.unwrap();
    third.write_all(upgrade_request("/api/events.mux", Some("alice")).as_bytes()).await.unwrap();
    let answer = read_until_closed(&mut third).await;
    assert!(answer.starts_with("HTTP/1.1 429 "), "{answer}");
    assert!(answer.to_ascii_lowercase().contains("\r\nconnection: close\r\n"), "{answer}");
    assert!(answer.ends_with("\r\n\r\nowner connection limit reached"), "{answer}");
    // So is a request of hers on a new connection.
    let body = json!({"type": "client-request", "rpcId": "r", "method": "host.describe", "payload": {}}).to_string();
    let headers = [("content-type", "application/json"), ("x-dsh-owner", "alice")];
    let (status, _, refused) = server.raw("POST", "/api/host.describe", &headers, body).await;
    assert_eq!(status, 429);
    assert_eq!(refused, "owner connection limit reached");
    // Another owner, and the operator tier, are served as before.
    let mut bob = server.ws("/api/events.mux", Some("bob")).await;
    server.ok(Some("bob"), "session.create", json!({"sessionId": "b1"})).await;
    assert_eq!(bob.next().await.unwrap(), json!({"type": "session/subscribed", "sessionId": "b1", "lastSeq": -1}));
    server.ok(None, "host.describe", json!({})).await;
    // A place in alice's share frees when one of her connections closes. Three downlinks are
    // open once the request connections above have closed.
    tokio::time::timeout(WAIT, open.wait_for(|n| *n == 3)).await.expect("the requests' connections close").unwrap();
    drop(first);
    tokio::time::timeout(WAIT, open.wait_for(|n| *n == 2)).await.expect("the downlink closes").unwrap();
    // (`ws` fails the test unless the upgrade succeeds.)
    let _again = server.ws("/api/events.mux", Some("alice")).await;
    let (status, _, _) = server.raw("POST", "/api/host.describe", &headers, refused).await;
    assert_eq!(status, 429, "the share is full again");
    server.stop().await;
}

#[test]
fn the_owner_share_defaults_to_half_the_cap_and_is_checked() {
    let share = |max_connections, max_owner_connections| {
        ProxyConfig { max_connections, max_owner_connections, ..ProxyConfig::default() }.owner_connection_share()
    };
    assert_eq!(ProxyConfig::default().owner_connection_share(), 512);
    assert_eq!(share(10, None), 5);
    assert_eq!(share(3, None), 1);
    assert_eq!(share(1, None), 1);
    assert_eq!(share(10, Some(10)), 10);
    let refusal = |max_connections, max_owner_connections| {
        let store = Arc::new(SessionStore::new(Arc::new(ManualClock::new(0))));
        let parts = ProxyParts { store, persistence: None, registry: ProjectionRegistry::new(), cache: None };
        let config = ProxyConfig {
            default_cwd: "/w".to_owned(),
            max_connections,
            max_owner_connections,
            ..ProxyConfig::default()
        };
        ApiProxy::new(parts, config).map(|_| ()).err().map(|error| error.to_string())
    };
    assert_eq!(refusal(10, Some(10)), None);
    assert_eq!(refusal(10, Some(1)), None);
    for (max, share) in [(10, 0), (10, 11)] {
        let expected = format!(
            "invalid configuration: max_owner_connections must be from 1 to max_connections ({max}), got {share}"
        );
        assert_eq!(refusal(max, Some(share)), Some(expected));
    }
}
