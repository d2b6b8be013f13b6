//! The `subagent.*` methods (reference 04 §8): the catalog (`subagent.list`), a child's history
//! (`subagent.history`), and child creation for out-of-process runtimes (`subagent.spawn`, with
//! the header and descriptor placement of reference 03 §2.5).
//!
//! The catalog is `subagent::SubagentRuntime::list_children`; this module only maps it to the
//! wire, applies the owner partition (a parent of another owner lists like an unknown one), and
//! replaces each child's `activity` with "running" only for a live child inside an open turn.

use std::sync::Arc;

use serde_json::Value;
use session_core::{SessionEvent, SessionHeader, SessionId, json::MAX_SAFE_INTEGER};
use subagent::{
    ChildOptions, ContinuableDescriptor, CreateChildError, Descriptor, OneShotDescriptor, Scope, SubagentError,
    SubagentErrorCode,
};
use tokio_util::sync::CancellationToken;

use super::{Presence, presence};
use crate::{
    access::Caller,
    history::{self, ReadError},
    state::Shared,
    wire::error::refused_as_too_large,
    wire::{
        DiagnosticReason, ErrorKind, PathSegment, RpcError, Spawned, SubagentCatalog, SubagentListEntry,
        payload::{SubagentHistoryRequest, SubagentListRequest, SubagentMode, SubagentSpawnRequest},
        to_value,
    },
};

/// The provider recorded in descriptors of children spawned through the gateway.
pub(crate) const GATEWAY_PROVIDER: &str = "apiproxy";

/// The dedicated face of a missing projection registry (reference 04 §11.2).
pub(crate) const CATALOG_UNAVAILABLE: &str = "subagent catalog is unavailable: this deployment does not mount the sessionProjections registry (load @monotykamary/dsh-session-projection)";

/// Maps a catalog failure to the wire; backend text is never shown.
pub(crate) fn catalog_error(error: &SubagentError) -> RpcError {
    match error.code() {
        Some(SubagentErrorCode::Cancelled) => RpcError::cancelled("subagent catalog read was cancelled"),
        Some(SubagentErrorCode::ProjectionsUnavailable) => RpcError::internal(CATALOG_UNAVAILABLE),
        _ => {
            tracing::error!(%error, "subagent catalog read failed");
            RpcError::internal("subagent catalog read failed")
        }
    }
}

fn wire_reason(reason: subagent::DiagnosticReason) -> DiagnosticReason {
    match reason {
        subagent::DiagnosticReason::Corrupt => DiagnosticReason::Corrupt,
        subagent::DiagnosticReason::Unsupported => DiagnosticReason::Unsupported,
        subagent::DiagnosticReason::Unavailable => DiagnosticReason::Unavailable,
    }
}

fn wire_mode(mode: SubagentMode) -> subagent::SubagentMode {
    match mode {
        SubagentMode::OneShot => subagent::SubagentMode::OneShot,
        SubagentMode::Continuable => subagent::SubagentMode::Continuable,
    }
}

/// The wire row of a catalog entry, with the gateway's `activity`: `running` iff the catalog
/// found the child's agent running (live and inside an open turn, `subagent::AgentStatus`), and
/// its `activeMs` from the timing value the catalog read on the same rung.
pub(crate) fn wire_entry(entry: &subagent::SubagentListEntry) -> SubagentListEntry {
    match entry {
        subagent::SubagentListEntry::Child(child) => {
            let running = child.status == subagent::AgentStatus::Running;
            SubagentListEntry::Child {
                id: child.id.to_string(),
                mode: child.mode.mode().as_str(),
                label: child.mode.label().map(str::to_owned),
                activity: if running { "running" } else { "inactive" },
                has_children: child.has_children,
                active_ms: child.timing.map(|timing| timing.active_ms()),
            }
        }
        subagent::SubagentListEntry::Diagnostic(diagnostic) => {
            SubagentListEntry::Diagnostic { id: diagnostic.id.to_string(), reason: wire_reason(diagnostic.reason) }
        }
    }
}

/// `subagent.list` → `{entries, parentAvailable}`: one enumeration, authorized before any read
/// (a parent the caller may not see lists like an unknown one, without a log read).
pub(super) async fn list(
    shared: &Shared,
    caller: &Caller,
    request: SubagentListRequest,
    cancel: &CancellationToken,
) -> Result<Value, RpcError> {
    let parent = SessionId::from(request.parent_session_id.as_str());
    let sees = |header: &SessionHeader| caller.sees(header);
    let entries = shared
        .subagents
        .list_children_in(&parent, scope(caller, &sees), cancel)
        .await
        .map_err(|error| catalog_error(&error))?;
    let parent_available = shared.store.get(&parent).is_some_and(|session| caller.sees(session.header()));
    let catalog = SubagentCatalog { entries: entries.iter().map(wire_entry).collect(), parent_available };
    Ok(to_value(&catalog))
}

/// The catalog scope of `caller`: everything for the operator tier, else its own sessions.
fn scope<'a>(caller: &Caller, sees: &'a (dyn Fn(&SessionHeader) -> bool + Send + Sync)) -> Scope<'a> {
    if caller.owner.is_none() { Scope::All } else { Scope::Only(sees) }
}

/// `subagent.history` → `{events, hasMore, projections?}`: authorized by catalog membership with
/// the same mode, then read exactly like `session.history`.
pub(super) async fn history(
    shared: &Shared,
    caller: &Caller,
    request: SubagentHistoryRequest,
    cancel: &CancellationToken,
) -> Result<Value, RpcError> {
    let (parent_id, child_id) = (request.parent_session_id.as_str(), request.child_session_id.as_str());
    let mode = request.mode.as_str();
    let parent = SessionId::from(parent_id);
    // The child's own catalog row, read alone (its siblings are not read), from one enumeration
    // that authorizes the parent and the child before any read.
    let sees = |header: &SessionHeader| caller.sees(header);
    let entry = shared
        .subagents
        .list_child_in(&parent, &SessionId::from(child_id), scope(caller, &sees), cancel)
        .await
        .map_err(|error| catalog_error(&error))?;
    match &entry {
        Some(subagent::SubagentListEntry::Child(child)) if child.mode.mode() == wire_mode(request.mode) => {}
        Some(subagent::SubagentListEntry::Diagnostic(diagnostic)) => {
            let reason = wire_reason(diagnostic.reason);
            return Err(RpcError::new(
                ErrorKind::SubagentCatalogDiagnostic {
                    parent_session_id: parent_id.to_owned(),
                    child_session_id: child_id.to_owned(),
                    reason,
                },
                format!("subagent \"{child_id}\" is {}", reason.as_str()),
            ));
        }
        _ => return Err(RpcError::subagent_not_found(parent_id, child_id, mode)),
    }
    let query = history::PageQuery { before_seq: request.before_seq, max_messages: request.max_messages };
    let read = history::read_page(shared, caller, child_id, query, cancel).await.map_err(|error| match error {
        ReadError::NotFound => RpcError::new(
            ErrorKind::SubagentNotFound {
                parent_session_id: parent_id.to_owned(),
                child_session_id: child_id.to_owned(),
            },
            "subagent disappeared during history read",
        ),
        ReadError::Cancelled => RpcError::cancelled("subagent history read was cancelled"),
        ReadError::Busy => history::busy(),
        ReadError::Failed(error) => {
            tracing::error!(session = child_id, %error, "reading a subagent's history failed");
            RpcError::internal("subagent history read failed")
        }
    })?;
    if cancel.is_cancelled() {
        return Err(RpcError::cancelled("subagent history read was cancelled"));
    }
    if read.header.parent_session.as_ref().map(SessionId::as_str) != Some(parent_id) {
        return Err(RpcError::new(
            ErrorKind::SubagentUnauthorized { child_session_id: child_id.to_owned() },
            "subagent parent changed during history read",
        ));
    }
    Ok(to_value(&read.page))
}

/// `session-conflict` for a child id that is taken: `existingCwd` only for a session the caller
/// sees.
fn taken(id: &SessionId, requested_cwd: &str, existing_cwd: Option<String>) -> RpcError {
    RpcError::new(
        ErrorKind::SessionConflict {
            session_id: id.to_string(),
            requested_cwd: requested_cwd.to_owned(),
            existing_cwd,
        },
        format!("session \"{id}\" already exists"),
    )
}

/// `subagent.spawn` → `{childSessionId, mode}`: creates a live child of a live parent the caller
/// owns. A continuable child's descriptor is in its creation seed; a one-shot child's is appended
/// by the gateway right before the child's first `step/start` arrives through `session.append`.
pub(super) async fn spawn(
    shared: &Shared,
    caller: &Caller,
    request: SubagentSpawnRequest,
    cancel: &CancellationToken,
) -> Result<Value, RpcError> {
    let parent_id = request.parent_session_id.as_str();
    let Some(parent) = shared.store.get(&SessionId::from(parent_id)).filter(|parent| caller.sees(parent.header()))
    else {
        return Err(RpcError::new(
            ErrorKind::SubagentParentUnavailable { parent_session_id: parent_id.to_owned() },
            format!("parent session \"{parent_id}\" is not live"),
        ));
    };
    let requested_cwd = parent.header().cwd.clone().unwrap_or_else(|| shared.config.default_cwd.clone());
    // An explicit child id is checked against the live store and the stored logs, and taken, in
    // one step: no live child can shadow a stored session.
    let explicit = request.child_session_id.as_deref().map(SessionId::from);
    let _taking = match &explicit {
        Some(id) => Some(shared.id_locks.lock(id).await),
        None => None,
    };
    if let Some(id) = &explicit {
        match presence(shared, caller, id, cancel).await? {
            Presence::Free => {}
            Presence::Live(session) => return Err(taken(id, &requested_cwd, session.header().cwd.clone())),
            Presence::Stored(header) => return Err(taken(id, &requested_cwd, header.cwd.clone())),
            // Whoever's it is, the answer is the same, with nothing about the session in it.
            Presence::Hidden | Presence::Damaged(_) => return Err(taken(id, &requested_cwd, None)),
        }
    }
    let provider = request.provider.clone().unwrap_or_else(|| GATEWAY_PROVIDER.to_owned());
    let options = ChildOptions {
        id: request.child_session_id.as_deref().map(SessionId::from),
        fork: request.fork,
        agent_preset: parent.header().agent_preset.clone(),
        ..ChildOptions::default()
    };
    let created = match request.mode {
        SubagentMode::Continuable => {
            let descriptor = ContinuableDescriptor {
                provider,
                label: request.label.clone().unwrap_or_default(),
                agent_provider: None,
                agent_model: None,
                persona: None,
                tool_filter: None,
            };
            check_descriptor_size(shared, &request, &Descriptor::Continuable(descriptor.clone()))?;
            subagent::create_continuable_child(&shared.store, &parent, descriptor, options)
        }
        SubagentMode::OneShot => {
            let descriptor = OneShotDescriptor { provider, label: request.label.clone() };
            // A one-shot child's descriptor is appended later, at its first step: check it now,
            // so a child is never created whose descriptor could not be stored.
            check_descriptor_size(shared, &request, &Descriptor::OneShot(descriptor.clone()))?;
            subagent::create_one_shot_child(&shared.store, &parent, descriptor, options).map(|child| {
                let session = Arc::clone(child.session());
                shared.pending_one_shots.lock().insert(session.id().clone(), Arc::new(child));
                session
            })
        }
    };
    match created {
        Ok(child) => Ok(to_value(&Spawned { child_session_id: child.id().to_string(), mode: request.mode.as_str() })),
        Err(CreateChildError::DuplicateChild { id }) => {
            let existing_cwd = shared
                .store
                .get(&id)
                .filter(|session| caller.sees(session.header()))
                .and_then(|session| session.header().cwd.clone());
            Err(taken(&id, &requested_cwd, existing_cwd))
        }
        // The child's header comes from the parent (a log written before the bounds may exceed
        // them); nothing was created.
        Err(CreateChildError::Store(ref error)) if let Some(too_large) = error.too_large() => {
            Err(refused_as_too_large("subagent.spawn", too_large, vec![PathSegment::from("parentSessionId")]))
        }
        Err(error) => {
            tracing::error!(parent = parent_id, %error, "spawning a subagent failed");
            Err(RpcError::internal(format!("failed to spawn a subagent of \"{parent_id}\"")))
        }
    }
}

/// Refuses a spawn whose `subagent/descriptor` event would be over the event size bound (the
/// gateway's `max_event_bytes`, at most the session's own), before
/// anything is created. The event is measured with the widest seq and time it could get; the
/// issue names the longer of the caller's `label` and `provider`, which make up its size.
fn check_descriptor_size(
    shared: &Shared,
    request: &SubagentSpawnRequest,
    descriptor: &Descriptor,
) -> Result<(), RpcError> {
    let widest = -(MAX_SAFE_INTEGER as i64);
    let event = SessionEvent::new(subagent::DESCRIPTOR_EVENT, MAX_SAFE_INTEGER, widest, descriptor.to_data());
    shared.config.check_event_size(&event).map_err(|too_large| {
        let label_len = request.label.as_ref().map_or(0, String::len);
        let provider_len = request.provider.as_ref().map_or(0, String::len);
        let key = if label_len >= provider_len { "label" } else { "provider" };
        refused_as_too_large("subagent.spawn", &too_large, vec![PathSegment::from(key)])
    })
}
