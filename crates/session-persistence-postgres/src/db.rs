//! The connection side: a small Tokio runtime of the store's own that drives the async client's
//! connections, a `deadpool-postgres` pool on it, and the bridge the synchronous [`Backend`]
//! calls cross (a wait on the store's runtime with a time bound per query, from whatever thread
//! calls: see [`Db::run`]). Errors become [`PersistenceError`]s that never carry the password.
//!
//! [`Backend`]: session_persistence::Backend

use std::{
    fmt,
    future::Future,
    sync::Arc,
    task::{Context, Poll, Wake, Waker},
    time::Duration,
};

use deadpool_postgres::{Manager, ManagerConfig, Pool, PoolError, RecyclingMethod, Runtime, TimeoutType};
use session_persistence::{DatabaseFault, PersistenceError, Result};
use tokio::runtime::RuntimeFlavor;
use tokio_postgres::{
    Row,
    error::SqlState,
    types::{FromSql, ToSql},
};

use crate::{
    config::{PgConfig, scrub_all},
    tls::Connector,
};

/// The `application_name` of the store's connections when the URL names none.
const APPLICATION: &str = "session-persistence-postgres";

/// What a store's listening connection appends to the store's `application_name`.
pub(crate) const LISTENER_SUFFIX: &str = "-listener";

/// The pool and the runtime its connections run on.
pub(crate) struct Db {
    /// `Some` until drop, which shuts it down in the background (a drop may happen on an async
    /// thread, where waiting for the runtime's threads is not allowed).
    runtime: Option<tokio::runtime::Runtime>,
    pool: Pool,
    pub(crate) shown: String,
    secrets: Vec<String>,
    pub(crate) query_timeout: Duration,
    connect_timeout: Duration,
    /// How to open a connection of its own outside the pool (a watch's listening connection).
    dialer: Dialer,
}

/// Opens connections outside the pool with the pool's settings (TLS, timeouts, keepalives,
/// `statement_timeout`), named `<application_name>-listener`. Cheap to clone, so a task that
/// outlives a call can keep one.
#[derive(Clone)]
pub(crate) struct Dialer {
    connection: tokio_postgres::Config,
    tls: Connector,
    pub(crate) shown: String,
    secrets: Vec<String>,
    pub(crate) query_timeout: Duration,
    connect_timeout: Duration,
}

/// A connection of a [`Dialer`]'s: the caller polls it (for its notifications, among others).
pub(crate) type DialedConnection = tokio_postgres::Connection<
    tokio_postgres::Socket,
    <Connector as tokio_postgres::tls::MakeTlsConnect<tokio_postgres::Socket>>::Stream,
>;

impl Dialer {
    /// A new connection, bounded by the connect timeout.
    pub(crate) async fn connect(&self) -> Result<(tokio_postgres::Client, DialedConnection)> {
        match tokio::time::timeout(self.connect_timeout, self.connection.connect(self.tls.clone())).await {
            Ok(connected) => connected.map_err(|error| self.error(error)),
            Err(_) => Err(took_longer(&self.shown, "connecting", self.connect_timeout)),
        }
    }

    /// A driver or server error, as [`Db::error`] maps it.
    pub(crate) fn error(&self, error: tokio_postgres::Error) -> PersistenceError {
        map_error(&self.shown, &self.secrets, error)
    }

    /// A step of a query on a dialed connection, bounded by the query timeout.
    pub(crate) async fn timed<T>(
        &self,
        what: &str,
        step: impl Future<Output = std::result::Result<T, tokio_postgres::Error>>,
    ) -> Result<T> {
        match tokio::time::timeout(self.query_timeout, step).await {
            Ok(result) => result.map_err(|error| self.error(error)),
            Err(_) => Err(took_longer(&self.shown, what, self.query_timeout)),
        }
    }

    /// `sql` as a statement prepared once per pooled connection (the pool's statement cache):
    /// each later use is one round trip, with no parse or plan of its text. Only for fixed
    /// statements; text built per call would grow the cache.
    pub(crate) async fn prepared(&self, client: &Client, sql: &str) -> Result<tokio_postgres::Statement> {
        self.timed("preparing a statement", client.prepare_cached(sql)).await
    }
}

/// A handle on the pool that a task can keep beyond the call that started it: a statement on a
/// pooled connection, bounded by the query timeout, its errors mapped as [`Db::error`] maps them.
#[derive(Clone)]
pub(crate) struct Pooled {
    pool: Pool,
    dialer: Dialer,
}

impl Pooled {
    /// Runs the fixed statement `sql` (prepared once per connection) with `params` on a pooled
    /// connection; `what` names it in a timeout's message.
    pub(crate) async fn execute(&self, what: &str, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Result<u64> {
        let dialer = &self.dialer;
        let client = self.pool.get().await.map_err(|error| {
            pool_error(&dialer.shown, &dialer.secrets, dialer.query_timeout, dialer.connect_timeout, error)
        })?;
        let result = match self.dialer.prepared(&client, sql).await {
            Ok(statement) => self.dialer.timed(what, client.execute(&statement, params)).await,
            Err(error) => Err(error),
        };
        discard_if_failed(client, &result);
        result
    }
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
        tracing::debug!(store = %shown, pool_size = config.pool_size, connect_timeout = ?config.connect_timeout, "opening a connection pool");
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("session-postgres")
            .enable_all()
            .build()
            .map_err(|error| {
                PersistenceError::database(
                    &shown,
                    DatabaseFault::Other,
                    format!("starting the driver's runtime: {error}"),
                )
            })?;
        let mut connection = config.connection.clone();
        let statement_timeout_ms = config.query_timeout.as_millis().max(1);
        // The writes' fence relies on READ COMMITTED (a statement after another writer's commit
        // sees it); a server or role that defaults to another level would turn a lost race into
        // a serialization failure. Reads that need one snapshot ask for REPEATABLE READ
        // themselves. After the user's options, so these win.
        let ours =
            format!("-c statement_timeout={statement_timeout_ms} -c default_transaction_isolation=read\\ committed");
        let options = match connection.get_options() {
            Some(options) => format!("{options} {ours}"),
            None => ours,
        };
        connection
            .options(options)
            .connect_timeout(config.connect_timeout)
            .keepalives(true)
            .keepalives_idle(Duration::from_secs(30))
            .tcp_user_timeout(config.query_timeout);
        if connection.get_application_name().is_none() {
            connection.application_name(APPLICATION);
        }
        let tls = config
            .tls
            .connector()
            .map_err(|message| PersistenceError::database(&shown, DatabaseFault::Other, message))?;
        let mut listener = connection.clone();
        let name = connection.get_application_name().unwrap_or(APPLICATION);
        listener.application_name(format!("{name}{LISTENER_SUFFIX}"));
        let dialer = Dialer {
            connection: listener,
            tls: tls.clone(),
            shown: shown.clone(),
            secrets: config.secrets().to_vec(),
            query_timeout: config.query_timeout,
            connect_timeout: config.connect_timeout,
        };
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
                .map_err(|error| PersistenceError::database(&shown, DatabaseFault::Other, error.to_string()))?
        };
        Ok(Db {
            runtime: Some(runtime),
            pool,
            shown,
            secrets: config.secrets().to_vec(),
            query_timeout: config.query_timeout,
            connect_timeout: config.connect_timeout,
            dialer,
        })
    }

    /// The store's runtime, where the connections, the pool and the timers live.
    fn runtime(&self) -> &tokio::runtime::Runtime {
        // Invariant: `runtime` is `None` only once `drop` has taken it.
        self.runtime.as_ref().expect("the runtime lives as long as the pool")
    }

    /// How many connections the pool holds, idle or in use (for the `testing` feature's hook).
    #[cfg(feature = "testing")]
    pub(crate) fn pool_size(&self) -> usize {
        self.pool.status().size
    }

    /// How to open connections of their own outside the pool.
    pub(crate) fn dialer(&self) -> &Dialer {
        &self.dialer
    }

    /// The pool, for a task on the store's runtime that outlives a call (see [`Pooled`]).
    pub(crate) fn pooled(&self) -> Pooled {
        Pooled { pool: self.pool.clone(), dialer: self.dialer.clone() }
    }

    /// Starts `task` on the store's runtime (it ends when the runtime does: with the store).
    pub(crate) fn spawn(&self, task: impl Future<Output = ()> + Send + 'static) {
        drop(self.runtime().spawn(task));
    }

    /// Runs `work` with a pooled connection, blocking the calling thread until it is done. Works
    /// from any thread, and never panics for want of the right one:
    ///
    /// - outside a Tokio runtime (a plain thread, or Tokio's blocking pool, where the coordinator
    ///   calls backends), it blocks on the store's runtime;
    /// - on a worker of a multi-thread runtime, it does the same inside
    ///   `tokio::task::block_in_place`, so that worker's other tasks move to another worker while
    ///   it waits;
    /// - on a current-thread runtime, whose one thread cannot be handed off, it polls `work` on
    ///   this thread with the store's runtime entered (the connections, the pool and the timers
    ///   all run there, so nothing waits for the caller's runtime: no deadlock), and blocks that
    ///   thread until the answer comes, for at most the query timeout per step.
    pub(crate) fn run<T>(&self, work: impl AsyncFnOnce(&mut Client) -> Result<T>) -> Result<T> {
        self.run_with(work, discard_if_failed)
    }

    fn run_with<T>(
        &self,
        work: impl AsyncFnOnce(&mut Client) -> Result<T>,
        settle: impl FnOnce(Client, &Result<T>),
    ) -> Result<T> {
        self.block(self.call_with(work, settle))
    }

    /// `work` with a pooled connection, as a future: for [`block`](Self::block), or for a task
    /// on the store's runtime ([`spawn_call`](Self::spawn_call)). A connection that failed is
    /// discarded, as [`run`](Self::run) does.
    pub(crate) async fn call<T>(&self, work: impl AsyncFnOnce(&mut Client) -> Result<T>) -> Result<T> {
        self.call_with(work, discard_if_failed).await
    }

    async fn call_with<T>(
        &self,
        work: impl AsyncFnOnce(&mut Client) -> Result<T>,
        settle: impl FnOnce(Client, &Result<T>),
    ) -> Result<T> {
        let mut client = self.pool.get().await.map_err(|error| self.pool_error(error))?;
        let result = work(&mut client).await;
        settle(client, &result);
        result
    }

    /// Blocks the calling thread until `call` is done, from any thread (see [`run`](Self::run)).
    pub(crate) fn block<T>(&self, call: impl Future<Output = T>) -> T {
        let runtime = self.runtime();
        match tokio::runtime::Handle::try_current().map(|caller| caller.runtime_flavor()) {
            Err(_) => runtime.block_on(call),
            // Also right on the multi-thread runtime's blocking pool, where `block_in_place`
            // only runs the closure.
            Ok(RuntimeFlavor::MultiThread) => tokio::task::block_in_place(|| runtime.block_on(call)),
            // A current-thread runtime (its worker, where `block_on` would panic, or its blocking
            // pool: the two cannot be told apart, and this is right on both).
            Ok(_) => {
                let _entered = runtime.enter();
                // Unconstrained: the caller's task budget must not make the store's timers and
                // channels yield forever to a task that cannot yield.
                wait_here(tokio::task::unconstrained(call))
            }
        }
    }

    /// Runs `call` as a task on the store's runtime, where the connections, the pool and the
    /// timers live, and answers it to whoever awaits, on any runtime or none: no thread waits
    /// for it. The task runs to its end even if the answer is no longer awaited. `Cancelled` only
    /// where the runtime shut down under the task (its store dropped), which may hide a commit:
    /// a caller that hands the task its store (as an append does) keeps the runtime alive.
    pub(crate) fn spawn_call<T: Send + 'static>(
        &self,
        call: impl Future<Output = Result<T>> + Send + 'static,
    ) -> impl Future<Output = Result<T>> + Send + 'static {
        let task = self.runtime().spawn(call);
        async move {
            match task.await {
                Ok(answer) => answer,
                Err(error) if error.is_panic() => std::panic::resume_unwind(error.into_panic()),
                Err(_) => Err(PersistenceError::Cancelled),
            }
        }
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
        // As every synchronous call, through `block`: from async code too, never a panic.
        self.block(async {
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

    /// [`Dialer::prepared`] on a connection of this pool.
    pub(crate) async fn prepared(&self, client: &Client, sql: &str) -> Result<tokio_postgres::Statement> {
        self.dialer.prepared(client, sql).await
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
        self.took_longer(what, self.query_timeout)
    }

    /// A [`DatabaseFault::Timeout`] naming the bound that was passed.
    fn took_longer(&self, what: &str, bound: Duration) -> PersistenceError {
        took_longer(&self.shown, what, bound)
    }

    /// A driver or server error: [`PersistenceError::Database`] carrying the server's message
    /// (its SQLSTATE first), a lost connection as [`DatabaseFault::Connection`].
    pub(crate) fn error(&self, error: tokio_postgres::Error) -> PersistenceError {
        map_error(&self.shown, &self.secrets, error)
    }

    fn pool_error(&self, error: PoolError) -> PersistenceError {
        pool_error(&self.shown, &self.secrets, self.query_timeout, self.connect_timeout, error)
    }

    pub(crate) fn scrub(&self, text: &str) -> String {
        scrub_all(text, &self.secrets)
    }

    /// Column `idx` of `row` as a `T`. The driver's `Row::get` panics on a value of another
    /// type than asked for (a column altered outside this crate, a schema this build did not
    /// set up): here that is a [`DatabaseFault::Other`] naming the column, never a panic.
    pub(crate) fn column<'a, T: FromSql<'a>>(&self, row: &'a Row, idx: usize) -> Result<T> {
        row.try_get(idx).map_err(|error| {
            let name = row.columns().get(idx).map_or("?", |column| column.name());
            let message = format!("reading column {idx} ({name}) of a result row: {error}");
            PersistenceError::database(&self.shown, DatabaseFault::Other, self.scrub(&message))
        })
    }
}

/// Returns `client` to the pool, unless `result` is a database failure: a connection that
/// failed (lost, timed out, or told to go away) may still look open, so it is never handed out
/// again, and the pool opens a fresh one on the next call.
fn discard_if_failed<T>(client: Client, result: &Result<T>) {
    if matches!(result, Err(PersistenceError::Database { .. })) {
        drop(deadpool_postgres::Object::take(client));
    }
}

/// A failure to get a pooled connection of the store `shown` (its password among `secrets`).
fn pool_error(
    shown: &str,
    secrets: &[String],
    query_timeout: Duration,
    connect_timeout: Duration,
    error: PoolError,
) -> PersistenceError {
    match error {
        PoolError::Backend(error) => map_error(shown, secrets, error),
        PoolError::Timeout(TimeoutType::Wait) => took_longer(shown, "waiting for a pooled connection", query_timeout),
        // Opening a connection (TCP, TLS, the startup and authentication exchange) is bounded by
        // the connect timeout, and the message names that figure.
        PoolError::Timeout(TimeoutType::Create | TimeoutType::Recycle) => {
            took_longer(shown, "connecting", connect_timeout)
        }
        other => PersistenceError::database(shown, DatabaseFault::Connection, scrub_all(&other.to_string(), secrets)),
    }
}

/// A [`DatabaseFault::Timeout`] naming the bound that was passed.
fn took_longer(shown: &str, what: &str, bound: Duration) -> PersistenceError {
    PersistenceError::database(shown, DatabaseFault::Timeout, format!("{what} took longer than {bound:?}"))
}

/// A driver or server error: [`PersistenceError::Database`] carrying the server's message (its
/// SQLSTATE first), a lost connection as [`DatabaseFault::Connection`], scrubbed of `secrets`.
fn map_error(shown: &str, secrets: &[String], error: tokio_postgres::Error) -> PersistenceError {
    let lost = error.code().is_some_and(|code| {
        let code = code.code();
        // Class 08 (connection exception) and the server's shutdowns (57P01..57P03).
        code.starts_with("08") || matches!(code, "57P01" | "57P02" | "57P03")
    });
    let kind = if error.is_closed() || lost {
        DatabaseFault::Connection
    } else if error.code() == Some(&SqlState::QUERY_CANCELED) {
        DatabaseFault::Timeout
    } else if error.as_db_error().is_some() {
        DatabaseFault::Server
    } else {
        // The driver's own failures: a connection it could not make (TCP, TLS, auth
        // exchange) among them.
        DatabaseFault::Connection
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
    PersistenceError::database(shown, kind, scrub_all(&message, secrets))
}

/// Polls `future` to its end on the calling thread, parking the thread between polls (what a
/// current-thread runtime's worker can do without Tokio's `block_on`, which refuses to nest).
fn wait_here<F: Future>(future: F) -> F::Output {
    struct Unpark(std::thread::Thread);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
        fn wake_by_ref(self: &Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut context = Context::from_waker(&waker);
    let mut future = std::pin::pin!(future);
    loop {
        if let Poll::Ready(output) = future.as_mut().poll(&mut context) {
            return output;
        }
        // A spurious wake-up only costs one more poll.
        std::thread::park();
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
