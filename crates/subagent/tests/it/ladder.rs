//! One property test of the whole listing ladder: random trees of parents and subagent children
//! (continuable and one-shot, forks carrying their ancestors' descriptors, debris descriptors,
//! several own descriptors, plain sessions in between, damaged logs). For every parent, the
//! listing computed live (rung 1), cold with no cache (rung 3) and cold with a checkpoint cache
//! (rung 2, records written by the write policy) equals a simple model of the design note's
//! rules: last-wins identity over the whole log, the four-state row mapping, `hasChildren` over
//! subagent children, `createdAt`-then-id order.

use std::{fs, sync::Arc};

use proptest::prelude::*;
use serde_json::{Value, json};
use session_core::{CreateOptions, Session, SessionId};
use session_persistence::SessionPersistence;
use subagent::{child_meta, fork_prefix};

use crate::support::*;

#[derive(Debug, Clone)]
enum Desc {
    Continuable(u8),
    OneShot(Option<u8>),
    /// Fails the strict parse: the identity becomes the `null` sentinel.
    Malformed,
    /// Another version: also the `null` sentinel.
    Unsupported,
}

#[derive(Debug, Clone)]
struct Node {
    /// The index of its parent among the nodes before it (0 is the root).
    parent: usize,
    /// `origin: subagent` (a candidate of its parent's catalog); otherwise a plain child session.
    subagent: bool,
    /// Seeded with its parent's log (a fork), carrying the parent's descriptors.
    fork: bool,
    own: Vec<Desc>,
    created_at: u64,
    /// Its stored log gets a committed line garbled once it is cold.
    damaged: bool,
}

fn desc() -> impl Strategy<Value = Desc> {
    prop_oneof![
        4 => (0u8..3).prop_map(Desc::Continuable),
        3 => prop::option::of(0u8..3).prop_map(Desc::OneShot),
        1 => Just(Desc::Malformed),
        1 => Just(Desc::Unsupported),
    ]
}

fn tree() -> impl Strategy<Value = Vec<Node>> {
    prop::collection::vec(
        (
            any::<prop::sample::Index>(),
            prop::bool::weighted(0.8),
            prop::bool::weighted(0.3),
            prop::collection::vec(desc(), 0..3),
            0u64..3,
            prop::bool::weighted(0.15),
        ),
        1..7,
    )
    .prop_map(|raw| {
        raw.into_iter()
            .enumerate()
            .map(|(idx, (parent, subagent, fork, own, created_at, damaged))| Node {
                // Node `idx + 1` picks a parent among the root and the nodes before it.
                parent: parent.index(idx + 1),
                subagent,
                fork,
                own,
                created_at,
                damaged,
            })
            .collect()
    })
}

fn name(idx: usize) -> String {
    if idx == 0 { "root".to_owned() } else { format!("n{idx}") }
}

fn payload(desc: &Desc) -> Value {
    match desc {
        Desc::Continuable(label) => continuable(&format!("c{label}")),
        Desc::OneShot(label) => one_shot(label.map(|label| format!("o{label}")).as_deref()),
        Desc::Malformed => json!({"version": 2, "mode": "continuable", "provider": "spawn"}),
        Desc::Unsupported => json!({"version": 3, "mode": "continuable", "provider": "spawn", "label": "future"}),
    }
}

/// The model's identity of a descriptor: `(mode, label)`, or `None` for the `null` sentinel.
fn identity(desc: &Desc) -> Option<(&'static str, Option<String>)> {
    match desc {
        Desc::Continuable(label) => Some(("continuable", Some(format!("c{label}")))),
        Desc::OneShot(label) => Some(("one-shot", label.map(|label| format!("o{label}")))),
        Desc::Malformed | Desc::Unsupported => None,
    }
}

/// Every descriptor of node `idx`'s whole log, in order: its parent's (through a fork's seed,
/// recursively), then its own.
fn all_descriptors(nodes: &[Node], idx: usize) -> Vec<Desc> {
    if idx == 0 {
        return Vec::new();
    }
    let node = &nodes[idx - 1];
    let mut descriptors = if node.fork { all_descriptors(nodes, node.parent) } else { Vec::new() };
    descriptors.extend(node.own.iter().cloned());
    descriptors
}

/// How the listing is computed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Live,
    Cold,
}

/// The design note's rows for `parent`'s catalog.
fn model(nodes: &[Node], parent: usize, phase: Phase) -> Value {
    let mut children: Vec<usize> =
        (1..=nodes.len()).filter(|&idx| nodes[idx - 1].subagent && nodes[idx - 1].parent == parent).collect();
    children.sort_by_key(|&idx| (nodes[idx - 1].created_at, name(idx)));
    let rows: Vec<Value> = children
        .into_iter()
        .filter_map(|idx| {
            let node = &nodes[idx - 1];
            let id = name(idx);
            if phase == Phase::Cold && node.damaged {
                return Some(json!({"kind": "diagnostic", "id": id, "reason": "unavailable"}));
            }
            let has_children = nodes.iter().any(|other| other.subagent && other.parent == idx);
            match all_descriptors(nodes, idx).last().and_then(identity) {
                Some((mode, label)) => {
                    let mut row = json!({"kind": "child", "id": id, "mode": mode});
                    if let Some(label) = label {
                        row["label"] = json!(label);
                    }
                    row["activity"] = json!(if phase == Phase::Live { "running" } else { "inactive" });
                    row["hasChildren"] = json!(has_children);
                    Some(row)
                }
                // No identity: the creation window while live, settled debris once cold.
                None if phase == Phase::Live => None,
                None => Some(json!({"kind": "diagnostic", "id": id, "reason": "corrupt"})),
            }
        })
        .collect();
    Value::Array(rows)
}

/// Builds the tree live: every node a live session of the harness's store.
fn build(h: &Harness, nodes: &[Node]) -> Vec<Arc<Session>> {
    let root = h.store.create(Some(SessionId::from("root")), CreateOptions::default()).unwrap();
    run_turn(&root, 1, None::<fn()>);
    let mut sessions = vec![root];
    for (offset, node) in nodes.iter().enumerate() {
        let parent = Arc::clone(&sessions[node.parent]);
        let seed = if node.fork { fork_prefix(&parent) } else { Vec::new() };
        let turns = seed.iter().filter(|event| event.kind == "turn/start").count() as u64;
        let mut meta = child_meta(parent.header(), parent.header().delegation_depth + 1, seed.len() as u64, None);
        meta.created_at = Some(node.created_at);
        if !node.subagent {
            meta.origin = None;
        }
        let seed = (!seed.is_empty()).then_some(seed);
        let session = h.store.create(Some(SessionId::from(name(offset + 1))), CreateOptions { seed, meta }).unwrap();
        let turn = turns + 1;
        append(&session, "turn/start", json!({"turn": turn}));
        append(&session, "user/message", user_message_data(session.len(), "work"));
        for desc in &node.own {
            append(&session, "subagent/descriptor", payload(desc));
        }
        append(&session, "turn/end", json!({"turn": turn, "reason": {"kind": "completed"}}));
        sessions.push(session);
    }
    sessions
}

/// Garbles a committed line in the middle of a cold raw log (a later `turn/end` makes it
/// corruption, not a torn tail), and drops its checkpoint record so rung 2 cannot answer.
fn damage(h: &Harness, session: &Session) {
    let path = h.coordinator.locate(session.header()).expect("the JSONL backend has files");
    let text = fs::read_to_string(&path).unwrap();
    let mut lines: Vec<&str> = text.lines().collect();
    let middle = lines.len() / 2;
    lines[middle] = "{\"garbled\": ";
    fs::write(&path, lines.join("\n") + "\n").unwrap();
    if let Some(cache) = &h.cache {
        cache.store().remove(session.id()).unwrap();
    }
}

async fn check(nodes: &[Node]) -> Result<(), TestCaseError> {
    let h = Harness::new(WITH_CACHE[0]);
    let sessions = build(&h, nodes);
    let no_cache = h.runtime_with_cache(None);
    for (parent, session) in sessions.iter().enumerate() {
        let rows = serde_json::to_value(h.runtime.list_children(session.id(), &token()).await.unwrap()).unwrap();
        prop_assert_eq!(&rows, &model(nodes, parent, Phase::Live), "live, parent {}", name(parent));
    }
    for session in &sessions {
        h.settle(session).await;
    }
    for (idx, node) in nodes.iter().enumerate() {
        if node.damaged {
            damage(&h, &sessions[idx + 1]);
        }
    }
    for (parent, session) in sessions.iter().enumerate() {
        let want = model(nodes, parent, Phase::Cold);
        let cached = serde_json::to_value(h.runtime.list_children(session.id(), &token()).await.unwrap()).unwrap();
        prop_assert_eq!(&cached, &want, "cold with the cache, parent {}", name(parent));
        let read = serde_json::to_value(no_cache.list_children(session.id(), &token()).await.unwrap()).unwrap();
        prop_assert_eq!(&read, &want, "cold without a cache, parent {}", name(parent));
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn live_cold_and_cached_listings_equal_the_model(nodes in tree()) {
        runtime().block_on(check(&nodes))?;
    }
}
