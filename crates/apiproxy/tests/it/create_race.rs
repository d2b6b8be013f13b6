//! Two gateway processes over one shared store (a SQLite file, a PostgreSQL schema) both create
//! the same new id before either writes. The first write wins; the other copy's first write
//! meets the winner's log and is fenced exactly as after any later write: `agent-busy` on append
//! (durable or not), flush and release, the release names the seqs not stored, and `session.create`
//! resumes it from the store. No answer is `internal`, and every acknowledged turn is stored.

use std::{
    fs,
    os::unix::fs::PermissionsExt,
    process::{Command, Output},
};

use serde_json::{Value, json};
use session_persistence_postgres::testing::ScratchSchema;

use crate::support::{Gateway, turn};

const ID: &str = "rc";

fn apiproxy(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_apiproxy")).args(args).env_remove("APIPROXY_LOG").output().unwrap()
}

/// The turns both gateways write, numbered in the order they were tried, and what came of each.
#[derive(Default)]
struct Turns {
    n_tried: u64,
    acked: Vec<u64>,
    refused: Vec<u64>,
}

impl Turns {
    /// A durable append of the next turn through `gateway`: its answer, recorded.
    fn append(&mut self, gateway: &Gateway, durable: bool) -> Value {
        self.n_tried += 1;
        let n = self.n_tried;
        let result = gateway.call("session.append", json!({"sessionId": ID, "durable": durable, "events": turn(n)}));
        if result["ok"] == true {
            self.acked.push(n);
        } else {
            assert_eq!(result["error"]["code"], "agent-busy", "turn {n}: {result}");
            self.refused.push(n);
        }
        result
    }
}

/// `agent-busy` from `method`, saying another gateway or host wrote the session.
fn assert_fenced(gateway: &Gateway, method: &str, payload: Value) -> Value {
    let result = gateway.call(method, payload);
    assert_eq!(result["error"]["code"], "agent-busy", "{method}: {result}");
    let reason = result["error"]["details"]["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("another gateway or host"), "{method}: {result}");
    result
}

/// The fenced copy on `loser` after `winner` wrote: every write is refused, the release says
/// what was not stored, and a create resumes it from the store, writable again.
fn fenced_then_resumed(loser: &Gateway, turns: &mut Turns) {
    let busy = turns.append(loser, true);
    assert_eq!(busy["error"]["code"], "agent-busy", "the loser's durable append: {busy}");
    // The fence is recorded: a non-durable append is refused as well, and so is a flush.
    let refused = turns.append(loser, false);
    assert_eq!(refused["error"]["code"], "agent-busy", "a fenced copy acknowledges no append: {refused}");
    assert_fenced(loser, "session.flush", json!({"sessionId": ID}));
    let released = loser.call("session.release", json!({"sessionId": ID}));
    if released["ok"] == true {
        // The gateway's follower found the store past the copy (a poll of the shared file, or a
        // notification) before the appends came: the copy was fenced while idle, the appends were
        // refused before it took them, and it held nothing unstored, so it is released plainly.
        assert_eq!(released["value"]["released"], true, "{released}");
    } else {
        assert_eq!(released["error"]["code"], "agent-busy", "session.release: {released}");
        assert!(released["error"]["message"].as_str().unwrap().contains("was released"), "{released}");
        let reason = released["error"]["details"]["reason"].as_str().unwrap();
        assert!(reason.contains("were not stored"), "the release names the seqs not stored: {released}");
    }
    let created = loser.ok("session.create", json!({"sessionId": ID, "cwd": "/srv/work"}));
    assert_eq!(created["sessionId"], ID);
    let resumed = turns.append(loser, true);
    assert_eq!(resumed["ok"], true, "resumed from the store, the copy writes again: {resumed}");
}

/// Both gateways create `rc`; `first` (index into the two) writes first; then they take turns
/// writing, each meeting the other's writes as the fence once.
fn race(store: &str, first: usize) {
    let gateways = [Gateway::start(store), Gateway::start(store)];
    let (winner, loser) = (&gateways[first], &gateways[1 - first]);
    // The one that writes second created first: neither saw the other's session.
    for gateway in [loser, winner] {
        let created = gateway.ok("session.create", json!({"sessionId": ID, "cwd": "/srv/work"}));
        assert_eq!(created["sessionId"], ID);
    }
    let mut turns = Turns::default();
    let won = turns.append(winner, true);
    assert_eq!(won["ok"], true, "the first write wins: {won}");
    assert_eq!(won["value"]["durableSeq"], 5, "{won}");
    fenced_then_resumed(loser, &mut turns);
    // Now the first writer's copy is behind the stored log: the same fence, the same way out.
    fenced_then_resumed(winner, &mut turns);
    let again = turns.append(winner, true);
    assert_eq!(again["ok"], true, "{again}");
    for gateway in &gateways {
        gateway.call("session.release", json!({"sessionId": ID}));
    }
    drop(gateways);

    let output = apiproxy(&["sessions", "show", ID, "--json", "--store", store]);
    assert!(output.status.success(), "{output:?}");
    let shown: Value = serde_json::from_slice(&output.stdout).unwrap();
    let events = shown["events"].as_array().unwrap();
    for (idx, event) in events.iter().enumerate() {
        assert_eq!(event["seq"], idx as u64, "no gap, no interleaving: {shown}");
    }
    let stored: Vec<u64> = events
        .iter()
        .filter(|event| event["type"] == "turn/start")
        .map(|event| event["data"]["turn"].as_u64().unwrap())
        .collect();
    assert_eq!(stored, turns.acked, "every acknowledged turn is stored, once, in order, and nothing refused");
    assert_eq!(turns.refused.len(), 4, "each copy was fenced once, for a durable and a non-durable append");
    let output = apiproxy(&["verify", "--store", store]);
    assert_eq!(output.status.code(), Some(0), "{}", String::from_utf8_lossy(&output.stdout));
}

/// A fresh SQLite store in a private directory, as its path rules want.
fn sqlite_store(dir: &std::path::Path) -> String {
    let private = dir.join("private");
    fs::create_dir(&private).unwrap();
    fs::set_permissions(&private, fs::Permissions::from_mode(0o700)).unwrap();
    format!("sqlite:{}", private.join("sessions.db").display())
}

#[test]
fn two_gateways_over_one_sqlite_file_race_to_create_one_id() {
    for first in [0, 1] {
        let dir = tempfile::tempdir().unwrap();
        race(&sqlite_store(dir.path()), first);
    }
}

#[test]
fn two_gateways_over_one_postgres_schema_race_to_create_one_id() {
    for first in [0, 1] {
        let Some(schema) = ScratchSchema::new() else { return };
        race(schema.url(), first);
    }
}
