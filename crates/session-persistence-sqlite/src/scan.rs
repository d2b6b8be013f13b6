//! Reading `events` rows (reference 05 §7, §10): the committed region ends at the last row that
//! decodes and holds a `turn/end`; a later invalid or non-contiguous row starts the torn tail,
//! an earlier one is corruption. A seek read starts at the lowest packed row that covers its seq.

use rusqlite::Connection;
use session_core::{SessionEvent, SessionId};
use session_persistence::{CorruptKind, Location, PersistenceError};
use tokio_util::sync::CancellationToken;

use crate::{
    codec::{Columns, MAX_PACKED_MEMBERS, ROW_COLUMNS, RowError, StoredRow, decode_plain_row},
    error::sqlite_error,
};

/// How many rows pass between two looks at the cancellation token.
const CANCEL_EVERY_ROWS: u64 = 256;

/// What a row scan found besides the events it handed on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RowScan {
    /// Events handed on (those at or past the scan's `emit_from`).
    pub(crate) n_events: u64,
    /// The seq after the last decoded event (the scan's base when none decoded).
    pub(crate) next_seq: u64,
    /// The seq of the first row of the torn tail.
    pub(crate) torn_from: Option<u64>,
    /// Bytes of event payload handed on.
    pub(crate) n_bytes: u64,
}

impl RowScan {
    /// Takes the next decoded event, handing it to `emit` from `emit_from` on.
    fn take(
        &mut self,
        event: SessionEvent,
        emit_from: u64,
        emit: &mut dyn FnMut(SessionEvent) -> Result<(), PersistenceError>,
    ) -> Result<(), PersistenceError> {
        self.next_seq = event.seq + 1;
        if event.seq >= emit_from {
            self.n_events += 1;
            self.n_bytes += event.data.as_str().len() as u64;
            emit(event)?;
        }
        Ok(())
    }
}

/// The context of one session's scan, for errors.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ScanContext<'a> {
    pub(crate) id: &'a SessionId,
    pub(crate) shown: &'a std::path::Path,
}

impl ScanContext<'_> {
    fn location(&self) -> Location {
        Location::Session { id: self.id.clone() }
    }

    fn corrupt(&self, kind: CorruptKind, message: String) -> PersistenceError {
        PersistenceError::corrupt(kind, self.location(), message)
    }

    fn row_error(&self, error: RowError) -> PersistenceError {
        match error {
            RowError::Column(message) => self.corrupt(CorruptKind::Record, message),
            RowError::Sqlite(error) => sqlite_error(self.shown, error),
        }
    }
}

/// Where a scan stopped taking rows.
#[derive(Debug, Clone, Copy)]
enum Stop {
    Corrupt { seq: u64, gap: bool },
    Torn { seq: u64 },
}

/// The seq of the last row at or after `base` that decodes and holds a `turn/end` (§7 step 1):
/// rows up to it are committed. Only a scalar row can hold one.
pub(crate) fn committed_until(
    connection: &Connection,
    ctx: ScanContext<'_>,
    base: u64,
) -> Result<Option<u64>, PersistenceError> {
    let mut statement = connection
        .prepare_cached(&format!(
            "SELECT {ROW_COLUMNS} FROM events WHERE session_id = ?1 AND seq >= ?2 AND type = 'turn/end' ORDER BY seq DESC"
        ))
        .map_err(|error| sqlite_error(ctx.shown, error))?;
    let mut rows = statement
        .query(rusqlite::params![ctx.id.as_str(), to_sql_seq(base)])
        .map_err(|error| sqlite_error(ctx.shown, error))?;
    let mut scratch = Vec::new();
    while let Some(row) = rows.next().map_err(|error| sqlite_error(ctx.shown, error))? {
        let row = StoredRow::read(row).map_err(|error| ctx.row_error(error))?;
        if row.is_packed() {
            continue;
        }
        let seq = row.seq;
        scratch.clear();
        if row.decode(&mut scratch).is_ok() {
            return Ok(Some(seq));
        }
    }
    Ok(None)
}

/// A seq as SQLite takes it (seqs past `i64::MAX` match no row).
pub(crate) fn to_sql_seq(seq: u64) -> i64 {
    i64::try_from(seq).unwrap_or(i64::MAX)
}

/// Steps the rows of `ctx`'s session with `seq >= base`, in seq order, handing each to `take`
/// until it answers `false`, and looks at `cancel` every [`CANCEL_EVERY_ROWS`] rows.
pub(crate) fn step_rows(
    connection: &Connection,
    ctx: ScanContext<'_>,
    base: u64,
    cancel: &CancellationToken,
    take: &mut dyn FnMut(&rusqlite::Row<'_>) -> Result<bool, PersistenceError>,
) -> Result<(), PersistenceError> {
    let sql_error = |error| sqlite_error(ctx.shown, error);
    let mut statement = connection
        .prepare_cached(&format!("SELECT {ROW_COLUMNS} FROM events WHERE session_id = ?1 AND seq >= ?2 ORDER BY seq"))
        .map_err(sql_error)?;
    let mut rows = statement.query(rusqlite::params![ctx.id.as_str(), to_sql_seq(base)]).map_err(sql_error)?;
    let mut n_rows = 0u64;
    while let Some(row) = rows.next().map_err(sql_error)? {
        n_rows += 1;
        if n_rows.is_multiple_of(CANCEL_EVERY_ROWS) && cancel.is_cancelled() {
            return Err(PersistenceError::Cancelled);
        }
        if !take(row)? {
            break;
        }
    }
    Ok(())
}

/// Scans the rows of a session with `seq >= base` in seq order (§7), handing each decoded event
/// with `seq >= emit_from` to `emit` ([`RowDecoder`]), on the calling thread.
pub(crate) fn scan_rows(
    connection: &Connection,
    ctx: ScanContext<'_>,
    base: u64,
    emit_from: u64,
    cancel: &CancellationToken,
    emit: &mut dyn FnMut(SessionEvent) -> Result<(), PersistenceError>,
) -> Result<RowScan, PersistenceError> {
    let committed = committed_until(connection, ctx, base)?;
    let mut decoder = RowDecoder::new(ctx, base, emit_from, committed);
    step_rows(connection, ctx, base, cancel, &mut |row| decoder.row(row, emit).map(|()| true))?;
    decoder.finish()
}

/// Decodes a session's rows from `base` on, in seq order (§7), wherever they come from: the
/// first row must start at `base`. A row whose columns are invalid (§5.1) fails the scan
/// wherever it is; a row that does not decode or does not continue the seqs is corruption at or
/// before the committed `turn/end`, else the start of the torn tail, which is then read only for
/// the column checks.
pub(crate) struct RowDecoder<'a> {
    ctx: ScanContext<'a>,
    emit_from: u64,
    /// The seq of the last committed row ([`committed_until`]).
    committed: Option<u64>,
    scan: RowScan,
    stop: Option<Stop>,
    decoded: Vec<SessionEvent>,
}

impl<'a> RowDecoder<'a> {
    pub(crate) fn new(ctx: ScanContext<'a>, base: u64, emit_from: u64, committed: Option<u64>) -> RowDecoder<'a> {
        RowDecoder {
            ctx,
            emit_from,
            committed,
            scan: RowScan { n_events: 0, next_seq: base, torn_from: None, n_bytes: 0 },
            stop: None,
            decoded: Vec::new(),
        }
    }

    /// Takes the next row, handing its events with `seq >= emit_from` to `emit`.
    pub(crate) fn row(
        &mut self,
        row: &impl Columns,
        emit: &mut dyn FnMut(SessionEvent) -> Result<(), PersistenceError>,
    ) -> Result<(), PersistenceError> {
        let ctx = self.ctx;
        if self.stop.is_none()
            && let Some(event) = decode_plain_row(row).filter(|event| event.seq == self.scan.next_seq)
        {
            return self.scan.take(event, self.emit_from, emit);
        }
        let row = StoredRow::read(row).map_err(|error| ctx.row_error(error))?;
        if self.stop.is_some() {
            return Ok(());
        }
        let seq = row.seq;
        let gap = seq != self.scan.next_seq;
        self.decoded.clear();
        if gap || row.decode(&mut self.decoded).is_err() {
            self.stop = Some(match self.committed {
                Some(committed) if seq <= committed => Stop::Corrupt { seq, gap },
                _ => Stop::Torn { seq },
            });
            return Ok(());
        }
        for event in self.decoded.drain(..) {
            self.scan.take(event, self.emit_from, emit)?;
        }
        Ok(())
    }

    /// What the rows taken make: the scan, its torn tail, or the corruption it met.
    pub(crate) fn finish(self) -> Result<RowScan, PersistenceError> {
        match self.stop {
            None => Ok(self.scan),
            Some(Stop::Torn { seq }) => Ok(RowScan { torn_from: Some(seq), ..self.scan }),
            Some(Stop::Corrupt { seq, gap }) => Err(self.ctx.corrupt(
                if gap { CorruptKind::SeqGap } else { CorruptKind::Record },
                format!("corrupt session log: invalid committed physical row at seq {seq}"),
            )),
        }
    }
}

/// The seq a read of the events from `from_seq` on must start at (§10): `from_seq`, lowered to
/// the first packed row within reach whose members cover it, or that does not decode (so the
/// read fails closed on it).
pub(crate) fn seek_base(connection: &Connection, ctx: ScanContext<'_>, from_seq: u64) -> Result<u64, PersistenceError> {
    let sql_error = |error| sqlite_error(ctx.shown, error);
    let floor = from_seq.saturating_sub(MAX_PACKED_MEMBERS as u64 - 1);
    let mut statement = connection
        .prepare_cached(&format!(
            "SELECT {ROW_COLUMNS} FROM events WHERE session_id = ?1 AND seq >= ?2 AND seq < ?3 \
             AND type IN ('text-chunks', 'reasoning-chunks', 'tool-call-chunks') AND ignorable = 0 ORDER BY seq"
        ))
        .map_err(sql_error)?;
    let mut rows = statement
        .query(rusqlite::params![ctx.id.as_str(), to_sql_seq(floor), to_sql_seq(from_seq)])
        .map_err(sql_error)?;
    let mut base = from_seq;
    let mut scratch = Vec::new();
    while let Some(row) = rows.next().map_err(sql_error)? {
        let Ok(row) = StoredRow::read(row) else {
            // The read from this row on meets the same column and fails with its message.
            let seq: i64 = row.get(0).unwrap_or(0);
            base = base.min(u64::try_from(seq).unwrap_or(0));
            continue;
        };
        let seq = row.seq;
        scratch.clear();
        let covers = match row.decode(&mut scratch) {
            Ok(()) => scratch.last().is_some_and(|last| last.seq >= from_seq),
            Err(_) => true,
        };
        if covers {
            base = base.min(seq);
        }
    }
    Ok(base)
}

/// The seq the next append must start at (§6 step 4): the tail is decoded from its last two rows
/// (widened to a packed row that covers the earlier one); a torn tail refuses the append.
pub(crate) fn next_seq(connection: &Connection, ctx: ScanContext<'_>) -> Result<u64, PersistenceError> {
    let sql_error = |error| sqlite_error(ctx.shown, error);
    let mut statement = connection
        .prepare_cached("SELECT seq FROM events WHERE session_id = ?1 ORDER BY seq DESC LIMIT 2")
        .map_err(sql_error)?;
    let tail: Vec<i64> = statement
        .query_map([ctx.id.as_str()], |row| row.get(0))
        .map_err(sql_error)?
        .collect::<Result<_, _>>()
        .map_err(sql_error)?;
    let Some(&earlier) = tail.last() else { return Ok(0) };
    let earlier = u64::try_from(earlier).unwrap_or(0);
    let base = seek_base(connection, ctx, earlier)?;
    let scan = scan_rows(connection, ctx, base, u64::MAX, &CancellationToken::new(), &mut |_| Ok(()))?;
    if let Some(torn) = scan.torn_from {
        // A torn tail (the reference's writer crashed mid-row) is repaired by a load first.
        return Err(PersistenceError::inconsistent(
            ctx.id,
            format!("session {} has an invalid physical tail at seq {torn}", ctx.id),
        ));
    }
    Ok(scan.next_seq)
}
