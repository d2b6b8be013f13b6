//! Cancellation at every checkpoint of reference 03 §5.9 (cases 36–40 and 52 of §9.1): each
//! observed abort fails the listing with `CANCELLED` (`subagent listing was cancelled`), a
//! backend's own cancellation error never escapes, and reads still in flight are aborted.

use super::support::*;

/// (a), cases 36 and 52: a token cancelled before the call performs no read at all, even with a
/// persistence listing rigged to fail.
#[test]
fn a_pre_cancelled_listing_reads_nothing() {
    run(async |h| {
        two_cold_children(h).await;
        h.persistence.set_list_fault(ListFault::Fail("must not be called"));
        let cancel = token();
        cancel.cancel();
        assert_cancelled(h.runtime.list_children(&id("p"), &cancel).await);
        assert_cancelled(h.runtime.list_descendants(&id("p"), &cancel).await);
        assert_eq!(h.persistence.lists(), 0);
        assert_eq!(h.persistence.total_reads(), 0);
    });
}

/// (b), case 37: a cancellation while `persistence.list` is pending, with a backend that rejects
/// with its own cancellation error.
#[test]
fn a_cancellation_during_the_persistence_listing_is_cancelled() {
    run(async |h| {
        two_cold_children(h).await;
        h.persistence.set_list_fault(ListFault::PendUntilCancelled);
        let cancel = token();
        let listing = spawn_children(h.runtime.clone(), cancel.clone());
        h.persistence.wait_listed().await;
        cancel.cancel();
        assert_cancelled(listing.await.unwrap());
        assert_eq!(h.persistence.total_reads(), 0);
    });
}

/// (c): a cancellation observed right after `persistence.list` resolved.
#[test]
fn a_cancellation_after_the_persistence_listing_is_cancelled() {
    run(async |h| {
        two_cold_children(h).await;
        let cancel = token();
        h.persistence.set_list_fault(ListFault::CancelThenOk(cancel.clone()));
        assert_cancelled(h.runtime.list_children(&id("p"), &cancel).await);
        assert_eq!(h.persistence.total_reads(), 0);
    });
}

/// (e), case 38: a cancellation while a cold read is pending.
#[test]
fn a_cancellation_during_a_cold_read_is_cancelled() {
    run(async |h| {
        two_cold_children(h).await;
        h.persistence.set_read_fault("a", Some(ReadFault::PendUntilCancelled));
        let cancel = token();
        let listing = spawn_children(h.runtime.clone(), cancel.clone());
        h.persistence.wait_entered("a").await;
        cancel.cancel();
        assert_cancelled(listing.await.unwrap());
    });
}

/// (e), case 40: a read that fails because of the cancellation is CANCELLED, not `unavailable`.
#[test]
fn a_read_failing_with_the_cancellation_is_not_unavailable() {
    run(async |h| {
        two_cold_children(h).await;
        let cancel = token();
        h.persistence.set_read_fault("a", Some(ReadFault::CancelThenFail(cancel.clone())));
        assert_cancelled(h.runtime.list_children(&id("p"), &cancel).await);
    });
}

/// (f), case 39: a cancellation observed right after a successful read still fails the listing.
#[test]
fn a_cancellation_after_a_successful_read_is_cancelled() {
    run(async |h| {
        two_cold_children(h).await;
        let cancel = token();
        h.persistence.set_read_fault("b", Some(ReadFault::CancelAfterOk(cancel.clone())));
        assert_cancelled(h.runtime.list_children(&id("p"), &cancel).await);
    });
}
