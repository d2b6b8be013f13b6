//! The listing matrix's setups over every backend (a JSONL directory, a SQLite database or a
//! PostgreSQL scratch schema) for `subagent-testkit`'s harness, which the `subagent` crate's own
//! tests share, and a hostile foreign unit.

use std::path::Path;

use serde::{Deserialize, Serialize, Serializer};
use serde_json::json;
use session_core::SessionEvent;
use session_persistence::Compression;
use session_persistence_postgres::testing::{ScratchSchema, server_url};
use session_persistence_sqlite::{SqliteConfig, SqliteStore};
use session_projection::{ClientView, ProjectionUnit, UnitError};
use subagent_testkit::{Jsonl, Opened};
pub(crate) use subagent_testkit::{rows::*, *};

/// The backend a listing test's logs live in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Backing {
    /// A JSONL directory, in the setup's `compression`.
    Jsonl,
    /// A SQLite database (`session-persistence-sqlite`).
    Sqlite,
    /// A scratch schema of the PostgreSQL test server (`session-persistence-postgres`).
    Postgres,
}

/// One storage configuration a listing test runs under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Setup {
    pub(crate) backing: Backing,
    /// The JSONL encoding (unused by the other backings).
    pub(crate) compression: Compression,
    pub(crate) cache: bool,
}

impl Setup {
    const fn jsonl(compression: Compression, cache: bool) -> Setup {
        Setup { backing: Backing::Jsonl, compression, cache }
    }

    const fn on(backing: Backing, cache: bool) -> Setup {
        Setup { backing, compression: Compression::None, cache }
    }
}

impl subagent_testkit::Setup for Setup {
    fn cache(&self) -> bool {
        self.cache
    }

    /// A PostgreSQL setup runs only with a configured server (skipped, after saying so, outside
    /// CI; a failure under CI).
    fn available(&self) -> bool {
        self.backing != Backing::Postgres || server_url().is_some()
    }

    fn open(&self, root: &Path) -> Opened {
        match self.backing {
            Backing::Jsonl => Opened { backend: Jsonl::open_store(root, self.compression), keep: None },
            Backing::Sqlite => Opened {
                backend: std::sync::Arc::new(SqliteStore::open(SqliteConfig::file(root.with_extension("db"))).unwrap()),
                keep: None,
            },
            Backing::Postgres => {
                let schema = ScratchSchema::new().expect("the PostgreSQL server is configured");
                Opened { backend: std::sync::Arc::new(schema.open()), keep: Some(Box::new(schema)) }
            }
        }
    }
}

/// The composition of one test.
pub(crate) type Harness = subagent_testkit::Harness<Setup>;

/// Raw and zstd, each with and without the projection cache.
pub(crate) const MATRIX: [Setup; 4] = [
    Setup::jsonl(Compression::None, false),
    Setup::jsonl(Compression::Zstd, false),
    Setup::jsonl(Compression::None, true),
    Setup::jsonl(Compression::Zstd, true),
];

/// The SQLite backend, without and with the projection cache.
pub(crate) const SQLITE: [Setup; 2] = [Setup::on(Backing::Sqlite, false), Setup::on(Backing::Sqlite, true)];

/// The PostgreSQL backend, without and with the projection cache (skipped, after saying so,
/// without a configured server outside CI; a failure under CI).
pub(crate) const POSTGRES: [Setup; 2] = [Setup::on(Backing::Postgres, false), Setup::on(Backing::Postgres, true)];

/// Runs `test` on every JSONL setup of [`MATRIX`], on both [`SQLITE`] setups and on both
/// [`POSTGRES`] setups.
pub(crate) fn run<F: AsyncFnMut(&Harness)>(mut test: F) {
    run_each(&MATRIX, &mut test);
    run_each(&SQLITE, &mut test);
    run_each(&POSTGRES, test);
}

/// How the hostile foreign unit misbehaves on a log whose descriptor is labelled `poison me`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Hostility {
    /// `apply` poisons the state lazily, `view` then fails to serialize (the reference's probe).
    ViewDetonates,
    /// `apply` returns an error.
    ApplyFails,
    /// `view` panics.
    ViewPanics,
}

/// A foreign unit that misbehaves only for children labelled `poison me`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct HostileUnit(pub(crate) Hostility);

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct HostileState {
    poisoned: bool,
}

pub(crate) struct HostileView(bool);

impl Serialize for HostileView {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        if self.0 {
            return Err(serde::ser::Error::custom("hostile view detonated"));
        }
        serializer.serialize_bool(false)
    }
}

impl ProjectionUnit for HostileUnit {
    type State = HostileState;

    fn key(&self) -> &str {
        "hostile"
    }

    fn state_version(&self) -> u64 {
        1
    }

    fn init(&self) -> HostileState {
        HostileState::default()
    }

    fn reads(&self) -> Option<&'static [&'static str]> {
        Some(&["subagent/descriptor"])
    }

    fn apply(&self, _state: &HostileState, event: &SessionEvent) -> Result<Option<HostileState>, UnitError> {
        let poisoned = event.data.to_value().unwrap().get("label") == Some(&json!("poison me"));
        if !poisoned {
            return Ok(None);
        }
        if self.0 == Hostility::ApplyFails {
            return Err("hostile apply refused the log".into());
        }
        Ok(Some(HostileState { poisoned: true }))
    }
}

impl ClientView for HostileUnit {
    type View = HostileView;

    fn view(&self, state: &HostileState) -> HostileView {
        assert!(!(state.poisoned && self.0 == Hostility::ViewPanics), "hostile view panicked");
        HostileView(state.poisoned)
    }
}
