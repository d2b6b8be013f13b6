//! The storable check's contract: whatever a writer acknowledges, through a live session or
//! through `SessionPersistence::append`, a fresh reader reads back identically; what a reader
//! would refuse is refused before it is acknowledged, with a typed error naming the rule.

use std::{sync::Arc, time::Duration};

use proptest::{
    prelude::*,
    strategy::ValueTree,
    test_runner::{Config, TestRunner},
};
use serde_json::{Value, json};
use session_core::{
    CreateOptions, HeaderMeta, JsonData, KnownTypes, ManualClock, SessionError, SessionEvent, SessionHeader, SessionId,
    SessionStore, StorableRule, SurfaceIntent,
};
use session_persistence::{Coordinator, CoordinatorConfig, PersistenceError, SessionPersistence};
use tokio_util::sync::CancellationToken;

use crate::Place;

type Cx<'a> = crate::runner::Cx<'a, dyn Place>;

/// The host's own event type, registered once in the coordinator's configuration.
const HOST_TYPE: &str = "host/note";

fn open(h: &Cx<'_>) -> Coordinator {
    let config = CoordinatorConfig {
        write_batch_max_delay: Duration::from_millis(5),
        known_types: KnownTypes::with_extra([HOST_TYPE]),
        ..CoordinatorConfig::default()
    };
    Coordinator::new(h.place.open(), config).unwrap()
}

fn cancel() -> CancellationToken {
    CancellationToken::new()
}

fn user_message(id: &str) -> Value {
    json!({"id": id, "role": "user", "source": {"kind": "user"}, "content": [{"type": "text", "text": "hi"}]})
}

/// One event a host might try to append: its type, its data and whether it joins the surface.
#[derive(Debug, Clone)]
struct Attempt {
    kind: &'static str,
    data: Value,
    surface: bool,
}

/// The kinds a reader refuses, each with the rule the write side names.
fn refused() -> Vec<(Attempt, StorableRule)> {
    let attempt = |kind, data, surface| Attempt { kind, data, surface };
    vec![
        (attempt("mode/set", json!({"mode": "plan"}), false), StorableRule::Retired),
        (attempt("request/header-delta", json!({}), false), StorableRule::Retired),
        (attempt("custom/unknown", json!({"x": 1}), false), StorableRule::UnknownType),
        (attempt("user/message", json!({"message": 7}), true), StorableRule::MessageShape),
        (attempt("user/message", json!({"role": "user"}), true), StorableRule::MessageShape),
        (attempt("turn/start", json!({"turn": 1, "trigger": {"kind": "user"}}), false), StorableRule::LegacyShape),
        (attempt("user/message", json!({"source": {"kind": "user"}, "content": []}), true), StorableRule::LegacyShape),
    ]
}

fn append_live(session: &session_core::Session, attempt: &Attempt) -> Result<Arc<SessionEvent>, SessionError> {
    session.append(attempt.kind, &attempt.data, attempt.surface.then(SurfaceIntent::append))
}

pub(crate) async fn refused_kinds_are_never_acknowledged_and_the_log_reads_back(h: &Cx<'_>) {
    let id = SessionId::from("storable-live");
    let acknowledged = {
        let persistence = open(h);
        let store = Arc::new(SessionStore::new(Arc::new(ManualClock::new(5_000))));
        persistence.attach(&store).unwrap();
        let session =
            store.create(Some(id.clone()), CreateOptions { seed: None, meta: HeaderMeta::default() }).unwrap();
        session.append("turn/start", &json!({"turn": 1}), None).unwrap();
        for (attempt, rule) in refused() {
            match append_live(&session, &attempt) {
                Err(SessionError::Unstorable(refusal)) => assert_eq!(refusal.rule, rule, "{attempt:?}: {refusal}"),
                other => panic!("{attempt:?}: expected a storable refusal, got {other:?}"),
            }
        }
        // The host's own type, registered once in the coordinator's configuration, is accepted.
        session.append(HOST_TYPE, &json!({"note": "kept"}), None).unwrap();
        session.append("user/message", &user_message("m1"), Some(SurfaceIntent::append())).unwrap();
        session.append("turn/end", &json!({"turn": 1, "reason": {"kind": "completed"}}), None).unwrap();
        assert!(store.flush(&id).await.unwrap());
        let events = session.events().to_vec();
        persistence.close().await.unwrap();
        events
    };
    assert_eq!(acknowledged.len(), 4);

    // The same refusals through `SessionPersistence::append`: typed, and nothing of the batch is
    // stored.
    let persistence = open(h);
    let inspected = persistence.inspect(&id, &cancel()).await.unwrap();
    assert_eq!(inspected.events.to_vec(), acknowledged, "a fresh reader reads back what was acknowledged");
    let cold = SessionId::from("storable-cold");
    persistence.create(SessionHeader::new(cold.clone(), 5_000), &cancel()).await.unwrap();
    for (attempt, rule) in refused() {
        let mut event = SessionEvent::new(attempt.kind, 1, 5_000, JsonData::from_value(&attempt.data).unwrap());
        event.surface_op = attempt.surface.then_some(session_core::SurfaceOp::Append);
        let start = SessionEvent::new("turn/start", 0, 5_000, JsonData::from_value(&json!({"turn": 1})).unwrap());
        let batch = vec![Arc::new(start), Arc::new(event)];
        match persistence.append(&cold, batch, &cancel()).await {
            Err(PersistenceError::Unstorable { index: 1, source, .. }) => assert_eq!(source.rule, rule, "{attempt:?}"),
            other => panic!("{attempt:?}: expected a storable refusal of batch event 1, got {other:?}"),
        }
        match persistence.inspect(&cold, &cancel()).await {
            Err(PersistenceError::NotFound { .. }) => {}
            Ok(stored) => assert!(stored.events.is_empty(), "{attempt:?}: nothing of a refused batch is stored"),
            Err(error) => panic!("{attempt:?}: {error}"),
        }
    }
}

/// Events a host might append: current, retired, unknown, registered, legacy and malformed
/// shapes, with and without a surface marker.
fn attempts() -> impl Strategy<Value = Vec<Attempt>> {
    let kind = prop::sample::select(vec![
        "turn/start",
        "turn/end",
        "user/message",
        "assistant/message",
        "tool/result",
        "mode/set",
        "request/header-delta",
        "custom/unknown",
        HOST_TYPE,
        "step/start",
    ]);
    let data = prop::sample::select(vec![
        json!({}),
        json!({"turn": 1}),
        json!({"turn": 1, "reason": {"kind": "completed"}}),
        json!({"turn": 1, "trigger": {"kind": "user"}}),
        json!({"message": 7}),
        json!({"message": user_message("wrapped")}),
        user_message("plain"),
        json!({"source": {"kind": "user"}, "content": []}),
        json!({"turn": 1, "step": 0}),
        json!(null),
    ]);
    let attempt = (kind, data, any::<bool>()).prop_map(|(kind, data, surface)| Attempt { kind, data, surface });
    prop::collection::vec(attempt, 1..12)
}

pub(crate) async fn acknowledged_events_read_back_identically_through_a_fresh_reader(h: &Cx<'_>) {
    // Generated inputs without shrinking: the case is async and reopens its place, which a
    // proptest body cannot; a failure prints the whole input.
    let mut runner = TestRunner::new(Config { cases: 16, ..Config::default() });
    let strategy = attempts();
    let inputs: Vec<Vec<Attempt>> =
        (0..16).map(|_| strategy.new_tree(&mut runner).expect("inputs generate").current()).collect();

    // Every input twice: through a live session and through `SessionPersistence::append`.
    let mut acknowledged = Vec::new();
    {
        let persistence = open(h);
        let store = Arc::new(SessionStore::new(Arc::new(ManualClock::new(5_000))));
        persistence.attach(&store).unwrap();
        for (n, input) in inputs.iter().enumerate() {
            let live = SessionId::from(format!("generated-live-{n}"));
            let session =
                store.create(Some(live.clone()), CreateOptions { seed: None, meta: HeaderMeta::default() }).unwrap();
            for attempt in input {
                // A refusal is any typed error; what matters is what was acknowledged.
                let _ = append_live(&session, attempt);
            }
            assert!(store.flush(&live).await.unwrap());
            acknowledged.push((live, session.events().to_vec(), input));

            let cold = SessionId::from(format!("generated-cold-{n}"));
            persistence.create(SessionHeader::new(cold.clone(), 5_000), &cancel()).await.unwrap();
            let mut stored = Vec::new();
            for attempt in input {
                let mut event = SessionEvent::new(
                    attempt.kind,
                    stored.len() as u64,
                    5_000,
                    JsonData::from_value(&attempt.data).unwrap(),
                );
                event.surface_op = attempt.surface.then_some(session_core::SurfaceOp::Append);
                let event = Arc::new(event);
                if persistence.append(&cold, vec![event.clone()], &cancel()).await.is_ok() {
                    stored.push(event);
                }
            }
            acknowledged.push((cold, stored, input));
        }
        persistence.close().await.unwrap();
    }

    let persistence = open(h);
    for (id, events, input) in acknowledged {
        match persistence.inspect(&id, &cancel()).await {
            Ok(inspected) => {
                // An open turn reads with its crash closers after what was written.
                assert_eq!(
                    inspected.events.len(),
                    events.len() + inspected.n_closers as usize,
                    "{id}: input {input:?}"
                );
                assert_eq!(inspected.events[..events.len()].to_vec(), events, "{id}: input {input:?}");
            }
            // A session with nothing acknowledged may never have been written.
            Err(PersistenceError::NotFound { .. }) if events.is_empty() => {}
            Err(error) => panic!("{id}: acknowledged events do not read back ({error}); input {input:?}"),
        }
    }
}
