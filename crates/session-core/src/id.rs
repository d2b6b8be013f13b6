//! `SessionId`: the opaque, cheaply cloned name of one session.

use std::{borrow::Borrow, fmt, sync::Arc};

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The id of a session. Any non-empty string is an id; the core does not restrict
/// its characters (storage backends encode it for their own needs).
///
/// Ordering is ordinal byte order, which is what listings sort by.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SessionId(Arc<str>);

impl SessionId {
    /// An id holding a copy of `id`. Nothing is checked here: an id over
    /// [`MAX_ID_BYTES`](crate::MAX_ID_BYTES) is refused where a header is validated, and a
    /// storage backend refuses the ids it cannot name (the JSONL store an empty one).
    pub fn new(id: impl AsRef<str>) -> SessionId {
        SessionId(Arc::from(id.as_ref()))
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for SessionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl fmt::Display for SessionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<&str> for SessionId {
    fn from(id: &str) -> SessionId {
        SessionId::new(id)
    }
}

impl From<String> for SessionId {
    fn from(id: String) -> SessionId {
        SessionId(Arc::from(id))
    }
}

impl AsRef<str> for SessionId {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl Borrow<str> for SessionId {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl PartialEq<str> for SessionId {
    fn eq(&self, other: &str) -> bool {
        &*self.0 == other
    }
}

impl PartialEq<&str> for SessionId {
    fn eq(&self, other: &&str) -> bool {
        &*self.0 == *other
    }
}

impl Serialize for SessionId {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for SessionId {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<SessionId, D::Error> {
        let id = std::borrow::Cow::<'de, str>::deserialize(deserializer)?;
        Ok(SessionId::new(id))
    }
}
