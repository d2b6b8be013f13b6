//! Method dispatch: parse the payload per method, run the handler, and answer a business result.
//! Handlers never fail the HTTP request; every outcome is a value or an [`RpcError`].

mod list;
mod session;
mod subagent;

pub(crate) use session::make_durable;

use std::sync::Arc;

use serde_json::Value;
use session_core::{Session, SessionHeader, SessionId};
use session_persistence::PersistenceError;
use tokio_util::sync::CancellationToken;

use crate::{
    access::Caller,
    state::Shared,
    wire::{HostDescription, Issue, Method, RpcError, to_value},
};

/// What is under an id, as far as a caller may know.
pub(crate) enum Presence {
    /// Nothing live or stored.
    Free,
    /// A live session the caller sees.
    Live(Arc<Session>),
    /// A stored (not live) session the caller sees: its header only, nothing else was read.
    Stored(Arc<SessionHeader>),
    /// A live or stored session the caller may not see: another owner's, or, for a partitioned
    /// caller, a stored log whose header cannot be read (its owner is unknown).
    Hidden,
    /// A stored log whose header cannot be read, for the operator tier.
    Damaged(PersistenceError),
}

/// What is under `id` for `caller`: the live store first, then the stored log's header alone,
/// so the answer costs no log read and its time does not depend on the log.
pub(crate) async fn presence(
    shared: &Shared,
    caller: &Caller,
    id: &SessionId,
    cancel: &CancellationToken,
) -> Result<Presence, RpcError> {
    if let Some(session) = shared.store.get(id) {
        return Ok(if caller.sees(session.header()) { Presence::Live(session) } else { Presence::Hidden });
    }
    let Some(persistence) = &shared.persistence else { return Ok(Presence::Free) };
    match persistence.stored_header(id, cancel).await {
        Ok(None) | Err(PersistenceError::InvalidInput { .. }) => Ok(Presence::Free),
        Ok(Some(stored)) if caller.sees(&stored.header) => Ok(Presence::Stored(stored.header)),
        Ok(Some(_)) => Ok(Presence::Hidden),
        Err(PersistenceError::Cancelled) => Err(RpcError::cancelled("the request was cancelled")),
        Err(_) if caller.owner.is_some() => Ok(Presence::Hidden),
        Err(error) => Ok(Presence::Damaged(error)),
    }
}

/// Parses a payload, mapping its issues to `bad-request` `invalid payload for <method>`.
fn parse<T>(method: Method, parsed: Result<T, Vec<Issue>>) -> Result<T, RpcError> {
    parsed.map_err(|issues| RpcError::bad_request(format!("invalid payload for {}", method.as_str()), issues))
}

pub(crate) async fn dispatch(
    shared: &Shared,
    caller: &Caller,
    method: Method,
    payload: &Value,
    cancel: &CancellationToken,
) -> Result<Value, RpcError> {
    use crate::wire::payload::*;
    match method {
        Method::HostDescribe => Ok(host_describe(shared, caller)),
        Method::SessionList => {
            let parsed = match (ListFilters::parse(payload), ListPageRequest::parse(payload)) {
                (Ok(filters), Ok(page)) => Ok((filters, page)),
                (Err(mut issues), Err(more)) => {
                    issues.extend(more);
                    Err(issues)
                }
                (Err(issues), Ok(_)) | (Ok(_), Err(issues)) => Err(issues),
            };
            match parse(method, parsed)? {
                (filters, None) => list::list(shared, caller, &filters, cancel).await,
                (filters, Some(request)) => list::list_page(shared, caller, &filters, request, cancel).await,
            }
        }
        Method::SessionHistory => {
            let request = parse(method, HistoryRequest::parse(payload))?;
            session::history(shared, caller, request, cancel).await
        }
        Method::SessionGet => {
            let request = parse(method, GetRequest::parse(payload))?;
            list::get(shared, caller, request, cancel).await
        }
        Method::SessionCreate => {
            let request = parse(method, CreateRequest::parse(payload))?;
            session::create(shared, caller, request, cancel).await
        }
        Method::SessionFork => {
            let request = parse(method, ForkRequest::parse(payload))?;
            session::fork(shared, caller, request, cancel).await
        }
        Method::SessionAppend => {
            let request = parse(method, AppendRequest::parse(payload))?;
            session::append(shared, caller, request, cancel).await
        }
        Method::SessionFlush => {
            // The same addressing as `session.release`: `{sessionId, parentSessionId?}`.
            let request = parse(method, ReleaseRequest::parse(payload))?;
            session::flush(shared, caller, request, cancel).await
        }
        Method::SessionRelease => {
            let request = parse(method, ReleaseRequest::parse(payload))?;
            session::release(shared, caller, request).await
        }
        Method::SubagentList => {
            let request = parse(method, SubagentListRequest::parse(payload))?;
            subagent::list(shared, caller, request, cancel).await
        }
        Method::SubagentHistory => {
            let request = parse(method, SubagentHistoryRequest::parse(payload))?;
            subagent::history(shared, caller, request, cancel).await
        }
        Method::SubagentSpawn => {
            let request = parse(method, SubagentSpawnRequest::parse(payload))?;
            subagent::spawn(shared, caller, request, cancel).await
        }
    }
}

/// `host.describe` → `{version, cwd, attachedSessions, home, canOpenPath, operatorEligible}`.
fn host_describe(shared: &Shared, caller: &Caller) -> Value {
    let attached = shared.store.list().iter().filter(|session| caller.sees(session.header())).count();
    let home = std::env::var("HOME").unwrap_or_else(|_| "/".to_owned());
    to_value(&HostDescription {
        version: shared.config.version.clone(),
        cwd: shared.config.default_cwd.clone(),
        attached_sessions: attached,
        home,
        can_open_path: false,
        operator_eligible: caller.owner.is_none(),
        follows_store: shared.follower.is_some(),
    })
}
