//! Helpers for tests that run against a PostgreSQL server: the server named by
//! [`SESSION_PG_URL`](URL_VAR), and scratch schemas that are set up for one test and dropped
//! after it, so tests run in parallel on one server.
//!
//! Without the variable a test skips (after saying so and how to enable it), except under CI
//! (`CI` set), where it fails: CI must never skip the PostgreSQL tests silently.
//!
//! ```no_run
//! use session_persistence_postgres::testing::ScratchSchema;
//!
//! let Some(schema) = ScratchSchema::new() else { return }; // skipped: no server configured
//! let store = schema.open();
//! // … use `store`; the schema and everything in it are dropped with `schema`.
//! ```

use std::{
    hash::{BuildHasher, Hasher},
    sync::atomic::{AtomicU64, Ordering},
};

use crate::{PgConfig, PgStore};

/// The environment variable that names the test server, for example
/// `postgres://postgres@127.0.0.1:5432/test`.
pub const URL_VAR: &str = "SESSION_PG_URL";

/// Whether this runs under CI (`CI` set to anything but empty, `false` or `0`).
pub fn on_ci() -> bool {
    std::env::var_os("CI").is_some_and(|value| !value.is_empty() && value != "false" && value != "0")
}

/// The test server's URL from [`URL_VAR`]; `None`, after printing that the test was skipped and
/// how to enable it, when the variable is unset outside CI.
///
/// # Panics
///
/// Under CI when the variable is unset.
pub fn server_url() -> Option<String> {
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

/// A schema of one test's own on the test server, dropped with everything in it on drop.
#[derive(Debug)]
pub struct ScratchSchema {
    config: PgConfig,
    url: String,
}

impl ScratchSchema {
    /// A fresh schema, set up at this build's version; `None` when the server is not configured
    /// (see [`server_url`]).
    ///
    /// # Panics
    ///
    /// When the server cannot be reached or the setup fails.
    pub fn new() -> Option<ScratchSchema> {
        let schema = ScratchSchema::bare()?;
        let config = schema.config.clone();
        off_async(move || PgStore::setup(&config).map(drop)).expect("set up a scratch schema");
        Some(schema)
    }

    /// A fresh schema name that is not set up (for tests of the setup step), dropped like any.
    pub fn bare() -> Option<ScratchSchema> {
        let url = server_url()?;
        let name = unique_name();
        let config = PgConfig::from_url(&url)
            .and_then(|config| config.with_schema(&name))
            .expect("the test server's URL is a PostgreSQL URL")
            .with_pool_size(4);
        let url = format!("{url}{}schema={name}", if url.contains('?') { '&' } else { '?' });
        Some(ScratchSchema { config, url })
    }

    /// The store's configuration (pool of 4), to adjust and open.
    pub fn config(&self) -> &PgConfig {
        &self.config
    }

    /// The schema's name.
    pub fn name(&self) -> &str {
        &self.config.schema
    }

    /// The store's URL, naming the schema (`…?schema=NAME`), as `apiproxy --store` takes it.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// A new store over the schema, with connections of its own. Callable from async code: the
    /// store is opened on a thread of its own.
    ///
    /// # Panics
    ///
    /// When the store cannot be opened.
    pub fn open(&self) -> PgStore {
        let config = self.config.clone();
        off_async(move || PgStore::open(&config)).expect("open the scratch schema's store")
    }

    /// Runs `statements` (simple-query protocol, `{s}` standing for the schema's name) and
    /// answers the rows, each column as text; for looking at and damaging rows in tests.
    ///
    /// # Panics
    ///
    /// When the server cannot be reached or a statement fails.
    pub fn sql(&self, statements: &str) -> Vec<Vec<Option<String>>> {
        let (config, statements) = (self.config.clone(), statements.replace("{s}", &self.config.schema));
        off_async(move || run_sql(&config, &statements)).expect("the statements run on the test server")
    }

    /// The first column of the first row `query` answers.
    pub fn value(&self, query: &str) -> Option<String> {
        self.sql(query).into_iter().next()?.into_iter().next()?
    }
}

impl Drop for ScratchSchema {
    fn drop(&mut self) {
        let (config, statement) = (self.config.clone(), format!("DROP SCHEMA IF EXISTS {} CASCADE", self.name()));
        let dropped = off_async(move || run_sql(&config, &statement));
        // While a test fails, best effort: never a panic inside a panic.
        if let Err(error) = dropped
            && !std::thread::panicking()
        {
            panic!("dropping the scratch schema {} failed: {error}", self.name());
        }
    }
}

/// Runs `statements` on a connection of their own (over the store's TLS settings) and answers
/// the rows, each column as text.
fn run_sql(config: &PgConfig, statements: &str) -> Result<Vec<Vec<Option<String>>>, String> {
    let runtime =
        tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(|error| error.to_string())?;
    // Bounded, so a test (or a drop) never hangs on a server that went away.
    let bound = std::time::Duration::from_secs(60);
    runtime.block_on(async {
        let tls = config.tls.connector()?;
        let mut connection = config.connection.clone();
        connection.connect_timeout(std::time::Duration::from_secs(10));
        let (client, connection) = connection.connect(tls).await.map_err(|error| error.to_string())?;
        let driver = tokio::spawn(connection);
        let messages = match tokio::time::timeout(bound, client.simple_query(statements)).await {
            Ok(messages) => messages.map_err(|error| error.to_string()),
            Err(_) => Err(format!("the statements took longer than {bound:?}")),
        };
        drop(client);
        let _ = driver.await;
        Ok(messages?
            .into_iter()
            .filter_map(|message| match message {
                tokio_postgres::SimpleQueryMessage::Row(row) => {
                    Some((0..row.len()).map(|column| row.get(column).map(str::to_owned)).collect())
                }
                _ => None,
            })
            .collect())
    })
}

/// Runs `work` on a thread of its own: the store blocks on a runtime of its own, which an async
/// caller's thread must not do.
fn off_async<T: Send>(work: impl FnOnce() -> T + Send) -> T {
    std::thread::scope(|scope| scope.spawn(work).join().unwrap_or_else(|panic| std::panic::resume_unwind(panic)))
}

/// A schema name no other test (in this or another process) uses.
fn unique_name() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher
        .write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos());
    format!("t_{}_{n}_{:x}", std::process::id(), hasher.finish() & 0xffff_ffff)
}
