//! The test harness: `subagent-testkit`'s harness over raw and zstd JSONL, with and without the
//! projection cache, and checkpoint-source stubs. (The e2e package's `listing_matrix` runs the
//! same harness over every backend.)

use std::sync::{
    Arc,
    atomic::{AtomicU64, Ordering},
};

use serde_json::{Map, Value, json};
use session_core::{SessionHeader, SessionId};
use session_projection::Snapshot;
use subagent::CheckpointSource;
pub(crate) use subagent_testkit::{rows::*, *};
use tokio_util::sync::CancellationToken;

/// One storage configuration a test runs under: a JSONL directory, with or without the projection
/// cache. (The listing matrix over the SQLite and PostgreSQL backends is the `e2e` package's
/// `listing_matrix`.)
pub(crate) type Setup = Jsonl;

/// The composition of one test.
pub(crate) type Harness = subagent_testkit::Harness<Setup>;

/// Raw and zstd, each with and without the projection cache.
pub(crate) const MATRIX: [Setup; 4] = JSONL;

pub(crate) const NO_CACHE: [Setup; 2] = [JSONL[0], JSONL[1]];

pub(crate) const WITH_CACHE: [Setup; 2] = [JSONL[2], JSONL[3]];

/// What a stub checkpoint source serves.
#[derive(Debug, Clone)]
pub(crate) enum Stub {
    /// A snapshot whose values hold this `subagent` value.
    Value(Value),
    /// A snapshot without the `subagent` key.
    NoKey,
    /// A snapshot with the identity and a failure recorded for another unit.
    ValueWithFailure(Value),
    /// No record.
    Nothing,
    /// The source panics (a poisoned row detonating).
    Panic,
}

/// A checkpoint source that serves one fixed answer for one id (nothing for others), counts its
/// calls, and can cancel a token when called.
#[derive(Debug)]
pub(crate) struct StubCache {
    pub(crate) child: SessionId,
    pub(crate) stub: Stub,
    pub(crate) calls: AtomicU64,
    pub(crate) cancel_on_call: Option<CancellationToken>,
}

impl StubCache {
    pub(crate) fn new(child: &str, stub: Stub) -> Arc<StubCache> {
        Arc::new(StubCache { child: id(child), stub, calls: AtomicU64::new(0), cancel_on_call: None })
    }

    pub(crate) fn cancelling(child: &str, stub: Stub, token: CancellationToken) -> Arc<StubCache> {
        Arc::new(StubCache { child: id(child), stub, calls: AtomicU64::new(0), cancel_on_call: Some(token) })
    }

    pub(crate) fn calls(&self) -> u64 {
        self.calls.load(Ordering::SeqCst)
    }
}

impl CheckpointSource for StubCache {
    fn cached_snapshot(&self, header: &SessionHeader) -> Option<Snapshot> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        if let Some(token) = &self.cancel_on_call {
            token.cancel();
        }
        if header.id != self.child {
            return None;
        }
        let snapshot = |values: Map<String, Value>| Snapshot { as_of_seq: 3, values, failures: Default::default() };
        match &self.stub {
            Stub::Value(value) => Some(snapshot(Map::from_iter([("subagent".to_owned(), value.clone())]))),
            Stub::NoKey => Some(snapshot(Map::from_iter([("subagentTiming".to_owned(), json!({"settledMs": 0}))]))),
            Stub::ValueWithFailure(value) => {
                let mut snapshot = snapshot(Map::from_iter([("subagent".to_owned(), value.clone())]));
                snapshot.failures.insert(
                    "hostile".to_owned(),
                    session_projection::UnitFailure::View { panicked: false, message: "boom".to_owned() },
                );
                Some(snapshot)
            }
            Stub::Nothing => None,
            Stub::Panic => panic!("poisoned checkpoint row detonated"),
        }
    }
}
