//! The reference's own stores read back with the reference's answers (`expected.json`).

use session_core::SessionEvent;
use session_persistence::{Backend, Compression, JsonlStore};
use tokio_util::sync::CancellationToken;

use crate::{ENCODINGS, config, expected, fixture_copy, fixture_store, id, open, scan_ok};

const UNDAMAGED: [&str; 5] = ["s-child-continuable", "s-child-oneshot", "s-fork", "s-open-turn", "s-parent"];

#[test]
fn list_matches_expected_headers() {
    let expected = expected();
    for compression in ENCODINGS {
        let store = JsonlStore::open_read_only(config(&fixture_store(compression), compression)).unwrap();
        let listing = store.list(&CancellationToken::new()).unwrap();
        assert!(listing.faults.is_empty(), "{listing:?}");
        let listed = listing.headers;
        let headers: Vec<serde_json::Value> =
            listed.iter().map(|stored| serde_json::to_value(&*stored.header).unwrap()).collect();
        assert_eq!(serde_json::Value::Array(headers), expected[compression.as_str()]["headers"], "{compression:?}");
        for stored in &listed {
            assert_eq!(store.revision(&stored.header.id).unwrap(), Some(stored.revision.clone()));
        }
    }
}

#[test]
fn stored_event_counts_match_expected() {
    let expected = expected();
    for compression in ENCODINGS {
        let store = JsonlStore::open_read_only(config(&fixture_store(compression), compression)).unwrap();
        let inspect = expected[compression.as_str()]["inspect"].as_object().unwrap();
        for (session, answer) in inspect {
            let (outcome, events) = scan_ok(&store, session);
            let stored = answer["storedEvents"].as_u64().unwrap();
            assert_eq!(outcome.n_events, stored, "{compression:?} {session}");
            assert_eq!(events.len() as u64, stored, "{compression:?} {session}");
            assert!(events.iter().enumerate().all(|(index, event)| event.seq == index as u64));
            assert_eq!(outcome.header.id.as_str(), session.as_str());
            assert_eq!(Some(outcome.revision), store.revision(&id(session)).unwrap());
            if session != "s-torn" {
                assert_eq!(outcome.torn, None, "{compression:?} {session}");
            }
        }
    }
}

#[test]
fn torn_tails_match_the_damage() {
    let zstd = JsonlStore::open_read_only(config(&fixture_store(Compression::Zstd), Compression::Zstd)).unwrap();
    let (outcome, events) = scan_ok(&zstd, "s-torn");
    let torn = outcome.torn.expect("the zstd twin is torn");
    assert_eq!(torn.truncate_to, 2616);
    assert!(torn.recovered.is_empty(), "the torn frame is one block: nothing is recoverable");
    assert_eq!(events.len(), 63);
    assert!(events.last().unwrap().is("step/start"));

    let raw = JsonlStore::open_read_only(config(&fixture_store(Compression::None), Compression::None)).unwrap();
    let (outcome, events) = scan_ok(&raw, "s-torn");
    let torn = outcome.torn.expect("the raw twin is torn");
    assert_eq!(torn.truncate_to, 12104);
    assert!(torn.recovered.is_empty());
    assert_eq!(events.len(), 82);
    assert_eq!(outcome.n_bytes, 12201);
}

#[test]
fn both_encodings_decode_to_identical_events() {
    let zstd = JsonlStore::open_read_only(config(&fixture_store(Compression::Zstd), Compression::Zstd)).unwrap();
    let raw = JsonlStore::open_read_only(config(&fixture_store(Compression::None), Compression::None)).unwrap();
    for session in UNDAMAGED {
        let (zstd_outcome, zstd_events) = scan_ok(&zstd, session);
        let (raw_outcome, raw_events) = scan_ok(&raw, session);
        assert_eq!(zstd_events, raw_events, "{session}");
        assert_eq!(zstd_outcome.header, raw_outcome.header);
        assert_eq!(zstd_outcome.n_bytes, raw_outcome.n_bytes, "the plaintexts are identical");
        for (a, b) in zstd_events.iter().zip(&raw_events) {
            assert_eq!(a.data.as_str(), b.data.as_str(), "byte-identical payloads");
        }
    }
}

#[test]
fn packed_rows_expand_to_plain_chunks() {
    let store = JsonlStore::open_read_only(config(&fixture_store(Compression::None), Compression::None)).unwrap();
    let (_, events) = scan_ok(&store, "s-parent");
    assert_eq!(events.len(), 181);
    // The first reasoning row starts at seq 8 with twelve members.
    let member = &events[8];
    assert!(member.is("assistant/chunk"));
    assert_eq!(member.time, 1_772_442_000_772);
    assert_eq!(
        member.data.as_str(),
        r#"{"turn":1,"step":1,"chunk":{"type":"reasoning-delta","index":0,"text":"I should "}}"#
    );
    assert_eq!(events[9].time, 1_772_442_000_772 + 22);
    assert_eq!(events[19].data.to_value().unwrap()["chunk"]["text"], "usual suspect.");
    // A tool-call row keeps the call id on every member.
    assert_eq!(events[30].data.to_value().unwrap()["chunk"]["id"], "call_n1a7");
    assert_eq!(events[33].data.to_value().unwrap()["chunk"]["argumentsDelta"], "log\"}");
}

fn closers(compression: Compression, session: &str) -> Vec<SessionEvent> {
    let expected = expected();
    let closers = &expected[compression.as_str()]["closers"][session];
    serde_json::from_value(closers.clone()).expect("closers decode as events")
}

#[test]
fn repairing_the_torn_fixture_commits_closers() {
    for compression in ENCODINGS {
        let (_guard, root) = fixture_copy(compression);
        let store = open(&root, compression);
        let (outcome, events) = scan_ok(&store, "s-torn");
        let closers = closers(compression, "s-torn");
        assert_eq!(closers[0].seq, events.len() as u64);
        store.commit_repair(&outcome.header, outcome.torn.as_ref(), &closers).unwrap();

        let (repaired, repaired_events) = scan_ok(&store, "s-torn");
        assert_eq!(repaired.torn, None, "{compression:?}");
        assert_eq!(repaired_events.len(), 65 + usize::from(compression == Compression::None) * 18);
        assert_eq!(&repaired_events[..events.len()], &events[..]);
        assert_eq!(&repaired_events[events.len()..], &closers[..]);
        assert_ne!(repaired.revision, outcome.revision);
    }
}

#[test]
fn open_turn_fixture_is_whole_and_untorn() {
    for compression in ENCODINGS {
        let store = JsonlStore::open_read_only(config(&fixture_store(compression), compression)).unwrap();
        let (outcome, events) = scan_ok(&store, "s-open-turn");
        assert_eq!(outcome.torn, None);
        assert_eq!(events.len(), 94);
        assert!(events.last().unwrap().is("tool/call"));
    }
}

/// The coordinator's answers are the reference's: `inspect` balances every fixture in memory
/// with exactly the reference's closers and writes nothing; `load` commits the same repair.
#[test]
fn coordinator_inspect_and_load_match_the_reference() {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let expected = expected();
    for compression in ENCODINGS {
        let (_guard, root) = fixture_copy(compression);
        runtime.block_on(async {
            let store: std::sync::Arc<dyn Backend> = std::sync::Arc::new(open(&root, compression));
            let coordinator = session_persistence::Coordinator::new(store, Default::default()).unwrap();
            let cancel = CancellationToken::new();
            use session_persistence::SessionPersistence;
            let before = coordinator.list_snapshots(&cancel).await.unwrap().headers;
            let inspect = expected[compression.as_str()]["inspect"].as_object().unwrap();
            for (session, answer) in inspect {
                let inspection = coordinator.inspect(&id(session), &cancel).await.unwrap();
                let n_events = answer["events"].as_u64().unwrap();
                assert_eq!(inspection.events.len() as u64, n_events, "{compression:?} {session}");
                let n_closers = answer["closers"].as_u64().unwrap() as usize;
                let synthesized: Vec<SessionEvent> = inspection.events[inspection.events.len() - n_closers..]
                    .iter()
                    .map(|event| SessionEvent::clone(event))
                    .collect();
                if n_closers > 0 {
                    assert_eq!(synthesized, closers(compression, session), "{compression:?} {session}");
                }
            }
            assert_eq!(coordinator.list_snapshots(&cancel).await.unwrap().headers, before, "inspect writes nothing");

            for session in ["s-open-turn", "s-torn"] {
                let loaded = coordinator.load(&id(session), &cancel).await.unwrap();
                let n_events = inspect[session]["events"].as_u64().unwrap();
                assert_eq!(loaded.events.len() as u64, n_events, "{compression:?} {session}");
            }
            assert_ne!(coordinator.list_snapshots(&cancel).await.unwrap().headers, before, "load commits the repairs");
            // A fresh coordinator reads the repaired logs as whole: nothing left to close.
            drop(coordinator);
            let store: std::sync::Arc<dyn Backend> = std::sync::Arc::new(open(&root, compression));
            let coordinator = session_persistence::Coordinator::new(store, Default::default()).unwrap();
            for session in ["s-open-turn", "s-torn"] {
                let read = coordinator.read_from(&id(session), 0, &cancel).await.unwrap();
                assert_eq!(read.events.len() as u64, inspect[session]["events"].as_u64().unwrap());
            }
        });
    }
}
