//! The `session.*` methods: list, history, create (with explicit-id adoption and cold resume),
//! fork, and the out-of-process runtime's append and release.

use std::sync::Arc;

use serde_json::Value;
use session_core::{
    CreateOptions, HeaderField, HeaderMeta, JsonData, MAX_EVENT_BYTES, Oversized, Session, SessionEvent, SessionHeader,
    SessionId, StoreError, TooLarge,
};
use session_persistence::PersistenceError;
use tokio_util::sync::CancellationToken;

use super::{Presence, presence};
use crate::{
    access::Caller,
    history::{self, ReadError},
    state::Shared,
    wire::error::{refused_as_too_large, rejected, rejected_as_too_large},
    wire::to_value,
    wire::{
        Appended, Created, ErrorKind, Flushed, Forked, PathSegment, Released, RpcError,
        payload::{AppendRequest, CreateRequest, ForkRequest, HistoryRequest, ReleaseRequest},
    },
};

/// The subagent ownership fence (reference 04 §5.2, decided by `header.origin` alone): a child is
/// driven through subagent routing, so a generic control must name the child's parent.
pub(super) fn fence(header: &SessionHeader, named_parent: Option<&str>) -> Result<(), RpcError> {
    if header.is_subagent() && named_parent != header.parent_session.as_ref().map(SessionId::as_str) {
        return Err(RpcError::owned_by_subagent_routing(header.id.as_str()));
    }
    Ok(())
}

pub(super) fn read_error(id: &str, error: ReadError, what: &str) -> RpcError {
    match error {
        ReadError::NotFound => RpcError::session_not_found(id),
        ReadError::Cancelled => RpcError::cancelled(format!("{what} was cancelled")),
        ReadError::Busy => history::busy(),
        ReadError::Failed(error) => {
            tracing::error!(session = id, %error, "reading a session failed");
            RpcError::internal(format!("history unavailable for session \"{id}\""))
        }
    }
}

/// `session.history` → `{events, hasMore, projections?}`.
pub(super) async fn history(
    shared: &Shared,
    caller: &Caller,
    request: HistoryRequest,
    cancel: &CancellationToken,
) -> Result<Value, RpcError> {
    let id = request.session_id.as_str();
    let query = history::PageQuery { before_seq: request.before_seq, max_messages: request.max_messages };
    let read = history::read_page(shared, caller, id, query, cancel)
        .await
        .map_err(|error| read_error(id, error, "session history read"))?;
    Ok(to_value(&read.page))
}

fn created(header: &SessionHeader) -> Value {
    to_value(&Created { session_id: header.id.to_string(), agent_preset: header.agent_preset.clone() })
}

/// The checks an explicit-id `session.create` makes before adopting an existing session.
fn check_adoptable(caller: &Caller, header: &SessionHeader, request: &CreateRequest) -> Result<(), RpcError> {
    let id = header.id.as_str();
    if !caller.sees(header) {
        return Err(RpcError::session_not_found(id));
    }
    fence(header, None)?;
    if let Some(cwd) = &request.cwd
        && header.cwd.as_ref() != Some(cwd)
    {
        return Err(RpcError::new(
            ErrorKind::SessionConflict {
                session_id: id.to_owned(),
                requested_cwd: cwd.clone(),
                existing_cwd: header.cwd.clone(),
            },
            format!("session \"{id}\" already exists with a different cwd"),
        ));
    }
    if let Some(preset) = &request.agent_preset
        && header.agent_preset.as_ref() != Some(preset)
    {
        return Err(RpcError::new(
            ErrorKind::AgentPresetConflict {
                session_id: id.to_owned(),
                requested_preset: preset.clone(),
                existing_preset: header.agent_preset.clone(),
            },
            format!("session \"{id}\" already exists with a different agent preset"),
        ));
    }
    Ok(())
}

/// Loads a cold session (committing any crash repair) and publishes it live again.
async fn resume(shared: &Shared, id: &SessionId, cancel: &CancellationToken) -> Result<Arc<Session>, RpcError> {
    let failed = |error: &dyn std::fmt::Display| {
        tracing::error!(session = %id, %error, "resuming a session failed");
        RpcError::internal(format!("resume failed for session \"{id}\""))
    };
    let Some(persistence) = &shared.persistence else { return Err(RpcError::session_not_found(id.as_str())) };
    let loaded = match persistence.load(id, cancel).await {
        Ok(loaded) => loaded,
        Err(PersistenceError::NotFound { .. }) => return Err(RpcError::session_not_found(id.as_str())),
        Err(PersistenceError::Cancelled) => return Err(RpcError::cancelled("session resume was cancelled")),
        // Its stored log ends inside a turn that a live writer elsewhere holds: not this gateway's to close.
        Err(PersistenceError::Held { holder, .. }) => {
            return Err(RpcError::new(
                ErrorKind::AgentBusy {
                    reason: format!("another gateway or host holds this session live inside a turn ({holder})"),
                },
                format!("session \"{id}\" is held live elsewhere"),
            ));
        }
        Err(error) => return Err(failed(&error)),
    };
    match shared.store.create(Some(id.clone()), CreateOptions::resume(&loaded.header, loaded.events.to_vec())) {
        Ok(session) => Ok(session),
        // Someone resumed it first: that live session is the one.
        Err(StoreError::AlreadyExists { .. }) => shared.store.get(id).ok_or_else(|| failed(&"the session vanished")),
        Err(error) => Err(failed(&error)),
    }
}

/// `session.create` → `{sessionId, agentPreset?}`.
pub(super) async fn create(
    shared: &Shared,
    caller: &Caller,
    request: CreateRequest,
    cancel: &CancellationToken,
) -> Result<Value, RpcError> {
    if let Some(workspace_id) = &request.workspace_id {
        return Err(RpcError::new(
            ErrorKind::WorkspaceNotFound { workspace_id: workspace_id.clone() },
            format!("workspace \"{workspace_id}\" not found"),
        ));
    }
    let explicit = request.session_id.is_some();
    let id = SessionId::from(request.session_id.clone().unwrap_or_else(|| format!("session-{}", uuid::Uuid::new_v4())));
    let meta = HeaderMeta {
        cwd: Some(request.cwd.clone().unwrap_or_else(|| shared.config.default_cwd.clone())),
        agent_preset: request.agent_preset.clone(),
        owner: caller.owner.clone(),
        ..HeaderMeta::default()
    };
    // Checking the id and taking it are one step: nothing else makes this id live meanwhile.
    let _taking = shared.id_locks.lock(&id).await;
    match presence(shared, caller, &id, cancel).await? {
        Presence::Free => {}
        // An explicit id names a session to adopt: live as it is, stored by resuming it. A
        // minted id that is taken is a collision that never happens in practice.
        Presence::Live(session) if explicit => {
            check_adoptable(caller, session.header(), &request)?;
            return Ok(created(session.header()));
        }
        Presence::Stored(header) if explicit => {
            check_adoptable(caller, &header, &request)?;
            let session = resume(shared, &id, cancel).await?;
            return Ok(created(session.header()));
        }
        // Another owner's id answers as the reference has it, from the header alone (no read).
        Presence::Hidden if explicit => return Err(RpcError::session_not_found(id.as_str())),
        Presence::Damaged(error) if explicit => {
            tracing::error!(session = %id, %error, "reading the header of a session to adopt failed");
            return Err(RpcError::internal(format!("resume failed for session \"{id}\"")));
        }
        _ => return Err(RpcError::internal(format!("failed to create session \"{id}\""))),
    }
    match shared.store.create(Some(id.clone()), CreateOptions { seed: None, meta }) {
        Ok(session) => Ok(created(session.header())),
        // The payload's fields were checked against their bounds already; this also covers
        // what the gateway filled in.
        Err(ref error) if let Some(too_large) = error.too_large() => {
            Err(refused_as_too_large("session.create", too_large, create_path(too_large)))
        }
        Err(error) => {
            tracing::error!(session = %id, %error, "creating a session failed");
            Err(RpcError::internal(format!("failed to create session \"{id}\"")))
        }
    }
}

/// `session.fork` → `{sessionId}`: the seed runs through the first `turn/end` at or after `atSeq`
/// (default: the last one) and the out-of-band events after it, up to the next `turn/start`.
pub(super) async fn fork(
    shared: &Shared,
    caller: &Caller,
    request: ForkRequest,
    cancel: &CancellationToken,
) -> Result<Value, RpcError> {
    let id = request.session_id.as_str();
    let cut = history::read(shared, caller, id, false, cancel).await.map_err(|error| match error {
        ReadError::Failed(error) => {
            tracing::error!(session = id, %error, "reading a fork source failed");
            RpcError::internal(format!("fork source unavailable for session \"{id}\""))
        }
        other => read_error(id, other, "session fork"),
    })?;
    let events = &cut.events[..cut.len];
    let last_turn_end = events.iter().rposition(|event| event.kind == "turn/end");
    let boundary = match request.at_seq {
        None => last_turn_end,
        Some(at) => events.iter().position(|event| event.seq >= at && event.kind == "turn/end").or_else(|| {
            let past_end = events.last().is_none_or(|last| at > last.seq);
            if past_end { last_turn_end } else { None }
        }),
    };
    let Some(boundary) = boundary else {
        let message = match (request.at_seq, events.last()) {
            (Some(at), Some(last)) if at <= last.seq => {
                format!("session \"{id}\" has not completed the turn containing event {at}")
            }
            _ => format!("session \"{id}\" has no completed turn to fork from"),
        };
        return Err(RpcError::new(ErrorKind::ForkUnavailable { session_id: id.to_owned() }, message));
    };
    let end = events[boundary + 1..]
        .iter()
        .position(|event| event.kind == "turn/start")
        .map_or(events.len(), |offset| boundary + 1 + offset);
    let child_id = SessionId::from(format!("session-{}", uuid::Uuid::new_v4()));
    // A minted id is checked like any other: no live session may shadow a stored one.
    let _taking = shared.id_locks.lock(&child_id).await;
    if !matches!(presence(shared, caller, &child_id, cancel).await?, Presence::Free) {
        return Err(RpcError::internal(format!("failed to fork session \"{id}\"")));
    }
    let meta = HeaderMeta {
        cwd: cut.header.cwd.clone(),
        parent_session: Some(cut.header.id.clone()),
        seed_length: Some(end as u64),
        agent_preset: cut.header.agent_preset.clone(),
        // Forks inherit the owner: the creator's, which is the source's for a partitioned caller.
        owner: caller.owner.clone().or_else(|| cut.header.owner.clone()),
        ..HeaderMeta::default()
    };
    let seed = events[..end].to_vec();
    match shared.store.create(Some(child_id.clone()), CreateOptions { seed: Some(seed), meta }) {
        Ok(_) => Ok(to_value(&Forked { session_id: child_id.to_string() })),
        // The child's header and seed come from the source (a log written before the bounds may
        // exceed them): nothing was created, and the source is what cannot be forked.
        Err(ref error) if let Some(too_large) = error.too_large() => {
            Err(refused_as_too_large("session.fork", too_large, vec![PathSegment::from("sessionId")]))
        }
        Err(error) => {
            tracing::error!(session = id, %error, "forking a session failed");
            Err(RpcError::internal(format!("failed to fork session \"{id}\"")))
        }
    }
}

/// The live session a write-side call addresses: the caller's own (another owner's answers as an
/// unknown id), through the subagent ownership fence.
fn addressed_live(
    shared: &Shared,
    caller: &Caller,
    id: &str,
    parent_session_id: Option<&str>,
) -> Result<Arc<Session>, RpcError> {
    let session = shared
        .store
        .get(&SessionId::from(id))
        .filter(|session| caller.sees(session.header()))
        .ok_or_else(|| RpcError::session_not_attached(id))?;
    fence(session.header(), parent_session_id)?;
    Ok(session)
}

/// `session.append` → `{firstSeq, lastSeq, durableSeq}`: appends to a live session, in order,
/// stopping at the first rejected event. With `durable: true` it answers only once everything
/// appended so far is durable; `durableSeq` is the durable watermark either way.
pub(super) async fn append(
    shared: &Shared,
    caller: &Caller,
    request: AppendRequest,
    cancel: &CancellationToken,
) -> Result<Value, RpcError> {
    let session = addressed_live(shared, caller, &request.session_id, request.parent_session_id.as_deref())?;
    let durable = request.durable;
    let (first, last) = append_batch(shared, &session, request)?;
    let durable_seq =
        if durable { make_durable(shared, &session, cancel).await? } else { durable_seq(shared, &session) };
    Ok(to_value(&Appended { first_seq: first, last_seq: last, durable_seq }))
}

/// `session.flush` → `{durableSeq}`: waits until everything the live session appended so far is
/// durable.
pub(super) async fn flush(
    shared: &Shared,
    caller: &Caller,
    request: ReleaseRequest,
    cancel: &CancellationToken,
) -> Result<Value, RpcError> {
    let session = addressed_live(shared, caller, &request.session_id, request.parent_session_id.as_deref())?;
    Ok(to_value(&Flushed { durable_seq: make_durable(shared, &session, cancel).await? }))
}

/// The durable watermark of a live session: the last seq written and fsynced, `null` when none
/// is (or the gateway has no persistence).
fn durable_seq(shared: &Shared, session: &Session) -> Option<u64> {
    let durable = shared.persistence.as_ref()?.durable_len(session.id())?;
    durable.checked_sub(1)
}

/// Waits until everything `session` appended so far is durable; its durable watermark then.
pub(crate) async fn make_durable(
    shared: &Shared,
    session: &Arc<Session>,
    cancel: &CancellationToken,
) -> Result<Option<u64>, RpcError> {
    let id = session.id();
    if shared.persistence.is_none() {
        return Err(RpcError::internal(format!(
            "session \"{id}\" cannot be made durable: this gateway keeps no sessions on disk"
        )));
    }
    let target = session.len();
    let flushed = tokio::select! {
        biased;
        () = cancel.cancelled() => return Err(RpcError::cancelled("the flush was cancelled")),
        flushed = shared.store.flush(id) => flushed,
    };
    match flushed {
        Ok(_) => {}
        Err(StoreError::NotLive { .. }) => {
            // Released meanwhile: a release flushes everything first.
            return Ok(target.checked_sub(1));
        }
        Err(error) => {
            if let Some(fenced) = fenced(shared, session) {
                return Err(fenced);
            }
            tracing::error!(session = %id, %error, "making a session durable failed");
            return Err(RpcError::internal(format!("session \"{id}\" could not be made durable")));
        }
    }
    // Everything appended before the flush began is durable now; more may be.
    Ok(durable_seq(shared, session).max(target.checked_sub(1)))
}

/// `agent-busy` when `session` can no longer be written from this gateway: another gateway or
/// host wrote its stored log past this live copy (the writer fence), so what this copy holds past
/// its durable watermark is in this gateway's memory only. The session is then released and
/// resumed from the store (`docs/wire.md`, "Several gateways").
fn fenced(shared: &Shared, session: &Session) -> Option<RpcError> {
    let reason = shared.persistence.as_ref()?.fence(session.id())?;
    tracing::debug!(session = %session.id(), %reason, "a fenced session was asked to write");
    let durable = durable_seq(shared, session).map_or_else(|| "none".to_owned(), |seq| seq.to_string());
    Some(RpcError::new(
        ErrorKind::AgentBusy {
            reason: format!(
                "another gateway or host wrote this session; this gateway's live copy is durable through seq {durable} \
                 and can no longer be written: release it and resume it from the store"
            ),
        },
        format!("session \"{}\" is written elsewhere", session.id()),
    ))
}

/// Appends the batch of `request` to `session`: `(firstSeq, lastSeq)` of what was appended.
fn append_batch(
    shared: &Shared,
    session: &Arc<Session>,
    request: AppendRequest,
) -> Result<(Option<u64>, Option<u64>), RpcError> {
    let id = request.session_id.as_str();
    if let Some(fenced) = fenced(shared, session) {
        return Err(fenced);
    }
    // The session's own append order, held for the batch: `expectedSeq` holds for the whole of
    // it, and the batch's events (with their folds and frames, which run inside each append)
    // are not interleaved with another appender's. Other sessions append meanwhile.
    let order = session.append_order();
    let next = order.next_seq();
    if let Some(expected) = request.expected_seq
        && expected != next
    {
        return Err(RpcError::new(
            ErrorKind::AgentBusy { reason: format!("expected next seq {expected}, but the session is at seq {next}") },
            format!("session \"{id}\" has moved on"),
        ));
    }
    let (mut first, mut last) = (None, None);
    for (idx, event) in request.events.into_iter().enumerate() {
        // The session runs the storable check (the coordinator's known types, the read side's
        // rules), so an accepted event never makes the stored log unreadable.
        let data = JsonData::from_value(&event.data)
            .map_err(|error| rejected(idx, last, format!("data is not lossless JSON: {error}")))?;
        let descriptor =
            if event.kind == "step/start" { first_step_descriptor(shared, session.id()) } else { Ok(None) };
        if let Some(descriptor) = descriptor.map_err(|error| rejected(idx, last, error.to_string()))? {
            first.get_or_insert(descriptor.seq);
            last = Some(descriptor.seq);
        }
        if shared.config.max_event_bytes < MAX_EVENT_BYTES {
            // A bound below the session's own: measured with the seq and time the event would
            // get now (the session checks its own bound as it stamps the event).
            let mut candidate =
                SessionEvent::new(event.kind.as_str(), session.len(), session.clock().now_ms(), data.clone());
            if let Some(surface) = &event.surface {
                candidate.surface_op = Some(surface.op);
                candidate.source_event_seqs = surface.source_event_seqs.clone().map(Vec::into_boxed_slice);
            }
            shared
                .config
                .check_event_size(&candidate)
                .map_err(|too_large| rejected_as_too_large(idx, last, &too_large))?;
        }
        match session.append_data(event.kind.as_str(), data, event.surface) {
            Ok(appended) => {
                first.get_or_insert(appended.seq);
                last = Some(appended.seq);
            }
            Err(ref error) if let Some(too_large) = error.too_large() => {
                return Err(rejected_as_too_large(idx, last, too_large));
            }
            Err(error) => return Err(rejected(idx, last, error.to_string())),
        }
    }
    drop(order);
    Ok((first, last))
}

/// The `session.create` payload key a header field comes from; the payload itself for one the
/// gateway fills in (the owner comes from the caller).
fn create_path(too_large: &TooLarge) -> Vec<PathSegment> {
    let key = match &too_large.what {
        Oversized::Header(HeaderField::Cwd) => "cwd",
        Oversized::Header(HeaderField::AgentPreset) => "agentPreset",
        Oversized::Header(HeaderField::Id) => "sessionId",
        Oversized::Header(HeaderField::ParentSession | HeaderField::Owner) | Oversized::Event { .. } => {
            return Vec::new();
        }
    };
    vec![PathSegment::from(key)]
}

/// For a one-shot child spawned through the gateway, appends its descriptor right before its
/// first step (reference 03 §2.5) and forgets it.
fn first_step_descriptor(
    shared: &Shared,
    id: &SessionId,
) -> Result<Option<Arc<SessionEvent>>, subagent::CreateChildError> {
    let Some(child) = shared.pending_one_shots.lock().get(id).cloned() else { return Ok(None) };
    let appended = child.enter_first_step()?;
    shared.pending_one_shots.lock().remove(id);
    Ok(appended)
}

/// `session.release` → `{released, lastSeq}`: flushes a live session and detaches it, so it is
/// served cold from then on. Returns once the persistence layer has let go of it.
pub(super) async fn release(shared: &Shared, caller: &Caller, request: ReleaseRequest) -> Result<Value, RpcError> {
    let id = request.session_id.as_str();
    let session_id = SessionId::from(id);
    let session = addressed_live(shared, caller, id, request.parent_session_id.as_deref())?;
    // Letting the id go is serialized with taking it (create, resume, fork, spawn).
    let _releasing = shared.id_locks.lock(&session_id).await;
    // A fenced session is released without writing; the answer says what was not stored.
    let mut lost = None;
    match shared.store.flush(&session_id).await {
        Ok(_) => {}
        Err(StoreError::NotLive { .. }) => return Err(RpcError::session_not_attached(id)),
        Err(error) => match fenced(shared, &session) {
            Some(_) => lost = Some(durable_seq(shared, &session)),
            None => {
                tracing::error!(session = id, %error, "flushing a session before release failed");
                return Err(RpcError::internal(format!(
                    "failed to release session \"{id}\": it could not be made durable"
                )));
            }
        },
    }
    let last_seq = session.len() as i64 - 1;
    // Before it is let go, while storage still tracks it: how far it is durable.
    let durable_before = durable_seq(shared, &session);
    shared.pending_one_shots.lock().remove(&session_id);
    if shared.store.detach(&session_id).is_none() {
        return Err(RpcError::session_not_attached(id));
    }
    drop(session);
    if let Some(persistence) = &shared.persistence
        && let Err(error) = persistence.release(&session_id, &CancellationToken::new()).await
    {
        // A fence that fell during the release (an append raced it): released without writing.
        if matches!(error, PersistenceError::Fenced { .. }) {
            lost.get_or_insert(durable_before);
        } else {
            tracing::error!(session = id, %error, "releasing a session from persistence failed");
            return Err(RpcError::internal(format!(
                "failed to release session \"{id}\": it could not be made durable"
            )));
        }
    }
    // A copy fenced with everything it held stored (its follower found the store past it while
    // it was idle) lost nothing: a plain release.
    let unwritten =
        |durable: &Option<u64>| u64::try_from(last_seq).is_ok_and(|last| durable.map_or(0, |seq| seq + 1) <= last);
    if let Some(durable) = lost.filter(unwritten) {
        let first_lost = durable.map_or(0, |seq| seq + 1);
        tracing::warn!(
            session = id,
            first_lost,
            last_seq,
            "released a fenced session; its unwritten events are dropped"
        );
        return Err(RpcError::new(
            ErrorKind::AgentBusy {
                reason: format!(
                    "another gateway or host wrote this session: its events from seq {first_lost} through {last_seq} \
                     were not stored"
                ),
            },
            format!("session \"{id}\" was released, but what it held past the stored log was not stored"),
        ));
    }
    Ok(to_value(&Released { last_seq }))
}
