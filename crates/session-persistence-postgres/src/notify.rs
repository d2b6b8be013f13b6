//! The change notifications a store sends (`docs/storage-format.md`, "Change notifications"):
//! the schema's channel, the payload of one notification and its parse back into a
//! [`StoreChange`], and the handle's tag that lets its own watch skip what it sent itself.
//!
//! A notification is only a wake-up: the follower reads the positions and the tails itself, so a
//! payload that does not parse, or one without an id (it would not fit PostgreSQL's limit), is a
//! sweep and never an error.

use std::sync::atomic::{AtomicBool, Ordering};

use session_core::SessionId;
use session_persistence::{ChangeKind, StoreChange};

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

/// What a notification's payload says, seen from the watch of the handle tagged `own_tag`:
/// `None` for the handle's own notification (its writes are live in it already), else the
/// change; a payload without an id, or one that does not parse, is a [`StoreChange::Sweep`].
pub(crate) fn parse(payload: &str, own_tag: &str) -> Option<StoreChange> {
    let Ok(serde_json::Value::Object(fields)) = serde_json::from_str::<serde_json::Value>(payload) else {
        tracing::debug!(payload, "a change notification that does not parse: sweeping");
        return Some(StoreChange::Sweep);
    };
    if fields.get("t").and_then(serde_json::Value::as_str) == Some(own_tag) {
        return None;
    }
    let kind = fields.get("k").and_then(serde_json::Value::as_str).and_then(ChangeKind::parse);
    let id = fields.get("id").and_then(serde_json::Value::as_str);
    let (Some(kind), Some(id)) = (kind, id) else {
        return Some(StoreChange::Sweep);
    };
    let next_seq = fields.get("s").and_then(serde_json::Value::as_u64);
    Some(StoreChange::Session { id: SessionId::from(id), kind, next_seq })
}

#[cfg(test)]
mod tests;
