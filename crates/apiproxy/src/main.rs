//! The `apiproxy` binary: serve a session store over HTTP and WebSocket, and operate on a store
//! directory (list, show, subagents, verify).
//!
//! Exit codes: 0 success; 1 an operational error (printed as one line); 2 a usage error;
//! 3 `verify` found a log that is not healthy.

use std::{
    io::{IsTerminal, Write},
    net::SocketAddr,
    process::ExitCode,
    sync::Arc,
};

use anyhow::{Context, Result, bail};
use apiproxy::{
    AccessConfig, ApiProxy, OwnerToken, ProxyConfig, ProxyParts,
    ops::{self, LogStatus, StoreLocation, SystemClock},
};
use clap::{Parser, Subcommand, ValueEnum};
use session_core::SessionStore;
use session_persistence::{Compression, SessionPersistence};
use session_projection::ProjectionRegistry;
use session_projection_cache::{CacheConfig, ProjectionCache};

const EXIT_UNHEALTHY: u8 = 3;

#[derive(Debug, Parser)]
#[command(name = "apiproxy", version, about = "A session store served over HTTP and WebSocket, and its operator CLI")]
struct Cli {
    /// Log filter (tracing `EnvFilter` syntax, e.g. `info` or `apiproxy=debug`). Defaults to
    /// `$APIPROXY_LOG`, else `info` for `serve` and `warn` otherwise.
    #[arg(long, global = true)]
    log: Option<String>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum Encoding {
    Zstd,
    None,
}

impl From<Encoding> for Compression {
    fn from(encoding: Encoding) -> Compression {
        match encoding {
            Encoding::Zstd => Compression::Zstd,
            Encoding::None => Compression::None,
        }
    }
}

#[derive(Debug, clap::Args)]
struct StoreArgs {
    /// The store: a JSONL store directory, or `sqlite:PATH` for a SQLite session database (the
    /// reference's format; projection checkpoints go to `PATH.projection-cache`).
    #[arg(long, default_value = "./.sessions")]
    store: String,
    /// The encoding of a JSONL store (one store holds one encoding).
    #[arg(long, value_enum, default_value = "zstd")]
    compression: Encoding,
}

impl StoreArgs {
    fn options(&self) -> StoreLocation {
        StoreLocation::parse(&self.store, self.compression.into())
    }
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Serve the store (created on first use) over HTTP and WebSocket.
    Serve {
        #[command(flatten)]
        store: StoreArgs,
        /// The address to listen on. Anything but loopback requires a token.
        #[arg(long, default_value = "127.0.0.1:8420")]
        listen: SocketAddr,
        /// An operator bearer token; once any token is set, every request needs one.
        #[arg(long)]
        token: Option<String>,
        /// An owner-bound token, `OWNER=TOKEN` (repeatable): its requests see only OWNER's sessions.
        #[arg(long = "owner-token", value_parser = parse_owner_token)]
        owner_tokens: Vec<OwnerToken>,
        /// An extra trusted `Host` authority, `host` or `host:port` (repeatable).
        #[arg(long = "allow-host")]
        allowed_hosts: Vec<String>,
        /// Largest accepted request body, in bytes.
        #[arg(long, default_value_t = 16 << 20)]
        max_body_bytes: usize,
        /// Seed demo sessions and print curl examples.
        #[arg(long)]
        demo: bool,
    },
    /// Sessions in a store.
    Sessions {
        #[command(subcommand)]
        command: SessionsCommand,
    },
    /// Subagents in a store.
    Subagents {
        #[command(subcommand)]
        command: SubagentsCommand,
    },
    /// Scan every log and report torn, interrupted, corrupt and unsupported ones.
    Verify {
        #[command(flatten)]
        store: StoreArgs,
        /// Commit repairs: cut torn tails and close interrupted turns.
        #[arg(long)]
        repair: bool,
    },
}

#[derive(Debug, Subcommand)]
enum SessionsCommand {
    /// List stored sessions.
    List {
        #[command(flatten)]
        store: StoreArgs,
        #[arg(long)]
        json: bool,
    },
    /// Show a session's header and balanced events.
    Show {
        id: String,
        #[command(flatten)]
        store: StoreArgs,
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Subcommand)]
enum SubagentsCommand {
    /// List the subagents of PARENT.
    List {
        parent: String,
        #[command(flatten)]
        store: StoreArgs,
        /// Every subagent below PARENT, with `parentId` and `depth`.
        #[arg(long)]
        descendants: bool,
        #[arg(long)]
        json: bool,
    },
}

fn parse_owner_token(text: &str) -> Result<OwnerToken, String> {
    match text.split_once('=') {
        Some((owner, token)) if !owner.is_empty() && !token.is_empty() => {
            Ok(OwnerToken { owner: owner.to_owned(), token: token.to_owned() })
        }
        _ => Err("expected OWNER=TOKEN".to_owned()),
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
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
    tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).init();
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
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
        Command::Serve { store, listen, token, owner_tokens, allowed_hosts, max_body_bytes, demo } => {
            let access =
                AccessConfig { operator_tokens: token.clone().into_iter().collect(), owner_tokens, allowed_hosts };
            serve(store.options(), listen, access, max_body_bytes, demo, token).await?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Sessions { command: SessionsCommand::List { store, json } } => {
            let persistence = ops::open_location_read_only(&store.options())?;
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
        Command::Sessions { command: SessionsCommand::Show { id, store, json } } => {
            let persistence = ops::open_location_read_only(&store.options())?;
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
            let persistence: Arc<dyn SessionPersistence> = ops::open_location_read_only(&store.options())?;
            let rows = ops::list_subagents(persistence, &parent, descendants).await?;
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
        Command::Verify { store, repair } => verify(store.options(), repair).await,
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
        eprintln!(
            "apiproxy: another process holds the store for writing; logs that end inside a turn or with a torn \
             tail are reported as in-use (the writer may be in the middle of them)"
        );
    }
    let bar = if std::io::stderr().is_terminal() {
        let bar = indicatif::ProgressBar::new(0);
        bar.set_style(
            indicatif::ProgressStyle::with_template("{bar:40} {pos}/{len} logs {msg}")
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        bar
    } else {
        indicatif::ProgressBar::hidden()
    };
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
            LogStatus::InUse => " (ends inside a turn that a running writer may hold live)".to_owned(),
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

async fn serve(
    options: StoreLocation,
    listen: SocketAddr,
    access: AccessConfig,
    max_body_bytes: usize,
    demo: bool,
    token: Option<String>,
) -> Result<()> {
    if !apiproxy::is_loopback_listen(&listen) && !access.requires_token() {
        bail!("refusing to listen on non-loopback address {listen} without a bearer token; pass --token");
    }
    // Opening waits (briefly) for a held lock and creates directories: blocking work, so it runs
    // on the blocking pool, as does opening the checkpoint store below.
    let opening = options.clone();
    let coordinator = tokio::task::spawn_blocking(move || ops::open_location_writable(&opening))
        .await?
        .with_context(|| format!("cannot open the session store {}", options.path().display()))?;
    let store = Arc::new(SessionStore::new(Arc::new(SystemClock)));
    coordinator.attach(&store)?;
    let persistence: Arc<dyn SessionPersistence> = coordinator.clone();
    let registry = ProjectionRegistry::new();
    // Projection checkpoints live beside the logs: in a dot-directory the JSONL store skips, or in a
    // second database beside a SQLite one. They are derived data: deleting them loses nothing but
    // log reads.
    let location = options.clone();
    let checkpoints = tokio::task::spawn_blocking(move || ops::open_checkpoints(&location))
        .await?
        .with_context(|| format!("cannot open the projection cache of {}", options.path().display()))?;
    let cache = ProjectionCache::new(
        Arc::clone(&registry),
        Arc::clone(&persistence),
        checkpoints,
        Arc::new(SystemClock),
        CacheConfig::new(200, 5_000)?,
    )?;
    let config = ProxyConfig { max_body_bytes, access, ..ProxyConfig::default() };
    let proxy =
        ApiProxy::new(ProxyParts { store, persistence: Some(persistence), registry, cache: Some(cache) }, config)?;
    let listener = tokio::net::TcpListener::bind(listen).await.with_context(|| format!("cannot listen on {listen}"))?;
    let addr = listener.local_addr()?;
    let demo = if demo { Some(apiproxy::demo::seed(&proxy).await?) } else { None };
    tracing::info!(%addr, store = %options.path().display(), "serving");
    println!("apiproxy listening on http://{addr} (store {})", options.path().display());
    if demo.is_some() {
        println!("\n{}\n", apiproxy::demo::curl_examples(&format!("http://{addr}"), token.as_deref()));
    }
    let shutdown = async {
        let _ = tokio::signal::ctrl_c().await;
        tracing::info!("shutting down");
    };
    proxy.serve(listener, shutdown).await?;
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
