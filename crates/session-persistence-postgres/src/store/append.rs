//! Every write in one statement (`Sql::append`): the session row locked, the rows inserted and
//! its next seq moved only if the batch starts at that next seq and no stored run reaches it.
//! Alone it is its own transaction (one round trip, the commit's, where the separate statements
//! took five: begin, the row's lock, the rows, the row's next seq, commit); a session's first
//! batch and a repair that takes the repair lock wrap it in a transaction ([`Around`]).

use session_core::{SessionEvent, SessionHeader, SessionId};
use session_persistence::{FencedWrite, PersistenceError, Result, encode_header_line};
use tokio_postgres::{Row, types::ToSql};

use super::{PgStore, lease_key, to_sql_seq};
use crate::{
    codec::EncodedRow,
    db::{Client, Db, is_unique_violation},
};

/// What comes with the one-statement append in its transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Around {
    /// Nothing: the statement is its own transaction (one round trip, the commit's).
    Alone,
    /// A session's first batch: its `sessions` row inserted first (`ON CONFLICT DO NOTHING`: a
    /// row another writer inserted stays as it is), the two sent together (`BEGIN`, the two
    /// statements, `COMMIT`: three round trips instead of six).
    Creation,
    /// A repair by a store that holds no lease on the session: the repair lock taken first,
    /// refused while a live writer anywhere holds the lease key.
    RepairLock,
}

impl PgStore {
    /// Appends `events` (encoded as `encoded`) to the session of `header` with the one-statement
    /// append and what `around` adds, sending `notification` on commit. In a transaction, the
    /// commit comes only once the statement's answer says it wrote the batch. A future for
    /// [`Db::block`] or a task on the store's runtime ([`Db::spawn_call`]).
    pub(super) async fn append(
        &self,
        around: Around,
        header: &SessionHeader,
        events: &[&SessionEvent],
        encoded: &[EncodedRow],
        notification: Option<&String>,
    ) -> Result<()> {
        let Some(args) = AppendArgs::new(header, events, encoded, notification) else { return Ok(()) };
        let (sql, params) = (args.sql(self), args.params(&self.notifier.channel));
        let db = &self.db;
        if around == Around::Alone {
            let answer = db
                .call(async |client: &mut Client| {
                    let statement = db.timed("preparing an append", client.prepare_cached(sql)).await?;
                    let appended = db.timed_raw("appending events", client.query_one(&statement, &params)).await?;
                    answer_of(db, appended)
                })
                .await?;
            return args.check(db, answer);
        }
        let creating = around == Around::Creation;
        let (starting, committing) = match creating {
            true => ("starting an append", "committing an append"),
            false => ("starting a repair", "committing a repair"),
        };
        db.call(async |client: &mut Client| {
            let transaction = db.timed(starting, client.transaction()).await?;
            let append = db.timed("preparing an append", transaction.prepare_cached(sql)).await?;
            let appended = if creating {
                let line = encode_header_line(header);
                let created_at = to_sql_seq(header.created_at);
                let parent = header.parent_session.as_ref().map(SessionId::as_str);
                let origin = header.origin.map(|_| "subagent");
                let incarnation = uuid::Uuid::new_v4().to_string();
                let session: [&(dyn ToSql + Sync); 8] =
                    [&args.name, &line, &created_at, &header.cwd, &parent, &origin, &header.owner, &incarnation];
                let insert =
                    db.timed("preparing an append", transaction.prepare_cached(&self.sql.insert_session)).await?;
                // Both sent at once: the server runs them in order, the append's lock after the
                // row's insert.
                let (created, appended) = db
                    .timed("creating the session row", async {
                        Ok(futures::join!(
                            transaction.execute(&insert, &session),
                            transaction.query_one(&append, &params)
                        ))
                    })
                    .await?;
                created.map_err(|error| db.error(error))?;
                appended
            } else {
                let key = lease_key(&self.schema, &header.id);
                let row = db
                    .timed(
                        "taking the repair lock",
                        transaction.query_one("SELECT pg_try_advisory_xact_lock($1)", &[&key]),
                    )
                    .await?;
                if !db.column::<bool>(&row, 0)? {
                    let holder = self.lease_holder(&transaction, key).await?;
                    return Err(PersistenceError::Held { id: header.id.clone(), holder });
                }
                db.timed_raw("appending events", transaction.query_one(&append, &params)).await?
            };
            args.check(db, answer_of(db, appended)?)?;
            db.timed(committing, transaction.commit()).await
        })
        .await
    }
}

/// The one-statement append's answer row; `None` for a unique violation (an answer: the
/// connection is fine). Any other failure is mapped here, inside the pooled call, so a
/// connection that failed is not handed out again.
fn answer_of(db: &Db, appended: std::result::Result<Row, tokio_postgres::Error>) -> Result<Option<Row>> {
    match appended {
        Ok(row) => Ok(Some(row)),
        Err(error) if is_unique_violation(&error) => Ok(None),
        Err(error) => Err(db.error(error)),
    }
}

/// What the one-statement append sends for one batch.
struct AppendArgs<'a> {
    id: &'a SessionId,
    name: &'a str,
    first_seq: u64,
    columns: RowColumns<'a>,
    next_seq: i64,
    n_bytes: i64,
    notification: Option<&'a String>,
}

impl<'a> AppendArgs<'a> {
    /// `None` for an empty batch.
    fn new(
        header: &'a SessionHeader,
        events: &[&SessionEvent],
        encoded: &'a [EncodedRow],
        notification: Option<&'a String>,
    ) -> Option<AppendArgs<'a>> {
        let (first, last) = (events.first()?, events.last()?);
        Some(AppendArgs {
            id: &header.id,
            name: header.id.as_str(),
            first_seq: first.seq,
            columns: RowColumns::of(encoded),
            next_seq: to_sql_seq(last.seq) + 1,
            n_bytes: encoded.iter().map(|event| event.n_bytes).sum(),
            notification,
        })
    }

    /// The statement: `append`, or `append_notify` with a notification.
    fn sql<'s>(&self, store: &'s PgStore) -> &'s str {
        match self.notification {
            Some(_) => &store.sql.append_notify,
            None => &store.sql.append,
        }
    }

    /// The statement's parameters (`channel` for a notification's).
    fn params<'s>(&'s self, channel: &'s String) -> Vec<&'s (dyn ToSql + Sync)> {
        let mut params: Vec<&(dyn ToSql + Sync)> = vec![&self.name];
        params.extend(self.columns.params());
        params.extend([&self.next_seq as &(dyn ToSql + Sync), &self.n_bytes]);
        if let Some(payload) = &self.notification {
            params.extend([channel as &(dyn ToSql + Sync), *payload]);
        }
        params
    }

    /// What the answer says: the batch written, or the fence, a stored run past the next seq
    /// (`None`: the primary key's violation), a missing session row.
    fn check(&self, db: &Db, answer: Option<Row>) -> Result<()> {
        let (id, first_seq) = (self.id, self.first_seq);
        let Some(row) = answer else { return Err(past_next_seq(id, first_seq)) };
        let stored_next: Option<i64> = db.column(&row, 0)?;
        let (inserted, bumped): (i64, i64) = (db.column(&row, 1)?, db.column(&row, 2)?);
        check_fence(id, first_seq, stored_next)?;
        if inserted == 0 {
            // The batch starts at the locked next seq, yet a stored run reaches it: the rows and
            // the row's next seq disagree (nothing was written).
            return Err(past_next_seq(id, first_seq));
        }
        if bumped != 1 {
            // The statement inserted the rows without moving the row's next seq (something
            // outside this crate, a trigger or a policy, kept the update from the row); alone it
            // has committed them, in a transaction they are rolled back.
            return Err(PersistenceError::inconsistent(
                id,
                format!(
                    "session {id}: the append inserted its events from seq {first_seq} on without moving its next seq"
                ),
            ));
        }
        Ok(())
    }
}

/// The columns of a batch's rows as the append's arrays (`$2` to `$7` of `Sql::append`).
struct RowColumns<'a> {
    seqs: Vec<i64>,
    kinds: Vec<&'a str>,
    times: Vec<i64>,
    texts: Vec<Option<&'a str>>,
    frames: Vec<Option<&'a [u8]>>,
    counts: Vec<i32>,
}

impl<'a> RowColumns<'a> {
    fn of(encoded: &'a [EncodedRow]) -> RowColumns<'a> {
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
    fn params(&self) -> [&(dyn ToSql + Sync); 6] {
        [&self.seqs, &self.kinds, &self.times, &self.texts, &self.frames, &self.counts]
    }
}

/// A stored run reaches the batch's first seq although the batch starts at the row's next seq:
/// the rows and the next seq disagree.
fn past_next_seq(id: &SessionId, first_seq: u64) -> PersistenceError {
    PersistenceError::inconsistent(
        id,
        format!("session {id} holds event rows from seq {first_seq} on, past its stored next seq"),
    )
}

/// The writer fence (`storage-format.md`, "Fencing"): a batch must start at the locked row's
/// next seq (`None`: no session row to append to).
fn check_fence(id: &SessionId, first_seq: u64, stored_next: Option<i64>) -> Result<()> {
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
