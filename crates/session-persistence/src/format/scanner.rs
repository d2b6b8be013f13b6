//! The incremental line scanner (reference 01 §4.5): committed versus torn.
//!
//! Bytes arrive in chunks of any size; lines may split anywhere, inside UTF-8 included. Only a
//! line with its terminating newline is decoded. The first defect (an undecodable line or a seq
//! gap) is remembered, not reported: a defect with no later `turn/end` is a torn tail that the
//! valid prefix ends before, while a `turn/end` after it proves the defect sits in committed
//! history, which is fatal. Events before the first defect can never be rolled back, so each one
//! is handed out as soon as its line is checked.

use std::path::{Path, PathBuf};

use session_core::SessionEvent;

use super::{MAX_RECORD_BYTES, chunk_rows::decode_record};
use crate::error::{CorruptKind, Location, PersistenceError, Result};

const TURN_END: &str = "turn/end";

/// The first defect found, kept until a later `turn/end` makes it fatal.
#[derive(Debug, Clone)]
pub(crate) struct Issue {
    kind: CorruptKind,
    message: String,
    byte: u64,
}

impl Issue {
    pub(crate) fn to_error(&self, path: &Path) -> PersistenceError {
        PersistenceError::corrupt(self.kind, self.location(path), self.message.clone())
    }

    /// The issue as an error whose message starts with `prefix`.
    pub(crate) fn to_error_with_prefix(&self, path: &Path, prefix: &str) -> PersistenceError {
        PersistenceError::corrupt(self.kind, self.location(path), format!("{prefix}: {}", self.message))
    }

    pub(crate) fn location(&self, path: &Path) -> Location {
        Location::at_byte(path, self.byte)
    }
}

#[derive(Debug)]
pub(crate) struct LineScanner {
    path: PathBuf,
    /// Offset of the next byte fed, counted from the start of the log text (header included).
    input: u64,
    /// End of the last line whose events were accepted.
    committed: u64,
    next_seq: u64,
    /// Event lines completed so far (the header is not counted), as the reference numbers them.
    line: u64,
    fragment: Vec<u8>,
    /// The pending line outgrew [`MAX_RECORD_BYTES`]; its bytes are skipped, not buffered.
    oversized: bool,
    issue: Option<Issue>,
    /// When set, defects are located at this file byte (the start of the zstd frame being fed)
    /// instead of at the line's own offset.
    frame_start: Option<u64>,
    decoded: Vec<SessionEvent>,
}

impl LineScanner {
    /// A scanner for the event lines that follow a header of `start` bytes.
    pub(crate) fn new(path: &Path, start: u64) -> LineScanner {
        LineScanner {
            path: path.to_owned(),
            input: start,
            committed: start,
            next_seq: 0,
            line: 0,
            fragment: Vec::new(),
            oversized: false,
            issue: None,
            frame_start: None,
            decoded: Vec::new(),
        }
    }

    /// A scanner for the event lines from `start` on, where the log's event `next_seq` begins
    /// (a suffix read that sought its way in): the lines before are not seen.
    pub(crate) fn resumed(path: &Path, start: u64, next_seq: u64) -> LineScanner {
        LineScanner { next_seq, ..LineScanner::new(path, start) }
    }

    pub(crate) fn set_frame_start(&mut self, frame_start: u64) {
        self.frame_start = Some(frame_start);
    }

    pub(crate) fn committed(&self) -> u64 {
        self.committed
    }

    pub(crate) fn input(&self) -> u64 {
        self.input
    }

    pub(crate) fn n_events(&self) -> u64 {
        self.next_seq
    }

    pub(crate) fn issue(&self) -> Option<&Issue> {
        self.issue.as_ref()
    }

    /// Consumes the next bytes, handing each newly committed event to `emit`.
    pub(crate) fn feed(&mut self, chunk: &[u8], emit: &mut dyn FnMut(SessionEvent) -> Result<()>) -> Result<()> {
        let chunk_start = self.input;
        let mut line_start = 0;
        for newline in memchr::memchr_iter(b'\n', chunk) {
            let piece = &chunk[line_start..newline];
            let end = chunk_start + newline as u64 + 1;
            if self.fragment.is_empty() && !self.oversized {
                let start = chunk_start + line_start as u64;
                self.input = end;
                self.consume_line(piece, start, end, emit)?;
            } else {
                self.buffer(piece);
                let mut line = std::mem::take(&mut self.fragment);
                let start = end - line.len() as u64 - 1;
                self.input = end;
                let result = self.consume_line(&line, start, end, emit);
                line.clear();
                self.fragment = line;
                self.oversized = false;
                result?;
            }
            line_start = newline + 1;
        }
        self.buffer(&chunk[line_start..]);
        self.input = chunk_start + chunk.len() as u64;
        Ok(())
    }

    fn buffer(&mut self, piece: &[u8]) {
        if self.oversized || self.fragment.len() + piece.len() > MAX_RECORD_BYTES {
            self.oversized = true;
            self.fragment.clear();
        } else {
            self.fragment.extend_from_slice(piece);
        }
    }

    fn consume_line(
        &mut self,
        line: &[u8],
        start: u64,
        end: u64,
        emit: &mut dyn FnMut(SessionEvent) -> Result<()>,
    ) -> Result<()> {
        self.line += 1;
        self.decoded.clear();
        let decoded = if self.oversized {
            Err(format!("the record exceeds {MAX_RECORD_BYTES} bytes"))
        } else {
            match std::str::from_utf8(line) {
                Ok(text) => decode_record(text, &mut self.decoded).map_err(|error| error.to_string()),
                Err(error) => Err(format!("invalid UTF-8: {error}")),
            }
        };
        if let Err(why) = decoded {
            if self.issue.is_none() {
                let message = format!("corrupt session log: unparsable committed event at line {}: {why}", self.line);
                self.issue = Some(Issue { kind: CorruptKind::Record, message, byte: self.location(start) });
            }
            return Ok(());
        }
        let has_turn_end = self.decoded.iter().any(|event| event.is(TURN_END));
        if let Some(issue) = &self.issue {
            return if has_turn_end { Err(issue.to_error(&self.path)) } else { Ok(()) };
        }
        if let Some((offset, event)) =
            self.decoded.iter().enumerate().find(|(offset, event)| event.seq != self.next_seq + *offset as u64)
        {
            let expected = self.next_seq + offset as u64;
            let message = format!(
                "corrupt session log: seq gap in committed region at line {} (expected {expected}, got {})",
                self.line, event.seq
            );
            let issue = Issue { kind: CorruptKind::SeqGap, message, byte: self.location(start) };
            let error = issue.to_error(&self.path);
            self.issue = Some(issue);
            return if has_turn_end { Err(error) } else { Ok(()) };
        }
        self.next_seq += self.decoded.len() as u64;
        self.committed = end;
        for event in self.decoded.drain(..) {
            emit(event)?;
        }
        Ok(())
    }

    fn location(&self, line_start: u64) -> u64 {
        self.frame_start.unwrap_or(line_start)
    }
}
