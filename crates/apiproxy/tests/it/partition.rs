//! Network faults, for real (issue #24; `docs/wire.md`, "Across gateways"): two `apiproxy serve`
//! processes, A and B, each in a network namespace of its own, over one PostgreSQL cluster the
//! test starts on the namespaces' links. A partition is a link taken down (`ip link set <veth>
//! down` on the host's end of a gateway's PostgreSQL link), healed by bringing it up; each
//! gateway's clients reach it over a second link that stays up.
//!
//! While A is cut off, its durable appends fail typed and within a stated bound, and no durable
//! acknowledgement is ever wrong (every acknowledged event is in the stored log afterwards, read
//! with a direct query on the cluster). While B is cut off, its listening connection is lost and A
//! writes on; once healed, B listens again and its sweep fills what it missed. Then every client
//! of every gateway holds, per session, exactly the stored log (the checker in `replica`).
//!
//! Needs root and `ip` (network namespaces, veth pairs) and the PostgreSQL server binaries:
//! without them the test says it was skipped, and fails under CI, which runs as root.

use std::{
    collections::BTreeMap,
    net::{IpAddr, Ipv4Addr},
    process::Command,
    time::{Duration, Instant},
};

use serde_json::{Value, json};
use session_persistence_postgres::testing::{PrivateCluster, on_ci};
use tempfile::TempDir;

use crate::{
    replica::{Replicas, Tap},
    support::{Gateway, Ws, turn},
};

/// The store's schema on the cluster.
const SCHEMA: &str = "partition";

/// The gateways' operator token (a gateway that listens on anything but loopback needs one).
const TOKEN: &str = "partition-test-token";

/// The store URL's `query_timeout`: the bound of each statement, of a wait for a pooled
/// connection, and of data a connection sent that the server has not acknowledged.
const QUERY_TIMEOUT: Duration = Duration::from_secs(3);

/// The store URL's `connect_timeout`.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// How long a durable append through a cut-off gateway may take to fail: the query timeout for
/// the statement in flight, once more should a write-behind attempt already in flight hold the
/// session's write, and a second for the rest.
const PROMPT_FAILURE: Duration = Duration::from_secs(2 * QUERY_TIMEOUT.as_secs() + 1);

/// How long the test waits for a gateway to notice a lost connection, or to listen again: a
/// ping of the listening connection every 5 s bounded by the query timeout, and the listener's
/// reconnect backoff (up to 10 s, each attempt bounded by the connect timeout), with room.
const NOTICE: Duration = Duration::from_secs(30);

/// The sessions written through A from the start.
const SESSIONS: [&str; 4] = ["s0", "s1", "s2", "s3"];

/// A session A creates while B is cut off.
const LATE: &str = "late";

/// What a gateway logs when its listening connection is lost.
const LOST: &str = "the listening connection was lost; reconnecting";

/// The test needs root and `ip` that can make network namespaces (tried: one is added and
/// deleted); without them it skips (saying so), except under CI, where it fails.
fn lab_allowed() -> bool {
    let root =
        Command::new("id").arg("-u").output().is_ok_and(|out| String::from_utf8_lossy(&out.stdout).trim() == "0");
    let probe = format!("dsh{}probe", std::process::id());
    let namespaces = root
        && Command::new("ip").args(["netns", "add", &probe]).output().is_ok_and(|out| out.status.success())
        && Command::new("ip").args(["netns", "del", &probe]).output().is_ok_and(|out| out.status.success());
    if namespaces {
        return true;
    }
    let missing = if root { "`ip` (iproute2) able to make network namespaces" } else { "root" };
    assert!(!on_ci(), "the partition test needs {missing}, and CI must run it (CI runs as root)");
    eprintln!("SKIPPED: the partition test needs {missing} (network namespaces and veth pairs)");
    false
}

/// Runs `ip ARGS`, failing the test with its output when it fails.
fn ip(args: &[&str]) {
    let output = Command::new("ip").args(args).output().unwrap_or_else(|error| panic!("ip {args:?}: {error}"));
    assert!(output.status.success(), "ip {args:?} failed: {}", String::from_utf8_lossy(&output.stderr));
}

/// Runs `ip ARGS` for its output, if it succeeds.
fn ip_output(args: &[&str]) -> Option<String> {
    let output = Command::new("ip").args(args).output().ok()?;
    output.status.success().then(|| String::from_utf8_lossy(&output.stdout).into_owned())
}

/// One veth pair: the host's end and the namespace's, each with its address in a /30.
struct Link {
    host: String,
    inside: String,
    host_addr: Ipv4Addr,
    inside_addr: Ipv4Addr,
}

/// One gateway's network namespace, its link to PostgreSQL and its link to the test's clients.
struct Side {
    namespace: String,
    postgres: Link,
    clients: Link,
}

/// The namespaces, links, cluster and gateways of one run; all of it is torn down on drop,
/// however the test ends (a panic included).
struct Lab {
    sides: Vec<Side>,
    gateways: Vec<Gateway>,
    cluster: Option<PrivateCluster>,
    logs: TempDir,
}

impl Lab {
    /// Sets up `n_sides` namespaces (gateway i's is `dsh<pid>g<i>`), a cluster listening on the
    /// host's end of each PostgreSQL link, and a gateway in each namespace; `None` when the
    /// cluster is skipped (no server binaries, outside CI).
    fn start(n_sides: u8) -> Option<Lab> {
        let pid = std::process::id();
        let octet = free_octet(pid);
        let sides: Vec<Side> = (1..=n_sides)
            .map(|i| {
                let link = |kind: char, third: u8| Link {
                    host: format!("dsh{pid}{kind}{i}h"),
                    inside: format!("dsh{pid}{kind}{i}n"),
                    host_addr: Ipv4Addr::new(10, octet, third, 1),
                    inside_addr: Ipv4Addr::new(10, octet, third, 2),
                };
                Side { namespace: format!("dsh{pid}g{i}"), postgres: link('p', i), clients: link('c', 100 + i) }
            })
            .collect();
        let mut lab = Lab { sides, gateways: Vec::new(), cluster: None, logs: tempfile::tempdir().unwrap() };
        // A run that crashed with this pid left its names behind: remove them first.
        lab.remove_network();
        for side in &lab.sides {
            let namespace = side.namespace.as_str();
            ip(&["netns", "add", namespace]);
            ip(&["-n", namespace, "link", "set", "lo", "up"]);
            for link in [&side.postgres, &side.clients] {
                assert!(link.host.len() <= 15 && link.inside.len() <= 15, "interface names are at most 15 bytes");
                ip(&["link", "add", &link.host, "type", "veth", "peer", "name", &link.inside, "netns", namespace]);
                ip(&["addr", "add", &format!("{}/30", link.host_addr), "dev", &link.host]);
                ip(&["link", "set", &link.host, "up"]);
                ip(&["-n", namespace, "addr", "add", &format!("{}/30", link.inside_addr), "dev", &link.inside]);
                ip(&["-n", namespace, "link", "set", &link.inside, "up"]);
            }
        }
        let listen: Vec<IpAddr> = lab.sides.iter().map(|side| IpAddr::V4(side.postgres.host_addr)).collect();
        lab.cluster = Some(PrivateCluster::start_listening(&listen, Some(&format!("10.{octet}.0.0/16")))?);
        for idx in 0..lab.sides.len() {
            let gateway = lab.start_gateway(idx);
            lab.gateways.push(gateway);
        }
        Some(lab)
    }

    /// Gateway `idx` in its namespace, on its clients' link, over the cluster at the host's end
    /// of its PostgreSQL link, with short timeouts, sweeping every 500 ms, logging to a file.
    fn start_gateway(&self, idx: usize) -> Gateway {
        let side = &self.sides[idx];
        let store = format!(
            "{}&connect_timeout={}&query_timeout={}",
            self.cluster().url_at(IpAddr::V4(side.postgres.host_addr), SCHEMA),
            CONNECT_TIMEOUT.as_secs(),
            QUERY_TIMEOUT.as_secs()
        );
        let listen = format!("{}:0", side.clients.inside_addr);
        let allow = side.clients.inside_addr.to_string();
        let flags =
            ["--allow-host", &allow, "--follow-sweep-ms", "500", "--log", "info,session_persistence_postgres=debug"];
        Gateway::start_in_namespace(&side.namespace, &listen, &store, TOKEN, &flags, &self.log(idx))
    }

    fn cluster(&self) -> &PrivateCluster {
        self.cluster.as_ref().expect("the cluster runs while the lab does")
    }

    fn log(&self, idx: usize) -> std::path::PathBuf {
        self.logs.path().join(format!("gateway-{idx}.log"))
    }

    /// How many lines of gateway `idx`'s log contain `text`.
    fn count_in_log(&self, idx: usize, text: &str) -> usize {
        std::fs::read_to_string(self.log(idx)).map_or(0, |log| log.lines().filter(|line| line.contains(text)).count())
    }

    /// Cuts gateway `idx` off from PostgreSQL: the host's end of its link goes down, so nothing
    /// passes either way (no reset, no error: packets are dropped, as on a cut cable).
    fn partition(&self, idx: usize) {
        ip(&["link", "set", &self.sides[idx].postgres.host, "down"]);
    }

    fn heal(&self, idx: usize) {
        ip(&["link", "set", &self.sides[idx].postgres.host, "up"]);
    }

    /// A mux downlink of gateway `idx`, read by a task of its own.
    async fn mux(&self, idx: usize) -> Tap {
        let gateway = &self.gateways[idx];
        Tap::new(Ws::connect_with(gateway.addr(), "/api/events.mux", None, gateway.token()).await)
    }

    /// The server pids of gateway `idx`'s listening connections, as the server sees them.
    fn listeners(&self, idx: usize) -> Vec<String> {
        let addr = self.sides[idx].postgres.inside_addr;
        self.cluster()
            .sql(
                SCHEMA,
                &format!(
                    "SELECT pid FROM pg_stat_activity WHERE application_name LIKE '%-listener' \
                     AND host(client_addr) = '{addr}'"
                ),
            )
            .into_iter()
            .filter_map(|row| row.into_iter().next().flatten())
            .collect()
    }

    /// Every stored event, per session, as `(seq, type, record)`, read on the cluster directly
    /// (a store of the test's own, from outside the namespaces).
    fn stored(&self) -> BTreeMap<String, Vec<(u64, String, Value)>> {
        use session_persistence::{Backend, CollectSink};
        let config = session_persistence_postgres::PgConfig::from_url(&self.cluster().url(SCHEMA)).unwrap();
        let store = session_persistence_postgres::PgStore::open(&config).unwrap();
        let cancel = tokio_util::sync::CancellationToken::new();
        let mut stored: BTreeMap<String, Vec<(u64, String, Value)>> = BTreeMap::new();
        for header in store.list(&cancel).unwrap().headers {
            let mut sink = CollectSink::default();
            store.scan(&header.header.id, &cancel, &mut sink).unwrap().expect("a listed session is stored");
            let events = sink.events.iter().map(|event| {
                let mut line = Vec::new();
                event.write_json(&mut line);
                (event.seq, event.kind.as_str().to_owned(), serde_json::from_slice(&line).unwrap())
            });
            stored.entry(header.header.id.to_string()).or_default().extend(events);
        }
        stored
    }

    /// What a replica of each session must hold: its stored `(seq, type)`s.
    fn stored_logs(&self) -> BTreeMap<String, Vec<(u64, String)>> {
        self.stored()
            .into_iter()
            .map(|(id, events)| (id, events.into_iter().map(|(seq, kind, _)| (seq, kind)).collect()))
            .collect()
    }

    /// Takes the namespaces and links down (best effort: some may not exist).
    fn remove_network(&self) {
        for side in &self.sides {
            for link in [&side.postgres, &side.clients] {
                // Deleting one end of a veth pair deletes both.
                let _ = Command::new("ip").args(["link", "del", &link.host]).output();
            }
            let _ = Command::new("ip").args(["netns", "del", &side.namespace]).output();
        }
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        if std::thread::panicking() {
            for idx in 0..self.gateways.len() {
                let log = std::fs::read_to_string(self.log(idx)).unwrap_or_default();
                eprintln!("gateway {idx}'s log:\n{log}");
            }
        }
        // The gateways first (killed and reaped), so nothing runs inside a namespace any more;
        // then the network; then the cluster.
        self.gateways.clear();
        self.remove_network();
        self.cluster.take();
    }
}

/// A second octet `x` for `10.x.0.0/16` that no address or route of the host uses, derived from
/// `pid` so that concurrent runs pick different ones.
fn free_octet(pid: u32) -> u8 {
    (0..200u32)
        .map(|step| 20 + ((pid + step) % 200) as u8)
        .find(|octet| {
            let subnet = format!("10.{octet}.0.0/16");
            let addresses = ip_output(&["-o", "-4", "addr", "show", "to", &subnet]);
            let routes = ip_output(&["-4", "route", "show", "root", &subnet]);
            addresses.is_some_and(|out| out.trim().is_empty()) && routes.is_some_and(|out| out.trim().is_empty())
        })
        .expect("a free 10.x.0.0/16 subnet")
}

/// Everything appended through A, acknowledged or not, and each durable acknowledgement.
#[derive(Default)]
struct Appended {
    /// Per session, every event sent, in order.
    events: BTreeMap<String, Vec<Value>>,
    /// Each durable acknowledgement: the session and the seqs it covers.
    acks: Vec<(String, u64, u64)>,
}

impl Appended {
    /// Notes that `events` were sent to `id` (whatever the answer: a failed append stays in the
    /// gateway's memory, to be stored by a later flush).
    fn sent(&mut self, id: &str, events: &[Value]) {
        self.events.entry(id.to_owned()).or_default().extend(events.iter().cloned());
    }

    /// A durable append of turn `n` to `id` through `gateway`, which must be acknowledged.
    fn append_ok(&mut self, gateway: &Gateway, id: &str, n: u64) {
        let events = turn(n);
        self.sent(id, &events);
        let result = gateway.call("session.append", json!({"sessionId": id, "events": events, "durable": true}));
        assert_eq!(result["ok"], true, "a durable append to {id}: {result}");
        self.acknowledged(id, &result["value"]);
    }

    fn acknowledged(&mut self, id: &str, value: &Value) {
        let (first, last) = (value["firstSeq"].as_u64().unwrap(), value["lastSeq"].as_u64().unwrap());
        assert!(
            value["durableSeq"].as_u64().is_some_and(|durable| durable >= last),
            "durable through the batch: {value}"
        );
        self.acks.push((id.to_owned(), first, last));
    }
}

/// `session.flush` of `id` through `gateway` until it succeeds, once its link is back: each
/// failed flush drops the pooled connection it used (which a partition may have broken), so
/// within one more flush than the pool holds connections (8) one succeeds. Each attempt is
/// itself the wait: no sleep.
fn flush_until_durable(gateway: &Gateway, id: &str) -> Value {
    for _ in 0..=8 {
        let result = gateway.call("session.flush", json!({"sessionId": id}));
        if result["ok"] == true {
            return result["value"].clone();
        }
    }
    panic!("{id} could not be made durable after the link came back");
}

/// Polls `done` (a state with no change signal to wait on: a server view, a log file) until it
/// holds, for at most `bound`.
fn poll_until(what: &str, bound: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + bound;
    while !done() {
        assert!(Instant::now() < deadline, "{what} did not happen within {bound:?}");
        // A true delay between polls: what is polled has no signal to wait on.
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partitions_fail_appends_promptly_and_every_client_converges_on_the_stored_log() {
    if !lab_allowed() {
        return;
    }
    let started = Instant::now();
    let Some(lab) = tokio::task::block_in_place(|| Lab::start(2)) else { return };
    let (a, b) = (&lab.gateways[0], &lab.gateways[1]);
    let described = tokio::task::block_in_place(|| b.ok("host.describe", json!({})));
    assert_eq!(described["followsStore"], true, "{described}");
    let (mut a_mux, mut b_mux) = (lab.mux(0).await, lab.mux(1).await);
    let (mut a_replicas, mut b_replicas) = (Replicas::default(), Replicas::default());
    let mut appended = Appended::default();

    // Healthy: sessions written through A, followed by B's client (and A's own).
    tokio::task::block_in_place(|| {
        for id in SESSIONS {
            a.ok("session.create", json!({"sessionId": id, "cwd": "/w"}));
            for n in 1..=2 {
                appended.append_ok(a, id, n);
            }
        }
    });
    let want = lab.stored_logs();
    assert_eq!(want.len(), SESSIONS.len());
    a_replicas.converge(&mut a_mux, &want).await;
    b_replicas.converge(&mut b_mux, &want).await;

    // A cut off: each durable append fails, typed and promptly; none is acknowledged.
    lab.partition(0);
    for id in SESSIONS {
        appended.sent(id, &turn(3));
    }
    let outcomes: Vec<(&str, Value, Duration)> = tokio::task::block_in_place(|| {
        std::thread::scope(|scope| {
            let calls = SESSIONS.map(|id| {
                scope.spawn(move || {
                    let started = Instant::now();
                    let result = a.call("session.append", json!({"sessionId": id, "events": turn(3), "durable": true}));
                    (id, result, started.elapsed())
                })
            });
            calls.into_iter().map(|call| call.join().unwrap()).collect()
        })
    });
    for (id, result, took) in &outcomes {
        assert_eq!(result["ok"], false, "no durable acknowledgement while A is cut off: {result}");
        assert_eq!(result["error"]["code"], "internal", "{result}");
        assert_eq!(result["error"]["message"], format!("session \"{id}\" could not be made durable"), "{result}");
        assert!(*took <= PROMPT_FAILURE, "{id}'s append failed after {took:?}, over {PROMPT_FAILURE:?}");
    }
    eprintln!(
        "partition: A's durable appends failed after {:?}",
        outcomes.iter().map(|(_, _, took)| *took).collect::<Vec<_>>()
    );
    // Healed: what A could not store is written by the next flush, and reaches B.
    lab.heal(0);
    tokio::task::block_in_place(|| {
        for id in SESSIONS {
            let flushed = flush_until_durable(a, id);
            assert_eq!(flushed["durableSeq"], 17, "three turns of six events: {flushed}");
        }
    });
    let want = lab.stored_logs();
    a_replicas.converge(&mut a_mux, &want).await;
    b_replicas.converge(&mut b_mux, &want).await;

    // B cut off: its listening connection is lost while A writes on (a session created too).
    let listening = tokio::task::block_in_place(|| lab.listeners(1));
    assert_eq!(listening.len(), 1, "B listens on one connection: {listening:?}");
    let losses_before = lab.count_in_log(1, LOST);
    lab.partition(1);
    tokio::task::block_in_place(|| {
        for n in 4..=5 {
            for id in SESSIONS {
                appended.append_ok(a, id, n);
            }
        }
        a.ok("session.create", json!({"sessionId": LATE, "cwd": "/w"}));
        for n in 1..=2 {
            appended.append_ok(a, LATE, n);
        }
        poll_until("B noticing its lost listening connection", NOTICE, || lab.count_in_log(1, LOST) > losses_before);
    });
    // Healed: B listens again (a new connection, as the server sees it), and its sweep fills
    // what the notifications it missed would have said.
    lab.heal(1);
    tokio::task::block_in_place(|| {
        poll_until("B listening again", NOTICE, || lab.listeners(1).iter().any(|pid| !listening.contains(pid)));
    });

    // Every client of every gateway holds exactly the stored log; a client that connects now
    // too.
    let want = lab.stored_logs();
    assert_eq!(want.len(), SESSIONS.len() + 1);
    a_replicas.converge(&mut a_mux, &want).await;
    b_replicas.converge(&mut b_mux, &want).await;
    let mut late_mux = lab.mux(1).await;
    Replicas::default().converge(&mut late_mux, &want).await;

    // No durable acknowledgement was wrong, and the store holds everything appended, each
    // event once, in order: the failed appends too, written once the link was back.
    let stored = lab.stored();
    for (id, first, last) in &appended.acks {
        let events = &stored[id];
        for seq in *first..=*last {
            let (stored_seq, kind, record) = &events[seq as usize];
            let sent = &appended.events[id][seq as usize];
            assert_eq!(*stored_seq, seq);
            assert_eq!(kind, sent["type"].as_str().unwrap(), "{id} at {seq}");
            assert_eq!(record["data"], sent["data"], "{id} at {seq}: the acknowledged event is stored");
        }
    }
    for (id, sent) in &appended.events {
        let events = &stored[id];
        assert_eq!(events.len(), sent.len(), "{id}: every event appended is stored, once");
        for (seq, ((stored_seq, kind, record), sent)) in events.iter().zip(sent).enumerate() {
            assert_eq!(*stored_seq, seq as u64, "{id}");
            assert_eq!(
                (kind.as_str(), &record["data"]),
                (sent["type"].as_str().unwrap(), &sent["data"]),
                "{id} at {seq}"
            );
        }
    }
    eprintln!("partition: the whole run took {:?}", started.elapsed());
}
