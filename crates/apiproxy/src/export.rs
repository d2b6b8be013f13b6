//! Session export as JSON Lines: a session and, on request, its subagent descendants, each as one
//! `{"export":"session",…}` line with its stored header followed by its events, one compact JSON
//! line each — byte for byte what `apiproxy sessions show <id> --jsonl` prints for that session.
//!
//! The gateway serves it at `GET /api/session.export`, the CLI as `apiproxy sessions export`. Both
//! stream: events go out as the log is read, in chunks of about [`CHUNK_BYTES`] (each ends with the
//! line that reaches it), so memory does not grow with the logs.

use std::{collections::HashSet, sync::Arc};

use serde_json::json;
use session_core::{SessionEvent, SessionHeader};
use session_persistence::{PersistenceError, ScanSink, SessionPersistence, inspect_into};
use tokio_util::sync::CancellationToken;

/// The size at which a chunk of lines is handed on.
pub const CHUNK_BYTES: usize = 64 * 1024;

/// Room a chunk's buffer has past [`CHUNK_BYTES`] from the start, so that the line that fills it
/// (unless longer) is written without growing it: a grown buffer copies the whole chunk, which
/// was a twentieth of the instructions of `sessions show --jsonl`.
const CHUNK_SLACK: usize = 16 * 1024;

/// An empty chunk.
fn chunk_buffer() -> Vec<u8> {
    Vec::with_capacity(CHUNK_BYTES + CHUNK_SLACK)
}

/// Appends one event's line: its compact stored JSON and a newline.
pub fn push_event_line(out: &mut Vec<u8>, event: &SessionEvent) {
    event.write_json(out);
    out.push(b'\n');
}

/// The line that opens one session in an export: `{"export":"session","sessionId":…,"header":…}`.
pub fn session_line(header: &SessionHeader) -> Vec<u8> {
    let mut line = serde_json::to_vec(&json!({"export": "session", "sessionId": header.id.as_str(), "header": header}))
        .unwrap_or_default();
    line.push(b'\n');
    line
}

/// The sessions an export of `root` holds, in order: `root`, then (with `descendants`) its
/// subagent children depth first, siblings by `createdAt` then id, each one `visible` admits.
pub async fn plan(
    persistence: &dyn SessionPersistence,
    root: Arc<SessionHeader>,
    descendants: bool,
    visible: &(dyn Fn(&SessionHeader) -> bool + Sync),
    cancel: &CancellationToken,
) -> Result<Vec<Arc<SessionHeader>>, PersistenceError> {
    let mut order = Vec::new();
    let mut seen = HashSet::new();
    // A stack of the sessions still to visit, the next one last.
    let mut stack = vec![root];
    while let Some(header) = stack.pop() {
        // A session is visited once, so even a parent cycle in damaged headers ends.
        if !seen.insert(header.id.clone()) {
            continue;
        }
        let id = header.id.clone();
        order.push(header);
        if !descendants {
            break;
        }
        let listing = persistence.list_children(&id, cancel).await?;
        let mut children: Vec<Arc<SessionHeader>> = listing
            .headers
            .into_iter()
            .map(|stored| stored.header)
            .filter(|child| child.is_subagent() && child.parent_session.as_ref() == Some(&id) && visible(child))
            .collect();
        children.sort_by(|a, b| (a.created_at, &a.id).cmp(&(b.created_at, &b.id)));
        stack.extend(children.into_iter().rev());
    }
    Ok(order)
}

/// Streams one session's export lines (its opening line, then its events) to `send` in chunks,
/// called on the thread that reads the log, and answers the last, partial chunk (for the caller to
/// send where it runs). `send` failing (the reader went away) stops the read with that error.
pub async fn write_session(
    persistence: &dyn SessionPersistence,
    header: &SessionHeader,
    cancel: &CancellationToken,
    send: Box<dyn FnMut(Vec<u8>) -> Result<(), PersistenceError> + Send>,
) -> Result<Vec<u8>, PersistenceError> {
    let mut sink = ChunkSink::new(send);
    sink.buffer.extend_from_slice(&session_line(header));
    let (sink, _) = inspect_into(persistence, &header.id, cancel, EventsOnly(sink)).await?;
    Ok(sink.0.finish())
}

/// Collects lines and hands them on in chunks of about [`CHUNK_BYTES`].
pub struct ChunkSink {
    buffer: Vec<u8>,
    send: Box<dyn FnMut(Vec<u8>) -> Result<(), PersistenceError> + Send>,
}

impl std::fmt::Debug for ChunkSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChunkSink").field("buffered", &self.buffer.len()).finish_non_exhaustive()
    }
}

impl ChunkSink {
    /// A sink handing its chunks to `send`.
    pub fn new(send: Box<dyn FnMut(Vec<u8>) -> Result<(), PersistenceError> + Send>) -> ChunkSink {
        ChunkSink { buffer: chunk_buffer(), send }
    }

    /// Takes one event's line, handing on a full chunk.
    pub fn push(&mut self, event: &SessionEvent) -> Result<(), PersistenceError> {
        push_event_line(&mut self.buffer, event);
        if self.buffer.len() >= CHUNK_BYTES {
            let chunk = std::mem::replace(&mut self.buffer, chunk_buffer());
            (self.send)(chunk)?;
        }
        Ok(())
    }

    /// What is left: the last chunk, not yet handed on.
    pub fn finish(self) -> Vec<u8> {
        self.buffer
    }
}

/// A [`ScanSink`] writing each event through a [`ChunkSink`].
#[derive(Debug)]
pub struct EventsOnly(pub ChunkSink);

impl ScanSink for EventsOnly {
    fn event(&mut self, event: Arc<SessionEvent>) -> session_persistence::Result<()> {
        self.0.push(&event)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use session_core::{JsonData, SessionEvent};

    use super::*;

    #[test]
    fn a_chunk_is_handed_on_in_the_buffer_it_started_in() {
        let sent = Arc::new(Mutex::new(Vec::new()));
        let into = Arc::clone(&sent);
        let mut sink = ChunkSink::new(Box::new(move |chunk| {
            into.lock().unwrap().push(chunk);
            Ok(())
        }));
        let data = JsonData::from_text(format!("{{\"text\":\"{}\"}}", "x".repeat(900))).unwrap();
        let events: Vec<SessionEvent> =
            (0..200).map(|seq| SessionEvent::new("note/added", seq, 1, data.clone())).collect();
        for event in &events {
            sink.push(event).unwrap();
        }
        let last = sink.finish();
        let sent = sent.lock().unwrap();
        assert_eq!(sent.len(), 2, "200 lines of about 960 bytes are three chunks, the last one left");
        for chunk in sent.iter() {
            assert!(chunk.len() >= CHUNK_BYTES && chunk.len() < CHUNK_BYTES + 1_000);
            // The line that filled it fit in the room past `CHUNK_BYTES`: no growth, no copy.
            assert_eq!(chunk.capacity(), CHUNK_BYTES + CHUNK_SLACK);
        }
        let mut expected = Vec::new();
        for event in &events {
            push_event_line(&mut expected, event);
        }
        assert_eq!([sent.concat(), last].concat(), expected);
    }
}
