//! What the server says about sessions and their writers: where sessions stand and whether a
//! writer holds each one's lease (a follower's sweep: `Backend::positions`), the sessions created
//! since a time (`Backend::created_since`), and who holds a lease (for a refused repair's message).

use session_core::SessionId;
use session_persistence::{Listing, PersistenceError, Result, SessionPosition};
use tokio_util::sync::CancellationToken;

use super::{LEASE_APPLICATION, PgStore, lease_key, to_sql_seq};

/// How many ids one query of [`PgStore::positions`] looks up (a longer list takes several).
const POSITIONS_CHUNK: usize = 10_000;

/// Where `pg_locks` shows the advisory lock `key` (taken as `pg_advisory_lock(bigint)`): its
/// high 32 bits as `classid`, its low 32 bits as `objid` (and `objsubid` 1).
fn lock_columns(key: i64) -> (i64, i64) {
    let bits = u64::from_ne_bytes(key.to_ne_bytes());
    ((bits >> 32) as i64, (bits & 0xffff_ffff) as i64)
}

impl PgStore {
    /// One query per [`POSITIONS_CHUNK`] ids: each stored session's `next_seq` by the primary
    /// key, and whether a connection holds its lease key as `pg_locks` shows it, other than the
    /// connections whose `application_name` says they hold this handle's leases
    /// ([`PgStore::own_leases`]): this handle's own lease is not another writer's.
    pub(super) fn read_positions(&self, ids: &[SessionId], cancel: &CancellationToken) -> Result<Vec<SessionPosition>> {
        let db = &self.db;
        let mut positions = Vec::with_capacity(ids.len());
        for chunk in ids.chunks(POSITIONS_CHUNK) {
            if cancel.is_cancelled() {
                return Err(PersistenceError::Cancelled);
            }
            let names: Vec<&str> = chunk.iter().map(SessionId::as_str).collect();
            let (highs, lows): (Vec<i64>, Vec<i64>) =
                chunk.iter().map(|id| lock_columns(lease_key(&self.schema, id))).unzip();
            let own = self.own_leases();
            let rows = db.run(async |client| {
                let statement = db.prepared(client, &self.sql.positions).await?;
                db.timed("reading positions", client.query(&statement, &[&names, &highs, &lows, &own])).await
            })?;
            for row in &rows {
                let next_seq: i64 = db.column(row, 1)?;
                positions.push(SessionPosition {
                    id: SessionId::from(db.column::<String>(row, 0)?),
                    next_seq: u64::try_from(next_seq).unwrap_or(0),
                    held: Some(db.column(row, 2)?),
                });
            }
        }
        Ok(positions)
    }

    /// Through the `sessions_by_created` index; a header that does not decode is its own fault.
    pub(super) fn read_created_since(&self, since_ms: u64, cancel: &CancellationToken) -> Result<Listing> {
        if cancel.is_cancelled() {
            return Err(PersistenceError::Cancelled);
        }
        let db = &self.db;
        let since = to_sql_seq(since_ms);
        let rows = db.run(async |client| {
            let statement = db.prepared(client, &self.sql.created_since).await?;
            db.timed("listing new sessions", client.query(&statement, &[&since])).await
        })?;
        let mut listing = self.listing(rows)?;
        listing.sort();
        Ok(listing)
    }

    /// Who holds the lease `key`, as far as the server shows it: the holder's
    /// `application_name` (host and pid), its server pid and its address.
    pub(super) async fn lease_holder(&self, transaction: &tokio_postgres::Transaction<'_>, key: i64) -> Result<String> {
        let (high, low) = lock_columns(key);
        let row = self
            .db
            .timed(
                "naming the lease holder",
                transaction.query_opt(
                    "SELECT a.application_name, a.pid, host(a.client_addr) FROM pg_locks l \
                     JOIN pg_stat_activity a ON a.pid = l.pid \
                     WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1 \
                     AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()) \
                     AND l.classid::bigint = $1 AND l.objid::bigint = $2 LIMIT 1",
                    &[&high, &low],
                ),
            )
            .await?;
        Ok(match row {
            None => "a writer whose lock has just ended".to_owned(),
            Some(row) => {
                let name: Option<String> = self.db.column(&row, 0)?;
                let pid: i32 = self.db.column(&row, 1)?;
                let addr: Option<String> = self.db.column(&row, 2)?;
                // After the prefix, the holding handle's tag in brackets, then the holder.
                let name = name.and_then(|name| {
                    let holder = name.strip_prefix(LEASE_APPLICATION)?;
                    let holder = holder
                        .strip_prefix('[')
                        .and_then(|tagged| tagged.split_once("] "))
                        .map_or(holder, |(_, rest)| rest);
                    Some(holder.to_owned())
                });
                let mut holder = name.unwrap_or_else(|| "a writer".to_owned());
                holder.push_str(&format!("; server pid {pid}"));
                if let Some(addr) = addr {
                    holder.push_str(&format!(", from {addr}"));
                }
                holder
            }
        })
    }
}
