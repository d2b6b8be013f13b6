//! Resume authorization (reference 03 §6.2 steps 1–5) and the delivery hand-off.

use std::sync::{
    Arc,
    atomic::{AtomicU64, Ordering},
};

use serde_json::json;
use session_core::Session;
use subagent::{ContinuationDelivery, ResumeAuthorization, SubagentError, SubagentRuntime, SubagentServices, followup};
use tokio_util::sync::CancellationToken;

use crate::support::*;

fn no_state_message(child: &str) -> String {
    format!(
        "subagent \"{child}\" has no supported continuation state and cannot be resumed; do not retry send_message with this id"
    )
}

#[test]
fn another_session_is_not_the_parent() {
    run_each(&NO_CACHE, async |h| {
        let parent = h.parent("p");
        let stranger = h.parent("stranger");
        h.start_continuable(&parent, "c", "mine").await;
        let error = h.runtime.authorize_resume(&stranger, &id("c"), &token()).await.unwrap_err();
        assert_eq!(error.code().unwrap().as_str(), "UNAUTHORIZED");
        assert_eq!(error.to_string(), "subagent \"c\" belongs to another parent session");
    });
}

#[test]
fn a_parent_that_is_not_the_live_instance_is_refused() {
    run_each(&NO_CACHE, async |h| {
        let parent = h.parent("p");
        h.start_continuable(&parent, "c", "mine").await;
        // Another object under the parent's id is not the parent.
        let impostor = Session::create((**parent.header()).clone(), None, h.clock.clone()).unwrap();
        let error = h.runtime.authorize_resume(&impostor, &id("c"), &token()).await.unwrap_err();
        assert!(matches!(error, SubagentError::ParentNotLive { .. }));
        assert_eq!(error.to_string(), "subagent \"c\" delivery requires the exact live parent agent");
        assert_eq!(error.code().unwrap().as_str(), "UNAUTHORIZED");
        assert!(h.runtime.authorize_resume(&parent, &id("c"), &token()).await.is_ok());
        // A parent that left the store is no longer live.
        h.settle(&parent).await;
        assert!(matches!(
            h.runtime.authorize_resume(&parent, &id("c"), &token()).await,
            Err(SubagentError::ParentNotLive { .. })
        ));
    });
}

#[test]
fn a_one_shot_child_is_not_resumable() {
    run_each(&NO_CACHE, async |h| {
        let parent = h.parent("p");
        h.start_one_shot(&parent, "c", Some("once")).await;
        let error = h.runtime.authorize_resume(&parent, &id("c"), &token()).await.unwrap_err();
        assert_eq!(error.code().unwrap().as_str(), "NOT_RESUMABLE");
        assert_eq!(error.to_string(), no_state_message("c"));
    });
}

#[test]
fn an_unknown_child_is_unavailable() {
    run_each(&NO_CACHE, async |h| {
        let parent = h.parent("p");
        let error = h.runtime.authorize_resume(&parent, &id("ghost"), &token()).await.unwrap_err();
        assert!(matches!(error, SubagentError::Unavailable { .. }));
        assert_eq!(error.code().unwrap().as_str(), "NOT_RESUMABLE");
        assert_eq!(error.to_string(), "subagent \"ghost\" is unavailable");
    });
}

/// A malformed current-version descriptor is NOT_RESUMABLE with the parse error as its source
/// (the reference let it escape uncoded).
#[test]
fn a_malformed_own_descriptor_is_not_resumable() {
    run_each(&NO_CACHE, async |h| {
        let parent = h.parent("p");
        h.author(child_header("c", "p"), child_events(json!({"version": 2, "mode": "continuable", "provider": "p"})))
            .await;
        let error = h.runtime.authorize_resume(&parent, &id("c"), &token()).await.unwrap_err();
        assert_eq!(error.code().unwrap().as_str(), "NOT_RESUMABLE");
        assert_eq!(error.to_string(), no_state_message("c"));
        let source = std::error::Error::source(&error).expect("the parse error is the source").to_string();
        assert_eq!(source, "persisted subagent descriptor label must be a string");
        h.author(child_header("d", "p"), child_events(json!({"version": 3}))).await;
        assert_code(h.runtime.authorize_resume(&parent, &id("d"), &token()).await, "NOT_RESUMABLE");
        h.author(child_header("e", "p"), stored_turn(0, 1)).await;
        assert_code(h.runtime.authorize_resume(&parent, &id("e"), &token()).await, "NOT_RESUMABLE");
    });
}

#[test]
fn resume_needs_persistence_and_honours_cancellation() {
    run_each(&NO_CACHE, async |h| {
        let parent = h.parent("p");
        h.start_continuable(&parent, "c", "x").await;
        let without = SubagentRuntime::new(SubagentServices { persistence: None, ..h.services() }).unwrap();
        let error = without.authorize_resume(&parent, &id("c"), &token()).await.unwrap_err();
        assert_eq!(error.code().unwrap().as_str(), "PERSISTENCE_UNAVAILABLE");
        assert_eq!(
            error.to_string(),
            "continuable subagents require session persistence (load a dsh-session-persistence backend)"
        );
        let cancel = token();
        cancel.cancel();
        assert_code(h.runtime.authorize_resume(&parent, &id("c"), &cancel).await, "CANCELLED");
        assert_eq!(h.reads("c"), 0);
        let cancel = token();
        h.persistence.set_read_fault("c", Some(ReadFault::CancelThenFail(cancel.clone())));
        assert_code(h.runtime.authorize_resume(&parent, &id("c"), &cancel).await, "CANCELLED");
    });
}

#[derive(Debug, Default)]
struct RecordingDelivery {
    deliveries: AtomicU64,
}

#[async_trait::async_trait]
impl ContinuationDelivery for RecordingDelivery {
    type Accepted = String;
    type Error = SubagentError;

    async fn deliver(
        &self,
        _parent: &Arc<Session>,
        authorization: ResumeAuthorization,
        _cancel: &CancellationToken,
    ) -> Result<String, SubagentError> {
        self.deliveries.fetch_add(1, Ordering::SeqCst);
        Ok(format!("message for {}", authorization.descriptor.label))
    }
}

#[test]
fn followup_delivers_only_after_authorization() {
    run_each(&NO_CACHE, async |h| {
        let parent = h.parent("p");
        let stranger = h.parent("stranger");
        h.start_continuable(&parent, "c", "delegated").await;
        let delivery = RecordingDelivery::default();
        let accepted = followup(&h.runtime, &parent, &id("c"), &delivery, &token()).await.unwrap();
        assert_eq!(accepted, "message for delegated");
        assert_code(followup(&h.runtime, &stranger, &id("c"), &delivery, &token()).await, "UNAUTHORIZED");
        assert_eq!(delivery.deliveries.load(Ordering::SeqCst), 1);
    });
}
