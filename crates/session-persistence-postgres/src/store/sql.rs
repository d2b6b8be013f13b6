//! The store's statements, qualified with its schema once when it opens.

use crate::schema::qualify;

/// The statements, qualified with the schema once.
pub(super) struct Sql {
    pub(super) session: String,
    /// The session row and its events from a seq on, one row per event (`store::read`).
    pub(super) session_events: String,
    /// The rows of session `$1` that start at seqs from `$2` up to `$3` (excluded): a span of a
    /// long read (`store::read`).
    pub(super) events_from: String,
    /// `events_from` from the run that holds `$2`: a long read's first span.
    pub(super) events_from_run: String,
    /// Many whole short logs, one row per event (`store::read`'s read ahead).
    pub(super) sessions_events: String,
    /// The sessions of `$1`, each with its events from the seq of `$2` at the same place (from
    /// the run that holds it), when at most `$3` events are stored from there (`store::read`).
    pub(super) sessions_tails: String,
    /// Every write in one statement (alone, its own transaction; after the session row's insert
    /// or the repair lock, in one transaction with them: `store::append`): the session row
    /// locked, the rows inserted only if the batch starts at its `next_seq` (`$2[1]`) and no
    /// stored run reaches that far, the row's next seq (`$8`), revision and byte count (`$9`)
    /// moved only if they were; answers the locked next seq, the rows inserted and the rows
    /// bumped.
    pub(super) append: String,
    /// `append`, and the append's notification (`$10` channel, `$11` payload) on its commit.
    pub(super) append_notify: String,
    pub(super) insert_session: String,
    pub(super) revision: String,
    pub(super) list: String,
    pub(super) family: String,
    /// A release's notification, its next seq read from the row (`$1` channel, `$2` and `$4`
    /// the payload's parts around the seq, `$3` the id).
    pub(super) notify_release: String,
    /// The lease's unlock (`$5`) and the release's notification, in one statement.
    pub(super) unlock_notify_release: String,
    pub(super) positions: String,
    pub(super) created_since: String,
    /// The subagent children of the parents `$1`, grouped per parent, seen by owner `$2` (any
    /// owner when null): a page's child counts.
    pub(super) page_children: String,
}

pub(super) const HEADER_COLUMNS: &str = "id, header, incarnation, revision, n_bytes";
/// The first seq of the run that holds seq `$2` of session `$1` (`$2` itself when no row starts
/// at or before it).
const RUN_START: &str = "(SELECT coalesce(max(r.seq), $2) FROM {s}.events r WHERE r.session_id = $1 AND r.seq <= $2)";
/// The common part of `append` and `append_notify`: each sub-statement runs once, in this order
/// (each reads the one before). The fence compares the locked row's next seq (its latest version,
/// after any wait for the lock); the guard on a stored run reaching the batch reads the
/// statement's snapshot, taken before that wait (every writer here moves the next seq in the
/// transaction that stores its rows, so a run committed meanwhile has moved it too).
const APPEND: &str = "WITH locked AS (SELECT next_seq FROM {s}.sessions WHERE id = $1 FOR UPDATE), \
     inserted AS (INSERT INTO {s}.events (session_id, seq, type, time, record, record_zstd, n_events) \
     SELECT $1, * FROM unnest($2::bigint[], $3::text[], $4::bigint[], $5::text[], $6::bytea[], $7::integer[]) \
     WHERE (SELECT next_seq FROM locked) = $2[1] AND NOT EXISTS (SELECT 1 FROM (SELECT seq, n_events \
     FROM {s}.events WHERE session_id = $1 ORDER BY seq DESC LIMIT 1) l WHERE l.seq + l.n_events > $2[1]) \
     RETURNING 1), \
     bumped AS (UPDATE {s}.sessions SET next_seq = $8, revision = revision + 1, n_bytes = n_bytes + $9 \
     WHERE id = $1 AND EXISTS (SELECT 1 FROM inserted) RETURNING 1)";
const APPEND_ANSWER: &str =
    "(SELECT next_seq FROM locked), (SELECT count(*) FROM inserted), (SELECT count(*) FROM bumped)";
/// [`HEADER_COLUMNS`] of the table aliased `s`, and of the row set aliased `w`.
const HEADER_COLUMNS_S: &str = "id, s.header, s.incarnation, s.revision, s.n_bytes";
const HEADER_COLUMNS_W: &str = "w.id, w.header, w.incarnation, w.revision, w.n_bytes";

/// A release's notification: the payload's parts around the next seq that the session's row
/// holds (no seq when there is no row).
const RELEASE_NOTIFY: &str = "pg_notify($1::text, $2::text || coalesce((SELECT ',\"s\":' || next_seq \
     FROM {s}.sessions WHERE id = $3::text), '') || $4::text)";

impl Sql {
    pub(super) fn new(schema: &str) -> Sql {
        let q = |sql: &str| qualify(sql, schema);
        Sql {
            session: q(&format!("SELECT {HEADER_COLUMNS}, next_seq FROM {{s}}.sessions WHERE id = $1")),
            // From the run that holds `$2` (the last row at or before it).
            session_events: q(&format!(
                "SELECT {HEADER_COLUMNS}, next_seq, e.seq, e.record, e.record_zstd, e.n_events FROM {{s}}.sessions \
                 LEFT JOIN LATERAL (SELECT seq, record, record_zstd, n_events FROM {{s}}.events WHERE session_id = $1 \
                 AND seq >= {RUN_START} AND next_seq - $2 < $3 ORDER BY seq LIMIT $3) e ON true WHERE id = $1 \
                 ORDER BY e.seq"
            )),
            events_from: q("SELECT seq, record, record_zstd, n_events FROM {s}.events WHERE session_id = $1 \
                 AND seq >= $2 AND seq < $3 ORDER BY seq"),
            events_from_run: q(&format!(
                "SELECT seq, record, record_zstd, n_events FROM {{s}}.events WHERE session_id = $1 \
                 AND seq >= {RUN_START} AND seq < $3 ORDER BY seq"
            )),
            // The sessions of `$1` with at most `$2` events, in the order asked, as long as
            // their stored bytes add up to at most `$3`; each with every event row (one more
            // than `next_seq` says, if stored, so that a read sees it).
            sessions_events: q(&format!(
                "WITH wanted AS (SELECT s.{HEADER_COLUMNS_S}, s.next_seq, w.ord, \
                 sum(s.n_bytes) OVER (ORDER BY w.ord) AS running \
                 FROM unnest($1::text[]) WITH ORDINALITY AS w (id, ord) JOIN {{s}}.sessions s ON s.id = w.id \
                 WHERE s.next_seq <= $2 AND s.n_bytes <= $3) \
                 SELECT {HEADER_COLUMNS_W}, w.next_seq, e.seq, e.record, e.record_zstd, e.n_events FROM wanted w \
                 LEFT JOIN LATERAL (SELECT seq, record, record_zstd, n_events FROM {{s}}.events WHERE session_id = w.id \
                 ORDER BY seq LIMIT w.next_seq + 1) e ON true WHERE w.running <= $3 ORDER BY w.ord, e.seq"
            )),
            sessions_tails: q(&format!(
                "WITH wanted AS (SELECT s.{HEADER_COLUMNS_S}, s.next_seq, w.ord, w.from_seq \
                 FROM unnest($1::text[], $2::bigint[]) WITH ORDINALITY AS w (id, from_seq, ord) \
                 JOIN {{s}}.sessions s ON s.id = w.id WHERE s.next_seq - w.from_seq <= $3) \
                 SELECT {HEADER_COLUMNS_W}, w.next_seq, e.seq, e.record, e.record_zstd, e.n_events FROM wanted w \
                 LEFT JOIN LATERAL (SELECT seq, record, record_zstd, n_events FROM {{s}}.events WHERE session_id = w.id \
                 AND seq >= (SELECT coalesce(max(r.seq), w.from_seq) FROM {{s}}.events r WHERE r.session_id = w.id \
                 AND r.seq <= w.from_seq) ORDER BY seq LIMIT $3 + 1) e ON true ORDER BY w.ord, e.seq"
            )),
            append: q(&format!("{APPEND} SELECT {APPEND_ANSWER}")),
            append_notify: q(&format!(
                "{APPEND} SELECT {APPEND_ANSWER}, (SELECT pg_notify($10::text, $11::text) FROM bumped)"
            )),
            insert_session: q("INSERT INTO {s}.sessions (id, header, created_at, cwd, parent_session, origin, owner, \
                 incarnation, revision, next_seq, n_bytes) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, 0, 0, 0) \
                 ON CONFLICT (id) DO NOTHING"),
            revision: q("SELECT incarnation, revision FROM {s}.sessions WHERE id = $1"),
            list: q(&format!("SELECT {HEADER_COLUMNS} FROM {{s}}.sessions ORDER BY id")),
            family: q(&format!(
                "(SELECT {HEADER_COLUMNS} FROM {{s}}.sessions WHERE id = $1 OR parent_session = $1) \
                 UNION ALL \
                 (SELECT DISTINCT ON (g.parent_session, g.owner) g.id, g.header, g.incarnation, g.revision, g.n_bytes \
                  FROM {{s}}.sessions c JOIN {{s}}.sessions g ON g.parent_session = c.id AND g.origin = 'subagent' \
                  WHERE c.parent_session = $1 ORDER BY g.parent_session, g.owner, g.id)"
            )),
            notify_release: q(&format!("SELECT {RELEASE_NOTIFY}")),
            unlock_notify_release: q(&format!("SELECT pg_advisory_unlock_shared($5), {RELEASE_NOTIFY}")),
            positions: q(
                "WITH wanted AS (SELECT * FROM unnest($1::text[], $2::bigint[], $3::bigint[]) AS w (id, high, low)), \
                 held AS MATERIALIZED (SELECT DISTINCT classid::bigint AS high, objid::bigint AS low FROM pg_locks l \
                   WHERE locktype = 'advisory' AND granted AND mode = 'ShareLock' AND objsubid = 1 \
                   AND NOT EXISTS (SELECT 1 FROM pg_stat_activity a WHERE a.pid = l.pid \
                     AND starts_with(a.application_name, $4::text)) \
                   AND database = (SELECT oid FROM pg_database WHERE datname = current_database())) \
                 SELECT s.id, s.next_seq, h.high IS NOT NULL FROM wanted w JOIN {s}.sessions s ON s.id = w.id \
                 LEFT JOIN held h ON h.high = w.high AND h.low = w.low",
            ),
            created_since: q(&format!(
                "SELECT {HEADER_COLUMNS} FROM {{s}}.sessions WHERE created_at >= $1 ORDER BY created_at DESC, id"
            )),
            page_children: q("SELECT parent_session, array_agg(id ORDER BY id) FROM {s}.sessions \
                 WHERE parent_session = ANY($1) AND origin = 'subagent' AND ($2::text IS NULL OR owner = $2) \
                 GROUP BY parent_session"),
        }
    }
}
