//! The indexed queries answer what the defaults over `list()` answer: a parent's family (one
//! grandchild per child at most), and newest-first pages with their cursors under every filter.

use std::sync::Arc;

use session_core::{JsonData, Origin, SessionEvent, SessionHeader, SessionId};
use session_persistence::{Backend, HeaderPage, PageKey, PageRequest};
use tokio_util::sync::CancellationToken;

use crate::TestSchema;

fn store_session(store: &dyn Backend, id: &str, created_at: u64, parent: Option<&str>, owner: Option<&str>, cwd: bool) {
    let mut header = SessionHeader::new(SessionId::from(id), created_at);
    header.cwd = cwd.then(|| "/w".to_owned());
    header.parent_session = parent.map(SessionId::from);
    header.origin = parent.map(|_| Origin::Subagent);
    header.delegation_depth = u64::from(parent.is_some());
    header.owner = owner.map(str::to_owned);
    let event = Arc::new(SessionEvent::new("test/n", 0, 1, JsonData::from_text("1").unwrap()));
    store.append_batch(&header, &[event], false).unwrap();
}

fn ids(headers: &[session_persistence::StoredHeader]) -> Vec<&str> {
    headers.iter().map(|stored| stored.header.id.as_str()).collect()
}

#[test]
fn a_family_is_the_parent_its_children_and_one_child_of_each() {
    let Some(schema) = TestSchema::new() else { return };
    let store = schema.open();
    store_session(&store, "p", 1, None, None, true);
    store_session(&store, "other", 2, None, None, true);
    for child in ["c1", "c2", "c3"] {
        store_session(&store, child, 3, Some("p"), None, true);
    }
    store_session(&store, "g1", 4, Some("c1"), None, true);
    store_session(&store, "g2", 4, Some("c1"), None, true);
    store_session(&store, "gg", 5, Some("g1"), None, true);
    store_session(&store, "x", 6, Some("other"), None, true);
    let cancel = CancellationToken::new();
    let family = store.list_children(&SessionId::from("p"), &cancel).unwrap();
    assert_eq!(ids(&family.headers), ["c1", "c2", "c3", "g1", "p"]);
    assert!(family.faults.is_empty());
    let default = store.list(&cancel).unwrap().family_of(&SessionId::from("p"));
    assert_eq!(ids(&default.headers), ["c1", "c2", "c3", "g1", "g2", "p"]);
    assert!(store.list_children(&SessionId::from("nobody"), &cancel).unwrap().headers.is_empty());
}

#[test]
fn pages_follow_the_newest_first_order_with_cursors_under_every_filter() {
    let Some(schema) = TestSchema::new() else { return };
    let store = schema.open();
    let owners = [None, Some("ann"), Some("bob")];
    for n in 0..40u64 {
        // Ties on createdAt are ordered by id.
        store_session(&store, &format!("s{n:02}"), 100 + n / 3, None, owners[(n % 3) as usize], n % 7 != 0);
    }
    let cancel = CancellationToken::new();
    for owner in [None, Some("ann".to_owned()), Some("bob".to_owned())] {
        for require_cwd in [false, true] {
            for limit in [1, 4, 7, 40, 100] {
                let mut after: Option<PageKey> = None;
                let mut paged = Vec::new();
                loop {
                    let request = PageRequest {
                        after: after.clone(),
                        limit,
                        owner: owner.clone(),
                        require_cwd,
                        ..PageRequest::default()
                    };
                    let page = store.list_page(&request, &cancel).unwrap();
                    let expected = HeaderPage::from_listing(store.list(&cancel).unwrap(), &request);
                    assert_eq!(ids(&page.headers), ids(&expected.headers), "{request:?}");
                    assert_eq!(page.next, expected.next, "{request:?}");
                    paged.extend(page.headers.iter().map(|stored| stored.header.id.to_string()));
                    match page.next {
                        Some(next) => after = Some(next),
                        None => break,
                    }
                }
                let all = HeaderPage::from_listing(
                    store.list(&cancel).unwrap(),
                    &PageRequest {
                        after: None,
                        limit: usize::MAX,
                        owner: owner.clone(),
                        require_cwd,
                        ..PageRequest::default()
                    },
                );
                assert_eq!(paged, ids(&all.headers), "owner {owner:?} cwd {require_cwd} limit {limit}");
            }
        }
    }
}
