//! The demo store of `apiproxy serve --demo`: a parent session with children in every catalog
//! row state, and a live child that keeps appending so a WebSocket client sees frames arrive.
//!
//! | Session | What `subagent.list demo-parent` shows |
//! | --- | --- |
//! | `demo-child-continuable` | a continuable child, inactive (cold) |
//! | `demo-child-oneshot` | a one-shot child, inactive (cold) |
//! | `demo-child-live` | a continuable child, running while it is inside a turn |
//! | `demo-child-settled` | a settled child without a descriptor: a `corrupt` diagnostic |
//! | `demo-fork` | an ordinary fork of the parent: not listed |

use std::{sync::Arc, time::Duration};

use apiproxy::{ApiProxy, ProxyError};
use serde_json::json;
use session_core::{CreateOptions, HeaderMeta, Session, SessionError, SessionId, StoreError, SurfaceIntent};

use super::turns::{append_turn, assistant_message, user_message};
use session_persistence::{PersistenceError, SessionPersistence};
use subagent::{ChildOptions, ContinuableDescriptor, OneShotDescriptor};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// The demo parent: one completed turn; the parent of every demo child and of the fork.
pub(crate) const DEMO_PARENT: &str = "demo-parent";
/// A continuable child with its descriptor and one completed turn; cold once seeded.
pub(crate) const DEMO_CONTINUABLE: &str = "demo-child-continuable";
/// A one-shot child with its descriptor and one completed turn; cold once seeded.
pub(crate) const DEMO_ONE_SHOT: &str = "demo-child-oneshot";
/// A continuable child that stays live and appends an event every two seconds.
pub(crate) const DEMO_LIVE: &str = "demo-child-live";
/// A one-shot child that ended its turn before its first step, so it has no descriptor: the
/// catalog lists it with a `corrupt` diagnostic.
pub(crate) const DEMO_SETTLED: &str = "demo-child-settled";
/// An ordinary fork of the parent with a turn of its own; the subagent catalog does not list it.
pub(crate) const DEMO_FORK: &str = "demo-fork";

/// How often the live child appends an event.
const TICK: Duration = Duration::from_secs(2);

fn session_error(error: SessionError) -> ProxyError {
    ProxyError::Session { message: format!("seeding the demo failed: {error}") }
}

fn other_error(error: impl std::fmt::Display) -> ProxyError {
    ProxyError::Session { message: format!("seeding the demo failed: {error}") }
}

/// A running demo: the live child's appender. Dropping it stops nothing; call [`Demo::stop`].
#[derive(Debug)]
pub(crate) struct Demo {
    stop: CancellationToken,
    appender: JoinHandle<()>,
    child: Arc<Session>,
}

impl Demo {
    /// Stops the live child's appender, waits for it, and closes the child's open turn so the
    /// stored demo stays healthy.
    pub(crate) async fn stop(self) {
        self.stop.cancel();
        let _ = self.appender.await;
        if self.child.has_open_turn() {
            let turn = self.child.open_turn().unwrap_or(0);
            let closed = self.child.append("step/end", &json!({"turn": turn, "step": 1}), None).and_then(|_| {
                self.child.append("turn/end", &json!({"turn": turn, "reason": {"kind": "completed"}}), None)
            });
            if let Err(error) = closed {
                tracing::warn!(%error, "the demo's live child could not close its turn");
            }
        }
    }
}

async fn park(proxy: &ApiProxy, session: &Arc<Session>) -> Result<(), ProxyError> {
    proxy.store().flush(session.id()).await.map_err(other_error)?;
    proxy.store().detach(session.id());
    Ok(())
}

async fn exists(proxy: &ApiProxy, persistence: &dyn SessionPersistence, id: &str) -> Result<bool, ProxyError> {
    let id = SessionId::from(id);
    if proxy.store().contains(&id) {
        return Ok(true);
    }
    match persistence.inspect(&id, &CancellationToken::new()).await {
        Ok(_) => Ok(true),
        Err(PersistenceError::NotFound { .. }) => Ok(false),
        Err(error) => Err(error.into()),
    }
}

/// The live session `id`, resumed from `persistence` (its crash repair committed) when it is
/// stored only. The demo is seeded before the gateway serves, so no request races the resume.
async fn live(proxy: &ApiProxy, persistence: &dyn SessionPersistence, id: &str) -> Result<Arc<Session>, ProxyError> {
    let id = SessionId::from(id);
    if let Some(session) = proxy.store().get(&id) {
        return Ok(session);
    }
    let loaded = persistence.load(&id, &CancellationToken::new()).await?;
    match proxy.store().create(Some(id.clone()), CreateOptions::resume(&loaded.header, loaded.events.to_vec())) {
        Ok(session) => Ok(session),
        Err(StoreError::AlreadyExists { .. }) => {
            proxy.store().get(&id).ok_or_else(|| other_error("the session vanished"))
        }
        Err(error) => Err(other_error(error)),
    }
}

/// Seeds the demo sessions (or resumes them from `persistence`, the gateway's, when the store
/// already has them), keeps the parent and the live child live, and starts the live child's
/// appender. Call it before the gateway serves.
pub(crate) async fn seed(proxy: &ApiProxy, persistence: &dyn SessionPersistence) -> Result<Demo, ProxyError> {
    let store = proxy.store();
    if !exists(proxy, persistence, DEMO_PARENT).await? {
        let cwd = proxy.config().default_cwd.clone();
        let meta = HeaderMeta { cwd: Some(cwd), ..HeaderMeta::default() };
        let parent = store
            .create(Some(SessionId::from(DEMO_PARENT)), session_core::CreateOptions { seed: None, meta })
            .map_err(other_error)?;
        append_turn(
            &parent,
            1,
            "The nightly build is red. What broke?",
            "The integration job fails on a missing fixture.",
        )
        .map_err(session_error)?;

        let continuable = ContinuableDescriptor {
            provider: "demo".to_owned(),
            label: "triage the failing build".to_owned(),
            agent_provider: None,
            agent_model: None,
            persona: None,
            tool_filter: None,
        };
        let options = |id: &str| ChildOptions { id: Some(SessionId::from(id)), ..ChildOptions::default() };
        let child = subagent::create_continuable_child(store, &parent, continuable.clone(), options(DEMO_CONTINUABLE))
            .map_err(other_error)?;
        append_turn(&child, 1, "Triage the failing build.", "The fixture directory was renamed.")
            .map_err(session_error)?;
        park(proxy, &child).await?;

        let one_shot =
            OneShotDescriptor { provider: "demo".to_owned(), label: Some("check the runner image".to_owned()) };
        let child = subagent::create_one_shot_child(store, &parent, one_shot.clone(), options(DEMO_ONE_SHOT))
            .map_err(other_error)?;
        let session = Arc::clone(child.session());
        session.append("turn/start", &json!({"turn": 1}), None).map_err(session_error)?;
        child.enter_first_step().map_err(other_error)?;
        session.append("step/start", &json!({"turn": 1, "step": 1}), None).map_err(session_error)?;
        let prompt = user_message("demo-oneshot-u1", "List the runner image's environment.");
        session.append("user/message", &prompt, Some(SurfaceIntent::append())).map_err(session_error)?;
        let answer = assistant_message(1, 1, "demo-oneshot-a1", "The image sets CI=true and NODE_ENV=test.");
        session.append("assistant/message", &answer, Some(SurfaceIntent::append())).map_err(session_error)?;
        session.append("step/end", &json!({"turn": 1, "step": 1}), None).map_err(session_error)?;
        session
            .append("turn/end", &json!({"turn": 1, "reason": {"kind": "completed"}}), None)
            .map_err(session_error)?;
        park(proxy, &session).await?;

        // Died before its first step: no descriptor was ever written.
        let child =
            subagent::create_one_shot_child(store, &parent, one_shot, options(DEMO_SETTLED)).map_err(other_error)?;
        let session = Arc::clone(child.session());
        session.append("turn/start", &json!({"turn": 1}), None).map_err(session_error)?;
        session
            .append("turn/end", &json!({"turn": 1, "reason": {"kind": "completed"}}), None)
            .map_err(session_error)?;
        park(proxy, &session).await?;

        let fork = store.fork(parent.id(), None, Some(SessionId::from(DEMO_FORK))).map_err(other_error)?;
        append_turn(&fork, 2, "Try the other fixture path.", "The other path works.").map_err(session_error)?;
        park(proxy, &fork).await?;

        subagent::create_continuable_child(
            store,
            &parent,
            ContinuableDescriptor { label: "watch the nightly rerun".to_owned(), ..continuable },
            options(DEMO_LIVE),
        )
        .map_err(other_error)?;
        proxy.store().flush(parent.id()).await.map_err(other_error)?;
    }
    live(proxy, persistence, DEMO_PARENT).await?;
    let child = live(proxy, persistence, DEMO_LIVE).await?;
    let stop = CancellationToken::new();
    let appender = tokio::spawn(keep_appending(Arc::clone(&child), stop.clone()));
    Ok(Demo { stop, appender, child })
}

/// Appends to the live child, one event per tick: each turn streams a few chunks and ends.
async fn keep_appending(child: Arc<Session>, stop: CancellationToken) {
    const WORDS: [&str; 6] = ["Rerun ", "started; ", "waiting ", "for ", "the ", "result. "];
    let mut ticks = tokio::time::interval(TICK);
    let mut turn = 1 + child.events().iter().filter(|event| event.kind == "turn/start").count() as u64;
    loop {
        let result = (|| -> Result<(), SessionError> {
            if !child.has_open_turn() {
                child.append("turn/start", &json!({"turn": turn}), None)?;
                child.append("step/start", &json!({"turn": turn, "step": 1}), None)?;
                return Ok(());
            }
            let n_chunks = child.events().iter().rev().take_while(|event| event.kind == "assistant/chunk").count();
            if n_chunks < WORDS.len() {
                let chunk = json!({"turn": turn, "step": 1, "chunk": {"type": "text-delta", "delta": WORDS[n_chunks]}});
                child.append("assistant/chunk", &chunk, None)?;
                return Ok(());
            }
            let message = assistant_message(turn, 1, &format!("{}-a{turn}", child.id()), &WORDS.concat());
            let last = child.len();
            let sources: Vec<u64> = (last - WORDS.len() as u64..last).collect();
            child.append("assistant/message", &message, Some(SurfaceIntent::append().with_sources(sources)))?;
            child.append("step/end", &json!({"turn": turn, "step": 1}), None)?;
            child.append("turn/end", &json!({"turn": turn, "reason": {"kind": "completed"}}), None)?;
            turn += 1;
            Ok(())
        })();
        if let Err(error) = result {
            tracing::warn!(%error, "the demo's live child stopped appending");
            return;
        }
        tokio::select! {
            () = stop.cancelled() => return,
            _ = ticks.tick() => {}
        }
    }
}

/// Ready-to-paste `curl` examples against `base` (such as `http://127.0.0.1:8420`).
pub(crate) fn curl_examples(base: &str, token: Option<&str>) -> String {
    let auth = token.map_or_else(String::new, |token| format!(" -H 'authorization: Bearer {token}'"));
    let call = |method: &str, payload: &str| {
        format!(
            "curl -s{auth} -H 'content-type: application/json' {base}/api/{method} \\\n  -d '{{\"type\":\"client-request\",\"rpcId\":\"1\",\"method\":\"{method}\",\"payload\":{payload}}}'"
        )
    };
    [
        "# The catalog of the demo parent (continuable, one-shot, live, and a corrupt diagnostic):".to_owned(),
        call("subagent.list", &format!("{{\"parentSessionId\":\"{DEMO_PARENT}\"}}")),
        "# Every session, newest first:".to_owned(),
        call("session.list", "{}"),
        "# The tail page of the live child's history (it appends every 2 s):".to_owned(),
        call("session.history", &format!("{{\"sessionId\":\"{DEMO_LIVE}\",\"maxMessages\":5}}")),
        "# A child's history through the catalog:".to_owned(),
        call(
            "subagent.history",
            &format!("{{\"parentSessionId\":\"{DEMO_PARENT}\",\"childSessionId\":\"{DEMO_CONTINUABLE}\",\"mode\":\"continuable\"}}"),
        ),
        "# Watch frames arrive (needs websocat):".to_owned(),
        format!("websocat {}/api/events.mux", base.replacen("http", "ws", 1)),
    ]
    .join("\n")
}
