//! Following a shared store: two gateways over one store, each with its own coordinator, and a
//! client of one seeing what the other writes as live frames (`docs/wire.md`, "Across
//! gateways"). The store here is one `MemoryStore` behind a backend per gateway that signals the
//! other gateways' watches on every write, as PostgreSQL's notifications do, and that can lose
//! its signals for a while, so only the sweep finds the writes.

use std::{
    collections::{HashMap, HashSet},
    path::PathBuf,
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
    time::Duration,
};

use apiproxy::{FollowConfig, ProxyConfig};
use parking_lot::Mutex;
use serde_json::{Value, json};
use session_core::{ManualClock, SessionEvent, SessionHeader, SessionId};
use session_persistence::{
    Backend, ChangeKind, CorruptKind, FencedWrite, HeaderPage, Listing, Location, MemoryStore, PageRequest,
    PersistenceError, Result, Revision, ScanOutcome, ScanSink, SessionPosition, SharedChangeSink, StoreChange,
    StoredHeader, SurveyEntry, TornTail, Watch, WatchOptions,
};
use tokio_util::sync::CancellationToken;

use crate::{
    replica::{Replica, converge},
    support::{Gateway, Server, Ws, turn},
};

/// What the gateways share: the logs, the writer leases, and the signal's subscribers.
#[derive(Default)]
struct Net {
    logs: MemoryStore,
    /// Serializes writes, so the writer fence below is one step with the write.
    writes: Mutex<()>,
    leases: Mutex<HashMap<SessionId, usize>>,
    watchers: Mutex<Vec<(usize, usize, SharedChangeSink)>>,
    next_watch: AtomicUsize,
    /// While set, writes send no signal.
    silent: AtomicBool,
}

impl std::fmt::Debug for Net {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Net").field("logs", &self.logs).finish_non_exhaustive()
    }
}

impl Net {
    fn signal(&self, from: usize, change: StoreChange) {
        if self.silent.load(Ordering::SeqCst) {
            return;
        }
        for (_, gateway, sink) in self.watchers.lock().iter() {
            if *gateway != from {
                sink.changed(change.clone());
            }
        }
    }

    fn next_seq(&self, id: &SessionId) -> Option<u64> {
        let positions = self.logs.positions(std::slice::from_ref(id), &CancellationToken::new()).ok()?;
        positions.first().map(|position| position.next_seq)
    }
}

/// One gateway's handle on the shared store.
#[derive(Debug)]
struct Handle {
    net: Arc<Net>,
    me: usize,
    held: Mutex<HashSet<SessionId>>,
    /// Log reads through this handle, and position reads.
    scans: AtomicUsize,
    position_reads: AtomicUsize,
    /// While set, position reads wait before they answer (a round held half way); how many have
    /// waited so far.
    gate: Mutex<bool>,
    opened: parking_lot::Condvar,
    gated: AtomicUsize,
    /// While set, ending a lease waits (the lease still held) until it is cleared; how many
    /// lease ends have waited so far.
    ends_held: Mutex<bool>,
    ends_opened: parking_lot::Condvar,
    ends_waited: AtomicUsize,
    /// Sessions whose lease this handle cannot probe (`held: None`, as a failed probe answers).
    unknown: Mutex<HashSet<SessionId>>,
    /// Sessions whose next read of the whole log (not a seek read) fails, once.
    fail_next_whole_read: Mutex<HashSet<SessionId>>,
    /// Sessions whose log reads through this handle fail, and how many have.
    broken: Mutex<HashSet<SessionId>>,
    broken_reads: AtomicUsize,
    /// Sessions whose log reads through this handle meet damage (a corrupt record).
    damaged: Mutex<HashSet<SessionId>>,
    /// The most events one log read through this handle handed on.
    most_per_read: AtomicUsize,
    /// Listings of new sessions (one per sweep), and of every session ever created (a rescan).
    sweeps: AtomicUsize,
    rescans: AtomicUsize,
}

impl Handle {
    fn new(net: &Arc<Net>, me: usize) -> Arc<Handle> {
        Arc::new(Handle {
            net: Arc::clone(net),
            me,
            held: Mutex::default(),
            scans: AtomicUsize::new(0),
            position_reads: AtomicUsize::new(0),
            gate: Mutex::new(false),
            opened: parking_lot::Condvar::new(),
            gated: AtomicUsize::new(0),
            ends_held: Mutex::new(false),
            ends_opened: parking_lot::Condvar::new(),
            ends_waited: AtomicUsize::new(0),
            unknown: Mutex::default(),
            fail_next_whole_read: Mutex::default(),
            broken: Mutex::default(),
            broken_reads: AtomicUsize::new(0),
            damaged: Mutex::default(),
            most_per_read: AtomicUsize::new(0),
            sweeps: AtomicUsize::new(0),
            rescans: AtomicUsize::new(0),
        })
    }

    /// Makes lease ends wait (`true`) until called with `false`.
    fn hold_lease_ends(&self, held: bool) {
        *self.ends_held.lock() = held;
        self.ends_opened.notify_all();
    }

    /// Makes position reads wait (`true`) until called with `false`.
    fn close_gate(&self, closed: bool) {
        *self.gate.lock() = closed;
        self.opened.notify_all();
    }

    /// Waits until a position read waits at the closed gate.
    async fn wait_until_gated(&self) {
        for _ in 0..4_000 {
            if self.gated.load(Ordering::SeqCst) > 0 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(5)).await; // polls a counter nothing signals
        }
        panic!("no position read reached the gate");
    }
}

/// A read's sink that counts the events from its seq handed to it (the memory store's seek
/// read scans from seq 0).
struct Counted<'a> {
    sink: &'a mut dyn ScanSink,
    from_seq: u64,
    events: usize,
}

impl ScanSink for Counted<'_> {
    fn header(&mut self, header: &Arc<SessionHeader>) -> Result<()> {
        self.sink.header(header)
    }

    fn event(&mut self, event: Arc<SessionEvent>) -> Result<()> {
        self.events += usize::from(event.seq >= self.from_seq);
        self.sink.event(event)
    }

    fn restart(&mut self) -> bool {
        self.sink.restart()
    }

    fn read_ahead(&self) -> bool {
        self.sink.read_ahead()
    }

    fn read_ahead_decoders(&self) -> usize {
        self.sink.read_ahead_decoders()
    }

    fn finish(&mut self) {
        self.sink.finish();
    }
}

impl Backend for Handle {
    fn name(&self) -> &'static str {
        "shared-memory"
    }

    fn scan(&self, id: &SessionId, cancel: &CancellationToken, sink: &mut dyn ScanSink) -> Result<Option<ScanOutcome>> {
        if self.fail_next_whole_read.lock().remove(id) {
            return Err(PersistenceError::invalid_input(format!("session {id}'s whole log does not read this once")));
        }
        self.scan_from(id, 0, cancel, sink)
    }

    /// A seek read (which the whole-log read above is too, from 0).
    fn scan_from(
        &self,
        id: &SessionId,
        from_seq: u64,
        cancel: &CancellationToken,
        sink: &mut dyn ScanSink,
    ) -> Result<Option<ScanOutcome>> {
        self.scans.fetch_add(1, Ordering::SeqCst);
        if self.broken.lock().contains(id) {
            self.broken_reads.fetch_add(1, Ordering::SeqCst);
            return Err(PersistenceError::invalid_input(format!("session {id} does not read here")));
        }
        if self.damaged.lock().contains(id) {
            let location = Location::Session { id: id.clone() };
            return Err(PersistenceError::corrupt(CorruptKind::Record, location, "a damaged record"));
        }
        let mut counted = Counted { sink, from_seq, events: 0 };
        let scanned = self.net.logs.scan_from(id, from_seq, cancel, &mut counted);
        self.most_per_read.fetch_max(counted.events, Ordering::SeqCst);
        scanned
    }

    fn revision(&self, id: &SessionId) -> Result<Option<Revision>> {
        self.net.logs.revision(id)
    }

    fn header(&self, id: &SessionId, cancel: &CancellationToken) -> Result<Option<StoredHeader>> {
        self.net.logs.header(id, cancel)
    }

    fn append_batch(&self, header: &SessionHeader, events: &[Arc<SessionEvent>], materialized: bool) -> Result<()> {
        let next_seq = {
            let _write = self.net.writes.lock();
            let stored = self.net.next_seq(&header.id);
            let first = events.first().map_or(0, |event| event.seq);
            if let Some(stored) = stored
                && stored != first
            {
                return Err(PersistenceError::fenced(&header.id, FencedWrite::Append, first, stored));
            }
            self.net.logs.append_batch(header, events, materialized)?;
            first + events.len() as u64
        };
        let kind = if materialized { ChangeKind::Appended } else { ChangeKind::Created };
        self.net.signal(self.me, StoreChange::Session { id: header.id.clone(), kind, next_seq: Some(next_seq) });
        Ok(())
    }

    fn commit_repair(&self, header: &SessionHeader, torn: Option<&TornTail>, closers: &[SessionEvent]) -> Result<()> {
        {
            let _write = self.net.writes.lock();
            self.net.logs.commit_repair(header, torn, closers)?;
        }
        self.net.signal(
            self.me,
            StoreChange::Session { id: header.id.clone(), kind: ChangeKind::Appended, next_seq: None },
        );
        Ok(())
    }

    fn lease(&self, id: &SessionId) -> Result<()> {
        let mut held = self.held.lock();
        if held.insert(id.clone()) {
            *self.net.leases.lock().entry(id.clone()).or_default() += 1;
        }
        Ok(())
    }

    fn end_lease(&self, id: &SessionId) {
        {
            let mut waiting = self.ends_held.lock();
            if *waiting {
                self.ends_waited.fetch_add(1, Ordering::SeqCst);
            }
            while *waiting {
                self.ends_opened.wait(&mut waiting);
            }
        }
        {
            let mut held = self.held.lock();
            if !held.remove(id) {
                return;
            }
            let mut leases = self.net.leases.lock();
            if let Some(count) = leases.get_mut(id) {
                *count -= 1;
                if *count == 0 {
                    leases.remove(id);
                }
            }
        }
        self.net.signal(self.me, StoreChange::Session { id: id.clone(), kind: ChangeKind::Released, next_seq: None });
    }

    fn list(&self, cancel: &CancellationToken) -> Result<Listing> {
        self.net.logs.list(cancel)
    }

    fn list_children(&self, parent: &SessionId, cancel: &CancellationToken) -> Result<Listing> {
        self.net.logs.list_children(parent, cancel)
    }

    fn list_page(&self, request: &PageRequest, cancel: &CancellationToken) -> Result<HeaderPage> {
        self.net.logs.list_page(request, cancel)
    }

    fn survey(&self, cancel: &CancellationToken) -> Result<Vec<SurveyEntry>> {
        self.net.logs.survey(cancel)
    }

    fn created_since(&self, since_ms: u64, cancel: &CancellationToken) -> Result<Listing> {
        self.sweeps.fetch_add(1, Ordering::SeqCst);
        if since_ms == 0 {
            self.rescans.fetch_add(1, Ordering::SeqCst);
        }
        self.net.logs.created_since(since_ms, cancel)
    }

    fn locate(&self, _header: &SessionHeader) -> Option<PathBuf> {
        None
    }

    fn watch(&self, _options: &WatchOptions, sink: SharedChangeSink) -> Result<Option<Watch>> {
        let key = self.net.next_watch.fetch_add(1, Ordering::SeqCst);
        sink.changed(StoreChange::Sweep);
        self.net.watchers.lock().push((key, self.me, sink));
        let net = Arc::clone(&self.net);
        Ok(Some(Watch::new(move || net.watchers.lock().retain(|(watch, _, _)| *watch != key))))
    }

    /// The positions as they stand, answered once the gate (if closed) opens: what a round then
    /// holds may be stale. Whether another handle holds a lease is known only for sessions this
    /// handle holds no lease of (`None` for its own), as SQLite's lock-file probe knows it.
    fn positions(&self, ids: &[SessionId], cancel: &CancellationToken) -> Result<Vec<SessionPosition>> {
        self.position_reads.fetch_add(1, Ordering::SeqCst);
        let mut positions = self.net.logs.positions(ids, cancel)?;
        {
            let mine = self.held.lock();
            let unknown = self.unknown.lock();
            let leases = self.net.leases.lock();
            for position in &mut positions {
                let known = !mine.contains(&position.id) && !unknown.contains(&position.id);
                position.held = known.then(|| leases.contains_key(&position.id));
            }
        }
        let mut closed = self.gate.lock();
        if *closed {
            self.gated.fetch_add(1, Ordering::SeqCst);
        }
        while *closed {
            self.opened.wait(&mut closed);
        }
        Ok(positions)
    }
}

fn config() -> ProxyConfig {
    ProxyConfig {
        follow: FollowConfig { sweep_interval: Duration::from_millis(100), ..FollowConfig::default() },
        ..ProxyConfig::default()
    }
}

/// A gateway that sweeps only when woken (its sweeps 10 minutes apart): what it does follows
/// from the signals a test sends, not from a sweep in between.
fn woken_only() -> ProxyConfig {
    ProxyConfig {
        follow: FollowConfig { sweep_interval: Duration::from_secs(600), ..FollowConfig::default() },
        ..ProxyConfig::default()
    }
}

async fn pair() -> (Arc<Net>, Server, Server) {
    pair_with(config()).await
}

/// Two gateways over one shared store, B with `b_config`.
async fn pair_with(b_config: ProxyConfig) -> (Arc<Net>, Server, Server) {
    let net = Arc::new(Net::default());
    let a = Server::start_on_backend(Handle::new(&net, 0), config()).await;
    let b = Server::start_on_backend(Handle::new(&net, 1), b_config).await;
    (net, a, b)
}

/// Two gateways over one shared store, and B's handle on it (for its counters and faults).
async fn pair_with_b_handle() -> (Arc<Net>, Server, Arc<Handle>, Server) {
    let net = Arc::new(Net::default());
    let a = Server::start_on_backend(Handle::new(&net, 0), config()).await;
    let b_handle = Handle::new(&net, 1);
    let b = Server::start_on_backend(b_handle.clone(), config()).await;
    (net, a, b_handle, b)
}

/// The stored events of `id`, as `(seq, type)`.
fn stored(net: &Net, id: &str) -> Vec<(u64, String)> {
    let mut sink = session_persistence::CollectSink::default();
    net.logs.scan(&id.into(), &CancellationToken::new(), &mut sink).unwrap();
    sink.events.iter().map(|event| (event.seq, event.kind.to_string())).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_written_through_one_gateway_is_live_through_the_other() {
    let (net, a, b) = pair().await;
    let described = b.ok(None, "host.describe", json!({})).await;
    assert_eq!(described["followsStore"], true, "{described}");
    let mut mux = b.ws("/api/events.mux", None).await;
    let mut host = b.ws("/api/events.host", None).await;

    a.ok(None, "session.create", json!({"sessionId": "s", "cwd": "/w"})).await;
    for n in 1..=5 {
        a.ok(None, "session.append", json!({"sessionId": "s", "events": turn(n)})).await;
    }
    a.ok(None, "session.flush", json!({"sessionId": "s"})).await;
    let want = stored(&net, "s");
    assert_eq!(want.len(), 30, "five turns of six events");
    let mut replica = Replica::default();
    converge(&mut mux, "s", &mut replica, &want).await;
    assert_eq!(replica.baselines, vec![-1], "first tracked at its creation: every event comes live");
    // The projections are folded from the store's events and pushed when they change, after
    // the events that changed them.
    let pushed =
        mux.until(|frame| frame["type"] == "session/projection" && frame["key"] == "sessionListMetadata").await;
    let metadata = pushed.last().unwrap();
    assert_eq!(metadata["value"]["blank"], false, "{metadata}");
    assert!(metadata["seq"].as_u64().unwrap() <= 29, "{metadata}");

    let added = host.until(|frame| frame["type"] == "host/session-added").await;
    assert_eq!(added.last().unwrap()["sessionId"], "s");
    // Turn boundaries are running status changes, as for a session live here: five turns, each
    // one start and one end.
    let mut statuses = Vec::new();
    while statuses.len() < 10 {
        let frame = host.next().await.expect("the host downlink stays open");
        if frame["type"] == "host/session-status" && frame["sessionId"] == "s" {
            statuses.push(frame["running"].as_bool().unwrap());
        }
    }
    assert_eq!(statuses, [true, false].repeat(5));

    // A client that connects later gets the followed session's baseline, then what follows.
    let mut late = b.ws("/api/events.mux", None).await;
    a.ok(None, "session.append", json!({"sessionId": "s", "events": turn(6)})).await;
    a.ok(None, "session.flush", json!({"sessionId": "s"})).await;
    let want = stored(&net, "s");
    let mut late_replica = Replica::default();
    converge(&mut late, "s", &mut late_replica, &want).await;
    assert!(late_replica.baselines[0] >= 29, "{late_replica:?}");
    converge(&mut mux, "s", &mut replica, &want).await;

    // The release elsewhere ends it here.
    a.ok(None, "session.release", json!({"sessionId": "s"})).await;
    let removed = host.until(|frame| frame["type"] == "host/session-removed").await;
    assert_eq!(removed.last().unwrap()["sessionId"], "s");
    a.stop().await;
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_nobody_watched_is_read_for_the_first_client() {
    let net = Arc::new(Net::default());
    let a = Server::start_on_backend(Handle::new(&net, 0), config()).await;
    let b_handle = Handle::new(&net, 1);
    let b = Server::start_on_backend(Arc::clone(&b_handle) as Arc<dyn Backend>, config()).await;
    // A downlink of another owner: nobody on B may see alice's session, so B reads none of it.
    let _elsewhere = b.ws("/api/events.host", Some("someone-else")).await;
    a.ok(Some("alice"), "session.create", json!({"sessionId": "unwatched", "cwd": "/w"})).await;
    for n in 1..=3 {
        a.ok(Some("alice"), "session.append", json!({"sessionId": "unwatched", "events": turn(n)})).await;
        a.ok(Some("alice"), "session.flush", json!({"sessionId": "unwatched"})).await;
    }
    // Two more sweeps of B's (every 100 ms) have seen everything A wrote.
    let swept = b_handle.position_reads.load(Ordering::SeqCst);
    while b_handle.position_reads.load(Ordering::SeqCst) < swept + 2 {
        tokio::task::yield_now().await;
        tokio::time::sleep(Duration::from_millis(10)).await; // polls a counter nothing signals
    }
    assert_eq!(b_handle.scans.load(Ordering::SeqCst), 0, "B read no tail while nobody watched");
    // The first client that may see it gets the baseline B sent last, then the rest.
    let mut mux = b.ws("/api/events.mux", Some("alice")).await;
    let mut replica = Replica::default();
    converge(&mut mux, "unwatched", &mut replica, &stored(&net, "unwatched")).await;
    assert_eq!(replica.baselines.len(), 1, "{replica:?}");
    assert!(b_handle.scans.load(Ordering::SeqCst) > 0, "read once watched");
    a.stop().await;
    b.stop().await;
}

/// A burst of appends elsewhere costs the follower one tail read per round gap, not one per
/// append, and still reaches its client whole and in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_written_elsewhere_is_read_once_per_round_gap() {
    let net = Arc::new(Net::default());
    let a = Server::start_on_backend(Handle::new(&net, 0), config()).await;
    let b_handle = Handle::new(&net, 1);
    let gap = Duration::from_millis(400);
    // No sweeps during the test: every read below is one a signal started.
    let follow = FollowConfig { sweep_interval: Duration::from_secs(600), round_gap: gap, ..FollowConfig::default() };
    let b =
        Server::start_on_backend(Arc::clone(&b_handle) as Arc<dyn Backend>, ProxyConfig { follow, ..config() }).await;
    let mut mux = b.ws("/api/events.mux", None).await;
    a.ok(None, "session.create", json!({"sessionId": "burst", "cwd": "/w"})).await;
    a.ok(None, "session.append", json!({"sessionId": "burst", "events": turn(1), "durable": true})).await;
    let mut replica = Replica::default();
    converge(&mut mux, "burst", &mut replica, &stored(&net, "burst")).await;

    let before = b_handle.scans.load(Ordering::SeqCst);
    let started = std::time::Instant::now();
    let n_appends = 20;
    for n in 2..=n_appends + 1 {
        a.ok(None, "session.append", json!({"sessionId": "burst", "events": turn(n), "durable": true})).await;
    }
    let want = stored(&net, "burst");
    assert_eq!(want.len() as u64, 6 * (n_appends + 1), "every append stored");
    converge(&mut mux, "burst", &mut replica, &want).await;
    let reads = (b_handle.scans.load(Ordering::SeqCst) - before) as u64;
    let rounds = (started.elapsed().as_secs_f64() / gap.as_secs_f64()).floor() as u64 + 1;
    assert!(reads <= rounds && reads < n_appends, "{reads} tail reads for {n_appends} appends in {rounds} gaps");
    assert_eq!(replica.baselines.len(), 1, "no new baseline: the events came as a continuation, {replica:?}");
    a.stop().await;
    b.stop().await;
}

/// A followed tail that fills a client's queue to the brim does not cost the client its
/// downlink when the projection values it changed follow: they wait for room as its events did,
/// so a client that reads, however late, keeps its connection and gets every frame.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tail_that_fills_a_queue_waits_for_room_for_its_projections() {
    let net = Arc::new(Net::default());
    let a = Server::start_on_backend(Handle::new(&net, 0), config()).await;
    // Room for seven frames: the session's baseline and one turn's six events fill it.
    let b = Server::start_on_backend(Handle::new(&net, 1), ProxyConfig { push_queue_frames: 7, ..config() }).await;
    let mut mux = b.ws("/api/events.mux", None).await;
    // The client reads nothing while the turn is followed; the values it changes come after.
    a.ok(None, "session.create", json!({"sessionId": "brim", "cwd": "/w"})).await;
    a.ok(None, "session.append", json!({"sessionId": "brim", "events": turn(1), "durable": true})).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut frames = Vec::new();
    let quiet = loop {
        match tokio::time::timeout(Duration::from_millis(1000), mux.next()).await {
            Ok(Some(frame)) => frames.push(frame),
            Ok(None) => break false,
            Err(_) => break true,
        }
    };
    let kinds: Vec<&str> = frames.iter().map(|frame| frame["type"].as_str().unwrap_or("")).collect();
    assert!(quiet && !kinds.contains(&"stream/error"), "the client kept its downlink: {kinds:?}");
    assert_eq!(kinds[..7], ["session/subscribed"].into_iter().chain(["session/event"; 6]).collect::<Vec<_>>()[..]);
    assert!(kinds[7..].iter().all(|kind| *kind == "session/projection") && kinds.len() > 7, "{kinds:?}");
    a.stop().await;
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_signals_are_made_up_by_the_sweep() {
    let (net, a, b) = pair().await;
    let mut mux = b.ws("/api/events.mux", None).await;
    net.silent.store(true, Ordering::SeqCst);
    a.ok(None, "session.create", json!({"sessionId": "quiet", "cwd": "/w"})).await;
    for n in 1..=3 {
        a.ok(None, "session.append", json!({"sessionId": "quiet", "events": turn(n)})).await;
        a.ok(None, "session.flush", json!({"sessionId": "quiet"})).await;
    }
    let want = stored(&net, "quiet");
    let mut replica = Replica::default();
    converge(&mut mux, "quiet", &mut replica, &want).await;
    // Once signals come back, they carry on from where the sweep left off.
    net.silent.store(false, Ordering::SeqCst);
    a.ok(None, "session.append", json!({"sessionId": "quiet", "events": turn(4)})).await;
    a.ok(None, "session.flush", json!({"sessionId": "quiet"})).await;
    converge(&mut mux, "quiet", &mut replica, &stored(&net, "quiet")).await;
    a.stop().await;
    b.stop().await;
}

/// A wake-up that joins a round which is a sweep (a safety poll, a reconnect, a failed round)
/// is still read in it: here for a session the sweep could not find on its own (created long
/// ago, followed by nobody here, live elsewhere), whose one append's signal came while a round
/// was running.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wake_up_that_joins_a_sweep_is_read_in_it() {
    let net = Arc::new(Net::default());
    let a = Server::start_on_backend(Handle::new(&net, 0), config()).await;
    // B sweeps only when told to (its safety poll is an hour away).
    let b_config = ProxyConfig {
        follow: FollowConfig { sweep_interval: Duration::from_secs(3_600), ..FollowConfig::default() },
        ..ProxyConfig::default()
    };
    let b_handle = Handle::new(&net, 1);
    let b = Server::start_on_backend(b_handle.clone(), b_config).await;
    let mut host = b.ws("/api/events.host", None).await;
    // A session B follows, so that B's sweeps read positions.
    a.ok(None, "session.create", json!({"sessionId": "followed", "cwd": "/w"})).await;
    a.ok(None, "session.append", json!({"sessionId": "followed", "events": turn(1)})).await;
    a.ok(None, "session.flush", json!({"sessionId": "followed"})).await;
    host.until(|frame| frame["type"] == "host/session-added" && frame["sessionId"] == "followed").await;
    // An old session, stored without a signal, and held live by another writer.
    let old = SessionId::from("old");
    let mut header = SessionHeader::new(old.clone(), 1);
    header.cwd = Some("/w".into());
    let events = stored_turn(0);
    net.logs.append_batch(&header, &events, false).unwrap();
    net.leases.lock().insert(old.clone(), 1);
    // A sweep that stops at its position read, and meanwhile the old session's append signal and
    // another sweep: the next round is a sweep that holds the wake-up.
    b_handle.close_gate(true);
    net.signal(0, StoreChange::Sweep);
    b_handle.wait_until_gated().await;
    let next_seq = events.len() as u64;
    net.signal(0, StoreChange::Session { id: old.clone(), kind: ChangeKind::Appended, next_seq: Some(next_seq) });
    net.signal(0, StoreChange::Sweep);
    b_handle.close_gate(false);
    let added = host.until(|frame| frame["type"] == "host/session-added" && frame["sessionId"] == "old").await;
    assert_eq!(added.last().unwrap()["sessionId"], "old");
    a.stop().await;
    b.stop().await;
}

/// Two gateways over one store, A's host downlink, and A holding session `mine` live with one
/// flushed turn: the shared store, A's handle, A, B and the downlink.
async fn a_holding_mine() -> (Arc<Net>, Arc<Handle>, Server, Server, Ws) {
    let net = Arc::new(Net::default());
    let a_handle = Handle::new(&net, 0);
    let a = Server::start_on_backend(a_handle.clone(), config()).await;
    let b = Server::start_on_backend(Handle::new(&net, 1), config()).await;
    let host = a.ws("/api/events.host", None).await;
    a.ok(None, "session.create", json!({"sessionId": "mine", "cwd": "/w"})).await;
    a.ok(None, "session.append", json!({"sessionId": "mine", "events": turn(1)})).await;
    a.ok(None, "session.flush", json!({"sessionId": "mine"})).await;
    (net, a_handle, a, b, host)
}

/// Creates a session `marker` on `a` and answers the frames about `mine` that `host` got before
/// the marker's `host/session-added`: everything the rounds before it did.
async fn frames_of_mine_until_a_marker(a: &Server, host: &mut Ws) -> Vec<Value> {
    a.ok(None, "session.create", json!({"sessionId": "marker", "cwd": "/w"})).await;
    a.ok(None, "session.append", json!({"sessionId": "marker", "events": turn(1)})).await;
    let frames = host.until(|frame| frame["type"] == "host/session-added" && frame["sessionId"] == "marker").await;
    frames.into_iter().filter(|frame| frame["sessionId"] == "mine").collect()
}

/// A session released here while a round reads its position (which still says held: by this
/// gateway's own lease) is not followed as if another writer held it: no `host/session-added`
/// after its `host/session-removed`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_released_during_a_round_is_not_followed_on_its_own_lease() {
    let (_net, a_handle, a, b, mut host) = a_holding_mine().await;
    // A's next sweep reads the position of its live session, held by its own lease, and waits.
    a_handle.close_gate(true);
    a_handle.wait_until_gated().await;
    a.ok(None, "session.release", json!({"sessionId": "mine"})).await;
    a_handle.close_gate(false);
    // Two more sweeps of A's (every 100 ms), then a session as a marker: the frames up to its
    // `host/session-added` hold everything the held round did.
    let reads = a_handle.position_reads.load(Ordering::SeqCst);
    eventually("two sweeps", || a_handle.position_reads.load(Ordering::SeqCst) >= reads + 2).await;
    let frames = frames_of_mine_until_a_marker(&a, &mut host).await;
    let mine: Vec<&Value> = frames.iter().collect();
    let removed = mine.iter().position(|frame| frame["type"] == "host/session-removed").expect("the release");
    assert!(
        mine[removed..].iter().all(|frame| frame["type"] != "host/session-added"),
        "followed on its own lease after its release: {mine:?}"
    );
    a.stop().await;
    b.stop().await;
}

/// A session let go of here is not followed on its own lease in the moment that lease outlives
/// it: a round that finds it after the hub dropped it (`host/session-removed`) and before its
/// lease ended reads it as held by this gateway alone, not by another writer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_whose_lease_outlives_its_release_is_not_followed_on_it() {
    let (net, a_handle, a, b, mut host) = a_holding_mine().await;
    let mine = SessionId::from("mine");
    let next_seq = net.next_seq(&mine).expect("stored");

    a_handle.hold_lease_ends(true);
    let release = a.ok(None, "session.release", json!({"sessionId": "mine"}));
    let window = async {
        host.until(|frame| frame["type"] == "host/session-removed" && frame["sessionId"] == "mine").await;
        eventually("a lease end held", || a_handle.ends_waited.load(Ordering::SeqCst) > 0).await;
        // The hub has dropped it, its lease is held: a wake-up about it (as a late notification
        // would be) and two sweeps read its position in this window.
        // (A round that did follow it would wait for the id's lock, which the release holds:
        // the wait is bounded, and the frames below tell.)
        let reads = a_handle.position_reads.load(Ordering::SeqCst);
        net.signal(1, StoreChange::Session { id: mine.clone(), kind: ChangeKind::Appended, next_seq: Some(next_seq) });
        let rounds = async {
            while a_handle.position_reads.load(Ordering::SeqCst) < reads + 3 {
                tokio::time::sleep(Duration::from_millis(10)).await; // polls a counter nothing signals
            }
        };
        let _ = tokio::time::timeout(Duration::from_secs(5), rounds).await;
        a_handle.hold_lease_ends(false);
    };
    tokio::join!(release, window);
    let followed = frames_of_mine_until_a_marker(&a, &mut host).await;
    assert!(followed.is_empty(), "followed on its own lease after its release: {followed:?}");
    a.stop().await;
    b.stop().await;
}

/// A followed session whose log is damaged past what its clients got is let go of once its
/// writer lets go of it: no read gets past the damage, so waiting for one would keep it "live"
/// for good.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_followed_session_damaged_past_what_was_sent_is_let_go_of_once_released() {
    let net = Arc::new(Net::default());
    let a_handle = Handle::new(&net, 0);
    let a = Server::start_on_backend(a_handle.clone(), config()).await;
    let b = Server::start_on_backend(Handle::new(&net, 1), config()).await;
    let mut mux = a.ws("/api/events.mux", None).await;
    let mut host = a.ws("/api/events.host", None).await;
    b.ok(None, "session.create", json!({"sessionId": "damaged", "cwd": "/w"})).await;
    b.ok(None, "session.append", json!({"sessionId": "damaged", "events": turn(1)})).await;
    b.ok(None, "session.flush", json!({"sessionId": "damaged"})).await;
    let mut replica = Replica::default();
    converge(&mut mux, "damaged", &mut replica, &stored(&net, "damaged")).await;
    // What B writes next does not read through A (as if damaged on the way); then B lets go.
    a_handle.damaged.lock().insert(SessionId::from("damaged"));
    b.ok(None, "session.append", json!({"sessionId": "damaged", "events": turn(2)})).await;
    b.ok(None, "session.release", json!({"sessionId": "damaged"})).await;
    assert!(removed_within(&mut host, "damaged").await, "let go of once released, though its tail does not read");
    a.stop().await;
    b.stop().await;
}

/// One followed session whose reads keep failing costs its own reads: the rounds that other
/// sessions' wake-ups start stay wake-ups (their tails read, no positions), not sweeps.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_whose_reads_keep_failing_does_not_make_every_round_a_sweep() {
    let net = Arc::new(Net::default());
    let a_handle = Handle::new(&net, 0);
    // Safety sweeps far apart: every sweep in this test is one a failure asked for.
    let a = Server::start_on_backend(a_handle.clone(), woken_only()).await;
    let b = Server::start_on_backend(Handle::new(&net, 1), config()).await;
    let mut mux = a.ws("/api/events.mux", None).await;
    a_handle.broken.lock().insert(SessionId::from("bad"));
    for id in ["bad", "good"] {
        b.ok(None, "session.create", json!({"sessionId": id, "cwd": "/w"})).await;
        b.ok(None, "session.append", json!({"sessionId": id, "events": turn(1)})).await;
        b.ok(None, "session.flush", json!({"sessionId": id})).await;
    }
    let mut replica = Replica::default();
    converge(&mut mux, "good", &mut replica, &stored(&net, "good")).await;
    b.ok(None, "session.append", json!({"sessionId": "bad", "events": turn(2)})).await;
    b.ok(None, "session.flush", json!({"sessionId": "bad"})).await;
    eventually("two failed reads", || a_handle.broken_reads.load(Ordering::SeqCst) >= 2).await;
    let reads = a_handle.position_reads.load(Ordering::SeqCst);
    for n in 2..=6 {
        b.ok(None, "session.append", json!({"sessionId": "good", "events": turn(n)})).await;
        b.ok(None, "session.flush", json!({"sessionId": "good"})).await;
        converge(&mut mux, "good", &mut replica, &stored(&net, "good")).await;
    }
    let swept = a_handle.position_reads.load(Ordering::SeqCst) - reads;
    assert!(swept <= 1, "five rounds of another session's appends read positions {swept} times");
    a.stop().await;
    b.stop().await;
}

/// `turn(1)`'s events stored at seqs from `seq0`, as another writer would have written them.
fn stored_turn(seq0: usize) -> Vec<Arc<SessionEvent>> {
    stored_turn_at(seq0, 1)
}

/// [`stored_turn`] with every event at `time` (its prompt's time, for `lastPromptAt`).
fn stored_turn_at(seq0: usize, time: i64) -> Vec<Arc<SessionEvent>> {
    turn(1)
        .into_iter()
        .enumerate()
        .map(|(offset, mut event)| {
            event["seq"] = json!(seq0 + offset);
            event["time"] = json!(time);
            Arc::new(serde_json::from_value(event).unwrap())
        })
        .collect()
}

/// Stores `events` as the start of session `id`, created at time 1 (outside the sweeps' window
/// of new sessions) and held by a writer of no gateway here, without a signal; its header.
fn stored_elsewhere(net: &Net, id: &SessionId, events: &[Arc<SessionEvent>]) -> SessionHeader {
    let mut header = SessionHeader::new(id.clone(), 1);
    header.cwd = Some("/w".into());
    net.logs.append_batch(&header, events, false).unwrap();
    net.leases.lock().insert(id.clone(), 1);
    header
}

/// A session first followed in the middle of a turn (written elsewhere, its start before the
/// baseline) shows as running at once, and as idle when the turn ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_first_followed_inside_a_turn_shows_as_running() {
    let (net, a, b) = pair().await;
    let mut host = b.ws("/api/events.host", None).await;
    let _watcher = b.ws("/api/events.mux", None).await;
    // An old session (outside the sweeps' window of new sessions), inside its first turn, held
    // by another writer, stored without a signal.
    let id = SessionId::from("midturn");
    let events = stored_turn(0);
    let (started, rest) = events.split_at(3);
    let header = stored_elsewhere(&net, &id, started);
    net.signal(0, StoreChange::Session { id: id.clone(), kind: ChangeKind::Appended, next_seq: Some(3) });
    let frames = host.until(|frame| frame["sessionId"] == "midturn" && frame["type"] == "host/session-status").await;
    assert_eq!(frames.last().unwrap()["running"], true, "{frames:?}");
    // The turn ends elsewhere.
    net.logs.append_batch(&header, rest, true).unwrap();
    net.signal(0, StoreChange::Session { id: id.clone(), kind: ChangeKind::Appended, next_seq: Some(6) });
    let frames = host.until(|frame| frame["sessionId"] == "midturn" && frame["type"] == "host/session-status").await;
    assert_eq!(frames.last().unwrap()["running"], false, "{frames:?}");
    a.stop().await;
    b.stop().await;
}

/// A session first followed past its start has its projections seeded from the stored prefix,
/// folded as it is read: the values the prefix set are the baseline's (no frame), and the first
/// `session/projection` is what the tail changed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_followed_past_its_start_projects_from_its_stored_prefix() {
    let (net, a, b) = pair().await;
    let mut mux = b.ws("/api/events.mux", None).await;
    // An old session with one whole turn (its prompt at time 1), held by another writer, stored
    // without a signal; then a wake-up, as a late notification.
    let id = SessionId::from("seeded");
    let header = stored_elsewhere(&net, &id, &stored_turn(0));
    net.signal(0, StoreChange::Session { id: id.clone(), kind: ChangeKind::Appended, next_seq: Some(6) });
    let subscribed = mux.until(|frame| frame["sessionId"] == "seeded" && frame["type"] == "session/subscribed").await;
    assert_eq!(subscribed.last().unwrap()["lastSeq"], 5, "followed from its current position");
    // The second turn's prompt, at time 2, is written elsewhere.
    net.logs.append_batch(&header, &stored_turn_at(6, 2), true).unwrap();
    net.signal(0, StoreChange::Session { id: id.clone(), kind: ChangeKind::Appended, next_seq: Some(12) });
    let frames = mux.until(|frame| frame["sessionId"] == "seeded" && frame["type"] == "session/projection").await;
    let projected = frames.last().unwrap();
    assert_eq!(projected["key"], "sessionListMetadata", "{projected}");
    assert_eq!(projected["value"], json!({"blank": false, "lastPromptAt": 2}), "{projected}");
    assert_eq!(projected["seq"], 11, "{projected}");
    a.stop().await;
    b.stop().await;
}

/// A session whose lease the store cannot tell about (a failed probe, or this gateway's own
/// lease in the way) is neither followed nor forgotten: it is carried from round to round, and
/// followed once another writer is seen to hold it, with no further signal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_whose_holder_is_unknown_is_read_again_until_it_is_known() {
    let (net, a, b_handle, b) = pair_with_b_handle().await;
    let mut host = b.ws("/api/events.host", None).await;
    // An old session (outside the sweeps' window of new sessions), held by another writer,
    // stored without a signal; B cannot probe its lease, then one wake-up comes.
    let id = SessionId::from("unprobed");
    stored_elsewhere(&net, &id, &stored_turn(0));
    b_handle.unknown.lock().insert(id.clone());
    let reads = b_handle.position_reads.load(Ordering::SeqCst);
    net.signal(0, StoreChange::Session { id: id.clone(), kind: ChangeKind::Appended, next_seq: Some(6) });
    // Read with its holder unknown (the wake-up's round, then a sweep): not followed.
    eventually("two position reads", || b_handle.position_reads.load(Ordering::SeqCst) >= reads + 2).await;
    b_handle.unknown.lock().clear();
    let added = tokio::time::timeout(
        Duration::from_secs(10),
        host.until(|frame| frame["type"] == "host/session-added" && frame["sessionId"] == "unprobed"),
    )
    .await;
    let frames = added.expect("followed once its holder is known, without another signal");
    let early = frames.iter().filter(|frame| frame["sessionId"] == "unprobed").count();
    assert_eq!(early, 1, "nothing about it before it was known: {frames:?}");
    a.stop().await;
    b.stop().await;
}

/// A fenced copy's clients get the stored log's projection values again after the new baseline:
/// the prompt the copy never stored no longer shows as the session's last.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fenced_copy_sends_the_stored_logs_projection_values_again() {
    let net = Arc::new(Net::default());
    // A sweeps only when woken: its copy is fenced by its own write, not by a round before it.
    let clock = Arc::new(ManualClock::new(1_700_000_000_000));
    let a = Server::start_on_backend_with_clock(Handle::new(&net, 0), woken_only(), clock.clone()).await;
    let b = Server::start_on_backend(Handle::new(&net, 1), config()).await;
    let mut mux = a.ws("/api/events.mux", None).await;
    let prompted = |frame: &Value| {
        frame["type"] == "session/projection"
            && frame["sessionId"] == "prompted"
            && frame["key"] == "sessionListMetadata"
            && !frame["value"]["lastPromptAt"].is_null()
    };
    a.ok(None, "session.create", json!({"sessionId": "prompted", "cwd": "/w"})).await;
    a.ok(None, "session.append", json!({"sessionId": "prompted", "events": turn(1)})).await;
    a.ok(None, "session.flush", json!({"sessionId": "prompted"})).await;
    let stored_prompt = mux.until(prompted).await.last().unwrap()["value"]["lastPromptAt"].clone();
    // B takes it over without a signal; A's copy then takes a later prompt, which B's log does
    // not have, and its write meets the fence.
    net.silent.store(true, Ordering::SeqCst);
    b.ok(None, "session.create", json!({"sessionId": "prompted", "cwd": "/w"})).await;
    b.ok(None, "session.flush", json!({"sessionId": "prompted"})).await;
    let id = SessionId::from("prompted");
    let stored = net.next_seq(&id).unwrap();
    clock.advance(1_000);
    a.ok(None, "session.append", json!({"sessionId": "prompted", "events": turn(2)})).await;
    let copy_prompt = mux.until(prompted).await.last().unwrap()["value"]["lastPromptAt"].clone();
    assert_ne!(copy_prompt, stored_prompt);
    let fenced = a.call_as(None, "session.flush", json!({"sessionId": "prompted"})).await;
    assert_eq!(fenced["error"]["code"], "agent-busy", "{fenced}");
    // A's follower wakes and hands the fenced copy over to the store's log.
    net.silent.store(false, Ordering::SeqCst);
    net.signal(1, StoreChange::Session { id, kind: ChangeKind::Appended, next_seq: Some(stored) });
    let rebaselined = |frame: &Value| frame["type"] == "session/subscribed" && frame["sessionId"] == "prompted";
    mux.until(rebaselined).await;
    let again = tokio::time::timeout(Duration::from_secs(10), mux.until(prompted)).await;
    let frames = again.expect("the stored log's values come again after the new baseline");
    assert_eq!(frames.last().unwrap()["value"]["lastPromptAt"], stored_prompt, "{frames:?}");
    a.stop().await;
    b.stop().await;
}

/// A session another writer holds, idle since long before a gateway started (outside the
/// sweeps' window of new sessions, with no signal to come), is followed from the gateway's first
/// sweep: its clients see it live, and see it go when its writer lets go of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_session_held_elsewhere_before_a_gateway_starts_is_followed_from_its_first_sweep() {
    let net = Arc::new(Net::default());
    let id = SessionId::from("idle-held");
    stored_elsewhere(&net, &id, &stored_turn(0));
    let b = Server::start_on_backend(Handle::new(&net, 1), config()).await;
    let mut mux = b.ws("/api/events.mux", None).await;
    let subscribed = |frame: &Value| frame["type"] == "session/subscribed" && frame["sessionId"] == "idle-held";
    let live = tokio::time::timeout(Duration::from_secs(10), mux.until(subscribed)).await;
    let frames = live.expect("the idle session held elsewhere is followed without a signal");
    assert_eq!(frames.last().unwrap()["lastSeq"], 5, "followed from where it stands: {frames:?}");
    // Its writer lets go of it, with no signal: the next sweep lets go of it here too.
    let mut host = b.ws("/api/events.host", None).await;
    net.leases.lock().remove(&id);
    assert!(removed_within(&mut host, "idle-held").await, "let go of once no writer holds it");
    b.stop().await;
}

/// Only the signal's (re)connect makes a sweep read every stored session: a client that
/// connects wakes a plain sweep.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_connects_wakes_a_sweep_not_a_rescan() {
    let (_net, _a, b_handle, b) = pair_with_b_handle().await;
    eventually("the first sweep's rescan", || b_handle.rescans.load(Ordering::SeqCst) == 1).await;
    let mut clients = Vec::new();
    for _ in 0..3 {
        let sweeps = b_handle.sweeps.load(Ordering::SeqCst);
        clients.push(b.ws("/api/events.mux", None).await);
        eventually("the sweep the client woke", || b_handle.sweeps.load(Ordering::SeqCst) > sweeps).await;
    }
    assert_eq!(b_handle.rescans.load(Ordering::SeqCst), 1, "one rescan, at the signal's connect");
    b.stop().await;
}

/// A tail written elsewhere far past what B followed is read a bounded piece at a time, each
/// delivered before the next is read: no read holds the whole tail, and the client gets every
/// event once, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_tail_is_read_a_bounded_piece_at_a_time() {
    let (net, a, b_handle, b) = pair_with_b_handle().await;
    let mut mux = b.ws("/api/events.mux", None).await;
    let id = SessionId::from("long-tail");
    let header = stored_elsewhere(&net, &id, &stored_turn(0));
    net.signal(0, StoreChange::Session { id: id.clone(), kind: ChangeKind::Appended, next_seq: Some(6) });
    let mut replica = Replica::default();
    converge(&mut mux, "long-tail", &mut replica, &stored(&net, "long-tail")).await;
    // 1,500 turns (9,000 events) written elsewhere in one batch, then one wake-up.
    let tail: Vec<_> = (1..=1_500).flat_map(|turn| stored_turn_at(turn * 6, 1)).collect();
    net.logs.append_batch(&header, &tail, true).unwrap();
    b_handle.most_per_read.store(0, Ordering::SeqCst);
    net.signal(0, StoreChange::Session { id: id.clone(), kind: ChangeKind::Appended, next_seq: Some(9_006) });
    let want = stored(&net, "long-tail");
    assert_eq!(want.len(), 9_006);
    converge(&mut mux, "long-tail", &mut replica, &want).await;
    assert_eq!(replica.baselines, vec![5], "one baseline, then every event as a continuation: {replica:?}");
    let most = b_handle.most_per_read.load(Ordering::SeqCst);
    assert!(most <= 4_096, "one read handed on {most} events of the 9,000-event tail");
    a.stop().await;
    b.stop().await;
}

/// Waits (up to 20 s, then fails) until `done` holds; for counters nothing signals.
async fn eventually(what: &str, done: impl Fn() -> bool) {
    for _ in 0..2_000 {
        if done() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await; // polls a counter nothing signals
    }
    panic!("timed out waiting for {what}");
}

/// A followed session whose fold could not be seeded after the hub sent a tail (its whole log
/// did not read, once) still gets that tail's projection changes: the next seed owes them, and
/// its baseline is empty, so every value goes out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn projection_changes_of_a_tail_whose_fold_did_not_seed_are_sent_later() {
    let (net, a, b_handle, b) = pair_with_b_handle().await;
    let mut mux = b.ws("/api/events.mux", None).await;
    let id = SessionId::from("owed");
    let header = stored_elsewhere(&net, &id, &stored_turn(0));
    net.signal(0, StoreChange::Session { id: id.clone(), kind: ChangeKind::Appended, next_seq: Some(6) });
    mux.until(|frame| frame["sessionId"] == "owed" && frame["type"] == "session/subscribed").await;
    // A turn prompted at time 2 comes; its fold's seed fails once, after its events went out.
    b_handle.fail_next_whole_read.lock().insert(id.clone());
    net.logs.append_batch(&header, &stored_turn_at(6, 2), true).unwrap();
    net.signal(0, StoreChange::Session { id: id.clone(), kind: ChangeKind::Appended, next_seq: Some(12) });
    let events = mux.until(|frame| frame["sessionId"] == "owed" && frame["event"]["seq"] == 11).await;
    let early: Vec<&Value> = events.iter().filter(|frame| frame["type"] == "session/projection").collect();
    assert!(early.is_empty(), "no values before a fold: {early:?}");
    // The next turn, prompted at time 2 too, changes nothing by itself.
    net.logs.append_batch(&header, &stored_turn_at(12, 2), true).unwrap();
    net.signal(0, StoreChange::Session { id: id.clone(), kind: ChangeKind::Appended, next_seq: Some(18) });
    let wanted = json!({"blank": false, "lastPromptAt": 2});
    let projected = mux.until(|frame| {
        frame["sessionId"] == "owed" && frame["type"] == "session/projection" && frame["value"] == wanted
    });
    assert!(tokio::time::timeout(Duration::from_secs(10), projected).await.is_ok(), "the owed values never came");
    a.stop().await;
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_owners_session_written_elsewhere_stays_unseen() {
    let (net, a, b) = pair().await;
    let mut theirs = b.ws("/api/events.mux", Some("bob")).await;
    let mut mine = b.ws("/api/events.mux", Some("alice")).await;
    a.ok(Some("alice"), "session.create", json!({"sessionId": "private", "cwd": "/w"})).await;
    a.ok(Some("alice"), "session.append", json!({"sessionId": "private", "events": turn(1)})).await;
    a.ok(Some("alice"), "session.flush", json!({"sessionId": "private"})).await;
    let mut replica = Replica::default();
    converge(&mut mine, "private", &mut replica, &stored(&net, "private")).await;
    // Bob's session, created after Alice's, is the first thing Bob's downlink shows.
    a.ok(Some("bob"), "session.create", json!({"sessionId": "bobs", "cwd": "/w"})).await;
    a.ok(Some("bob"), "session.append", json!({"sessionId": "bobs", "events": turn(1)})).await;
    let first = theirs.next().await.unwrap();
    assert_eq!(first["sessionId"], "bobs", "bob never sees alice's session: {first}");
    a.stop().await;
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fenced_copy_rebaselines_its_clients_and_follows_the_new_writer() {
    let (net, a, b) = pair().await;
    a.ok(None, "session.create", json!({"sessionId": "moved", "cwd": "/w"})).await;
    a.ok(None, "session.append", json!({"sessionId": "moved", "events": turn(1)})).await;
    a.ok(None, "session.flush", json!({"sessionId": "moved"})).await;
    let mut watcher = a.ws("/api/events.mux", None).await;
    let mut replica = Replica::default();
    converge(&mut watcher, "moved", &mut replica, &stored(&net, "moved")).await;
    let durable = stored(&net, "moved").len() as i64;

    // B takes the session over (a resume writes its seed boundary) and writes on.
    take_over(&b, "moved").await;
    let want = stored(&net, "moved");
    assert!(want.len() as i64 > durable, "B wrote on");
    converge(&mut watcher, "moved", &mut replica, &want).await;
    // Its subscriber's baseline at connect, then the fence's: what A stored, nothing past it.
    assert_eq!(replica.baselines, vec![durable - 1, durable - 1], "{replica:?}");
    a.stop().await;
    b.stop().await;
}

/// Three gateways over one shared store, and a host downlink of the third.
async fn three() -> (Arc<Net>, Server, Server, Server, Ws) {
    let net = Arc::new(Net::default());
    let a = Server::start_on_backend(Handle::new(&net, 0), config()).await;
    let b = Server::start_on_backend(Handle::new(&net, 1), config()).await;
    let c = Server::start_on_backend(Handle::new(&net, 2), config()).await;
    let c_host = c.ws("/api/events.host", None).await;
    (net, a, b, c, c_host)
}

/// `gateway` takes session `id` over (a resume) and writes a turn on.
async fn take_over(gateway: &Server, id: &str) {
    gateway.ok(None, "session.create", json!({"sessionId": id, "cwd": "/w"})).await;
    gateway.ok(None, "session.append", json!({"sessionId": id, "events": turn(2)})).await;
    gateway.ok(None, "session.flush", json!({"sessionId": id})).await;
}

/// Whether `host` shows session `id` let go of (`host/session-removed`) within 10 s.
async fn removed_within(host: &mut Ws, id: &str) -> bool {
    let removed = host.until(|frame| frame["type"] == "host/session-removed" && frame["sessionId"] == id);
    tokio::time::timeout(Duration::from_secs(10), removed).await.is_ok()
}

/// A copy the fence stopped lets go of its writer lease (it can never be written again): a third
/// gateway sees the session let go of when the writer that took it over releases it, while the
/// copy is still open. When the session is taken again, the copy's gateway follows it anew and
/// projects it from the stored log, not from the copy it still holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fenced_copy_holds_no_lease_and_is_not_what_a_new_follow_projects() {
    let (net, a, b, c, mut c_host) = three().await;
    let mut a_mux = a.ws("/api/events.mux", None).await;
    let mut a_host = a.ws("/api/events.host", None).await;
    a.ok(None, "session.create", json!({"sessionId": "moved", "cwd": "/w"})).await;
    a.ok(None, "session.append", json!({"sessionId": "moved", "events": turn(1)})).await;
    a.ok(None, "session.flush", json!({"sessionId": "moved"})).await;
    c_host.until(|frame| frame["type"] == "host/session-added" && frame["sessionId"] == "moved").await;

    // B takes it over and writes; A's copy writes on (less than B did) and meets the fence.
    b.ok(None, "session.create", json!({"sessionId": "moved", "cwd": "/w"})).await;
    b.ok(None, "session.append", json!({"sessionId": "moved", "events": turn(2)})).await;
    b.ok(None, "session.flush", json!({"sessionId": "moved"})).await;
    let started = json!([{"type": "turn/start", "data": {"turn": 3}}]);
    a.call_as(None, "session.append", json!({"sessionId": "moved", "events": started})).await;
    a.call_as(None, "session.flush", json!({"sessionId": "moved"})).await;
    let moved = SessionId::from("moved");
    eventually("the fenced copy's lease ended", || net.leases.lock().get(&moved) == Some(&1)).await;

    // B lets go: nobody holds it, though A's copy is still open.
    b.ok(None, "session.release", json!({"sessionId": "moved"})).await;
    assert!(removed_within(&mut c_host, "moved").await, "a third gateway still sees the fenced copy's lease");
    // A lets go of following it too (its copy, still open, holds nothing).
    a_host.until(|frame| frame["type"] == "host/session-removed" && frame["sessionId"] == "moved").await;

    // Another writer takes it again: A follows it anew, then a turn (prompted at time 1) comes.
    // Its values are folded from the stored log, not from the copy A still holds (shorter than
    // the store: a fold seeded from it would never meet the tail).
    let header = Backend::header(&net.logs, &moved, &CancellationToken::new()).unwrap().unwrap().header;
    let at = net.next_seq(&moved).unwrap();
    net.leases.lock().insert(moved.clone(), 1);
    net.signal(1, StoreChange::Session { id: moved.clone(), kind: ChangeKind::Appended, next_seq: Some(at) });
    a_host.until(|frame| frame["type"] == "host/session-added" && frame["sessionId"] == "moved").await;
    net.logs.append_batch(&header, &stored_turn(at as usize), true).unwrap();
    net.signal(1, StoreChange::Session { id: moved.clone(), kind: ChangeKind::Appended, next_seq: Some(at + 6) });
    let wanted = json!({"blank": false, "lastPromptAt": 1});
    let projected = tokio::time::timeout(
        Duration::from_secs(10),
        a_mux.until(|frame| {
            frame["sessionId"] == "moved" && frame["type"] == "session/projection" && frame["value"] == wanted
        }),
    )
    .await;
    assert!(projected.is_ok(), "the new follow projected the copy, not the stored log");
    a.stop().await;
    b.stop().await;
    c.stop().await;
}

/// A copy its gateway's follower finds overtaken (another gateway took the session over and wrote
/// more than the copy holds) is fenced there and then, though it writes nothing more: it lets go
/// of its lease, so a third gateway sees the session let go of when the new writer releases it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_copy_another_gateway_took_over_holds_no_lease() {
    let (net, a, b, c, mut c_host) = three().await;
    a.ok(None, "session.create", json!({"sessionId": "idle", "cwd": "/w"})).await;
    a.ok(None, "session.append", json!({"sessionId": "idle", "events": turn(1)})).await;
    a.ok(None, "session.flush", json!({"sessionId": "idle"})).await;
    c_host.until(|frame| frame["type"] == "host/session-added" && frame["sessionId"] == "idle").await;

    // B takes it over and writes on; A's copy stays open and idle.
    take_over(&b, "idle").await;
    let idle = SessionId::from("idle");
    eventually("the idle copy's lease ended", || net.leases.lock().get(&idle) == Some(&1)).await;
    b.ok(None, "session.release", json!({"sessionId": "idle"})).await;
    assert!(removed_within(&mut c_host, "idle").await, "a third gateway still sees the idle copy's lease");
    // Everything the idle copy held is stored: its release loses nothing.
    let released = a.ok(None, "session.release", json!({"sessionId": "idle"})).await;
    assert_eq!(released["lastSeq"], 5, "{released}");
    a.stop().await;
    b.stop().await;
    c.stop().await;
}

/// A fenced copy that had started a turn it never stored shows the log's turn state: its host
/// clients hear the turn is not running (the stored log has no open turn), not the copy's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fenced_copy_shows_the_stored_turn_state_not_its_own() {
    let net = Arc::new(Net::default());
    // A sweeps only when woken: its copy is fenced by its own write, not by a round before it.
    let a = Server::start_on_backend(Handle::new(&net, 0), woken_only()).await;
    let b = Server::start_on_backend(Handle::new(&net, 1), config()).await;
    let mut a_host = a.ws("/api/events.host", None).await;
    let status = |running: bool| {
        move |frame: &Value| {
            frame["type"] == "host/session-status" && frame["sessionId"] == "busy" && frame["running"] == running
        }
    };
    a.ok(None, "session.create", json!({"sessionId": "busy", "cwd": "/w"})).await;
    a.ok(None, "session.append", json!({"sessionId": "busy", "events": turn(1)})).await;
    a.ok(None, "session.flush", json!({"sessionId": "busy"})).await;
    a_host.until(status(false)).await;
    // B takes it over and stores what a resume stores, no turn, without a signal; A's copy then
    // starts a turn, whose write meets the fence.
    net.silent.store(true, Ordering::SeqCst);
    b.ok(None, "session.create", json!({"sessionId": "busy", "cwd": "/w"})).await;
    b.ok(None, "session.flush", json!({"sessionId": "busy"})).await;
    let id = SessionId::from("busy");
    let stored = net.next_seq(&id).unwrap();
    assert!(stored > 6, "B's resume stored an event: {stored}");
    let started = json!([{"type": "turn/start", "data": {"turn": 2}}]);
    a.ok(None, "session.append", json!({"sessionId": "busy", "events": started})).await;
    a_host.until(status(true)).await;
    let fenced = a.call_as(None, "session.flush", json!({"sessionId": "busy"})).await;
    assert_eq!(fenced["error"]["code"], "agent-busy", "{fenced}");
    // A's follower wakes and hands the fenced copy over to the store's log.
    net.silent.store(false, Ordering::SeqCst);
    net.signal(1, StoreChange::Session { id, kind: ChangeKind::Appended, next_seq: Some(stored) });
    let idle = tokio::time::timeout(Duration::from_secs(10), a_host.until(status(false))).await;
    assert!(idle.is_ok(), "the fenced copy still shows the turn it never stored");
    a.stop().await;
    b.stop().await;
}

/// A session resumed here and never written since, which another gateway then takes over,
/// is handed to the store like any fenced copy: its clients get the new baseline and the new
/// writer's events.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resumed_copy_never_written_follows_the_writer_that_took_it_over() {
    let (net, a, b) = pair().await;
    a.ok(None, "session.create", json!({"sessionId": "resumed", "cwd": "/w"})).await;
    a.ok(None, "session.append", json!({"sessionId": "resumed", "events": turn(1)})).await;
    a.ok(None, "session.release", json!({"sessionId": "resumed"})).await;
    // Resumed on A, nothing appended: A's copy never writes.
    a.ok(None, "session.create", json!({"sessionId": "resumed", "cwd": "/w"})).await;
    let mut watcher = a.ws("/api/events.mux", None).await;
    take_over(&b, "resumed").await;
    let want = stored(&net, "resumed");
    let mut replica = Replica::default();
    let converged =
        tokio::time::timeout(Duration::from_secs(10), converge(&mut watcher, "resumed", &mut replica, &want));
    assert!(converged.await.is_ok(), "A's client never saw B's writes: {replica:?}");
    a.stop().await;
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_that_follows_by_sweeps_alone_still_sees_everything() {
    let mut sweep_only = config();
    sweep_only.follow.signal = false;
    let (net, a, b) = pair_with(sweep_only).await;
    assert!(net.watchers.lock().iter().all(|(_, gateway, _)| *gateway != 1), "B does not listen");
    let mut mux = b.ws("/api/events.mux", None).await;
    a.ok(None, "session.create", json!({"sessionId": "polled", "cwd": "/w"})).await;
    for n in 1..=2 {
        a.ok(None, "session.append", json!({"sessionId": "polled", "events": turn(n)})).await;
        a.ok(None, "session.flush", json!({"sessionId": "polled"})).await;
    }
    let mut replica = Replica::default();
    converge(&mut mux, "polled", &mut replica, &stored(&net, "polled")).await;
    let described = b.ok(None, "host.describe", json!({})).await;
    assert_eq!(described["followsStore"], true, "{described}");
    a.stop().await;
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_released_here_and_taken_elsewhere_stays_live_here() {
    let (net, a, b) = pair().await;
    a.ok(None, "session.create", json!({"sessionId": "handed", "cwd": "/w"})).await;
    a.ok(None, "session.append", json!({"sessionId": "handed", "events": turn(1)})).await;
    a.ok(None, "session.release", json!({"sessionId": "handed"})).await;
    let mut watcher = a.ws("/api/events.mux", None).await;
    let mut host = a.ws("/api/events.host", None).await;

    b.ok(None, "session.create", json!({"sessionId": "handed", "cwd": "/w"})).await;
    b.ok(None, "session.append", json!({"sessionId": "handed", "events": turn(2)})).await;
    b.ok(None, "session.flush", json!({"sessionId": "handed"})).await;
    let want = stored(&net, "handed");
    let mut replica = Replica::default();
    converge(&mut watcher, "handed", &mut replica, &want).await;
    // Followed from where the store stood when A's follower first saw it taken (seq 5 or later),
    // or, when a sweep found it first among the sessions created in its window (it was created
    // moments ago), from its first event: either way the client holds the stored log once.
    let first = replica.baselines[0];
    assert!(first == -1 || first >= 5, "a baseline at the creation or after A's turn: {replica:?}");
    let added = host.until(|frame| frame["type"] == "host/session-added").await;
    assert_eq!(added.last().unwrap()["sessionId"], "handed");
    a.stop().await;
    b.stop().await;
}

/// Two gateway processes over one store: a client of B follows a session A (started by
/// `start_a`) writes, 10,000 events in batches, while `disturb` runs between batches (it may cut
/// B's change signal, or A's notifications); then A is flushed and B's client must converge on the
/// stored log, baselines applied, with no gap and no duplicate. Returns the stored log.
async fn follow_between_processes(
    store: &str,
    start_a: impl FnOnce() -> Gateway,
    disturb: impl Fn(usize) + Send + 'static,
    stored_log: impl Fn() -> Vec<(u64, String)>,
) -> Vec<(u64, String)> {
    const TURNS_PER_BATCH: u64 = 10;
    const BATCHES: u64 = 167; // 167 × 10 turns × 6 events = 10,020 events
    let (a, b) = (start_a(), Gateway::start(store));
    let described = b.ok("host.describe", json!({}));
    assert_eq!(described["followsStore"], true, "{described}");
    let mut mux = Ws::connect(b.addr(), "/api/events.mux", None).await;
    let writer = tokio::task::spawn_blocking(move || {
        a.ok("session.create", json!({"sessionId": "far", "cwd": "/w"}));
        for batch in 0..BATCHES {
            let events: Vec<Value> = (1..=TURNS_PER_BATCH).flat_map(|n| turn(batch * TURNS_PER_BATCH + n)).collect();
            a.ok("session.append", json!({"sessionId": "far", "events": events}));
            disturb(batch as usize);
        }
        a.ok("session.flush", json!({"sessionId": "far"}));
        a
    });
    let mut replica = Replica::default();
    // Read while A writes, so B's queue never overflows; converge on what is stored once A is done.
    let mut seen = 0usize;
    while !writer.is_finished() {
        if let Ok(Some(frame)) = tokio::time::timeout(Duration::from_millis(200), mux.next()).await {
            replica.apply("far", &frame);
            seen += 1;
        }
    }
    let a = writer.await.unwrap();
    let want = stored_log();
    assert_eq!(want.len() as u64, BATCHES * TURNS_PER_BATCH * 6);
    converge(&mut mux, "far", &mut replica, &want).await;
    assert!(seen > 0, "frames came while A wrote");
    assert_eq!(replica.baselines.first(), Some(&-1), "B saw the creation: {:?}", replica.baselines);
    assert_eq!(replica.events, want, "every event once, in order, after the baselines");
    drop(a);
    drop(b);
    want
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_gateway_processes_over_postgres_follow_through_listener_kills_and_lost_notifications() {
    use session_persistence_postgres::testing::ScratchSchema;
    let Some(schema) = ScratchSchema::new() else { return };
    let schema = Arc::new(schema);
    // The gateways' connections carry a name of this test's own, so the listeners it cuts are
    // its gateways' only (the listening connection is `<application_name>-listener`).
    let name = format!("follow-test-{}", schema.name());
    let store = format!("{}&application_name={name}", schema.url());
    let killer = Arc::clone(&schema);
    let reader = Arc::clone(&schema);
    let kills = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&kills);
    let listener = format!("{name}-listener");
    // A's fault hook: while `hush` exists, A's writes send no notification.
    let dir = tempfile::tempdir().unwrap();
    let (hush, a_log) = (dir.path().join("hush"), dir.path().join("a.log"));
    let a_store = store.clone();
    let (hook, switch) = (hush.clone(), hush.clone());
    follow_between_processes(
        &store,
        move || {
            Gateway::start_with_env(&a_store, &[("APIPROXY_FAULT_NOTIFICATIONS_OFF_WHILE", hook.as_os_str())], &a_log)
        },
        move |batch| {
            // Every 16th batch (10 times), every listening connection of this schema is cut.
            if batch % 16 == 8 {
                counted.fetch_add(cut_listeners(&killer, &listener), Ordering::SeqCst);
            }
            // Batches 41 to 80 send no notification: B finds them by its sweep alone. The hook
            // looks for the file every 5 ms.
            if batch == 40 {
                std::fs::write(&switch, b"").unwrap();
                std::thread::sleep(Duration::from_millis(50));
            } else if batch == 80 {
                std::fs::remove_file(&switch).unwrap();
                std::thread::sleep(Duration::from_millis(50));
            }
        },
        move || stored_in(&reader.open(), "far"),
    )
    .await;
    assert!(kills.load(Ordering::SeqCst) >= 10, "the listeners were cut at least 10 times");
    let log = std::fs::read_to_string(dir.path().join("a.log")).unwrap();
    let switches: Vec<&str> = log.lines().filter(|line| line.contains("change notifications switched")).collect();
    assert_eq!(switches.len(), 2, "A's notifications went off and on again: {log}");
    assert!(switches[0].contains("suppressed=true") && switches[1].contains("suppressed=false"), "{switches:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_events_followed_through_listener_kills_and_a_stretch_without_notifications_on_postgres() {
    use session_persistence_postgres::{PgConfig, PgStore, testing::ScratchSchema};
    const TURNS_PER_BATCH: u64 = 10;
    const BATCHES: u64 = 167; // 10,020 events
    let Some(schema) = ScratchSchema::new() else { return };
    let schema = Arc::new(schema);
    let a_store = Arc::new(schema.open());
    // B's connections carry a name of this test's own, so only its listener is cut.
    let name = format!("follow-b-{}", schema.name());
    let b_config = PgConfig::from_url(&format!("{}&application_name={name}", schema.url())).unwrap();
    let b_store = Arc::new(PgStore::open(&b_config).unwrap());
    let a = Server::start_on_backend(Arc::clone(&a_store) as Arc<dyn Backend>, config()).await;
    let b = Server::start_on_backend(b_store, config()).await;
    let mut mux = b.ws("/api/events.mux", None).await;
    let kills = Arc::new(AtomicUsize::new(0));
    let (killer, counted, hush) = (Arc::clone(&schema), Arc::clone(&kills), Arc::clone(&a_store));
    let writer = tokio::spawn(async move {
        a.ok(None, "session.create", json!({"sessionId": "far", "cwd": "/w"})).await;
        for batch in 0..BATCHES {
            // Batches 40 to 79 send no notification: B finds them by its sweep (every 100 ms).
            hush.suppress_notifications((40..80).contains(&batch));
            let events: Vec<Value> = (1..=TURNS_PER_BATCH).flat_map(|n| turn(batch * TURNS_PER_BATCH + n)).collect();
            a.ok(None, "session.append", json!({"sessionId": "far", "events": events, "durable": true})).await;
            if batch % 16 == 8 {
                let (killer, listener) = (Arc::clone(&killer), format!("{name}-listener"));
                let killed = tokio::task::spawn_blocking(move || cut_listeners(&killer, &listener)).await.unwrap();
                counted.fetch_add(killed, Ordering::SeqCst);
            }
        }
        a
    });
    let mut replica = Replica::default();
    while !writer.is_finished() {
        if let Ok(Some(frame)) = tokio::time::timeout(Duration::from_millis(200), mux.next()).await {
            replica.apply("far", &frame);
        }
    }
    let a = writer.await.unwrap();
    let want = stored_in(a_store.as_ref(), "far");
    assert_eq!(want.len() as u64, BATCHES * TURNS_PER_BATCH * 6);
    converge(&mut mux, "far", &mut replica, &want).await;
    assert_eq!(replica.baselines, vec![-1], "{:?}", replica.baselines);
    assert_eq!(replica.events, want, "every event once, in order");
    assert!(kills.load(Ordering::SeqCst) >= 10, "B's listener was cut at least 10 times");
    a.stop().await;
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_takeover_on_postgres_rebaselines_the_old_writers_clients() {
    use session_persistence_postgres::testing::ScratchSchema;
    let Some(schema) = ScratchSchema::new() else { return };
    let reader = schema.open();
    let a = Server::start_on_backend(Arc::new(schema.open()), config()).await;
    let b = Server::start_on_backend(Arc::new(schema.open()), config()).await;
    a.ok(None, "session.create", json!({"sessionId": "taken", "cwd": "/w"})).await;
    a.ok(None, "session.append", json!({"sessionId": "taken", "events": turn(1), "durable": true})).await;
    let mut watcher = a.ws("/api/events.mux", None).await;
    let mut replica = Replica::default();
    converge(&mut watcher, "taken", &mut replica, &stored_in(&reader, "taken")).await;
    let durable = stored_in(&reader, "taken").len() as i64;

    // B resumes the session A holds live and writes it; A's client follows B's writes.
    b.ok(None, "session.create", json!({"sessionId": "taken", "cwd": "/w"})).await;
    for n in 2..=4 {
        b.ok(None, "session.append", json!({"sessionId": "taken", "events": turn(n), "durable": true})).await;
    }
    let want = stored_in(&reader, "taken");
    converge(&mut watcher, "taken", &mut replica, &want).await;
    assert_eq!(replica.baselines, vec![durable - 1, durable - 1], "{replica:?}");
    let from = usize::try_from(durable).unwrap();
    assert_eq!(replica.events, want[from..], "B's events, after the baseline of what A stored");
    // A's copy can no longer be written: its follower fenced it when it found B's writes.
    let stale = a.call_as(None, "session.append", json!({"sessionId": "taken", "events": turn(9)})).await;
    assert_eq!(stale["error"]["code"], "agent-busy", "{stale}");
    let stale = a.call_as(None, "session.flush", json!({"sessionId": "taken"})).await;
    assert_eq!(stale["error"]["code"], "agent-busy", "{stale}");
    assert_eq!(stored_in(&reader, "taken"), want, "nothing of A's reached the store");
    a.stop().await;
    b.stop().await;
}

#[test]
fn serve_no_follow_turns_following_off() {
    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite:{}", dir.path().join("sessions.db").display());
    let following = Gateway::start(&store);
    assert_eq!(following.ok("host.describe", json!({}))["followsStore"], true);
    let not = Gateway::start_with(&store, &["--no-follow"]);
    assert_eq!(not.ok("host.describe", json!({}))["followsStore"], false);
    let jsonl = Gateway::start(dir.path().join("jsonl").to_str().unwrap());
    assert_eq!(jsonl.ok("host.describe", json!({}))["followsStore"], false, "one gateway per JSONL store");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_gateway_processes_over_one_sqlite_file_follow_each_other() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sessions.db");
    let store = format!("sqlite:{}", path.display());
    let read = path.clone();
    let a_store = store.clone();
    follow_between_processes(
        &store,
        move || Gateway::start(&a_store),
        |_| {},
        move || {
            let store = session_persistence_sqlite::SqliteStore::open_for_reading(read.clone()).unwrap();
            stored_in(&store, "far")
        },
    )
    .await;
}

/// The stored events of `id` in `backend`, as `(seq, type)`.
fn stored_in(backend: &dyn Backend, id: &str) -> Vec<(u64, String)> {
    let mut sink = session_persistence::CollectSink::default();
    backend.scan(&id.into(), &CancellationToken::new(), &mut sink).unwrap();
    sink.events.iter().map(|event| (event.seq, event.kind.to_string())).collect()
}

/// Cuts every listening connection named `listener` (`pg_terminate_backend`), once there is one: a
/// listener cut moments ago may still be reconnecting, so this polls the server's view (nothing
/// signals a connection's start) for up to 20 s. Returns how many it cut.
fn cut_listeners(schema: &session_persistence_postgres::testing::ScratchSchema, listener: &str) -> usize {
    let kill = format!("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = '{listener}'");
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let killed = schema.sql(&kill).len();
        if killed > 0 || std::time::Instant::now() > deadline {
            return killed;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
