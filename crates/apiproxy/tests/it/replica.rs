//! The checker of what a downlink's client holds, in the manner of Jepsen: per session, the
//! frames a client received, each `session/subscribed` baseline applied (drop what it holds past
//! `lastSeq`), must continue without a gap or a duplicate and end equal to the stored log.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;
use tokio::sync::mpsc;

use crate::support::{WAIT, Ws};

/// Where a client's frames come from: a WebSocket read in place, or one read by a task of its
/// own ([`Tap`]).
pub(crate) trait Downlink {
    /// The next frame's payload, or `None` once the stream ended; a frame that does not come in
    /// time fails the test.
    async fn next_frame(&mut self) -> Option<Value>;
}

impl Downlink for Ws {
    async fn next_frame(&mut self) -> Option<Value> {
        self.next().await
    }
}

/// A downlink read by a task of its own from the moment it is tapped, so the gateway never finds
/// the client behind (its queue of 1024 frames never fills) while the test does something else.
pub(crate) struct Tap {
    frames: mpsc::UnboundedReceiver<Value>,
}

impl Tap {
    pub(crate) fn new(mut ws: Ws) -> Tap {
        let (sender, frames) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            // Reads without a bound of its own: the reader of `frames` bounds each wait.
            while let Some(Ok(message)) = futures::StreamExt::next(&mut ws.socket).await {
                let Some(frame) = Ws::payload(message) else { continue };
                if sender.send(frame).is_err() {
                    return;
                }
            }
        });
        Tap { frames }
    }
}

impl Downlink for Tap {
    async fn next_frame(&mut self) -> Option<Value> {
        tokio::time::timeout(WAIT, self.frames.recv()).await.expect("a frame or the stream's end in time")
    }
}

/// What a client holds of `id` after applying every frame it got: each baseline drops what it
/// held past `lastSeq`; each event must continue what it holds, exactly once.
#[derive(Debug, Default)]
pub(crate) struct Replica {
    pub(crate) baselines: Vec<i64>,
    pub(crate) events: Vec<(u64, String)>,
}

impl Replica {
    pub(crate) fn apply(&mut self, id: &str, frame: &Value) {
        if frame["sessionId"] != id {
            return;
        }
        match frame["type"].as_str() {
            Some("session/subscribed") => {
                let last_seq = frame["lastSeq"].as_i64().unwrap();
                self.baselines.push(last_seq);
                self.events.retain(|(seq, _)| (*seq as i64) <= last_seq);
            }
            Some("session/event") => {
                let seq = frame["event"]["seq"].as_u64().unwrap();
                let kind = frame["event"]["type"].as_str().unwrap().to_owned();
                let expected = self
                    .events
                    .last()
                    .map_or(self.baselines.last().map_or(0, |base| base + 1), |(last, _)| *last as i64 + 1);
                assert_eq!(seq as i64, expected, "a gap or a duplicate at seq {seq}: {frame}");
                self.events.push((seq, kind));
            }
            _ => {}
        }
    }

    /// Whether this replica holds `want` past its latest baseline (and has one).
    pub(crate) fn holds(&self, want: &[(u64, String)]) -> bool {
        let Some(base) = self.baselines.last() else { return false };
        let from = usize::try_from(base + 1).unwrap_or(0).min(want.len());
        let held: Vec<_> = self.events.iter().filter(|(seq, _)| *seq as usize >= from).cloned().collect();
        held.as_slice() == &want[from..]
    }
}

/// Reads `downlink` until the replica of `id` holds `want` past its latest baseline.
pub(crate) async fn converge(downlink: &mut impl Downlink, id: &str, replica: &mut Replica, want: &[(u64, String)]) {
    while !replica.holds(want) {
        let frame = downlink.next_frame().await.expect("the downlink stays open");
        replica.apply(id, &frame);
    }
}

/// One client's replicas of every session it sees, fed from one downlink.
#[derive(Debug, Default)]
pub(crate) struct Replicas {
    pub(crate) sessions: BTreeMap<String, Replica>,
}

impl Replicas {
    fn apply(&mut self, frame: &Value) {
        if let Some(id) = frame["sessionId"].as_str() {
            self.sessions.entry(id.to_owned()).or_default().apply(id, frame);
        }
    }

    /// Reads `downlink` until every session of `want` is held as stored, and no other session
    /// was seen.
    pub(crate) async fn converge(&mut self, downlink: &mut impl Downlink, want: &BTreeMap<String, Vec<(u64, String)>>) {
        let done = |replicas: &Replicas| {
            want.iter().all(|(id, log)| replicas.sessions.get(id).is_some_and(|replica| replica.holds(log)))
        };
        while !done(self) {
            let frame = downlink.next_frame().await.expect("the downlink stays open");
            self.apply(&frame);
        }
        let seen: BTreeSet<&String> = self.sessions.keys().collect();
        let wanted: BTreeSet<&String> = want.keys().collect();
        assert_eq!(seen, wanted, "a client saw only the sessions there are");
    }
}
