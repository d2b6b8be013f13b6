//! Fast scanning of compact JSON text, the shape every writer of a session log produces.
//!
//! Decoding a long log is dominated by skipping over payload text. These scanners skip strings
//! sixteen bytes at a time instead of byte by byte, and they only ever answer for a strict subset of JSON:
//! no whitespace between tokens, no surrogate escapes, at most [`MAX_DEPTH`] levels of nesting.
//! Outside that subset they return `None` and the caller falls back to `serde_json`, which
//! decides. So a scan that succeeds always agrees with `serde_json`, and one that gives up costs
//! only a second pass.

/// The deepest nesting a scan follows before it leaves the text to `serde_json`.
pub(crate) const MAX_DEPTH: usize = 64;

/// Skips the string whose opening quote is at `at`, validating it; returns the index just past
/// the closing quote.
pub(crate) fn skip_string(bytes: &[u8], at: usize) -> Option<usize> {
    debug_assert_eq!(bytes.get(at), Some(&b'"'));
    let mut idx = at + 1;
    loop {
        idx += find_special(bytes.get(idx..)?)?;
        match bytes[idx] {
            b'"' => return Some(idx + 1),
            b'\\' => {}
            // A control character, which JSON strings must escape.
            _ => return None,
        }
        idx += match bytes.get(idx + 1)? {
            b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => 2,
            b'u' => {
                let hex = bytes.get(idx + 2..idx + 6)?;
                if !hex.iter().all(u8::is_ascii_hexdigit) {
                    return None;
                }
                // Surrogates (`\uD800`–`\uDFFF`) are left to serde_json's pairing rules.
                if matches!(hex[0], b'd' | b'D') && matches!(hex[1], b'8'..=b'9' | b'a'..=b'f' | b'A'..=b'F') {
                    return None;
                }
                6
            }
            _ => return None,
        };
    }
}

/// Whether a string byte needs attention: a quote, a backslash or a control character.
fn is_special(byte: u8) -> bool {
    (byte == b'"') | (byte == b'\\') | (byte < 0x20)
}

/// The offset of the first special byte in `text`, eight bytes at a time: each word is tested
/// for a quote, a backslash or a control byte with the classic "has a zero byte" and "has a
/// byte less than n" bit tricks. Their lowest flagged byte is always a real hit (a borrow can
/// only flag bytes above one), so the lowest flag of the three is the first special byte.
fn find_special(text: &[u8]) -> Option<usize> {
    const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
    const HIGHS: u64 = u64::from_ne_bytes([0x80; 8]);
    let zero_byte = |word: u64| word.wrapping_sub(ONES) & !word;
    let (words, rest) = text.as_chunks::<8>();
    let mut offset = 0;
    for word in words {
        let word = u64::from_le_bytes(*word);
        let flags = (zero_byte(word ^ (ONES * u64::from(b'"')))
            | zero_byte(word ^ (ONES * u64::from(b'\\')))
            | (word.wrapping_sub(ONES * 0x20) & !word))
            & HIGHS;
        if flags != 0 {
            return Some(offset + (flags.trailing_zeros() / 8) as usize);
        }
        offset += 8;
    }
    rest.iter().position(|byte| is_special(*byte)).map(|idx| offset + idx)
}

/// Skips the number starting at `at` (`-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?`).
pub(crate) fn skip_number(bytes: &[u8], at: usize) -> Option<usize> {
    let digits = |mut idx: usize| {
        let start = idx;
        while bytes.get(idx).is_some_and(u8::is_ascii_digit) {
            idx += 1;
        }
        (idx > start).then_some(idx)
    };
    let mut idx = at + usize::from(bytes.get(at) == Some(&b'-'));
    idx = match bytes.get(idx)? {
        b'0' => idx + 1,
        b'1'..=b'9' => digits(idx)?,
        _ => return None,
    };
    if bytes.get(idx) == Some(&b'.') {
        idx = digits(idx + 1)?;
    }
    if matches!(bytes.get(idx), Some(b'e' | b'E')) {
        idx += 1;
        if matches!(bytes.get(idx), Some(b'+' | b'-')) {
            idx += 1;
        }
        idx = digits(idx)?;
    }
    Some(idx)
}

/// Skips one JSON value starting at `at`, validating it; returns the index just past it.
pub(crate) fn skip_value(bytes: &[u8], at: usize) -> Option<usize> {
    // One bit per open container: set for an object.
    let mut objects: u64 = 0;
    let mut depth = 0;
    let mut idx = at;
    loop {
        // A value starts at `idx`.
        idx = match *bytes.get(idx)? {
            b'"' => skip_string(bytes, idx)?,
            b'{' | b'[' if depth == MAX_DEPTH => return None,
            b'{' if bytes.get(idx + 1) == Some(&b'}') => idx + 2,
            b'[' if bytes.get(idx + 1) == Some(&b']') => idx + 2,
            b'{' => {
                objects |= 1 << depth;
                depth += 1;
                idx = skip_key(bytes, idx + 1)?;
                continue;
            }
            b'[' => {
                objects &= !(1 << depth);
                depth += 1;
                idx += 1;
                continue;
            }
            b't' => literal(bytes, idx, b"true")?,
            b'f' => literal(bytes, idx, b"false")?,
            b'n' => literal(bytes, idx, b"null")?,
            _ => skip_number(bytes, idx)?,
        };
        // After a value: a separator, or the ends of containers.
        loop {
            if depth == 0 {
                return Some(idx);
            }
            let in_object = objects & (1 << (depth - 1)) != 0;
            match (*bytes.get(idx)?, in_object) {
                (b',', true) => {
                    idx = skip_key(bytes, idx + 1)?;
                    break;
                }
                (b',', false) => {
                    idx += 1;
                    break;
                }
                (b'}', true) | (b']', false) => {
                    depth -= 1;
                    idx += 1;
                }
                _ => return None,
            }
        }
    }
}

/// Skips `"key":` starting at `at`; returns the index of the value.
fn skip_key(bytes: &[u8], at: usize) -> Option<usize> {
    if bytes.get(at) != Some(&b'"') {
        return None;
    }
    let end = skip_string(bytes, at)?;
    (bytes.get(end) == Some(&b':')).then_some(end + 1)
}

fn literal(bytes: &[u8], at: usize, word: &[u8]) -> Option<usize> {
    bytes.get(at..at + word.len()).filter(|found| *found == word).map(|_| at + word.len())
}

/// Whether `text` is exactly one JSON value in the fast subset.
#[cfg(test)]
pub(crate) fn is_compact_value(text: &str) -> bool {
    skip_value(text.as_bytes(), 0) == Some(text.len())
}

/// A cursor over JSON text for checks that read a few fields in one pass: the caller enters the
/// containers it cares about and skips every other value. Every step validates what it passes
/// (skipped values with [`skip_value`], separators and keys strictly), so a walk that reaches the
/// end of a value has also checked its syntax. Keys must be free of escapes; any token outside
/// the fast subset (whitespace included) makes a step return `None`, and the caller falls back
/// to a full parse.
pub(crate) struct Walker<'a> {
    text: &'a str,
    idx: usize,
    /// Just inside a container: no separator before the next member or element.
    fresh: bool,
}

impl<'a> Walker<'a> {
    pub(crate) fn new(text: &'a str) -> Walker<'a> {
        Walker { text, idx: 0, fresh: false }
    }

    /// The offset of the cursor in the text.
    pub(crate) fn position(&self) -> usize {
        self.idx
    }

    fn peek(&self) -> Option<u8> {
        self.text.as_bytes().get(self.idx).copied()
    }

    /// Enters the object at the cursor; `None` if the value there is not an object.
    pub(crate) fn enter_object(&mut self) -> Option<()> {
        (self.peek()? == b'{').then(|| {
            self.idx += 1;
            self.fresh = true;
        })
    }

    /// Enters the array at the cursor; `None` if the value there is not an array.
    pub(crate) fn enter_array(&mut self) -> Option<()> {
        (self.peek()? == b'[').then(|| {
            self.idx += 1;
            self.fresh = true;
        })
    }

    /// Steps to the next member of the object being walked and returns its key, leaving the
    /// cursor on the value; `Some(None)` when the object ends (the cursor moves past it).
    pub(crate) fn next_key(&mut self) -> Option<Option<&'a str>> {
        if self.peek()? == b'}' {
            self.idx += 1;
            self.fresh = false;
            return Some(None);
        }
        self.separator()?;
        let bytes = self.text.as_bytes();
        if self.peek()? != b'"' {
            return None;
        }
        let key_start = self.idx + 1;
        let key_end = key_start + find_special(&bytes[key_start..])?;
        if bytes[key_end] != b'"' || bytes.get(key_end + 1) != Some(&b':') {
            return None;
        }
        self.idx = key_end + 2;
        Some(Some(&self.text[key_start..key_end]))
    }

    /// Steps to the next element of the array being walked: `Some(true)` with the cursor on it,
    /// `Some(false)` when the array ends (the cursor moves past it).
    pub(crate) fn next_element(&mut self) -> Option<bool> {
        if self.peek()? == b']' {
            self.idx += 1;
            self.fresh = false;
            return Some(false);
        }
        self.separator()?;
        Some(true)
    }

    /// Consumes the `,` before a member or element that is not a container's first.
    fn separator(&mut self) -> Option<()> {
        if !std::mem::take(&mut self.fresh) {
            if self.peek()? != b',' {
                return None;
            }
            self.idx += 1;
        }
        Some(())
    }

    /// Skips the value at the cursor and returns its text.
    pub(crate) fn value(&mut self) -> Option<&'a str> {
        let start = self.idx;
        self.idx = skip_value(self.text.as_bytes(), start)?;
        self.fresh = false;
        Some(&self.text[start..self.idx])
    }

    /// Steps over the value at the cursor. When `known` starts at the cursor, it is that value as
    /// an earlier walk of this same text delimited it, and the cursor jumps to its end unscanned.
    pub(crate) fn skip_known(&mut self, known: Option<&std::ops::Range<usize>>) -> Option<()> {
        match known {
            Some(known) if known.start == self.idx && known.end <= self.text.len() => {
                self.idx = known.end;
                self.fresh = false;
                Some(())
            }
            _ => self.value().map(drop),
        }
    }
}

/// The contents of a compact string token without escapes (`"abc"` gives `abc`); `None` for any
/// other token, escaped strings included.
pub(crate) fn plain_str(token: &str) -> Option<&str> {
    let inner = token.strip_prefix('"')?.strip_suffix('"')?;
    (!inner.contains('\\')).then_some(inner)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde::de::IgnoredAny;
    use serde_json::Value;

    use super::*;

    #[test]
    fn a_known_value_is_stepped_over_and_any_other_range_is_scanned() {
        let text = r#"{"a":[1,"]"],"b":2}"#;
        let value_of_a = 5..12;
        assert_eq!(&text[value_of_a.clone()], r#"[1,"]"]"#);
        for known in [Some(value_of_a), Some(0..3), Some(5..999), None] {
            let mut walker = Walker::new(text);
            walker.enter_object().unwrap();
            assert_eq!(walker.next_key(), Some(Some("a")));
            walker.skip_known(known.as_ref()).unwrap();
            assert_eq!(walker.position(), 12, "{known:?}");
            assert_eq!(walker.next_key(), Some(Some("b")), "{known:?}");
        }
    }

    fn serde_accepts(text: &str) -> bool {
        serde_json::from_str::<IgnoredAny>(text).is_ok()
    }

    #[test]
    fn compact_values() {
        for text in [
            "0",
            "-0.5e+10",
            "1E3",
            "true",
            "null",
            r#""a\"b\\c\/\b\f\n\r\t\u00e9""#,
            r#"{"a":[1,{"b":[]},{}],"c":"é"}"#,
            "[[[[]]]]",
            r#"{"":""}"#,
        ] {
            assert!(is_compact_value(text), "{text}");
            assert!(serde_accepts(text), "{text}");
        }
    }

    #[test]
    fn gives_up_outside_the_subset_or_on_bad_text() {
        for text in [
            "",
            " 1",
            "[1, 2]",
            r#"{"a": 1}"#,
            "01",
            "1.",
            "-",
            "1e",
            "[1,]",
            "{\"a\"}",
            "{\"a\":1,}",
            "[1}",
            "{\"a\":1]",
            "\"\\x\"",
            "\"\\ud800\"",
            "\"a\u{1}b\"",
            "tru",
            "nul",
            "[",
            "\"abc",
            "NaN",
        ] {
            assert!(!is_compact_value(text), "{text:?}");
        }
        let deep = format!("{}{}", "[".repeat(MAX_DEPTH + 1), "]".repeat(MAX_DEPTH + 1));
        assert!(!is_compact_value(&deep));
        let limit = format!("{}{}", "[".repeat(MAX_DEPTH), "]".repeat(MAX_DEPTH));
        assert!(is_compact_value(&limit));
    }

    #[test]
    fn walking_objects_and_arrays() {
        let mut walker = Walker::new(r#"{"a":1,"b":{"c":[2,{}]},"d":"x"}"#);
        walker.enter_object().unwrap();
        assert_eq!(walker.next_key(), Some(Some("a")));
        assert_eq!(walker.value(), Some("1"));
        assert_eq!(walker.next_key(), Some(Some("b")));
        walker.enter_object().unwrap();
        assert_eq!(walker.next_key(), Some(Some("c")));
        walker.enter_array().unwrap();
        assert_eq!(walker.next_element(), Some(true));
        assert_eq!(walker.value(), Some("2"));
        assert_eq!(walker.next_element(), Some(true));
        assert_eq!(walker.value(), Some("{}"));
        assert_eq!(walker.next_element(), Some(false));
        assert_eq!(walker.next_key(), Some(None));
        assert_eq!(walker.next_key(), Some(Some("d")));
        assert_eq!(walker.value(), Some("\"x\""));
        assert_eq!(walker.next_key(), Some(None));

        let mut empty = Walker::new("{}");
        empty.enter_object().unwrap();
        assert_eq!(empty.next_key(), Some(None));
        assert!(Walker::new("[1]").enter_object().is_none());
        let mut escaped = Walker::new(r#"{"a\"":1}"#);
        escaped.enter_object().unwrap();
        assert_eq!(escaped.next_key(), None);
        let mut spaced = Walker::new(r#"{"a": 1}"#);
        spaced.enter_object().unwrap();
        assert_eq!(spaced.next_key(), Some(Some("a")));
        assert_eq!(spaced.value(), None);
        assert_eq!(plain_str("\"ab\""), Some("ab"));
        assert_eq!(plain_str("\"a\\nb\""), None);
        assert_eq!(plain_str("1"), None);
    }

    fn json_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            (-1e300f64..1e300).prop_map(Value::from),
            "\\PC{0,12}".prop_map(Value::String),
            any::<String>().prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 48, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                prop::collection::btree_map("\\PC{0,6}", inner, 0..6)
                    .prop_map(|map| Value::Object(map.into_iter().collect())),
            ]
        })
    }

    proptest! {
        /// The word-at-a-time search finds exactly the first special byte.
        #[test]
        fn find_special_is_exact(bytes in prop::collection::vec(prop_oneof![any::<u8>(), Just(b'"'), Just(b'\\'), Just(0x1f), Just(0x20), Just(0x7f), Just(0x80)], 0..40)) {
            prop_assert_eq!(find_special(&bytes), bytes.iter().position(|byte| is_special(*byte)));
        }

        /// Everything serde_json writes compactly is in the fast subset, apart from
        /// surrogate escapes it never writes.
        #[test]
        fn serde_output_is_accepted(value in json_value()) {
            let text = serde_json::to_string(&value).unwrap();
            prop_assert!(is_compact_value(&text), "{}", text);
        }

        /// The scan never accepts what serde_json rejects, on any bytes.
        #[test]
        fn never_more_lenient_than_serde(text in "[\\[\\]{}\",:0-9eE.+\\-a-z\\\\ \u{1}é]{0,24}") {
            if is_compact_value(&text) {
                prop_assert!(serde_accepts(&text), "{:?}", text);
            }
        }

        /// Mutating valid text: whatever the scan accepts, serde_json accepts too.
        #[test]
        fn mutations_stay_sound(value in json_value(), at in any::<prop::sample::Index>(), byte in any::<u8>()) {
            let mut bytes = serde_json::to_vec(&value).unwrap();
            let at = at.index(bytes.len());
            bytes[at] = byte;
            if let Ok(text) = std::str::from_utf8(&bytes) && is_compact_value(text) {
                prop_assert!(serde_accepts(text), "{:?}", text);
            }
        }
    }
}
