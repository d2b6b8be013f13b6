//! Size bounds on what a session log holds: each string field of a header and each event.
//!
//! A log must read back whatever its writer accepted, and a reader buffers one header line and
//! one record at a time under fixed limits (`session-persistence` reads a header line of at most
//! 1 MiB and a record of at most [`MAX_EVENT_BYTES`]). So the limits are checked where a header
//! or an event is accepted — [`SessionHeader::validate`], [`Session::append`], a session's seed —
//! and a refusal names the field, its size and the limit ([`TooLarge`]). Reads never apply them:
//! a log written before the bounds existed still reads.
//!
//! [`SessionHeader::validate`]: crate::SessionHeader::validate
//! [`Session::append`]: crate::Session::append

use std::fmt;

use crate::EventType;

/// The longest session id, and the longest `parentSession`, in bytes.
pub const MAX_ID_BYTES: usize = 1024;

/// The longest `cwd` in bytes: `PATH_MAX` on Linux, counting the terminating NUL a kernel adds.
pub const MAX_CWD_BYTES: usize = 4096;

/// The longest `agentPreset` name in bytes.
pub const MAX_AGENT_PRESET_BYTES: usize = 1024;

/// The longest `owner` in bytes.
pub const MAX_OWNER_BYTES: usize = 256;

/// The largest event, measured as its canonical JSON record (`SessionEvent::encoded_len`): the
/// largest record a log reader buffers (64 MiB), so every accepted event fits one stored line.
pub const MAX_EVENT_BYTES: usize = 64 << 20;

/// An upper bound of a header's JSON text (`serde_json` of a [`SessionHeader`]) when every string
/// field is within its bound: a string byte escapes to at most 6 bytes (`\u001f`), and the keys,
/// the numbers and a `"type":"session"` tag in front fit in 512 bytes. About 45 KiB, far under a
/// reader's 1 MiB header-line limit.
///
/// [`SessionHeader`]: crate::SessionHeader
pub const MAX_HEADER_JSON_BYTES: usize =
    6 * (2 * MAX_ID_BYTES + MAX_CWD_BYTES + MAX_AGENT_PRESET_BYTES + MAX_OWNER_BYTES) + 512;

/// A bounded string field of a session header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HeaderField {
    /// `id`, bounded by [`MAX_ID_BYTES`].
    Id,
    /// `cwd`, bounded by [`MAX_CWD_BYTES`].
    Cwd,
    /// `parentSession`, bounded by [`MAX_ID_BYTES`] like any session id.
    ParentSession,
    /// `agentPreset`, bounded by [`MAX_AGENT_PRESET_BYTES`].
    AgentPreset,
    /// `owner`, bounded by [`MAX_OWNER_BYTES`].
    Owner,
}

impl HeaderField {
    /// Every bounded field, in the header's key order.
    pub const ALL: [HeaderField; 5] =
        [HeaderField::Id, HeaderField::Cwd, HeaderField::ParentSession, HeaderField::AgentPreset, HeaderField::Owner];

    /// The field's JSON key (`parentSession`, `agentPreset`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            HeaderField::Id => "id",
            HeaderField::Cwd => "cwd",
            HeaderField::ParentSession => "parentSession",
            HeaderField::AgentPreset => "agentPreset",
            HeaderField::Owner => "owner",
        }
    }

    /// The most bytes the field may hold.
    pub fn limit(self) -> usize {
        match self {
            HeaderField::Id | HeaderField::ParentSession => MAX_ID_BYTES,
            HeaderField::Cwd => MAX_CWD_BYTES,
            HeaderField::AgentPreset => MAX_AGENT_PRESET_BYTES,
            HeaderField::Owner => MAX_OWNER_BYTES,
        }
    }

    /// Checks one value of the field against its bound (its UTF-8 length, not its JSON text).
    pub fn check(self, value: &str) -> Result<(), TooLarge> {
        if value.len() <= self.limit() {
            return Ok(());
        }
        Err(TooLarge { what: Oversized::Header(self), size: value.len() as u64, limit: self.limit() as u64 })
    }

    /// Checks that one value of the field is text every backend stores losslessly: no U+0000
    /// (NUL), which a PostgreSQL `text` column cannot hold. The message names the field.
    pub fn check_text(self, value: &str) -> Result<(), String> {
        if value.contains('\0') {
            return Err(format!("session header {self} must not contain U+0000 (NUL), which no session store keeps"));
        }
        Ok(())
    }
}

impl fmt::Display for HeaderField {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What is over its bound.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Oversized {
    /// A string field of a session header.
    Header(HeaderField),
    /// An event, by its type and the seq it has (or would have had).
    Event {
        /// The event's type.
        kind: EventType,
        /// The seq the event has, or would have had if the append had been accepted.
        seq: u64,
    },
}

/// Something over its size bound, with its size and the limit, in bytes. The message names all
/// three: `session header cwd is 2097152 bytes, over the 4096-byte limit`, or
/// `session event "tool/result" at seq 7 is 70000000 bytes, over the 67108864-byte limit`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, thiserror::Error)]
pub struct TooLarge {
    /// The header field or the event that is over its bound.
    pub what: Oversized,
    /// Its size in bytes: UTF-8 bytes for a header field, the canonical JSON record for an event.
    pub size: u64,
    /// The bound it exceeds, in bytes.
    pub limit: u64,
}

impl fmt::Display for TooLarge {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.what {
            Oversized::Header(field) => write!(f, "session header {field}")?,
            Oversized::Event { kind, seq } => write!(f, "session event \"{kind}\" at seq {seq}")?,
        }
        write!(f, " is {} bytes, over the {}-byte limit", self.size, self.limit)
    }
}

/// The length of `text` as a JSON string token, quotes included, exactly as `serde_json` writes
/// it: `"` and `\` and the short control escapes take two bytes, other control characters six.
pub(crate) fn json_string_len(text: &str) -> usize {
    let escapes: usize = text
        .bytes()
        .map(|byte| match byte {
            b'"' | b'\\' | b'\x08' | b'\x0c' | b'\n' | b'\r' | b'\t' => 1,
            0x00..=0x1f => 5,
            _ => 0,
        })
        .sum();
    text.len() + escapes + 2
}

/// The number of characters of `value` in decimal.
pub(crate) fn decimal_len(value: u64) -> usize {
    value.checked_ilog10().map_or(1, |log| log as usize + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_name_the_field_the_size_and_the_limit() {
        let error = HeaderField::Cwd.check(&"/".repeat(2 << 20)).unwrap_err();
        assert_eq!(error.to_string(), "session header cwd is 2097152 bytes, over the 4096-byte limit");
        let error = TooLarge {
            what: Oversized::Event { kind: "tool/result".into(), seq: 7 },
            size: 70_000_000,
            limit: MAX_EVENT_BYTES as u64,
        };
        assert_eq!(
            error.to_string(),
            "session event \"tool/result\" at seq 7 is 70000000 bytes, over the 67108864-byte limit"
        );
    }

    #[test]
    fn a_field_at_its_limit_passes_and_one_byte_more_does_not() {
        for field in HeaderField::ALL {
            assert_eq!(field.check(&"a".repeat(field.limit())), Ok(()), "{field}");
            let error = field.check(&"a".repeat(field.limit() + 1)).unwrap_err();
            assert_eq!((error.size, error.limit), (field.limit() as u64 + 1, field.limit() as u64));
            assert_eq!(error.what, Oversized::Header(field));
        }
        // Bytes, not characters: `é` is two.
        assert!(HeaderField::Owner.check(&"é".repeat(MAX_OWNER_BYTES / 2 + 1)).is_err());
    }

    #[test]
    fn json_string_len_matches_serde_json() {
        for text in ["", "plain", "quote\" back\\slash", "\n\t\r\u{8}\u{c}", "\u{0}\u{1f}\u{7f}", "é😀"] {
            assert_eq!(json_string_len(text), serde_json::to_string(text).unwrap().len(), "{text:?}");
        }
    }

    #[test]
    fn decimal_len_counts_digits() {
        for value in [0, 9, 10, 99, 100, 9_007_199_254_740_991, u64::MAX] {
            assert_eq!(decimal_len(value), value.to_string().len(), "{value}");
        }
    }
}
