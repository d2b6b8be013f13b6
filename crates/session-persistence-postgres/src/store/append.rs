//! An append to a stored session in one statement: one round trip, which is also its
//! transaction's commit, where the multi-statement write takes five (begin, the row's lock, the
//! rows, the row's next seq, commit). The same checks decide the same way (the writer fence,
//! rows past the stored next seq), inside the statement: nothing is written unless the batch
//! starts at the locked row's next seq.

use session_core::{SessionEvent, SessionHeader, SessionId};
use session_persistence::{FencedWrite, PersistenceError, Result};
use tokio_postgres::types::ToSql;

use super::{PgStore, to_sql_seq};
use crate::{
    codec::EncodedRow,
    db::{Client, is_unique_violation},
};

impl PgStore {
    /// Appends `events` (encoded as `encoded`) to the stored session of `header`, sending
    /// `notification` on commit.
    pub(super) fn append_in_one_statement(
        &self,
        header: &SessionHeader,
        events: &[&SessionEvent],
        encoded: &[EncodedRow],
        notification: Option<&String>,
    ) -> Result<()> {
        let Some(first) = events.first() else { return Ok(()) };
        let id = &header.id;
        let next_seq = to_sql_seq(events[events.len() - 1].seq) + 1;
        let n_bytes: i64 = encoded.iter().map(|event| event.n_bytes).sum();
        let columns = RowColumns::of(encoded);
        let name = id.as_str();
        let mut params: Vec<&(dyn ToSql + Sync)> = vec![&name];
        params.extend(columns.params());
        params.extend([&next_seq as &(dyn ToSql + Sync), &n_bytes]);
        let sql = match notification {
            Some(payload) => {
                params.extend([&self.notifier.channel as &(dyn ToSql + Sync), payload]);
                &self.sql.append_notify
            }
            None => &self.sql.append,
        };
        let db = &self.db;
        let past_next_seq = || past_next_seq(id, first.seq);
        // A unique violation (`None`) is an answer: the connection is fine. Any other failure is
        // mapped inside the call, so a connection that failed is not handed out again.
        let answer = db.run(async |client: &mut Client| {
            let statement = db.timed("preparing an append", client.prepare_cached(sql)).await?;
            match db.timed_raw("appending events", client.query_one(&statement, &params)).await? {
                Ok(row) => Ok(Some(row)),
                Err(error) if is_unique_violation(&error) => Ok(None),
                Err(error) => Err(db.error(error)),
            }
        })?;
        let Some(row) = answer else { return Err(past_next_seq()) };
        let stored_next: Option<i64> = db.column(&row, 0)?;
        let (inserted, bumped): (i64, i64) = (db.column(&row, 1)?, db.column(&row, 2)?);
        check_fence(id, first.seq, stored_next)?;
        if inserted == 0 {
            // The batch starts at the locked next seq, yet a stored run reaches it: the rows and
            // the row's next seq disagree (nothing was written).
            return Err(past_next_seq());
        }
        if bumped != 1 {
            // The statement committed its rows without moving the row's next seq (something
            // outside this crate, a trigger or a policy, kept the update from the row).
            return Err(PersistenceError::inconsistent(
                id,
                format!("session {id} stored the events from seq {} on without moving its next seq", first.seq),
            ));
        }
        Ok(())
    }
}

/// The columns of a batch's rows as the insert's arrays (`$2` to `$7` of `insert_events` and of
/// `append`).
pub(super) struct RowColumns<'a> {
    seqs: Vec<i64>,
    kinds: Vec<&'a str>,
    times: Vec<i64>,
    texts: Vec<Option<&'a str>>,
    frames: Vec<Option<&'a [u8]>>,
    counts: Vec<i32>,
}

impl<'a> RowColumns<'a> {
    pub(super) fn of(encoded: &'a [EncodedRow]) -> RowColumns<'a> {
        RowColumns {
            seqs: encoded.iter().map(|event| event.seq).collect(),
            kinds: encoded.iter().map(|event| event.kind.as_str()).collect(),
            times: encoded.iter().map(|event| event.time).collect(),
            texts: encoded.iter().map(|event| event.text.as_deref()).collect(),
            frames: encoded.iter().map(|event| event.zstd.as_deref()).collect(),
            counts: encoded.iter().map(|event| event.n_events).collect(),
        }
    }

    /// The six arrays, in the statements' order.
    pub(super) fn params(&self) -> [&(dyn ToSql + Sync); 6] {
        [&self.seqs, &self.kinds, &self.times, &self.texts, &self.frames, &self.counts]
    }
}

/// A stored run reaches the batch's first seq although the batch starts at the row's next seq:
/// the rows and the next seq disagree.
pub(super) fn past_next_seq(id: &SessionId, first_seq: u64) -> PersistenceError {
    PersistenceError::inconsistent(
        id,
        format!("session {id} holds event rows from seq {first_seq} on, past its stored next seq"),
    )
}

/// The writer fence (`storage-format.md`, "Fencing"): a batch must start at the locked row's
/// next seq (`None`: no session row to append to).
pub(super) fn check_fence(id: &SessionId, first_seq: u64, stored_next: Option<i64>) -> Result<()> {
    let Some(stored_next) = stored_next else {
        return Err(PersistenceError::inconsistent(id, format!("session {id} has no stored session row to append to")));
    };
    if stored_next != to_sql_seq(first_seq) {
        // Another writer appended first, or created the session row after this one found the id
        // free (its insert did nothing): nothing was written.
        return Err(PersistenceError::fenced(
            id,
            FencedWrite::Append,
            first_seq,
            u64::try_from(stored_next).unwrap_or(0),
        ));
    }
    Ok(())
}
