//! Interleaving tests of the publication protocol: a second publish and a foreign attachment
//! refused, an append from inside an observer of the same session refused (another session's
//! allowed), a detach from inside an announcement deferred until it unwinds, and concurrent
//! appenders published in seq order.

use std::{sync::Arc, thread};

use parking_lot::Mutex;
use serde_json::json;

use crate::{
    CreateOptions, SessionError, StoreEvent, SurfaceIntent,
    tests::{
        Recorder, append, describe, detached, id, lines, observer, store as store_with_nothing, take, user_message,
    },
};

#[test]
fn publish_twice_and_foreign_attachment_are_rejected() {
    let store = store_with_nothing();
    let session = store.create(Some(id("p")), CreateOptions::default()).unwrap();
    assert_eq!(store.publish(&session).unwrap_err().to_string(), "session \"p\" was already announced");
    let other_instance = detached("p");
    assert_eq!(store.publish(&other_instance).unwrap_err().to_string(), "session \"p\" already exists");
    let other_store = store_with_nothing();
    assert_eq!(other_store.publish(&session).unwrap_err().to_string(), "session \"p\" is already attached to a store");
}

#[test]
fn appends_from_inside_an_observer_are_rejected() {
    let store = Arc::new(store_with_nothing());
    let outcomes = lines();
    let recorded = Arc::clone(&outcomes);
    let store_in_observer = Arc::downgrade(&store);
    store.add_observer(observer(move |event| {
        let session = match event {
            StoreEvent::Created(session) | StoreEvent::Event(session, _) => session,
            StoreEvent::Disposed(_) => return Ok(()),
        };
        if session.id().as_str() != "main" {
            return Ok(());
        }
        let own = session.append("plugin/echo", &json!({}), None).map(|_| ()).map_err(|err| err.to_string());
        recorded.lock().push(format!("{}: {own:?}", describe(event)));
        // Appending to another session from inside the callback is fine.
        if let Some(store) = store_in_observer.upgrade()
            && let Some(other) = store.get(&id("other"))
        {
            other.append("plugin/echo", &json!({}), None)?;
        }
        Ok(())
    }));
    let other = store.create(Some(id("other")), CreateOptions::default()).unwrap();
    let session = store.create(Some(id("main")), CreateOptions::default()).unwrap();
    append(&session, "turn/start", json!({"turn": 1}));
    let reentrant = Err::<(), _>(SessionError::Reentrant.to_string());
    assert_eq!(
        take(&outcomes),
        [format!("created main: {reentrant:?}"), format!("event main 0 turn/start: {reentrant:?}")]
    );
    assert_eq!(session.len(), 1);
    assert_eq!(other.len(), 2);
}

#[test]
fn detach_inside_a_publication_is_deferred_until_it_unwinds() {
    let store = Arc::new(store_with_nothing());
    let lines = lines();
    let weak_store = Arc::downgrade(&store);
    let detach_lines = Arc::clone(&lines);
    store.add_observer(observer(move |event| {
        detach_lines.lock().push(format!("detacher: {}", describe(event)));
        if let StoreEvent::Event(session, event) = event
            && event.kind == "turn/end"
            && let Some(store) = weak_store.upgrade()
        {
            let returned = store.detach(session.id());
            assert!(returned.is_some(), "the session is returned at once");
            assert!(store.contains(session.id()), "removal waits for the publication to unwind");
        }
        Ok(())
    }));
    store.add_observer(Recorder::new("later", &lines));
    let session = store.create(Some(id("d")), CreateOptions::default()).unwrap();
    append(&session, "turn/end", json!({"turn": 1, "reason": {"kind": "completed"}}));
    assert!(!store.contains(&id("d")));
    assert_eq!(
        take(&lines),
        [
            "detacher: created d",
            "later: created d",
            "detacher: event d 0 turn/end",
            "later: event d 0 turn/end",
            "detacher: disposed d",
            "later: disposed d",
        ]
    );

    // A detach from a creation observer takes effect once the announcement unwinds.
    let weak_store = Arc::downgrade(&store);
    store.add_observer(observer(move |event| {
        if let StoreEvent::Created(session) = event
            && session.id().as_str() == "short"
            && let Some(store) = weak_store.upgrade()
        {
            store.detach(session.id());
        }
        Ok(())
    }));
    let short = store.create(Some(id("short")), CreateOptions::default()).unwrap();
    assert!(!short.is_attached());
    assert!(!store.contains(&id("short")));
    let heard: Vec<String> = take(&lines).into_iter().filter(|line| line.starts_with("later")).collect();
    assert_eq!(heard, ["later: created short", "later: disposed short"]);
}

#[test]
fn concurrent_appenders_publish_in_seq_order() {
    let store = store_with_nothing();
    let seqs = Arc::new(Mutex::new(Vec::new()));
    let recorded = Arc::clone(&seqs);
    store.add_observer(observer(move |event| {
        if let StoreEvent::Event(_, event) = event {
            recorded.lock().push(event.seq);
        }
        Ok(())
    }));
    let session = store.create(Some(id("busy")), CreateOptions::default()).unwrap();
    thread::scope(|scope| {
        for _ in 0..4 {
            scope.spawn(|| {
                for _ in 0..100 {
                    session.append("user/message", &user_message("m", "x"), Some(SurfaceIntent::append())).unwrap();
                }
            });
        }
    });
    assert_eq!(*seqs.lock(), (0..400).collect::<Vec<u64>>());
    assert!(session.events().iter().enumerate().all(|(idx, event)| event.seq == idx as u64));
}
