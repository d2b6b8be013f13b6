//! `subagent.spawn`, `subagent.list` and `subagent.history` (reference 04 §8, §12 "subagents"):
//! catalog rows in every state, activity from the live child, the ownership fence, the error
//! mapping, and frames for a live child as it appends.

use serde_json::{Value, json};

use crate::support::{Server, assistant_message, session_with_turns, turn};

const ALICE: Option<&str> = Some("alice");
const BOB: Option<&str> = Some("bob");

async fn spawn(server: &Server, parent: &str, child: &str, mode: &str) -> Value {
    let mut payload = json!({"parentSessionId": parent, "childSessionId": child, "mode": mode});
    if mode == "continuable" {
        payload["label"] = json!(format!("{child} label"));
    }
    server.ok(None, "subagent.spawn", payload).await
}

fn append_as_child(child: &str, parent: &str, events: Vec<Value>) -> Value {
    json!({"sessionId": child, "parentSessionId": parent, "events": events})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn catalog_rows_activity_and_history() {
    let server = Server::start().await;
    session_with_turns(&server, None, "p", 1).await;
    let spawned = spawn(&server, "p", "c-cont", "continuable").await;
    assert_eq!(spawned, json!({"childSessionId": "c-cont", "mode": "continuable"}));
    spawn(&server, "p", "c-one", "one-shot").await;
    spawn(&server, "p", "c-dead", "one-shot").await;

    // The continuable child's descriptor is in its seed; the one-shot children have none yet.
    let child = server.store().get(&"c-cont".into()).unwrap();
    let kinds: Vec<String> = child.events().iter().map(|event| event.kind.to_string()).collect();
    assert_eq!(kinds, ["subagent/descriptor", "session/end-seed"]);
    assert_eq!(child.header().delegation_depth, 1);
    assert!(child.header().is_subagent());

    // Live one-shot children without a descriptor are in their creation window: omitted.
    let catalog = server.ok(None, "subagent.list", json!({"parentSessionId": "p"})).await;
    assert_eq!(
        catalog,
        json!({"entries": [{"kind": "child", "id": "c-cont", "mode": "continuable", "label": "c-cont label",
            "activity": "inactive", "hasChildren": false, "activeMs": 0}], "parentAvailable": true})
    );

    // The fence: a generic append or release of a child must name its parent.
    let busy = server.err(None, "session.append", json!({"sessionId": "c-one", "events": turn(1)}), "agent-busy").await;
    assert_eq!(busy["message"], "session \"c-one\" is owned by subagent routing");
    assert_eq!(busy["details"], json!({"reason": "use subagent delivery for this child session"}));
    server.err(None, "session.release", json!({"sessionId": "c-one"}), "agent-busy").await;
    server.err(None, "session.create", json!({"sessionId": "c-one"}), "agent-busy").await;

    // The one-shot descriptor lands inside the first turn, right before its first step.
    let first = vec![
        json!({"type": "turn/start", "data": {"turn": 1}}),
        json!({"type": "step/start", "data": {"turn": 1, "step": 1}}),
    ];
    let appended = server.ok(None, "session.append", append_as_child("c-one", "p", first)).await;
    assert_eq!((&appended["firstSeq"], &appended["lastSeq"]), (&json!(0), &json!(2)));
    let one = server.store().get(&"c-one".into()).unwrap();
    let kinds: Vec<String> = one.events().iter().map(|event| event.kind.to_string()).collect();
    assert_eq!(kinds, ["turn/start", "subagent/descriptor", "step/start"]);

    let catalog = server.ok(None, "subagent.list", json!({"parentSessionId": "p"})).await;
    let entries = catalog["entries"].as_array().unwrap();
    assert_eq!(entries.len(), 2);
    assert_eq!(
        entries[1],
        json!({"kind": "child", "id": "c-one", "mode": "one-shot", "activity": "running", "hasChildren": false,
            "activeMs": 0})
    );

    // Live child history: in-memory events, watermark block at the last event.
    let address = json!({"parentSessionId": "p", "childSessionId": "c-one", "mode": "one-shot"});
    let page = server.ok(None, "subagent.history", address.clone()).await;
    assert_eq!(page["projections"]["asOfSeq"], 2);
    assert_eq!(page["projections"]["values"]["subagent"], json!({"mode": "one-shot", "seq": 1}));
    // The wrong mode is not found.
    let wrong = json!({"parentSessionId": "p", "childSessionId": "c-one", "mode": "continuable"});
    let error = server.err(None, "subagent.history", wrong, "subagent-not-found").await;
    assert_eq!(error["message"], "session \"c-one\" is not a continuable direct child of \"p\"");

    // Finish and release the children; the dead one never started a step.
    let rest = vec![
        assistant_message("a1", 1, "done"),
        json!({"type": "step/end", "data": {"turn": 1, "step": 1}}),
        json!({"type": "turn/end", "data": {"turn": 1, "reason": {"kind": "completed"}}}),
    ];
    server.ok(None, "session.append", append_as_child("c-one", "p", rest)).await;
    for child in ["c-one", "c-dead", "c-cont"] {
        server.ok(None, "session.release", json!({"sessionId": child, "parentSessionId": "p"})).await;
    }
    let catalog = server.ok(None, "subagent.list", json!({"parentSessionId": "p"})).await;
    assert_eq!(
        catalog["entries"],
        json!([
            {"kind": "child", "id": "c-cont", "mode": "continuable", "label": "c-cont label", "activity": "inactive",
                "hasChildren": false, "activeMs": 0},
            {"kind": "child", "id": "c-one", "mode": "one-shot", "activity": "inactive", "hasChildren": false,
                "activeMs": 0},
        ])
    );
    // c-dead stored nothing (no event was ever appended), so it is simply gone; a child that ran
    // a turn without a descriptor is a corrupt diagnostic.
    spawn(&server, "p", "c-debris", "one-shot").await;
    let debris = vec![
        json!({"type": "turn/start", "data": {"turn": 1}}),
        json!({"type": "turn/end", "data": {"turn": 1, "reason": {"kind": "completed"}}}),
    ];
    server.ok(None, "session.append", append_as_child("c-debris", "p", debris)).await;
    server.ok(None, "session.release", json!({"sessionId": "c-debris", "parentSessionId": "p"})).await;
    let catalog = server.ok(None, "subagent.list", json!({"parentSessionId": "p"})).await;
    // Same createdAt (a manual clock), so ordered by id.
    assert_eq!(catalog["entries"][1], json!({"kind": "diagnostic", "id": "c-debris", "reason": "corrupt"}));
    let address_debris = json!({"parentSessionId": "p", "childSessionId": "c-debris", "mode": "one-shot"});
    let error = server.err(None, "subagent.history", address_debris, "subagent-catalog-diagnostic").await;
    assert_eq!(error["message"], "subagent \"c-debris\" is corrupt");
    assert_eq!(error["details"], json!({"parentSessionId": "p", "childSessionId": "c-debris", "reason": "corrupt"}));

    // Cold child history: a detached fold on the tail page, none on older pages.
    let page = server.ok(None, "subagent.history", address.clone()).await;
    assert_eq!(page["events"].as_array().unwrap().len(), 6);
    assert_eq!(page["projections"]["values"]["subagent"]["mode"], "one-shot");
    let mut older = address;
    older["beforeSeq"] = json!(3);
    let page = server.ok(None, "subagent.history", older).await;
    assert!(page.get("projections").is_none());

    // An unknown parent lists nothing; its children are not found.
    assert_eq!(
        server.ok(None, "subagent.list", json!({"parentSessionId": "nobody"})).await,
        json!({"entries": [], "parentAvailable": false})
    );
    let ghost = json!({"parentSessionId": "nobody", "childSessionId": "c-one", "mode": "one-shot"});
    server.err(None, "subagent.history", ghost, "subagent-not-found").await;
    // An ordinary fork of the parent is not a subagent.
    server.ok(None, "session.fork", json!({"sessionId": "p"})).await;
    assert_eq!(
        server.ok(None, "subagent.list", json!({"parentSessionId": "p"})).await["entries"].as_array().unwrap().len(),
        3
    );
    // Spawning needs a live parent; a taken id conflicts.
    server.ok(None, "session.release", json!({"sessionId": "p"})).await;
    let error = server
        .err(None, "subagent.spawn", json!({"parentSessionId": "p", "mode": "one-shot"}), "subagent-parent-unavailable")
        .await;
    assert_eq!(error["message"], "parent session \"p\" is not live");
    session_with_turns(&server, None, "q", 0).await;
    spawn(&server, "q", "q-kid", "one-shot").await;
    server
        .err(
            None,
            "subagent.spawn",
            json!({"parentSessionId": "q", "childSessionId": "q-kid", "mode": "one-shot"}),
            "session-conflict",
        )
        .await;
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_child_streams_frames_as_it_appends() {
    let server = Server::start().await;
    session_with_turns(&server, None, "p", 0).await;
    let mut mux = server.ws("/api/events.mux", None).await;
    let mut host = server.ws("/api/events.host", None).await;
    spawn(&server, "p", "kid", "continuable").await;
    let added = host.next().await.unwrap();
    assert_eq!(added["type"], "host/session-added");
    assert_eq!(added["parentSessionId"], "p");
    assert_eq!(added["origin"], "subagent");
    server.ok(None, "session.append", append_as_child("kid", "p", turn(1))).await;
    let frames = mux.until(|frame| frame["type"] == "session/event" && frame["event"]["type"] == "turn/end").await;
    let subscribed =
        frames.iter().find(|frame| frame["type"] == "session/subscribed" && frame["sessionId"] == "kid").unwrap();
    assert_eq!(subscribed["lastSeq"], 1, "the seed (descriptor, end-seed) is in the baseline");
    let seqs: Vec<u64> = frames
        .iter()
        .filter(|frame| frame["type"] == "session/event" && frame["sessionId"] == "kid")
        .map(|frame| frame["event"]["seq"].as_u64().unwrap())
        .collect();
    assert_eq!(seqs, (2..8).collect::<Vec<u64>>());
    assert!(frames.iter().any(|frame| frame["type"] == "session/projection" && frame["key"] == "subagentTiming"));
    let catalog = server.ok(None, "subagent.list", json!({"parentSessionId": "p"})).await;
    assert_eq!(catalog["entries"][0]["activity"], "inactive", "the turn ended");
    server.stop().await;
}

/// The ids of a `session.list` answer, in order.
fn listed(list: &Value) -> Vec<&str> {
    list["items"].as_array().unwrap().iter().map(|item| item["sessionId"].as_str().unwrap()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_list_filters_and_counts_children() {
    let server = Server::start().await;
    session_with_turns(&server, None, "p", 0).await;
    session_with_turns(&server, None, "solo", 0).await;
    spawn(&server, "p", "busy", "continuable").await;
    spawn(&server, "p", "idle", "continuable").await;
    // `busy` stays inside a turn; `idle` completes one.
    let open = vec![json!({"type": "turn/start", "data": {"turn": 1}})];
    server.ok(None, "session.append", append_as_child("busy", "p", open)).await;
    server.ok(None, "session.append", append_as_child("idle", "p", turn(1))).await;

    let whole = server.ok(None, "session.list", json!({"subagents": false})).await;
    let mut ids = listed(&whole);
    ids.sort();
    assert_eq!(ids, ["p", "solo"], "{whole}");
    let parent = whole["items"].as_array().unwrap().iter().find(|row| row["sessionId"] == "p").unwrap();
    assert_eq!(parent["subagents"], json!({"count": 2, "running": 1}), "{whole}");
    let solo = whole["items"].as_array().unwrap().iter().find(|row| row["sessionId"] == "solo").unwrap();
    assert!(solo.get("subagents").is_none(), "no children, no counts: {solo}");

    let everything = server.ok(None, "session.list", json!({})).await;
    assert_eq!(listed(&everything).len(), 4, "subagents default to true: {everything}");
    let running = server.ok(None, "session.list", json!({"running": true})).await;
    assert_eq!(listed(&running), ["busy"], "{running}");
    let nowhere = server.ok(None, "session.list", json!({"cwd": "/nowhere"})).await;
    assert_eq!(listed(&nowhere), Vec::<&str>::new(), "{nowhere}");

    // Paged with filters: every top-level session once, across pages, with its counts.
    let mut paged = Vec::new();
    let mut payload = json!({"limit": 1, "subagents": false});
    loop {
        let page = server.ok(None, "session.list", payload.clone()).await;
        for row in page["items"].as_array().unwrap() {
            assert_ne!(row["origin"], "subagent", "{page}");
            if row["sessionId"] == "p" {
                assert_eq!(row["subagents"], json!({"count": 2, "running": 1}), "{page}");
            }
            paged.push(row["sessionId"].as_str().unwrap().to_owned());
        }
        match page["nextCursor"].as_str() {
            Some(cursor) => payload = json!({"limit": 1, "subagents": false, "cursor": cursor}),
            None => break,
        }
    }
    paged.sort();
    assert_eq!(paged, ["p", "solo"]);
    let running_page = server.ok(None, "session.list", json!({"limit": 10, "running": true})).await;
    assert_eq!(listed(&running_page), ["busy"], "{running_page}");

    for bad in [json!({"subagents": 1}), json!({"cwd": 3}), json!({"limit": 2, "running": "yes"})] {
        let error = server.err(None, "session.list", bad.clone(), "bad-request").await;
        assert!(error["message"].as_str().unwrap().contains("session.list"), "{bad}: {error}");
    }
    server.stop().await;
}

/// `activeMs` on a child row: the `subagentTiming` projection's settled time plus the open turn
/// seen so far, the same on the live rung, the checkpoint rung and the cold fold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn child_rows_carry_the_active_duration() {
    for cached in [false, true] {
        let clock = std::sync::Arc::new(session_core::ManualClock::new(1_700_000_000_000));
        let server = Server::start_with_clock(apiproxy::ProxyConfig::default(), cached, clock.clone()).await;
        session_with_turns(&server, None, "p", 1).await;
        spawn(&server, "p", "timed", "continuable").await;
        let active_ms = |catalog: &Value| catalog["entries"][0]["activeMs"].clone();
        let list = || server.ok(None, "subagent.list", json!({"parentSessionId": "p"}));
        // No turn yet: nothing settled, nothing open.
        assert_eq!(active_ms(&list().await), json!(0), "cached={cached}");

        // A turn of 1.5 s: turn/start, then everything else 1,500 ms later.
        let events = turn(1);
        server.ok(None, "session.append", append_as_child("timed", "p", events[..1].to_vec())).await;
        clock.advance(1_500);
        server.ok(None, "session.append", append_as_child("timed", "p", events[1..].to_vec())).await;
        assert_eq!(active_ms(&list().await), json!(1_500), "cached={cached}");

        // An open turn counts up to its latest event: 700 ms in.
        let open = turn(2);
        server.ok(None, "session.append", append_as_child("timed", "p", open[..1].to_vec())).await;
        clock.advance(700);
        server.ok(None, "session.append", append_as_child("timed", "p", open[1..2].to_vec())).await;
        let catalog = list().await;
        assert_eq!(catalog["entries"][0]["activity"], "running", "{catalog}");
        assert_eq!(active_ms(&catalog), json!(2_200), "cached={cached}: {catalog}");
        // Time passing without an event adds nothing: the projection is a fold of the log.
        clock.advance(10_000);
        assert_eq!(active_ms(&list().await), json!(2_200), "cached={cached}");

        // The turn ends 300 ms later: it counts from its start to its end, 11,000 ms, idle spell
        // included. Once released, the cold rows (the checkpoint's snapshot with a cache, the
        // cold fold without) give the same figure.
        clock.advance(300);
        server.ok(None, "session.append", append_as_child("timed", "p", open[2..].to_vec())).await;
        let live = list().await;
        assert_eq!(active_ms(&live), json!(12_500), "cached={cached}: {live}");
        server.ok(None, "session.release", json!({"sessionId": "timed", "parentSessionId": "p"})).await;
        assert!(server.store().get(&"timed".into()).is_none(), "the child is cold now");
        let cold = list().await;
        assert_eq!(cold["entries"][0]["activity"], "inactive", "{cold}");
        assert_eq!(active_ms(&cold), json!(12_500), "cached={cached}: {cold}");
        server.stop().await;
    }
}

/// `session.list`'s child counts (`subagents: {count, running}`) count only the children the
/// caller sees: a child of another owner that names the caller's session as its parent (a host
/// of that owner wrote it to the shared store, or holds it live) is never counted, neither in
/// the whole listing nor in a page.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_list_child_counts_never_count_another_owners_children() {
    use session_core::{CreateOptions, HeaderMeta, Origin, SessionEvent, SessionHeader, SessionId};
    use session_persistence::{Backend, Compression, JsonlConfig, JsonlStore};

    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("store");
    let header = |id: &str, owner: &str, parent: Option<&str>| {
        let mut header = SessionHeader::new(SessionId::from(id), 1_700_000_000_000);
        header.cwd = Some("/work".into());
        header.owner = Some(owner.into());
        if let Some(parent) = parent {
            header.parent_session = Some(SessionId::from(parent));
            header.origin = Some(Origin::Subagent);
            header.delegation_depth = 1;
        }
        header
    };
    {
        let store =
            JsonlStore::open(JsonlConfig { root: root.clone(), compression: Compression::None, pack_chunks: true })
                .unwrap();
        let start = || {
            let data = session_core::JsonData::from_value(&json!({"turn": 1})).unwrap();
            vec![std::sync::Arc::new(SessionEvent::new("turn/start", 0, 1_700_000_000_001, data))]
        };
        for header in [
            header("a-par", "alice", None),
            header("a-kid-cold", "alice", Some("a-par")),
            header("b-kid-cold", "bob", Some("a-par")),
            header("b-kid-cold-2", "bob", Some("a-par")),
        ] {
            store.append_batch(&header, &start(), false).unwrap();
        }
    }
    let server = Server::start_on_store(&root, Compression::None).await;
    // A live child of Bob's under Alice's session, inside a turn, and a live one of Alice's.
    let live_child = |id: &str, owner: &str| {
        let meta = HeaderMeta {
            cwd: Some("/work".into()),
            parent_session: Some(SessionId::from("a-par")),
            origin: Some(Origin::Subagent),
            delegation_depth: 1,
            owner: Some(owner.into()),
            ..HeaderMeta::default()
        };
        let session = server.store().create(Some(SessionId::from(id)), CreateOptions { seed: None, meta }).unwrap();
        session.append("turn/start", &json!({"turn": 1}), None).unwrap();
    };
    live_child("b-kid-live", "bob");
    live_child("a-kid-live", "alice");

    let alice_counts = json!({"count": 2, "running": 1});
    let row =
        |list: &Value, id: &str| list["items"].as_array().unwrap().iter().find(|row| row["sessionId"] == id).cloned();
    let whole = server.ok(ALICE, "session.list", json!({"subagents": false})).await;
    assert_eq!(row(&whole, "a-par").expect("Alice's parent")["subagents"], alice_counts, "{whole}");
    let page = server.ok(ALICE, "session.list", json!({"limit": 10, "subagents": false})).await;
    assert_eq!(row(&page, "a-par").expect("Alice's parent")["subagents"], alice_counts, "{page}");
    // Alice's listing with the children shown lists only hers.
    let mut ids =
        listed(&server.ok(ALICE, "session.list", json!({})).await).into_iter().map(str::to_owned).collect::<Vec<_>>();
    ids.sort();
    assert_eq!(ids, ["a-kid-cold", "a-kid-live", "a-par"]);
    // Bob sees his children, not Alice's parent, and nothing counts them under a row of his.
    let bob = server.ok(BOB, "session.list", json!({})).await;
    let mut ids = listed(&bob).into_iter().map(str::to_owned).collect::<Vec<_>>();
    ids.sort();
    assert_eq!(ids, ["b-kid-cold", "b-kid-cold-2", "b-kid-live"], "{bob}");
    assert!(bob["items"].as_array().unwrap().iter().all(|row| row.get("subagents").is_none()), "{bob}");
    // The operator tier counts everyone's.
    let all = server.ok(None, "session.list", json!({"limit": 10, "subagents": false})).await;
    assert_eq!(row(&all, "a-par").unwrap()["subagents"], json!({"count": 5, "running": 2}), "{all}");
    server.stop().await;
}
