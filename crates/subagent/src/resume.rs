//! Resume authorization (reference 03 §6.2 steps 1–5): who may continue a stored child, and with
//! which composition. Delivery itself (rebuilding the agent, queueing the message) belongs to the
//! host, behind [`ContinuationDelivery`].
//!
//! Unlike the listing, resume folds the FIRST descriptor of the child's OWN suffix
//! (`events[seedLength..]`): a seed-replayed ancestor descriptor or a later second descriptor
//! never changes what a child may do. A malformed current-version descriptor is `NOT_RESUMABLE`
//! (the reference let its parse error escape uncoded; reference 03 §10.2).

use std::sync::Arc;

use session_core::{Session, SessionEvent, SessionHeader, SessionId};
use session_persistence::{ScanSink, inspect_into};
use tokio_util::sync::CancellationToken;

use crate::{
    descriptor::{ContinuableDescriptor, DESCRIPTOR_EVENT, Descriptor, fold_first_descriptor},
    error::SubagentError,
    runtime::{SubagentRuntime, SubagentServices},
};

/// Proof that a parent may continue a child, with what a host needs to rebuild it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResumeAuthorization {
    /// The stored header of the child, as inspected.
    pub child: Arc<SessionHeader>,
    /// The first descriptor of the child's own suffix.
    pub descriptor: ContinuableDescriptor,
}

impl ResumeAuthorization {
    /// The id of the authorized child.
    pub fn child_id(&self) -> &SessionId {
        &self.child.id
    }

    /// The model route a resumed child runs with: only what the descriptor declared (no invented
    /// route; resumed-route defaults apply to the rest).
    pub fn agent_provider(&self) -> Option<&str> {
        self.descriptor.agent_provider.as_deref()
    }

    /// The model a resumed child runs with, if the descriptor declared one (see
    /// [`ResumeAuthorization::agent_provider`]).
    pub fn agent_model(&self) -> Option<&str> {
        self.descriptor.agent_model.as_deref()
    }
}

/// The host's side of a continuation: rebuild (or wake) the child and hand it a message.
///
/// [`followup`] calls it only after [`SubagentRuntime::authorize_resume`] succeeded. The host
/// re-checks the live child's `parentSession` against the exact live parent in its final
/// admission span (reference 03 §6.2 step 7).
#[async_trait::async_trait]
pub trait ContinuationDelivery: Send + Sync {
    /// What an accepted delivery returns, such as the queued message's id.
    type Accepted: Send;
    /// The host's failures; authorization failures convert into it.
    type Error: From<SubagentError> + Send;

    /// Rebuilds or wakes the authorized child and hands it the parent's message. Runs after the
    /// authorization, so the host must re-check the live child's parent before admitting it;
    /// `cancel` is the caller's token.
    async fn deliver(
        &self,
        parent: &Arc<Session>,
        authorization: ResumeAuthorization,
        cancel: &CancellationToken,
    ) -> Result<Self::Accepted, Self::Error>;
}

/// Authorizes `parent` to continue `child`, then hands the authorization to `delivery`.
pub async fn followup<D: ContinuationDelivery + ?Sized>(
    runtime: &SubagentRuntime,
    parent: &Arc<Session>,
    child: &SessionId,
    delivery: &D,
    cancel: &CancellationToken,
) -> Result<D::Accepted, D::Error> {
    let authorization = runtime.authorize_resume(parent, child, cancel).await?;
    delivery.deliver(parent, authorization, cancel).await
}

/// Keeps the descriptor events of a streamed log (there is normally one), nothing else.
#[derive(Default)]
pub(crate) struct DescriptorEvents {
    pub(crate) events: Vec<Arc<SessionEvent>>,
}

impl ScanSink for DescriptorEvents {
    fn event(&mut self, event: Arc<SessionEvent>) -> session_persistence::Result<()> {
        if event.kind == DESCRIPTOR_EVENT {
            self.events.push(event);
        }
        Ok(())
    }

    fn restart(&mut self) -> bool {
        self.events.clear();
        true
    }
}

fn check_cancel(cancel: &CancellationToken) -> Result<(), SubagentError> {
    if cancel.is_cancelled() { Err(SubagentError::ResumeCancelled) } else { Ok(()) }
}

pub(crate) async fn authorize(
    services: &SubagentServices,
    parent: &Arc<Session>,
    child: &SessionId,
    cancel: &CancellationToken,
) -> Result<ResumeAuthorization, SubagentError> {
    let persistence = services.persistence.as_ref().ok_or(SubagentError::PersistenceUnavailable)?;
    check_cancel(cancel)?;
    let read = inspect_into(persistence.as_ref(), child, cancel, DescriptorEvents::default());
    let outcome = tokio::select! {
        biased;
        () = cancel.cancelled() => return Err(SubagentError::ResumeCancelled),
        outcome = read => outcome,
    };
    let (descriptors, summary) = match outcome {
        Ok(read) => read,
        Err(_) if cancel.is_cancelled() => return Err(SubagentError::ResumeCancelled),
        Err(source) => return Err(SubagentError::Unavailable { id: child.clone(), source }),
    };
    check_cancel(cancel)?;

    // Authorize the stored header before folding: only the durable direct parent, and only as
    // the exact live session of the store.
    let is_exact_live_parent = services
        .sessions
        .as_ref()
        .and_then(|sessions| sessions.get(parent.id()))
        .is_some_and(|live| Arc::ptr_eq(&live, parent));
    if !is_exact_live_parent {
        return Err(SubagentError::ParentNotLive { id: child.clone() });
    }
    let header = summary.header;
    if header.parent_session.as_ref() != Some(parent.id()) {
        return Err(SubagentError::ForeignParent { id: child.clone() });
    }

    // The first descriptor of the own suffix, through the crate's one first-wins fold.
    let own_suffix_start = header.own_suffix_start();
    let own = descriptors.events.iter().filter(|event| event.seq >= own_suffix_start).map(|event| &**event);
    let no_state = |source| SubagentError::NoContinuationState { id: child.clone(), source };
    match fold_first_descriptor(own).map_err(|error| no_state(Some(error)))? {
        Some(Descriptor::Continuable(descriptor)) => Ok(ResumeAuthorization { child: header, descriptor }),
        // None, another version, or a one-shot child: nothing to continue.
        Some(Descriptor::OneShot(_)) | None => Err(no_state(None)),
    }
}
