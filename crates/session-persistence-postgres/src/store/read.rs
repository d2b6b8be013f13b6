//! Reading a session: its header and its events from a seq on, in one snapshot. A short log
//! (at most [`SHORT_ROWS`] events from that seq) is one statement, which is its own snapshot:
//! one round trip where the long read takes at least four (begin, the session row, the events,
//! commit), which is what a listing of many small sessions, a `verify` and a blank probe pay per
//! session. A longer one is read in a read-only repeatable-read transaction, in statements that
//! span about [`SPAN_BYTES`] of events each (the last one without an end) and whose rows stream:
//! the server reads and sends rows while the client decodes the ones before. A sink that holds a
//! statement open for half the query timeout ends it, and the read goes on from the next row in
//! another statement of the same snapshot.
//!
//! A lane of a batched read (a listing's cold children, say) reads many short logs ahead in one
//! statement ([`Backend::prefetch`](session_persistence::Backend::prefetch)): one round trip,
//! and one pass of the server's executor, for up to [`PREFETCH_SESSIONS`] sessions.

use std::sync::Arc;

use futures::TryStreamExt;

use session_core::{SessionEvent, SessionId};
use session_persistence::{CorruptKind, Location, PersistenceError, PrefetchedLog, Result, ScanOutcome, ScanSink};
use tokio_postgres::{IsolationLevel, Row};
use tokio_util::sync::CancellationToken;

use super::{PgStore, to_sql_seq};
use crate::codec;

/// The events a one-statement read takes at most; a log with more from the seq is read long.
const SHORT_ROWS: i64 = 256;

/// About how many bytes of event lines one statement of a long read spans (by the session's mean
/// event size): what the server still sends, at most, after a slow sink ended the statement early.
const SPAN_BYTES: i64 = 2 << 20;

/// The fewest and the most seqs one statement of a long read spans.
const SPAN_EVENTS: std::ops::RangeInclusive<i64> = 1_024..=65_536;

/// The most sessions one read ahead asks for.
pub(super) const PREFETCH_SESSIONS: usize = 64;

/// The stored bytes of event records one read ahead holds at most (the sum of its sessions'
/// `n_bytes`, in the order asked): what a lane keeps in memory before its reads replay it.
const PREFETCH_BYTES: i64 = 1 << 20;

/// Checks the event rows of a read as they come, in seq order, and hands their events over.
struct RowCheck<'a> {
    id: &'a SessionId,
    expected: u64,
    /// The read's sink takes no event from this seq on ([`ScanSink::until_seq`]).
    until: i64,
    /// Whether a row came yet: the first may be a run that starts before the read's seq.
    started: bool,
    n_events: u64,
    n_bytes: u64,
}

impl<'a> RowCheck<'a> {
    fn new(id: &'a SessionId, from_seq: u64, until: Option<u64>) -> RowCheck<'a> {
        let until = until.map_or(i64::MAX, to_sql_seq);
        RowCheck { id, expected: from_seq, until, started: false, n_events: 0, n_bytes: 0 }
    }

    /// Where the read's rows end: the session row's `next_seq`, or the seq the sink takes no
    /// event from, if that comes first.
    fn end(&self, next_seq: i64) -> i64 {
        next_seq.min(self.until)
    }

    fn location(&self) -> Location {
        Location::Session { id: self.id.clone() }
    }

    /// One row: `seq` (its first event's), and its run of `n_events` records as text or as a zstd
    /// frame. The events before the read's seq in the read's first row are skipped.
    fn row(
        &mut self,
        seq: i64,
        text: Option<&str>,
        zstd: Option<&[u8]>,
        n_events: i32,
        sink: &mut dyn ScanSink,
    ) -> Result<()> {
        let expected = self.expected;
        if seq >= self.until {
            return Ok(());
        }
        let head = !std::mem::replace(&mut self.started, true) && seq < to_sql_seq(expected);
        if seq != to_sql_seq(expected) && !head {
            return Err(PersistenceError::corrupt(
                CorruptKind::SeqGap,
                self.location(),
                format!("corrupt session log: the event at seq {expected} is missing (next stored: {seq})"),
            ));
        }
        let mut next = seq;
        let decoded = codec::decode_run(text, zstd, n_events, |event, n_bytes| {
            if event.seq as i64 != next {
                return Err(PersistenceError::corrupt(
                    CorruptKind::Record,
                    self.location(),
                    format!("corrupt session log: the row at seq {seq} holds an event with seq {}", event.seq),
                ));
            }
            next += 1;
            if event.seq < self.expected || event.seq as i64 >= self.until {
                return Ok(());
            }
            self.n_bytes += n_bytes as u64;
            sink.event(Arc::new(event))?;
            self.expected += 1;
            self.n_events += 1;
            Ok(())
        });
        match decoded {
            Ok(()) => Ok(()),
            Err(codec::RunError::Sink(error)) => Err(error),
            Err(codec::RunError::Row(why)) => Err(PersistenceError::corrupt(
                CorruptKind::Record,
                self.location(),
                format!("corrupt session log: invalid committed row at seq {seq}: {why}"),
            )),
        }
    }

    /// The rows ended: they must end where the session row's `next_seq` says (or, for a read
    /// its sink bounded, run unbroken up to that bound).
    fn finish(&self, next_seq: i64) -> Result<()> {
        let expected = self.expected;
        if self.n_events > 0 && to_sql_seq(expected) > next_seq {
            return Err(PersistenceError::corrupt(
                CorruptKind::SeqGap,
                self.location(),
                format!(
                    "corrupt session log: events are stored up to seq {}, but the session row's next_seq is \
                     {next_seq}: every append would collide with a stored event (once the events are checked, \
                     `UPDATE sessions SET next_seq = {expected}` for this id makes it writable)",
                    expected.saturating_sub(1)
                ),
            ));
        }
        if to_sql_seq(expected) < self.end(next_seq) {
            return Err(PersistenceError::corrupt(
                CorruptKind::SeqGap,
                self.location(),
                format!("corrupt session log: events end at seq {expected}, but the session row says {next_seq}"),
            ));
        }
        Ok(())
    }
}

/// Keeps what a read ahead decodes.
#[derive(Default)]
struct Gather(Vec<Arc<SessionEvent>>);

impl ScanSink for Gather {
    fn event(&mut self, event: Arc<SessionEvent>) -> Result<()> {
        self.0.push(event);
        Ok(())
    }
}

/// How one statement of a long read went.
enum Span {
    /// Every row of its span came (`n_rows` of them).
    Whole { n_rows: u64 },
    /// A slow sink ended it after the row that starts at this seq.
    EndedAfter(i64),
}

/// What the one-statement read found.
enum Short {
    Absent,
    Read(ScanOutcome),
    /// More than [`SHORT_ROWS`] events from the seq: nothing was handed to the sink.
    Long,
}

impl PgStore {
    /// [`Backend::scan`](session_persistence::Backend::scan) and
    /// [`scan_from`](session_persistence::Backend::scan_from): one statement for a short log, else
    /// a streamed read in a transaction.
    pub(super) fn read(
        &self,
        id: &SessionId,
        from_seq: u64,
        cancel: &CancellationToken,
        sink: &mut dyn ScanSink,
    ) -> Result<Option<ScanOutcome>> {
        if cancel.is_cancelled() {
            return Err(PersistenceError::Cancelled);
        }
        match self.read_short(id, from_seq, sink)? {
            Short::Absent => Ok(None),
            Short::Read(outcome) => Ok(Some(outcome)),
            Short::Long => self.read_long(id, from_seq, cancel, sink),
        }
    }

    /// [`Backend::prefetch`](session_persistence::Backend::prefetch): the sessions of `ids`
    /// (the first [`PREFETCH_SESSIONS`] distinct ones) with at most [`SHORT_ROWS`] events, whole,
    /// in one statement, within [`PREFETCH_BYTES`]. A log whose rows or header do not read
    /// cleanly is left out, so that its own scan reports it.
    pub(super) fn read_ahead(
        &self,
        ids: &[SessionId],
        cancel: &CancellationToken,
    ) -> Result<Vec<(SessionId, PrefetchedLog)>> {
        if cancel.is_cancelled() {
            return Err(PersistenceError::Cancelled);
        }
        let mut seen = std::collections::HashSet::new();
        let wanted: Vec<&str> =
            ids.iter().map(SessionId::as_str).filter(|id| seen.insert(*id)).take(PREFETCH_SESSIONS).collect();
        let rows = self.query_ahead(&self.sql.sessions_events, &[&wanted, &SHORT_ROWS, &PREFETCH_BYTES])?;
        Ok(self.prefetched_logs(&rows, |_| Some(0)))
    }

    /// [`Backend::prefetch_tails`](session_persistence::Backend::prefetch_tails): the sessions of
    /// `reads` (the first [`PREFETCH_SESSIONS`] distinct ones) with at most [`SHORT_ROWS`]
    /// events from their seqs, in one statement, each from the run that holds its seq. A tail
    /// that does not read cleanly is left out, so that its own read reports it.
    pub(super) fn read_tails_ahead(
        &self,
        reads: &[(SessionId, u64)],
        cancel: &CancellationToken,
    ) -> Result<Vec<(SessionId, PrefetchedLog)>> {
        if cancel.is_cancelled() {
            return Err(PersistenceError::Cancelled);
        }
        let mut wanted = std::collections::HashMap::new();
        let (mut ids, mut seqs) = (Vec::new(), Vec::new());
        for (id, from_seq) in reads {
            if wanted.len() == PREFETCH_SESSIONS {
                break;
            }
            // The first ask of an id is the one read ahead.
            if let std::collections::hash_map::Entry::Vacant(entry) = wanted.entry(id.as_str()) {
                entry.insert(*from_seq);
                ids.push(id.as_str());
                seqs.push(to_sql_seq(*from_seq));
            }
        }
        let rows = self.query_ahead(&self.sql.sessions_tails, &[&ids, &seqs, &SHORT_ROWS])?;
        Ok(self.prefetched_logs(&rows, |id| wanted.get(id).copied()))
    }

    /// The rows of a read ahead's statement `sql`.
    fn query_ahead(&self, sql: &str, params: &[&(dyn tokio_postgres::types::ToSql + Sync)]) -> Result<Vec<Row>> {
        let db = &self.db;
        db.run(async |client| {
            let statement = db.timed("preparing a read ahead", client.prepare_cached(sql)).await?;
            db.timed("reading ahead", client.query(&statement, params)).await
        })
    }

    /// The logs of a read ahead's rows (each session's rows together, in seq order), each read
    /// from the seq `from_seq` gives for its id; a log that does not read cleanly is left out.
    fn prefetched_logs(&self, rows: &[Row], from_seq: impl Fn(&str) -> Option<u64>) -> Vec<(SessionId, PrefetchedLog)> {
        let same_session = |a: &Row, b: &Row| a.try_get::<_, &str>(0).ok() == b.try_get::<_, &str>(0).ok();
        let mut logs = Vec::new();
        for rows in rows.chunk_by(same_session) {
            let Some(from_seq) = rows[0].try_get::<_, &str>(0).ok().and_then(&from_seq) else { continue };
            match self.prefetched(rows, from_seq) {
                Ok(log) => logs.push((log.outcome.header.id.clone(), log)),
                Err(error) => {
                    tracing::debug!(%error, "a log read ahead does not read cleanly; its own read will report it");
                }
            }
        }
        logs
    }

    /// One session's rows of a read ahead, as its own scan from `from_seq` reads them.
    fn prefetched(&self, rows: &[Row], from_seq: u64) -> Result<PrefetchedLog> {
        let db = &self.db;
        // Invariant: `chunk_by` yields no empty run.
        let first = &rows[0];
        let next_seq: i64 = db.column(first, 5)?;
        let session = self.session_row(first)?;
        let header = session.header?;
        let n_events = rows.len() - usize::from(db.column::<Option<i64>>(first, 6)?.is_none());
        let mut check = RowCheck::new(&session.id, from_seq, None);
        let mut gather = Gather::default();
        for row in rows.iter().take(n_events) {
            check.row(db.column(row, 6)?, db.column(row, 7)?, db.column(row, 8)?, db.column(row, 9)?, &mut gather)?;
        }
        check.finish(next_seq)?;
        Ok(PrefetchedLog {
            outcome: ScanOutcome {
                revision: self.revision_of(&session.incarnation, session.revision),
                header,
                n_events: check.n_events,
                torn: None,
                n_bytes: check.n_bytes,
            },
            events: gather.0,
        })
    }

    /// The session row and its first [`SHORT_ROWS`] events from `from_seq`, in one statement.
    fn read_short(&self, id: &SessionId, from_seq: u64, sink: &mut dyn ScanSink) -> Result<Short> {
        let db = &self.db;
        let params: [&(dyn tokio_postgres::types::ToSql + Sync); 3] =
            [&id.as_str(), &to_sql_seq(from_seq), &(SHORT_ROWS + 1)];
        let rows = db.run(async |client| {
            let statement = db.timed("preparing a read", client.prepare_cached(&self.sql.session_events)).await?;
            db.timed("reading a session", client.query(&statement, &params)).await
        })?;
        let Some(first) = rows.first() else { return Ok(Short::Absent) };
        let next_seq: i64 = db.column(first, 5)?;
        // The row of a session with no event from the seq has none of the event columns, and so
        // has a longer session's: the statement sends no event when the row's `next_seq` says there
        // are more than `SHORT_ROWS` (and more rows than it says are more than `SHORT_ROWS` too).
        let n_events = rows.len() - usize::from(db.column::<Option<i64>>(first, 6)?.is_none());
        if next_seq - to_sql_seq(from_seq) > SHORT_ROWS || n_events as i64 > SHORT_ROWS {
            return Ok(Short::Long);
        }
        let session = self.session_row(first)?;
        let header = session.header?;
        sink.header(&header)?;
        let mut check = RowCheck::new(id, from_seq, sink.until_seq());
        for row in rows.iter().take(n_events) {
            check.row(db.column(row, 6)?, db.column(row, 7)?, db.column(row, 8)?, db.column(row, 9)?, sink)?;
        }
        check.finish(next_seq)?;
        Ok(Short::Read(ScanOutcome {
            revision: self.revision_of(&session.incarnation, session.revision),
            header,
            n_events: check.n_events,
            torn: None,
            n_bytes: check.n_bytes,
        }))
    }

    /// Reads `id`'s header and its events from `from_seq` on in one snapshot (a read-only
    /// repeatable-read transaction), streamed (see the module's documentation).
    fn read_long(
        &self,
        id: &SessionId,
        from_seq: u64,
        cancel: &CancellationToken,
        sink: &mut dyn ScanSink,
    ) -> Result<Option<ScanOutcome>> {
        let db = &self.db;
        // A read that stops early for a reason of its own (a defect in the rows, a cancel, its
        // sink's error: a piece cut at its limit) leaves at most the rest of one statement's span
        // on its way, which the driver drops before the connection's next statement, and a
        // rollback: the connection is as good as before and goes back to the pool (a reconnect
        // per cut piece would cost more than that span). A database failure drops it, as ever.
        db.run(async |client| {
            let transaction = db
                .timed(
                    "starting a read",
                    client.build_transaction().isolation_level(IsolationLevel::RepeatableRead).read_only(true).start(),
                )
                .await?;
            let Some(row) =
                db.timed("reading a session", transaction.query_opt(&self.sql.session, &[&id.as_str()])).await?
            else {
                return Ok(None);
            };
            let stored_next: i64 = db.column(&row, 5)?;
            let session = self.session_row(&row)?;
            let header = session.header?;
            sink.header(&header)?;
            let whole = db.timed("preparing a read", transaction.prepare_cached(&self.sql.events_from_run)).await?;
            let rest = db.timed("preparing a read", transaction.prepare_cached(&self.sql.events_from)).await?;
            let mut check = RowCheck::new(id, from_seq, sink.until_seq());
            // The rows end at the session row's `next_seq`, or earlier where the sink takes no
            // more events (the read then ends there, as if the log did).
            let (next_seq, bounded) = (check.end(stored_next), check.end(stored_next) < stored_next);
            let mut statement = &whole;
            // Spans of about `SPAN_BYTES` while the session row says events follow, the last one
            // without an end (it meets rows stored past `next_seq`); a span with no row is a gap at
            // least that wide, which a statement without an end meets at once.
            let n_bytes: i64 = db.column(&row, 4)?;
            let mean_event = (n_bytes / stored_next.max(1)).max(1);
            let span = (SPAN_BYTES / mean_event).clamp(*SPAN_EVENTS.start(), *SPAN_EVENTS.end());
            // The statements cut the rows into consecutive ranges of their first seqs, each from
            // where the one before ended (its end, or just past the row it ended after), so every
            // row one statement would send is sent once, an overlapping one included.
            let (mut from, mut unbounded) = (to_sql_seq(from_seq), false);
            loop {
                let last = unbounded || from.saturating_add(span) >= next_seq;
                let end = match (last, bounded) {
                    (false, _) => from + span,
                    (true, false) => i64::MAX,
                    (true, true) => next_seq,
                };
                let read = self.stream_span(&transaction, statement, (from, end), &mut check, cancel, sink).await?;
                statement = &rest;
                match read {
                    Span::EndedAfter(seq) => from = seq.saturating_add(1),
                    Span::Whole { .. } if last => break,
                    Span::Whole { n_rows } => (from, unbounded) = (end, n_rows == 0),
                }
            }
            check.finish(stored_next)?;
            db.timed("ending a read", transaction.commit()).await?;
            Ok(Some(ScanOutcome {
                revision: self.revision_of(&session.incarnation, session.revision),
                header,
                n_events: check.n_events,
                torn: None,
                n_bytes: check.n_bytes,
            }))
        })
    }

    /// Streams the rows `statement` answers for the span `from..end` of `check`'s session into
    /// `check` and `sink`: the client decodes each row while the next ones arrive (the socket's
    /// buffers hold back a server that is ahead). A sink slower than the server keeps a
    /// statement running, and the server bounds it by the query timeout, so past
    /// [`PgStore::statement_span`] (half of it) the statement ends after the row just decoded,
    /// and the caller goes on just past that row in another statement (the server still sends the
    /// rest of the span, which the driver drops).
    async fn stream_span(
        &self,
        transaction: &tokio_postgres::Transaction<'_>,
        statement: &tokio_postgres::Statement,
        (from, end): (i64, i64),
        check: &mut RowCheck<'_>,
        cancel: &CancellationToken,
        sink: &mut dyn ScanSink,
    ) -> Result<Span> {
        let db = &self.db;
        let key = check.id.as_str();
        let params: [&(dyn tokio_postgres::types::ToSql + Sync); 3] = [&key, &from, &end];
        let rows = db.timed("reading events", transaction.query_raw(statement, params)).await?;
        let started = std::time::Instant::now();
        let mut rows = std::pin::pin!(rows);
        let mut n_rows = 0;
        while let Some(row) = db.timed("reading events", rows.try_next()).await? {
            if cancel.is_cancelled() {
                return Err(PersistenceError::Cancelled);
            }
            n_rows += 1;
            let seq: i64 = db.column(&row, 0)?;
            check.row(seq, db.column(&row, 1)?, db.column(&row, 2)?, db.column(&row, 3)?, sink)?;
            if started.elapsed() >= self.statement_span {
                return Ok(Span::EndedAfter(seq));
            }
        }
        Ok(Span::Whole { n_rows })
    }
}
