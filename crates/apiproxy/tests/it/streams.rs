//! The WebSocket downlinks: atomic baseline, event and projection frames, the host stream, the
//! downlink-only rule and the bound on incoming messages, and a slow client being dropped with
//! `stream/error` (and reset when it does not read even that).

use std::{sync::Arc, time::Duration};

use apiproxy::ProxyConfig;
use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};
use session_core::{JsonData, SessionId};

use tokio_tungstenite::tungstenite::{
    self, Message,
    protocol::frame::{
        Frame,
        coding::{Data, OpCode},
    },
};

use crate::support::{Server, WAIT, turn};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn baseline_and_live_frames_have_no_gap_or_duplicate() {
    let server = Server::start().await;
    server.ok(None, "session.create", json!({"sessionId": "busy"})).await;
    let session = server.store().get(&SessionId::from("busy")).unwrap();
    // Append continuously while connections come and go.
    let appender = {
        let session = Arc::clone(&session);
        tokio::task::spawn_blocking(move || {
            for idx in 0..400u64 {
                let data = JsonData::from_value(&json!({"title": format!("t{idx}")})).unwrap();
                session.append_data("session/title", data, None).unwrap();
            }
        })
    };
    for _ in 0..5 {
        let mut mux = server.ws("/api/events.mux", None).await;
        let baseline = mux.next().await.unwrap();
        assert_eq!(baseline["type"], "session/subscribed");
        let mut expected = baseline["lastSeq"].as_i64().unwrap() + 1;
        if expected >= 400 {
            continue;
        }
        for _ in 0..20_000 {
            let frame = mux.next().await.unwrap();
            if frame["type"] == "session/event" {
                assert_eq!(frame["event"]["seq"], expected, "frames continue the baseline exactly");
                expected += 1;
                if expected == 400 {
                    break;
                }
            }
        }
        assert_eq!(expected, 400);
    }
    appender.await.unwrap();
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn projection_frames_carry_the_causing_seq_and_explicit_nulls() {
    let server = Server::start().await;
    server.ok(None, "session.create", json!({"sessionId": "p"})).await;
    let mut mux = server.ws("/api/events.mux", None).await;
    assert_eq!(mux.next().await.unwrap(), json!({"type": "session/subscribed", "sessionId": "p", "lastSeq": -1}));
    let descriptor = json!({"version": 2, "mode": "continuable", "provider": "x", "label": "was valid"});
    server
        .ok(
            None,
            "session.append",
            json!({"sessionId": "p", "events": [
                {"type": "turn/start", "data": {"turn": 1}},
                {"type": "subagent/descriptor", "data": descriptor},
                {"type": "subagent/descriptor", "data": {"version": 2, "mode": "continuable", "provider": 7}},
            ]}),
        )
        .await;
    let frames = mux.until(|frame| frame["type"] == "session/projection" && frame["value"].is_null()).await;
    let projection = |key: &str, seq: u64| {
        frames
            .iter()
            .find(|frame| frame["type"] == "session/projection" && frame["key"] == key && frame["seq"] == seq)
            .cloned()
    };
    assert_eq!(projection("sessionListMetadata", 0).unwrap()["value"], json!({"blank": false, "lastPromptAt": null}));
    assert_eq!(
        projection("subagent", 1).unwrap()["value"],
        json!({"mode": "continuable", "label": "was valid", "seq": 1})
    );
    let reset = projection("subagent", 2).unwrap();
    assert!(reset.as_object().unwrap().contains_key("value") && reset["value"].is_null(), "{reset}");
    // Event frames carry the event as the history does.
    let event = frames.iter().find(|frame| frame["type"] == "session/event").unwrap();
    assert_eq!(
        event["event"],
        json!({"type": "turn/start", "seq": 0, "time": 1_700_000_000_000i64, "data": {"turn": 1}})
    );
    // The tail block agrees with the last frames.
    let page = server.ok(None, "session.history", json!({"sessionId": "p"})).await;
    assert_eq!(page["projections"]["asOfSeq"], 2);
    assert_eq!(page["projections"]["values"]["subagent"], Value::Null);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_stream_lifecycle() {
    let server = Server::start().await;
    let mut host = server.ws("/api/events.host", None).await;
    server.ok(None, "session.create", json!({"sessionId": "h", "cwd": "/w"})).await;
    server.ok(None, "session.append", json!({"sessionId": "h", "events": turn(1)})).await;
    server.ok(None, "session.release", json!({"sessionId": "h"})).await;
    let frames = host.until(|frame| frame["type"] == "host/session-removed").await;
    assert_eq!(
        frames,
        vec![
            json!({"type": "host/session-added", "sessionId": "h", "blank": true, "cwd": "/w"}),
            json!({"type": "host/session-status", "sessionId": "h", "running": true}),
            json!({"type": "host/session-status", "sessionId": "h", "running": false}),
            json!({"type": "host/session-removed", "sessionId": "h"}),
        ]
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn downlink_only() {
    let server = Server::start().await;
    let mut mux = server.ws("/api/events.mux", None).await;
    mux.send_text("hello").await;
    let closed = tokio::time::timeout(crate::support::WAIT, async {
        loop {
            match mux.socket.next().await {
                Some(Ok(tokio_tungstenite::tungstenite::Message::Close(frame))) => return frame,
                Some(Ok(_)) => {}
                _ => return None,
            }
        }
    })
    .await
    .unwrap()
    .expect("a close frame");
    assert_eq!(u16::from(closed.code), 1008);
    assert_eq!(closed.reason.as_str(), "downlink only");
    assert_eq!(server.ok(None, "host.describe", json!({})).await["attachedSessions"], 0);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_client_gets_stream_error_and_is_closed() {
    // The client reads only after the whole flood, so its goodbye may take as long as any wait here.
    let config = ProxyConfig { push_queue_frames: 8, push_close_timeout: WAIT, ..ProxyConfig::default() };
    let server = Server::start_with(config).await;
    server.ok(None, "session.create", json!({"sessionId": "flood"})).await;
    let mut slow = server.ws("/api/events.mux", None).await;
    let session = server.store().get(&SessionId::from("flood")).unwrap();
    // Far more than the socket buffers plus the queue hold, appended while nobody reads.
    let big = "x".repeat(48 * 1024);
    let appender = tokio::task::spawn_blocking(move || {
        for _ in 0..600 {
            let data = JsonData::from_value(&json!({"title": big})).unwrap();
            session.append_data("session/title", data, None).unwrap();
        }
    });
    appender.await.unwrap();
    let mut last = None;
    for _ in 0..10_000 {
        match slow.next().await {
            Some(frame) => last = Some(frame),
            None => break,
        }
    }
    let last = last.expect("some frames arrived");
    assert_eq!(last["type"], "stream/error", "the last frame before the close");
    assert_eq!(last["error"]["code"], "internal");
    assert_eq!(last["error"]["details"], json!({}));
    // The server keeps serving, and the dropped connection is gone.
    assert_eq!(server.proxy.n_stream_connections(), 0);
    server.ok(None, "host.describe", json!({})).await;
    server.stop().await;
}

/// Appends `n` events of about 48 KiB to `id`: far more than socket buffers and a small queue hold.
async fn flood(server: &Server, id: &str, n: usize) {
    let session = server.store().get(&SessionId::from(id)).unwrap();
    let big = "x".repeat(48 * 1024);
    tokio::task::spawn_blocking(move || {
        for _ in 0..n {
            let data = JsonData::from_value(&json!({"title": big})).unwrap();
            session.append_data("session/title", data, None).unwrap();
        }
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_never_reads_is_reset_within_the_close_timeout() {
    // A send may block for an hour: only the close bound can end this connection within the test.
    let config = ProxyConfig {
        push_queue_frames: 8,
        push_send_timeout: Duration::from_secs(3600),
        push_close_timeout: Duration::from_millis(200),
        ..ProxyConfig::default()
    };
    let server = Server::start_with(config).await;
    server.ok(None, "session.create", json!({"sessionId": "flood"})).await;
    let mut never_reads = server.ws("/api/events.mux", None).await;
    let mut open = server.proxy.watch_connections();
    flood(&server, "flood", 600).await;
    // The queue overflowed, `stream/error` could not even be written, and the socket is gone: the
    // gateway holds no connection, and no send queue, for this client any more.
    tokio::time::timeout(WAIT, open.wait_for(|n| *n == 0)).await.expect("the socket closes").unwrap();
    assert_eq!(server.proxy.n_stream_connections(), 0);
    // The socket was reset, not closed behind the megabytes still queued for the client: after
    // what reached the client's own buffer, its stream ends in a reset.
    let end = loop {
        match tokio::time::timeout(WAIT, never_reads.socket.next()).await.expect("the stream ends") {
            Some(Ok(_)) => {}
            Some(Err(error)) => break Some(error),
            None => break None,
        }
    };
    assert!(
        matches!(&end, Some(tungstenite::Error::Io(error)) if error.kind() == std::io::ErrorKind::ConnectionReset),
        "{end:?}"
    );
    server.ok(None, "host.describe", json!({})).await;
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_incoming_message_closes_that_connection_only() {
    let server = Server::start().await;
    let limit = server.proxy.config().max_incoming_message_bytes;
    let mut oversized = server.ws("/api/events.mux", None).await;
    let mut other = server.ws("/api/events.mux", None).await;
    // An unfinished fragmented message: every frame is small, together they pass the bound, and
    // the final frame never comes. Sends after the server has closed may fail; that is fine.
    let fragment = vec![b'x'; 1024];
    let first = Frame::message(fragment.clone(), OpCode::Data(Data::Text), false);
    let _ = oversized.socket.send(Message::Frame(first)).await;
    for _ in 0..limit / fragment.len() + 1 {
        let more = Frame::message(fragment.clone(), OpCode::Data(Data::Continue), false);
        let _ = oversized.socket.send(Message::Frame(more)).await;
    }
    assert_eq!(oversized.next().await, None, "the server closes this connection");
    // The other connection still streams.
    server.ok(None, "session.create", json!({"sessionId": "after"})).await;
    assert_eq!(other.next().await.unwrap(), json!({"type": "session/subscribed", "sessionId": "after", "lastSeq": -1}));
    server.stop().await;
}
