//! The lossless JSON domain (reference 01 §1.6) and `JsonData`, an event payload kept as
//! validated JSON text.
//!
//! Payloads are stored as text rather than as a parsed tree: reading a log then costs one
//! validating scan per line, writing it costs a byte copy, and only the consumers that look
//! inside a payload (a projection unit, a repair scan) pay for parsing it.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer, de::DeserializeOwned};
use serde_json::{Value, value::RawValue};

use smol_str::SmolStr;

use crate::messages::MessageKind;

/// The largest integer JSON peers in this ecosystem represent exactly (`Number.MAX_SAFE_INTEGER`).
pub const MAX_SAFE_INTEGER: u64 = (1 << 53) - 1;

/// Why a value is outside the lossless JSON domain.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LosslessError {
    /// A number is `-0` (or `-0.0`, `-0e5`, ...), which a JSON peer reads back as `0`.
    #[error("negative zero is not losslessly JSON-serializable")]
    NegativeZero,
    /// The text is not one well-formed JSON value, a number in it overflows to an infinity, or a
    /// value failed to serialize; the string says which, in `serde_json`'s words or ours.
    #[error("invalid JSON text: {0}")]
    InvalidText(String),
}

/// Checks that `value` survives a JSON round trip unchanged. `serde_json::Value` already
/// excludes NaN, infinities, undefined and cycles; what is left to reject is `-0`.
pub fn check_lossless(value: &Value) -> Result<(), LosslessError> {
    // Iterative, so a deeply nested payload cannot overflow the stack.
    let mut stack = vec![value];
    while let Some(value) = stack.pop() {
        match value {
            Value::Number(number) => {
                if let Some(float) = number.as_f64()
                    && float == 0.0
                    && float.is_sign_negative()
                    && !number.is_i64()
                    && !number.is_u64()
                {
                    return Err(LosslessError::NegativeZero);
                }
            }
            Value::Array(items) => stack.extend(items.iter()),
            Value::Object(map) => stack.extend(map.values()),
            Value::Null | Value::Bool(_) | Value::String(_) => {}
        }
    }
    Ok(())
}

/// Checks that already well-formed JSON `text` stays in the lossless domain without building a
/// tree: no number is `-0` and no number overflows to an infinity when parsed. One pass over the
/// bytes; strings are skipped.
pub fn check_lossless_text(text: &str) -> Result<(), LosslessError> {
    let bytes = text.as_bytes();
    let mut idx = 0;
    while idx < bytes.len() {
        match bytes[idx] {
            b'"' => {
                idx += 1;
                while idx < bytes.len() {
                    match bytes[idx] {
                        b'\\' => idx += 2,
                        b'"' => break,
                        _ => idx += 1,
                    }
                }
                idx += 1;
            }
            b'-' | b'0'..=b'9' => {
                let start = idx;
                while idx < bytes.len() && matches!(bytes[idx], b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9') {
                    idx += 1;
                }
                check_number_lexeme(&text[start..idx])?;
            }
            _ => idx += 1,
        }
    }
    Ok(())
}

fn check_number_lexeme(lexeme: &str) -> Result<(), LosslessError> {
    let mantissa = lexeme.split(['e', 'E']).next().unwrap_or(lexeme);
    if lexeme.starts_with('-') && mantissa.bytes().all(|byte| matches!(byte, b'-' | b'.' | b'0')) {
        return Err(LosslessError::NegativeZero);
    }
    // Short plain integers cannot overflow; only parse what might.
    if lexeme.len() > 15 || lexeme.contains(['e', 'E']) {
        let parsed: f64 = lexeme.parse().map_err(|_| LosslessError::InvalidText(format!("invalid number {lexeme}")))?;
        if parsed.is_infinite() {
            return Err(LosslessError::InvalidText(format!("number {lexeme} is out of range")));
        }
    }
    Ok(())
}

/// Returns `n` as a safe non-negative integer, if it is one.
pub fn as_safe_u64(value: &Value) -> Option<u64> {
    let number = value.as_number()?;
    if let Some(n) = number.as_u64() {
        return (n <= MAX_SAFE_INTEGER).then_some(n);
    }
    // `1.0` is an integer to a JSON peer; `-0` is not accepted as one.
    let float = number.as_f64()?;
    (float.fract() == 0.0 && float >= 0.0 && !float.is_sign_negative() && float <= MAX_SAFE_INTEGER as f64)
        .then_some(float as u64)
}

/// Returns `n` as a safe integer (negative allowed), if it is one.
pub fn as_safe_i64(value: &Value) -> Option<i64> {
    let number = value.as_number()?;
    let limit = MAX_SAFE_INTEGER as i64;
    if let Some(n) = number.as_i64() {
        return (-limit..=limit).contains(&n).then_some(n);
    }
    if number.is_u64() {
        return None;
    }
    let float = number.as_f64()?;
    (float.fract() == 0.0 && float.abs() <= MAX_SAFE_INTEGER as f64 && !(float == 0.0 && float.is_sign_negative()))
        .then_some(float as i64)
}

/// An event payload: syntactically valid JSON text in the lossless domain.
///
/// The text is owned as a plain string whose validity is this type's invariant: every
/// constructor checks it, with `serde_json` or with the crate's fast scanner (the one behind
/// [`SessionEvent::from_json_line`](crate::SessionEvent::from_json_line)).
/// Short payloads (`{"turn":3,"step":1}`) are stored inline, so decoding them allocates
/// nothing; longer ones are shared, so a clone is a reference count.
#[derive(Clone)]
pub struct JsonData {
    text: SmolStr,
    /// Set by the log decoder when the text was checked, in the same pass that decoded it, to be
    /// a well-formed message; the shape check then has nothing left to do.
    verified: Option<Verified>,
}

/// What the log decoder proved about a payload in the pass that decoded it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Verified {
    /// The payload is a well-formed message of this kind.
    pub(crate) kind: MessageKind,
    /// For a tool result: the byte range of `message.content[0].content` in the text, which the
    /// surface's shape hash masks and can step over.
    pub(crate) masked: Option<(u32, u32)>,
}

impl JsonData {
    /// Serializes `value`, rejecting values outside the lossless domain.
    pub fn from_value(value: &Value) -> Result<JsonData, LosslessError> {
        check_lossless(value)?;
        let text = serde_json::to_string(value).map_err(|err| LosslessError::InvalidText(err.to_string()))?;
        Ok(JsonData::new(SmolStr::from(text)))
    }

    /// Serializes any serializable payload, rejecting values outside the lossless domain.
    pub fn from_serialize<T: Serialize + ?Sized>(value: &T) -> Result<JsonData, LosslessError> {
        let value = serde_json::to_value(value).map_err(|err| LosslessError::InvalidText(err.to_string()))?;
        JsonData::from_value(&value)
    }

    /// Wraps JSON text after checking that it is one well-formed value in the lossless domain
    /// (no `-0`, no number that overflows to an infinity).
    pub fn from_text(text: impl Into<String>) -> Result<JsonData, LosslessError> {
        let raw = RawValue::from_string(text.into()).map_err(|err| LosslessError::InvalidText(err.to_string()))?;
        check_lossless_text(raw.get())?;
        Ok(JsonData::new(SmolStr::new(raw.get())))
    }

    /// Wraps an already validated raw value (used by decoders). Only the syntax is guaranteed; a
    /// `Session` re-checks the lossless domain of every event it is seeded with.
    pub fn from_raw(raw: Box<RawValue>) -> JsonData {
        JsonData::new(SmolStr::from(Box::<str>::from(raw)))
    }

    fn new(text: SmolStr) -> JsonData {
        JsonData { text, verified: None }
    }

    /// Wraps `text` that [`crate::jsontext`] validated; decoders reach it through
    /// [`SessionEvent::from_json_line`](crate::SessionEvent::from_json_line).
    pub(crate) fn from_scanned(text: &str, verified: Option<Verified>) -> JsonData {
        debug_assert!(serde_json::from_str::<serde::de::IgnoredAny>(text).is_ok());
        debug_assert!(
            verified.and_then(|verified| verified.masked).is_none_or(|(start, end)| {
                start <= end && text.get(start as usize..end as usize).is_some_and(|masked| masked.starts_with('['))
            }),
            "a masked range is a content array in the text"
        );
        JsonData { text: SmolStr::new(text), verified }
    }

    /// The message kind this payload was verified to be well-formed for, if any.
    pub(crate) fn verified_message(&self) -> Option<MessageKind> {
        self.verified.map(|verified| verified.kind)
    }

    /// Where a verified tool result's masked content lies in the text, if the decoder found it.
    pub(crate) fn masked_content(&self) -> Option<std::ops::Range<usize>> {
        let (start, end) = self.verified?.masked?;
        Some(start as usize..end as usize)
    }

    /// The empty object, `{}`.
    pub fn empty_object() -> JsonData {
        JsonData::new(SmolStr::new_static("{}"))
    }

    /// The JSON `null`.
    pub fn null() -> JsonData {
        JsonData::new(SmolStr::new_static("null"))
    }

    /// A copy that shares no storage with `self` (a clone shares a long payload's text).
    pub fn to_unshared(&self) -> JsonData {
        JsonData { text: SmolStr::new(self.as_str()), verified: self.verified }
    }

    /// The payload's JSON text: compact when it was serialized here, otherwise the text it was
    /// wrapped or decoded from, without surrounding whitespace.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Parses the payload as a tree. Text decoded from storage is checked for syntax only, so it
    /// may hold a number no tree can represent (`1e400`): that is an error, never a panic.
    pub fn to_value(&self) -> Result<Value, serde_json::Error> {
        serde_json::from_str(&self.text)
    }

    /// Parses the payload into a typed view.
    pub fn parse<T: DeserializeOwned>(&self) -> Result<T, serde_json::Error> {
        serde_json::from_str(&self.text)
    }

    /// Parses the payload into a typed view that may borrow from the text.
    pub fn parse_borrowed<'a, T: Deserialize<'a>>(&'a self) -> Result<T, serde_json::Error> {
        serde_json::from_str(&self.text)
    }

    /// Whether the payload is exactly the text `null`.
    pub fn is_null(&self) -> bool {
        self.as_str() == "null"
    }
}

/// Structural equality: object key order does not matter (reference 01 §8.3).
impl PartialEq for JsonData {
    fn eq(&self, other: &JsonData) -> bool {
        if self.as_str() == other.as_str() {
            return true;
        }
        // Text built by `from_raw` may hold a number no tree can represent; it equals nothing else.
        match (serde_json::from_str::<Value>(self.as_str()), serde_json::from_str::<Value>(other.as_str())) {
            (Ok(left), Ok(right)) => left == right,
            _ => false,
        }
    }
}

impl Eq for JsonData {}

impl fmt::Debug for JsonData {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Display for JsonData {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The name under which `serde_json` serializes its `RawValue`: a struct of this name with one
/// field of this name holding the text, which its serializers write verbatim (and its `Value`
/// serializer parses). `RawValue` itself only comes from a validating scan of the text.
const RAW_VALUE_TOKEN: &str = "$serde_json::private::RawValue";

/// Serializes the text verbatim, as `serde_json`'s `RawValue` does, without scanning it again:
/// a `JsonData` holds valid JSON text by construction.
/// `tests::serializes_as_a_raw_value_does` holds this to `RawValue`'s own output.
impl Serialize for JsonData {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut raw = serializer.serialize_struct(RAW_VALUE_TOKEN, 1)?;
        raw.serialize_field(RAW_VALUE_TOKEN, self.text.as_str())?;
        raw.end()
    }
}

impl<'de> Deserialize<'de> for JsonData {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<JsonData, D::Error> {
        Box::<RawValue>::deserialize(deserializer).map(JsonData::from_raw)
    }
}

impl TryFrom<JsonData> for Value {
    type Error = serde_json::Error;

    fn try_from(data: JsonData) -> Result<Value, serde_json::Error> {
        data.to_value()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn negative_zero_is_rejected_anywhere() {
        let value: Value = serde_json::from_str(r#"{"a":[1,{"b":-0.0}]}"#).unwrap();
        assert_eq!(check_lossless(&value), Err(LosslessError::NegativeZero));
        assert!(check_lossless(&json!({"a": [0, 0.5, -1]})).is_ok());
    }

    #[test]
    fn lossless_text() {
        for ok in [r#"{"a":[0,0.5,-1,"-0"],"b":"\"-0"}"#, "-0.5", "1e300", "[-10,-0.01]", r#""-0""#] {
            assert_eq!(check_lossless_text(ok), Ok(()), "{ok}");
        }
        for bad in ["-0", "[1,-0.0]", r#"{"a":-0e5}"#, r#"{"a":"x","b":-0.000}"#] {
            assert_eq!(check_lossless_text(bad), Err(LosslessError::NegativeZero), "{bad}");
        }
        assert!(matches!(check_lossless_text("[1e400]"), Err(LosslessError::InvalidText(_))));
        assert_eq!(JsonData::from_text("[-0]").unwrap_err(), LosslessError::NegativeZero);
        assert!(JsonData::from_text("1e400").is_err());
        assert!(JsonData::from_text("[1,").is_err());
    }

    #[test]
    fn safe_integers() {
        assert_eq!(as_safe_u64(&json!(5)), Some(5));
        assert_eq!(as_safe_u64(&json!(5.0)), Some(5));
        assert_eq!(as_safe_u64(&json!(5.5)), None);
        assert_eq!(as_safe_u64(&json!(-1)), None);
        assert_eq!(as_safe_u64(&json!(MAX_SAFE_INTEGER + 1)), None);
        assert_eq!(as_safe_u64(&json!("5")), None);
        let negative_zero: Value = serde_json::from_str("-0.0").unwrap();
        assert_eq!(as_safe_u64(&negative_zero), None);
        assert_eq!(as_safe_i64(&json!(-7)), Some(-7));
        assert_eq!(as_safe_i64(&negative_zero), None);
    }

    #[test]
    fn serializes_as_a_raw_value_does() {
        let texts = [r#"{"a":[1,2.5,"x\"y"],"b":{"c":null}}"#, r#"{ "spaced" : [ 1 , true ] }"#, "-3", r#""s""#, "[]"];
        for text in texts {
            let data = JsonData::from_raw(serde_json::from_str(text).unwrap());
            let raw: &RawValue = serde_json::from_str(text).unwrap();
            let wrapped = json!({"k": 1});
            assert_eq!(serde_json::to_string(&data).unwrap(), serde_json::to_string(raw).unwrap(), "{text}");
            assert_eq!(serde_json::to_string_pretty(&[&data]).unwrap(), serde_json::to_string_pretty(&[raw]).unwrap());
            assert_eq!(serde_json::to_value(&data).unwrap(), serde_json::to_value(raw).unwrap(), "{text}");
            assert_eq!(
                serde_json::to_string(&(&data, &wrapped)).unwrap(),
                serde_json::to_string(&(raw, &wrapped)).unwrap()
            );
        }
        let out_of_range = JsonData::from_raw(serde_json::from_str("[1e400]").unwrap());
        assert!(serde_json::to_value(&out_of_range).is_err());
        assert_eq!(serde_json::to_string(&out_of_range).unwrap(), "[1e400]");
    }

    #[test]
    fn structural_equality_ignores_key_order() {
        let a = JsonData::from_text(r#"{"a":1,"b":2}"#).unwrap();
        let b = JsonData::from_text(r#"{"b":2,"a":1}"#).unwrap();
        assert_eq!(a, b);
        assert_ne!(a, JsonData::from_text(r#"{"a":1}"#).unwrap());
    }
}

#[cfg(test)]
mod out_of_range_tests {
    use super::*;

    #[test]
    fn a_number_no_tree_can_hold_is_an_error_not_a_panic() {
        let raw: Box<RawValue> = serde_json::from_str(r#"{"label":1e400}"#).unwrap();
        let data = JsonData::from_raw(raw);
        assert!(data.to_value().is_err());
        assert_ne!(data, JsonData::from_text(r#"{"label":1}"#).unwrap());
    }
}
