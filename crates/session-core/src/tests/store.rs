//! `SessionStore`: ids, lifecycle, observer containment and veto, detach, flush (reference 01
//! §2.6). The interleavings of publications (re-entrancy, deferred detach, concurrent appenders)
//! are tested beside the protocol, in `publication/tests.rs`.

use std::sync::Arc;

use futures::{FutureExt, channel::oneshot, executor::block_on};
use parking_lot::Mutex;
use serde_json::json;

use futures::future::BoxFuture;

use super::{Recorder, append, clock, describe, id, lines, observer, take, user_message};
use crate::{CreateOptions, HeaderMeta, ObserverError, Session, SessionStore, StoreEvent};

#[test]
fn ids_are_minted_per_store_skipping_live_ones() {
    let store = store_with_nothing();
    let first = store.create(None, CreateOptions::default()).unwrap();
    store.create(Some(id("session-3")), CreateOptions::default()).unwrap();
    let second = store.create(None, CreateOptions::default()).unwrap();
    let third = store.create(None, CreateOptions::default()).unwrap();
    assert_eq!(
        [first.id().as_str(), second.id().as_str(), third.id().as_str()],
        ["session-1", "session-2", "session-4"]
    );
    assert_eq!(first.header().created_at, super::T0 as u64);
    assert_eq!(
        store.list().iter().map(|session| session.id().to_string()).collect::<Vec<_>>(),
        ["session-1", "session-3", "session-2", "session-4"],
        "creation order"
    );
    let err = store.create(Some(id("session-3")), CreateOptions::default()).unwrap_err();
    assert_eq!(err.to_string(), "session \"session-3\" already exists");
    let err = store.prepare(Some(id("session-1")), CreateOptions::default()).unwrap_err();
    assert_eq!(err.to_string(), "session \"session-1\" already exists");
    assert!(store.contains(&id("session-4")));
    assert!(store.get(&id("session-9")).is_none());
}

/// `CreateOptions::resume` makes a stored session live again with its very header and events.
#[test]
fn a_resumed_session_keeps_its_stored_header_and_events() {
    let first = super::store();
    let meta = HeaderMeta {
        cwd: Some("/work".to_owned()),
        created_at: Some(7),
        delegation_depth: 1,
        owner: Some("owner".to_owned()),
        ..HeaderMeta::default()
    };
    let stored = first.create(Some(id("s")), CreateOptions { seed: None, meta }).unwrap();
    super::closed_turn(&stored, 1, "hello");
    let (header, events) = (stored.header().clone(), stored.events().to_vec());
    first.detach(stored.id()).unwrap();

    let second = super::store();
    let resumed = second.create(Some(id("s")), CreateOptions::resume(&header, events.clone())).unwrap();
    assert_eq!(resumed.header(), &header);
    assert_eq!(&resumed.events()[..events.len()], &events[..]);
}

fn store_with_nothing() -> SessionStore {
    super::store()
}

#[test]
fn create_validates_meta_and_seed() {
    let store = store_with_nothing();
    let meta = HeaderMeta { cwd: Some("relative".into()), ..HeaderMeta::default() };
    let err = store.create(Some(id("bad")), CreateOptions { seed: None, meta }).unwrap_err();
    assert_eq!(err.to_string(), "session header cwd must be an absolute path, got \"relative\"");
    assert!(!store.contains(&id("bad")));

    let negative_clock = SessionStore::with_known_types(Arc::new(crate::ManualClock::new(-1)), super::known());
    let err = negative_clock.create(None, CreateOptions::default()).unwrap_err();
    assert_eq!(err.to_string(), "session header createdAt must be a non-negative safe integer");
    // The same clock, bounded, stamps 1970 instead.
    let bounded = crate::BoundedClock::new(Arc::new(crate::ManualClock::new(-1)));
    let bounded_clock = SessionStore::with_known_types(Arc::new(bounded), super::known());
    assert_eq!(bounded_clock.create(None, CreateOptions::default()).unwrap().header().created_at, 0);

    let meta = HeaderMeta { created_at: Some(1000), owner: Some("alice".into()), ..HeaderMeta::default() };
    let session = store.create(Some(id("meta")), CreateOptions { seed: Some(Vec::new()), meta }).unwrap();
    assert_eq!((session.header().created_at, session.header().owner.as_deref()), (1000, Some("alice")));
    assert_eq!(session.len(), 1, "an empty seed still gets session/end-seed");
}

#[test]
fn observers_hear_the_lifecycle_in_order() {
    let store = store_with_nothing();
    let lines = lines();
    store.add_observer(Recorder::new("a", &lines));
    let session =
        store.create(Some(id("s")), CreateOptions { seed: Some(Vec::new()), meta: HeaderMeta::default() }).unwrap();
    append(&session, "turn/start", json!({"turn": 1}));
    assert!(session.is_attached());
    let detached_session = store.detach(&id("s")).unwrap();
    assert!(Arc::ptr_eq(&detached_session, &session));
    assert!(!session.is_attached());
    append(&session, "turn/end", json!({"turn": 1, "reason": {"kind": "completed"}}));
    assert_eq!(take(&lines), ["a: created s", "a: event s 1 turn/start", "a: disposed s"]);
    assert!(store.detach(&id("s")).is_none());
    assert!(store.list().is_empty());

    // A prepared session is not live and publishes nothing until it is published.
    let prepared = store.prepare(Some(id("p")), CreateOptions::default()).unwrap();
    append(&prepared, "turn/start", json!({"turn": 1}));
    assert!(!store.contains(&id("p")));
    store.publish(&prepared).unwrap();
    append(&prepared, "turn/end", json!({"turn": 1, "reason": {"kind": "completed"}}));
    assert_eq!(take(&lines), ["a: created p", "a: event p 1 turn/end"]);
}

#[test]
fn failing_and_panicking_observers_are_contained() {
    let store = store_with_nothing();
    let lines = lines();
    store.add_observer(observer(|event| match event {
        StoreEvent::Created(_) => Ok(()),
        _ => Err("observer refused".into()),
    }));
    store.add_observer(observer(|event| match event {
        StoreEvent::Created(_) => Ok(()),
        _ => panic!("observer exploded"),
    }));
    store.add_observer(Recorder::new("c", &lines));
    let session = store.create(Some(id("s")), CreateOptions::default()).unwrap();
    let event = session.append("turn/start", &json!({"turn": 1}), None).unwrap();
    assert_eq!(event.seq, 0);
    assert_eq!(session.len(), 1);
    store.detach(&id("s")).unwrap();
    assert_eq!(take(&lines), ["c: created s", "c: event s 0 turn/start", "c: disposed s"]);
}

#[test]
fn a_failing_created_observer_vetoes_and_pairs_disposed() {
    for (name, fail) in [("err", false), ("panic", true)] {
        let store = store_with_nothing();
        let lines = lines();
        store.add_observer(Recorder::new("before", &lines));
        let failing_lines = Arc::clone(&lines);
        store.add_observer(observer(move |event| {
            failing_lines.lock().push(format!("failing: {}", describe(event)));
            match event {
                StoreEvent::Created(_) if fail => panic!("no thanks"),
                StoreEvent::Created(_) => Err("no thanks".into()),
                _ => Ok(()),
            }
        }));
        store.add_observer(Recorder::new("after", &lines));
        let session = store.prepare(Some(id("v")), CreateOptions::default()).unwrap();
        let err = store.publish(&session).unwrap_err();
        let expected = if fail {
            "session \"v\" creation was vetoed by an observer: observer panicked: no thanks"
        } else {
            "session \"v\" creation was vetoed by an observer: no thanks"
        };
        assert_eq!(err.to_string(), expected, "{name}");
        assert_eq!(
            take(&lines),
            ["before: created v", "failing: created v", "before: disposed v", "failing: disposed v"],
            "{name}"
        );
        assert!(!store.contains(&id("v")));
        assert!(!session.is_attached());
        append(&session, "turn/start", json!({"turn": 1}));
        assert!(take(&lines).is_empty(), "a vetoed session is detached");
        // The id is free again: a new attempt is vetoed again rather than refused as a duplicate.
        let again = store.create(Some(id("v")), CreateOptions::default()).unwrap_err();
        assert!(again.to_string().contains("vetoed"), "{name}: {again}");
    }
}

#[test]
fn removed_observers_hear_nothing() {
    let store = store_with_nothing();
    let lines = lines();
    let observer_id = store.add_observer(Recorder::new("a", &lines));
    let session = store.create(Some(id("r")), CreateOptions::default()).unwrap();
    assert!(store.remove_observer(observer_id));
    assert!(!store.remove_observer(observer_id));
    append(&session, "turn/start", json!({"turn": 1}));
    assert_eq!(take(&lines), ["a: created r"]);
}

type HookResult = BoxFuture<'static, Result<(), ObserverError>>;

fn hook(f: impl Fn(Arc<Session>) -> HookResult + Send + Sync + 'static) -> Arc<dyn crate::FlushHook> {
    Arc::new(f)
}

#[test]
fn flush_semantics() {
    let store = store_with_nothing();
    let err = block_on(store.flush(&id("missing"))).unwrap_err();
    assert_eq!(err.to_string(), "session \"missing\" is not live in this store");
    store.create(Some(id("f")), CreateOptions::default()).unwrap();
    assert!(!block_on(store.flush(&id("f"))).unwrap(), "no hook ran");

    // The first hook waits for a signal that only the second hook sends, so the call completes
    // only if the hooks run concurrently. The first failure in registration order wins even
    // though the second hook fails first.
    let (sender, receiver) = oneshot::channel::<()>();
    let receiver = Mutex::new(Some(receiver));
    let sender = Mutex::new(Some(sender));
    let ran = Arc::new(Mutex::new(Vec::new()));
    let ran_first = Arc::clone(&ran);
    store.add_flush_hook(hook(move |session| {
        let receiver = receiver.lock().take();
        let ran = Arc::clone(&ran_first);
        async move {
            if let Some(receiver) = receiver {
                receiver.await?;
            }
            ran.lock().push(format!("first {}", session.id()));
            Err("first failure".into())
        }
        .boxed()
    }));
    let ran_second = Arc::clone(&ran);
    store.add_flush_hook(hook(move |_| {
        if let Some(sender) = sender.lock().take() {
            let _ = sender.send(());
        }
        ran_second.lock().push("second".to_owned());
        async { Err("second failure".into()) }.boxed()
    }));
    let err = block_on(store.flush(&id("f"))).unwrap_err();
    assert_eq!(err.to_string(), "flush of session \"f\" failed: first failure");
    assert_eq!(*ran.lock(), ["second", "first f"]);

    let store = store_with_nothing();
    store.create(Some(id("g")), CreateOptions::default()).unwrap();
    store.add_flush_hook(hook(|_| async { Ok(()) }.boxed()));
    assert!(block_on(store.flush(&id("g"))).unwrap());
    let panicking = store.add_flush_hook(hook(|_| panic!("hook exploded")));
    let err = block_on(store.flush(&id("g"))).unwrap_err();
    assert_eq!(err.to_string(), "flush of session \"g\" failed: flush hook panicked: hook exploded");
    store.remove_flush_hook(panicking);
    store.add_flush_hook(hook(|_| async { panic!("poll exploded") }.boxed()));
    let err = block_on(store.flush(&id("g"))).unwrap_err();
    assert_eq!(err.to_string(), "flush of session \"g\" failed: flush hook panicked: poll exploded");
}

#[test]
fn clock_is_shared_with_sessions() {
    let clock = clock();
    let store = SessionStore::with_known_types(Arc::clone(&clock) as _, super::known());
    let session = store.create(None, CreateOptions::default()).unwrap();
    clock.advance(25);
    let event = append(&session, "turn/start", json!({"turn": 1}));
    assert_eq!(event.time, super::T0 + 25);
    assert_eq!(store.clock().now_ms(), super::T0 + 25);
}

#[test]
fn sessions_and_stores_cross_threads() {
    fn send_sync<T: Send + Sync>(_: &T) {}
    fn send<T: Send>(_: &T) {}
    let store = store_with_nothing();
    let session = store.create(None, CreateOptions::default()).unwrap();
    send_sync(&store);
    send_sync(&session);
    let flush = store.flush(session.id());
    send(&flush);
    assert!(!block_on(flush).unwrap());
}

/// A bounded clock keeps every stamped `createdAt` and `time` within what a reader accepts,
/// whatever the clock under it reads, and follows it back once it is in range.
#[test]
fn a_bounded_clock_stamps_times_a_reader_accepts() {
    let raw = Arc::new(crate::ManualClock::new(-86_400_000));
    let store = SessionStore::with_known_types(
        Arc::new(crate::BoundedClock::new(Arc::clone(&raw) as Arc<dyn crate::Clock>)),
        super::known(),
    );
    let session = store.create(Some(id("s")), CreateOptions::default()).unwrap();
    assert_eq!(session.header().created_at, 0);
    let before_1970 = append(&session, "turn/start", json!({"turn": 1}));
    raw.set(i64::MAX);
    let far_future = append(&session, "user/message", user_message("m1", "hi"));
    raw.set(1_700_000_000_000);
    let back = append(&session, "turn/end", json!({"turn": 1, "reason": {"kind": "completed"}}));
    assert_eq!([before_1970.time, far_future.time, back.time], [0, crate::MAX_CLOCK_MS, 1_700_000_000_000]);
    for event in session.events().iter() {
        let line = serde_json::to_string(&**event).unwrap();
        assert_eq!(crate::SessionEvent::from_json_line(&line).unwrap().time, event.time, "{line}");
    }
}
