//! The change notifications a store sends (`docs/storage-format.md`, "Change notifications"):
//! the schema's channel, the payload of one notification and its parse back into a
//! [`StoreChange`], and the handle's tag that lets its own watch skip what it sent itself.
//!
//! A notification is only a wake-up: the follower reads the positions and the tails itself, so a
//! payload that does not parse, or one without an id (it would not fit PostgreSQL's limit), is a
//! sweep and never an error.
//!
//! A handle's appends are paced ([`Pacer`]): an append after a quiet stretch notifies in its own
//! transaction, and the appends of a burst wait until the gap since the last notification has
//! passed, then go together in one statement, one notification per session (its latest next
//! seq). Every listening backend of the server wakes up once per notifying transaction, so a
//! burst of appends costs each listener one wake-up per gap instead of one per append.

use std::{
    borrow::Cow,
    collections::HashMap,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use parking_lot::Mutex;
use tokio::time::Instant;
use tokio_postgres::types::ToSql;

use session_core::SessionId;
use session_persistence::{ChangeKind, StoreChange};

use crate::db::Db;

/// The longest payload PostgreSQL accepts: `pg_notify` refuses one of 8,000 bytes or more.
pub(crate) const PAYLOAD_MAX_BYTES: usize = 7_999;

/// The most bytes a next seq takes in a payload (`,"s":` and 20 digits).
const SEQ_FIELD_MAX_BYTES: usize = 5 + 20;

/// The channel of `schema`'s store: `dsh_` and 16 lowercase hex digits of the 64-bit FNV-1a key
/// of (`session-notify`, schema). Always a plain lowercase identifier of 20 bytes, whatever the
/// schema's name, so `LISTEN` needs no quoting and the name stays far below PostgreSQL's 63.
pub(crate) fn channel(schema: &str) -> String {
    format!("dsh_{:016x}", session_persistence::lease::lease_key(&["session-notify", schema]))
}

/// A fresh tag for one store handle: 8 random lowercase hex digits.
fn fresh_tag() -> String {
    let bytes = uuid::Uuid::new_v4().into_bytes();
    bytes[..4].iter().map(|byte| format!("{byte:02x}")).collect()
}

/// What one store handle needs to notify: its schema's channel, its tag, and (for tests) whether
/// its notifications are suppressed.
#[derive(Debug)]
pub(crate) struct Notifier {
    pub(crate) channel: String,
    pub(crate) tag: String,
    suppressed: AtomicBool,
}

impl Notifier {
    pub(crate) fn new(schema: &str) -> Notifier {
        Notifier { channel: channel(schema), tag: fresh_tag(), suppressed: AtomicBool::new(false) }
    }

    /// Whether this handle's notifications are on (they are, unless a test suppressed them).
    pub(crate) fn enabled(&self) -> bool {
        !self.suppressed.load(Ordering::Acquire)
    }

    /// Suppresses (or restores) this handle's notifications.
    #[cfg(feature = "testing")]
    pub(crate) fn suppress(&self, suppressed: bool) {
        self.suppressed.store(suppressed, Ordering::Release);
    }

    /// The payload of `kind` for `id` at `next_seq`.
    pub(crate) fn payload(&self, kind: ChangeKind, id: &SessionId, next_seq: u64) -> String {
        let (head, tail) = self.parts(kind, id);
        format!("{head},\"s\":{next_seq}{tail}")
    }

    /// The payload of `kind` for `id` around its next seq: the seq field (`,"s":N`, when known)
    /// goes between the two parts, so SQL can fill it in from the row. Without the id when the
    /// payload would not stay under [`PAYLOAD_MAX_BYTES`] with it.
    pub(crate) fn parts(&self, kind: ChangeKind, id: &SessionId) -> (String, String) {
        let head = format!("{{\"k\":\"{}\",\"t\":\"{}\"", kind.as_str(), self.tag);
        // A `String` always serializes.
        let quoted = serde_json::to_string(id.as_str()).unwrap_or_default();
        let with_id = format!(",\"id\":{quoted}}}");
        if !quoted.is_empty() && head.len() + SEQ_FIELD_MAX_BYTES + with_id.len() <= PAYLOAD_MAX_BYTES {
            (head, with_id)
        } else {
            (head, "}".to_owned())
        }
    }
}

/// Whether an append's notification goes in its own transaction or waits for the gap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Turn {
    /// In the append's transaction: no notification went out within the gap.
    Now,
    /// After the append commits, through [`Pacer::defer`].
    Later,
}

/// Paces one handle's append notifications (see the module documentation). Creations and
/// releases are not paced: they are rare, and a follower shows them as their own frames.
#[derive(Debug)]
pub(crate) struct Pacer {
    gap: Duration,
    state: Arc<Mutex<Paced>>,
}

#[derive(Debug, Default)]
struct Paced {
    /// When this handle's last paced notification went out (or was put in a transaction).
    last: Option<Instant>,
    /// The payloads waiting for the gap, one per session: its latest append's.
    waiting: HashMap<SessionId, String>,
    /// Whether a send of the waiting payloads is scheduled.
    scheduled: bool,
}

/// The waiting payloads a scheduled send takes: see [`Pacer::defer`].
#[derive(Debug)]
pub(crate) struct Deferred {
    state: Arc<Mutex<Paced>>,
    /// When to send them.
    pub(crate) due: Instant,
}

/// Paced notifications: the payloads `$2` on the channel `$1`, in one transaction.
const NOTIFY_MANY: &str = "SELECT pg_notify($1::text, p) FROM unnest($2::text[]) AS p";

impl Deferred {
    /// Sends the waiting payloads on `channel` once `due`, from a task on `db`'s runtime. A send
    /// that fails is only logged: followers find the appends by their sweep.
    pub(crate) fn send_when_due(self, db: &Db, channel: String) {
        let pooled = db.pooled();
        db.spawn(async move {
            tokio::time::sleep_until(self.due).await;
            let payloads = self.take();
            if payloads.is_empty() {
                return;
            }
            let params: [&(dyn ToSql + Sync); 2] = [&channel, &payloads];
            if let Err(error) = pooled.execute("notifying appends", NOTIFY_MANY, &params).await {
                tracing::warn!(%error, sessions = payloads.len(), "cannot notify appends; followers find them by their sweep");
            }
        });
    }

    /// Takes the waiting payloads (the send is no longer scheduled) and counts them as sent now.
    pub(crate) fn take(&self) -> Vec<String> {
        let mut state = self.state.lock();
        state.scheduled = false;
        if state.waiting.is_empty() {
            return Vec::new();
        }
        state.last = Some(Instant::now());
        state.waiting.drain().map(|(_, payload)| payload).collect()
    }
}

impl Pacer {
    /// Notifications at least `gap` apart (zero: every append in its own transaction).
    pub(crate) fn new(gap: Duration) -> Pacer {
        Pacer { gap, state: Arc::default() }
    }

    /// Where the notification of an append about to start goes: [`Turn::Now`] claims the gap
    /// (whether or not the append then commits: a claim for nothing only delays the next one).
    pub(crate) fn turn(&self) -> Turn {
        if self.gap.is_zero() {
            return Turn::Now;
        }
        let mut state = self.state.lock();
        let now = Instant::now();
        let quiet = !state.scheduled && state.last.is_none_or(|last| now.duration_since(last) >= self.gap);
        if quiet {
            state.last = Some(now);
            Turn::Now
        } else {
            Turn::Later
        }
    }

    /// Queues the notification `payload` of an append to `id` that committed, replacing the
    /// session's earlier waiting one; returns the send to schedule when none is yet (the caller
    /// sleeps until its `due`, then sends what it takes).
    pub(crate) fn defer(&self, id: &SessionId, payload: String) -> Option<Deferred> {
        let mut state = self.state.lock();
        state.waiting.insert(id.clone(), payload);
        if state.scheduled {
            return None;
        }
        state.scheduled = true;
        let due = state.last.map_or_else(Instant::now, |last| last + self.gap);
        Some(Deferred { state: Arc::clone(&self.state), due })
    }

    /// Drops `id`'s waiting notification: its release's own says where the session ends.
    pub(crate) fn forget(&self, id: &SessionId) {
        self.state.lock().waiting.remove(id);
    }
}

/// The fields of a notification's payload that a watch reads (others are ignored), decoded
/// straight into their types rather than through a `serde_json::Value`.
#[derive(serde::Deserialize)]
struct Fields<'a> {
    #[serde(borrow)]
    t: Option<Cow<'a, str>>,
    #[serde(borrow)]
    k: Option<Cow<'a, str>>,
    #[serde(borrow)]
    id: Option<Cow<'a, str>>,
    s: Option<u64>,
}

/// What a notification's payload says, seen from the watch of the handle tagged `own_tag`:
/// `None` for the handle's own notification (its writes are live in it already), else the
/// change; a payload without an id, or one that does not parse (a field of another type
/// included), is a [`StoreChange::Sweep`].
pub(crate) fn parse(payload: &str, own_tag: &str) -> Option<StoreChange> {
    let Ok(fields) = serde_json::from_str::<Fields<'_>>(payload) else {
        tracing::debug!(payload, "a change notification that does not parse: sweeping");
        return Some(StoreChange::Sweep);
    };
    if fields.t.as_deref() == Some(own_tag) {
        return None;
    }
    let kind = fields.k.as_deref().and_then(ChangeKind::parse);
    let (Some(kind), Some(id)) = (kind, fields.id) else {
        return Some(StoreChange::Sweep);
    };
    Some(StoreChange::Session { id: SessionId::from(id.as_ref()), kind, next_seq: fields.s })
}

#[cfg(test)]
mod tests;
