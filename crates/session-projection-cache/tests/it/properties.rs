//! Laws over random logs, across the registry, the persistence and the cache: the live snapshot
//! equals a restore from zero, a restore from any checkpoint (through JSON) plus its tail, the
//! cached snapshot and the cold snapshot; and deleting or damaging the cache at any point changes
//! no returned value, only the number of log reads.

use std::{fs, sync::Arc};

use proptest::prelude::*;
use serde_json::json;
use session_core::{Session, SessionEvent, SessionId};
use session_projection::{CheckpointRows, ProjectionRegistry, Snapshot};
use session_projection_cache::{CacheConfig, CheckpointStore, DiskCheckpointStore};
use tokio_util::sync::CancellationToken;

use crate::support::{Units, World, WorldOptions, append, turn_end, turn_start};

#[derive(Debug, Clone)]
enum Op {
    Mark(Vec<u8>),
    Add(i8),
    Touch,
    Other,
    /// `turn/start` then `turn/end`: a mandatory write point.
    Turn,
    /// An explicit `write`.
    Write,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => prop::collection::vec(0u8..3, 0..3).prop_map(Op::Mark),
        3 => any::<i8>().prop_map(Op::Add),
        1 => Just(Op::Touch),
        2 => Just(Op::Other),
        1 => Just(Op::Turn),
        1 => Just(Op::Write),
    ]
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
}

/// Appends the events of `op` (an explicit write is the caller's business).
fn apply_op(session: &Session, op: &Op, turns: &mut u64) {
    match op {
        Op::Mark(marks) => {
            let marks: Vec<String> = marks.iter().map(|mark| format!("m{mark}")).collect();
            append(session, "test/mark", json!({ "marks": marks }));
        }
        Op::Add(n) => {
            append(session, "test/add", json!({ "n": n }));
        }
        Op::Touch => {
            append(session, "test/touch", json!({}));
        }
        Op::Other => {
            append(session, "test/other", json!({}));
        }
        Op::Turn => {
            *turns += 1;
            turn_start(session, *turns);
            turn_end(session, *turns);
        }
        Op::Write => {}
    }
}

fn restore_from_zero(registry: &ProjectionRegistry, events: &[Arc<SessionEvent>]) -> Snapshot {
    registry.restore(&CheckpointRows::new(), events.iter().map(|event| &**event), 0).unwrap().snapshot
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn live_restore_cached_and_cold_agree(ops in prop::collection::vec(op(), 0..30), every in 1u64..6) {
        runtime().block_on(async {
            let world = World::new(WorldOptions {
                units: Units::Property,
                config: CacheConfig::new(every, 60_000).unwrap(),
                ..WorldOptions::default()
            });
            let registry = &world.registry;
            let session = world.session("p");
            let mut checkpoints = vec![registry.checkpoint(&session)];
            let mut turns = 0;
            for op in &ops {
                apply_op(&session, op, &mut turns);
                if let Op::Write = op {
                    world.cache.write(&session).await.unwrap();
                }
                checkpoints.push(registry.checkpoint(&session));
            }
            let live = registry.snapshot(&session);
            let events = session.events();
            prop_assert_eq!(live.as_of_seq, events.len() as i64 - 1);
            prop_assert_eq!(&restore_from_zero(registry, &events), &live);

            for checkpoint in &checkpoints {
                let rows: CheckpointRows =
                    serde_json::from_value(serde_json::to_value(&checkpoint.rows).unwrap()).unwrap();
                let floor = registry.restore_floor(&rows).unwrap();
                let tail = events.iter().skip(floor as usize).map(|event| &**event);
                let restored = registry.restore(&rows, tail, floor).unwrap();
                prop_assert_eq!(&restored.snapshot, &live);
            }

            // Whatever the policy stored so far is the live value at its cut.
            world.cache.settle().await;
            let header = world.record_header("p");
            if let Some(cached) = world.cache.cached_snapshot(&header).await {
                let cut = (cached.as_of_seq + 1) as usize;
                prop_assert_eq!(&cached, &restore_from_zero(registry, &events[..cut]));
            }

            world.retire("p").await;
            prop_assert_eq!(world.cache.cached_snapshot(&header).await, Some(live.clone()));
            let cold = world.cache.cold_snapshot(&SessionId::from("p"), &CancellationToken::new()).await;
            if events.is_empty() {
                // Persistence stores no empty log.
                prop_assert!(cold.unwrap_err().is_not_found());
            } else {
                prop_assert_eq!(cold.unwrap(), live);
                prop_assert_eq!(world.take_reads("p").len(), 1, "a current record costs one read");
            }
            Ok(())
        })?;
    }
}

/// Something done to the cache between two ops.
#[derive(Debug, Clone)]
enum Tamper {
    Delete,
    /// Damage the record file in one of several ways.
    Damage(u8),
    /// A cold read in the middle of the session's life (of what is stored so far).
    ColdRead,
}

fn tamper() -> impl Strategy<Value = Option<Tamper>> {
    prop_oneof![
        6 => Just(None),
        1 => Just(Some(Tamper::Delete)),
        2 => (0u8..5).prop_map(|kind| Some(Tamper::Damage(kind))),
        1 => Just(Some(Tamper::ColdRead)),
    ]
}

fn damage(store: &DiskCheckpointStore, id: &str, kind: u8) {
    let path = store.record_path(&SessionId::from(id)).unwrap();
    let Ok(bytes) = fs::read(&path) else { return };
    let text = String::from_utf8_lossy(&bytes).into_owned();
    let damaged = match kind {
        0 => bytes[..bytes.len() / 2].to_vec(),
        1 => {
            let mut flipped = bytes.clone();
            let at = flipped.len() * 2 / 3;
            flipped[at] ^= 0x20;
            flipped
        }
        2 => b"\x00garbage".to_vec(),
        3 => text.replacen("\"version\":1", "\"version\":2", 1).into_bytes(),
        _ => text.replacen(&format!("\"id\":\"{id}\""), "\"id\":\"someone-else\"", 1).into_bytes(),
    };
    fs::write(&path, damaged).unwrap();
}

struct Twin {
    world: World,
    disk: Arc<DiskCheckpointStore>,
    _dir: tempfile::TempDir,
}

fn twin(every: u64) -> Twin {
    let dir = tempfile::tempdir().unwrap();
    let disk = Arc::new(DiskCheckpointStore::open(dir.path()).unwrap());
    let world = World::new(WorldOptions {
        units: Units::Property,
        config: CacheConfig::new(every, 60_000).unwrap(),
        records: disk.clone(),
        ..WorldOptions::default()
    });
    Twin { world, disk, _dir: dir }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn deleting_or_damaging_the_cache_changes_no_value(
        steps in prop::collection::vec((op(), tamper()), 1..30),
        last in tamper(),
        every in 1u64..6,
    ) {
        runtime().block_on(async {
            let (clean, damaged) = (twin(every), twin(every));
            let sessions = [clean.world.session("p"), damaged.world.session("p")];
            let mut turns = [0, 0];
            for (op, tamper) in &steps {
                for (idx, (twin, session)) in [&clean, &damaged].into_iter().zip(&sessions).enumerate() {
                    apply_op(session, op, &mut turns[idx]);
                    if let Op::Write = op {
                        twin.world.cache.write(session).await.unwrap();
                    }
                }
                match tamper {
                    None => {}
                    Some(Tamper::Delete) => {
                        damaged.disk.remove(&SessionId::from("p")).unwrap();
                    }
                    Some(Tamper::Damage(kind)) => damage(&damaged.disk, "p", *kind),
                    Some(Tamper::ColdRead) => {
                        // Flushed, the stored log is the live log (only this thread appends).
                        damaged.world.store.flush(&SessionId::from("p")).await.unwrap();
                        let stored = damaged.world.stored_events("p").await;
                        let cold =
                            damaged.world.cache.cold_snapshot(&SessionId::from("p"), &CancellationToken::new()).await;
                        if stored.is_empty() {
                            prop_assert!(cold.unwrap_err().is_not_found());
                        } else {
                            prop_assert_eq!(cold.unwrap(), restore_from_zero(&damaged.world.registry, &stored));
                        }
                    }
                }
            }
            let live = clean.world.registry.snapshot(&sessions[0]);
            prop_assert_eq!(&damaged.world.registry.snapshot(&sessions[1]), &live);
            let empty = sessions[0].is_empty();
            drop(sessions);
            clean.world.retire("p").await;
            damaged.world.retire("p").await;

            // The disposal write stored the final cut in both worlds, whatever happened before.
            let header = clean.world.record_header("p");
            prop_assert_eq!(clean.world.cache.cached_snapshot(&header).await, Some(live.clone()));
            prop_assert_eq!(damaged.world.cache.cached_snapshot(&header).await, Some(live.clone()));

            match last {
                Some(Tamper::Delete) => {
                    damaged.disk.remove(&SessionId::from("p")).unwrap();
                }
                Some(Tamper::Damage(kind)) => damage(&damaged.disk, "p", kind),
                None | Some(Tamper::ColdRead) => {}
            }
            let cached = damaged.world.cache.cached_snapshot(&header).await;
            prop_assert!(cached.is_none() || cached == Some(live.clone()), "{:?}", cached);

            for twin in [&clean, &damaged] {
                twin.world.take_reads("p");
                let cold = twin.world.cache.cold_snapshot(&SessionId::from("p"), &CancellationToken::new()).await;
                if empty {
                    prop_assert!(cold.unwrap_err().is_not_found());
                    continue;
                }
                prop_assert_eq!(cold.unwrap(), live.clone());
                let reads = twin.world.take_reads("p").len();
                prop_assert!((1..=2).contains(&reads), "{} reads", reads);
                if std::ptr::eq(twin, &clean) {
                    prop_assert_eq!(reads, 1);
                }
            }
            Ok(())
        })?;
    }
}
