//! History reads shared by `session.history` and `subagent.history`: the two source arms (live:
//! in-memory events plus the registry's watermark snapshot; cold: one persistence inspection plus
//! a detached fold) and message-boundary paging (reference 04 §7.2).

use std::sync::Arc;

use session_core::{Session, SessionEvent, SessionHeader, SessionId, SurfaceOp};
use session_persistence::PersistenceError;
use session_projection::{CheckpointRows, Snapshot};
use tokio_util::sync::CancellationToken;

use crate::{
    access::Caller,
    proxy::Shared,
    wire::{HistoryEntry, HistoryPage, ProjectionsBlock},
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
    Failed(PersistenceError),
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

/// Reads a session for history: live if attached, else from persistence. Another owner's session,
/// an unknown one, and a cold one without a cwd are all `NotFound`.
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
    // Authorize on the header alone before reading the log, so another owner's session costs no
    // read and answers in the time an unknown id does.
    match persistence.stored_header(&session_id, cancel).await {
        Ok(Some(stored)) if stored.header.cwd.is_some() && caller.sees(&stored.header) => {}
        Ok(_) | Err(PersistenceError::NotFound { .. } | PersistenceError::InvalidInput { .. }) => {
            return Err(ReadError::NotFound);
        }
        Err(PersistenceError::Cancelled) => return Err(ReadError::Cancelled),
        // A header that cannot be read names no owner: only the operator tier learns more.
        Err(_) if caller.owner.is_some() => return Err(ReadError::NotFound),
        Err(error) => return Err(ReadError::Failed(error)),
    }
    let inspection = match persistence.inspect(&session_id, cancel).await {
        Ok(inspection) => inspection,
        Err(PersistenceError::NotFound { .. } | PersistenceError::InvalidInput { .. }) => {
            return Err(ReadError::NotFound);
        }
        Err(PersistenceError::Cancelled) => return Err(ReadError::Cancelled),
        Err(error) => return Err(ReadError::Failed(error)),
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

/// The first index of the page and whether older events exist (reference 04 §7.2): walking back
/// from the end of the window (`seq < before_seq`), each `user/message` or `assistant/message`
/// appended to the surface counts one message; the page starts at the group start (the lowest of
/// its own seq and its `sourceEventSeqs`) of the `max_messages`-th one, or at 0.
pub(crate) fn page_start(events: &[Arc<SessionEvent>], window_end: usize, max_messages: u64) -> (usize, bool) {
    let mut counted = 0u64;
    let mut cut: u64 = 0;
    for event in events[..window_end].iter().rev() {
        let is_message = event.kind == "user/message" || event.kind == "assistant/message";
        if !is_message || event.surface_op != Some(SurfaceOp::Append) {
            continue;
        }
        counted += 1;
        if counted == max_messages {
            let sources = event.source_event_seqs.as_deref().unwrap_or(&[]);
            cut = sources.iter().copied().fold(event.seq, u64::min);
            break;
        }
    }
    // Seqs are positions, so the start index is where the seqs reach the cut.
    let start = events[..window_end].partition_point(|event| event.seq < cut);
    (start, cut > 0)
}

/// Pages a cut: the window ends before `before_seq`; projections ride only the tail page.
pub(crate) fn paginate(cut: Cut, before_seq: Option<u64>, max_messages: Option<u64>) -> HistoryPage {
    let events = &cut.events[..cut.len];
    let window_end = match before_seq {
        Some(before) => events.partition_point(|event| event.seq < before),
        None => events.len(),
    };
    let (start, has_more) = page_start(events, window_end, max_messages.unwrap_or(DEFAULT_MAX_MESSAGES));
    let entries = events[start..window_end].iter().map(|event| HistoryEntry { event: Arc::clone(event) }).collect();
    let projections = if before_seq.is_none() { cut.projections } else { None };
    HistoryPage { events: entries, has_more, projections }
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
        let page = paginate(cut, before_seq, Some(max_messages));
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
