//! What a caller can learn about ids it does not own: nothing. For every method, another owner's
//! live session, cold session and subagent child answer byte for byte (apart from the id itself)
//! as an unknown id does; where an unknown id would be minted (`session.create`,
//! `subagent.spawn`), every foreign kind answers alike, with nothing about the session in it.
//! Also: no live session can shadow a stored one, and durable appends.

use serde_json::{Value, json};

use crate::support::{Server, session_with_turns, turn};

const ALICE: Option<&str> = Some("alice");
const BOB: Option<&str> = Some("bob");

/// Alice's sessions of each kind bob must not learn anything about.
const FOREIGN: [&str; 3] = ["a-live", "a-cold", "a-kid"];
const UNKNOWN: &str = "zz-unknown";
const PLACEHOLDER: &str = "{ID}";

/// Alice's live session, cold session, and a (cold) subagent child of a live parent; bob's own
/// live parent.
async fn world() -> Server {
    let server = Server::start().await;
    session_with_turns(&server, ALICE, "a-live", 1).await;
    session_with_turns(&server, ALICE, "a-cold", 1).await;
    server.ok(ALICE, "session.release", json!({"sessionId": "a-cold"})).await;
    session_with_turns(&server, ALICE, "a-par", 1).await;
    let spawn = json!({"parentSessionId": "a-par", "childSessionId": "a-kid", "mode": "continuable", "label": "kid"});
    server.ok(ALICE, "subagent.spawn", spawn).await;
    server.ok(ALICE, "session.release", json!({"sessionId": "a-kid", "parentSessionId": "a-par"})).await;
    session_with_turns(&server, BOB, "b-par", 1).await;
    server
}

/// `template` with every `{ID}` replaced by `id`.
fn with_id(template: &Value, id: &str) -> Value {
    serde_json::from_str(&template.to_string().replace(PLACEHOLDER, id)).unwrap()
}

/// The whole answer envelope as bob gets it, with `id` written back as the placeholder.
async fn answer(server: &Server, method: &str, template: &Value, id: &str) -> String {
    let envelope = server.envelope(BOB, method, with_id(template, id)).await;
    envelope.to_string().replace(id, PLACEHOLDER)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_owners_ids_answer_like_unknown_ones_on_every_method() {
    let server = world().await;
    let addressed = [
        ("session.history", json!({"sessionId": PLACEHOLDER})),
        ("session.fork", json!({"sessionId": PLACEHOLDER})),
        ("session.append", json!({"sessionId": PLACEHOLDER, "events": turn(2)})),
        ("session.append", json!({"sessionId": PLACEHOLDER, "events": turn(2), "durable": true})),
        ("session.release", json!({"sessionId": PLACEHOLDER})),
        ("session.flush", json!({"sessionId": PLACEHOLDER})),
        ("subagent.list", json!({"parentSessionId": PLACEHOLDER})),
        ("subagent.history", json!({"parentSessionId": PLACEHOLDER, "childSessionId": "x-kid", "mode": "continuable"})),
        ("subagent.history", json!({"parentSessionId": "a-par", "childSessionId": PLACEHOLDER, "mode": "continuable"})),
        ("subagent.spawn", json!({"parentSessionId": PLACEHOLDER, "mode": "continuable", "label": "x"})),
    ];
    for (method, template) in &addressed {
        let unknown = answer(&server, method, template, UNKNOWN).await;
        for id in FOREIGN {
            assert_eq!(answer(&server, method, template, id).await, unknown, "{method} {template} with {id}");
        }
    }

    // Minting: an unknown id would be taken, so the answer for a foreign one cannot be the
    // unknown one's; it is the same for every foreign kind and says nothing about the session.
    let minting = [
        ("session.create", json!({"sessionId": PLACEHOLDER})),
        ("session.create", json!({"sessionId": PLACEHOLDER, "cwd": "/elsewhere"})),
        (
            "subagent.spawn",
            json!({"parentSessionId": "b-par", "childSessionId": PLACEHOLDER, "mode": "continuable", "label": "x"}),
        ),
        ("subagent.spawn", json!({"parentSessionId": "b-par", "childSessionId": PLACEHOLDER, "mode": "one-shot"})),
    ];
    for (method, template) in &minting {
        let answers: Vec<String> =
            futures::future::join_all(FOREIGN.map(|id| answer(&server, method, template, id))).await;
        assert!(answers.iter().all(|answer| answer == &answers[0]), "{method}: {answers:?}");
        assert!(!answers[0].contains("existingCwd"), "no cwd of the session: {}", answers[0]);
        assert!(!answers[0].contains("alice"), "{}", answers[0]);
    }
    // Nothing bob did touched alice's sessions.
    for id in FOREIGN {
        server.ok(ALICE, "session.history", json!({"sessionId": id})).await;
    }
    assert!(server.store().get(&"a-cold".into()).is_none(), "the cold session stayed cold");
    assert!(server.store().get(&"a-kid".into()).is_none(), "the cold child stayed cold");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spawn_over_a_stored_id_is_refused_and_changes_nothing() {
    let server = world().await;
    let before = server.ok(ALICE, "session.history", json!({"sessionId": "a-cold"})).await;
    for (caller, parent) in [(ALICE, "a-par"), (None, "a-par"), (BOB, "b-par")] {
        let spawn = json!({"parentSessionId": parent, "childSessionId": "a-cold", "mode": "continuable", "label": "x"});
        let error = server.err(caller, "subagent.spawn", spawn, "session-conflict").await;
        assert_eq!(error["details"]["sessionId"], "a-cold");
        // Only a caller that sees the stored session learns its cwd.
        assert_eq!(error["details"].get("existingCwd").is_some(), caller != BOB, "{error}");
        assert!(server.store().get(&"a-cold".into()).is_none(), "no live shadow of the stored session");
    }
    let after = server.ok(ALICE, "session.history", json!({"sessionId": "a-cold"})).await;
    assert_eq!(after, before);
    // The owner can still resume it.
    server.ok(ALICE, "session.create", json!({"sessionId": "a-cold"})).await;
    server.ok(ALICE, "session.append", json!({"sessionId": "a-cold", "events": turn(2)})).await;
    server.ok(ALICE, "session.release", json!({"sessionId": "a-cold"})).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn durable_appends_answer_with_the_durable_watermark() {
    let server = Server::start().await;
    server.ok(None, "session.create", json!({"sessionId": "d"})).await;
    let appended =
        server.ok(None, "session.append", json!({"sessionId": "d", "events": turn(1), "durable": true})).await;
    assert_eq!(appended, json!({"firstSeq": 0, "lastSeq": 5, "durableSeq": 5}));
    let appended = server.ok(None, "session.append", json!({"sessionId": "d", "events": turn(2)})).await;
    assert_eq!((&appended["firstSeq"], &appended["lastSeq"]), (&json!(6), &json!(11)));
    let durable = appended["durableSeq"].as_u64().unwrap();
    assert!((5..=11).contains(&durable), "{appended}");
    assert_eq!(server.ok(None, "session.flush", json!({"sessionId": "d"})).await, json!({"durableSeq": 11}));
    server.err(None, "session.flush", json!({"sessionId": "nope"}), "session-not-found").await;
}
