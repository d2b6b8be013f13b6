//! The `apiproxy` binary: serve a session store over HTTP and WebSocket, and operate on a store
//! directory (list, show, subagents, verify).
//!
//! Exit codes: 0 success; 1 an operational error (printed as one line); 2 a usage error;
//! 3 `verify` found a log that is not healthy, or `copy` left a session out.
//!
//! The command line (`cli::args`), what the commands do to a store (`cli::ops`) and the demo store
//! of `serve --demo` (`cli::demo`) are this binary's own modules, not the library's API.

mod calendar;
mod cli {
    //! The binary's own modules: its command line, the store operations of its commands, the
    //! demo store and its turns.

    pub(crate) mod args;
    pub(crate) mod copy;
    pub(crate) mod demo;
    #[cfg(feature = "fault-hooks")]
    pub(crate) mod faults;
    pub(crate) mod ops;
    pub(crate) mod turns;
}

use std::{
    io::{IsTerminal, Write},
    net::SocketAddr,
    process::ExitCode,
    sync::Arc,
};

use anyhow::{Context, Result, bail};
use apiproxy::{AccessConfig, ApiProxy, ProxyConfig, ProxyParts};
use clap::Parser;
use session_core::SessionStore;
use session_persistence::Coordinator;
use session_persistence::SessionPersistence;
use session_persistence_postgres::{SCHEMA_VERSION, SetupOutcome};
use session_projection::ProjectionRegistry;
use session_projection_cache::{BackfillOptions, CacheConfig, CacheError, ProjectionCache};
use session_storage_io::keyed::run_blocking;

use crate::cli::{
    args::{CacheCommand, Cli, Command, SessionsCommand, SubagentsCommand},
    ops::{self, LogStatus, StoreLocation},
};

const EXIT_UNHEALTHY: u8 = 3;
/// The exit code of a usage error (clap's own).
const EXIT_USAGE: u8 = 2;

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Command::Serve { limits, .. } = &cli.command
        && let Some(share) = limits.max_owner_connections
        && share > limits.max_connections
    {
        eprintln!(
            "apiproxy: --max-owner-connections ({share}) must not exceed --max-connections ({})",
            limits.max_connections
        );
        return ExitCode::from(2);
    }
    let default_filter = if matches!(cli.command, Command::Serve { .. }) { "info" } else { "warn" };
    let filter =
        cli.log.clone().or_else(|| std::env::var("APIPROXY_LOG").ok()).unwrap_or_else(|| default_filter.to_owned());
    let filter = match tracing_subscriber::EnvFilter::try_new(&filter) {
        Ok(filter) => filter,
        Err(error) => {
            eprintln!("apiproxy: invalid log filter {filter:?}: {error}");
            return ExitCode::from(2);
        }
    };
    // Colours only on a terminal: a log redirected to a file stays plain text.
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    let mut runtime = tokio::runtime::Builder::new_multi_thread();
    if let Command::Serve { worker_threads: Some(workers), .. } = &cli.command {
        runtime.worker_threads(usize::from(*workers));
    }
    let runtime = match runtime.enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("apiproxy: cannot start the runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli.command)) {
        Ok(code) => code,
        Err(error) => {
            eprintln!("apiproxy: {error:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(command: Command) -> Result<ExitCode> {
    match command {
        Command::Serve { store, listen, token, owner_tokens, allowed_hosts, max_body_bytes, limits, demo, .. } => {
            let access =
                AccessConfig { operator_tokens: token.clone().into_iter().collect(), owner_tokens, allowed_hosts };
            // Like a bad token, a token bound twice is a usage error, refused before anything opens.
            if let Err(error) = access.check() {
                eprintln!("apiproxy: {error}");
                return Ok(ExitCode::from(EXIT_USAGE));
            }
            let mut location = store.options()?;
            if let StoreLocation::Postgres(pg) = &mut location {
                pg.config = pg.config.clone().with_notify_gap(std::time::Duration::from_millis(limits.notify_gap_ms));
            }
            let config = limits.apply(ProxyConfig { max_body_bytes, access, ..ProxyConfig::default() });
            serve(location, listen, config, demo, token).await?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Sessions { command: SessionsCommand::List { store, json } } => {
            let persistence = ops::open_location_read_only(&store.options()?)?;
            let listing = ops::list_sessions(&*persistence).await?;
            let headers: Vec<_> = listing.headers.iter().map(|stored| &stored.header).collect();
            let mut out = std::io::stdout().lock();
            // A log that cannot be listed is reported on its own line (on stderr with `--json`,
            // whose output stays an array of headers), never dropped silently.
            let fault_line = |fault: &session_persistence::LogFault| {
                let path = fault.path.as_ref().map_or_else(String::new, |path| format!(" [{}]", path.display()));
                format!("{}	unlistable{path}: {}", fault.id, fault.error)
            };
            if json {
                writeln!(out, "{}", serde_json::to_string_pretty(&headers)?)?;
                for fault in &listing.faults {
                    eprintln!("apiproxy: warning: {}", fault_line(fault));
                }
            } else {
                for fault in &listing.faults {
                    writeln!(out, "{}", fault_line(fault))?;
                }
                for header in &headers {
                    let mut line = format!("{}\tcreatedAt={}", header.id, header.created_at);
                    if let Some(cwd) = &header.cwd {
                        line.push_str(&format!("\tcwd={cwd}"));
                    }
                    if let Some(parent) = &header.parent_session {
                        line.push_str(&format!("\tparent={parent}"));
                    }
                    if header.is_subagent() {
                        line.push_str("\torigin=subagent");
                    }
                    if let Some(owner) = &header.owner {
                        line.push_str(&format!("\towner={owner}"));
                    }
                    writeln!(out, "{line}")?;
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Sessions { command: SessionsCommand::Show { id, store, jsonl: true, .. } } => {
            let persistence = ops::open_location_read_only(&store.options_for_session(&id)?)?;
            ops::stream_session(&*persistence, &id).await?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Sessions { command: SessionsCommand::Export { id, store, descendants } } => {
            let persistence = ops::open_location_read_only(&store.options_for_session(&id)?)?;
            ops::export_sessions(&*persistence, &id, descendants).await?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Sessions { command: SessionsCommand::Show { id, store, json, jsonl: false } } => {
            let persistence = ops::open_location_read_only(&store.options_for_session(&id)?)?;
            let inspection = ops::show_session(&*persistence, &id).await?;
            let mut out = std::io::stdout().lock();
            if json {
                writeln!(out, "{}", serde_json::to_string_pretty(&ops::inspection_json(&inspection))?)?;
            } else {
                writeln!(out, "{}", serde_json::to_string(&inspection.header)?)?;
                for event in inspection.events.iter() {
                    writeln!(out, "{:>6}  {}  {}", event.seq, event.time, event.kind)?;
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Subagents { command: SubagentsCommand::List { parent, store, descendants, json } } => {
            let rows = ops::list_subagents(&store.options()?, &parent, descendants).await?;
            let mut out = std::io::stdout().lock();
            if json {
                writeln!(out, "{}", serde_json::to_string_pretty(&rows)?)?;
            } else {
                for row in &rows {
                    writeln!(out, "{}", describe_row(row))?;
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Verify { store, repair } => verify(store.options()?, repair).await,
        Command::Setup { store } => {
            let location = store.options()?;
            let shown = location.path().display().to_string();
            match ops::setup_location(&location)? {
                Some(SetupOutcome::Created) => println!("{shown}: created the schema (version {SCHEMA_VERSION})"),
                Some(SetupOutcome::Migrated { from }) => {
                    println!("{shown}: migrated the schema from version {from} to {SCHEMA_VERSION}")
                }
                Some(SetupOutcome::Current) => println!("{shown}: the schema is current (version {SCHEMA_VERSION})"),
                None => println!("{shown}: this kind of store needs no setup"),
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Cache { command: CacheCommand::Warm { store } } => warm(store.options()?).await,
        Command::Copy { from, from_compression, to, to_compression, jobs } => {
            let from = StoreLocation::parse(&from, from_compression.map(Into::into))?;
            let to = StoreLocation::parse(&to, to_compression.map(Into::into))?;
            copy(from, to, jobs).await
        }
    }
}

/// One human line per catalog row.
fn describe_row(row: &serde_json::Value) -> String {
    let text = |key: &str| row.get(key).and_then(|value| value.as_str()).unwrap_or("");
    let mut line = match text("kind") {
        "child" => format!(
            "{}\tchild\t{}\t{}\t{}",
            text("id"),
            text("mode"),
            text("activity"),
            row.get("label").and_then(|label| label.as_str()).map_or_else(String::new, |label| format!("{label:?}"))
        ),
        _ => format!("{}\tdiagnostic\t{}", text("id"), text("reason")),
    };
    if let Some(depth) = row.get("depth") {
        line.push_str(&format!("\tdepth={depth}\tparent={}", text("parentId")));
    }
    line
}

async fn verify(options: StoreLocation, repair: bool) -> Result<ExitCode> {
    let coordinator =
        if repair { ops::open_location_writable(&options)? } else { ops::open_location_read_only(&options)? };
    // A read-only verify beside a running writer cannot tell a live turn from an interrupted one.
    let writer_active = !repair
        && ops::location_writer_active(&options).unwrap_or_else(|error| {
            eprintln!("apiproxy: cannot tell whether a writer holds the store ({error}); assuming one does");
            true
        });
    if writer_active {
        let writers = match options {
            // Nothing tells a PostgreSQL store's writers apart from its readers: any may write.
            StoreLocation::Postgres(_) => "other gateways and hosts may write this database at any time",
            _ => "another process holds the store for writing",
        };
        eprintln!(
            "apiproxy: {writers}; logs that end inside a turn or with a torn tail are reported as in-use (the \
             writer may be in the middle of them)"
        );
    }
    let bar = progress_bar("{bar:40} {pos}/{len} logs {msg}");
    let reports = ops::verify(&coordinator, ops::VerifyOptions { repair, writer_active }, |done, total, report| {
        bar.set_length(total as u64);
        bar.set_position(done as u64);
        bar.set_message(report.id.to_string());
    })
    .await
    .context("cannot list the store")?;
    bar.finish_and_clear();
    let mut out = std::io::stdout().lock();
    let mut unhealthy = 0;
    for report in &reports {
        let detail = match &report.status {
            LogStatus::Healthy | LogStatus::Torn => String::new(),
            LogStatus::InUse { holder: None } => " (ends inside a turn that a running writer may hold live)".to_owned(),
            LogStatus::InUse { holder: Some(holder) } => {
                format!(" (held live by a writer: {holder}; left as it is)")
            }
            LogStatus::Interrupted { closers } => format!(" ({closers} closers needed)"),
            LogStatus::Repaired { what } => format!(" ({what})"),
            LogStatus::Corrupt { message } | LogStatus::Unsupported { message } | LogStatus::Unreadable { message } => {
                format!(": {message}")
            }
        };
        let path = report.path.as_ref().map_or_else(String::new, |path| format!(" [{}]", path.display()));
        writeln!(out, "{:<11} {} ({} events){path}{detail}", report.status.label(), report.id, report.n_events)?;
        if !report.status.is_healthy() {
            unhealthy += 1;
        }
    }
    writeln!(out, "{} logs, {} healthy, {unhealthy} not healthy", reports.len(), reports.len() - unhealthy)?;
    if unhealthy > 0 && !repair {
        writeln!(out, "run `apiproxy verify --repair` to cut torn tails and close interrupted turns")?;
    }
    Ok(if unhealthy == 0 { ExitCode::SUCCESS } else { ExitCode::from(EXIT_UNHEALTHY) })
}

/// How long the background backfill of `serve` rests after each session it had to read.
const BACKFILL_PAUSE: std::time::Duration = std::time::Duration::from_millis(25);

/// What a [`gateway`] is built for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Purpose {
    /// `serve`: a projection cache that cannot be opened at all is replaced by one in memory.
    Serve,
    /// `cache warm`: the cache is the point, so one that cannot be opened is an error.
    Warm,
}

/// A gateway over the store at `options` with its checkpoint cache, as `serve` runs it (and
/// `cache warm`, so both fold the same units): the coordinator, attached to the gateway's live
/// store, and the gateway.
async fn gateway(
    options: &StoreLocation,
    config: ProxyConfig,
    purpose: Purpose,
) -> Result<(Arc<Coordinator>, ApiProxy)> {
    let mut config = config;
    config.subagent_cold_read_lanes = options.cold_read_lanes();
    // Opening waits (briefly) for a held lock and creates directories: blocking work, so it runs
    // on the blocking pool, as does opening the checkpoint store below.
    let opening = options.clone();
    let coordinator = run_blocking(move || ops::open_location_writable(&opening))
        .await?
        .with_context(|| format!("cannot open the session store {}", options.path().display()))?;
    // Stored times stay readable whatever the system clock says (before 1970, say): the clock is
    // bounded, with a warning while it is out of range.
    let clock = ops::service_clock();
    let store = Arc::new(SessionStore::new(Arc::clone(&clock)));
    coordinator.attach(&store)?;
    let persistence: Arc<dyn SessionPersistence> = coordinator.clone();
    let registry = ProjectionRegistry::new();
    // Projection checkpoints live beside the logs: in a dot-directory the JSONL store skips, or in a
    // second database beside a SQLite one. They are derived data: deleting them loses nothing but
    // log reads.
    let location = options.clone();
    let opened = run_blocking(move || ops::open_checkpoints(&location)).await?;
    let checkpoints = match (opened, purpose) {
        (Ok(checkpoints), _) => checkpoints,
        (Err(error), Purpose::Warm) => {
            return Err(error)
                .with_context(|| format!("cannot open the projection cache of {}", options.path().display()));
        }
        // Not even a fresh cache opens (a read-only directory, say): serve without a durable one.
        (Err(error), Purpose::Serve) => {
            tracing::error!(
                store = %options.path().display(),
                %error,
                "cannot open the projection cache, not even a fresh one; serving with checkpoints in memory only"
            );
            Arc::new(session_projection_cache::MemoryCheckpointStore::new())
        }
    };
    let cache = ProjectionCache::new(
        Arc::clone(&registry),
        Arc::clone(&persistence),
        checkpoints,
        clock,
        CacheConfig::new(200, 5_000)?,
    )?;
    let proxy =
        ApiProxy::new(ProxyParts { store, persistence: Some(persistence), registry, cache: Some(cache) }, config)?;
    Ok((coordinator, proxy))
}

/// `cache warm`: the backfill, in the foreground, with progress.
async fn warm(options: StoreLocation) -> Result<ExitCode> {
    let (coordinator, proxy) = gateway(&options, ProxyConfig::default(), Purpose::Warm).await?;
    let bar = progress_bar("{bar:40} {pos}/{len} sessions {msg}");
    let cancel = tokio_util::sync::CancellationToken::new();
    let report = proxy
        .backfill_cache(BackfillOptions::default(), &cancel, |report| {
            bar.set_length(report.sessions as u64);
            bar.set_position(report.done as u64);
        })
        .await
        .context("the backfill failed")?
        .context("no projection cache is mounted")?;
    bar.finish_and_clear();
    println!(
        "{} sessions: {} warmed, {} already current, {} failed",
        report.sessions, report.warmed, report.current, report.failed
    );
    drop(proxy);
    coordinator.close().await?;
    Ok(if report.failed == 0 { ExitCode::SUCCESS } else { ExitCode::from(EXIT_UNHEALTHY) })
}

async fn copy(from: StoreLocation, to: StoreLocation, jobs: usize) -> Result<ExitCode> {
    let bar = progress_bar("{bar:40} {pos}/{len} sessions {msg}");
    let cancel = tokio_util::sync::CancellationToken::new();
    let interrupt = cancel.clone();
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            interrupt.cancel();
        }
    });
    let shown = bar.clone();
    let copies = cli::copy::copy_stores(&from, &to, jobs, &cancel, move |done, total, copy| {
        shown.set_length(total as u64);
        shown.set_position(done as u64);
        shown.set_message(copy.id.to_string());
    })
    .await?;
    bar.finish_and_clear();
    let (lines, complete) = cli::copy::summary(&copies);
    let mut out = std::io::stdout().lock();
    for line in lines {
        writeln!(out, "{line}")?;
    }
    Ok(if complete { ExitCode::SUCCESS } else { ExitCode::from(EXIT_UNHEALTHY) })
}

/// A progress bar on an interactive stderr, else a hidden one.
fn progress_bar(template: &str) -> indicatif::ProgressBar {
    if !std::io::stderr().is_terminal() {
        return indicatif::ProgressBar::hidden();
    }
    let bar = indicatif::ProgressBar::new(0);
    bar.set_style(
        indicatif::ProgressStyle::with_template(template).unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    bar
}

async fn serve(
    options: StoreLocation,
    listen: SocketAddr,
    config: ProxyConfig,
    demo: bool,
    token: Option<String>,
) -> Result<()> {
    if !apiproxy::is_loopback_listen(&listen) && !config.access.requires_token() {
        bail!("refusing to listen on non-loopback address {listen} without a bearer token; pass --token");
    }
    let (coordinator, proxy) = gateway(&options, config, Purpose::Serve).await?;
    let listener = tokio::net::TcpListener::bind(listen).await.with_context(|| format!("cannot listen on {listen}"))?;
    let addr = listener.local_addr()?;
    let demo = if demo { Some(cli::demo::seed(&proxy, &*coordinator).await?) } else { None };
    tracing::info!(%addr, store = %options.path().display(), "serving");
    println!("apiproxy listening on http://{addr} (store {})", options.path().display());
    if demo.is_some() {
        println!("\n{}\n", cli::demo::curl_examples(&format!("http://{addr}"), token.as_deref()));
    }
    // Checkpoints for stored sessions that lack them, in the background, one session at a time
    // with a pause after each read, so requests keep the machine.
    let warming = tokio_util::sync::CancellationToken::new();
    let backfill = tokio::spawn({
        let (proxy, cancel) = (proxy.clone(), warming.clone());
        async move {
            let options = BackfillOptions { pause: BACKFILL_PAUSE };
            match proxy.backfill_cache(options, &cancel, |_| {}).await {
                Ok(Some(report)) if report.warmed + report.failed > 0 => tracing::info!(
                    warmed = report.warmed,
                    current = report.current,
                    failed = report.failed,
                    "projection cache backfill done"
                ),
                Ok(_) | Err(CacheError::Cancelled) => {}
                Err(error) => tracing::warn!(%error, "projection cache backfill stopped"),
            }
        }
    });
    let shutdown = async {
        let _ = tokio::signal::ctrl_c().await;
        tracing::info!("shutting down");
    };
    proxy.serve(listener, shutdown).await?;
    warming.cancel();
    let _ = backfill.await;
    if let Some(demo) = demo {
        demo.stop().await;
    }
    // Make every live session durable before exiting.
    for session in proxy.store().list() {
        if let Err(error) = proxy.store().flush(session.id()).await {
            tracing::warn!(session = %session.id(), %error, "a live session could not be flushed at shutdown");
        }
    }
    coordinator.close().await?;
    Ok(())
}
