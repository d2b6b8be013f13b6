//! A long read on two threads: a helper steps the read's statements and copies each row's
//! columns into batches, while the calling thread decodes the batches in order and hands the
//! events to the sink. SQLite's own work (the B-tree walks, the page reads, the column calls)
//! and the decode (the JSON walk of each payload) then run side by side; the sink, and every
//! event it gets, stay on the calling thread, so events are freed by the thread that made them.
//!
//! The helper runs the same read as [`SqliteStore::read_log`](crate::store) does on one thread:
//! one read transaction holding the `sessions` row, the seek base, the committed `turn/end` and
//! the rows; the calling thread takes them with the same [`RowDecoder`], so the answer, its
//! errors and its torn tail are the same. What the helper copies is bounded: at most
//! [`BATCHES_IN_FLIGHT`] batches wait for the decoder, and batches go back to the helper to be
//! refilled.

use std::sync::mpsc::{self, Receiver, SyncSender};

use rusqlite::{Connection, types::ValueRef};
use session_persistence::{PersistenceError, ScanSink};
use tokio_util::sync::CancellationToken;

use crate::{
    codec::{Columns, ROW_COLUMN_COUNT},
    error::sqlite_error,
    scan::{CANCEL_EVERY_ROWS, RowDecoder, RowScan, ScanContext, committed_until, rows_from, seek_base, to_sql_seq},
    sessions::{StoredSession, read_session},
};

#[cfg(test)]
mod tests;

/// A read takes the helper only from this many seqs ahead of where it starts: a thread costs
/// tens of microseconds, which a short read does not win back.
pub(crate) const AHEAD_MIN_SEQS: u64 = 1024;

/// Rows in one batch (fewer when their columns pass [`BATCH_BYTES`]).
const BATCH_ROWS: usize = 256;

/// Column bytes past which a batch goes to the decoder before it holds [`BATCH_ROWS`] rows.
const BATCH_BYTES: usize = 256 * 1024;

/// Batches copied and not yet decoded, at most.
const BATCHES_IN_FLIGHT: usize = 4;

/// One column of a copied row; text and blobs are ranges of the batch's bytes.
#[derive(Debug, Clone, Copy)]
enum Cell {
    Null,
    Integer(i64),
    Real(f64),
    Text(usize, usize),
    Blob(usize, usize),
}

/// Rows copied out of a statement: each row's [`ROW_COLUMN_COUNT`] cells in turn.
#[derive(Debug, Default)]
pub(crate) struct RowBatch {
    bytes: Vec<u8>,
    cells: Vec<Cell>,
}

impl RowBatch {
    /// Copies the columns of `row`.
    fn push(&mut self, row: &rusqlite::Row<'_>) -> rusqlite::Result<()> {
        for idx in 0..ROW_COLUMN_COUNT {
            let mut range = |bytes: &[u8]| {
                let start = self.bytes.len();
                self.bytes.extend_from_slice(bytes);
                (start, self.bytes.len())
            };
            let cell = match row.get_ref(idx)? {
                ValueRef::Null => Cell::Null,
                ValueRef::Integer(value) => Cell::Integer(value),
                ValueRef::Real(value) => Cell::Real(value),
                ValueRef::Text(bytes) => {
                    let (start, end) = range(bytes);
                    Cell::Text(start, end)
                }
                ValueRef::Blob(bytes) => {
                    let (start, end) = range(bytes);
                    Cell::Blob(start, end)
                }
            };
            self.cells.push(cell);
        }
        Ok(())
    }

    fn len(&self) -> usize {
        self.cells.len() / ROW_COLUMN_COUNT
    }

    fn is_full(&self) -> bool {
        self.len() >= BATCH_ROWS || self.bytes.len() >= BATCH_BYTES
    }

    fn clear(&mut self) {
        self.bytes.clear();
        self.cells.clear();
    }

    fn rows(&self) -> impl Iterator<Item = BatchRow<'_>> {
        (0..self.len()).map(|row| BatchRow { batch: self, first: row * ROW_COLUMN_COUNT })
    }
}

/// One row of a [`RowBatch`].
struct BatchRow<'a> {
    batch: &'a RowBatch,
    first: usize,
}

impl Columns for BatchRow<'_> {
    fn value(&self, idx: usize) -> rusqlite::Result<ValueRef<'_>> {
        if idx >= ROW_COLUMN_COUNT {
            return Err(rusqlite::Error::InvalidColumnIndex(idx));
        }
        let bytes = &self.batch.bytes;
        Ok(match self.batch.cells[self.first + idx] {
            Cell::Null => ValueRef::Null,
            Cell::Integer(value) => ValueRef::Integer(value),
            Cell::Real(value) => ValueRef::Real(value),
            Cell::Text(start, end) => ValueRef::Text(&bytes[start..end]),
            Cell::Blob(start, end) => ValueRef::Blob(&bytes[start..end]),
        })
    }
}

/// What the helper sends the decoder, in this order.
enum Ahead {
    /// The `sessions` row, as [`read_session`] found it.
    Session(Option<Result<StoredSession, String>>),
    /// Where the rows start and the last committed row ([`committed_until`]).
    Start { base: u64, committed: Option<u64> },
    /// The next rows.
    Rows(RowBatch),
}

/// Whether a read of `ctx`'s events from `from_seq` is long enough for the helper: its last
/// stored seq is at least [`AHEAD_MIN_SEQS`] past `from_seq`.
pub(crate) fn worth_it(connection: &Connection, ctx: ScanContext<'_>, from_seq: u64) -> Result<bool, PersistenceError> {
    let mut statement = connection
        .prepare_cached("SELECT max(seq) FROM events WHERE session_id = ?1")
        .map_err(|error| sqlite_error(ctx.shown, error))?;
    let last: Option<i64> =
        statement.query_row([ctx.id.as_str()], |row| row.get(0)).map_err(|error| sqlite_error(ctx.shown, error))?;
    Ok(last
        .and_then(|last| u64::try_from(last).ok())
        .is_some_and(|last| last.saturating_sub(from_seq) >= AHEAD_MIN_SEQS))
}

#[cfg(test)]
thread_local! {
    /// Reads this thread ran with the helper, for tests of when it is taken.
    static READS_AHEAD: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    /// Set by tests to have the helper refused, as a process at its thread limit would be.
    static REFUSE_HELPER: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// What a read on two threads found: `None` when the helper thread could not start (the caller
/// then reads on its own thread).
pub(crate) type AheadRead = Option<Result<Option<(StoredSession, RowScan)>, PersistenceError>>;

/// Reads `ctx`'s session row and its events from `from_seq` on, as one read transaction on
/// `connection`, with the statements stepped on a helper thread; `check` vets the session row
/// before its header goes to `sink`, then each decoded event does.
pub(crate) fn read_log(
    connection: &mut Connection,
    ctx: ScanContext<'_>,
    from_seq: u64,
    cancel: &CancellationToken,
    check: impl FnOnce(Option<Result<StoredSession, String>>) -> Result<Option<StoredSession>, PersistenceError>,
    sink: &mut dyn ScanSink,
) -> AheadRead {
    std::thread::scope(|scope| {
        let (to_decoder, from_reader) = mpsc::sync_channel(BATCHES_IN_FLIGHT);
        let (recycle, recycled) = mpsc::channel();
        #[cfg(test)]
        if REFUSE_HELPER.with(std::cell::Cell::get) {
            return None;
        }
        let reader = std::thread::Builder::new()
            .name("sqlite-read-ahead".to_owned())
            .spawn_scoped(scope, move || read_rows(connection, ctx, from_seq, cancel, &to_decoder, &recycled))
            .ok()?;
        #[cfg(test)]
        READS_AHEAD.with(|reads| reads.set(reads.get() + 1));
        let decoded = decode(ctx, from_seq, cancel, &from_reader, &recycle, check, sink);
        // The helper stops at its next batch once nobody takes them.
        drop(from_reader);
        let read = match reader.join() {
            Ok(read) => read,
            Err(panic) => std::panic::resume_unwind(panic),
        };
        Some(match (decoded, read) {
            // The decoder's own error (a sink's, a corrupt row's) is the read's: the helper only
            // saw its batches refused.
            (Err(error), _) | (Ok(_), Err(error)) => Err(error),
            (Ok(decoded), Ok(())) => Ok(decoded),
        })
    })
}

/// The helper: the read transaction's statements, each row copied into a batch for the decoder.
/// Stops early, without an error, when the decoder stopped taking batches.
fn read_rows(
    connection: &mut Connection,
    ctx: ScanContext<'_>,
    from_seq: u64,
    cancel: &CancellationToken,
    to_decoder: &SyncSender<Ahead>,
    recycled: &Receiver<RowBatch>,
) -> Result<(), PersistenceError> {
    let sql_error = |error| sqlite_error(ctx.shown, error);
    let transaction = connection.transaction().map_err(sql_error)?;
    let found = read_session(&transaction, ctx.id).map_err(sql_error)?;
    let found_one = matches!(found, Some(Ok(_)));
    if to_decoder.send(Ahead::Session(found)).is_err() || !found_one {
        return Ok(());
    }
    let base = if from_seq == 0 { 0 } else { seek_base(&transaction, ctx, from_seq)? };
    let committed = committed_until(&transaction, ctx, base)?;
    if to_decoder.send(Ahead::Start { base, committed }).is_err() {
        return Ok(());
    }
    {
        let mut statement = rows_from(&transaction).map_err(sql_error)?;
        let mut rows = statement.query(rusqlite::params![ctx.id.as_str(), to_sql_seq(base)]).map_err(sql_error)?;
        let mut batch = RowBatch::default();
        let mut n_rows = 0u64;
        while let Some(row) = rows.next().map_err(sql_error)? {
            n_rows += 1;
            if n_rows.is_multiple_of(CANCEL_EVERY_ROWS) && cancel.is_cancelled() {
                return Err(PersistenceError::Cancelled);
            }
            batch.push(row).map_err(sql_error)?;
            if batch.is_full() {
                let next = recycled.try_recv().unwrap_or_default();
                if to_decoder.send(Ahead::Rows(std::mem::replace(&mut batch, next))).is_err() {
                    return Ok(());
                }
            }
        }
        if batch.len() > 0 && to_decoder.send(Ahead::Rows(batch)).is_err() {
            return Ok(());
        }
    }
    transaction.commit().map_err(sql_error)
}

/// The calling thread's side: the session row checked and its header handed on, then every
/// batch decoded in order, the token looked at after each. `Ok(None)` when there is no such session, or when the helper stopped
/// before the rows (its error is then the read's).
fn decode(
    ctx: ScanContext<'_>,
    from_seq: u64,
    cancel: &CancellationToken,
    from_reader: &Receiver<Ahead>,
    recycle: &mpsc::Sender<RowBatch>,
    check: impl FnOnce(Option<Result<StoredSession, String>>) -> Result<Option<StoredSession>, PersistenceError>,
    sink: &mut dyn ScanSink,
) -> Result<Option<(StoredSession, RowScan)>, PersistenceError> {
    let Ok(Ahead::Session(found)) = from_reader.recv() else { return Ok(None) };
    let Some(session) = check(found)? else { return Ok(None) };
    sink.header(&std::sync::Arc::new(session.header.clone()))?;
    let Ok(Ahead::Start { base, committed }) = from_reader.recv() else { return Ok(None) };
    let mut decoder = RowDecoder::new(ctx, base, from_seq, committed);
    let emit = &mut |event| sink.event(std::sync::Arc::new(event));
    while let Ok(Ahead::Rows(mut batch)) = from_reader.recv() {
        for row in batch.rows() {
            decoder.row(&row, emit)?;
        }
        if cancel.is_cancelled() {
            return Err(PersistenceError::Cancelled);
        }
        batch.clear();
        // The helper may have finished: the batch is then dropped here.
        let _ = recycle.send(batch);
    }
    Ok(Some((session, decoder.finish()?)))
}
