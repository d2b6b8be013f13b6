//! The storable check: the per-event rules a log reader enforces, checked before a write is
//! acknowledged, so that what is acknowledged always reads back.
//!
//! A reader refuses a log for any event in retired vocabulary, of an unknown type not marked
//! `ignorable`, in a shape it cannot interpret, or larger than it can buffer. A writer that
//! accepted such an event would make the whole log unreadable after the fact. So every write
//! path calls [`check_storable`] — [`Session::append`], the persistence layer's append, its
//! repairs, every backend — and the read side's validation uses the same predicates
//! ([`is_retired`], [`KnownTypes::contains`], [`check_current_shape`]).
//!
//! The event types a reader accepts are a [`KnownTypes`]: the reference vocabulary plus the
//! host's own types, registered once (in `session-persistence`'s `CoordinatorConfig`, which a
//! coordinator also gives the `SessionStore` it is attached to). Surface transitions and
//! file-mutation commit orders depend on the log before the event; the session checks those
//! itself ([`Session::append`]).
//!
//! [`Session::append`]: crate::Session::append

use std::{collections::HashSet, fmt, sync::Arc};

use smol_str::SmolStr;

use crate::{
    EventType, KNOWN_SESSION_EVENT_TYPES, SessionEvent, SessionId, TooLarge,
    legacy::LegacyImport,
    messages,
    mutations::{carries_receipts, check_file_mutations},
};

/// The event types a reader accepts without `ignorable: true`: the reference vocabulary plus a
/// host's own. Cheap to clone (shared). Every event of a read is looked up, so the set uses a
/// fast non-cryptographic hash (the keys are not attacker-chosen at scale: a host builds the
/// set once from its vocabulary).
#[derive(Clone)]
pub struct KnownTypes(Arc<HashSet<SmolStr, foldhash::fast::FixedState>>);

impl KnownTypes {
    /// The reference vocabulary ([`KNOWN_SESSION_EVENT_TYPES`]) plus `extra`.
    pub fn with_extra(extra: impl IntoIterator<Item = impl Into<SmolStr>>) -> KnownTypes {
        let mut set: HashSet<SmolStr, foldhash::fast::FixedState> =
            KNOWN_SESSION_EVENT_TYPES.iter().map(SmolStr::new).collect();
        set.extend(extra.into_iter().map(Into::into));
        KnownTypes(Arc::new(set))
    }

    /// Whether `kind` is in the set (a read accepts such an event without `ignorable: true`).
    pub fn contains(&self, kind: &str) -> bool {
        self.0.contains(kind)
    }

    /// The types of this set that `other` lacks, sorted (empty when `other` accepts every type
    /// this set accepts).
    pub fn missing_from(&self, other: &KnownTypes) -> Vec<SmolStr> {
        let mut missing: Vec<SmolStr> = self.0.iter().filter(|kind| !other.contains(kind)).cloned().collect();
        missing.sort();
        missing
    }

    /// The types beyond the reference vocabulary, sorted.
    pub fn extra(&self) -> Vec<SmolStr> {
        self.missing_from(&KnownTypes::default())
    }
}

impl Default for KnownTypes {
    fn default() -> KnownTypes {
        KnownTypes::with_extra(std::iter::empty::<SmolStr>())
    }
}

impl PartialEq for KnownTypes {
    fn eq(&self, other: &KnownTypes) -> bool {
        Arc::ptr_eq(&self.0, &other.0) || *self.0 == *other.0
    }
}

impl Eq for KnownTypes {}

impl fmt::Debug for KnownTypes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KnownTypes").field("len", &self.0.len()).field("extra", &self.extra()).finish()
    }
}

/// Which rule an unstorable event breaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum StorableRule {
    /// Retired vocabulary no reader imports (`request/header-delta`, `mode/set`, a
    /// `request/header` with the `fallback` reason; reference 01 §1.4).
    Retired,
    /// A type unknown to the configured [`KnownTypes`] and not marked `ignorable`.
    UnknownType,
    /// An earlier shape that readers import (reference 01 §3.7) but no writer writes.
    LegacyShape,
    /// Invalid file-mutation receipts.
    Receipts,
    /// Surface markers on an event that may not carry them, or none on one that needs them.
    Markers,
    /// A message event whose message does not have the current shape (an identified message).
    MessageShape,
    /// The event's record is over [`MAX_EVENT_BYTES`](crate::MAX_EVENT_BYTES).
    TooLarge,
}

impl StorableRule {
    /// A short stable name (`retired`, `unknown-type`, `legacy-shape`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            StorableRule::Retired => "retired",
            StorableRule::UnknownType => "unknown-type",
            StorableRule::LegacyShape => "legacy-shape",
            StorableRule::Receipts => "receipts",
            StorableRule::Markers => "markers",
            StorableRule::MessageShape => "message-shape",
            StorableRule::TooLarge => "too-large",
        }
    }
}

impl fmt::Display for StorableRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An event a reader would refuse, so no writer stores it: the event, the rule it breaks and
/// why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("event \"{kind}\" at seq {seq} cannot be stored ({rule}): {message}")]
#[non_exhaustive]
pub struct Unstorable {
    /// The refused event's type.
    pub kind: EventType,
    /// The refused event's seq (for a live append, the seq it would have had).
    pub seq: u64,
    /// The rule it breaks.
    pub rule: StorableRule,
    /// What is wrong, naming the event.
    pub message: String,
    /// The size bound it is over, for [`StorableRule::TooLarge`].
    pub too_large: Option<TooLarge>,
}

impl Unstorable {
    fn new(event: &SessionEvent, rule: StorableRule, message: String) -> Unstorable {
        Unstorable { kind: event.kind.clone(), seq: event.seq, rule, message, too_large: None }
    }
}

/// Whether `kind` is retired vocabulary that no reader imports (reference 01 §1.4).
pub fn is_retired(kind: &str) -> bool {
    matches!(kind, "request/header-delta" | "mode/set")
}

/// The rules an event in its current shape keeps for a reader, in the read side's order: its
/// type is known or it is `ignorable`, its message (if it carries one) has the current shape, and
/// it is in no retired `request/header` shape. The read side applies this after importing an
/// event from a legacy shape; [`check_storable`] applies it to what is about to be written.
pub fn check_current_shape(event: &SessionEvent, known: &KnownTypes) -> Result<(), Unstorable> {
    if !event.ignorable && !known.contains(&event.kind) {
        return Err(Unstorable::new(
            event,
            StorableRule::UnknownType,
            format!(
                "event type \"{}\" is not a known type and not marked ignorable; a reader would refuse the log \
                 (register the host's own types in the known types)",
                event.kind
            ),
        ));
    }
    messages::check_message_shape(event)
        .map_err(|message| Unstorable::new(event, StorableRule::MessageShape, message))?;
    event.check_legacy().map_err(|message| Unstorable::new(event, StorableRule::Retired, message))
}

/// The storable check of one event of `session` before its envelope is stamped: every rule of
/// [`check_storable`] but the surface markers (whose `sourceEventSeqs` rules need the event's
/// seq; a session checks them when it plans the event's surface transition) and the size.
pub fn check_storable_shape(session: &SessionId, event: &SessionEvent, known: &KnownTypes) -> Result<(), Unstorable> {
    // The reference's words for the retired `request/header` shapes first.
    event.check_legacy().map_err(|message| Unstorable::new(event, StorableRule::Retired, message))?;
    if is_retired(&event.kind) {
        return Err(Unstorable::new(
            event,
            StorableRule::Retired,
            format!("event type \"{}\" is retired vocabulary that no reader accepts (reference 01 §1.4)", event.kind),
        ));
    }
    if carries_receipts(&event.kind) {
        check_file_mutations(&event.data, &format!("session event \"{}\"", event.kind))
            .map_err(|message| Unstorable::new(event, StorableRule::Receipts, message))?;
    }
    match LegacyImport::new(session.clone()).import(event) {
        Ok(None) => {}
        Ok(Some(_)) => {
            return Err(Unstorable::new(
                event,
                StorableRule::LegacyShape,
                format!(
                    "this {} is in a legacy shape that readers import (reference 01 §3.7) but no writer writes",
                    event.kind
                ),
            ));
        }
        Err(message) => return Err(Unstorable::new(event, StorableRule::LegacyShape, message)),
    }
    check_current_shape(event, known)
}

/// The storable check: `Ok` exactly when a reader configured with `known` accepts `event` of
/// `session` on its own (the rules that depend on the events before it, surface transitions and
/// file-mutation commit orders, are the session's). Every write path calls it before anything of
/// a batch is stored or acknowledged.
pub fn check_storable(session: &SessionId, event: &SessionEvent, known: &KnownTypes) -> Result<(), Unstorable> {
    check_storable_shape(session, event, known)?;
    event.check_markers().map_err(|message| Unstorable::new(event, StorableRule::Markers, message))?;
    event.check_size().map_err(|too_large| Unstorable {
        message: too_large.to_string(),
        too_large: Some(too_large),
        ..Unstorable::new(event, StorableRule::TooLarge, String::new())
    })
}
