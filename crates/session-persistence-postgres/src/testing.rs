//! Helpers for tests that run against a PostgreSQL server: the server named by
//! [`SESSION_PG_URL`](URL_VAR), scratch schemas that are set up for one test and dropped after it
//! (so tests run in parallel on one server), and a [`PrivateCluster`] of a test's own to crash
//! and restart.
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
    net::{IpAddr, Ipv4Addr, TcpListener},
    os::unix::fs::MetadataExt,
    path::PathBuf,
    process::Command,
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
        PgStore::setup(&config).map(drop).expect("set up a scratch schema");
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

    /// A new store over the schema, with connections of its own. Callable from async code, as
    /// every store call is (see the crate documentation).
    ///
    /// # Panics
    ///
    /// When the store cannot be opened.
    pub fn open(&self) -> PgStore {
        PgStore::open(&self.config).expect("open the scratch schema's store")
    }

    /// Runs `statements` (simple-query protocol, `{s}` standing for the schema's name) and
    /// answers the rows, each column as text; for looking at and damaging rows in tests.
    ///
    /// # Panics
    ///
    /// When the server cannot be reached or a statement fails.
    pub fn sql(&self, statements: &str) -> Vec<Vec<Option<String>>> {
        let (config, statements) = (self.config.clone(), crate::schema::qualify(statements, &self.config.schema));
        off_async(move || run_sql(&config, &statements)).expect("the statements run on the test server")
    }

    /// The first column of the first row `query` answers.
    pub fn value(&self, query: &str) -> Option<String> {
        self.sql(query).into_iter().next()?.into_iter().next()?
    }
}

impl Drop for ScratchSchema {
    fn drop(&mut self) {
        let (config, statement) =
            (self.config.clone(), crate::schema::qualify("DROP SCHEMA IF EXISTS {s} CASCADE", self.name()));
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

/// Runs `work` on a thread of its own: [`run_sql`] blocks on a runtime of its own, which an async
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

/// A PostgreSQL cluster of one test's own, in a temp directory and on a port of its own, that the
/// test can stop as a crash stops a server and start again (the shared test server is never
/// touched). It listens on `127.0.0.1`, and on the addresses given to
/// [`start_listening`](PrivateCluster::start_listening) (for clients in network namespaces of
/// the test's own). Stopped (immediately) and removed on drop. Needs the server binaries (`initdb`,
/// `pg_ctl`, found through `pg_config --bindir` or the `PATH`); as root, the tools run as the
/// `postgres` user through `runuser`.
#[derive(Debug)]
pub struct PrivateCluster {
    dir: tempfile::TempDir,
    bin: PathBuf,
    port: u16,
    /// The addresses it listens on (`listen_addresses`), `127.0.0.1` first.
    listen: Vec<IpAddr>,
    /// Run the server tools as this user (`initdb` refuses to run as root).
    as_user: Option<String>,
}

impl PrivateCluster {
    /// Creates and starts a cluster; `None` (after saying so) when the server binaries are not
    /// installed, outside CI.
    ///
    /// # Panics
    ///
    /// Under CI when they are not, and when a tool fails.
    pub fn start() -> Option<PrivateCluster> {
        PrivateCluster::start_listening(&[], None)
    }

    /// Creates and starts a cluster that also listens on `addresses` (each must be an address of
    /// this host already) and trusts clients from `trusted` too (a CIDR subnet, such as
    /// `10.7.0.0/16`: a `pg_hba.conf` line `host all all <trusted> trust`); `None` as for
    /// [`start`](PrivateCluster::start).
    ///
    /// # Panics
    ///
    /// As [`start`](PrivateCluster::start).
    pub fn start_listening(addresses: &[IpAddr], trusted: Option<&str>) -> Option<PrivateCluster> {
        let Some(bin) = server_bin_dir() else {
            assert!(
                !on_ci(),
                "the PostgreSQL server binaries (initdb, pg_ctl) are not installed, and CI must run the tests that need them"
            );
            eprintln!("SKIPPED: a test needs the PostgreSQL server binaries (initdb, pg_ctl)");
            return None;
        };
        let dir = tempfile::tempdir().unwrap();
        let as_user = (std::fs::metadata(dir.path()).unwrap().uid() == 0).then(|| "postgres".to_owned());
        // As root the tools run as `postgres` through `runuser`, which both must exist.
        let can_switch = || {
            Command::new("runuser")
                .args(["-u", "postgres", "--", "true"])
                .output()
                .is_ok_and(|out| out.status.success())
        };
        if as_user.is_some() && !can_switch() {
            assert!(!on_ci(), "running as root, a private cluster needs `runuser` and a `postgres` user");
            eprintln!("SKIPPED: running as root, a private cluster needs `runuser` and a `postgres` user");
            return None;
        }
        if let Some(user) = &as_user {
            let uid = command_output(Command::new("id").args(["-u", user])).trim().parse().expect("a uid");
            std::os::unix::fs::chown(dir.path(), Some(uid), None).unwrap();
        }
        let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let mut listen = vec![IpAddr::V4(Ipv4Addr::LOCALHOST)];
        for address in addresses {
            if !listen.contains(address) {
                listen.push(*address);
            }
        }
        let server = PrivateCluster { dir, bin, port, listen, as_user };
        server.tool("initdb", &["-D", &server.data(), "-A", "trust", "-U", "postgres", "-E", "UTF8", "--no-sync"]);
        if let Some(subnet) = trusted {
            let hba = std::path::Path::new(&server.data()).join("pg_hba.conf");
            let mut lines = std::fs::read_to_string(&hba).unwrap();
            lines.push_str(&format!("host all all {subnet} trust\n"));
            std::fs::write(&hba, lines).unwrap();
        }
        server.up();
        Some(server)
    }

    /// The cluster's data directory.
    fn data(&self) -> String {
        self.dir.path().join("data").to_str().unwrap().to_owned()
    }

    /// The URL of a store in `schema` of the cluster's `postgres` database (trust authentication).
    pub fn url(&self, schema: &str) -> String {
        self.url_at(IpAddr::V4(Ipv4Addr::LOCALHOST), schema)
    }

    /// The URL of a store in `schema`, reached at `address` (one it listens on).
    pub fn url_at(&self, address: IpAddr, schema: &str) -> String {
        let host = match address {
            IpAddr::V4(address) => address.to_string(),
            IpAddr::V6(address) => format!("[{address}]"),
        };
        format!("postgres://postgres@{host}:{}/postgres?schema={schema}", self.port)
    }

    /// Runs `statements` on the cluster's `postgres` database over `127.0.0.1` (simple-query
    /// protocol, `{s}` standing for `schema`, quoted) and answers the rows, each column as text;
    /// for looking at what a store holds, and at the server's own views, in tests.
    ///
    /// # Panics
    ///
    /// When the server cannot be reached or a statement fails.
    pub fn sql(&self, schema: &str, statements: &str) -> Vec<Vec<Option<String>>> {
        let config = PgConfig::from_url(&self.url(schema)).expect("a private cluster's URL is a PostgreSQL URL");
        let statements = crate::schema::qualify(statements, schema);
        off_async(move || run_sql(&config, &statements)).expect("the statements run on the private cluster")
    }

    /// Starts the server and waits until it accepts connections.
    ///
    /// # Panics
    ///
    /// When `pg_ctl` fails.
    pub fn up(&self) {
        let listen: Vec<String> = self.listen.iter().map(IpAddr::to_string).collect();
        let options = format!(
            "-p {} -k {} -c listen_addresses={} -c fsync=off -c shared_buffers=16MB",
            self.port,
            self.dir.path().display(),
            listen.join(",")
        );
        let log = self.dir.path().join("server.log");
        self.tool("pg_ctl", &["-D", &self.data(), "-l", log.to_str().unwrap(), "-o", &options, "-w", "start"]);
    }

    /// Stops the server as a crash would: no checkpoint, every backend killed mid-statement.
    ///
    /// # Panics
    ///
    /// When `pg_ctl` fails.
    pub fn crash(&self) {
        self.tool("pg_ctl", &["-D", &self.data(), "-m", "immediate", "-w", "stop"]);
    }

    fn tool(&self, name: &str, args: &[&str]) {
        let tool = self.bin.join(name);
        let mut command = match &self.as_user {
            Some(user) => {
                let mut command = Command::new("runuser");
                command.args(["-u", user, "--"]).arg(&tool);
                command
            }
            None => Command::new(&tool),
        };
        command_output(command.args(args).current_dir(self.dir.path()));
    }
}

impl Drop for PrivateCluster {
    fn drop(&mut self) {
        let _ = Command::new(self.bin.join("pg_ctl")).args(["-D", &self.data(), "-m", "immediate", "stop"]).output();
        if self.as_user.is_some() {
            let _ = Command::new("runuser")
                .args(["-u", "postgres", "--"])
                .arg(self.bin.join("pg_ctl"))
                .args(["-D", &self.data(), "-m", "immediate", "stop"])
                .output();
        }
    }
}

/// Where `initdb` and `pg_ctl` live: `pg_config --bindir`, else the `PATH`.
fn server_bin_dir() -> Option<PathBuf> {
    let from_config = Command::new("pg_config")
        .arg("--bindir")
        .output()
        .ok()
        .filter(|output| output.status.success())
        .map(|output| PathBuf::from(String::from_utf8_lossy(&output.stdout).trim()));
    let from_path = std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path).find(|dir| dir.join("initdb").is_file() && dir.join("pg_ctl").is_file())
    });
    from_config.filter(|dir| dir.join("initdb").is_file() && dir.join("pg_ctl").is_file()).or(from_path)
}

fn command_output(command: &mut Command) -> String {
    let output = command.output().unwrap_or_else(|error| panic!("{command:?}: {error}"));
    assert!(
        output.status.success(),
        "{command:?} failed ({}): {}{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}
