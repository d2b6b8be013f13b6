//! The change signal: a watch sweeps once it listens, then hears what another store handle
//! creates, appends, repairs and releases (never its own handle's writes), listens again after
//! its connection is killed and sweeps again, goes on past a sink that panics, turns an id too
//! long for a payload into a sweep, hears nothing a suppressed handle writes, and closes its
//! connection when dropped; positions and `held` follow another handle's lease, and
//! `created_since` filters by `createdAt`.

use std::{
    sync::{
        Arc,
        mpsc::{self, Receiver, RecvTimeoutError},
    },
    time::{Duration, Instant},
};

use session_core::{JsonData, SessionEvent, SessionHeader, SessionId};
use session_persistence::{Backend, ChangeKind, SessionPosition, SharedChangeSink, StoreChange, Watch, WatchOptions};
use session_persistence_postgres::{PgConfig, PgStore};
use tokio_util::sync::CancellationToken;

use crate::{TestSchema, server_url};

/// How long a test waits for a signal before it fails (never a pause: it returns as soon as
/// the signal comes).
const PATIENCE: Duration = Duration::from_secs(30);

fn event(kind: &str, seq: u64) -> Arc<SessionEvent> {
    Arc::new(SessionEvent::new(kind, seq, 10 + seq as i64, JsonData::from_text("{}").unwrap()))
}

fn header(id: &str, created_at: u64) -> SessionHeader {
    SessionHeader::new(SessionId::from(id), created_at)
}

/// Appends events `seqs` to `id` (creating it when the range starts at 0).
fn write(store: &PgStore, id: &str, seqs: std::ops::Range<u64>) {
    let events: Vec<_> = seqs.clone().map(|seq| event("test/n", seq)).collect();
    store.append_batch(&header(id, 1_000), &events, seqs.start > 0).unwrap();
}

fn session(id: &str, kind: ChangeKind, next_seq: u64) -> StoreChange {
    StoreChange::Session { id: SessionId::from(id), kind, next_seq: Some(next_seq) }
}

/// A store over `schema` whose connections are named `name` (its listener `name-listener`).
fn named_store(schema: &TestSchema, name: &str) -> PgStore {
    let url = format!("{}?application_name={name}", server_url().unwrap());
    let config = PgConfig::from_url(&url).unwrap().with_schema(schema.name()).unwrap().with_pool_size(2);
    PgStore::open(&config).unwrap()
}

/// A watch of `store` whose signals arrive on the returned channel.
fn watch(store: &PgStore) -> (Watch, Receiver<StoreChange>) {
    let (sender, receiver) = mpsc::channel();
    let sink: SharedChangeSink = Arc::new(move |change| {
        // The receiver outlives every watch of a test; a send after it is gone is moot.
        let _ = sender.send(change);
    });
    let watch = store.watch(&WatchOptions::default(), sink).unwrap().expect("PostgreSQL has a change signal");
    (watch, receiver)
}

fn next(signals: &Receiver<StoreChange>) -> StoreChange {
    signals.recv_timeout(PATIENCE).unwrap_or_else(|error| panic!("no signal within {PATIENCE:?}: {error}"))
}

/// How many listening connections named `name-listener` the server has.
fn listeners(schema: &TestSchema, name: &str) -> String {
    schema
        .value(&format!("SELECT count(*) FROM pg_stat_activity WHERE application_name = '{name}-listener'"))
        .unwrap_or_default()
}

/// Waits until `listeners` is `count`. The server's backend ends after the client closed its
/// socket, and nothing signals that, so this looks again every few milliseconds, within bounds.
fn until_listeners(schema: &TestSchema, name: &str, count: &str) {
    let deadline = Instant::now() + PATIENCE;
    while listeners(schema, name) != count {
        assert!(Instant::now() < deadline, "{name}: the listener count never became {count}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A store over `schema` whose appends notify at least `gap` apart.
fn paced_store(schema: &TestSchema, gap: Duration) -> PgStore {
    PgStore::open(&schema.config().clone().with_notify_gap(gap)).unwrap()
}

#[test]
fn a_watch_sweeps_then_hears_another_handles_writes_and_not_its_own() {
    let Some(schema) = TestSchema::new() else { return };
    let follower = schema.open();
    // Every append notifies in its own transaction: each is heard as it commits.
    let writer = paced_store(&schema, Duration::ZERO);
    let (_watch, signals) = watch(&follower);
    assert_eq!(next(&signals), StoreChange::Sweep, "a sweep once it listens");

    write(&writer, "s", 0..2);
    assert_eq!(next(&signals), session("s", ChangeKind::Created, 2));
    write(&writer, "s", 2..5);
    assert_eq!(next(&signals), session("s", ChangeKind::Appended, 5));

    // The follower's own writes are live in it already: its watch skips them.
    write(&follower, "own", 0..1);
    writer.lease(&SessionId::from("s")).unwrap();
    writer.end_lease(&SessionId::from("s"));
    assert_eq!(next(&signals), session("s", ChangeKind::Released, 5), "not the follower's own creation");

    // A repair is an append; a release without a lease still says so, with the stored seq.
    write(&writer, "open", 0..1);
    assert_eq!(next(&signals), session("open", ChangeKind::Created, 1));
    let closer = SessionEvent::new("turn/end", 1, 20, JsonData::from_text("{}").unwrap());
    writer.commit_repair(&header("open", 1_000), None, &[closer]).unwrap();
    assert_eq!(next(&signals), session("open", ChangeKind::Appended, 2));
    writer.end_lease(&SessionId::from("open"));
    assert_eq!(next(&signals), session("open", ChangeKind::Released, 2));
    writer.end_lease(&SessionId::from("never-stored"));
    assert_eq!(
        next(&signals),
        StoreChange::Session { id: SessionId::from("never-stored"), kind: ChangeKind::Released, next_seq: None }
    );

    // A batch the fence refuses commits nothing, so it notifies nothing.
    let stale = writer.append_batch(&header("s", 1_000), &[event("test/n", 3)], true);
    assert!(stale.is_err());
    write(&writer, "s", 5..6);
    assert_eq!(next(&signals), session("s", ChangeKind::Appended, 6));
    assert_eq!(signals.try_recv(), Err(mpsc::TryRecvError::Empty));
}

#[test]
fn a_burst_of_appends_is_heard_once_per_gap_and_session() {
    let Some(schema) = TestSchema::new() else { return };
    let follower = schema.open();
    let gap = Duration::from_millis(300);
    let writer = paced_store(&schema, gap);
    let (_watch, signals) = watch(&follower);
    assert_eq!(next(&signals), StoreChange::Sweep);
    // Creations are never paced.
    write(&writer, "a", 0..1);
    write(&writer, "b", 0..1);
    assert_eq!(next(&signals), session("a", ChangeKind::Created, 1));
    assert_eq!(next(&signals), session("b", ChangeKind::Created, 1));

    // An append after a quiet stretch is heard at once; the burst after it once the gap has
    // passed, one notification per session with its last next seq.
    let started = Instant::now();
    write(&writer, "a", 1..2);
    write(&writer, "a", 2..3);
    write(&writer, "b", 1..2);
    write(&writer, "a", 3..4);
    write(&writer, "b", 2..3);
    assert_eq!(next(&signals), session("a", ChangeKind::Appended, 2));
    let mut burst = vec![next(&signals), next(&signals)];
    assert!(started.elapsed() >= gap, "the burst waited for the gap");
    burst.sort_by_key(|change| format!("{change:?}"));
    assert_eq!(burst, [session("a", ChangeKind::Appended, 4), session("b", ChangeKind::Appended, 3)]);
    assert_eq!(signals.recv_timeout(gap * 2), Err(RecvTimeoutError::Timeout), "nothing more: 5 appends, 3 wake-ups");

    // A release drops the session's waiting append: its own notification says where it ends.
    write(&writer, "b", 3..4);
    write(&writer, "a", 4..5);
    writer.end_lease(&SessionId::from("a"));
    let mut rest = vec![next(&signals), next(&signals)];
    rest.sort_by_key(|change| format!("{change:?}"));
    assert_eq!(rest, [session("a", ChangeKind::Released, 5), session("b", ChangeKind::Appended, 4)]);
    assert_eq!(signals.recv_timeout(gap * 2), Err(RecvTimeoutError::Timeout));
}

#[test]
fn a_sink_that_panics_loses_one_change_and_the_watch_goes_on() {
    let Some(schema) = TestSchema::new() else { return };
    let follower = schema.open();
    let writer = schema.open();
    let (sender, signals) = mpsc::channel();
    let calls = std::sync::atomic::AtomicUsize::new(0);
    let sink: SharedChangeSink = Arc::new(move |change| {
        if calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 1 {
            panic!("the sink refuses its second change");
        }
        let _ = sender.send(change);
    });
    let _watch = follower.watch(&WatchOptions::default(), sink).unwrap().expect("PostgreSQL has a change signal");
    assert_eq!(next(&signals), StoreChange::Sweep);

    write(&writer, "lost", 0..1);
    write(&writer, "heard", 0..1);
    assert_eq!(
        next(&signals),
        session("heard", ChangeKind::Created, 1),
        "the creation the sink panicked on is lost; the listener goes on"
    );
    write(&writer, "heard", 1..3);
    assert_eq!(next(&signals), session("heard", ChangeKind::Appended, 3));
}

#[test]
fn a_killed_listener_listens_again_and_sweeps_again() {
    let Some(schema) = TestSchema::new() else { return };
    let name = format!("watch-kill-{}", schema.name());
    let follower = named_store(&schema, &name);
    let writer = schema.open();
    let (watch, signals) = watch(&follower);
    assert_eq!(next(&signals), StoreChange::Sweep);
    for round in 0..3u64 {
        let killed = schema.value(&format!(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = '{name}-listener'"
        ));
        assert_eq!(killed.as_deref(), Some("1"), "round {round}: one listener to kill");
        assert_eq!(next(&signals), StoreChange::Sweep, "round {round}: a sweep after the reconnect");
        write(&writer, "s", round..round + 1);
        let kind = if round == 0 { ChangeKind::Created } else { ChangeKind::Appended };
        assert_eq!(next(&signals), session("s", kind, round + 1), "round {round}");
    }
    assert_eq!(listeners(&schema, &name), "1", "one listening connection, not from the pool");

    // Dropping the watch closes its connection.
    drop(watch);
    until_listeners(&schema, &name, "0");
    write(&writer, "s", 3..4);
    assert_eq!(signals.recv_timeout(Duration::from_millis(200)), Err(RecvTimeoutError::Disconnected));
}

#[test]
fn an_id_too_long_for_a_payload_is_an_id_less_wake_up() {
    let Some(schema) = TestSchema::new() else { return };
    let follower = schema.open();
    let writer = schema.open();
    let (_watch, signals) = watch(&follower);
    assert_eq!(next(&signals), StoreChange::Sweep);
    // A header's id is bounded far below the limit, but a lease's is not.
    let long = SessionId::from("x".repeat(9_000));
    writer.lease(&long).unwrap();
    writer.end_lease(&long);
    assert_eq!(next(&signals), StoreChange::Sweep, "the release, without its id");
    write(&writer, "short", 0..1);
    assert_eq!(next(&signals), session("short", ChangeKind::Created, 1));
}

#[test]
fn a_suppressed_handle_notifies_nothing() {
    let Some(schema) = TestSchema::new() else { return };
    let follower = schema.open();
    let writer = schema.open();
    let (_watch, signals) = watch(&follower);
    assert_eq!(next(&signals), StoreChange::Sweep);
    writer.suppress_notifications(true);
    write(&writer, "quiet", 0..2);
    write(&writer, "quiet", 2..3);
    writer.lease(&SessionId::from("quiet")).unwrap();
    writer.end_lease(&SessionId::from("quiet"));
    writer.suppress_notifications(false);
    write(&writer, "loud", 0..1);
    assert_eq!(next(&signals), session("loud", ChangeKind::Created, 1), "nothing of the suppressed stretch");
    // The writes themselves committed: a sweep finds them.
    let cancel = CancellationToken::new();
    let positions = follower.positions(&[SessionId::from("quiet")], &cancel).unwrap();
    assert_eq!(positions, [SessionPosition { id: SessionId::from("quiet"), next_seq: 3, held: Some(false) }]);
}

#[test]
fn positions_and_held_follow_another_handles_lease() {
    let Some(schema) = TestSchema::new() else { return };
    let follower = schema.open();
    let writer = schema.open();
    let cancel = CancellationToken::new();
    write(&writer, "a", 0..3);
    write(&writer, "b", 0..1);
    let position =
        |id: &str, next_seq: u64, held: bool| SessionPosition { id: SessionId::from(id), next_seq, held: Some(held) };
    let ids = [SessionId::from("a"), SessionId::from("missing"), SessionId::from("b")];
    let mut positions = follower.positions(&ids, &cancel).unwrap();
    positions.sort_by(|x, y| x.id.cmp(&y.id));
    assert_eq!(positions, [position("a", 3, false), position("b", 1, false)], "an id not stored is left out");

    writer.lease(&SessionId::from("a")).unwrap();
    let mut positions = follower.positions(&ids, &cancel).unwrap();
    positions.sort_by(|x, y| x.id.cmp(&y.id));
    assert_eq!(positions, [position("a", 3, true), position("b", 1, false)]);
    // The follower takes it too: the writer's lease is another's, the follower's own is not.
    follower.lease(&SessionId::from("a")).unwrap();
    assert_eq!(follower.positions(&ids[..1], &cancel).unwrap(), [position("a", 3, true)]);
    assert_eq!(writer.positions(&ids[..1], &cancel).unwrap(), [position("a", 3, true)]);
    writer.end_lease(&SessionId::from("a"));
    assert_eq!(follower.positions(&ids[..1], &cancel).unwrap(), [position("a", 3, false)], "its own lease alone");
    assert_eq!(writer.positions(&ids[..1], &cancel).unwrap(), [position("a", 3, true)]);
    follower.end_lease(&SessionId::from("a"));
    assert_eq!(follower.positions(&ids[..1], &cancel).unwrap(), [position("a", 3, false)]);

    // A list longer than one query's share is looked up in several.
    let mut many: Vec<SessionId> = (0..25_000).map(|n| SessionId::from(format!("absent-{n}"))).collect();
    many.insert(3, SessionId::from("a"));
    many.push(SessionId::from("b"));
    writer.lease(&SessionId::from("b")).unwrap();
    let mut positions = follower.positions(&many, &cancel).unwrap();
    positions.sort_by(|x, y| x.id.cmp(&y.id));
    assert_eq!(positions, [position("a", 3, false), position("b", 1, true)]);
    assert!(follower.positions(&[], &cancel).unwrap().is_empty());
    cancel.cancel();
    assert!(follower.positions(&ids, &cancel).is_err(), "a cancelled call reads nothing");
}

/// The lease key of `id` in `schema` as `pg_locks` shows it: `(classid, objid)`.
fn lock_columns(schema: &str, id: &str) -> (i64, i64) {
    let key = session_persistence::lease::lease_key(&[schema, id]);
    ((key >> 32) as i64, (key & 0xffff_ffff) as i64)
}

/// A connection this handle took leases on and gave up, which the server still runs (a cut the
/// client noticed first: the server drops it only when its keepalives say so), still holds its
/// locks there. They are this handle's own, never another writer's, whichever connection it
/// holds its leases on now.
#[test]
fn a_lease_on_a_connection_this_handle_gave_up_is_still_its_own() {
    let Some(schema) = TestSchema::new() else { return };
    let (writer, follower) = (schema.open(), schema.open());
    let cancel = CancellationToken::new();
    write(&writer, "a", 0..1);
    write(&writer, "b", 0..1);
    writer.lease(&SessionId::from("a")).unwrap();
    let (high, low) = lock_columns(schema.name(), "a");
    let name = schema
        .value(&format!(
            "SELECT a.application_name FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid \
             WHERE l.locktype = 'advisory' AND l.granted AND l.classid::bigint = {high} AND l.objid::bigint = {low}"
        ))
        .expect("the writer's leases' connection");
    assert!(name.starts_with("session lease: ["), "{name}");

    // The stand-in for the connection given up: the same name, holding b's lease.
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let url = format!("{}?application_name={}", server_url().unwrap(), name.replace(' ', "%20"));
    let (high, low) = lock_columns(schema.name(), "b");
    let key = (high << 32) | low;
    let _stale = runtime.block_on(async {
        let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await.unwrap();
        tokio::spawn(connection);
        client.execute("SELECT pg_advisory_lock_shared($1)", &[&key]).await.unwrap();
        client
    });
    let b = [SessionId::from("b")];
    let position = |held| SessionPosition { id: SessionId::from("b"), next_seq: 1, held: Some(held) };
    assert_eq!(writer.positions(&b, &cancel).unwrap(), [position(false)], "its own, on a connection it gave up");
    assert_eq!(follower.positions(&b, &cancel).unwrap(), [position(true)], "another writer's");
}

#[test]
fn created_since_filters_by_created_at() {
    let Some(schema) = TestSchema::new() else { return };
    let store = schema.open();
    let cancel = CancellationToken::new();
    for (id, created_at) in [("old", 1_000), ("mid", 2_000), ("new", 3_000), ("also-mid", 2_000)] {
        store.append_batch(&header(id, created_at), &[event("test/n", 0)], false).unwrap();
    }
    let check = |since: u64, expected: &[&str]| {
        let listing = store.created_since(since, &cancel).unwrap();
        let ids: Vec<&str> = listing.headers.iter().map(|stored| stored.header.id.as_str()).collect();
        assert_eq!(ids, expected, "since {since}");
        assert!(listing.faults.is_empty());
    };
    check(0, &["also-mid", "mid", "new", "old"]);
    check(2_000, &["also-mid", "mid", "new"]);
    check(2_001, &["new"]);
    check(3_001, &[]);
    // The listing is the stored headers, with their revisions, as `list` has them.
    let listed = store.list(&cancel).unwrap();
    let since = store.created_since(3_000, &cancel).unwrap();
    let new = listed.headers.iter().find(|stored| stored.header.id.as_str() == "new").unwrap();
    assert_eq!(since.headers[0].revision, new.revision);
}
