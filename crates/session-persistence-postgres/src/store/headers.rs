//! Decoded session headers, kept per id with the stored text they came from. A header never
//! changes once stored (a new incarnation may store another one under the same id, which the
//! text comparison catches), and a follower reads the same few sessions' rows many times a
//! second: each such read then compares the text instead of decoding the JSON again.

use std::{collections::HashMap, sync::Arc};

use parking_lot::Mutex;
use session_core::{SessionHeader, SessionId};
use session_persistence::Result;

/// At most this many headers are kept; past it the cache starts over, so a listing of a large
/// store costs it a few inserts and never grows it beyond this.
const MAX_HEADERS: usize = 2048;

/// A decoded header and the stored text it came from.
type Kept = (Box<str>, Arc<SessionHeader>);

/// See the module documentation.
#[derive(Default)]
pub(super) struct HeaderCache {
    entries: Mutex<HashMap<SessionId, Kept>>,
}

impl HeaderCache {
    /// The header `id`'s row stores as `text`: the one decoded earlier from the same text, else
    /// `decode`'s (kept when it decodes; a header that does not decode is never kept).
    pub(super) fn decoded(
        &self,
        id: &SessionId,
        text: &str,
        decode: impl FnOnce() -> Result<SessionHeader>,
    ) -> Result<Arc<SessionHeader>> {
        if let Some((kept, header)) = self.entries.lock().get(id)
            && **kept == *text
        {
            return Ok(Arc::clone(header));
        }
        let header = Arc::new(decode()?);
        let mut entries = self.entries.lock();
        if entries.len() >= MAX_HEADERS {
            entries.clear();
        }
        entries.insert(id.clone(), (text.into(), Arc::clone(&header)));
        Ok(header)
    }
}

#[cfg(test)]
mod tests {
    use session_persistence::PersistenceError;

    use super::*;

    fn header(id: &str, created_at: u64) -> SessionHeader {
        SessionHeader::new(SessionId::from(id), created_at)
    }

    #[test]
    fn a_header_is_decoded_once_per_stored_text_and_a_failure_is_never_kept() {
        let cache = HeaderCache::default();
        let id = SessionId::from("s");
        let first = cache.decoded(&id, "one", || Ok(header("s", 1))).unwrap();
        let again = cache.decoded(&id, "one", || panic!("decoded again")).unwrap();
        assert!(Arc::ptr_eq(&first, &again));
        // Another text under the same id (a new incarnation) is decoded again.
        let other = cache.decoded(&id, "two", || Ok(header("s", 2))).unwrap();
        assert_eq!(other.created_at, 2);
        let failed = cache.decoded(&id, "bad", || Err(PersistenceError::invalid_input("bad header")));
        assert!(failed.is_err());
        let retried = cache.decoded(&id, "bad", || Err(PersistenceError::invalid_input("still bad")));
        assert_eq!(retried.unwrap_err().to_string(), PersistenceError::invalid_input("still bad").to_string());
    }

    #[test]
    fn the_cache_never_holds_more_than_its_bound() {
        let cache = HeaderCache::default();
        for n in 0..MAX_HEADERS * 2 + 1 {
            let id = format!("s{n}");
            cache.decoded(&SessionId::from(id.as_str()), &id, || Ok(header(&id, 0))).unwrap();
            assert!(cache.entries.lock().len() <= MAX_HEADERS);
        }
    }
}
