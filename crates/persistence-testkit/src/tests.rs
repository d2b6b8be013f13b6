//! Tests of the kit itself: a correct backend passes, a broken backend or checkpoint store fails
//! case by case with each case named, and a run with failures panics naming them.

use std::{
    collections::BTreeMap,
    panic::{self, AssertUnwindSafe},
    sync::{Arc, Mutex},
};

use session_core::{SessionEvent, SessionHeader, SessionId};
use session_persistence::{
    HeaderPage, Listing, MemoryStore, PageRequest, Revision, ScanOutcome, ScanSink, StoredHeader, SurveyEntry, TornTail,
};
use session_projection_cache::{CheckpointRecord, MemoryCheckpointStore};
use tokio_util::sync::CancellationToken;

use crate::{
    Backend, CheckpointPlace, CheckpointStore, Outcome, Place, checkpoint_store_contract, coordinator_contract,
    persistence_contract,
};

/// A memory store, shared by every open of the place.
struct Shared(Arc<dyn Backend>);

impl Place for Shared {
    fn open(&self) -> Arc<dyn Backend> {
        self.0.clone()
    }
}

/// A memory store that acknowledges every batch but forgets the last event of a batch of two or
/// more: the bug the contract exists to catch.
#[derive(Debug, Default)]
struct Forgetful(MemoryStore);

impl Backend for Forgetful {
    fn name(&self) -> &'static str {
        "forgetful"
    }

    fn scan(
        &self,
        id: &SessionId,
        cancel: &CancellationToken,
        sink: &mut dyn ScanSink,
    ) -> session_persistence::Result<Option<ScanOutcome>> {
        self.0.scan(id, cancel, sink)
    }

    fn revision(&self, id: &SessionId) -> session_persistence::Result<Option<Revision>> {
        self.0.revision(id)
    }

    fn append_batch(
        &self,
        header: &SessionHeader,
        events: &[Arc<SessionEvent>],
        materialized: bool,
    ) -> session_persistence::Result<()> {
        let kept = if events.len() > 1 { &events[..events.len() - 1] } else { events };
        self.0.append_batch(header, kept, materialized)
    }

    fn commit_repair(
        &self,
        header: &SessionHeader,
        torn: Option<&TornTail>,
        closers: &[SessionEvent],
    ) -> session_persistence::Result<()> {
        self.0.commit_repair(header, torn, closers)
    }

    fn list(&self, cancel: &CancellationToken) -> session_persistence::Result<Listing> {
        self.0.list(cancel)
    }
}

/// A memory store whose own answers to the overridable queries are each a little wrong: a family
/// without its last child, pages that ignore where they start, a header with another revision, a
/// survey without its last log.
#[derive(Debug, Default)]
struct Skewed(MemoryStore);

impl Backend for Skewed {
    fn name(&self) -> &'static str {
        "skewed"
    }

    fn scan(
        &self,
        id: &SessionId,
        cancel: &CancellationToken,
        sink: &mut dyn ScanSink,
    ) -> session_persistence::Result<Option<ScanOutcome>> {
        self.0.scan(id, cancel, sink)
    }

    fn revision(&self, id: &SessionId) -> session_persistence::Result<Option<Revision>> {
        self.0.revision(id)
    }

    fn header(&self, id: &SessionId, cancel: &CancellationToken) -> session_persistence::Result<Option<StoredHeader>> {
        let stored = self.0.header(id, cancel)?;
        Ok(stored.map(|stored| StoredHeader { revision: Revision::new("stale"), ..stored }))
    }

    fn append_batch(
        &self,
        header: &SessionHeader,
        events: &[Arc<SessionEvent>],
        materialized: bool,
    ) -> session_persistence::Result<()> {
        self.0.append_batch(header, events, materialized)
    }

    fn commit_repair(
        &self,
        header: &SessionHeader,
        torn: Option<&TornTail>,
        closers: &[SessionEvent],
    ) -> session_persistence::Result<()> {
        self.0.commit_repair(header, torn, closers)
    }

    fn list(&self, cancel: &CancellationToken) -> session_persistence::Result<Listing> {
        self.0.list(cancel)
    }

    fn list_children(&self, parent: &SessionId, cancel: &CancellationToken) -> session_persistence::Result<Listing> {
        let mut family = self.0.list(cancel)?.family_of(parent);
        if let Some(last) =
            family.headers.iter().rposition(|stored| stored.header.parent_session.as_ref() == Some(parent))
        {
            family.headers.remove(last);
        }
        Ok(family)
    }

    fn list_page(&self, request: &PageRequest, cancel: &CancellationToken) -> session_persistence::Result<HeaderPage> {
        let first = PageRequest { after: None, ..request.clone() };
        Ok(HeaderPage::from_listing(self.0.list(cancel)?, &first))
    }

    fn survey(&self, cancel: &CancellationToken) -> session_persistence::Result<Vec<SurveyEntry>> {
        let mut entries = self.0.survey(cancel)?;
        entries.pop();
        Ok(entries)
    }
}

const QUERIES: [&str; 4] = [
    "list_children_is_the_family_of_the_listing_over_random_trees",
    "list_page_pages_concatenate_to_the_newest_first_listing",
    "stored_header_matches_the_scanned_header_and_revision",
    "survey_covers_the_listing",
];

#[test]
fn the_query_cases_catch_a_backend_whose_own_queries_disagree_with_its_listing() {
    let suite = persistence_contract().only(|case| QUERIES.contains(&case));
    assert_eq!(suite.case_names(), QUERIES);
    suite.run(|| Shared(Arc::new(MemoryStore::new())));
    let report = suite.check(|| Shared(Arc::new(Skewed::default())));
    let failed: Vec<&str> = report.failures().iter().map(|case| case.name).collect();
    assert_eq!(failed, QUERIES, "{report:?}");
}

#[test]
fn one_case_runs_by_name_and_an_unknown_name_is_refused() {
    let report = persistence_contract().run_case("round_trip", || Shared(Arc::new(MemoryStore::new())));
    assert_eq!(report.to_string(), "ok round_trip");
    let panic = panic::catch_unwind(AssertUnwindSafe(|| {
        persistence_contract().run_case("round_trip", || Shared(Arc::new(Forgetful::default())))
    }))
    .unwrap_err();
    let message = panic.downcast_ref::<String>().expect("a formatted message");
    assert!(message.starts_with("persistence contract: FAILED round_trip (at "), "{message}");
    let panic = panic::catch_unwind(AssertUnwindSafe(|| {
        coordinator_contract().run_case("no_such_case", || Shared(Arc::new(MemoryStore::new())))
    }))
    .unwrap_err();
    let message = panic.downcast_ref::<String>().expect("a formatted message");
    assert!(message.starts_with("the coordinator contract has no case named \"no_such_case\""), "{message}");
}

// The suite macros, as a backend crate invokes them: one `#[test]` per case, here on the memory
// stores (`kit_memory_persistence::round_trip`, ...).
crate::persistence_contract!(kit_memory_persistence, || Shared(Arc::new(MemoryStore::new())));
crate::coordinator_contract!(kit_memory_coordinator, || Shared(Arc::new(MemoryStore::new())));
crate::checkpoint_store_contract!(kit_memory_checkpoints, || Records(Arc::new(MemoryCheckpointStore::new())));

const SELECTED: [&str; 3] =
    ["round_trip", "append_rejects_stale_and_gapped_batches", "an_empty_live_session_is_never_written"];

#[test]
fn every_suite_has_cases_with_distinct_names() {
    for names in [
        persistence_contract().case_names(),
        coordinator_contract().case_names(),
        checkpoint_store_contract().case_names(),
    ] {
        assert!(!names.is_empty());
    }
    assert!(persistence_contract().case_names().contains(&"pre_react_loop_logs_read_as_current"));
}

#[test]
fn a_correct_backend_passes_every_case_it_runs() {
    let suite = persistence_contract().only(|case| SELECTED.contains(&case));
    assert_eq!(suite.case_names(), SELECTED);
    let report = suite.run(|| Shared(Arc::new(MemoryStore::new())));
    assert_eq!(report.passed(), SELECTED.len());
    assert!(report.cases.iter().all(|case| case.outcome == Outcome::Passed { notes: Vec::new() }), "{report:?}");
}

#[test]
fn a_broken_backend_fails_case_by_case_and_the_run_names_every_failure() {
    let suite = persistence_contract().only(|case| SELECTED.contains(&case));
    let report = suite.check(|| Shared(Arc::new(Forgetful::default())));
    let failed: Vec<&str> = report.failures().iter().map(|case| case.name).collect();
    assert_eq!(failed, ["round_trip", "append_rejects_stale_and_gapped_batches"], "{report:?}");
    assert_eq!(report.passed(), 1, "a case that appends nothing still passes");
    let Outcome::Failed { location: Some(location), .. } = &report.failures()[0].outcome else {
        panic!("a failure says where it happened: {report:?}")
    };
    assert!(location.contains("persistence.rs"), "{location}");

    let panic = panic::catch_unwind(AssertUnwindSafe(|| report.assert_passed())).unwrap_err();
    let message = panic.downcast_ref::<String>().expect("the summary is a formatted message");
    assert!(
        message.starts_with(
            "persistence contract: 2 of 3 case(s) failed: round_trip, append_rejects_stale_and_gapped_batches\n"
        ),
        "{message}"
    );
    assert!(message.contains("FAILED round_trip (at "), "{message}");
}

/// A memory checkpoint store.
struct Records(Arc<dyn CheckpointStore>);

impl CheckpointPlace for Records {
    fn open(&self) -> Arc<dyn CheckpointStore> {
        self.0.clone()
    }
}

/// A checkpoint store that merges a new record's rows into the stored one instead of replacing
/// the record whole.
#[derive(Debug, Default)]
struct Merging(Mutex<BTreeMap<SessionId, CheckpointRecord>>);

impl CheckpointStore for Merging {
    fn get(&self, id: &SessionId) -> session_projection_cache::Result<Option<CheckpointRecord>> {
        Ok(self.0.lock().unwrap().get(id).cloned())
    }

    fn put(&self, id: &SessionId, record: &CheckpointRecord) -> session_projection_cache::Result<()> {
        let mut records = self.0.lock().unwrap();
        let merged = match records.remove(id) {
            Some(mut stored) => {
                stored.as_of_seq = record.as_of_seq;
                stored.rows.extend(record.rows.clone());
                stored
            }
            None => record.clone(),
        };
        records.insert(id.clone(), merged);
        Ok(())
    }

    fn remove(&self, id: &SessionId) -> session_projection_cache::Result<bool> {
        Ok(self.0.lock().unwrap().remove(id).is_some())
    }
}

/// A memory checkpoint store whose damage hook claims to damage records and does nothing.
struct Unharmed(Arc<dyn CheckpointStore>);

impl CheckpointPlace for Unharmed {
    fn open(&self) -> Arc<dyn CheckpointStore> {
        self.0.clone()
    }

    fn damage(&self, _id: &SessionId, _damage: &crate::Damage) -> bool {
        true
    }
}

#[test]
fn the_checkpoint_contract_passes_the_memory_store_and_says_what_it_skipped() {
    let report = checkpoint_store_contract().run(|| Records(Arc::new(MemoryCheckpointStore::new())));
    let damage = report.cases.iter().find(|case| case.name.starts_with("a_damaged_record")).unwrap();
    assert_eq!(damage.to_string(), format!("ok {} (skipped: the place damages no stored record)", damage.name));
}

#[test]
fn the_checkpoint_contract_catches_a_merging_put_and_a_damage_that_did_not_happen() {
    let report = checkpoint_store_contract().check(|| Records(Arc::new(Merging::default())));
    let failed: Vec<&str> = report.failures().iter().map(|case| case.name).collect();
    assert_eq!(failed, ["a_put_replaces_the_whole_record", "records_keep_every_field"], "{report:?}");

    let report = checkpoint_store_contract().check(|| Unharmed(Arc::new(MemoryCheckpointStore::new())));
    let failed: Vec<&str> = report.failures().iter().map(|case| case.name).collect();
    assert_eq!(failed, ["a_damaged_record_reads_as_absent_and_the_next_put_replaces_it"], "{report:?}");
}
