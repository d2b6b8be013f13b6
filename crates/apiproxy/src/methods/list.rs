//! `session.list`: the whole answer and the paged one, their filters (`subagents`, `cwd`,
//! `running`) and every row's subagent child counts.

use std::{
    collections::{BTreeMap, HashMap, HashSet},
    sync::Arc,
};

use serde_json::Value;
use session_core::{Session, SessionId};
use session_persistence::{PageKey, PageRequest, PersistenceError, StoredHeader};
use session_projection::{ProjectionUnit, Snapshot};
use tokio_util::sync::CancellationToken;

use crate::{
    access::Caller,
    state::Shared,
    units::{LIST_METADATA_KEY, ListMetadata, SessionListMetadata},
    wire::to_value,
    wire::{
        ChildCounts, HeaderFacts, ProjectionsBlock, RpcError, SessionDescription, SessionList, SessionListPage,
        SessionSummary,
        payload::{GetRequest, ListFilters, ListPageRequest, encode_cursor},
    },
};

/// The direct subagent children a caller sees, by parent: their ids, and which of them are live
/// and inside a turn.
#[derive(Default)]
struct Children {
    ids: HashMap<SessionId, HashSet<SessionId>>,
    running: HashSet<SessionId>,
}

impl Children {
    /// The live children the caller sees, from memory.
    fn live(shared: &Shared, caller: &Caller) -> Children {
        let mut children = Children::default();
        for session in shared.store.list() {
            let header = session.header();
            if let Some(parent) = header.parent_session.as_ref().filter(|_| header.is_subagent() && caller.sees(header))
            {
                children.ids.entry(parent.clone()).or_default().insert(header.id.clone());
                if is_running(&session) {
                    children.running.insert(header.id.clone());
                }
            }
        }
        children
    }

    /// Adds stored children (already limited to what the caller sees).
    fn add_stored(&mut self, stored: &BTreeMap<SessionId, Vec<SessionId>>) {
        for (parent, ids) in stored {
            self.ids.entry(parent.clone()).or_default().extend(ids.iter().cloned());
        }
    }

    /// Sets `row.subagents` when the row's session has children.
    fn mark(&self, row: &mut SessionSummary) {
        let Some(ids) = self.ids.get(&SessionId::from(row.session_id.as_str())) else { return };
        if ids.is_empty() {
            return;
        }
        let running = ids.iter().filter(|id| self.running.contains(*id)).count();
        row.subagents = Some(ChildCounts { count: ids.len() as u64, running: running as u64 });
    }
}

/// Whether the agent a live session stands in for is working.
fn is_running(session: &Arc<Session>) -> bool {
    subagent::AgentStatus::of_session(Some(session)) == subagent::AgentStatus::Running
}

/// A live session's row: folded from the live log through the `sessionListMetadata` unit.
fn live_summary(shared: &Shared, session: &Arc<Session>) -> SessionSummary {
    let header = session.header();
    let snapshot = shared.registry.snapshot(session);
    let metadata = snapshot
        .values
        .get(LIST_METADATA_KEY)
        .and_then(|value| serde_json::from_value::<ListMetadata>(value.clone()).ok());
    let blank = match &metadata {
        Some(metadata) => metadata.blank,
        None => !session.events().iter().any(|event| event.kind == "turn/start"),
    };
    let created_at = header.created_at as i64;
    let updated_at = metadata.and_then(|metadata| metadata.last_prompt_at).map_or(created_at, |at| at.max(created_at));
    // `running` as everywhere: the agent the live session stands in for is working.
    let running = is_running(session);
    let mut row = SessionSummary::from_header(header, updated_at, running, blank);
    if !snapshot.values.is_empty() {
        row.projections = Some(ProjectionsBlock { as_of_seq: snapshot.as_of_seq, values: snapshot.values });
    }
    row
}

/// A cold session's row. Projections and recency come from the checkpoint cache when one is
/// mounted and holds a record of this lifetime. Blankness: a cached `blank: false` is trusted;
/// otherwise a log no larger than the probe limit is read and folded exactly (reference 04 §7.1);
/// any other row is listed as not blank.
async fn cold_summary(
    shared: &Shared,
    stored: &StoredHeader,
    snapshot: Option<Snapshot>,
    cancel: &CancellationToken,
) -> SessionSummary {
    let header = &stored.header;
    let created_at = header.created_at as i64;
    let snapshot = snapshot.filter(|snapshot| !snapshot.values.is_empty());
    let cached = snapshot
        .as_ref()
        .and_then(|snapshot| snapshot.values.get(LIST_METADATA_KEY))
        .and_then(|value| serde_json::from_value::<ListMetadata>(value.clone()).ok());
    let metadata = match cached {
        Some(metadata) if !metadata.blank => Some(metadata),
        _ => probe_blank(shared, stored, cancel)
            .await
            .or(cached.map(|metadata| ListMetadata { blank: false, ..metadata })),
    };
    let blank = metadata.as_ref().is_some_and(|metadata| metadata.blank);
    let updated_at = metadata.and_then(|metadata| metadata.last_prompt_at).map_or(created_at, |at| at.max(created_at));
    let mut row = SessionSummary::from_header(header, updated_at, false, blank);
    if let Some(snapshot) = snapshot {
        row.projections = Some(ProjectionsBlock { as_of_seq: snapshot.as_of_seq, values: snapshot.values });
    }
    row
}

/// Reads a small cold log and folds its list metadata exactly; `None` when the log is too big,
/// its size is unknown, the probe is disabled, or the read fails (the row then stays visible).
async fn probe_blank(shared: &Shared, stored: &StoredHeader, cancel: &CancellationToken) -> Option<ListMetadata> {
    let limit = shared.config.cold_blank_probe_max_bytes;
    let persistence = shared.persistence.as_ref()?;
    if limit == 0 || stored.n_bytes.is_none_or(|n_bytes| n_bytes > limit) {
        return None;
    }
    let read = persistence.read_from(&stored.header.id, 0, cancel).await.ok()?;
    let unit = SessionListMetadata;
    let mut metadata = unit.init();
    for event in read.events.iter() {
        if let Ok(Some(next)) = unit.apply(&metadata, event) {
            metadata = next;
        }
    }
    Some(metadata)
}

/// How many small cold logs `session.list` probes for blankness at once (the reference's batches
/// of 16): the probes overlap their reads, and a listing holds at most this many logs.
const COLD_PROBE_CONCURRENCY: usize = 16;

/// The rows of `cold`, in order: each from its header and cached snapshot, with the blank probe
/// of a small log (see [`cold_summary`]), in batches of [`COLD_PROBE_CONCURRENCY`] rows whose
/// probes run at once.
async fn cold_summaries(
    shared: &Shared,
    cold: &[StoredHeader],
    snapshots: Vec<Option<Snapshot>>,
    cancel: &CancellationToken,
) -> Vec<SessionSummary> {
    let mut rows = Vec::with_capacity(cold.len());
    let mut snapshots = snapshots.into_iter();
    for batch in cold.chunks(COLD_PROBE_CONCURRENCY) {
        let mut summaries = Vec::with_capacity(batch.len());
        for stored in batch {
            summaries.push(cold_summary(shared, stored, snapshots.next().flatten(), cancel));
        }
        rows.extend(futures::future::join_all(summaries).await);
    }
    rows
}

/// `session.list` → `{items}`: live sessions folded from memory, cold ones from their headers and
/// the checkpoint cache, newest first, as `filters` admit them; child counts come from the same
/// listing and memory. The only log reads are the blank probes of small cold logs that no
/// checkpoint says are non-blank (at most `cold_blank_probe_max_bytes` each, up to
/// [`COLD_PROBE_CONCURRENCY`] at once). With `running: true` no cold row is listed (cold
/// sessions are never running); the listing still gives the rows' stored child counts.
pub(super) async fn list(
    shared: &Shared,
    caller: &Caller,
    filters: &ListFilters,
    cancel: &CancellationToken,
) -> Result<Value, RpcError> {
    let mut rows = Vec::new();
    let mut live_ids = HashSet::new();
    let mut children = Children::live(shared, caller);
    for session in shared.store.list() {
        live_ids.insert(session.id().clone());
        let header = session.header();
        if caller.sees(header) && filters.admits_header(header) && (!filters.running || is_running(&session)) {
            rows.push(live_summary(shared, &session));
        }
    }
    if let Some(persistence) = &shared.persistence {
        // Logs that cannot be listed are left out (the persistence logs each one): their owner
        // is unknown, so no caller may be shown them.
        let listing = match persistence.list_snapshots(cancel).await {
            Ok(listing) => listing,
            Err(PersistenceError::Cancelled) => return Err(RpcError::cancelled("session list was cancelled")),
            Err(error) => {
                tracing::error!(%error, "listing persisted sessions failed");
                return Err(RpcError::internal("session list unavailable: the session store could not be listed"));
            }
        };
        let mut stored_children: BTreeMap<SessionId, Vec<SessionId>> = BTreeMap::new();
        for stored in &listing.headers {
            let header = &stored.header;
            if let Some(parent) = header.parent_session.as_ref().filter(|_| header.is_subagent() && caller.sees(header))
            {
                stored_children.entry(parent.clone()).or_default().push(header.id.clone());
            }
        }
        children.add_stored(&stored_children);
        let cold: Vec<StoredHeader> = listing
            .headers
            .into_iter()
            .filter(|stored| {
                let header = &stored.header;
                !filters.running
                    && !live_ids.contains(&header.id)
                    && header.cwd.is_some()
                    && caller.sees(header)
                    && filters.admits_header(header)
            })
            .collect();
        let snapshots = cached_snapshots(shared, &cold).await;
        rows.extend(cold_summaries(shared, &cold, snapshots, cancel).await);
    }
    for row in &mut rows {
        children.mark(row);
    }
    rows.sort_by(|a, b| b.updated_at.cmp(&a.updated_at).then_with(|| a.session_id.cmp(&b.session_id)));
    Ok(to_value(&SessionList { items: rows }))
}

/// `session.list` with a `limit` → `{items, nextCursor}`: one page, newest first by `createdAt`
/// (ties by id), so a cursor's place never moves while sessions get new prompts. The stored part
/// is one [`SessionPersistence::list_page`](session_persistence::SessionPersistence::list_page)
/// call (an index scan on PostgreSQL) with the header filters pushed down, merged with the live
/// sessions in the same range; rows are summarized as in the whole listing, and child counts
/// come from the page's answer and memory. With `running: true` only live running sessions in
/// the range are listed (cold ones never run). A filtered page may be short and still carry a
/// `nextCursor`; it is `null` on the last page.
pub(super) async fn list_page(
    shared: &Shared,
    caller: &Caller,
    filters: &ListFilters,
    request: ListPageRequest,
    cancel: &CancellationToken,
) -> Result<Value, RpcError> {
    let after = request.after;
    let in_range = |key: &PageKey| after.as_ref().is_none_or(|after| key > after);
    let mut live_ids = HashSet::new();
    let mut live = Vec::new();
    let mut children = Children::live(shared, caller);
    for session in shared.store.list() {
        live_ids.insert(session.id().clone());
        let header = session.header();
        let key = PageKey::of(header);
        if caller.sees(header)
            && filters.admits_header(header)
            && (!filters.running || is_running(&session))
            && in_range(&key)
        {
            live.push((key, session));
        }
    }
    let mut cold = Vec::new();
    // Where the stored part of this page ends when more stored sessions follow: live rows past
    // it belong to a later page.
    let mut stored_end = None;
    if let Some(persistence) = shared.persistence.as_ref().filter(|_| !filters.running) {
        let page_request = PageRequest {
            after: after.clone(),
            limit: request.limit,
            owner: caller.owner.clone(),
            require_cwd: true,
            exclude_subagents: !filters.subagents,
            cwd: filters.cwd.clone(),
        };
        let page = match persistence.list_page(&page_request, cancel).await {
            Ok(page) => page,
            Err(PersistenceError::Cancelled) => return Err(RpcError::cancelled("session list was cancelled")),
            Err(error) => {
                tracing::error!(%error, "listing a page of persisted sessions failed");
                return Err(RpcError::internal("session list unavailable: the session store could not be listed"));
            }
        };
        stored_end = page.next;
        children.add_stored(&page.children);
        cold = page
            .headers
            .into_iter()
            .filter(|stored| {
                let header = &stored.header;
                !live_ids.contains(&header.id) && caller.sees(header) && filters.admits_header(header)
            })
            .collect();
    }
    live.retain(|(key, _)| stored_end.as_ref().is_none_or(|end| key <= end));
    enum Candidate {
        Live(Arc<Session>),
        Cold(StoredHeader),
    }
    let mut candidates: Vec<(PageKey, Candidate)> = live
        .into_iter()
        .map(|(key, session)| (key, Candidate::Live(session)))
        .chain(cold.into_iter().map(|stored| (PageKey::of(&stored.header), Candidate::Cold(stored))))
        .collect();
    candidates.sort_by(|a, b| a.0.cmp(&b.0));
    let next = if candidates.len() > request.limit {
        candidates.truncate(request.limit);
        candidates.last().map(|(key, _)| key.clone())
    } else {
        stored_end
    };
    let cold_headers: Vec<StoredHeader> = candidates
        .iter()
        .filter_map(|(_, candidate)| match candidate {
            Candidate::Cold(stored) => Some(stored.clone()),
            Candidate::Live(_) => None,
        })
        .collect();
    let snapshots = cached_snapshots(shared, &cold_headers).await;
    let mut cold_rows = cold_summaries(shared, &cold_headers, snapshots, cancel).await.into_iter();
    let mut rows = Vec::with_capacity(candidates.len());
    for (_, candidate) in &candidates {
        rows.push(match candidate {
            Candidate::Live(session) => live_summary(shared, session),
            // Invariant: `cold_summaries` answers one row per header of `cold_headers`, which
            // lists the cold candidates in this order.
            Candidate::Cold(_) => cold_rows.next().expect("one cold row per cold candidate, in order"),
        });
    }
    for row in &mut rows {
        children.mark(row);
    }
    Ok(to_value(&SessionListPage { items: rows, next_cursor: next.as_ref().map(encode_cursor) }))
}

/// The checkpoint cache's stored snapshots of `cold`, in order, looked up in one hop to the
/// blocking pool (the cache makes the hop: its records are files or rows, which must not stall
/// the runtime's threads).
async fn cached_snapshots(shared: &Shared, cold: &[StoredHeader]) -> Vec<Option<Snapshot>> {
    let Some(cache) = &shared.cache else { return cold.iter().map(|_| None).collect() };
    cache.cached_snapshots(cold.iter().map(|stored| Arc::clone(&stored.header)).collect()).await
}

/// `session.get` → `{session, header}`: the session's list row and header facts, read from
/// memory for a live session and from the stored header (plus its checkpoint, if cached) for a
/// cold one; never the log, but for the blank probe of a small cold log as in `session.list`.
pub(crate) async fn get(
    shared: &Shared,
    caller: &Caller,
    request: GetRequest,
    cancel: &CancellationToken,
) -> Result<Value, RpcError> {
    let id = SessionId::from(request.session_id.as_str());
    let not_found = || RpcError::session_not_found(id.as_str());
    if let Some(session) = shared.store.get(&id) {
        if !caller.sees(session.header()) {
            return Err(not_found());
        }
        let header = HeaderFacts::from(&**session.header());
        return Ok(to_value(&SessionDescription { session: live_summary(shared, &session), header }));
    }
    let Some(persistence) = &shared.persistence else { return Err(not_found()) };
    let stored = match persistence.stored_header(&id, cancel).await {
        Ok(Some(stored)) if stored.header.cwd.is_some() && caller.sees(&stored.header) => stored,
        Ok(_) | Err(PersistenceError::NotFound { .. } | PersistenceError::InvalidInput { .. }) => {
            return Err(not_found());
        }
        Err(PersistenceError::Cancelled) => return Err(RpcError::cancelled("session read was cancelled")),
        // A header that cannot be read names no owner: only the operator tier learns more.
        Err(_) if caller.owner.is_some() => return Err(not_found()),
        Err(error) => {
            tracing::error!(session = id.as_str(), %error, "reading a session header failed");
            return Err(RpcError::internal(format!("history unavailable for session \"{id}\"")));
        }
    };
    let header = HeaderFacts::from(&*stored.header);
    let cold = [stored];
    let snapshots = cached_snapshots(shared, &cold).await;
    let Some(session) = cold_summaries(shared, &cold, snapshots, cancel).await.into_iter().next() else {
        return Err(not_found());
    };
    Ok(to_value(&SessionDescription { session, header }))
}
