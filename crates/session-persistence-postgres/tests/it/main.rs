//! Integration tests of the PostgreSQL store, each in a schema of its own that is dropped after
//! it (so they run in parallel on one server): the copied persistence and coordinator contracts,
//! lossless rows, racing writers, schema versions, the family and page queries, faults, and the
//! checkpoint store.
//!
//! The server comes from `SESSION_PG_URL` (for example
//! `postgres://postgres@127.0.0.1:5432/test`). Without it each test prints that it was skipped and
//! passes, except under CI (`CI` set), where a missing URL fails the test: CI must run them.

mod checkpoint;
mod contract;
mod faults;
mod queries;
mod writes;

use std::sync::atomic::{AtomicU64, Ordering};

use session_persistence_postgres::{PgConfig, PgStore};

/// The environment variable that names the test server.
pub(crate) const URL_VAR: &str = "SESSION_PG_URL";

fn on_ci() -> bool {
    std::env::var_os("CI").is_some_and(|value| !value.is_empty() && value != "false" && value != "0")
}

/// The test server's URL; `None` (after saying so) when it is not configured outside CI.
pub(crate) fn server_url() -> Option<String> {
    match std::env::var(URL_VAR) {
        Ok(url) if !url.is_empty() => Some(url),
        _ if on_ci() => panic!(
            "{URL_VAR} is not set, and CI must run the PostgreSQL tests: set it to the server's URL, e.g. \
             {URL_VAR}=postgres://postgres@127.0.0.1:5432/test (.ci/run does)"
        ),
        _ => {
            eprintln!(
                "SKIPPED: a PostgreSQL test did not run because {URL_VAR} is not set; run with \
                 {URL_VAR}=postgres://postgres@127.0.0.1:5432/test to enable the PostgreSQL tests"
            );
            None
        }
    }
}

/// A schema of this test's own, set up at creation and dropped with everything in it on drop.
pub(crate) struct TestSchema {
    pub(crate) config: PgConfig,
}

static NEXT_SCHEMA: AtomicU64 = AtomicU64::new(0);

/// A schema name no other test (in this or another process) uses.
pub(crate) fn unique_schema() -> String {
    let n = NEXT_SCHEMA.fetch_add(1, Ordering::Relaxed);
    let nonce = uuid_like();
    format!("t_{}_{n}_{nonce}", std::process::id())
}

fn uuid_like() -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos());
    format!("{:x}", hasher.finish() & 0xffff_ffff)
}

impl TestSchema {
    /// A fresh schema on the test server, set up; `None` when the server is not configured.
    pub(crate) fn new() -> Option<TestSchema> {
        let url = server_url()?;
        let schema = TestSchema::bare_at(&url);
        PgStore::setup(&schema.config).unwrap();
        Some(schema)
    }

    /// A fresh schema name that is not set up (for the setup tests); dropped like the others.
    pub(crate) fn bare() -> Option<TestSchema> {
        Some(TestSchema::bare_at(&server_url()?))
    }

    fn bare_at(url: &str) -> TestSchema {
        TestSchema { config: PgConfig::from_url(url).unwrap().with_schema(&unique_schema()).unwrap().with_pool_size(4) }
    }

    /// A new store over the schema, with its own connections.
    pub(crate) fn open(&self) -> PgStore {
        PgStore::open(&self.config).unwrap()
    }

    /// A plain client on the schema's database, for looking at and damaging rows.
    pub(crate) fn sql(&self, statements: &str) -> Vec<tokio_postgres::SimpleQueryMessage> {
        let url = server_url().expect("a schema exists only with a server");
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(async {
            let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await.unwrap();
            let driver = tokio::spawn(connection);
            let schema = &self.config.schema;
            let messages = client.simple_query(&statements.replace("{s}", schema)).await.unwrap();
            drop(client);
            let _ = driver.await;
            messages
        })
    }

    /// The first column of the first row `query` answers, as text.
    pub(crate) fn value(&self, query: &str) -> Option<String> {
        self.sql(query).into_iter().find_map(|message| match message {
            tokio_postgres::SimpleQueryMessage::Row(row) => Some(row.get(0).map(str::to_owned)),
            _ => None,
        })?
    }
}

impl Drop for TestSchema {
    fn drop(&mut self) {
        // On a thread of its own: a drop may run on an async thread, where blocking is not allowed.
        std::thread::scope(|scope| {
            scope.spawn(|| self.sql("DROP SCHEMA IF EXISTS {s} CASCADE"));
        });
    }
}
