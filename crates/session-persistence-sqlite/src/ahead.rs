//! A long read on two threads: a helper steps the read's statements and copies each row's
//! columns into batches, while the calling thread decodes the batches in order and hands the
//! events to the sink. SQLite's own work (the B-tree walks, the page reads, the column calls)
//! and the decode (the JSON walk of each payload) then run side by side; the sink, and every
//! event it gets, stay on the calling thread, so events are freed by the thread that made them.
//!
//! The helper runs the read the store runs on one thread
//! ([`SqliteStore::read_log`](crate::SqliteStore)): one read transaction holding the `sessions`
//! row, the seek base, the committed `turn/end` and the rows ([`step_rows`]); the calling thread
//! takes the rows with the same [`RowDecoder`], so the answer, its errors and its torn tail are
//! the same. What the helper copies is bounded: at most [`BATCHES_IN_FLIGHT`] batches wait for
//! the decoder, besides the one it fills and the one being decoded, and decoded batches go back
//! to it to be refilled.

use std::sync::{
    Arc,
    mpsc::{self, Receiver, SyncSender},
};

use rusqlite::{Connection, types::ValueRef};
use session_persistence::{PersistenceError, ScanSink};
use tokio_util::sync::CancellationToken;

use crate::{
    codec::{Columns, ROW_COLUMN_COUNT},
    error::sqlite_error,
    scan::{RowDecoder, RowScan, ScanContext, committed_until, seek_base, step_rows, to_sql_seq},
    sessions::{StoredSession, checked_session, read_session},
};

#[cfg(test)]
mod tests;

/// A read takes the helper only for at least this many rows from where it starts: a thread
/// costs tens of microseconds, which a short read does not win back.
const AHEAD_MIN_ROWS: u64 = 1024;

/// Rows in one batch (fewer when their columns pass [`BATCH_BYTES`]).
const BATCH_ROWS: usize = 256;

/// Column bytes past which a batch goes to the decoder before it holds [`BATCH_ROWS`] rows.
const BATCH_BYTES: usize = 256 * 1024;

/// Batches copied and waiting for the decoder, at most.
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
struct RowBatch {
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
enum FromHelper {
    /// The `sessions` row, checked ([`checked_session`]); the helper goes on only for one it
    /// can read.
    Session(Result<Option<StoredSession>, PersistenceError>),
    /// Where the rows start and the last committed row ([`committed_until`]).
    Start { base: u64, committed: Option<u64> },
    /// The next rows.
    Rows(RowBatch),
    /// The last row was sent and the read transaction ended well.
    End,
}

/// Whether a read of `ctx`'s events from `from_seq` is long enough for the helper: at least
/// [`AHEAD_MIN_ROWS`] rows from there (counted on the key's index, and no further).
pub(crate) fn worth_it(connection: &Connection, ctx: ScanContext<'_>, from_seq: u64) -> Result<bool, PersistenceError> {
    let sql_error = |error| sqlite_error(ctx.shown, error);
    let mut statement = connection
        .prepare_cached("SELECT count(*) FROM (SELECT 1 FROM events WHERE session_id = ?1 AND seq >= ?2 LIMIT ?3)")
        .map_err(sql_error)?;
    let limit = i64::try_from(AHEAD_MIN_ROWS).unwrap_or(i64::MAX);
    let rows: i64 = statement
        .query_row(rusqlite::params![ctx.id.as_str(), to_sql_seq(from_seq), limit], |row| row.get(0))
        .map_err(sql_error)?;
    Ok(rows >= limit)
}

#[cfg(test)]
thread_local! {
    /// Reads this thread ran with the helper, for tests of when it is taken.
    static READS_AHEAD: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    /// Set by tests to have the helper refused, as a process at its thread limit would be.
    static REFUSE_HELPER: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// Set by tests to have the helper fail after this many rows, as a failing disk would.
    static FAIL_AFTER_ROWS: std::cell::Cell<Option<usize>> = const { std::cell::Cell::new(None) };
}

/// What a read on two threads found: `None` when the helper thread could not start (the caller
/// then reads on its own thread).
pub(crate) type AheadRead = Option<Result<Option<(StoredSession, RowScan)>, PersistenceError>>;

/// Reads `ctx`'s session row and its events from `from_seq` on, as one read transaction on
/// `connection`, with the statements stepped on a helper thread, handing the header and then
/// each event to `sink`.
pub(crate) fn read_log(
    connection: &mut Connection,
    ctx: ScanContext<'_>,
    from_seq: u64,
    cancel: &CancellationToken,
    sink: &mut dyn ScanSink,
) -> AheadRead {
    #[cfg(test)]
    if REFUSE_HELPER.with(std::cell::Cell::get) {
        return None;
    }
    #[cfg(test)]
    let fail_after = FAIL_AFTER_ROWS.with(std::cell::Cell::get);
    #[cfg(not(test))]
    let fail_after = None;
    std::thread::scope(|scope| {
        let (to_decoder, from_helper) = mpsc::sync_channel(BATCHES_IN_FLIGHT);
        let (recycle, recycled) = mpsc::channel();
        let helper = std::thread::Builder::new()
            .name("sqlite-read-ahead".to_owned())
            .spawn_scoped(scope, move || {
                read_rows(connection, ctx, from_seq, cancel, fail_after, &to_decoder, &recycled)
            })
            .ok()?;
        #[cfg(test)]
        READS_AHEAD.with(|reads| reads.set(reads.get() + 1));
        let decoded = decode(ctx, from_seq, cancel, &from_helper, &recycle, sink);
        // A helper blocked on a full channel stops once nobody takes its batches.
        drop(from_helper);
        let read = match helper.join() {
            Ok(read) => read,
            Err(panic) => std::panic::resume_unwind(panic),
        };
        Some(match (decoded, read) {
            // The decoder's own error (the sink's, a row's, the session row's) comes from a row
            // before any the helper failed at: the helper only saw its batches refused.
            (Err(error), _) => Err(error),
            (Ok(Decoded::Answer(answer)), _) => Ok(answer.map(|answer| *answer)),
            // The rows stopped before their end: the helper's error is the read's.
            (Ok(Decoded::Cut), Err(error)) => Err(error),
            (Ok(Decoded::Cut), Ok(())) => Err(PersistenceError::io(
                ctx.shown,
                std::io::Error::other("the read's rows ended before the helper reading them did"),
            )),
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
    fail_after: Option<usize>,
    to_decoder: &SyncSender<FromHelper>,
    recycled: &Receiver<RowBatch>,
) -> Result<(), PersistenceError> {
    let sql_error = |error| sqlite_error(ctx.shown, error);
    let transaction = connection.transaction().map_err(sql_error)?;
    let found = read_session(&transaction, ctx.id).map_err(sql_error)?;
    let checked = checked_session(ctx.id, found);
    let readable = matches!(checked, Ok(Some(_)));
    if to_decoder.send(FromHelper::Session(checked)).is_err() || !readable {
        return Ok(());
    }
    let base = if from_seq == 0 { 0 } else { seek_base(&transaction, ctx, from_seq)? };
    let committed = committed_until(&transaction, ctx, base)?;
    if to_decoder.send(FromHelper::Start { base, committed }).is_err() {
        return Ok(());
    }
    let mut batch = RowBatch::default();
    let mut n_rows = 0;
    let mut sent = true;
    step_rows(&transaction, ctx, base, cancel, &mut |row| {
        if fail_after == Some(n_rows) {
            return Err(PersistenceError::io(ctx.shown, std::io::Error::other("a failing disk (test)")));
        }
        n_rows += 1;
        batch.push(row).map_err(sql_error)?;
        if batch.is_full() {
            let next = recycled.try_recv().unwrap_or_default();
            sent = to_decoder.send(FromHelper::Rows(std::mem::replace(&mut batch, next))).is_ok();
        }
        Ok(sent)
    })?;
    if !sent || (batch.len() > 0 && to_decoder.send(FromHelper::Rows(batch)).is_err()) {
        return Ok(());
    }
    transaction.commit().map_err(sql_error)?;
    // The decoder may be gone already: it then has its answer.
    let _ = to_decoder.send(FromHelper::End);
    Ok(())
}

/// Where the calling thread's side ended.
enum Decoded {
    /// The read's answer: its session row and rows (`None`: no such session).
    Answer(Option<Box<(StoredSession, RowScan)>>),
    /// The helper stopped before the end of the rows.
    Cut,
}

/// The calling thread's side: the session row's verdict and its header handed on, then every
/// batch decoded in order, the token looked at after each.
fn decode(
    ctx: ScanContext<'_>,
    from_seq: u64,
    cancel: &CancellationToken,
    from_helper: &Receiver<FromHelper>,
    recycle: &mpsc::Sender<RowBatch>,
    sink: &mut dyn ScanSink,
) -> Result<Decoded, PersistenceError> {
    let Ok(FromHelper::Session(checked)) = from_helper.recv() else { return Ok(Decoded::Cut) };
    let Some(session) = checked? else { return Ok(Decoded::Answer(None)) };
    sink.header(&Arc::new(session.header.clone()))?;
    let Ok(FromHelper::Start { base, committed }) = from_helper.recv() else { return Ok(Decoded::Cut) };
    let mut decoder = RowDecoder::new(ctx, base, from_seq, committed);
    let emit = &mut |event| sink.event(Arc::new(event));
    loop {
        match from_helper.recv() {
            Ok(FromHelper::Rows(mut batch)) => {
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
            Ok(FromHelper::End) => return Ok(Decoded::Answer(Some(Box::new((session, decoder.finish()?))))),
            Ok(FromHelper::Session(_) | FromHelper::Start { .. }) | Err(_) => return Ok(Decoded::Cut),
        }
    }
}
