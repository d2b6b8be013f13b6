//! Cancellation at every checkpoint of reference 03 §5.9 (cases 36–40 and 52 of §9.1): each
//! observed abort fails the listing with `CANCELLED` (`subagent listing was cancelled`), a
//! backend's own cancellation error never escapes, and reads still in flight are aborted.

use std::time::Duration;

use serde_json::json;

use crate::support::*;

/// (d): a cancellation observed after the cache rung, before the read.
#[test]
fn a_cancellation_after_the_cache_rung_reads_nothing() {
    run_each(&NO_CACHE, async |h| {
        two_cold_children(h).await;
        let cancel = token();
        let runtime = h.runtime_with_cache(Some(StubCache::cancelling("a", Stub::Nothing, cancel.clone())));
        assert_cancelled(runtime.list_children(&id("p"), &cancel).await);
        assert_eq!(h.reads("a"), 0);
    });
}

/// (g): a listing whose rows all came from the cache (no read at all) still observes a
/// cancellation at its end.
#[test]
fn a_cancellation_is_observed_after_every_row_resolved() {
    run_each(&NO_CACHE, async |h| {
        h.author(child_header("c", "p"), child_events(continuable("on disk"))).await;
        let cancel = token();
        let hit = Stub::Value(json!({"mode": "continuable", "label": "cached", "seq": 2}));
        let runtime = h.runtime_with_cache(Some(StubCache::cancelling("c", hit, cancel.clone())));
        assert_cancelled(runtime.list_children(&id("p"), &cancel).await);
        assert_cancelled(runtime.list_descendants(&id("p"), &cancel).await);
        assert_eq!(h.reads("c"), 0);
    });
}

/// Structured concurrency: a listing that goes away (here: its task is aborted) cancels the
/// token of every read it still had in flight, so no read keeps running detached.
#[test]
fn a_dropped_listing_aborts_its_reads_in_flight() {
    run_each(&NO_CACHE, async |h| {
        two_cold_children(h).await;
        h.persistence.set_read_fault("a", Some(ReadFault::PendUntilCancelled));
        h.persistence.set_read_fault("b", Some(ReadFault::PendUntilCancelled));
        let caller = token();
        let listing = spawn_children(h.runtime.clone(), caller.clone());
        h.persistence.wait_entered("a").await;
        h.persistence.wait_entered("b").await;
        listing.abort();
        for child in ["a", "b"] {
            let read_token = h.persistence.token_of(child).unwrap();
            tokio::time::timeout(Duration::from_secs(30), read_token.cancelled())
                .await
                .expect("the read's token is cancelled when the listing goes away");
        }
        assert!(!caller.is_cancelled(), "the caller's own token is left alone");
    });
}

/// A read that reports the cancellation first and a sibling still pending: the listing fails at
/// once and the sibling's read is aborted too.
#[test]
fn one_cancelled_read_aborts_the_others() {
    run_each(&NO_CACHE, async |h| {
        two_cold_children(h).await;
        h.persistence.set_read_fault("b", Some(ReadFault::PendUntilCancelled));
        let cancel = token();
        let listing = spawn_children(h.runtime.clone(), cancel.clone());
        h.persistence.wait_entered("b").await;
        cancel.cancel();
        assert_cancelled(listing.await.unwrap());
        assert!(h.persistence.token_of("b").unwrap().is_cancelled());
    });
}
