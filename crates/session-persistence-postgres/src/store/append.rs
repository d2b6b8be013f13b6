//! An append to a stored session in one statement: one round trip, which is also its
//! transaction's commit, where the multi-statement write takes five (begin, the row's lock, the
//! rows, the row's next seq, commit). The same checks decide the same way (the writer fence,
//! rows past the stored next seq), inside the statement: nothing is written unless the batch
//! starts at the locked row's next seq.

use session_core::{SessionEvent, SessionHeader};
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
        let seqs: Vec<i64> = encoded.iter().map(|event| event.seq).collect();
        let kinds: Vec<&str> = encoded.iter().map(|event| event.kind.as_str()).collect();
        let times: Vec<i64> = encoded.iter().map(|event| event.time).collect();
        let texts: Vec<Option<&str>> = encoded.iter().map(|event| event.text.as_deref()).collect();
        let frames: Vec<Option<&[u8]>> = encoded.iter().map(|event| event.zstd.as_deref()).collect();
        let counts: Vec<i32> = encoded.iter().map(|event| event.n_events).collect();
        let name = id.as_str();
        let mut params: Vec<&(dyn ToSql + Sync)> =
            vec![&name, &seqs, &kinds, &times, &texts, &frames, &counts, &next_seq, &n_bytes];
        let sql = match notification {
            Some(payload) => {
                params.extend([&self.notifier.channel as &(dyn ToSql + Sync), payload]);
                &self.sql.append_notify
            }
            None => &self.sql.append,
        };
        let db = &self.db;
        let past_next_seq = || {
            PersistenceError::inconsistent(
                id,
                format!("session {id} holds event rows from seq {} on, past its stored next seq", first.seq),
            )
        };
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
        let Some(stored_next) = stored_next else {
            return Err(PersistenceError::inconsistent(
                id,
                format!("session {id} has no stored session row to append to"),
            ));
        };
        if stored_next != to_sql_seq(first.seq) {
            // Another writer appended first: the writer fence (nothing was written).
            return Err(PersistenceError::fenced(
                id,
                FencedWrite::Append,
                first.seq,
                u64::try_from(stored_next).unwrap_or(0),
            ));
        }
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
