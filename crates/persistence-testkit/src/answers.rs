//! Checks for a backend that answers pages, families and `created_since` from an index of its own
//! (SQLite's in-memory order, JSONL's kept listing): after each change a test makes, every answer
//! must be what the whole listing gives.

use std::sync::Arc;

use session_core::{JsonData, Origin, SessionEvent, SessionHeader, SessionId};
use session_persistence::{Backend, HeaderPage, PageRequest};
use tokio_util::sync::CancellationToken;

/// A header of `id` created at `created_at` in `/w/<cwd>`, of `owner`, and (with `parent`) a
/// subagent child of `parent`.
pub fn listed_header(id: &str, created_at: u64, cwd: u32, owner: Option<&str>, parent: Option<&str>) -> SessionHeader {
    let mut header = SessionHeader::new(SessionId::from(id), created_at);
    header.cwd = Some(format!("/w/{cwd}"));
    header.owner = owner.map(str::to_owned);
    if let Some(parent) = parent {
        header.parent_session = Some(SessionId::from(parent));
        header.origin = Some(Origin::Subagent);
        header.delegation_depth = 1;
    }
    header
}

/// Stores `header`'s session with one event, straight through the backend (its first batch).
pub fn create_session(backend: &dyn Backend, header: &SessionHeader) {
    let event = SessionEvent::new("turn/start", 0, 10, JsonData::from_text(r#"{"turn":1}"#).unwrap());
    backend.append_batch(header, &[Arc::new(event)], false).unwrap();
}

/// Every page of a few requests (filtered ones first: a page that reads every row would find a
/// stale entry by itself), the families of `parents` and `created_since` at a few times, each
/// against what the whole listing ([`Backend::list`]) gives: a page's headers, children and next
/// key (faults aside: a page cut from a listing reports none), a family whole.
pub fn check_answers_agree_with_the_listing(backend: &dyn Backend, parents: &[&str]) {
    let cancel = CancellationToken::new();
    let base = PageRequest { limit: 2, ..PageRequest::default() };
    let requests = [
        PageRequest { owner: Some("ann".to_owned()), ..base.clone() },
        PageRequest { cwd: Some("/w/1".to_owned()), require_cwd: true, ..base.clone() },
        PageRequest { exclude_subagents: true, ..base.clone() },
        base.clone(),
        PageRequest { limit: 1000, ..base },
    ];
    for mut request in requests {
        loop {
            let page = backend.list_page(&request, &cancel).unwrap();
            let expected = HeaderPage::from_listing(backend.list(&cancel).unwrap(), &request);
            assert_eq!(page.headers, expected.headers, "{request:?}");
            assert_eq!(page.children, expected.children, "{request:?}");
            assert_eq!(page.next, expected.next, "{request:?}");
            match page.next {
                Some(next) => request.after = Some(next),
                None => break,
            }
        }
    }
    for parent in parents {
        let parent = SessionId::from(*parent);
        let family = backend.list_children(&parent, &cancel).unwrap();
        assert_eq!(family, backend.list(&cancel).unwrap().family_of(&parent), "the family of {parent}");
    }
    for since in [0, 1_500, 3_000, u64::MAX] {
        let mut expected = backend.list(&cancel).unwrap();
        expected.headers.retain(|stored| stored.header.created_at >= since);
        expected.faults.clear();
        assert_eq!(backend.created_since(since, &cancel).unwrap(), expected, "created since {since}");
    }
}
