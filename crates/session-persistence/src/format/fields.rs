//! Borrowed probes over JSON objects: each member as raw text, checked without building a tree.

use std::{borrow::Cow, fmt, marker::PhantomData};

use serde::de::{self, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde_json::{Number, Value, value::RawValue};
use session_core::json::{as_safe_i64, as_safe_u64};

/// The members of one JSON object that a caller asked for, as raw JSON text.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Fields<'a, const N: usize> {
    pub(crate) values: [Option<&'a RawValue>; N],
    /// The object has a member outside the requested keys, or a requested key twice.
    pub(crate) extra: bool,
}

impl<'a, const N: usize> Fields<'a, N> {
    pub(crate) fn get(&self, index: usize) -> Option<&'a RawValue> {
        self.values[index]
    }

    /// True when exactly the members whose indices are in `present` exist, and nothing else.
    pub(crate) fn has_exactly(&self, present: &[usize]) -> bool {
        !self.extra && (0..N).all(|index| self.values[index].is_some() == present.contains(&index))
    }
}

struct FieldsVisitor<'k, const N: usize> {
    keys: &'k [&'static str; N],
}

impl<'de, const N: usize> Visitor<'de> for FieldsVisitor<'_, N> {
    type Value = Fields<'de, N>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Fields<'de, N>, A::Error> {
        let mut fields = Fields { values: [None; N], extra: false };
        while let Some(key) = map.next_key::<Cow<'de, str>>()? {
            match self.keys.iter().position(|candidate| *candidate == key) {
                Some(index) if fields.values[index].is_none() => {
                    fields.values[index] = Some(map.next_value::<&'de RawValue>()?);
                }
                _ => {
                    fields.extra = true;
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(fields)
    }
}

/// Parses `text` as one JSON object and picks out `keys`. Fails if `text` is not an object.
pub(crate) fn parse_fields<'a, const N: usize>(
    text: &'a str,
    keys: &[&'static str; N],
) -> Result<Fields<'a, N>, serde_json::Error> {
    let mut deserializer = serde_json::Deserializer::from_str(text);
    let fields = deserializer.deserialize_map(FieldsVisitor { keys })?;
    deserializer.end()?;
    Ok(fields)
}

/// Parses a JSON array into its elements as raw text.
pub(crate) fn parse_raw_array(text: &str) -> Option<Vec<&RawValue>> {
    struct ArrayVisitor<'a>(PhantomData<&'a ()>);
    impl<'de> Visitor<'de> for ArrayVisitor<'de> {
        type Value = Vec<&'de RawValue>;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a JSON array")
        }
        fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
            let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0));
            while let Some(item) = seq.next_element::<&'de RawValue>()? {
                items.push(item);
            }
            Ok(items)
        }
    }
    let mut deserializer = serde_json::Deserializer::from_str(text);
    let items = deserializer.deserialize_seq(ArrayVisitor(PhantomData)).ok()?;
    deserializer.end().ok()?;
    Some(items)
}

/// A raw JSON value is a number (the text of a valid value starts with `-` or a digit only then).
pub(crate) fn is_number(raw: &RawValue) -> bool {
    raw.get().as_bytes().first().is_some_and(|byte| *byte == b'-' || byte.is_ascii_digit())
}

pub(crate) fn is_string(raw: &RawValue) -> bool {
    raw.get().starts_with('"')
}

/// Whether a raw JSON value is the string `expected`, escapes included.
pub(crate) fn is_str(raw: &RawValue, expected: &str) -> bool {
    let text = raw.get();
    if let Some(inner) = text.strip_prefix('"').and_then(|rest| rest.strip_suffix('"'))
        && !inner.contains('\\')
    {
        return inner == expected;
    }
    is_string(raw) && serde_json::from_str::<String>(text).is_ok_and(|value| value == expected)
}

/// A raw JSON number that is a non-negative safe integer (`1.0` counts, `-0` does not).
pub(crate) fn safe_u64(raw: &RawValue) -> Option<u64> {
    if !is_number(raw) || raw.get().starts_with('-') {
        return None;
    }
    let number = serde_json::from_str::<Number>(raw.get()).ok()?;
    as_safe_u64(&Value::Number(number))
}

/// A raw JSON number that is a safe integer, negative allowed.
pub(crate) fn safe_i64(raw: &RawValue) -> Option<i64> {
    if !is_number(raw) {
        return None;
    }
    let number = serde_json::from_str::<Number>(raw.get()).ok()?;
    as_safe_i64(&Value::Number(number))
}
