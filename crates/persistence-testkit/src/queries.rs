//! The persistence contract's cases for the queries a backend may answer its own way
//! (`list_children`, `list_page`, `header`, `survey`): each checked, through the coordinator or
//! on the backend itself, against what the whole listing and a scan say.

use std::{collections::BTreeSet, sync::Arc};

use serde_json::json;
use session_core::{Origin, SessionEvent, SessionHeader, SessionId};
use session_persistence::{
    Backend, CollectSink, Coordinator, Listing, PageKey, PageRequest, PersistenceError, SessionPersistence,
    StoredHeader,
};

use crate::persistence::{Cx, cancel, plain};

/// A small seeded generator (SplitMix64), so a failing tree is the same tree on every run.
struct Seeded(u64);

impl Seeded {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number below `n`.
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// One of `items`.
    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len() as u64) as usize]
    }
}

const OWNERS: [Option<&str>; 3] = [None, Some("alice"), Some("bob")];

/// A closed turn: what makes a created session stored (and listable).
fn turn() -> Vec<Arc<SessionEvent>> {
    vec![
        plain("turn/start", 0, json!({"turn": 1})),
        plain("turn/end", 1, json!({"turn": 1, "reason": {"kind": "completed"}})),
    ]
}

/// Stores `header` with one closed turn.
async fn store(persistence: &Coordinator, header: SessionHeader) {
    let id = header.id.clone();
    persistence.create(header, &cancel()).await.unwrap();
    persistence.append(&id, turn(), &cancel()).await.unwrap();
}

/// Runs `call` on the coordinator's backend on a thread of its own, as the coordinator calls a
/// backend (on the blocking pool): a backend may block on a runtime of its own.
fn on_backend<T: Send>(persistence: &Coordinator, call: impl FnOnce(&dyn Backend) -> T + Send) -> T {
    let backend = persistence.backend();
    std::thread::scope(|scope| match scope.spawn(|| call(&**backend)).join() {
        Ok(value) => value,
        Err(payload) => std::panic::resume_unwind(payload),
    })
}

/// What two listings of one log must agree on: its header and its revision.
fn same_log(a: &StoredHeader, b: &StoredHeader) -> bool {
    a.header == b.header && a.revision == b.revision
}

fn ids(headers: &[StoredHeader]) -> Vec<&str> {
    headers.iter().map(|stored| stored.header.id.as_str()).collect()
}

/// Stores a random forest of `n` sessions per seed: each one a root, a child of an earlier
/// session of its seed, or a child of a parent that is not stored; mostly subagent children,
/// with random owners and creation times.
async fn store_random_forest(persistence: &Coordinator, seeds: &[u64], n: u64) -> Vec<SessionId> {
    let mut stored = Vec::new();
    for &seed in seeds {
        let mut random = Seeded(seed);
        let mut tree: Vec<SessionId> = Vec::new();
        for idx in 0..n {
            let id = SessionId::from(format!("t{seed}-{idx:02}"));
            let mut header = SessionHeader::new(id.clone(), 1_000 + random.below(5));
            header.cwd = Some("/work/project".to_owned());
            header.owner = random.pick(&OWNERS).map(str::to_owned);
            header.parent_session = match random.below(10) {
                _ if tree.is_empty() => None,
                0 | 1 => None,
                2 => Some(SessionId::from(format!("gone{seed}"))),
                _ => Some(random.pick(&tree).clone()),
            };
            if header.parent_session.is_some() && random.below(5) != 0 {
                header.origin = Some(Origin::Subagent);
                header.delegation_depth = 1;
            }
            store(persistence, header).await;
            tree.push(id);
        }
        stored.extend(tree);
    }
    stored
}

/// Checks one `list_children` answer against the whole listing's family of `parent`: the parent
/// and its children exactly; of the children's children only sessions of the family, and of each
/// child's subagent children at least one per owner (what a backend with an index may cut it to).
fn check_family(parent: &SessionId, family: &Listing, answer: &Listing) {
    let is_child = |stored: &&StoredHeader| stored.header.parent_session.as_ref() == Some(parent);
    let near = |listing: &Listing| -> Vec<StoredHeader> {
        listing.headers.iter().filter(|stored| &stored.header.id == parent || is_child(stored)).cloned().collect()
    };
    let (want, got) = (near(family), near(answer));
    assert_eq!(ids(&got), ids(&want), "the parent {parent} and its children");
    assert!(want.iter().zip(&got).all(|(want, got)| same_log(want, got)), "{parent}: headers and revisions");
    for stored in &answer.headers {
        let listed = family.headers.iter().find(|listed| listed.header.id == stored.header.id);
        assert!(
            listed.is_some_and(|listed| same_log(listed, stored)),
            "{parent}: list_children answered {}, which is not in the listing's family as it is",
            stored.header.id
        );
    }
    let children: BTreeSet<&SessionId> = want.iter().filter(|stored| is_child(stored)).map(|s| &s.header.id).collect();
    let subagent_children_of = |listing: &Listing| -> BTreeSet<(SessionId, Option<String>)> {
        listing
            .headers
            .iter()
            .map(|stored| &stored.header)
            .filter(|header| header.origin == Some(Origin::Subagent))
            .filter(|header| header.parent_session.as_ref().is_some_and(|up| children.contains(up)))
            .map(|header| (header.parent_session.clone().unwrap(), header.owner.clone()))
            .collect()
    };
    assert_eq!(
        subagent_children_of(answer),
        subagent_children_of(family),
        "{parent}: of each child's subagent children, at least one per owner"
    );
    assert_eq!(answer.faults, family.faults, "{parent}: the faults of the family");
    let sorted = answer.headers.windows(2).all(|pair| pair[0].header.id < pair[1].header.id);
    assert!(sorted, "{parent}: sorted by id: {:?}", ids(&answer.headers));
}

/// `list_children` is `list()` filtered to the family ([`Listing::family_of`]), over random trees,
/// for every stored session as the parent and for parents that are not stored.
pub(crate) async fn list_children_is_the_family_of_the_listing_over_random_trees(h: &Cx<'_>) {
    let persistence = h.open();
    let seeds = [7, 1_009, 65_537];
    let mut parents = store_random_forest(&persistence, &seeds, 14).await;
    parents.extend(seeds.iter().map(|seed| SessionId::from(format!("gone{seed}"))));
    parents.push(SessionId::from("missing"));
    let listing = persistence.list_snapshots(&cancel()).await.unwrap();
    for parent in &parents {
        let answer = persistence.list_children(parent, &cancel()).await.unwrap();
        let family = Listing { headers: listing.headers.clone(), faults: Vec::new() }.family_of(parent);
        check_family(parent, &family, &answer);
    }
    let cancelled = cancel();
    cancelled.cancel();
    let err = persistence.list_children(&parents[0], &cancelled).await.unwrap_err();
    assert!(matches!(err, PersistenceError::Cancelled), "{err:?}");
}

/// Pages of `list_page`, each after the previous one's `next`, concatenate to the whole listing
/// filtered by the request and in newest-first order, for every filter and page size.
pub(crate) async fn list_page_pages_concatenate_to_the_newest_first_listing(h: &Cx<'_>) {
    let persistence = h.open();
    let mut random = Seeded(42);
    for idx in 0..13 {
        // Few creation times, so ties are ordered by id; ids out of creation order.
        let mut header = SessionHeader::new(SessionId::from(format!("p-{}", (idx * 7) % 13)), 2_000 + random.below(4));
        header.cwd = match random.below(4) {
            0 => None,
            1 => Some("/work/other".to_owned()),
            _ => Some("/work/project".to_owned()),
        };
        header.owner = random.pick(&OWNERS).map(str::to_owned);
        if idx % 3 == 1 {
            header.parent_session = Some(SessionId::from("p-0"));
            header.origin = Some(Origin::Subagent);
            header.delegation_depth = 1;
        }
        store(&persistence, header).await;
    }
    let listing = persistence.list_snapshots(&cancel()).await.unwrap();
    let filters = [(false, None), (true, None), (false, Some("/work/project")), (true, Some("/work/other"))];
    for owner in [None, Some("alice"), Some("bob"), Some("nobody")] {
        for (require_cwd, (exclude_subagents, cwd)) in
            [false, true].into_iter().flat_map(|require_cwd| filters.map(|filter| (require_cwd, filter)))
        {
            let filter = PageRequest {
                after: None,
                limit: 0,
                owner: owner.map(str::to_owned),
                require_cwd,
                exclude_subagents,
                cwd: cwd.map(str::to_owned),
            };
            let mut want: Vec<StoredHeader> =
                listing.headers.iter().filter(|stored| filter.admits(&stored.header)).cloned().collect();
            want.sort_by_key(|stored| PageKey::of(&stored.header));
            for limit in [1, 2, 5, 100] {
                let what = format!(
                    "owner {owner:?}, require_cwd {require_cwd}, exclude_subagents {exclude_subagents}, cwd {cwd:?}, \
                     limit {limit}"
                );
                let mut request = PageRequest { limit, ..filter.clone() };
                let mut got = Vec::new();
                for _ in 0..=want.len() + 1 {
                    let page = persistence.list_page(&request, &cancel()).await.unwrap();
                    assert!(page.headers.len() <= limit, "{what}: a page holds at most its limit");
                    assert_eq!(page.faults, Vec::new(), "{what}: no log is damaged");
                    let mut kids: std::collections::BTreeMap<SessionId, Vec<SessionId>> = Default::default();
                    for stored in &listing.headers {
                        let header = &stored.header;
                        let parent = header.parent_session.as_ref().filter(|parent| {
                            header.is_subagent()
                                && (owner.is_none() || header.owner.as_deref() == owner)
                                && page.headers.iter().any(|on_page| &on_page.header.id == *parent)
                        });
                        if let Some(parent) = parent {
                            kids.entry(parent.clone()).or_default().push(header.id.clone());
                        }
                    }
                    kids.values_mut().for_each(|ids| ids.sort());
                    assert_eq!(page.children, kids, "{what}: the page's stored subagent children, by owner");
                    got.extend(page.headers);
                    match page.next {
                        Some(next) => request.after = Some(next),
                        None => break,
                    }
                }
                assert_eq!(ids(&got), ids(&want), "{what}: the pages are the newest-first listing");
                assert!(want.iter().zip(&got).all(|(want, got)| same_log(want, got)), "{what}: headers and revisions");
            }
        }
    }
    let cancelled = cancel();
    cancelled.cancel();
    let request = PageRequest { limit: 3, ..PageRequest::default() };
    let err = persistence.list_page(&request, &cancelled).await.unwrap_err();
    assert!(matches!(err, PersistenceError::Cancelled), "{err:?}");
}

/// The header and revision a scan of `id` reports, read on the backend itself.
fn scanned(persistence: &Coordinator, id: &SessionId) -> Option<(Arc<SessionHeader>, session_persistence::Revision)> {
    on_backend(persistence, |backend| {
        let outcome = backend.scan(id, &cancel(), &mut CollectSink::default()).unwrap();
        outcome.map(|outcome| (outcome.header, outcome.revision))
    })
}

/// `stored_header` (the backend's `header`) is the header and revision a scan and the listing
/// report, follows an append, and is `None` for an id that is not stored (or only created).
pub(crate) async fn stored_header_matches_the_scanned_header_and_revision(h: &Cx<'_>) {
    let persistence = h.open();
    let mut child = SessionHeader::new(SessionId::from("h-child"), 3_000);
    child.cwd = Some("/work/project".to_owned());
    child.parent_session = Some(SessionId::from("h-root"));
    child.origin = Some(Origin::Subagent);
    child.delegation_depth = 1;
    child.owner = Some("alice".to_owned());
    child.agent_preset = Some("reviewer".to_owned());
    let mut root = SessionHeader::new(SessionId::from("h-root"), 2_000);
    root.cwd = Some("/work/project".to_owned());
    store(&persistence, root).await;
    store(&persistence, child).await;
    store(&persistence, SessionHeader::new(SessionId::from("h-bare"), 1_000)).await;
    persistence.create(SessionHeader::new(SessionId::from("h-created"), 1), &cancel()).await.unwrap();

    let check = async |id: &SessionId| {
        let stored = persistence.stored_header(id, &cancel()).await.unwrap().expect("a stored log has a header");
        let (header, revision) = scanned(&persistence, id).expect("a stored log scans");
        assert_eq!(stored.header, header, "{id}: the scanned header");
        assert_eq!(stored.revision, revision, "{id}: the scanned revision");
        let direct = on_backend(&persistence, |backend| backend.header(id, &cancel()).unwrap());
        assert!(direct.is_some_and(|direct| same_log(&direct, &stored)), "{id}: Backend::header");
        let listing = persistence.list_snapshots(&cancel()).await.unwrap();
        let listed = listing.headers.iter().find(|listed| &listed.header.id == id).expect("listed");
        assert!(same_log(listed, &stored), "{id}: the listing's header and revision");
        stored
    };
    for name in ["h-root", "h-child", "h-bare"] {
        check(&SessionId::from(name)).await;
    }
    let id = SessionId::from("h-root");
    let before = check(&id).await;
    let more = vec![
        plain("turn/start", 2, json!({"turn": 2})),
        plain("turn/end", 3, json!({"turn": 2, "reason": {"kind": "completed"}})),
    ];
    persistence.append(&id, more, &cancel()).await.unwrap();
    let after = check(&id).await;
    assert_ne!(after.revision, before.revision, "an append changes the revision stored_header reports");
    assert_eq!(after.header, before.header);

    for name in ["h-created", "missing"] {
        let id = SessionId::from(name);
        assert_eq!(persistence.stored_header(&id, &cancel()).await.unwrap(), None, "{name} is not stored");
        assert_eq!(on_backend(&persistence, |backend| backend.header(&id, &cancel()).unwrap()), None, "{name}");
    }
    let cancelled = cancel();
    cancelled.cancel();
    let err = persistence.stored_header(&id, &cancelled).await.unwrap_err();
    assert!(matches!(err, PersistenceError::Cancelled), "{err:?}");
}

/// `survey` reports every log `list` does: each listed header as a readable entry with its
/// revision, each fault as an unreadable one, no readable log that `list` leaves out, in id order.
pub(crate) async fn survey_covers_the_listing(h: &Cx<'_>) {
    let persistence = h.open();
    assert!(on_backend(&persistence, |backend| backend.survey(&cancel()).unwrap()).is_empty(), "an empty store");
    store_random_forest(&persistence, &[3], 6).await;
    let (listing, survey) = on_backend(&persistence, |backend| {
        let mut listing = backend.list(&cancel()).unwrap();
        listing.sort();
        (listing, backend.survey(&cancel()).unwrap())
    });
    assert_eq!(listing.headers.len(), 6);
    for stored in &listing.headers {
        let entry = survey.iter().find(|entry| entry.id == stored.header.id);
        let Some(Ok(surveyed)) = entry.map(|entry| entry.header.as_ref()) else {
            panic!("the survey reports {} as readable: {entry:?}", stored.header.id)
        };
        assert!(same_log(surveyed, stored), "{}: header and revision", stored.header.id);
    }
    for fault in &listing.faults {
        let entry = survey.iter().find(|entry| entry.id == fault.id && entry.header.is_err());
        assert!(entry.is_some(), "the survey reports the fault of {}", fault.id);
    }
    let readable: Vec<&str> =
        survey.iter().filter(|entry| entry.header.is_ok()).map(|entry| entry.id.as_str()).collect();
    assert_eq!(readable, ids(&listing.headers), "the survey's readable logs are the listed ones, in id order");
    assert!(survey.windows(2).all(|pair| pair[0].id <= pair[1].id), "the survey is in id order");
}
