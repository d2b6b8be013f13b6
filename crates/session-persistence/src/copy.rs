//! Copying a store into another of any backend, session by session, keeping every stored event
//! byte for byte: how a store moves from JSONL to SQLite or PostgreSQL (or back), and how the
//! benchmarks write one workload into every backend.
//!
//! [`copy_store`] copies what the source holds, as its backend stores it: the header and the
//! valid stored prefix of each log, never the closers a read synthesizes (a log cut off inside a
//! turn is copied as it is, and reads back the same way from the target). Each session is checked
//! after it is written: the target's header and events, read back, must serialize to exactly the
//! source's lines (the lines `apiproxy sessions show --jsonl` prints, closers aside).
//!
//! It is resumable: a session the target already holds identically is skipped; one the target
//! holds a prefix of (a copy interrupted between batches, or a source that grew since) gets the
//! rest appended; one that differs in any other way is refused and left alone. A source log that
//! cannot be read is reported and skipped, and never written partly: its events are read through
//! before the first byte of it is written. Memory stays bounded: a session larger than
//! [`CopyOptions::buffer_bytes`] is read twice (once to check it, once to write it in batches)
//! instead of being held.

use std::sync::{
    Mutex,
    atomic::{AtomicUsize, Ordering},
};
use std::{fmt, sync::Arc};

use session_core::{SessionEvent, SessionHeader, SessionId};
use sha2::{Digest, Sha256};
use tokio_util::sync::CancellationToken;

use crate::{
    backend::{Backend, ScanSink},
    error::{PersistenceError, Result},
    threads::spawn_helper,
};

/// How [`copy_store`] runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CopyOptions {
    /// Sessions copied at once, each on its own thread (a remote store gains the most).
    pub jobs: usize,
    /// Events per appended batch at most.
    pub batch_events: usize,
    /// Bytes of event payload per appended batch at most (one larger event goes alone).
    pub batch_bytes: usize,
    /// Bytes of event payload one session's copy may hold in memory; a larger session is read
    /// once more instead.
    pub buffer_bytes: usize,
}

impl Default for CopyOptions {
    fn default() -> CopyOptions {
        CopyOptions { jobs: 4, batch_events: 1_000, batch_bytes: 4 << 20, buffer_bytes: 32 << 20 }
    }
}

/// What became of one session.
#[derive(Debug)]
pub enum CopyOutcome {
    /// The target did not hold it; it does now, identically.
    Copied {
        /// Events copied.
        events: u64,
    },
    /// The target held a prefix of it (an interrupted copy, or a source that grew since); the
    /// rest was appended.
    Resumed {
        /// Events the target already held.
        from: u64,
        /// Events it holds now.
        events: u64,
    },
    /// The target already held it identically; nothing was written.
    Identical {
        /// Events it holds.
        events: u64,
    },
    /// The source log holds a header and no event, which the target's backend cannot store (a
    /// SQLite or PostgreSQL store holds a session from its first event on). Nothing is lost: a
    /// read of the id finds no session, as the reference's own stores behave.
    NothingToStore,
    /// The target holds a session of this id that is not a prefix of the source's; it was left
    /// alone.
    Differs {
        /// How it differs.
        reason: String,
    },
    /// The source log cannot be read (damaged, unsupported, unreadable); nothing was written.
    Damaged {
        /// Why it cannot be read.
        error: PersistenceError,
    },
    /// Writing or checking the copy failed; a later run resumes it.
    Failed {
        /// What failed.
        error: PersistenceError,
    },
}

impl CopyOutcome {
    /// Whether the target now holds the session as the source does (or, for
    /// [`NothingToStore`](CopyOutcome::NothingToStore), reads it as the reference's stores do).
    pub fn is_done(&self) -> bool {
        matches!(
            self,
            CopyOutcome::Copied { .. }
                | CopyOutcome::Resumed { .. }
                | CopyOutcome::Identical { .. }
                | CopyOutcome::NothingToStore
        )
    }
}

/// One session's copy.
#[derive(Debug)]
pub struct SessionCopy {
    /// The session's id (as the source's location names it, for a log whose header is damaged).
    pub id: SessionId,
    /// What became of it.
    pub outcome: CopyOutcome,
    /// The source log had a torn tail (a crash mid-write, or an append in flight), which was not
    /// copied: only the committed prefix was.
    pub torn: bool,
}

impl fmt::Display for SessionCopy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let id = &self.id;
        match &self.outcome {
            CopyOutcome::Copied { events } => write!(f, "{id}: copied {events} events")?,
            CopyOutcome::Resumed { from, events } => write!(f, "{id}: resumed at seq {from}, {events} events")?,
            CopyOutcome::Identical { events } => write!(f, "{id}: already copied ({events} events)")?,
            CopyOutcome::NothingToStore => write!(f, "{id}: holds no event, so the target stores nothing")?,
            CopyOutcome::Differs { reason } => write!(f, "{id}: refused, the target's session differs: {reason}")?,
            CopyOutcome::Damaged { error } => write!(f, "{id}: skipped, the source log cannot be read: {error}")?,
            CopyOutcome::Failed { error } => write!(f, "{id}: failed: {error}")?,
        }
        if self.torn {
            write!(f, " (the source's torn tail was left behind)")?;
        }
        Ok(())
    }
}

/// Copies every log `source` holds into `target`, `options.jobs` sessions at a time, calling
/// `progress(done, total, copy)` as each session ends. Returns every session's copy in id order.
/// Fails only when the source cannot be surveyed or `cancel` fires (sessions already copied stay
/// copied; a session cut off between batches is resumed by the next run).
pub fn copy_store(
    source: &dyn Backend,
    target: &dyn Backend,
    options: &CopyOptions,
    cancel: &CancellationToken,
    progress: &(dyn Fn(usize, usize, &SessionCopy) + Sync),
) -> Result<Vec<SessionCopy>> {
    let survey = source.survey(cancel)?;
    let total = survey.len();
    let next = AtomicUsize::new(0);
    let done = AtomicUsize::new(0);
    let entries: Vec<Mutex<Option<_>>> = survey.into_iter().map(|entry| Mutex::new(Some(entry))).collect();
    let copies: Vec<Mutex<Option<SessionCopy>>> = (0..total).map(|_| Mutex::new(None)).collect();
    let work = || {
        loop {
            let index = next.fetch_add(1, Ordering::SeqCst);
            if index >= total || cancel.is_cancelled() {
                return;
            }
            let Some(entry) = lock(&entries[index]).take() else { continue };
            let copy = match entry.header {
                Ok(stored) => copy_session(source, target, &stored.header, options, cancel),
                Err(error) => SessionCopy { id: entry.id, outcome: CopyOutcome::Damaged { error }, torn: false },
            };
            progress(done.fetch_add(1, Ordering::SeqCst) + 1, total, &copy);
            *lock(&copies[index]) = Some(copy);
        }
    };
    std::thread::scope(|scope| {
        for _ in 1..options.jobs.max(1) {
            // Each thread takes the next session as it finishes one: the copy runs on the threads
            // it got, this one at least.
            if let Err(error) = spawn_helper(scope, work) {
                tracing::debug!(%error, "a copying thread did not start; copying on fewer threads");
                break;
            }
        }
        work();
    });
    if cancel.is_cancelled() {
        return Err(PersistenceError::Cancelled);
    }
    let mut copies: Vec<SessionCopy> = copies.into_iter().filter_map(|slot| slot.into_inner().ok().flatten()).collect();
    copies.sort_by(|a, b| a.id.cmp(&b.id));
    Ok(copies)
}

/// A mutex's value, even if a copying thread panicked while holding it (the slots hold plain
/// data, never left half-written).
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Copies one session (see the [module](self) documentation).
pub fn copy_session(
    source: &dyn Backend,
    target: &dyn Backend,
    header: &SessionHeader,
    options: &CopyOptions,
    cancel: &CancellationToken,
) -> SessionCopy {
    let id = header.id.clone();
    let (outcome, torn) = match copy_log(source, target, header, options, cancel) {
        Ok(copied) => copied,
        Err(outcome) => (outcome, false),
    };
    SessionCopy { id, outcome, torn }
}

/// A count of lines and their digest.
type Digested = (u64, [u8; 32]);

/// The digest of a log's lines: each event's stored JSON and a newline.
#[derive(Clone, Default)]
struct Lines {
    digest: Sha256,
    n_events: u64,
    line: Vec<u8>,
}

impl Lines {
    fn add(&mut self, event: &SessionEvent) -> Result<()> {
        self.line.clear();
        serde_json::to_writer(&mut self.line, event).map_err(|error| {
            PersistenceError::invalid_input(format!("event {} does not serialize: {error}", event.seq))
        })?;
        self.line.push(b'\n');
        self.digest.update(&self.line);
        self.n_events += 1;
        Ok(())
    }

    fn value(&self) -> Digested {
        (self.n_events, self.digest.clone().finalize().into())
    }
}

/// Reads a log through, keeping the digest of all its lines and of its first `prefix` ones, and
/// the events from `prefix` on while they fit in `budget` bytes.
struct Reader {
    lines: Lines,
    prefix: u64,
    at_prefix: Option<Digested>,
    kept: Option<Vec<Arc<SessionEvent>>>,
    kept_bytes: usize,
    budget: usize,
}

impl Reader {
    fn new(prefix: u64, budget: usize) -> Reader {
        Reader { lines: Lines::default(), prefix, at_prefix: None, kept: Some(Vec::new()), kept_bytes: 0, budget }
    }
}

impl ScanSink for Reader {
    fn event(&mut self, event: Arc<SessionEvent>) -> Result<()> {
        if self.lines.n_events == self.prefix {
            self.at_prefix = Some(self.lines.value());
        }
        self.lines.add(&event)?;
        if event.seq >= self.prefix
            && let Some(kept) = &mut self.kept
        {
            self.kept_bytes += event_bytes(&event);
            if self.kept_bytes > self.budget {
                self.kept = None;
            } else {
                kept.push(event);
            }
        }
        Ok(())
    }

    fn restart(&mut self) -> bool {
        *self = Reader::new(self.prefix, self.budget);
        true
    }

    fn read_ahead(&self) -> bool {
        true
    }
}

fn event_bytes(event: &SessionEvent) -> usize {
    event.data.as_str().len() + 64
}

/// Appends events to the target in batches; as a scan's sink, digests every event before
/// `until` and appends those from `from` on.
struct Writer<'a> {
    target: &'a dyn Backend,
    header: &'a SessionHeader,
    options: &'a CopyOptions,
    from: u64,
    until: u64,
    materialized: bool,
    batch: Vec<Arc<SessionEvent>>,
    batch_bytes: usize,
    /// The lines of the events the scan streamed (before `until`).
    seen: Lines,
    /// The lines of the events before `from` as the target holds them: a second read must agree
    /// before anything is appended after them.
    prefix: Digested,
    /// The error of a failed append (the scan stops with it).
    failed: Option<PersistenceError>,
}

impl Writer<'_> {
    fn push(&mut self, event: Arc<SessionEvent>) -> Result<()> {
        let bytes = event_bytes(&event);
        if !self.batch.is_empty()
            && (self.batch.len() >= self.options.batch_events || self.batch_bytes + bytes > self.options.batch_bytes)
        {
            self.flush()?;
        }
        self.batch_bytes += bytes;
        self.batch.push(event);
        Ok(())
    }

    /// Appends the batch; the first append of a session the target does not hold creates it
    /// (with its header, even without events where the backend stores such a log).
    fn flush(&mut self) -> Result<()> {
        if self.batch.is_empty() && self.materialized {
            return Ok(());
        }
        self.target.append_batch(self.header, &self.batch, self.materialized)?;
        self.materialized = true;
        self.batch.clear();
        self.batch_bytes = 0;
        Ok(())
    }
}

impl ScanSink for Writer<'_> {
    fn event(&mut self, event: Arc<SessionEvent>) -> Result<()> {
        if event.seq >= self.until {
            // What the source gained since the first read is left for the next run.
            return Err(PersistenceError::Cancelled);
        }
        if event.seq == self.from && self.seen.value() != self.prefix {
            // The source changed since the first read: nothing of it is appended after the prefix.
            self.failed = Some(PersistenceError::inconsistent(&self.header.id, "the source changed during the copy"));
            return Err(PersistenceError::Cancelled);
        }
        self.seen.add(&event)?;
        if event.seq < self.from {
            return Ok(());
        }
        match self.push(event) {
            Ok(()) => Ok(()),
            Err(error) => {
                // Kept for the caller, which tells it from the scan's own errors.
                self.failed = Some(error);
                Err(PersistenceError::Cancelled)
            }
        }
    }

    fn read_ahead(&self) -> bool {
        true
    }
}

/// The target's copy of a session: its header, the lines of its valid prefix, and its torn tail
/// (an interrupted write of an earlier run), or `None` when it holds none.
fn target_copy(target: &dyn Backend, header: &SessionHeader, cancel: &CancellationToken) -> Result<Option<Held>> {
    let mut lines = ReadBack(Lines::default());
    match target.scan(&header.id, cancel, &mut lines)? {
        None => Ok(None),
        Some(outcome) => {
            Ok(Some(Held { header: SessionHeader::clone(&outcome.header), lines: lines.0.value(), torn: outcome.torn }))
        }
    }
}

/// What the target holds of a session.
struct Held {
    header: SessionHeader,
    lines: Digested,
    torn: Option<crate::backend::TornTail>,
}

/// Digests a read-back.
struct ReadBack(Lines);

impl ScanSink for ReadBack {
    fn event(&mut self, event: Arc<SessionEvent>) -> Result<()> {
        self.0.add(&event)
    }

    fn restart(&mut self) -> bool {
        self.0 = Lines::default();
        true
    }

    fn read_ahead(&self) -> bool {
        true
    }
}

fn header_json(header: &SessionHeader) -> String {
    serde_json::to_string(header).unwrap_or_default()
}

/// One session's copy: `Ok((outcome, torn))`, or `Err(outcome)` for a copy that stopped early.
fn copy_log(
    source: &dyn Backend,
    target: &dyn Backend,
    header: &SessionHeader,
    options: &CopyOptions,
    cancel: &CancellationToken,
) -> std::result::Result<(CopyOutcome, bool), CopyOutcome> {
    let failed = |error| CopyOutcome::Failed { error };
    let existing = target_copy(target, header, cancel).map_err(|error| match error {
        PersistenceError::Corrupt { .. }
        | PersistenceError::Inconsistent { .. }
        | PersistenceError::FormatUnsupported { .. } => {
            CopyOutcome::Differs { reason: format!("the target's copy cannot be read: {error}") }
        }
        error => failed(error),
    })?;
    if let Some(held) = &existing
        && header_json(&held.header) != header_json(header)
    {
        return Err(CopyOutcome::Differs { reason: "the headers differ".to_owned() });
    }
    let held = existing.as_ref().map_or(Lines::default().value(), |held| held.lines);
    let mut reader = Reader::new(held.0, options.buffer_bytes);
    let scanned = source.scan(&header.id, cancel, &mut reader).map_err(|error| match error {
        PersistenceError::Cancelled => failed(error),
        error => CopyOutcome::Damaged { error },
    })?;
    let Some(scanned) = scanned else {
        return Err(CopyOutcome::Damaged { error: PersistenceError::NotFound { id: header.id.clone() } });
    };
    let torn = scanned.torn.is_some();
    if header_json(&scanned.header) != header_json(header) {
        return Err(failed(PersistenceError::inconsistent(&header.id, "the source's header changed during the copy")));
    }
    let source_lines = reader.lines.value();
    let (from, n_events) = (held.0, source_lines.0);
    if from > n_events {
        return Err(CopyOutcome::Differs { reason: format!("the target holds {from} events, the source {n_events}") });
    }
    let at_prefix = if from == n_events { Some(source_lines) } else { reader.at_prefix };
    if existing.is_some() && at_prefix != Some(held) {
        return Err(CopyOutcome::Differs { reason: format!("its first {from} events are not the source's") });
    }
    if let Some(torn) = existing.as_ref().and_then(|held| held.torn.as_ref()) {
        // An earlier run was cut off inside a write: the tail it left is cut (its complete events,
        // part of the prefix just checked, are written again) before anything is appended after it.
        target.commit_repair(header, Some(torn), &[]).map_err(failed)?;
    }
    if existing.is_some() && from == n_events {
        return Ok((CopyOutcome::Identical { events: n_events }, torn));
    }
    let mut writer = Writer {
        target,
        header,
        options,
        from,
        until: n_events,
        materialized: existing.is_some(),
        batch: Vec::new(),
        batch_bytes: 0,
        seen: Lines::default(),
        prefix: held,
        failed: None,
    };
    match reader.kept.take() {
        Some(kept) => {
            for event in kept {
                writer.push(event).map_err(failed)?;
            }
        }
        None => {
            // Too large to hold: read it again, appending as it goes, and check that the second
            // read saw what the first did (a source repaired in between is not copied half old,
            // half new; the read-back below would refuse it anyway).
            let scanned = source.scan(&header.id, cancel, &mut writer);
            if let Some(error) = writer.failed.take() {
                return Err(failed(error));
            }
            match scanned {
                Err(PersistenceError::Cancelled) if !cancel.is_cancelled() => {}
                Err(error) => return Err(failed(error)),
                Ok(_) => {}
            }
            if writer.seen.value() != source_lines {
                return Err(failed(PersistenceError::inconsistent(&header.id, "the source changed during the copy")));
            }
        }
    }
    writer.flush().map_err(failed)?;
    if n_events == 0 && existing.is_none() {
        let stored = target.header(&header.id, cancel).map_err(failed)?;
        if stored.is_none() {
            return Ok((CopyOutcome::NothingToStore, torn));
        }
    }
    match target_copy(target, header, cancel).map_err(failed)? {
        Some(held)
            if header_json(&held.header) == header_json(header)
                && held.lines == source_lines
                && held.torn.is_none() => {}
        _ => {
            return Err(failed(PersistenceError::inconsistent(&header.id, "the copy does not read back identically")));
        }
    }
    let outcome = if existing.is_some() {
        CopyOutcome::Resumed { from, events: n_events }
    } else {
        CopyOutcome::Copied { events: n_events }
    };
    Ok((outcome, torn))
}

#[cfg(test)]
mod tests;
