//! Structural hashing of JSON payloads: equal structures hash equal whatever their key order,
//! computed in one streaming pass that allocates nothing.
//!
//! The surface's content-only replace rule compares `tool/result` payloads with their
//! rewritable content masked out. Hashing that shape while the payload is decoded lets a reader
//! check the rule without keeping past payloads and without parsing the (large) content at all:
//! it is skipped as it streams past.

use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

use crate::JsonData;

const NULL: u64 = 0x6e75_6c6c;
const OBJECT: u64 = 0x6f62_6a65_6374;
const ARRAY: u64 = 0x0061_7272_6179;

/// SplitMix64's finalizer: a cheap, well-distributed 64-bit mix.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn hash_bytes(tag: u64, bytes: &[u8]) -> u64 {
    // FNV-1a, then mixed: payload strings outside the masked content are short.
    let mut hash = 0xcbf2_9ce4_8422_2325 ^ tag;
    for &byte in bytes {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    mix(hash)
}

fn entry_hash(key: &str, value: u64) -> u64 {
    mix(hash_bytes(1, key.as_bytes()) ^ value.rotate_left(17))
}

fn object_hash(entries_sum: u64) -> u64 {
    mix(OBJECT ^ entries_sum)
}

fn array_push(state: u64, element: u64) -> u64 {
    mix(state.rotate_left(5) ^ element)
}

/// The structural hash of `data` with `message.content[0].content` masked (as `null`) and every
/// later content block dropped; `None` when `data` or `data.message` is not an object. Two
/// `tool/result` payloads differ only in rewritable content exactly when their hashes are equal
/// (up to a 2^-64 collision).
pub(crate) fn tool_result_shape_hash(data: &JsonData) -> Option<u64> {
    if let Some(hash) = fast::shape_hash(data.as_str(), data.masked_content()) {
        return hash;
    }
    let mut deserializer = serde_json::Deserializer::from_str(data.as_str());
    DataSeed.deserialize(&mut deserializer).ok().flatten()
}

/// The same hash computed with the compact-JSON walker, for payloads in the fast subset with
/// escape-free strings and integer numbers; `None` leaves the payload to the `serde_json`
/// visitors below, which define the hash.
mod fast {
    use std::ops::Range;

    use super::{ARRAY, NULL, array_push, entry_hash, hash_bytes, mix, object_hash};
    use crate::jsontext::{Walker, plain_str};

    /// The deepest value this walk hashes; deeper payloads go to `serde_json`, which stops at its
    /// own recursion limit (128). The walk recurses, so this also bounds its stack.
    const MAX_DEPTH: usize = 100;

    ///
    /// `masked`, when the decoder found it, is where the masked content lies in `text`: the walk
    /// steps over it instead of scanning it again.
    pub(super) fn shape_hash(text: &str, masked: Option<Range<usize>>) -> Option<Option<u64>> {
        if !text.starts_with('{') {
            // Not an object: no shape, whatever it is (the text is valid JSON).
            return Some(None);
        }
        let mut walker = Walker::new(text);
        walker.enter_object()?;
        let mut sum = 0u64;
        let mut message = None;
        while let Some(key) = walker.next_key()? {
            if key == "message" {
                message = message_hash(&mut walker, masked.as_ref())?;
                if let Some(hash) = message {
                    sum = sum.wrapping_add(entry_hash("message", hash));
                }
            } else {
                sum = sum.wrapping_add(entry_hash(key, plain(&mut walker, 2)?));
            }
        }
        Some(message.map(|_| object_hash(sum)))
    }

    /// Skips a value that the serde visitors read with `deserialize_any` and then ignore. A
    /// number there is parsed by `serde_json`, which may reject it (`1e400`), so the walk leaves
    /// it to them.
    fn skip_visited(walker: &mut Walker<'_>) -> Option<()> {
        let token = walker.value()?;
        (!token.starts_with(|first: char| first == '-' || first.is_ascii_digit())).then_some(())
    }

    /// `data.message`, as `MessageVisitor` hashes it.
    fn message_hash(walker: &mut Walker<'_>, masked: Option<&Range<usize>>) -> Option<Option<u64>> {
        if walker.enter_object().is_none() {
            skip_visited(walker)?;
            return Some(None);
        }
        let mut sum = 0u64;
        let mut first_block = 0u64;
        while let Some(key) = walker.next_key()? {
            if key == "content" {
                first_block = content_hash(walker, masked)?;
            } else {
                sum = sum.wrapping_add(entry_hash(key, plain(walker, 3)?));
            }
        }
        let block = object_hash(first_block.wrapping_add(entry_hash("content", mix(NULL))));
        let content = mix(array_push(ARRAY, block));
        Some(Some(object_hash(sum.wrapping_add(entry_hash("content", content)))))
    }

    /// `message.content`, as `ContentVisitor` hashes it: the first block's entries without its
    /// own `content`.
    fn content_hash(walker: &mut Walker<'_>, masked: Option<&Range<usize>>) -> Option<u64> {
        if walker.enter_array().is_none() {
            skip_visited(walker)?;
            return Some(0);
        }
        let mut first = 0u64;
        let mut index = 0;
        while walker.next_element()? {
            if index > 0 {
                // Later blocks are skipped unparsed, as `IgnoredAny` does.
                walker.value()?;
            } else if walker.enter_object().is_some() {
                while let Some(key) = walker.next_key()? {
                    if key == "content" {
                        walker.skip_known(masked)?;
                    } else {
                        first = first.wrapping_add(entry_hash(key, plain(walker, 5)?));
                    }
                }
            } else {
                skip_visited(walker)?;
            }
            index += 1;
        }
        Some(first)
    }

    /// Any value at nesting `depth` (the payload itself is 1), as `PlainVisitor` hashes it.
    fn plain(walker: &mut Walker<'_>, depth: usize) -> Option<u64> {
        if depth > MAX_DEPTH {
            return None;
        }
        if walker.enter_object().is_some() {
            let mut sum = 0u64;
            while let Some(key) = walker.next_key()? {
                sum = sum.wrapping_add(entry_hash(key, plain(walker, depth + 1)?));
            }
            return Some(object_hash(sum));
        }
        if walker.enter_array().is_some() {
            let mut state = ARRAY;
            while walker.next_element()? {
                state = array_push(state, plain(walker, depth + 1)?);
            }
            return Some(mix(state));
        }
        let token = walker.value()?;
        match token.as_bytes()[0] {
            b'"' => Some(hash_bytes(6, plain_str(token)?.as_bytes())),
            b'n' => Some(mix(NULL)),
            b't' => Some(mix(3)),
            b'f' => Some(mix(2)),
            _ => integer_hash(token),
        }
    }

    /// A plain integer as `serde_json` visits it (`u64`, or `i64` when negative); fractions,
    /// exponents, `-0` and long numbers are left to `serde_json`.
    fn integer_hash(token: &str) -> Option<u64> {
        let digits = token.strip_prefix('-').unwrap_or(token);
        if digits.is_empty() || digits.len() > 18 || !digits.bytes().all(|byte| byte.is_ascii_digit()) {
            return None;
        }
        let value: u64 = digits.parse().ok()?;
        if token.starts_with('-') {
            if value == 0 {
                return None;
            }
            let negative = -i64::try_from(value).ok()?;
            return Some(hash_bytes(4, &negative.to_le_bytes()));
        }
        Some(hash_bytes(3, &value.to_le_bytes()))
    }
}

/// Any value, hashed structurally.
struct PlainSeed;

impl<'de> DeserializeSeed<'de> for PlainSeed {
    type Value = u64;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<u64, D::Error> {
        deserializer.deserialize_any(PlainVisitor)
    }
}

struct PlainVisitor;

impl<'de> Visitor<'de> for PlainVisitor {
    type Value = u64;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_unit<E>(self) -> Result<u64, E> {
        Ok(mix(NULL))
    }

    fn visit_bool<E>(self, value: bool) -> Result<u64, E> {
        Ok(mix(2 + u64::from(value)))
    }

    fn visit_u64<E>(self, value: u64) -> Result<u64, E> {
        Ok(hash_bytes(3, &value.to_le_bytes()))
    }

    fn visit_i64<E>(self, value: i64) -> Result<u64, E> {
        Ok(hash_bytes(4, &value.to_le_bytes()))
    }

    fn visit_f64<E>(self, value: f64) -> Result<u64, E> {
        Ok(hash_bytes(5, &value.to_bits().to_le_bytes()))
    }

    fn visit_str<E>(self, value: &str) -> Result<u64, E> {
        Ok(hash_bytes(6, value.as_bytes()))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<u64, A::Error> {
        let mut state = ARRAY;
        while let Some(element) = seq.next_element_seed(PlainSeed)? {
            state = array_push(state, element);
        }
        Ok(mix(state))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<u64, A::Error> {
        let mut sum = 0u64;
        while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            let value = map.next_value_seed(PlainSeed)?;
            sum = sum.wrapping_add(entry_hash(&key, value));
        }
        Ok(object_hash(sum))
    }
}

/// Consumes any value and reports `None`: used where the shape requires an object.
fn skip_to_none<'de, A: SeqAccess<'de>>(mut seq: A) -> Result<Option<u64>, A::Error> {
    while seq.next_element::<IgnoredAny>()?.is_some() {}
    Ok(None)
}

/// Implements the scalar visits of a visitor whose value is `$value` for every non-container.
macro_rules! scalars_give {
    ($value:expr) => {
        fn visit_unit<E>(self) -> Result<Self::Value, E> {
            Ok($value)
        }
        fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
            Ok($value)
        }
        fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
            Ok($value)
        }
        fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
            Ok($value)
        }
        fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
            Ok($value)
        }
        fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
            Ok($value)
        }
    };
}

/// The payload: an object whose `message` is masked.
struct DataSeed;

impl<'de> DeserializeSeed<'de> for DataSeed {
    type Value = Option<u64>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Option<u64>, D::Error> {
        deserializer.deserialize_any(DataVisitor)
    }
}

struct DataVisitor;

impl<'de> Visitor<'de> for DataVisitor {
    type Value = Option<u64>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a tool/result payload")
    }

    scalars_give!(None);

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Option<u64>, A::Error> {
        skip_to_none(seq)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Option<u64>, A::Error> {
        let mut sum = 0u64;
        let mut message = None;
        while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            if key == "message" {
                message = map.next_value_seed(MessageSeed)?;
                if let Some(hash) = message {
                    sum = sum.wrapping_add(entry_hash("message", hash));
                }
            } else {
                let value = map.next_value_seed(PlainSeed)?;
                sum = sum.wrapping_add(entry_hash(&key, value));
            }
        }
        Ok(message.map(|_| object_hash(sum)))
    }
}

/// `data.message`: an object whose `content` becomes `[{...content[0], content: null}]`.
struct MessageSeed;

impl<'de> DeserializeSeed<'de> for MessageSeed {
    type Value = Option<u64>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Option<u64>, D::Error> {
        deserializer.deserialize_any(MessageVisitor)
    }
}

struct MessageVisitor;

impl<'de> Visitor<'de> for MessageVisitor {
    type Value = Option<u64>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a message object")
    }

    scalars_give!(None);

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Option<u64>, A::Error> {
        skip_to_none(seq)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Option<u64>, A::Error> {
        let mut sum = 0u64;
        let mut first_block = 0u64;
        while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            if key == "content" {
                first_block = map.next_value_seed(ContentSeed)?;
            } else {
                let value = map.next_value_seed(PlainSeed)?;
                sum = sum.wrapping_add(entry_hash(&key, value));
            }
        }
        let block = object_hash(first_block.wrapping_add(entry_hash("content", mix(NULL))));
        let content = mix(array_push(ARRAY, block));
        Ok(Some(object_hash(sum.wrapping_add(entry_hash("content", content)))))
    }
}

/// `message.content`: the entries sum of its first block without `content`; later blocks and
/// anything that is not an array of objects contribute nothing.
struct ContentSeed;

impl<'de> DeserializeSeed<'de> for ContentSeed {
    type Value = u64;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<u64, D::Error> {
        deserializer.deserialize_any(ContentVisitor)
    }
}

struct ContentVisitor;

impl<'de> Visitor<'de> for ContentVisitor {
    type Value = u64;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("message content")
    }

    scalars_give!(0);

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<u64, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(0)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<u64, A::Error> {
        let first = seq.next_element_seed(FirstBlockSeed)?.unwrap_or(0);
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(first)
    }
}

/// `content[0]`: the entries sum without its own `content`, which is skipped unparsed.
struct FirstBlockSeed;

impl<'de> DeserializeSeed<'de> for FirstBlockSeed {
    type Value = u64;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<u64, D::Error> {
        deserializer.deserialize_any(FirstBlockVisitor)
    }
}

struct FirstBlockVisitor;

impl<'de> Visitor<'de> for FirstBlockVisitor {
    type Value = u64;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a content block")
    }

    scalars_give!(0);

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<u64, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(0)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<u64, A::Error> {
        let mut sum = 0u64;
        while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            if key == "content" {
                map.next_value::<IgnoredAny>()?;
            } else {
                let value = map.next_value_seed(PlainSeed)?;
                sum = sum.wrapping_add(entry_hash(&key, value));
            }
        }
        Ok(sum)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hash(text: &str) -> Option<u64> {
        tool_result_shape_hash(&JsonData::from_text(text).unwrap())
    }

    #[test]
    fn masks_only_the_first_blocks_content() {
        let a = r#"{"turn":1,"message":{"id":"m","content":[{"type":"tool-result","content":[{"text":"a"}]}]}}"#;
        let b = r#"{"message":{"content":[{"content":"anything","type":"tool-result"}],"id":"m"},"turn":1}"#;
        assert_eq!(hash(a), hash(b));
        assert!(hash(a).is_some());
        let other_id = r#"{"turn":1,"message":{"id":"n","content":[{"type":"tool-result","content":[]}]}}"#;
        assert_ne!(hash(a), hash(other_id));
        let other_type = r#"{"turn":1,"message":{"id":"m","content":[{"type":"text","content":[]}]}}"#;
        assert_ne!(hash(a), hash(other_type));
        let more_blocks = r#"{"turn":1,"message":{"id":"m","content":[{"type":"tool-result","content":1},{"x":1}]}}"#;
        assert_eq!(hash(a), hash(more_blocks), "later blocks are dropped, as the reference does");
    }

    fn serde_hash(text: &str) -> Option<u64> {
        let mut deserializer = serde_json::Deserializer::from_str(text);
        DataSeed.deserialize(&mut deserializer).ok().flatten()
    }

    fn json_value() -> impl proptest::strategy::Strategy<Value = serde_json::Value> {
        use proptest::prelude::*;
        use serde_json::{Value, json};
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            Just(json!(-0.0)),
            (-1e6f64..1e6).prop_map(Value::from),
            "[a-z\"\\\\é]{0,4}".prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 32, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::btree_map(
                    prop_oneof![Just("content".to_owned()), Just("message".to_owned()), "[a-z\"]{1,3}"],
                    inner,
                    0..4
                )
                .prop_map(|map| Value::Object(map.into_iter().collect())),
            ]
        })
    }

    proptest::proptest! {
        /// The walker's hash is the serde visitors' hash wherever it gives one.
        #[test]
        fn the_fast_hash_agrees(value in json_value(), message in json_value(), content in json_value(), wrap in proptest::prelude::any::<bool>()) {
            let mut data = value;
            if wrap {
                let mut message = message;
                if let Some(object) = message.as_object_mut() {
                    object.insert("content".into(), serde_json::json!([content]));
                }
                data = serde_json::json!({"turn": 1, "message": message, "other": data});
            }
            let text = serde_json::to_string(&data).unwrap();
            if let Some(fast) = fast::shape_hash(&text, None) {
                proptest::prop_assert_eq!(fast, serde_hash(&text), "{}", text);
            }
        }
    }

    /// Found in review: a deeply nested field must not overflow the stack, and must hash as the
    /// serde visitors do (`None` past their recursion limit).
    #[test]
    fn deep_payloads_hash_like_serde() {
        for depth in [99, 100, 130, 200, 50_000] {
            let deep = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
            let text =
                format!(r#"{{"turn":1,"message":{{"id":"m","content":[{{"type":"tool-result"}}]}},"x":{deep}}}"#);
            let fast = fast::shape_hash(&text, None);
            assert!(fast.is_none() || fast == Some(serde_hash(&text)), "depth {depth}");
            assert_eq!(tool_result_shape_hash(&JsonData::from_text(text.clone()).unwrap()), serde_hash(&text));
        }
    }

    /// Found in review: numbers the serde visitors parse (and may reject) where they ignore the
    /// value are left to them.
    #[test]
    fn numbers_the_visitors_parse_are_left_to_them() {
        for text in [
            r#"{"message":{"content":1e400}}"#,
            r#"{"message":{"content":[1e400]}}"#,
            r#"{"message":{"content":9e007199254740992}}"#,
            r#"{"message":1e400,"message":{"content":[]}}"#,
            r#"{"message":{"content":7}}"#,
        ] {
            let raw: Box<serde_json::value::RawValue> = serde_json::from_str(text).unwrap();
            assert_eq!(tool_result_shape_hash(&JsonData::from_raw(raw)), serde_hash(text), "{text}");
            assert_eq!(fast::shape_hash(text, None), None, "{text}");
        }
    }

    #[test]
    fn well_formed_results_take_the_fast_hash() {
        let text = r#"{"turn":1,"step":2,"message":{"id":"t","role":"user","source":{"kind":"tool","callId":"c"},"content":[{"type":"tool-result","toolCallId":"c","isError":false,"content":[{"type":"text","text":"x"}]}]}}"#;
        assert_eq!(fast::shape_hash(text, None), Some(serde_hash(text)));
        assert!(serde_hash(text).is_some());
    }

    /// A tool result decoded from a log line carries where its masked content lies, and the hash
    /// that steps over it is the hash that scans it, whatever the content holds.
    #[test]
    fn a_decoded_tool_result_is_hashed_over_its_masked_content() {
        let contents = [
            r#"[{"type":"text","text":"x"}]"#,
            r#"[]"#,
            r#"[{"type":"text","text":"a \"quoted\" ] } text \\ with escapes \u00e9"}]"#,
            r#"[{"type":"text","text":"one"},{"type":"image","data":[1,2,{"deep":[[]]}]}]"#,
        ];
        for content in contents {
            let data = format!(
                r#"{{"turn":1,"step":2,"message":{{"id":"t","role":"user","source":{{"kind":"tool","callId":"c"}},"content":[{{"type":"tool-result","toolCallId":"c","isError":false,"content":{content}}}]}}}}"#
            );
            let line = format!(r#"{{"type":"tool/result","seq":0,"time":1,"data":{data},"surfaceOp":"append"}}"#);
            let event = crate::SessionEvent::from_json_line(&line).unwrap();
            let masked = event.data.masked_content().expect("the decoder records the masked content");
            assert_eq!(&event.data.as_str()[masked], content);
            assert_eq!(tool_result_shape_hash(&event.data), serde_hash(&data), "{content}");
            assert!(serde_hash(&data).is_some());
        }
    }

    #[test]
    fn requires_a_message_object() {
        assert_eq!(hash(r#"{"turn":1}"#), None);
        assert_eq!(hash(r#"{"message":null}"#), None);
        assert_eq!(hash(r#"[1]"#), None);
        assert_eq!(hash(r#"{"message":{}}"#), hash(r#"{"message":{"content":[]}}"#));
    }
}
