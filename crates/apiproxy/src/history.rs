//! History reads shared by `session.history` and `subagent.history`: the two source arms (live:
//! in-memory events plus the registry's watermark snapshot; cold: one persistence inspection plus
//! a detached fold; a page's cold read streams and keeps only the page) and message-boundary
//! paging (reference 04 §7.2) under the byte budget and the in-flight budget (`docs/wire.md`,
//! "History budget").

use std::{collections::VecDeque, sync::Arc};

use parking_lot::Mutex;
use session_core::{Session, SessionEvent, SessionHeader, SessionId, SurfaceOp};
use session_persistence::{PersistenceError, ScanSink, SessionPersistence, inspect_into};
use session_projection::{CheckpointRows, ProjectionRegistry, RestoreError, RestoreFold, Snapshot};
use tokio::sync::OwnedSemaphorePermit;
use tokio_util::sync::CancellationToken;

pub(crate) mod budget;

use crate::{
    access::Caller,
    state::Shared,
    wire::{ErrorKind, HistoryEntry, HistoryPage, ProjectionsBlock, RpcError},
};

/// Messages per page when the request does not say.
pub(crate) const DEFAULT_MAX_MESSAGES: u64 = 50;

/// One consistent cut of a session's log, with the projection values at its end when asked for.
#[derive(Debug)]
pub(crate) struct Cut {
    pub(crate) header: Arc<SessionHeader>,
    pub(crate) events: Arc<[Arc<SessionEvent>]>,
    /// The number of leading events of `events` that belong to the cut.
    pub(crate) len: usize,
    pub(crate) projections: Option<ProjectionsBlock>,
}

/// Why a source could not be read.
#[derive(Debug)]
pub(crate) enum ReadError {
    /// Unknown, without a cwd (cold), or another owner's.
    NotFound,
    Cancelled,
    /// The in-flight budget of history reads stayed taken for the whole wait.
    Busy,
    Failed(PersistenceError),
}

impl From<budget::Refused> for ReadError {
    fn from(refused: budget::Refused) -> ReadError {
        match refused {
            budget::Refused::Cancelled => ReadError::Cancelled,
            budget::Refused::Busy => ReadError::Busy,
        }
    }
}

fn block(snapshot: Snapshot) -> ProjectionsBlock {
    if snapshot.has_failures() {
        // Fail-soft: a failing unit's key is left out; the others are served.
        tracing::warn!(failures = ?snapshot.failures.keys().collect::<Vec<_>>(), "projection units failed; their keys are left out");
    }
    ProjectionsBlock { as_of_seq: snapshot.as_of_seq, values: snapshot.values }
}

/// The live arm: a snapshot of the in-memory log. With `with_projections`, the registry's
/// snapshot is taken first and the events are cut at its `asOfSeq`, so both describe one position
/// even while the session keeps appending.
pub(crate) fn live_cut(shared: &Shared, session: &Arc<Session>, with_projections: bool) -> Cut {
    let snapshot = with_projections.then(|| shared.registry.snapshot(session));
    let events = session.events();
    let len = match &snapshot {
        Some(snapshot) => usize::try_from(snapshot.as_of_seq + 1).unwrap_or(0).min(events.len()),
        None => events.len(),
    };
    Cut { header: Arc::clone(session.header()), events, len, projections: snapshot.map(block) }
}

/// Reads a whole session (for `session.fork`): live if attached, else from persistence. Another
/// owner's session, an unknown one, and a cold one without a cwd are all `NotFound`.
pub(crate) async fn read(
    shared: &Shared,
    caller: &Caller,
    id: &str,
    with_projections: bool,
    cancel: &CancellationToken,
) -> Result<Cut, ReadError> {
    let session_id = SessionId::from(id);
    if let Some(session) = shared.store.get(&session_id) {
        if !caller.sees(session.header()) {
            return Err(ReadError::NotFound);
        }
        return Ok(live_cut(shared, &session, with_projections));
    }
    let Some(persistence) = &shared.persistence else { return Err(ReadError::NotFound) };
    authorize_cold(&**persistence, caller, &session_id, cancel).await?;
    let inspection = match persistence.inspect(&session_id, cancel).await {
        Ok(inspection) => inspection,
        Err(error) => return Err(read_failure(error)),
    };
    if inspection.header.cwd.is_none() || !caller.sees(&inspection.header) {
        return Err(ReadError::NotFound);
    }
    if cancel.is_cancelled() {
        return Err(ReadError::Cancelled);
    }
    let projections = if with_projections {
        match shared.registry.restore(&CheckpointRows::new(), inspection.events.iter().map(|event| &**event), 0) {
            Ok(restored) => Some(block(restored.snapshot)),
            Err(error) => {
                tracing::warn!(session = id, %error, "cold projection fold failed; serving the page without projections");
                None
            }
        }
    } else {
        None
    };
    let len = inspection.events.len();
    Ok(Cut { header: inspection.header, events: inspection.events, len, projections })
}

/// What a history page asks for.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PageQuery {
    /// The window ends before this seq (the whole log without it).
    pub(crate) before_seq: Option<u64>,
    /// Messages per page ([`DEFAULT_MAX_MESSAGES`] without it).
    pub(crate) max_messages: Option<u64>,
}

/// A history page read, holding its share of the in-flight budget until it is dropped (after the
/// answer's value is built).
pub(crate) struct Page {
    /// The header of the session read.
    pub(crate) header: Arc<SessionHeader>,
    pub(crate) page: HistoryPage,
    _share: OwnedSemaphorePermit,
}

/// Reads one history page of a session: live if attached, else streamed from persistence, and
/// paged. The read holds its share of the in-flight budget until the page is built; a cold read
/// holds at most the page's byte budget plus one event of the log (plus the fold of the tail
/// page's projections), never the log.
pub(crate) async fn read_page(
    shared: &Shared,
    caller: &Caller,
    id: &str,
    query: PageQuery,
    cancel: &CancellationToken,
) -> Result<Page, ReadError> {
    let budget = shared.config.history_page_bytes;
    let share = shared.history_budget.admit(budget, shared.config.history_wait, cancel).await?;
    let with_projections = query.before_seq.is_none();
    let session_id = SessionId::from(id);
    if let Some(session) = shared.store.get(&session_id) {
        if !caller.sees(session.header()) {
            return Err(ReadError::NotFound);
        }
        let cut = live_cut(shared, &session, with_projections);
        let header = Arc::clone(&cut.header);
        return Ok(Page { header, page: paginate(cut, query, budget), _share: share });
    }
    let Some(persistence) = &shared.persistence else { return Err(ReadError::NotFound) };
    authorize_cold(&**persistence, caller, &session_id, cancel).await?;
    let kept = Arc::new(Mutex::new(Kept::default()));
    let registry = with_projections.then(|| Arc::clone(&shared.registry));
    let sink = PageSink::new(query.before_seq, budget, Arc::clone(&kept), registry);
    let fold = match inspect_into(&**persistence, &session_id, cancel, sink).await {
        Ok((sink, _)) => sink.fold,
        // The sink stopped the scan at `beforeSeq`: what it kept is the window.
        Err(PersistenceError::Cancelled) if kept.lock().stopped && !cancel.is_cancelled() => None,
        Err(error) => return Err(read_failure(error)),
    };
    let Kept { header, window, .. } = std::mem::take(&mut *kept.lock());
    let Some(header) = header else { return Err(ReadError::NotFound) };
    if header.cwd.is_none() || !caller.sees(&header) {
        return Err(ReadError::NotFound);
    }
    if cancel.is_cancelled() {
        return Err(ReadError::Cancelled);
    }
    let projections = match fold {
        Some(Ok(fold)) => match fold.finish() {
            Ok(restored) => Some(block(restored.snapshot)),
            Err(error) => {
                tracing::warn!(session = id, %error, "cold projection fold failed; serving the page without projections");
                None
            }
        },
        Some(Err(error)) => {
            tracing::warn!(session = id, %error, "cold projection fold failed; serving the page without projections");
            None
        }
        None => None,
    };
    let events: Arc<[Arc<SessionEvent>]> = window.into_iter().collect();
    let len = events.len();
    let cut = Cut { header: Arc::clone(&header), events, len, projections };
    Ok(Page { header, page: paginate(cut, query, budget), _share: share })
}

/// The answer to a history read that found the in-flight budget taken for its whole wait.
pub(crate) fn busy() -> RpcError {
    RpcError::new(
        ErrorKind::AgentBusy {
            reason: "too many history reads are in flight (the gateway's history memory budget is taken); retry later"
                .to_owned(),
        },
        "history reads are at their in-flight budget",
    )
}

/// Authorizes a cold read on the stored header alone, before the log is read, so another
/// owner's session costs no read and answers in the time an unknown id does.
async fn authorize_cold(
    persistence: &dyn SessionPersistence,
    caller: &Caller,
    id: &SessionId,
    cancel: &CancellationToken,
) -> Result<(), ReadError> {
    match persistence.stored_header(id, cancel).await {
        Ok(Some(stored)) if stored.header.cwd.is_some() && caller.sees(&stored.header) => Ok(()),
        Ok(_) | Err(PersistenceError::NotFound { .. } | PersistenceError::InvalidInput { .. }) => {
            Err(ReadError::NotFound)
        }
        Err(PersistenceError::Cancelled) => Err(ReadError::Cancelled),
        // A header that cannot be read names no owner: only the operator tier learns more.
        Err(_) if caller.owner.is_some() => Err(ReadError::NotFound),
        Err(error) => Err(ReadError::Failed(error)),
    }
}

fn read_failure(error: PersistenceError) -> ReadError {
    match error {
        PersistenceError::NotFound { .. } | PersistenceError::InvalidInput { .. } => ReadError::NotFound,
        PersistenceError::Cancelled => ReadError::Cancelled,
        error => ReadError::Failed(error),
    }
}

/// What a cold page read keeps, shared with its sink so that it survives a scan the sink stops.
#[derive(Default)]
struct Kept {
    header: Option<Arc<SessionHeader>>,
    /// The newest events of the window that fit the byte budget (always at least one).
    window: VecDeque<Arc<SessionEvent>>,
    /// The stored JSON bytes of `window`.
    window_bytes: usize,
    /// Whether the sink stopped the scan at `before_seq`.
    stopped: bool,
}

/// The sink of a cold page read: keeps the newest events of the window (`seq < before_seq`) that
/// fit the byte budget, so memory is the page, not the log; for the tail page, folds every event
/// into the projections as it passes. An older page (no fold) stops the scan at `before_seq`.
struct PageSink {
    before_seq: Option<u64>,
    budget: usize,
    kept: Arc<Mutex<Kept>>,
    registry: Option<Arc<ProjectionRegistry>>,
    /// The projections' fold, or why it stopped.
    fold: Option<Result<RestoreFold, RestoreError>>,
}

impl PageSink {
    fn new(
        before_seq: Option<u64>,
        budget: usize,
        kept: Arc<Mutex<Kept>>,
        registry: Option<Arc<ProjectionRegistry>>,
    ) -> PageSink {
        let fold = registry.as_ref().map(|registry| Ok(registry.begin_full_restore()));
        PageSink { before_seq, budget, kept, registry, fold }
    }
}

impl ScanSink for PageSink {
    fn header(&mut self, header: &Arc<SessionHeader>) -> session_persistence::Result<()> {
        self.kept.lock().header = Some(Arc::clone(header));
        Ok(())
    }

    fn event(&mut self, event: Arc<SessionEvent>) -> session_persistence::Result<()> {
        if let Some(Ok(fold)) = &mut self.fold
            && let Err(error) = fold.apply(&event)
        {
            self.fold = Some(Err(error));
        }
        if self.before_seq.is_some_and(|before| event.seq >= before) {
            if self.fold.is_some() {
                return Ok(());
            }
            // Nothing past the window is needed: stop the scan (the caller tells this stop from
            // a cancellation by the flag).
            self.kept.lock().stopped = true;
            return Err(PersistenceError::Cancelled);
        }
        let mut kept = self.kept.lock();
        kept.window_bytes += event.encoded_len();
        kept.window.push_back(event);
        while kept.window.len() > 1 && kept.window_bytes > self.budget {
            if let Some(oldest) = kept.window.pop_front() {
                kept.window_bytes -= oldest.encoded_len();
            }
        }
        Ok(())
    }

    fn restart(&mut self) -> bool {
        *self.kept.lock() = Kept::default();
        self.fold = self.registry.as_ref().map(|registry| Ok(registry.begin_full_restore()));
        true
    }
}

/// The seq a page of `max_messages` messages starts at (reference 04 §7.2), or 0: walking back
/// from the end of the window, each `user/message` or `assistant/message` appended to the
/// surface counts one message; the page starts at the group start (the lowest of its own seq and
/// its `sourceEventSeqs`) of the `max_messages`-th one.
fn message_cut(window: &[Arc<SessionEvent>], max_messages: u64) -> u64 {
    let mut counted = 0u64;
    for event in window.iter().rev() {
        let is_message = event.kind == "user/message" || event.kind == "assistant/message";
        if !is_message || event.surface_op != Some(SurfaceOp::Append) {
            continue;
        }
        counted += 1;
        if counted == max_messages {
            let sources = event.source_event_seqs.as_deref().unwrap_or(&[]);
            return sources.iter().copied().fold(event.seq, u64::min);
        }
    }
    0
}

/// The first index of the newest run of `window` whose stored JSON fits `budget` bytes; one
/// event over the budget is a run of its own.
fn budget_start(window: &[Arc<SessionEvent>], budget: usize) -> usize {
    let mut bytes = 0usize;
    for (idx, event) in window.iter().enumerate().rev() {
        bytes = bytes.saturating_add(event.encoded_len());
        if bytes > budget && idx + 1 < window.len() {
            return idx + 1;
        }
    }
    0
}

/// Pages a cut (a whole log, or a suffix of it, as a cold page read keeps): the window ends
/// before `before_seq`; the page starts at its message boundary, or later where the byte budget
/// runs out (`truncated`); projections ride only the tail page.
pub(crate) fn paginate(cut: Cut, query: PageQuery, budget: usize) -> HistoryPage {
    let events = &cut.events[..cut.len];
    let window_end = match query.before_seq {
        Some(before) => events.partition_point(|event| event.seq < before),
        None => events.len(),
    };
    let window = &events[..window_end];
    let cut_seq = message_cut(window, query.max_messages.unwrap_or(DEFAULT_MAX_MESSAGES));
    let message_start = window.partition_point(|event| event.seq < cut_seq);
    let start = message_start.max(budget_start(window, budget));
    let page = &window[start..];
    // Seqs are positions: a page whose first seq is past the message boundary was cut by the
    // budget (or by the suffix a cold read kept, which is the budget's cut too).
    let first_seq = page.first().map(|event| event.seq);
    let truncated = first_seq.is_some_and(|first| first > cut_seq);
    let has_more = first_seq.is_some_and(|first| first > 0);
    let entries = page.iter().map(|event| HistoryEntry { event: Arc::clone(event) }).collect();
    let projections = if query.before_seq.is_none() { cut.projections } else { None };
    HistoryPage { events: entries, has_more, truncated, projections }
}

#[cfg(test)]
mod tests {
    use session_core::JsonData;

    use super::*;

    fn event(seq: u64, kind: &str, sources: Option<Vec<u64>>) -> Arc<SessionEvent> {
        let mut event = SessionEvent::new(kind, seq, 0, JsonData::empty_object());
        if kind.ends_with("message") {
            event.surface_op = Some(SurfaceOp::Append);
        }
        event.source_event_seqs = sources.map(Vec::into_boxed_slice);
        Arc::new(event)
    }

    /// A log of `kinds` (`u`, `a`, `c` chunk, `t` other) with assistant messages sourcing the
    /// chunks right before them.
    fn log(kinds: &str) -> Vec<Arc<SessionEvent>> {
        let mut events = Vec::new();
        let mut chunks = Vec::new();
        for (seq, kind) in kinds.chars().enumerate() {
            let seq = seq as u64;
            events.push(match kind {
                'u' => event(seq, "user/message", None),
                'a' => event(seq, "assistant/message", Some(std::mem::take(&mut chunks))),
                'c' => {
                    chunks.push(seq);
                    event(seq, "assistant/chunk", None)
                }
                _ => event(seq, "turn/start", None),
            });
        }
        events
    }

    fn check(kinds: &str, before_seq: Option<u64>, max_messages: u64, expected: (Vec<u64>, bool)) {
        let events = log(kinds);
        let len = events.len();
        let cut = Cut {
            header: Arc::new(SessionHeader::new(SessionId::from("s"), 0)),
            events: events.into(),
            len,
            projections: None,
        };
        let page = paginate(cut, PageQuery { before_seq, max_messages: Some(max_messages) }, usize::MAX);
        let seqs: Vec<u64> = page.events.iter().map(|entry| entry.event.seq).collect();
        assert_eq!((seqs, page.has_more), expected, "{kinds} before {before_seq:?} max {max_messages}");
    }

    #[test]
    fn message_boundary_paging() {
        check("tucca", None, 1, (vec![2, 3, 4], true));
        check("tucca", None, 2, (vec![1, 2, 3, 4], true));
        check("tucca", None, 3, (vec![0, 1, 2, 3, 4], false));
        check("tuccatua", None, 2, (vec![6, 7], true));
        check("tuccatua", None, 3, (vec![2, 3, 4, 5, 6, 7], true));
        check("tuccatua", Some(6), 1, (vec![2, 3, 4, 5], true));
        check("tuccatua", Some(2), 5, (vec![0, 1], false));
        check("tuccatua", Some(0), 5, (vec![], false));
        check("tuccatua", Some(100), 100, ((0..8).collect(), false));
        check("", None, 50, (vec![], false));
        check("ttt", None, 1, (vec![0, 1, 2], false));
    }
}
