//! Scoped listings (`list_children_in`, `list_child_in`, `list_descendants_in`): one
//! enumeration, authorized before any read. A parent outside the scope lists like an unknown one
//! and costs no log read; a child outside the scope is left out before its read.

use serde_json::json;
use session_core::SessionHeader;
use subagent::Scope;

use crate::support::*;

fn owned(mut header: SessionHeader, owner: &str) -> SessionHeader {
    header.owner = Some(owner.to_owned());
    header
}

fn owner_is(owner: &'static str) -> impl Fn(&SessionHeader) -> bool + Send + Sync {
    move |header: &SessionHeader| header.owner.as_deref() == Some(owner)
}

#[test]
fn a_scoped_listing_authorizes_before_it_reads() {
    run_each(&NO_CACHE, async |h| {
        h.author(owned(plain_header("p", 1), "alice"), stored_turn(0, 1)).await;
        h.author(owned(child_header("mine", "p"), "alice"), child_events(continuable("mine"))).await;
        h.author(owned(child_header("theirs", "p"), "bob"), child_events(continuable("theirs"))).await;
        let alice = owner_is("alice");
        let bob = owner_is("bob");

        // Alice sees her parent and her child only; bob's child is not read.
        let rows = h.runtime.list_children_in(&id("p"), Scope::Only(&alice), &token()).await.unwrap();
        assert_eq!(
            serde_json::to_value(&rows).unwrap(),
            json!([{"kind": "child", "id": "mine", "mode": "continuable", "label": "mine", "activity": "inactive", "hasChildren": false}])
        );
        assert_eq!((h.reads("mine"), h.reads("theirs")), (1, 0));

        // Bob may not see the parent: nothing is listed and nothing is read, exactly as for an
        // unknown parent.
        let lists = h.persistence.lists();
        let rows = h.runtime.list_children_in(&id("p"), Scope::Only(&bob), &token()).await.unwrap();
        assert!(rows.is_empty());
        let unknown = h.runtime.list_children_in(&id("nobody"), Scope::Only(&bob), &token()).await.unwrap();
        assert!(unknown.is_empty());
        assert_eq!((h.reads("mine"), h.reads("theirs")), (1, 0), "no log was read for bob");
        assert_eq!(h.persistence.lists(), lists + 2, "one enumeration per listing");
        let child = h.runtime.list_child_in(&id("p"), &id("theirs"), Scope::Only(&bob), &token()).await.unwrap();
        assert!(child.is_none());
        assert!(h.runtime.list_descendants_in(&id("p"), Scope::Only(&bob), &token()).await.unwrap().is_empty());
        assert_eq!(h.reads("theirs"), 0);

        // The operator tier sees both, as the unscoped listing does.
        let all = h.runtime.list_children_in(&id("p"), Scope::All, &token()).await.unwrap();
        assert_eq!(all, h.list("p").await);
        assert_eq!(all.len(), 2);
    });
}
