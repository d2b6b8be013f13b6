//! Time never panics: a clock before 1970 or far in the future still gets every request
//! answered, the `Date` header clamped to what HTTP can name, and, through a `BoundedClock`,
//! stored times a reader accepts.

use std::sync::Arc;

use hyper::StatusCode;
use serde_json::json;
use session_core::{BoundedClock, Clock, MAX_CLOCK_MS, ManualClock};

use crate::support::{Server, turn};

const JSON: (&str, &str) = ("content-type", "application/json");

async fn date_of(server: &Server) -> String {
    let describe = json!({"type": "client-request", "rpcId": "r", "method": "host.describe", "payload": {}});
    let (status, headers, body) = server.raw("POST", "/api/host.describe", &[JSON], describe.to_string()).await;
    assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&body));
    let dates: Vec<_> = headers.get_all("date").iter().map(|value| value.to_str().unwrap().to_owned()).collect();
    assert_eq!(dates.len(), 1, "{dates:?}");
    dates.into_iter().next().unwrap()
}

/// An embedder's clock that reads before 1970 (or past 9999) as it is: the `Date` header comes
/// from it, clamped, and every connection is answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_date_header_comes_from_the_clock_clamped() {
    let clock = Arc::new(ManualClock::new(-86_400_000));
    let server = Server::start_with_clock(Default::default(), false, Arc::clone(&clock) as Arc<dyn Clock>).await;
    assert_eq!(date_of(&server).await, "Thu, 01 Jan 1970 00:00:00 GMT");
    clock.set(i64::MIN);
    assert_eq!(date_of(&server).await, "Thu, 01 Jan 1970 00:00:00 GMT");
    clock.set(i64::MAX);
    assert_eq!(date_of(&server).await, "Fri, 31 Dec 9999 23:59:59 GMT");
    clock.set(784_111_777_000);
    assert_eq!(date_of(&server).await, "Sun, 06 Nov 1994 08:49:37 GMT");
    // The WebSocket upgrade is answered too (`ws` fails the test without a 101).
    let ws = server.ws("/api/events.mux", None).await;
    drop(ws);
    server.stop().await;
}

/// A bounded clock before 1970 and past the safe integers stamps `createdAt` 0 and times a reader
/// accepts; the session reads back, cold, after release.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bounded_clock_out_of_range_stores_readable_times() {
    let raw = Arc::new(ManualClock::new(-86_400_000));
    let bounded = Arc::new(BoundedClock::new(Arc::clone(&raw) as Arc<dyn Clock>));
    let server = Server::start_with_clock(Default::default(), false, bounded).await;
    assert_eq!(date_of(&server).await, "Thu, 01 Jan 1970 00:00:00 GMT");
    server.ok(None, "session.create", json!({"sessionId": "s"})).await;
    let live = server.store().list();
    assert_eq!(live.iter().map(|session| session.header().created_at).collect::<Vec<_>>(), [0]);
    server.ok(None, "session.append", json!({"sessionId": "s", "events": turn(1)})).await;
    raw.set(i64::MAX);
    server.ok(None, "session.append", json!({"sessionId": "s", "events": turn(2)})).await;
    server.ok(None, "session.release", json!({"sessionId": "s"})).await;
    assert!(server.store().list().is_empty(), "the session is cold");
    let history = server.ok(None, "session.history", json!({"sessionId": "s"})).await;
    let times: Vec<i64> =
        history["events"].as_array().unwrap().iter().map(|entry| entry["event"]["time"].as_i64().unwrap()).collect();
    let half = times.len() / 2;
    assert_eq!(times.len(), 12, "two turns of six events: {history}");
    assert!(times[..half].iter().all(|time| *time == 0), "{times:?}");
    assert!(times[half..].iter().all(|time| *time == MAX_CLOCK_MS), "{times:?}");
    server.stop().await;
}
