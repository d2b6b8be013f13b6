//! Live across gateways on PostgreSQL: how long after gateway A acknowledges a durable append a
//! WebSocket client of gateway B has the event, through the notification (appends back to back,
//! which fall inside B's round gap, and appends 100 ms apart, which do not) and through the sweep
//! alone (B started with `--follow-sweep-only`, which is what a lost notification costs); A's
//! durable append throughput with 0, 1 and 4 other gateways following the store; and the cost of
//! one sweep's position query over 10,000 tracked sessions.
//!
//! With `--own-cores` it measures the throughput cases only, with the other gateways on cores of
//! their own, as on hosts of their own: the database server, A and this probe on CPU 0; every
//! other gateway, the clients that watch them and (once a case has settled) the other gateways'
//! server backends on CPU 1 (`taskset`; the server's processes get their CPUs back at the end).
//!
//! `--cases=l1,l4,g1,g4,w1,w4` (any of them) and `--rounds=N` choose the throughput cases and
//! their rounds; `--appends=N` each client's appends per case (100; a longer steady state for a
//! profiler); each case with other gateways also reports their CPU and their server backends'
//! per 1,000 appends through A (`/proc`, the backends found by `application_name`), a figure that
//! moves far less than A's rate; `--gateway-flags="..."` more `serve` flags for every gateway it starts;
//! `--throughput-only` skips the latency and sweep probes.
//!
//! `follow_latency [--quick] [--own-cores] [APIPROXY]` needs the PostgreSQL server of `SESSION_PG_URL`
//! (default `postgres://postgres@127.0.0.1:5432/test`) and the `apiproxy` binary beside this one
//! (build it with the same profile first). Each run works in schemas of its own, dropped at the
//! end. Run by `cargo xtask bench`.

use std::{
    path::PathBuf,
    time::{Duration, Instant},
};

use e2e::gateway::{Client, Gateway, event};
use futures::StreamExt;
use serde_json::{Value, json};
use session_core::{SessionEvent, SessionHeader, SessionId};
use session_persistence::Backend;
use session_persistence_postgres::{PgConfig, PgStore};
use tokio_util::sync::CancellationToken;

fn apiproxy_binary() -> PathBuf {
    if let Some(path) = std::env::args().skip(1).find(|arg| !arg.starts_with("--")) {
        return PathBuf::from(path);
    }
    let me = std::env::current_exe().expect("the probe's own path");
    me.with_file_name("apiproxy")
}

fn server_url() -> String {
    std::env::var("SESSION_PG_URL")
        .ok()
        .filter(|url| !url.is_empty())
        .unwrap_or_else(|| "postgres://postgres@127.0.0.1:5432/test".to_owned())
}

/// A fresh schema's store URL, set up; dropped by [`Schema::drop`].
struct Schema {
    url: String,
    store: PgStore,
}

impl Schema {
    fn new(tag: &str) -> Schema {
        let name = format!("bench_follow_{tag}_{}", std::process::id());
        let base = server_url();
        let separator = if base.contains('?') { '&' } else { '?' };
        let url = format!("{base}{separator}schema={name}");
        let config = PgConfig::from_url(&url).expect("the bench's store URL");
        let (store, _) = PgStore::setup(&config).expect("set up the bench's schema");
        Schema { url, store }
    }
}

impl Drop for Schema {
    fn drop(&mut self) {
        if let Err(error) = self.store.drop_schema() {
            eprintln!("could not drop the bench's schema: {error}");
        }
    }
}

/// A small tag that keeps the schemas of one run's cases apart.
fn rand_tag() -> u32 {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed) * 1000
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let rank = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

fn ms(duration: Duration) -> String {
    format!("{:.1} ms", duration.as_secs_f64() * 1000.0)
}

/// A durable append through A, then the time until B's client has that event: one sample per
/// append, `n` appends, one at a time.
/// `n` durable appends through A, each `spacing` after B's frame of the one before (back to back
/// they fall inside the follower's round gap; spaced past it, each is read at once).
async fn ack_to_frame(apiproxy: &std::path::Path, sweep_only: bool, n: usize, spacing: Duration) -> Vec<Duration> {
    let schema = Schema::new(if sweep_only { "sweep" } else { "notify" });
    let a = serve(apiproxy, &schema.url, &[]);
    let b = if sweep_only {
        serve(apiproxy, &schema.url, &["--follow-sweep-only"])
    } else {
        serve(apiproxy, &schema.url, &[])
    };
    let (mut socket, _) = tokio_tungstenite::connect_async(format!("ws://{}/api/events.mux", b.addr()))
        .await
        .expect("B's downlink opens");
    let mut client = Client::connect(a.addr()).await;
    client.call("session.create", json!({"sessionId": "lat", "cwd": "/bench"})).await;
    let mut samples = Vec::with_capacity(n);
    for k in 0..n {
        tokio::time::sleep(spacing).await;
        client.call("session.append", json!({"sessionId": "lat", "events": [event(k)], "durable": true})).await;
        let acked = Instant::now();
        loop {
            let message = tokio::time::timeout(Duration::from_secs(30), socket.next())
                .await
                .expect("B's frame within 30 s")
                .expect("B's downlink stays open")
                .expect("a WebSocket message");
            let Ok(text) = message.to_text() else { continue };
            let Ok(envelope) = serde_json::from_str::<Value>(text) else { continue };
            let payload = &envelope["payload"];
            if payload["type"] == "session/event" && payload["event"]["seq"].as_u64() == Some(k as u64) {
                break;
            }
        }
        samples.push(acked.elapsed());
    }
    samples.sort();
    samples
}

/// Who else is on the store while A writes.
#[derive(Debug, Clone, Copy)]
enum Others {
    /// Gateways following the store that nobody watches: they take the notifications and read
    /// no tail.
    Gateways(usize),
    /// Gateways following the store, each with a mux client that reads every frame: each reads
    /// every tail (on this machine, on A's two cores).
    WatchedGateways(usize),
    /// Bare `LISTEN` connections that take the notifications and do nothing: what notifying
    /// costs A and the server alone.
    Listeners(usize),
}

/// The notifications the bare listeners of the running case received, all of them together.
static HEARD: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// `n` connections that `LISTEN` on `channel` and drain what arrives (counted in [`HEARD`]).
async fn listeners(channel: &str, n: usize) -> Vec<tokio::task::JoinHandle<()>> {
    let mut tasks = Vec::new();
    for _ in 0..n {
        let (client, mut connection) =
            tokio_postgres::connect(&server_url(), tokio_postgres::NoTls).await.expect("a listening connection");
        let drain = tokio::spawn(async move {
            // Polling the connection receives its notifications (and drops them).
            while let Some(message) = futures::future::poll_fn(|cx| connection.poll_message(cx)).await {
                match message {
                    Ok(tokio_postgres::AsyncMessage::Notification(_)) => {
                        HEARD.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                    Ok(_) => {}
                    Err(_) => break,
                }
            }
        });
        client.batch_execute(&format!("LISTEN {channel}")).await.expect("LISTEN");
        tasks.push(tokio::spawn(async move {
            let _client = client;
            let _ = drain.await;
        }));
    }
    tasks
}

/// A gateway over `store` with `flags` and the flags of `--gateway-flags="..."` (space-separated,
/// for every gateway the probe starts: `--follow-gap-ms 75`, say).
fn serve(apiproxy: &std::path::Path, store: &str, flags: &[&str]) -> Gateway {
    Gateway::serve_with(apiproxy, store, &with_extra_flags(flags))
}

/// `flags` and those of `--gateway-flags="..."`.
fn with_extra_flags<'a>(flags: &[&'a str]) -> Vec<&'a str> {
    static EXTRA: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
    let extra = EXTRA.get_or_init(|| {
        std::env::args()
            .find_map(|arg| {
                arg.strip_prefix("--gateway-flags=").map(|flags| flags.split_whitespace().map(str::to_owned).collect())
            })
            .unwrap_or_default()
    });
    flags.iter().copied().chain(extra.iter().map(String::as_str)).collect()
}

/// Runs `taskset` with `args`.
fn taskset(args: &[&str]) {
    let status = std::process::Command::new("taskset")
        .args(args)
        .stdout(std::process::Stdio::null())
        .status()
        .expect("run taskset");
    assert!(status.success(), "taskset {args:?} failed");
}

/// The process ids of the PostgreSQL server on this machine (its postmaster and every backend).
fn postgres_pids() -> Vec<String> {
    let found = std::process::Command::new("pgrep").args(["-x", "postgres"]).output().expect("run pgrep");
    String::from_utf8_lossy(&found.stdout).split_whitespace().map(str::to_owned).collect()
}

/// `--own-cores`: the server's processes (new backends fork from the pinned postmaster) and this
/// probe (so A, which it starts, too) on CPU 0 while it lives; on drop, all CPUs again.
struct OwnCores {
    all: String,
}

/// The CPUs of the other gateways and their watching clients under `--own-cores`.
const OTHERS_CPU: &str = "1";

impl OwnCores {
    fn pin() -> OwnCores {
        let n_cpus = std::thread::available_parallelism().map_or(1, usize::from);
        assert!(n_cpus >= 2, "--own-cores needs two CPUs");
        let pids = postgres_pids();
        assert!(!pids.is_empty(), "--own-cores needs the PostgreSQL server on this machine");
        for pid in &pids {
            taskset(&["-a", "-p", "-c", "0", pid]);
        }
        taskset(&["-a", "-p", "-c", "0", &std::process::id().to_string()]);
        OwnCores { all: format!("0-{}", n_cpus - 1) }
    }
}

impl Drop for OwnCores {
    fn drop(&mut self) {
        for pid in postgres_pids() {
            let _ = std::process::Command::new("taskset")
                .args(["-a", "-p", "-c", &self.all, &pid])
                .stdout(std::process::Stdio::null())
                .status();
        }
    }
}

/// The watching clients of [`watch_all`]: their thread, its `/proc` stat file (for its CPU),
/// and the sender whose drop stops them.
struct Watchers {
    thread: std::thread::JoinHandle<()>,
    stat: String,
    stop: tokio::sync::oneshot::Sender<()>,
}

/// Mux clients of `addrs` that read every frame, on a thread of their own (on `cpus` when
/// given); they stop when the returned sender is dropped.
fn watch_all(addrs: Vec<String>, cpus: Option<&'static str>) -> Watchers {
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let (ready, is_ready) = std::sync::mpsc::channel();
    let thread = std::thread::spawn(move || {
        // "PID/task/TID": this thread alone.
        let me = std::fs::read_link("/proc/thread-self").expect("/proc/thread-self");
        if let Some(cpus) = cpus {
            let tid = me.file_name().and_then(|tid| tid.to_str()).expect("a thread id").to_owned();
            taskset(&["-p", "-c", cpus, &tid]);
        }
        let stat = format!("/proc/{}/stat", me.display());
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
        runtime.block_on(async move {
            let mut taps = Vec::new();
            for addr in addrs {
                let (mut socket, _) = tokio_tungstenite::connect_async(format!("ws://{addr}/api/events.mux"))
                    .await
                    .expect("a follower's downlink opens");
                taps.push(tokio::spawn(async move { while let Some(Ok(_)) = socket.next().await {} }));
            }
            let _ = ready.send(stat);
            let _ = stopped.await;
            for tap in taps {
                tap.abort();
            }
        });
    });
    let stat = is_ready.recv().expect("the watching clients connect");
    Watchers { thread, stat, stop }
}

/// How long the throughput cases wait, once the others are up and A's sessions stored, before
/// they measure: a steady state, not the others' start.
const SETTLE: Duration = Duration::from_secs(1);

/// Durable appends per second through A, one client per session, with `others` on the store
/// (on a core of their own with `own_cores`), how many notifications each bare listener
/// received meanwhile, and the CPU the other gateways and their server backends used.
async fn throughput(apiproxy: &std::path::Path, others: Others, appends: usize, own_cores: bool) -> Measured {
    const SESSIONS: usize = 8;
    let schema = Schema::new(&format!("tp{}", std::process::id() % 1000 + rand_tag()));
    let a = serve(apiproxy, &schema.url, &[]);
    // The other gateways' connections carry a name of their own, so their backends can be found.
    let others_url = format!("{}&application_name={}", schema.url, others_application());
    let follower = || match own_cores {
        true => Gateway::serve_on_cpus(apiproxy, &others_url, OTHERS_CPU, &with_extra_flags(&[])),
        false => serve(apiproxy, &others_url, &[]),
    };
    let (gateways, taps, watchers): (Vec<Gateway>, _, _) = match others {
        Others::Gateways(n) => ((0..n).map(|_| follower()).collect(), Vec::new(), None),
        Others::WatchedGateways(n) => {
            let gateways: Vec<Gateway> = (0..n).map(|_| follower()).collect();
            let addrs = gateways.iter().map(|gateway| gateway.addr().to_owned()).collect();
            let watchers = watch_all(addrs, own_cores.then_some(OTHERS_CPU));
            (gateways, Vec::new(), Some(watchers))
        }
        Others::Listeners(n) => (Vec::new(), listeners(schema.store.notification_channel(), n).await, None),
    };
    let mut clients = Vec::new();
    for s in 0..SESSIONS {
        let mut client = Client::connect(a.addr()).await;
        client.call("session.create", json!({"sessionId": format!("tp-{s}"), "cwd": "/bench"})).await;
        // The first append stores the session, which every other gateway then looks up once.
        let payload = json!({"sessionId": format!("tp-{s}"), "events": [event(0)], "durable": true});
        client.call("session.append", payload).await;
        clients.push(client);
    }
    // What the others do once on start and on a new session (their first sweep, the new
    // sessions' headers, a watcher's subscription) is over before the measured appends.
    tokio::time::sleep(SETTLE).await;
    let gateway_pids: Vec<u32> = gateways.iter().map(Gateway::pid).collect();
    if own_cores && !gateway_pids.is_empty() {
        // Their backends work for them: on their CPU too, as a database on a host of its own
        // would give them cores of their own.
        for pid in others_backends().await {
            taskset(&["-p", "-c", OTHERS_CPU, &pid.to_string()]);
        }
    }
    let cpu_before = match gateway_pids.is_empty() {
        true => None,
        false => Some(OthersCpu::sample(&gateway_pids).await),
    };
    let watchers_cpu = || watchers.as_ref().and_then(|watchers| stat_cpu_seconds(&watchers.stat));
    let watchers_before = watchers_cpu();
    HEARD.store(0, std::sync::atomic::Ordering::Relaxed);
    let started = Instant::now();
    let runs = clients.into_iter().enumerate().map(|(s, mut client)| async move {
        for k in 1..=appends {
            let payload = json!({"sessionId": format!("tp-{s}"), "events": [event(k)], "durable": true});
            client.call("session.append", payload).await;
        }
    });
    futures::future::join_all(runs).await;
    let rate = (SESSIONS * appends) as f64 / started.elapsed().as_secs_f64();
    let others_cpu = match &cpu_before {
        Some(before) => Some(OthersCpu::sample(&gateway_pids).await.since(before, SESSIONS * appends)),
        None => None,
    };
    let watchers_cpu = watchers_cpu()
        .zip(watchers_before)
        .map(|(now, then)| (now - then) * 1_000.0 * 1_000.0 / (SESSIONS * appends) as f64);
    let heard = match others {
        Others::Listeners(n) if n > 0 => HEARD.load(std::sync::atomic::Ordering::Relaxed) / n,
        _ => 0,
    };
    if let Some(Watchers { thread, stop, .. }) = watchers {
        drop(stop);
        thread.join().expect("the watching clients stop");
    }
    drop(gateways);
    for tap in taps {
        tap.abort();
    }
    Measured { rate, heard, others_cpu, watchers_cpu }
}

/// The `application_name` of the other gateways' connections (their listening connections add
/// `-listener`), by which their server backends are found: this probe's own, so another run on
/// the same server is not counted.
fn others_application() -> String {
    format!("follow-latency-other-{}", std::process::id())
}

/// The pids of the other gateways' server backends (found by their `application_name`).
async fn others_backends() -> Vec<u32> {
    let (client, connection) =
        tokio_postgres::connect(&server_url(), tokio_postgres::NoTls).await.expect("a connection for pg_stat_activity");
    let driver = tokio::spawn(connection);
    let pattern = format!("{}%", others_application());
    let rows = client
        .query("SELECT pid FROM pg_stat_activity WHERE application_name LIKE $1", &[&pattern])
        .await
        .expect("the other gateways' backends");
    drop(client);
    let _ = driver.await;
    rows.iter().filter_map(|row| u32::try_from(row.get::<_, i32>(0)).ok()).collect()
}

/// What one throughput case measured.
struct Measured {
    /// A's durable appends per second.
    rate: f64,
    /// The notifications each bare listener received.
    heard: usize,
    /// With other gateways: their CPU and their backends' per 1,000 appends through A.
    others_cpu: Option<(f64, f64)>,
    /// With watched gateways: the CPU of their watching clients (this probe's thread) per 1,000
    /// appends through A.
    watchers_cpu: Option<f64>,
}

/// CPU seconds (user and system) of the other gateways' processes and of their server backends,
/// each by pid, from `/proc/PID/stat`.
struct OthersCpu {
    gateways: std::collections::HashMap<u32, f64>,
    backends: std::collections::HashMap<u32, f64>,
}

impl OthersCpu {
    async fn sample(gateway_pids: &[u32]) -> OthersCpu {
        let backends = others_backends().await;
        OthersCpu { gateways: cpu_seconds(gateway_pids), backends: cpu_seconds(&backends) }
    }

    /// Milliseconds of CPU per 1,000 appends since `before`, of the gateways and of their
    /// backends (a backend opened meanwhile counts whole; one closed meanwhile is lost).
    fn since(&self, before: &OthersCpu, appends: usize) -> (f64, f64) {
        let used = |now: &std::collections::HashMap<u32, f64>, then: &std::collections::HashMap<u32, f64>| {
            now.iter().map(|(pid, seconds)| seconds - then.get(pid).copied().unwrap_or(0.0)).sum::<f64>()
        };
        let per_thousand = 1_000.0 * 1_000.0 / appends as f64;
        (used(&self.gateways, &before.gateways) * per_thousand, used(&self.backends, &before.backends) * per_thousand)
    }
}

/// CPU seconds (user and system) of each of `pids` still running.
fn cpu_seconds(pids: &[u32]) -> std::collections::HashMap<u32, f64> {
    pids.iter().filter_map(|&pid| Some((pid, stat_cpu_seconds(&format!("/proc/{pid}/stat"))?))).collect()
}

/// CPU seconds (user and system) in a `/proc/.../stat` file (a process's or a thread's).
fn stat_cpu_seconds(path: &str) -> Option<f64> {
    static TICKS: std::sync::OnceLock<f64> = std::sync::OnceLock::new();
    let ticks = *TICKS.get_or_init(|| {
        let output = std::process::Command::new("getconf").arg("CLK_TCK").output().ok();
        output.and_then(|output| String::from_utf8(output.stdout).ok()?.trim().parse().ok()).unwrap_or(100.0)
    });
    let stat = std::fs::read_to_string(path).ok()?;
    // The fields after the command name, which is in parentheses and may hold spaces.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let user: f64 = fields.get(11)?.parse().ok()?;
    let system: f64 = fields.get(12)?.parse().ok()?;
    Some((user + system) / ticks)
}

/// The position query of one sweep over `n` tracked sessions, each with one stored event.
fn sweep_cost(n: usize) -> Vec<Duration> {
    let schema = Schema::new("sweep_cost");
    let mut ids = Vec::with_capacity(n);
    for s in 0..n {
        let id = SessionId::from(format!("tracked-{s}"));
        let header = SessionHeader::new(id.clone(), 1_700_000_000_000);
        let event =
            SessionEvent::from_json_line(r#"{"type":"turn/start","seq":0,"time":1700000000000,"data":{"turn":1}}"#)
                .expect("a stored event");
        schema.store.append_batch(&header, &[std::sync::Arc::new(event)], false).expect("write a session");
        ids.push(id);
    }
    let cancel = CancellationToken::new();
    let mut samples: Vec<Duration> = (0..7)
        .map(|_| {
            let started = Instant::now();
            let positions = schema.store.positions(&ids, &cancel).expect("the sweep's positions");
            assert_eq!(positions.len(), n);
            started.elapsed()
        })
        .collect();
    samples.sort();
    samples
}

/// The cases `--cases=…` names (comma-separated: `alone`, `l1`, `l4`, `g1`, `g4`, `w1`, `w4`),
/// else all of them; nobody else on the store (`alone`) always first.
fn chosen_cases() -> Vec<Others> {
    let all = [
        ("alone", Others::Listeners(0)),
        ("l1", Others::Listeners(1)),
        ("l4", Others::Listeners(4)),
        ("g1", Others::Gateways(1)),
        ("g4", Others::Gateways(4)),
        ("w1", Others::WatchedGateways(1)),
        ("w4", Others::WatchedGateways(4)),
    ];
    let Some(list) = std::env::args().find_map(|arg| arg.strip_prefix("--cases=").map(str::to_owned)) else {
        return all.iter().map(|(_, case)| *case).collect();
    };
    let names: Vec<&str> = list.split(',').collect();
    for name in &names {
        assert!(all.iter().any(|(known, _)| known == name), "--cases: unknown case {name:?}");
    }
    all.iter().filter(|(name, _)| *name == "alone" || names.contains(name)).map(|(_, case)| *case).collect()
}

/// A's durable append throughput with nobody else on the store and with each kind of other,
/// interleaved over `--rounds=N` rounds (3 by default); prints the medians.
async fn throughputs(apiproxy: &std::path::Path, appends: usize, own_cores: bool) {
    // Interleaved, so drift on a noisy machine spreads over every case.
    let cases = chosen_cases();
    let n_rounds = std::env::args()
        .find_map(|arg| arg.strip_prefix("--rounds=").map(|n| n.parse::<usize>().expect("--rounds=N")))
        .unwrap_or(3);
    let mut rates = vec![Vec::new(); cases.len()];
    let mut heard = vec![Vec::new(); cases.len()];
    let mut others_cpu = vec![(Vec::new(), Vec::new()); cases.len()];
    let mut watchers_cpu = vec![Vec::new(); cases.len()];
    for round in 0..n_rounds {
        // Each round starts at another case, so that no case always runs right after the same
        // one (the server's work left over from a heavy case, its checkpoints, the catalog
        // churn of a dropped schema fall on every case alike).
        for step in 0..cases.len() {
            let at = (round + step) % cases.len();
            let case = &cases[at];
            let measured = throughput(apiproxy, *case, appends, own_cores).await;
            rates[at].push(measured.rate);
            heard[at].push(measured.heard);
            if let Some((gateways, backends)) = measured.others_cpu {
                others_cpu[at].0.push(gateways);
                others_cpu[at].1.push(backends);
            }
            watchers_cpu[at].extend(measured.watchers_cpu);
        }
    }
    let median = |rates: &mut Vec<f64>| {
        rates.sort_by(f64::total_cmp);
        rates[rates.len() / 2]
    };
    // Each case against nobody else in the same round, so that the machine's drift between
    // rounds cancels out.
    let paired: Vec<Vec<f64>> =
        rates.iter().map(|case| case.iter().zip(&rates[0]).map(|(rate, alone)| rate / alone - 1.0).collect()).collect();
    let alone = median(&mut rates[0].clone());
    println!("A's durable appends/s (median of {n_rounds}), nobody else on the store: {alone:.0} {:.0?}", rates[0]);
    for (((((case, rates), mut paired), heard), (gateways, backends)), watchers) in
        cases.iter().zip(&rates).zip(paired).zip(&heard).zip(&others_cpu).zip(&watchers_cpu).skip(1)
    {
        let rate = median(&mut rates.clone());
        let heard = match case {
            Others::Listeners(_) => format!(", each listener heard {heard:?} notifications"),
            _ if !gateways.is_empty() => format!(
                "; their CPU per 1,000 appends (medians): the gateways {:.0} ms, their server backends {:.0} ms{}",
                median(&mut gateways.clone()),
                median(&mut backends.clone()),
                match watchers.is_empty() {
                    true => String::new(),
                    false => format!(", their watching clients (this probe) {:.0} ms", median(&mut watchers.clone())),
                }
            ),
            _ => String::new(),
        };
        println!(
            "A's durable appends/s, {case:?}: {rate:.0} ({:+.1} % against none; {:+.1} % the median against its own \
             round's) {rates:.0?}{heard}",
            (rate / alone - 1.0) * 100.0,
            median(&mut paired) * 100.0,
        );
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let quick = std::env::args().any(|arg| arg == "--quick");
    let own_cores = std::env::args().any(|arg| arg == "--own-cores");
    let apiproxy = apiproxy_binary();
    let (latency_samples, sweep_samples, appends, tracked) =
        if quick { (50, 10, 20, 1_000) } else { (300, 40, 100, 10_000) };
    let appends = std::env::args()
        .find_map(|arg| arg.strip_prefix("--appends=").map(|n| n.parse::<usize>().expect("--appends=N")))
        .unwrap_or(appends);
    assert!(appends > 0, "--appends=N needs N of at least 1");

    println!("follow_latency: PostgreSQL at {}", session_persistence_postgres::redact_url(&server_url()));
    if own_cores {
        let _pinned = OwnCores::pin();
        println!("the database, A and this probe on CPU 0; the other gateways and their clients on CPU {OTHERS_CPU}");
        throughputs(&apiproxy, appends, true).await;
        return;
    }
    if std::env::args().any(|arg| arg == "--throughput-only") {
        throughputs(&apiproxy, appends, false).await;
        return;
    }
    let spaced = Duration::from_millis(100);
    for (name, sweep_only, n, spacing) in [
        ("notification", false, latency_samples, Duration::ZERO),
        ("notification, appends 100 ms apart", false, sweep_samples, spaced),
        ("sweep only (1 s)", true, sweep_samples, Duration::ZERO),
    ] {
        let samples = ack_to_frame(&apiproxy, sweep_only, n, spacing).await;
        println!(
            "A's durable ack to B's frame, {name}: p50 {}, p95 {}, p99 {}, max {} ({n} appends)",
            ms(percentile(&samples, 0.50)),
            ms(percentile(&samples, 0.95)),
            ms(percentile(&samples, 0.99)),
            ms(*samples.last().expect("samples")),
        );
    }
    throughputs(&apiproxy, appends, false).await;
    let samples = tokio::task::spawn_blocking(move || sweep_cost(tracked)).await.expect("the sweep probe");
    println!(
        "one sweep's positions over {tracked} tracked sessions: median {}, min {}, max {}",
        ms(percentile(&samples, 0.5)),
        ms(samples[0]),
        ms(*samples.last().expect("samples"))
    );
}
