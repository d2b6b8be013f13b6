//! The power-loss property of the JSONL store, on a simulated disk (`session-persistence`'s
//! `faults` feature): after any sequence of appends (random batch sizes, both encodings, some with
//! a failed fsync, a torn write or a failed rollback injected) and a simulated power loss, the
//! store reopens and every log loads; every acknowledged event is there, in order and
//! byte-for-byte; and nothing unacknowledged is half-visible.
//!
//! What the format guarantees past the acknowledged events (docs/storage-format.md, "Writes and
//! fsync order"): an append that failed and was rolled back leaves nothing. Only an append whose
//! rollback also failed (its writer is poisoned) can leave unsynced bytes; a power loss that keeps
//! part of them shows at most a prefix of that batch's events, each whole and byte-identical (a
//! record is committed only with its newline, a torn zstd frame yields only its complete lines),
//! never a cut event. A power loss that keeps nothing unsynced shows exactly the acknowledged
//! events. A new log whose directory fsync failed is gone after the loss.

use std::{path::Path, sync::Arc};

use proptest::prelude::*;
use session_core::{JsonData, SessionEvent, SessionHeader, SessionId};
use session_persistence::{
    Backend, Compression, Coordinator, CoordinatorConfig, JsonlConfig, JsonlStore, PersistenceError,
    SessionPersistence, faults::SimulatedDisk,
};
use tokio_util::sync::CancellationToken;

/// How many sessions a plan writes.
const N_SESSIONS: usize = 2;

/// A fault armed for one append (those that do not apply to the append's path are skipped).
#[derive(Debug, Clone, Copy)]
enum Fault {
    None,
    /// The write stops after this many bytes and fails (the store rolls it back).
    Tear(usize),
    /// The fsync fails (the store rolls back and poisons the writer).
    FailFsync,
    /// The write is torn and the rollback fails: the torn bytes stay, never fsynced.
    TearAndFailRollback(usize),
    /// The fsync and the rollback fail: the whole batch stays, never fsynced.
    FailFsyncAndRollback,
    /// A new log's directory fsync fails: the log is there, its name not durable.
    FailDirFsync,
}

#[derive(Debug, Clone)]
struct Append {
    session: usize,
    n_events: usize,
    /// The length of each event's padding, so batches cross lines and zstd blocks differently.
    pad: usize,
    fault: Fault,
}

#[derive(Debug, Clone)]
struct Round {
    appends: Vec<Append>,
    /// How many unsynced bytes of each log the power loss keeps.
    keep_unsynced: u64,
}

#[derive(Debug, Clone)]
struct Plan {
    compression: Compression,
    rounds: Vec<Round>,
}

fn fault() -> impl Strategy<Value = Fault> {
    prop_oneof![
        8 => Just(Fault::None),
        1 => (0usize..400).prop_map(Fault::Tear),
        1 => Just(Fault::FailFsync),
        1 => (0usize..400).prop_map(Fault::TearAndFailRollback),
        1 => Just(Fault::FailFsyncAndRollback),
        1 => Just(Fault::FailDirFsync),
    ]
}

fn plan() -> impl Strategy<Value = Plan> {
    let append = (0..N_SESSIONS, 1usize..6, 0usize..120, fault()).prop_map(|(session, n_events, pad, fault)| Append {
        session,
        n_events,
        pad,
        fault,
    });
    let round = (prop::collection::vec(append, 1..8), prop_oneof![Just(0u64), 1u64..600])
        .prop_map(|(appends, keep_unsynced)| Round { appends, keep_unsynced });
    (prop_oneof![Just(Compression::Zstd), Just(Compression::None)], prop::collection::vec(round, 1..4))
        .prop_map(|(compression, rounds)| Plan { compression, rounds })
}

/// What the test knows of one session.
#[derive(Debug, Default)]
struct Model {
    /// Events known durable: acknowledged, or found by a load after a power loss.
    durable: Vec<Arc<SessionEvent>>,
    /// The events of the failed append whose bytes may still be in the file, unsynced.
    in_flight: Vec<Arc<SessionEvent>>,
    /// Whether the log exists durably (later appends go to it).
    materialized: bool,
    /// Whether a new log was linked but its directory fsync failed.
    name_not_durable: bool,
    /// Whether this round's writer is poisoned: every later append must fail.
    poisoned: bool,
}

fn header(session: usize) -> SessionHeader {
    SessionHeader::new(SessionId::from(format!("s{session}").as_str()), 1_772_442_000_000)
}

fn batch(first_seq: u64, n_events: usize, pad: usize) -> Vec<Arc<SessionEvent>> {
    (first_seq..first_seq + n_events as u64)
        .map(|seq| {
            let text = format!("{seq}:{}", "x".repeat(pad + seq as usize % 7));
            let data = JsonData::from_value(&serde_json::json!({ "text": text })).expect("plain JSON");
            let mut event = SessionEvent::new("test/note", seq, 1_772_442_000_000 + seq as i64, data);
            // A type no reader knows, marked ignorable so every read passes it through.
            event.ignorable = true;
            Arc::new(event)
        })
        .collect()
}

fn config(root: &Path, compression: Compression) -> JsonlConfig {
    JsonlConfig { root: root.to_path_buf(), compression, pack_chunks: true }
}

/// One append with its fault armed, checked against the model and folded into it.
fn append(store: &JsonlStore, disk: &SimulatedDisk, model: &mut Model, step: &Append) {
    let header = header(step.session);
    let events = batch(model.durable.len() as u64, step.n_events, step.pad);
    if model.poisoned {
        let result = store.append_batch(&header, &events, model.materialized);
        assert!(matches!(result, Err(PersistenceError::Poisoned { .. })), "a poisoned writer refuses: {result:?}");
        return;
    }
    // Each fault is armed only where it fires (an armed fault stays armed until then): the
    // rollback faults on an append to an existing log, the directory fault on a new log.
    let fault = match (step.fault, model.materialized) {
        (Fault::TearAndFailRollback(_) | Fault::FailFsyncAndRollback, false) | (Fault::FailDirFsync, true) => {
            Fault::None
        }
        (fault, _) => fault,
    };
    match fault {
        Fault::None => {}
        Fault::Tear(at) => disk.tear_next_write(at),
        Fault::FailFsync => disk.fail_next_fsync(),
        Fault::TearAndFailRollback(at) => {
            disk.tear_next_write(at);
            disk.fail_next_rollback();
        }
        Fault::FailFsyncAndRollback => {
            disk.fail_next_fsync();
            disk.fail_next_rollback();
        }
        Fault::FailDirFsync => disk.fail_next_dir_fsync(),
    }
    let result = store.append_batch(&header, &events, model.materialized);
    match (fault, model.materialized) {
        (Fault::None, _) => {
            assert!(result.is_ok(), "an append without a fault is acknowledged: {result:?}");
            model.durable.extend(events);
            model.in_flight.clear();
            model.materialized = true;
        }
        // A new log's temp file failed: nothing was published; a retry may create it.
        (Fault::Tear(_) | Fault::FailFsync, false) => {
            assert!(matches!(result, Err(PersistenceError::Io { .. })), "{result:?}");
        }
        // Rolled back to the prior size: nothing stays; only the failed fsync poisons.
        (Fault::Tear(_), true) => assert!(matches!(result, Err(PersistenceError::Io { .. })), "{result:?}"),
        (Fault::FailFsync, true) => {
            assert!(matches!(result, Err(PersistenceError::Io { .. })), "{result:?}");
            model.poisoned = true;
        }
        (Fault::TearAndFailRollback(_) | Fault::FailFsyncAndRollback, _) => {
            assert!(matches!(result, Err(PersistenceError::Poisoned { .. })), "{result:?}");
            model.poisoned = true;
            model.in_flight = events;
        }
        (Fault::FailDirFsync, _) => {
            assert!(matches!(result, Err(PersistenceError::Io { .. })), "{result:?}");
            model.poisoned = true;
            model.name_not_durable = true;
        }
    }
}

/// After a power loss: each session's log loads and holds what the format promises; the model
/// then takes what was loaded as durable.
fn check_after_power_loss(
    store: JsonlStore,
    models: &mut [Model],
    keep_unsynced: u64,
    runtime: &tokio::runtime::Runtime,
) -> usize {
    let mut n_unacknowledged = 0;
    let persistence = Coordinator::new(Arc::new(store), CoordinatorConfig::default()).expect("a coordinator");
    for (session, model) in models.iter_mut().enumerate() {
        let id = header(session).id;
        let loaded = runtime.block_on(persistence.load(&id, &CancellationToken::new()));
        if model.name_not_durable || !model.materialized {
            assert!(
                matches!(&loaded, Err(error) if error.is_not_found()),
                "a log whose creation was never durable is gone: {loaded:?}"
            );
            *model = Model::default();
            continue;
        }
        let events = match loaded {
            Ok(inspection) => inspection.events,
            Err(error) => panic!("the log of {id} must load after a power loss: {error}"),
        };
        let n_durable = model.durable.len();
        assert!(events.len() >= n_durable, "{id}: {} acknowledged events, {} loaded", n_durable, events.len());
        for (loaded, acknowledged) in events.iter().zip(&model.durable) {
            assert_eq!(loaded, acknowledged, "{id}: an acknowledged event changed");
            assert_eq!(loaded.data.as_str(), acknowledged.data.as_str(), "{id}: byte-for-byte");
        }
        let extra = &events[n_durable..];
        if keep_unsynced == 0 {
            assert!(extra.is_empty(), "{id}: nothing unsynced survives a full loss, found {extra:?}");
        }
        assert!(extra.len() <= model.in_flight.len(), "{id}: events that were never written: {extra:?}");
        for (loaded, written) in extra.iter().zip(&model.in_flight) {
            assert_eq!(loaded, written, "{id}: an unacknowledged event is visible only whole");
            assert_eq!(loaded.data.as_str(), written.data.as_str(), "{id}: byte-for-byte");
        }
        n_unacknowledged += extra.len();
        *model = Model { durable: events.to_vec(), materialized: true, ..Model::default() };
    }
    n_unacknowledged
}

/// Runs `plan`; returns how many unacknowledged events the loads found (whole, as checked).
fn run(plan: &Plan) -> usize {
    let dir = tempfile::tempdir().expect("a temp dir");
    let root = dir.path().join("store");
    let disk = SimulatedDisk::new();
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
    let mut models: Vec<Model> = (0..N_SESSIONS).map(|_| Model::default()).collect();
    let mut n_unacknowledged = 0;
    for round in &plan.rounds {
        let store = JsonlStore::open_with_disk(config(&root, plan.compression), &disk).expect("the store opens");
        for step in &round.appends {
            append(&store, &disk, &mut models[step.session], step);
        }
        drop(store);
        disk.power_loss_keeping(round.keep_unsynced).expect("every store is closed");
        // The checking store writes through the disk too: a load's repair is tracked like any write.
        let store = JsonlStore::open_with_disk(config(&root, plan.compression), &disk).expect("the store reopens");
        n_unacknowledged += check_after_power_loss(store, &mut models, round.keep_unsynced, &runtime);
    }
    n_unacknowledged
}

proptest! {
    // A modest count: each case writes real files with real fsyncs, in a debug build.
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn acknowledged_appends_survive_a_power_loss_and_nothing_is_half_visible(plan in plan()) {
        run(&plan);
    }
}

/// The cases the property must reach, whatever the random plans: a torn write kept in part by the
/// loss, a whole unsynced batch kept in part, and a new log lost with its directory fsync.
#[test]
fn power_loss_edge_cases() {
    let step = |session, n_events, fault| Append { session, n_events, pad: 40, fault };
    for compression in [Compression::Zstd, Compression::None] {
        for keep_unsynced in [0, 25, 90, 10_000] {
            let rounds = vec![
                Round {
                    appends: vec![
                        step(0, 3, Fault::None),
                        step(0, 4, Fault::TearAndFailRollback(150)),
                        step(1, 2, Fault::None),
                        step(1, 4, Fault::FailFsyncAndRollback),
                    ],
                    keep_unsynced,
                },
                Round {
                    appends: vec![step(0, 2, Fault::None), step(1, 1, Fault::Tear(5)), step(1, 2, Fault::None)],
                    keep_unsynced,
                },
                Round { appends: vec![step(0, 1, Fault::FailFsync), step(1, 1, Fault::None)], keep_unsynced: 0 },
            ];
            let n_unacknowledged = run(&Plan { compression, rounds });
            // Kept in full, the batch whose fsync and rollback failed is visible whole.
            if keep_unsynced == 10_000 {
                assert!(n_unacknowledged >= 4, "{compression:?}: {n_unacknowledged}");
            }
            let lost_log = vec![Round { appends: vec![step(0, 2, Fault::FailDirFsync)], keep_unsynced }];
            run(&Plan { compression, rounds: lost_log });
        }
    }
}
