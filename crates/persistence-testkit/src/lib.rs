//! The backend test kit: the contract suites a storage backend must pass, runnable from any crate
//! with one call, each case reported by name.
//!
//! A team that writes its own [`session_persistence::Backend`] (or
//! [`session_projection_cache::CheckpointStore`]) proves it here, with the very cases the built-in
//! backends pass:
//!
//! - [`run_persistence_contract`]: the persistence contract (reference 01 §7.1 and §7.2) through a
//!   [`Coordinator`](session_persistence::Coordinator) over your backend: create, append, list,
//!   inspect, stream, read from a seq, load, crash repair, the live write-behind path, forks,
//!   resumes, batched streams, and logs in the reference's earlier (legacy) event shapes;
//! - [`run_coordinator_contract`]: the coordinator's own mechanics over your backend wrapped in a
//!   [`CountingBackend`](session_persistence::CountingBackend): write-behind batching, a failed
//!   write kept and retried, the inspection cache and its bounds, long logs validated alike on
//!   every thread setting;
//! - [`run_checkpoint_store_contract`]: a checkpoint store's round trip, whole-record replace,
//!   absent ids, removal, reopening, and (where the store can be damaged) what a damaged record
//!   does.
//!
//! You describe your storage once, as a [`Place`] (or a [`CheckpointPlace`]): one fresh, empty
//! storage place per case that can be opened again over the same bytes. Each runner runs every
//! case on a place of its own under its own Tokio runtime, catches a failing case's panic, prints
//! `ok <case>` or `FAILED <case>: <message>` for each, and at the end panics naming every case
//! that failed, so one `#[test]` per backend gives a per-case report (`cargo test -- --nocapture`
//! shows the passing cases too). A [`Suite`] runs a subset ([`Suite::only`]) or returns the report
//! without panicking ([`Suite::check`]).
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
//! // In a backend's tests this is `run_persistence_contract(|| ...)` in one `#[test]`; here a
//! // single case, to keep the example short.
//! let report = persistence_testkit::persistence_contract()
//!     .only(|case| case == "round_trip")
//!     .run(|| Shared(Arc::new(MemoryStore::new())));
//! assert_eq!(report.passed(), 1);
//! ```
//!
//! The kit asserts with panics, like any test; it is meant for `[dev-dependencies]`.

mod checkpoint;
mod coordinator;
pub mod inspect;
mod legacy;
mod persistence;
mod runner;
#[cfg(test)]
mod tests;

use std::sync::Arc;

use session_core::{SessionHeader, SessionId};
use session_persistence::Backend;
use session_projection_cache::CheckpointStore;

pub use crate::runner::{CaseReport, IntoPlace, Outcome, Report, Suite};

/// One case's storage: a fresh, empty place that can be opened again over the same bytes.
///
/// The runners ask for a new place for every case (`fresh` in [`run_persistence_contract`]), and
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
    let mut cases = persistence::cases();
    cases.extend(legacy::cases());
    Suite::new("persistence contract", cases)
}

/// The coordinator contract suite, to run a subset of it or read its case names.
pub fn coordinator_contract() -> Suite<dyn Place> {
    Suite::new("coordinator contract", coordinator::cases())
}

/// The checkpoint-store contract suite, to run a subset of it or read its case names.
pub fn checkpoint_store_contract() -> Suite<dyn CheckpointPlace> {
    Suite::new("checkpoint-store contract", checkpoint::cases())
}

/// Runs every case of the persistence contract, each on a place of its own from `fresh`, and
/// panics naming every case that failed. See the [crate documentation](crate).
pub fn run_persistence_contract<P: Place + 'static>(fresh: impl Fn() -> P) -> Report {
    persistence_contract().run(fresh)
}

/// Runs every case of the coordinator contract, each on a place of its own from `fresh`, and
/// panics naming every case that failed. The cases wrap each opened backend in a
/// [`CountingBackend`](session_persistence::CountingBackend), which they count reads and appends
/// with and inject write failures through.
pub fn run_coordinator_contract<P: Place + 'static>(fresh: impl Fn() -> P) -> Report {
    coordinator_contract().run(fresh)
}

/// Runs every case of the checkpoint-store contract, each on a place of its own from `fresh`, and
/// panics naming every case that failed.
pub fn run_checkpoint_store_contract<P: CheckpointPlace + 'static>(fresh: impl Fn() -> P) -> Report {
    checkpoint_store_contract().run(fresh)
}
