//! The backend test kit: the contract suites a storage backend must pass, one `#[test]` per case
//! in any crate with one macro call per suite.
//!
//! A team that writes its own [`session_persistence::Backend`] (or
//! [`session_projection_cache::CheckpointStore`]) proves it here, with the very cases the built-in
//! backends pass:
//!
//! - [`persistence_contract!`]: the persistence contract (reference 01 §7.1 and §7.2) through a
//!   [`Coordinator`](session_persistence::Coordinator) over your backend: create, append, list,
//!   inspect, stream, read from a seq, load, crash repair, the live write-behind path, forks,
//!   resumes, batched streams, logs in the reference's earlier (legacy) event shapes, and the
//!   queries a backend may answer its own way (`list_children` over random trees, `list_page`,
//!   `header`, `survey`) checked against the whole listing;
//! - [`coordinator_contract!`]: the coordinator's own mechanics over your backend wrapped in a
//!   [`CountingBackend`](session_persistence::CountingBackend): write-behind batching, a failed
//!   write kept and retried, the inspection cache and its bounds, long logs validated alike on
//!   every thread setting;
//! - [`checkpoint_store_contract!`]: a checkpoint store's round trip, whole-record replace,
//!   absent ids, removal, reopening, and (where the store can be damaged) what a damaged record
//!   does.
//!
//! You describe your storage once, as a [`Place`] (or a [`CheckpointPlace`]): one fresh, empty
//! storage place per case that can be opened again over the same bytes. A suite macro writes a
//! module of one `#[test]` per case, named after the case, so the cases run in parallel and
//! `cargo test <case>` runs one. Each test runs its case on a place of its own under its own Tokio
//! runtime and prints `ok <case>` (with what it skipped, such as a check the place has no hook
//! for) or fails with `FAILED <case> (at <file:line>): <message>`:
//!
//! ```
//! use std::sync::Arc;
//!
//! use session_persistence::{Backend, MemoryStore};
//!
//! /// A memory store is its own storage: opening it again is sharing it.
//! struct Shared(Arc<MemoryStore>);
//!
//! impl persistence_testkit::Place for Shared {
//!     fn open(&self) -> Arc<dyn Backend> {
//!         self.0.clone()
//!     }
//! }
//!
//! // In a backend's tests: `persistence_testkit::persistence_contract!(memory, || Shared(...));`
//! // writes `mod memory { #[test] fn round_trip() ... }`. A [`Suite`] runs cases in one call:
//! // here a single case, to keep the example short.
//! let report = persistence_testkit::persistence_contract()
//!     .only(|case| case == "round_trip")
//!     .run(|| Shared(Arc::new(MemoryStore::new())));
//! assert_eq!(report.passed(), 1);
//! ```
//!
//! The [`Suite`] values ([`persistence_contract()`] and the others) run a subset
//! ([`Suite::only`]), one case ([`Suite::run_case`]), or return a report without panicking
//! ([`Suite::check`]). The kit asserts with panics, like any test; it is meant for
//! `[dev-dependencies]`.

pub mod answers;
mod checkpoint;
mod coordinator;
pub mod inspect;
mod legacy;
mod live;
mod persistence;
mod queries;
mod runner;
mod storable;
mod streams;
#[cfg(test)]
mod tests;

use std::sync::Arc;

use session_core::{SessionHeader, SessionId};
use session_persistence::Backend;
use session_projection_cache::CheckpointStore;

pub use crate::runner::{CaseReport, IntoPlace, Outcome, Report, Suite};

/// One case's storage: a fresh, empty place that can be opened again over the same bytes.
///
/// The suites ask for a new place for every case (`fresh` in [`persistence_contract!`]), and
/// drop it after the case. A case may open the place several times to check what survives a
/// restart: each [`open`](Place::open) must see everything the backends opened before it
/// acknowledged. Before opening again the case has dropped the coordinators over the previous
/// backend, so a backend that holds a lock for as long as it lives (the JSONL store locks its
/// root) can be reopened; a backend without such a lock may also be shared between opens (an
/// in-memory store is opened by handing out the same `Arc`).
pub trait Place {
    /// A backend over this place's storage.
    fn open(&self) -> Arc<dyn Backend>;

    /// The stored bytes of `header`'s log, for a backend that keeps each log as a file of its own:
    /// the legacy-log cases check that no read, repair or adoption rewrites a stored byte (a
    /// repair may only append). It is called while a backend over the place is open, so it must
    /// read without taking the backend's lock. `None`, the default, skips those checks and the
    /// report says so; the same cases still compare the stored events through [`Backend::scan`].
    fn log_bytes(&self, header: &SessionHeader) -> Option<Vec<u8>> {
        let _ = header;
        None
    }

    /// Whether two backends opened over this place at the same time are two writers of one store
    /// (a database that several processes or hosts share), whose appends the writer fence decides
    /// between: a stale writer's append is refused with `PersistenceError::Fenced`. The coordinator
    /// cases that check what a host does with a fenced live session run only then; `false`, the default,
    /// skips it and the report says so.
    fn shared_writers(&self) -> bool {
        false
    }
}

/// One case's checkpoint storage: a fresh, empty place for a
/// [`CheckpointStore`] that can be opened again over the same records.
pub trait CheckpointPlace {
    /// A checkpoint store over this place's records. An in-memory store may hand out the same
    /// `Arc` every time.
    fn open(&self) -> Arc<dyn CheckpointStore>;

    /// Damages the stored record of `id` as `damage` says, behind the store's back (the store
    /// stays open), and returns whether it did. A store that has no stored bytes, or in which
    /// that damage cannot happen, returns `false` (the default), and the case says it skipped it.
    fn damage(&self, id: &SessionId, damage: &Damage) -> bool {
        let _ = (id, damage);
        false
    }
}

/// A way a stored checkpoint record can be damaged. Every one must make the store's `get`
/// return `Ok(None)` (a record that cannot be trusted is absent, never an error), must not stop
/// the store from opening again, and must be healed by the next `put`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Damage {
    /// The stored bytes cut in half (a torn write).
    Truncated,
    /// One bit of the stored record flipped, or its checksum changed: a checksum must catch it.
    FlippedBit,
    /// A record stamped with a format version this build does not read.
    NewerVersion,
    /// Bytes that are no record at all.
    Garbage,
    /// The stored record of another session (`of`) put in this one's place. A store whose stored
    /// record does not name its session cannot tell, and returns `false`.
    AnotherSessionsRecord {
        /// The session whose record takes the damaged one's place.
        of: SessionId,
    },
}

/// The persistence contract suite, to run a subset of it or read its case names.
pub fn persistence_contract() -> Suite<dyn Place> {
    Suite::new("persistence contract", crate::__persistence_cases! { __case_table!() })
}

/// The coordinator contract suite, to run a subset of it or read its case names. Its cases wrap
/// each opened backend in a [`CountingBackend`](session_persistence::CountingBackend), which they
/// count reads and appends with and inject write failures through.
pub fn coordinator_contract() -> Suite<dyn Place> {
    Suite::new("coordinator contract", crate::__coordinator_cases! { __case_table!() })
}

/// The checkpoint-store contract suite, to run a subset of it or read its case names.
pub fn checkpoint_store_contract() -> Suite<dyn CheckpointPlace> {
    Suite::new("checkpoint-store contract", crate::__checkpoint_cases! { __case_table!() })
}

/// Writes `mod $module` with one `#[test]` per case of the persistence contract, named after the
/// case, each running it on a place of its own from `$fresh` (an `impl Fn() -> impl Place`,
/// named in the invoking module: the generated module sees its items). With `, when $cond`, each
/// test passes without running its case when `$cond` is false (a server that is not configured).
///
/// ```
/// use std::sync::Arc;
///
/// use session_persistence::{Backend, MemoryStore};
///
/// struct Shared(Arc<MemoryStore>);
///
/// impl persistence_testkit::Place for Shared {
///     fn open(&self) -> Arc<dyn Backend> {
///         self.0.clone()
///     }
/// }
///
/// fn configured() -> bool {
///     true
/// }
///
/// // `memory::round_trip`, `memory::crash_recovery_of_an_open_step`, ...
/// persistence_testkit::persistence_contract!(memory, || Shared(Arc::new(MemoryStore::new())));
/// // The same cases, run only when `configured()` says so.
/// persistence_testkit::persistence_contract!(when_configured, || Shared(Arc::new(MemoryStore::new())), when configured());
/// # fn main() {}
/// ```
#[macro_export]
macro_rules! persistence_contract {
    ($module:ident, $fresh:expr $(,)?) => {
        $crate::__persistence_cases! { __case_tests!(persistence_contract, $module, $fresh, when true) }
    };
    ($module:ident, $fresh:expr, when $when:expr $(,)?) => {
        $crate::__persistence_cases! { __case_tests!(persistence_contract, $module, $fresh, when $when) }
    };
}

/// Writes `mod $module` with one `#[test]` per case of the coordinator contract, as
/// [`persistence_contract!`] does.
#[macro_export]
macro_rules! coordinator_contract {
    ($module:ident, $fresh:expr $(,)?) => {
        $crate::__coordinator_cases! { __case_tests!(coordinator_contract, $module, $fresh, when true) }
    };
    ($module:ident, $fresh:expr, when $when:expr $(,)?) => {
        $crate::__coordinator_cases! { __case_tests!(coordinator_contract, $module, $fresh, when $when) }
    };
}

/// Writes `mod $module` with one `#[test]` per case of the checkpoint-store contract, as
/// [`persistence_contract!`] does; `$fresh` makes a [`CheckpointPlace`].
#[macro_export]
macro_rules! checkpoint_store_contract {
    ($module:ident, $fresh:expr $(,)?) => {
        $crate::__checkpoint_cases! { __case_tests!(checkpoint_store_contract, $module, $fresh, when true) }
    };
    ($module:ident, $fresh:expr, when $when:expr $(,)?) => {
        $crate::__checkpoint_cases! { __case_tests!(checkpoint_store_contract, $module, $fresh, when $when) }
    };
}

// The case lists: each suite's cases, in the order they run, as `module::case_fn`. The one place
// a case is added: the suite (`Suite`) and the tests a suite macro writes are both built from it.
// Each calls back `$crate::$then!` with its arguments and the list.

/// The persistence contract's cases (the legacy-log and query cases run on the same context).
#[doc(hidden)]
#[macro_export]
macro_rules! __persistence_cases {
    ($then:ident!($($args:tt)*)) => {
        $crate::$then! { ($($args)*) [
            persistence::round_trip,
            persistence::create_validates_the_whole_header_and_reserves_nothing_on_failure,
            persistence::crash_recovery_of_an_open_step,
            persistence::crash_recovery_of_pending_tool_calls,
            persistence::lists_only_written_sessions_and_honours_cancellation,
            persistence::read_from_serves_stored_suffixes_without_closers,
            persistence::read_from_many_answers_what_read_from_answers,
            persistence::read_from_many_stops_at_its_limit,
            persistence::revisions_are_stable_and_change_on_append,
            persistence::append_rejects_stale_and_gapped_batches,
            persistence::missing_sessions_are_not_found_and_duplicates_are_refused,
            persistence::append_adopts_a_stored_session,
            persistence::unknown_event_types_are_refused_unless_ignorable,
            live::live_sessions_are_written_behind_and_flushed,
            live::store_flush_barrier_persists_everything_appended_before_it,
            live::an_empty_live_session_is_never_written,
            live::fork_seed_is_persisted_exactly_once_with_its_end_seed,
            live::resume_claims_the_loaded_log_without_rewriting_it,
            live::a_new_live_session_cannot_take_over_a_stored_id,
            live::streaming_inspection_matches_the_materialized_view,
            live::a_live_session_is_inspected_live_before_its_first_write,
            live::release_lets_go_of_a_detached_session_at_once,
            streams::batched_streams_equal_single_streams_in_request_order,
            streams::a_cancelled_batch_fails_every_read_as_cancelled,
            streams::a_batch_reads_at_most_its_lanes_at_once,
            streams::a_dropped_batch_starts_no_further_read,
            streams::a_panicking_sink_panics_the_batch,
            streams::a_stream_finishes_its_sink_once_after_the_last_event,
            streams::a_persistence_breaking_the_stream_contract_gives_errors_not_panics,
            legacy::pre_identity_logs_read_with_legacy_message_ids,
            legacy::pre_react_loop_logs_read_as_current,
            legacy::malformed_legacy_records_are_refused_with_the_reference_messages,
            legacy::repairs_and_appends_after_a_legacy_log_never_rewrite_its_lines,
            legacy::pre_identity_legacy_logs_import_and_bad_current_messages_are_corrupt,
            queries::list_children_is_the_family_of_the_listing_over_random_trees,
            queries::list_page_pages_concatenate_to_the_newest_first_listing,
            queries::stored_header_matches_the_scanned_header_and_revision,
            queries::survey_covers_the_listing,
            storable::refused_kinds_are_never_acknowledged_and_the_log_reads_back,
            storable::acknowledged_events_read_back_identically_through_a_fresh_reader,
        ] }
    };
}

/// The coordinator contract's cases.
#[doc(hidden)]
#[macro_export]
macro_rules! __coordinator_cases {
    ($then:ident!($($args:tt)*)) => {
        $crate::$then! { ($($args)*) [
            coordinator::events_inside_one_window_are_written_as_one_batch,
            coordinator::a_failed_write_keeps_the_batch_in_order_and_the_next_flush_writes_it,
            coordinator::a_failed_first_write_is_retried_when_the_next_event_comes,
            coordinator::a_flush_whose_caller_stops_waiting_still_records_its_write,
            coordinator::an_append_whose_caller_stops_waiting_still_records_its_write,
            coordinator::inspections_are_cached_until_the_log_changes,
            coordinator::the_inspection_cache_is_bounded_by_entries_and_bytes,
            coordinator::invalid_configuration_is_rejected_with_the_reference_messages,
            coordinator::long_logs_validate_the_same_on_the_relay_thread_always,
            coordinator::long_logs_validate_the_same_on_the_relay_thread_never,
            coordinator::long_logs_validate_the_same_on_the_relay_thread_auto,
            coordinator::a_live_session_that_meets_the_writer_fence_stops_writing_until_it_is_resumed,
            coordinator::a_write_whose_reply_was_lost_is_not_taken_for_another_writer,
            coordinator::a_first_write_that_meets_a_log_created_meanwhile_is_fenced,
            coordinator::a_live_copy_another_writer_took_over_is_fenced_when_asked,
            coordinator::a_resumed_copy_never_written_is_fenced_when_asked,
            coordinator::a_release_dropped_while_its_lease_ends_leaves_the_next_copys_lease_alone,
            coordinator::a_write_that_panics_leaves_its_batch_to_the_next_one,
            coordinator::a_copy_of_the_whole_log_continues_it_after_another_host_moved_it_on,
            coordinator::a_fence_an_old_copy_met_is_not_reported_by_the_next_copys_release,
            coordinator::a_store_attached_twice_is_refused,
        ] }
    };
}

/// The checkpoint-store contract's cases.
#[doc(hidden)]
#[macro_export]
macro_rules! __checkpoint_cases {
    ($then:ident!($($args:tt)*)) => {
        $crate::$then! { ($($args)*) [
            checkpoint::records_round_trip,
            checkpoint::a_put_replaces_the_whole_record,
            checkpoint::absent_ids_read_as_none_and_remove_as_false,
            checkpoint::get_many_answers_what_get_answers_in_order,
            checkpoint::removing_a_record_leaves_the_others,
            checkpoint::records_survive_reopening,
            checkpoint::records_keep_every_field,
            checkpoint::a_damaged_record_reads_as_absent_and_the_next_put_replaces_it,
        ] }
    };
}

/// A case list as the kit's case table (kit-internal: it names the kit's private case functions).
#[doc(hidden)]
#[macro_export]
macro_rules! __case_table {
    (() [$($module:ident::$case:ident),* $(,)?]) => {
        vec![$($crate::runner::Case { name: stringify!($case), run: |h| Box::pin($crate::$module::$case(h)) }),*]
    };
}

/// A case list as a module of `#[test]`s, one per case, each running its case by name.
#[doc(hidden)]
#[macro_export]
macro_rules! __case_tests {
    (($suite:ident, $test_module:ident, $fresh:expr, when $when:expr) [$($module:ident::$case:ident),* $(,)?]) => {
        mod $test_module {
            #[allow(unused_imports)]
            use super::*;

            $(
                #[test]
                fn $case() {
                    if $when {
                        $crate::$suite().run_case(stringify!($case), $fresh);
                    }
                }
            )*
        }
    };
}
