//! `session.list`, `session.create` (adoption, resume, conflicts), `session.fork`, and the runtime
//! methods `session.append` and `session.release`.

use serde_json::{Value, json};

use crate::support::{Server, session_with_turns, turn, user_message};

fn row<'a>(list: &'a Value, id: &str) -> Option<&'a Value> {
    list["items"].as_array().unwrap().iter().find(|row| row["sessionId"] == id)
}

/// With a projection cache mounted, a released (cold) session's row carries the projections its
/// disposal checkpoint recorded, without reading its log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cold_rows_come_from_the_checkpoint_cache() {
    let server = Server::start_cached().await;
    server.ok(None, "session.create", json!({"sessionId": "s1", "cwd": "/w"})).await;
    server.ok(None, "session.append", json!({"sessionId": "s1", "events": turn(1)})).await;
    server.ok(None, "session.release", json!({"sessionId": "s1"})).await;
    let cache = server.cache.as_ref().expect("the server mounts a cache");
    cache.settle().await;
    let list = server.ok(None, "session.list", json!({})).await;
    let cold = row(&list, "s1").unwrap();
    assert_eq!((cold["running"].clone(), cold["blank"].clone()), (json!(false), json!(false)));
    assert_eq!(cold["projections"]["asOfSeq"], 5, "{cold}");
    assert_eq!(cold["projections"]["values"]["sessionListMetadata"]["blank"], json!(false), "{cold}");
    server.stop().await;
}

/// A small cold log that never started a turn is read and listed as blank; a bigger one is not
/// read (and listed as not blank), unless a checkpoint says otherwise.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn small_cold_logs_are_probed_for_blankness() {
    let server = Server::start().await;
    for id in ["quiet", "busy"] {
        server.ok(None, "session.create", json!({"sessionId": id, "cwd": "/w"})).await;
        let context = json!({"type": "request/context", "data": {"provider": "p", "model": "m"}});
        server.ok(None, "session.append", json!({"sessionId": id, "events": [context]})).await;
    }
    server.ok(None, "session.append", json!({"sessionId": "busy", "events": turn(1)})).await;
    for id in ["quiet", "busy"] {
        server.ok(None, "session.release", json!({"sessionId": id})).await;
    }
    let list = server.ok(None, "session.list", json!({})).await;
    assert_eq!(row(&list, "quiet").unwrap()["blank"], json!(true), "{list}");
    assert_eq!(row(&list, "busy").unwrap()["blank"], json!(false), "{list}");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_list_append_release_resume() {
    let server = Server::start().await;
    let minted = server.ok(None, "session.create", json!({})).await;
    let minted_id = minted["sessionId"].as_str().unwrap().to_owned();
    assert!(minted_id.starts_with("session-"), "{minted}");
    let created =
        server.ok(None, "session.create", json!({"sessionId": "s1", "cwd": "/w", "agentPreset": "coder"})).await;
    assert_eq!(created, json!({"sessionId": "s1", "agentPreset": "coder"}));

    let list = server.ok(None, "session.list", json!({"cursor": "ignored"})).await;
    let s1 = row(&list, "s1").unwrap();
    assert_eq!(
        (s1["blank"].clone(), s1["running"].clone(), s1["cwd"].clone()),
        (json!(true), json!(false), json!("/w"))
    );
    assert_eq!(s1["projections"]["values"]["sessionListMetadata"], json!({"blank": true, "lastPromptAt": null}));
    assert_eq!(row(&list, &minted_id).unwrap()["cwd"], "/srv/work");

    // Explicit ids are idempotent; a different cwd or preset conflicts.
    assert_eq!(server.ok(None, "session.create", json!({"sessionId": "s1"})).await["sessionId"], "s1");
    let conflict =
        server.err(None, "session.create", json!({"sessionId": "s1", "cwd": "/other"}), "session-conflict").await;
    assert_eq!(conflict["details"], json!({"sessionId": "s1", "requestedCwd": "/other", "existingCwd": "/w"}));
    let conflict = server
        .err(None, "session.create", json!({"sessionId": "s1", "agentPreset": "x"}), "agent-preset-conflict")
        .await;
    assert_eq!(conflict["details"], json!({"sessionId": "s1", "requestedPreset": "x", "existingPreset": "coder"}));
    let missing = server.err(None, "session.create", json!({"workspaceId": "w1"}), "workspace-not-found").await;
    assert_eq!(missing["details"], json!({"workspaceId": "w1"}));

    // Appends: seqs, expectedSeq, and running status inside a turn.
    let appended = server.ok(None, "session.append", json!({"sessionId": "s1", "events": turn(1)})).await;
    assert_eq!((&appended["firstSeq"], &appended["lastSeq"]), (&json!(0), &json!(5)));
    // Written behind: at most what was appended is durable yet.
    assert!(appended["durableSeq"].is_null() || appended["durableSeq"].as_u64() <= Some(5), "{appended}");
    let busy = server
        .err(None, "session.append", json!({"sessionId": "s1", "expectedSeq": 3, "events": turn(2)}), "agent-busy")
        .await;
    assert_eq!(busy["details"]["reason"], "expected next seq 3, but the session is at seq 6");
    let started = server
        .ok(
            None,
            "session.append",
            json!({"sessionId": "s1", "expectedSeq": 6, "events": [{"type": "turn/start", "data": {"turn": 2}}]}),
        )
        .await;
    assert_eq!(started["firstSeq"], 6);
    let list = server.ok(None, "session.list", json!({})).await;
    let s1 = row(&list, "s1").unwrap();
    assert_eq!((s1["blank"].clone(), s1["running"].clone()), (json!(false), json!(true)));
    assert_eq!(s1["updatedAt"], 1_700_000_000_000i64);
    assert_eq!(s1["projections"]["asOfSeq"], 6);

    // Rejected events: unknown vocabulary, a malformed message, a surface rule; nothing appended.
    let cases = [
        json!({"type": "made/up", "data": {}}),
        json!({"type": "mode/set", "data": {"mode": "plan"}}),
        json!({"type": "custom/unknown", "data": {}}),
        json!({"type": "user/message", "surfaceOp": "append", "data": {"message": 7}}),
        json!({"type": "user/message", "surfaceOp": "append", "data": {"role": "user"}}),
        json!({"type": "user/message", "data": {"id": "u", "role": "user", "source": {"kind": "user"}, "content": []}}),
    ];
    for event in cases {
        let error =
            server.err(None, "session.append", json!({"sessionId": "s1", "events": [event]}), "bad-request").await;
        assert_eq!(error["details"]["issues"][0]["path"], json!(["events", 0]), "{error}");
        assert!(error["message"].as_str().unwrap().contains("none were appended"), "{error}");
    }
    // Readers import the reference's legacy shapes, but nothing writes them any more; a malformed
    // one would make the stored log unreadable.
    let cases = [
        (
            json!({"type": "user/message", "surfaceOp": "append", "data": {"source": {"kind": "user"}, "content": []}}),
            "this user/message is in a legacy shape",
        ),
        (
            json!({"type": "turn/start", "data": {"turn": 3, "trigger": {"kind": "retry"}}}),
            "this turn/start is in a legacy shape",
        ),
        (
            json!({"type": "turn/end", "data": {"turn": 2, "reason": {"kind": "completed", "extra": true}}}),
            "session \"s1\" contains malformed pre-react-loop turn/end at seq 7",
        ),
    ];
    for (event, message) in cases {
        let error =
            server.err(None, "session.append", json!({"sessionId": "s1", "events": [event]}), "bad-request").await;
        assert!(error["message"].as_str().unwrap().contains(message), "{error}");
    }
    // A batch stops at its first bad event and says how far it got.
    let batch = json!([user_message("u2", "next"), {"type": "made/up", "data": {}}]);
    let error = server.err(None, "session.append", json!({"sessionId": "s1", "events": batch}), "bad-request").await;
    assert!(error["message"].as_str().unwrap().contains("events through seq 7 were appended"), "{error}");

    // Release: the session becomes cold; runtime methods no longer reach it.
    let released = server.ok(None, "session.release", json!({"sessionId": "s1"})).await;
    assert_eq!(released, json!({"released": true, "lastSeq": 7}));
    assert!(server.store().get(&"s1".into()).is_none());
    let gone =
        server.err(None, "session.append", json!({"sessionId": "s1", "events": turn(3)}), "session-not-found").await;
    assert_eq!(gone["message"], "session \"s1\" not found (not attached)");
    server.err(None, "session.release", json!({"sessionId": "s1"}), "session-not-found").await;
    let list = server.ok(None, "session.list", json!({})).await;
    let cold = row(&list, "s1").unwrap();
    assert_eq!((cold["running"].clone(), cold["blank"].clone()), (json!(false), json!(false)));
    assert!(cold.get("projections").is_none());

    // Resume by explicit create: the crash closers of the open turn are committed, then the
    // session is live again with a seed boundary.
    assert_eq!(server.ok(None, "session.create", json!({"sessionId": "s1", "cwd": "/w"})).await["sessionId"], "s1");
    let live = server.store().get(&"s1".into()).unwrap();
    let kinds: Vec<String> = live.events().iter().map(|event| event.kind.to_string()).collect();
    assert_eq!(&kinds[6..], ["turn/start", "user/message", "turn/end", "session/end-seed"]);
    server.ok(None, "session.append", json!({"sessionId": "s1", "events": turn(3)})).await;
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fork_boundaries() {
    let server = Server::start().await;
    session_with_turns(&server, None, "src", 2).await;
    server
        .ok(
            None,
            "session.append",
            json!({"sessionId": "src", "events": [
                {"type": "session/title", "data": {"title": "named"}},
                {"type": "turn/start", "data": {"turn": 3}},
            ]}),
        )
        .await;
    // Default: the last completed turn, extended through the out-of-band title.
    let fork = server.ok(None, "session.fork", json!({"sessionId": "src"})).await;
    let fork_id = fork["sessionId"].as_str().unwrap();
    let child = server.store().get(&fork_id.into()).unwrap();
    assert_eq!(child.header().parent_session.as_ref().unwrap().as_str(), "src");
    assert_eq!(child.header().seed_length, Some(13));
    assert!(child.header().origin.is_none());
    assert_eq!(child.events().last().unwrap().kind, "session/end-seed");
    // An anchor inside the first turn cuts at its end.
    let fork = server.ok(None, "session.fork", json!({"sessionId": "src", "atSeq": 2})).await;
    let child = server.store().get(&fork["sessionId"].as_str().unwrap().into()).unwrap();
    assert_eq!(child.header().seed_length, Some(6));
    // Past the end: the last completed turn.
    let fork = server.ok(None, "session.fork", json!({"sessionId": "src", "atSeq": 999})).await;
    let child = server.store().get(&fork["sessionId"].as_str().unwrap().into()).unwrap();
    assert_eq!(child.header().seed_length, Some(13));
    // Inside the open turn, or with no completed turn at all.
    let open = server.err(None, "session.fork", json!({"sessionId": "src", "atSeq": 13}), "fork-unavailable").await;
    assert_eq!(open["message"], "session \"src\" has not completed the turn containing event 13");
    assert_eq!(open["details"], json!({"sessionId": "src"}));
    server.ok(None, "session.create", json!({"sessionId": "empty"})).await;
    let none = server.err(None, "session.fork", json!({"sessionId": "empty"}), "fork-unavailable").await;
    assert_eq!(none["message"], "session \"empty\" has no completed turn to fork from");
    server.err(None, "session.fork", json!({"sessionId": "nope"}), "session-not-found").await;
    // A cold source forks too.
    server.ok(None, "session.release", json!({"sessionId": "src"})).await;
    let fork = server.ok(None, "session.fork", json!({"sessionId": "src", "atSeq": 0})).await;
    let child = server.store().get(&fork["sessionId"].as_str().unwrap().into()).unwrap();
    assert_eq!(child.header().seed_length, Some(6));
    server.stop().await;
}

/// The ids of a `session.list` answer, in order.
fn listed_ids(list: &Value) -> Vec<String> {
    list["items"].as_array().unwrap().iter().map(|item| item["sessionId"].as_str().unwrap().to_owned()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_list_pages_on_request_and_is_unchanged_without_a_limit() {
    let server = Server::start().await;
    for n in 0..7 {
        let id = format!("p{n}");
        server.ok(None, "session.create", json!({"sessionId": id, "cwd": "/w"})).await;
        server.ok(None, "session.append", json!({"sessionId": id, "events": turn(1)})).await;
        if n % 2 == 0 {
            // Stored and no longer live: listed from storage.
            server.ok(None, "session.release", json!({"sessionId": id})).await;
        }
    }
    let whole = server.ok(None, "session.list", json!({"cursor": "anything"})).await;
    assert!(whole.get("nextCursor").is_none(), "without a limit the answer is today's: {whole}");
    let mut expected = listed_ids(&whole);
    expected.sort();
    for limit in [1, 3, 7, 50] {
        let mut paged = Vec::new();
        let mut payload = json!({"limit": limit});
        loop {
            let page = server.ok(None, "session.list", payload.clone()).await;
            let ids = listed_ids(&page);
            assert!(ids.len() <= limit, "{page}");
            paged.extend(ids);
            match page["nextCursor"].as_str() {
                Some(cursor) => payload = json!({"limit": limit, "cursor": cursor}),
                None => {
                    assert_eq!(page["nextCursor"], Value::Null, "{page}");
                    break;
                }
            }
        }
        // One createdAt for all (a manual clock): the page order is by id.
        assert_eq!(paged, expected, "limit {limit}");
    }
    for bad in [
        json!({"limit": 0}),
        json!({"limit": 1001}),
        json!({"limit": 2, "cursor": "v1.zz"}),
        json!({"limit": 2, "cursor": 7}),
    ] {
        let error = server.err(None, "session.list", bad.clone(), "bad-request").await;
        assert!(error["message"].as_str().unwrap().contains("session.list"), "{bad}: {error}");
    }
}

/// Appends are ordered per session: while one session's append is held inside a store observer
/// (on the appending thread, with that session's append order held), another session's append
/// goes through. Under one gateway-wide lock the second append would wait for the first.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_sessions_blocked_append_does_not_block_anothers() {
    use std::sync::{Arc, Mutex, mpsc};

    use apiproxy::SessionStore;
    use session_core::StoreEvent;

    let server = Arc::new(Server::start().await);
    server.ok(None, "session.create", json!({"sessionId": "held"})).await;
    server.ok(None, "session.create", json!({"sessionId": "free"})).await;
    let (entered, mut on_enter) = tokio::sync::mpsc::unbounded_channel::<()>();
    let (release, on_release) = mpsc::channel::<()>();
    let on_release = Mutex::new(on_release);
    let store: &Arc<SessionStore> = server.store();
    let hook = store.add_observer(Arc::new(move |event: &StoreEvent<'_>| {
        if let StoreEvent::Event(session, event) = event
            && session.id().as_str() == "held"
            && event.kind == "turn/start"
        {
            let _ = entered.send(());
            // Blocks this appending thread until the test lets it go. The thread is a runtime
            // worker: `block_in_place` hands its queued tasks to another worker meanwhile.
            tokio::task::block_in_place(|| {
                let _ = on_release.lock().unwrap().recv();
            });
        }
        Ok(())
    }));
    let held = {
        let server = Arc::clone(&server);
        tokio::spawn(async move {
            server.ok(None, "session.append", json!({"sessionId": "held", "expectedSeq": 0, "events": turn(1)})).await
        })
    };
    on_enter.recv().await.expect("the held append reaches the hook");
    let free =
        server.ok(None, "session.append", json!({"sessionId": "free", "expectedSeq": 0, "events": turn(1)})).await;
    assert_eq!((free["firstSeq"].clone(), free["lastSeq"].clone()), (json!(0), json!(5)));
    release.send(()).unwrap();
    let held = held.await.unwrap();
    assert_eq!((held["firstSeq"].clone(), held["lastSeq"].clone()), (json!(0), json!(5)));
    server.store().remove_observer(hook);
}

/// `session.get` answers a session's row and header facts, live and cold, and another owner's
/// session is as unknown as a missing one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_get_describes_one_session_live_and_cold() {
    let server = Server::start().await;
    let id = session_with_turns(&server, Some("alice"), "described", 1).await;
    server
        .ok(
            Some("alice"),
            "subagent.spawn",
            json!({"parentSessionId": id, "mode": "continuable", "childSessionId": "kid", "label": "look around"}),
        )
        .await;

    let live = server.ok(Some("alice"), "session.get", json!({"sessionId": id})).await;
    assert_eq!(live["session"]["sessionId"], "described");
    assert_eq!(live["session"]["blank"], false);
    assert_eq!(live["header"]["cwd"], "/srv/work");
    assert_eq!(live["header"]["owner"], "alice");
    assert_eq!(live["header"]["delegationDepth"], 0);
    assert!(live["header"]["createdAt"].is_u64(), "{live}");

    let child = server.ok(Some("alice"), "session.get", json!({"sessionId": "kid"})).await;
    assert_eq!(child["header"]["parentSessionId"], "described");
    assert_eq!(child["header"]["origin"], "subagent");
    assert_eq!(child["header"]["delegationDepth"], 1);

    server.ok(Some("alice"), "session.release", json!({"sessionId": id})).await;
    let cold = server.ok(Some("alice"), "session.get", json!({"sessionId": id})).await;
    assert_eq!(cold["header"], live["header"], "the stored header holds the same facts");
    assert_eq!(cold["session"]["running"], false);

    for (owner, session) in [(Some("bob"), "described"), (Some("bob"), "kid"), (None, "nothing-here")] {
        server.err(owner, "session.get", json!({"sessionId": session}), "session-not-found").await;
    }
    let bad = server.err(None, "session.get", json!({}), "bad-request").await;
    assert_eq!(bad["message"], "invalid payload for session.get");
    server.stop().await;
}
