//! Method dispatch: parse the payload per method, run the handler, and answer a business result.
//! Handlers never fail the HTTP request; every outcome is a value or an [`RpcError`].

mod session;

pub(crate) use self::session::resume;
mod subagent;

use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::{
    access::Caller,
    proxy::Shared,
    wire::{Issue, Method, RpcError},
};

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
        Method::SessionList => session::list(shared, caller, cancel).await,
        Method::SessionHistory => {
            let request = parse(method, HistoryRequest::parse(payload))?;
            session::history(shared, caller, request, cancel).await
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
            session::append(shared, caller, request)
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
    json!({
        "version": shared.config.version,
        "cwd": shared.config.default_cwd,
        "attachedSessions": attached,
        "home": home,
        "canOpenPath": false,
        "operatorEligible": caller.owner.is_none(),
    })
}
