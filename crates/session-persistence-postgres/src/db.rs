//! The connection side: a small Tokio runtime of the store's own that drives the async client's
//! connections, a `deadpool-postgres` pool on it, and the bridge the synchronous [`Backend`]
//! calls cross (`block_on` with a time bound per query). Errors become [`PersistenceError`]s that
//! never carry the password.
//!
//! [`Backend`]: session_persistence::Backend

use std::{fmt, future::Future, io, path::PathBuf, time::Duration};

use deadpool_postgres::{Manager, ManagerConfig, Pool, PoolError, RecyclingMethod, Runtime};
use session_persistence::{PersistenceError, Result};
use tokio_postgres::error::SqlState;

use crate::config::{PgConfig, scrub};

/// The pool and the runtime its connections run on.
pub(crate) struct Db {
    /// `Some` until drop, which shuts it down in the background (a drop may happen on an async
    /// thread, where waiting for the runtime's threads is not allowed).
    runtime: Option<tokio::runtime::Runtime>,
    pool: Pool,
    pub(crate) shown: String,
    password: Option<String>,
    pub(crate) query_timeout: Duration,
}

impl fmt::Debug for Db {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Db").field("url", &self.shown).finish_non_exhaustive()
    }
}

impl Drop for Db {
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

pub(crate) type Client = deadpool_postgres::Object;

impl Db {
    /// A pool for `config`. Connects lazily: the first query opens the first connection.
    pub(crate) fn new(config: &PgConfig) -> Result<Db> {
        let shown = config.shown().to_owned();
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("session-postgres")
            .enable_all()
            .build()
            .map_err(|error| PersistenceError::io(PathBuf::from(&shown), error))?;
        let mut connection = config.connection.clone();
        let statement_timeout_ms = config.query_timeout.as_millis().max(1);
        let options = match connection.get_options() {
            Some(options) => format!("{options} -c statement_timeout={statement_timeout_ms}"),
            None => format!("-c statement_timeout={statement_timeout_ms}"),
        };
        connection
            .options(options)
            .connect_timeout(config.connect_timeout)
            .keepalives(true)
            .keepalives_idle(Duration::from_secs(30))
            .tcp_user_timeout(config.query_timeout);
        if connection.get_application_name().is_none() {
            connection.application_name("session-persistence-postgres");
        }
        let tls = config.tls.connector().map_err(|message| {
            PersistenceError::io(PathBuf::from(&shown), io::Error::new(io::ErrorKind::InvalidInput, message))
        })?;
        let manager = Manager::from_config(connection, tls, ManagerConfig { recycling_method: RecyclingMethod::Fast });
        let pool = {
            let _entered = runtime.enter();
            Pool::builder(manager)
                .max_size(config.pool_size.max(1))
                .runtime(Runtime::Tokio1)
                .wait_timeout(Some(config.query_timeout))
                .create_timeout(Some(config.connect_timeout))
                .recycle_timeout(Some(config.connect_timeout))
                .build()
                .map_err(|error| PersistenceError::io(PathBuf::from(&shown), io::Error::other(error.to_string())))?
        };
        Ok(Db { runtime: Some(runtime), pool, shown, password: config.password(), query_timeout: config.query_timeout })
    }

    /// Runs `work` with a pooled connection, on the calling thread, blocking it until done.
    ///
    /// Must not be called on an async runtime's worker thread (the coordinator calls backends on
    /// the blocking pool, where this is allowed).
    pub(crate) fn run<T>(&self, work: impl AsyncFnOnce(&mut Client) -> Result<T>) -> Result<T> {
        // Invariant: the runtime lives until drop.
        let runtime = self.runtime.as_ref().expect("the runtime lives as long as the pool");
        runtime.block_on(async {
            let mut client = self.pool.get().await.map_err(|error| self.pool_error(error))?;
            let result = work(&mut client).await;
            if matches!(result, Err(PersistenceError::Io { .. })) {
                // A connection that failed (lost, timed out, or told to go away) may still look
                // open: never hand it out again. The pool opens a fresh one on the next call.
                drop(deadpool_postgres::Object::take(client));
            }
            result
        })
    }

    /// Runs `work` on a connection of its own, kept in `slot` beyond the call (a connection that
    /// session-level locks live on, such as the writer leases'); a missing one is taken from the
    /// pool and no longer counts in it, and `fresh` runs first on each new one. A connection that
    /// fails with an I/O error is dropped, so the next call opens another.
    pub(crate) fn run_detached<T>(
        &self,
        slot: &mut Option<deadpool_postgres::ClientWrapper>,
        fresh: impl AsyncFnOnce(&tokio_postgres::Client) -> Result<()>,
        work: impl AsyncFnOnce(&tokio_postgres::Client) -> Result<T>,
    ) -> Result<T> {
        // Invariant: the runtime lives until drop.
        let runtime = self.runtime.as_ref().expect("the runtime lives as long as the pool");
        runtime.block_on(async {
            if slot.as_ref().is_none_or(|client| client.is_closed()) {
                let pooled = self.pool.get().await.map_err(|error| self.pool_error(error))?;
                let client = deadpool_postgres::Object::take(pooled);
                fresh(&client).await?;
                *slot = Some(client);
            }
            // Invariant: filled just above.
            let client = slot.as_ref().expect("a detached connection is in the slot");
            let result = work(client).await;
            if matches!(result, Err(PersistenceError::Io { .. })) {
                *slot = None;
            }
            result
        })
    }

    /// One step of a query, bounded by the query timeout.
    pub(crate) async fn timed<T>(
        &self,
        what: &str,
        step: impl Future<Output = std::result::Result<T, tokio_postgres::Error>>,
    ) -> Result<T> {
        match tokio::time::timeout(self.query_timeout, step).await {
            Ok(result) => result.map_err(|error| self.error(error)),
            Err(_) => Err(self.timed_out(what)),
        }
    }

    /// [`timed`](Self::timed), handing a server error back as it is (for the callers that
    /// tell a unique violation from other failures).
    pub(crate) async fn timed_raw<T>(
        &self,
        what: &str,
        step: impl Future<Output = std::result::Result<T, tokio_postgres::Error>>,
    ) -> Result<std::result::Result<T, tokio_postgres::Error>> {
        tokio::time::timeout(self.query_timeout, step).await.map_err(|_| self.timed_out(what))
    }

    pub(crate) fn timed_out(&self, what: &str) -> PersistenceError {
        PersistenceError::io(
            PathBuf::from(&self.shown),
            io::Error::new(io::ErrorKind::TimedOut, format!("{what} took longer than {:?}", self.query_timeout)),
        )
    }

    /// A driver or server error: an I/O error on the store carrying the server's message, with
    /// a lost connection as `ConnectionAborted`.
    pub(crate) fn error(&self, error: tokio_postgres::Error) -> PersistenceError {
        let lost = error.code().is_some_and(|code| {
            let code = code.code();
            // Class 08 (connection exception) and the server's shutdowns (57P01..57P03).
            code.starts_with("08") || matches!(code, "57P01" | "57P02" | "57P03")
        });
        let kind = if error.is_closed() || lost {
            io::ErrorKind::ConnectionAborted
        } else if error.code() == Some(&SqlState::QUERY_CANCELED) {
            io::ErrorKind::TimedOut
        } else {
            io::ErrorKind::Other
        };
        let message = match error.as_db_error() {
            Some(db) => format!("{}: {}", db.code().code(), db.message()),
            // The driver's message and its causes: "error performing TLS handshake: invalid peer
            // certificate: UnknownIssuer", not just the first part.
            None => {
                let mut message = error.to_string();
                let mut cause = std::error::Error::source(&error);
                while let Some(inner) = cause {
                    let text = inner.to_string();
                    if !message.ends_with(&text) {
                        message = format!("{message}: {text}");
                    }
                    cause = inner.source();
                }
                message
            }
        };
        PersistenceError::io(PathBuf::from(&self.shown), io::Error::new(kind, self.scrub(&message)))
    }

    fn pool_error(&self, error: PoolError) -> PersistenceError {
        match error {
            PoolError::Backend(error) => self.error(error),
            PoolError::Timeout(_) => self.timed_out("getting a connection"),
            other => PersistenceError::io(
                PathBuf::from(&self.shown),
                io::Error::new(io::ErrorKind::NotConnected, self.scrub(&other.to_string())),
            ),
        }
    }

    pub(crate) fn scrub(&self, text: &str) -> String {
        scrub(text, self.password.as_deref())
    }
}

/// The driver's client under a pooled one.
pub(crate) fn plain(client: &Client) -> &tokio_postgres::Client {
    client
}

/// Whether `error` is a unique-key violation (two writers inserting the same row).
pub(crate) fn is_unique_violation(error: &tokio_postgres::Error) -> bool {
    error.code() == Some(&SqlState::UNIQUE_VIOLATION)
}
