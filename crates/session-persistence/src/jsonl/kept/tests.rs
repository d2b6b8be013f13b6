//! The kept listing's answers against a walk's, after this handle's creations (which walk
//! nothing again) and after changes made behind its back: a session directory moved in, one moved
//! out, a log replaced inside its directory.
//!
//! The checks are `persistence_testkit::answers`' (which the SQLite order's tests use), written
//! again here: a unit test of this crate cannot hand its own `JsonlStore` to the test kit, which
//! links another build of this crate.

use std::{fs, path::Path, sync::Arc, sync::atomic::Ordering};

use session_core::{JsonData, Origin, SessionEvent, SessionHeader, SessionId};
use tokio_util::sync::CancellationToken;

use crate::{Backend, HeaderPage, JsonlConfig, JsonlStore, PageRequest};

fn cancel() -> CancellationToken {
    CancellationToken::new()
}

fn create(store: &JsonlStore, header: &SessionHeader) {
    let event = SessionEvent::new("turn/start", 0, 10, JsonData::from_text(r#"{"turn":1}"#).unwrap());
    store.append_batch(header, &[Arc::new(event)], false).unwrap();
}

/// `id` created at `created_at` in `/w/<cwd>`, of `owner`, a subagent child of `parent`.
fn header(id: &str, created_at: u64, cwd: u32, owner: Option<&str>, parent: Option<&str>) -> SessionHeader {
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

fn walks(store: &JsonlStore) -> u64 {
    store.listings.load(Ordering::Relaxed)
}

/// Every page (filtered ones first), the families of `parents` and `created_since` agree with
/// what a walk of the store answers.
fn check(store: &JsonlStore, parents: &[&str]) {
    let base = PageRequest { limit: 2, ..PageRequest::default() };
    let requests = [
        PageRequest { owner: Some("ann".to_owned()), ..base.clone() },
        PageRequest { cwd: Some("/w/1".to_owned()), require_cwd: true, ..base.clone() },
        PageRequest { exclude_subagents: true, ..base.clone() },
        base,
    ];
    for mut request in requests {
        loop {
            let page = store.list_page(&request, &cancel()).unwrap();
            let walked = HeaderPage::from_listing(store.walk(&cancel()).unwrap(), &request);
            assert_eq!(page, walked, "{request:?}");
            match page.next {
                Some(next) => request.after = Some(next),
                None => break,
            }
        }
    }
    for parent in parents {
        let parent = SessionId::from(*parent);
        let family = store.list_children(&parent, &cancel()).unwrap();
        assert_eq!(family, store.walk(&cancel()).unwrap().family_of(&parent), "the family of {parent}");
    }
    for since in [0, 1_500, u64::MAX] {
        let mut walked = store.walk(&cancel()).unwrap();
        walked.headers.retain(|stored| stored.header.created_at >= since);
        walked.faults.clear();
        assert_eq!(store.created_since(since, &cancel()).unwrap(), walked, "created since {since}");
    }
}

/// Pages, families and `created_since`, without the walks `check` makes to compare.
fn answer_all(store: &JsonlStore) {
    let request = PageRequest { limit: 2, ..PageRequest::default() };
    store.list_page(&request, &cancel()).unwrap();
    store.list_page(&PageRequest { owner: Some("ann".to_owned()), ..request }, &cancel()).unwrap();
    store.list_children(&SessionId::from("p0"), &cancel()).unwrap();
    store.created_since(0, &cancel()).unwrap();
}

fn session_dir(store: &JsonlStore, header: &SessionHeader) -> std::path::PathBuf {
    store.log_path(header).unwrap().parent().unwrap().to_owned()
}

#[test]
fn own_creations_are_kept_without_walking_again() {
    let dir = tempfile::tempdir().unwrap();
    let store = JsonlStore::open(JsonlConfig::new(dir.path())).unwrap();
    create(&store, &header("p0", 1_000, 0, Some("ann"), None));
    answer_all(&store);
    let after_first = walks(&store);
    assert_eq!(after_first, 1, "the first answer walked once");
    for i in 1..12u64 {
        let parent = (i % 3 == 0).then_some("p0");
        create(&store, &header(&format!("s{i:02}"), 1_000 + i * 97 % 1_000, (i % 2) as u32, Some("ann"), parent));
        answer_all(&store);
    }
    // A new project directory (cwd /w/7) moves the root's time: that creation is kept too.
    create(&store, &header("elsewhere", 3_000, 7, None, Some("s03")));
    answer_all(&store);
    assert_eq!(walks(&store), after_first, "this handle's creations walked nothing again");
    check(&store, &["p0", "s03"]);
}

#[test]
fn changes_behind_the_stores_back_walk_again() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("store");
    let store = JsonlStore::open(JsonlConfig::new(&root)).unwrap();
    for (i, owner) in [(0, Some("ann")), (1, None), (2, Some("bob"))] {
        create(&store, &header(&format!("p{i}"), 1_000 + i * 100, 1, owner, None));
    }
    create(&store, &header("c0", 1_050, 1, Some("ann"), Some("p0")));
    check(&store, &["p0"]);

    // A session directory moved in from another store, into an existing project directory.
    let other_root = dir.path().join("other");
    let other = JsonlStore::open(JsonlConfig::new(&other_root)).unwrap();
    let moved = header("moved", 2_000, 1, Some("ann"), Some("p0"));
    create(&other, &moved);
    fs::rename(session_dir(&other, &moved), session_dir(&store, &moved)).unwrap();
    check(&store, &["p0"]);
    let page = store.list_page(&PageRequest { limit: 10, ..PageRequest::default() }, &cancel()).unwrap();
    assert!(page.headers.iter().any(|stored| stored.header.id.as_str() == "moved"));

    // One moved out.
    let gone = header("p1", 1_100, 1, None, None);
    fs::rename(session_dir(&store, &gone), dir.path().join("p1-away")).unwrap();
    check(&store, &["p0"]);

    // A log replaced inside its directory (the project directory's time does not move): the
    // answer that names it reads its header again and walks.
    let replaced = header("p2", 1_200, 1, Some("bob"), None);
    let path = store.log_path(&replaced).unwrap();
    let again = header("p2", 5_000, 1, Some("ann"), None);
    let other_log = other.log_path(&again).unwrap();
    create(&other, &again);
    fs::rename(other_log, &path).unwrap();
    let page = store.list_page(&PageRequest { limit: 10, ..PageRequest::default() }, &cancel()).unwrap();
    let p2 = page.headers.iter().find(|stored| stored.header.id.as_str() == "p2").unwrap();
    assert_eq!(p2.header.created_at, 5_000);
    check(&store, &["p0"]);
}

#[test]
fn a_read_only_handle_walks_for_every_answer() {
    let dir = tempfile::tempdir().unwrap();
    let writer = JsonlStore::open(JsonlConfig::new(dir.path())).unwrap();
    create(&writer, &header("p0", 1_000, 0, Some("ann"), None));
    let reader = JsonlStore::open_read_only(JsonlConfig::new(dir.path())).unwrap();
    check(&reader, &["p0"]);
    create(&writer, &header("c0", 1_500, 0, Some("ann"), Some("p0")));
    let before = walks(&reader);
    answer_all(&reader);
    assert_eq!(walks(&reader), before + 4, "one walk per answer");
    check(&reader, &["p0"]);
    assert!(Path::new(dir.path()).is_dir());
}
