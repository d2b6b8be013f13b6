//! The command line: `apiproxy`'s commands, their arguments and how each is parsed (clap's
//! derive). What the commands do is `main`'s and the other `cli` modules'.

use std::net::SocketAddr;

use anyhow::Result;
use apiproxy::{OwnerToken, ProxyConfig};
use clap::{Parser, Subcommand, ValueEnum};
use session_persistence::Compression;

use super::ops::StoreLocation;

#[derive(Debug, Parser)]
#[command(name = "apiproxy", version, about = "A session store served over HTTP and WebSocket, and its operator CLI")]
pub(crate) struct Cli {
    /// Log filter (tracing `EnvFilter` syntax, e.g. `info` or `apiproxy=debug`). Defaults to
    /// `$APIPROXY_LOG`, else `info` for `serve` and `warn` otherwise.
    #[arg(long, global = true)]
    pub(crate) log: Option<String>,
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub(crate) enum Encoding {
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
pub(crate) struct StoreArgs {
    /// The store: a JSONL store directory, `sqlite:PATH` for a SQLite session database (the
    /// reference's format; projection checkpoints go to `PATH.projection-cache`), or
    /// `postgres://user@host:port/database[?schema=NAME]` for a PostgreSQL store that many
    /// gateways share (checkpoints in the same schema; `serve` and `setup` create the schema;
    /// what the URL leaves out comes from `PGHOST`, `PGPORT`, `PGUSER`, `PGPASSWORD`,
    /// `PGDATABASE`, … and `~/.pgpass`, as for libpq: `postgres://` alone works).
    #[arg(long, default_value = "./.sessions")]
    store: String,
    /// The encoding of a JSONL store (one store holds one encoding). Without it, an existing
    /// store is opened in the encoding its logs use (a store holding both is refused), and an
    /// empty or new one gets zstd; `sessions show` and `sessions export` use the named session's
    /// own log's.
    #[arg(long, value_enum)]
    compression: Option<Encoding>,
}

impl StoreArgs {
    pub(crate) fn options(&self) -> Result<StoreLocation> {
        Ok(StoreLocation::parse(&self.store, self.compression.map(Into::into))?)
    }

    /// [`options`](Self::options) for a command that reads the one session `id`.
    pub(crate) fn options_for_session(&self, id: &str) -> Result<StoreLocation> {
        Ok(StoreLocation::parse_for_session(&self.store, self.compression.map(Into::into), id)?)
    }
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Serve the store (created on first use) over HTTP and WebSocket.
    Serve {
        #[command(flatten)]
        store: StoreArgs,
        /// The address to listen on. Anything but loopback requires a token.
        #[arg(long, default_value = "127.0.0.1:8420")]
        listen: SocketAddr,
        /// An operator bearer token; once any token is set, every request needs one. It must be
        /// non-empty printable ASCII without surrounding spaces.
        #[arg(long, value_parser = parse_token)]
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
        #[command(flatten)]
        limits: LimitArgs,
        /// Seed demo sessions and print curl examples.
        #[arg(long)]
        demo: bool,
        /// The runtime's worker threads (default: one per core). A gateway that only serves
        /// watchers of sessions written elsewhere spends less per event with one.
        #[arg(long, value_parser = clap::value_parser!(u16).range(1..))]
        worker_threads: Option<u16>,
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
    /// Create or migrate the schema of a PostgreSQL store (`serve` does the same at start); a
    /// schema of a newer version is refused. Other stores need no setup.
    Setup {
        #[command(flatten)]
        store: StoreArgs,
    },
    /// Copy every session of one store into another, of any backend (JSONL raw or zstd, SQLite,
    /// PostgreSQL), keeping each session's events byte for byte (checked per session as it is
    /// read back). Resumable: a session already copied is skipped, one copied in part is
    /// completed; one the target holds otherwise is refused and left alone; a damaged source log
    /// is reported and skipped. Projection checkpoints are not copied (`cache warm` rebuilds
    /// them).
    Copy {
        /// The store to copy from, as `--store` names one; read only, so a server may keep
        /// serving it.
        #[arg(long)]
        from: String,
        /// The encoding of a JSONL source (detected from its logs when left out).
        #[arg(long, value_enum)]
        from_compression: Option<Encoding>,
        /// The store to copy into (created on first use); a JSONL one takes the store's lock.
        #[arg(long)]
        to: String,
        /// The encoding of a JSONL target: an existing store's own when left out, else zstd.
        #[arg(long, value_enum)]
        to_compression: Option<Encoding>,
        /// Sessions copied at once.
        #[arg(long, default_value_t = 4, value_parser = positive_usize)]
        jobs: usize,
    },
    /// Manage the projection checkpoint cache of a store.
    Cache {
        #[command(subcommand)]
        command: CacheCommand,
    },
}

#[derive(Debug, Subcommand)]
pub(crate) enum CacheCommand {
    /// Write a projection checkpoint for every stored session that lacks a current one, so
    /// listings stop reading their logs (resumable; never changes a value). `serve` does the
    /// same in the background at start. Takes the store's lock: stop the server first.
    Warm {
        #[command(flatten)]
        store: StoreArgs,
    },
}

/// The connection limits of `serve` (`docs/wire.md`, "Connection limits"); the defaults are
/// `ProxyConfig`'s.
#[derive(Debug, clap::Args)]
pub(crate) struct LimitArgs {
    /// Close a connection whose request header is not complete this many seconds after its first
    /// byte (or after the connection opened).
    #[arg(long, default_value_t = ProxyConfig::default().header_read_timeout.as_secs(), value_parser = positive_u64)]
    header_timeout_secs: u64,
    /// Answer 408 and close the connection when a request body is not complete this many seconds
    /// after its header.
    #[arg(long, default_value_t = ProxyConfig::default().body_read_timeout.as_secs(), value_parser = positive_u64)]
    body_timeout_secs: u64,
    /// Close a connection that has had no request in progress for this many seconds.
    #[arg(long, default_value_t = ProxyConfig::default().idle_timeout.as_secs(), value_parser = positive_u64)]
    idle_timeout_secs: u64,
    /// Reset a WebSocket client that has not completed a close the gateway started (after
    /// `stream/error`, say) within this many seconds.
    #[arg(long, default_value_t = ProxyConfig::default().push_close_timeout.as_secs(), value_parser = positive_u64)]
    push_close_timeout_secs: u64,
    /// Open connections at most (WebSocket downlinks included); more are answered 503 and closed.
    #[arg(long, default_value_t = ProxyConfig::default().max_connections, value_parser = positive_usize)]
    pub(crate) max_connections: usize,
    /// Open connections one owner may hold (its share of --max-connections, so one owner cannot
    /// lock the others out); more of its requests are answered 429. Default: half of
    /// --max-connections.
    #[arg(long, value_parser = positive_usize)]
    pub(crate) max_owner_connections: Option<usize>,
    /// The byte budget of one history page (the events' stored JSON); a page stops before the
    /// event that would take it over (one larger event is served alone).
    #[arg(long, default_value_t = ProxyConfig::default().history_page_bytes, value_parser = positive_usize)]
    history_page_bytes: usize,
    /// The bytes all history reads in flight may hold together; the excess waits (up to 10 s,
    /// then `agent-busy`).
    #[arg(long, default_value_t = ProxyConfig::default().history_inflight_bytes, value_parser = positive_usize)]
    history_inflight_bytes: usize,
    /// Do not follow the sessions other gateways write to a shared store (PostgreSQL, or a SQLite
    /// file several processes open): without it their events reach this gateway's WebSocket
    /// clients live (`docs/wire.md`, "Across gateways").
    #[arg(long)]
    no_follow: bool,
    /// Follow by sweeps alone, without listening to the store's change signal (for networks that
    /// cut long-lived connections; every change then waits for the next sweep).
    #[arg(long, conflicts_with = "no_follow")]
    follow_sweep_only: bool,
    /// How often, in milliseconds, the follower sweeps the store even when no change signal came
    /// (what bounds the lag when notifications are lost).
    #[arg(long, default_value_t = 1000, value_parser = positive_u64)]
    follow_sweep_ms: u64,
    /// The least time, in milliseconds, between two of the follower's rounds that change signals
    /// start: a burst of appends elsewhere is read once per gap (0: every signal at once; at most
    /// `--follow-sweep-ms`).
    #[arg(long, default_value_t = 50)]
    follow_gap_ms: u64,
    /// How often, in milliseconds, a shared SQLite file's change counter is polled.
    #[arg(long, default_value_t = 100, value_parser = positive_u64)]
    follow_poll_ms: u64,
    /// On a PostgreSQL store, the least time, in milliseconds, between two of this gateway's
    /// notifications of appends: an append after a quiet stretch notifies at once, those of a
    /// burst together after the gap (0: every append at once, each waking every other gateway).
    #[arg(long, default_value_t = session_persistence_postgres::DEFAULT_NOTIFY_GAP.as_millis() as u64)]
    pub(crate) notify_gap_ms: u64,
}

impl LimitArgs {
    /// `config` with these limits.
    pub(crate) fn apply(&self, config: ProxyConfig) -> ProxyConfig {
        use std::time::Duration;
        ProxyConfig {
            header_read_timeout: Duration::from_secs(self.header_timeout_secs),
            body_read_timeout: Duration::from_secs(self.body_timeout_secs),
            idle_timeout: Duration::from_secs(self.idle_timeout_secs),
            push_close_timeout: Duration::from_secs(self.push_close_timeout_secs),
            max_connections: self.max_connections,
            max_owner_connections: self.max_owner_connections,
            history_page_bytes: self.history_page_bytes,
            history_inflight_bytes: self.history_inflight_bytes,
            follow: apiproxy::FollowConfig {
                enabled: !self.no_follow,
                signal: !self.follow_sweep_only,
                sweep_interval: Duration::from_millis(self.follow_sweep_ms),
                round_gap: Duration::from_millis(self.follow_gap_ms),
                watch: session_persistence::WatchOptions {
                    poll_interval: Duration::from_millis(self.follow_poll_ms),
                    ..config.follow.watch.clone()
                },
            },
            ..config
        }
    }
}

#[derive(Debug, Subcommand)]
pub(crate) enum SessionsCommand {
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
        /// Stream the events, one compact JSON object per line, as they are read (for scripts:
        /// memory does not grow with the log).
        #[arg(long, conflicts_with = "json")]
        jsonl: bool,
    },
    /// Export a session (and with `--descendants` its subagents, depth first) as JSON Lines: per
    /// session an `{"export":"session",…}` line with its header, then exactly the lines of
    /// `sessions show <id> --jsonl`. The same bytes as `GET /api/session.export`.
    Export {
        id: String,
        #[command(flatten)]
        store: StoreArgs,
        #[arg(long)]
        descendants: bool,
    },
}

#[derive(Debug, Subcommand)]
pub(crate) enum SubagentsCommand {
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

/// A bad token is a usage error: an empty one would admit anyone sending `Bearer `.
fn parse_token(text: &str) -> Result<String, String> {
    match apiproxy::token_problem(text) {
        None => Ok(text.to_owned()),
        Some(problem) => Err(problem.to_owned()),
    }
}

fn parse_owner_token(text: &str) -> Result<OwnerToken, String> {
    match text.split_once('=') {
        Some((owner, token)) if !owner.is_empty() => {
            Ok(OwnerToken { owner: owner.to_owned(), token: parse_token(token)? })
        }
        _ => Err("expected OWNER=TOKEN".to_owned()),
    }
}

fn positive_u64(text: &str) -> Result<u64, String> {
    match text.parse::<u64>() {
        Ok(value) if value > 0 => Ok(value),
        _ => Err("expected a positive integer".to_owned()),
    }
}

pub(crate) fn positive_usize(text: &str) -> Result<usize, String> {
    match text.parse::<usize>() {
        Ok(value) if value > 0 => Ok(value),
        _ => Err("expected a positive integer".to_owned()),
    }
}
