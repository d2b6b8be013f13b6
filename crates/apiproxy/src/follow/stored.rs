//! Reads of a followed session's stored log that hold a bounded piece of it at a time: however
//! far a session written elsewhere runs ahead of this gateway, a round holds at most
//! [`TAIL_LIMIT`] of it per read in flight.

use std::sync::Arc;

use session_core::{SessionEvent, SessionId};
use session_persistence::{PersistenceError, ReadLimit, SessionPersistence, Suffix};
use tokio_util::sync::CancellationToken;

/// What one read of a followed session's log holds at most.
pub(super) const TAIL_LIMIT: ReadLimit = ReadLimit { events: 2_048, bytes: 1 << 20 };

/// `id`'s stored events from `from_seq`, up to `limit` (one read of a batch of one).
pub(super) async fn read_piece(
    persistence: &dyn SessionPersistence,
    id: &SessionId,
    from_seq: u64,
    limit: ReadLimit,
    cancel: &CancellationToken,
) -> Result<Suffix, PersistenceError> {
    let mut answers = persistence.read_from_many(&[(id.clone(), from_seq)], limit, cancel).await;
    answers.pop().unwrap_or_else(|| Err(PersistenceError::invalid_input("a tail read gave no answer")))
}

/// Hands `id`'s stored events with `from_seq <= seq < until` to `each`, a piece of at most
/// [`TAIL_LIMIT`] at a time, in seq order.
pub(super) async fn read_pieces(
    persistence: &dyn SessionPersistence,
    id: &SessionId,
    from_seq: u64,
    until: u64,
    cancel: &CancellationToken,
    mut each: impl FnMut(&[Arc<SessionEvent>]) -> Result<(), PersistenceError>,
) -> Result<(), PersistenceError> {
    let mut at = from_seq;
    while at < until {
        let limit = ReadLimit {
            events: usize::try_from(until - at).unwrap_or(usize::MAX).min(TAIL_LIMIT.events),
            ..TAIL_LIMIT
        };
        let piece = read_piece(persistence, id, at, limit, cancel).await?;
        let before = piece.events.partition_point(|event| event.seq < until);
        each(&piece.events[..before])?;
        match piece.events.last() {
            Some(last) if piece.cut => at = last.seq + 1,
            _ => break,
        }
    }
    Ok(())
}

/// Whether `id`'s stored log, up to `next_seq`, ends inside a turn: its last turn boundary
/// before `next_seq` is a `turn/start`. Read back from `next_seq` in windows that grow eightfold
/// from 64 events (one seek read when the turn began in the last 64), each read in pieces.
pub(super) async fn ends_in_turn(
    persistence: &dyn SessionPersistence,
    id: &SessionId,
    next_seq: u64,
    cancel: &CancellationToken,
) -> Result<bool, PersistenceError> {
    let (mut until, mut window) = (next_seq, 64u64);
    while until > 0 {
        let from = until.saturating_sub(window);
        let mut last_boundary = None;
        read_pieces(persistence, id, from, until, cancel, |events| {
            if let Some(boundary) = events.iter().rev().find(|event| event.is("turn/start") || event.is("turn/end")) {
                last_boundary = Some(boundary.is("turn/start"));
            }
            Ok(())
        })
        .await?;
        if let Some(running) = last_boundary {
            return Ok(running);
        }
        (until, window) = (from, window.saturating_mul(8));
    }
    Ok(false)
}
