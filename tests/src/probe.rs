//! What the benchmark probes (`src/bin/*`) share: a PostgreSQL schema of a run's own, a
//! directory for a store, and timing helpers.

use std::{path::Path, time::Instant};

use session_persistence_postgres::PgConfig;

/// A PostgreSQL schema of this run's own, dropped when this is dropped (unless [kept](Self::keep)).
#[derive(Debug)]
pub struct PgSchema {
    /// The store URL, with `schema=` set.
    pub url: String,
    /// The URL's settings.
    pub config: PgConfig,
    /// The schema's name.
    pub name: String,
    kept: bool,
}

impl PgSchema {
    /// A schema named `<probe>_<pid>` on the server at `server` (a URL without `schema=`); it is
    /// created by the first store that sets it up.
    pub fn create(server: &str, probe: &str) -> PgSchema {
        let name = format!("{probe}_{}", std::process::id());
        let separator = if server.contains('?') { '&' } else { '?' };
        let url = format!("{server}{separator}schema={name}");
        let config = PgConfig::from_url(&url).expect("a PostgreSQL URL");
        PgSchema { url, config, name, kept: false }
    }

    /// Leaves the schema in place when this is dropped (for a profiler), and answers its URL.
    pub fn keep(mut self) -> String {
        self.kept = true;
        std::mem::take(&mut self.url)
    }

    /// Runs `statement` on a connection of its own, from a thread of its own (so that it may be
    /// called from inside the benchmark's runtime).
    pub fn sql(&self, statement: &str) {
        let server = self.url.split('?').next().unwrap_or_default().to_owned();
        let statement = statement.to_owned();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
            runtime.block_on(async {
                let (client, connection) =
                    tokio_postgres::connect(&server, tokio_postgres::NoTls).await.expect("connect to PostgreSQL");
                let driver = tokio::spawn(connection);
                client.batch_execute(&statement).await.unwrap_or_else(|error| panic!("{statement}: {error}"));
                drop(client);
                let _ = driver.await;
            });
        })
        .join()
        .expect("the SQL thread");
    }
}

impl Drop for PgSchema {
    fn drop(&mut self) {
        if self.kept {
            return;
        }
        self.sql(&format!("DROP SCHEMA IF EXISTS {} CASCADE", self.name));
    }
}

/// A directory for a store: in `/dev/shm` when it exists, so that writing many durable commits
/// takes seconds; what reads cost there is a page-cache figure, as for any store that fits in
/// memory.
pub fn store_dir() -> tempfile::TempDir {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() { tempfile::tempdir_in(shm) } else { tempfile::tempdir() }.expect("a temp dir for the store")
}

/// Runs `work`, printing how long it took as `<what> in <time>` on stderr.
pub fn timed<T>(what: &str, work: impl FnOnce() -> T) -> T {
    let started = Instant::now();
    let value = work();
    eprintln!("{what} in {:.1?}", started.elapsed());
    value
}

/// The value at quantile `q` (nearest rank) of `samples`; NaN when there are none.
pub fn quantile(samples: &[f64], q: f64) -> f64 {
    let mut sorted = samples.to_vec();
    sorted.sort_by(f64::total_cmp);
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len()) - 1]
}
