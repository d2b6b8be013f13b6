//! A minimal agent host that embeds the whole stack in-process: a durable JSONL store behind the
//! shared coordinator, the live session store, the projection registry with the checkpoint cache
//! and its write policy, and the subagent runtime. It runs a parent session with one continuable
//! child, lets the child go cold, and lists the parent's children through the three-rung ladder.
//!
//! Run with `cargo run -p examples --example minimal_host [STORE_DIR]` (a temporary directory
//! without the argument).

use std::{path::PathBuf, sync::Arc};

use anyhow::Context;
use serde_json::json;
use session_core::{
    BoundedClock, Clock, CreateOptions, HeaderMeta, Session, SessionId, SessionStore, SurfaceIntent, SystemClock,
};
use session_persistence::{Coordinator, CoordinatorConfig, JsonlConfig, JsonlStore, SessionPersistence};
use session_projection::ProjectionRegistry;
use session_projection_cache::{CacheConfig, DiskCheckpointStore, ProjectionCache};
use subagent::{ChildOptions, ContinuableDescriptor, SubagentRuntime, SubagentServices};
use tokio_util::sync::CancellationToken;

/// One complete turn: the user asks, the model answers.
fn run_turn(session: &Session, turn: u64, prompt: &str, answer: &str) -> anyhow::Result<()> {
    let id = session.id();
    let user = json!({"id": format!("{id}-u{turn}"), "role": "user", "source": {"kind": "user"},
        "content": [{"type": "text", "text": prompt}]});
    let model = json!({"turn": turn, "step": 1, "message": {"id": format!("{id}-a{turn}"), "role": "assistant",
        "source": {"kind": "model", "provider": "example", "model": "scripted"},
        "content": [{"type": "text", "text": answer}]}});
    session.append("turn/start", &json!({"turn": turn}), None)?;
    session.append("user/message", &user, Some(SurfaceIntent::append()))?;
    session.append("step/start", &json!({"turn": turn, "step": 1}), None)?;
    session.append("assistant/message", &model, Some(SurfaceIntent::append()))?;
    session.append("step/end", &json!({"turn": turn, "step": 1}), None)?;
    session.append("turn/end", &json!({"turn": turn, "reason": {"kind": "completed"}}), None)?;
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let temp = tempfile::tempdir()?;
    let root = std::env::args_os().nth(1).map_or_else(|| temp.path().join("store"), PathBuf::from);

    // Storage: the JSONL store (zstd by default) behind the coordinator, which every layer above
    // reaches through the `SessionPersistence` trait.
    let backend = JsonlStore::open(JsonlConfig::new(&root)).context("opening the store")?;
    let coordinator = Arc::new(Coordinator::new(Arc::new(backend), CoordinatorConfig::default())?);
    let persistence: Arc<dyn SessionPersistence> = coordinator.clone();

    // The live sessions, written behind to storage.
    // `session-core` reads no clock of its own: the host passes the system's, bounded so every
    // stored time stays readable whatever the system clock says.
    let clock: Arc<dyn Clock> = Arc::new(BoundedClock::new(Arc::new(SystemClock)));
    let store = Arc::new(SessionStore::new(clock.clone()));
    coordinator.attach(&store)?;

    // Projections, folded live as events are appended, with durable checkpoints beside the logs.
    let registry = ProjectionRegistry::new();
    let _folding = registry.attach(&store);
    let checkpoints = DiskCheckpointStore::open(root.join(".projection-cache"))?;
    let cache = ProjectionCache::new(
        registry.clone(),
        persistence.clone(),
        Arc::new(checkpoints),
        clock,
        CacheConfig::new(100, 5_000)?,
    )?;
    let _write_policy = cache.attach(&store)?;

    // The subagent catalog over all of it (it registers its projection units on the registry).
    let subagents = SubagentRuntime::new(SubagentServices {
        sessions: Some(store.clone()),
        projections: Some(registry.clone()),
        persistence: Some(persistence.clone()),
        cache: Some(Arc::new(cache.clone())),
    })?;

    // A parent session with one turn, and a continuable child that does one turn of work.
    let meta = HeaderMeta { cwd: Some("/srv/agents/demo".to_owned()), ..HeaderMeta::default() };
    let parent = store.create(Some(SessionId::from("parent")), CreateOptions { seed: None, meta })?;
    run_turn(&parent, 1, "triage the failing build", "delegating to a child")?;
    let descriptor = ContinuableDescriptor {
        provider: "example".to_owned(),
        label: "triage the failing build".to_owned(),
        agent_provider: None,
        agent_model: None,
        persona: None,
        tool_filter: None,
    };
    let options = ChildOptions { id: Some(SessionId::from("child")), ..ChildOptions::default() };
    let child = subagent::create_continuable_child(&store, &parent, descriptor, options)?;
    run_turn(&child, 1, "look at the runner logs", "the runner image is stale")?;

    // The child goes cold: durable, then out of the live store.
    store.flush(child.id()).await?;
    store.detach(child.id());
    cache.settle().await;

    let rows = subagents.list_children(parent.id(), &CancellationToken::new()).await?;
    println!("children of {}: {}", parent.id(), serde_json::to_string_pretty(&rows)?);
    anyhow::ensure!(rows.len() == 1, "one child is listed");

    store.flush(parent.id()).await?;
    coordinator.close().await?;
    println!("store at {}", root.display());
    Ok(())
}
