//! Borrowed views of JSON payloads: fields kept as the raw slices they occupy, inspected only
//! when a rule needs them.
//!
//! Checks over a long log (message shapes, legacy shapes, repair scans) parse each payload into
//! a small struct of [`Field`]s instead of a tree, so they allocate almost nothing and skip the
//! fields they do not name.

use std::borrow::Cow;

use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;

/// A field that may be absent. JSON `null` is present (`Some("null")`), the way a JavaScript
/// `=== undefined` check sees it.
pub(crate) type Field<'a> = Option<&'a RawValue>;

/// `deserialize_with` helper that keeps a present `null` as `Some`.
pub(crate) fn present<'de: 'a, 'a, D: Deserializer<'de>>(deserializer: D) -> Result<Field<'a>, D::Error> {
    <&'a RawValue>::deserialize(deserializer).map(Some)
}

/// A string that borrows from the input unless it contains escapes.
#[derive(Deserialize)]
pub(crate) struct BorrowedStr<'a>(#[serde(borrow)] pub(crate) Cow<'a, str>);

/// The field as a string, if it is one.
pub(crate) fn string<'a>(field: Field<'a>) -> Option<Cow<'a, str>> {
    let raw = field?;
    if !raw.get().starts_with('"') {
        return None;
    }
    serde_json::from_str::<BorrowedStr<'a>>(raw.get()).ok().map(|text| text.0)
}

pub(crate) fn non_empty_string<'a>(field: Field<'a>) -> Option<Cow<'a, str>> {
    string(field).filter(|text| !text.is_empty())
}

pub(crate) fn is_object(field: Field<'_>) -> bool {
    field.is_some_and(|raw| raw.get().starts_with('{'))
}

pub(crate) fn is_array(field: Field<'_>) -> bool {
    field.is_some_and(|raw| raw.get().starts_with('['))
}

pub(crate) fn is_null(field: Field<'_>) -> bool {
    field.is_some_and(|raw| raw.get() == "null")
}

/// Parses an object field into a view; `None` for anything that is not an object.
pub(crate) fn object<'a, T: Deserialize<'a>>(field: Field<'a>) -> Option<T> {
    let raw = field?;
    if !raw.get().starts_with('{') {
        return None;
    }
    serde_json::from_str(raw.get()).ok()
}

/// Parses object text (an event payload) into a view; `None` for anything that is not an object.
pub(crate) fn object_text<'a, T: Deserialize<'a>>(text: &'a str) -> Option<T> {
    if !text.starts_with('{') {
        return None;
    }
    serde_json::from_str(text).ok()
}

/// The elements of an array field, borrowed; `None` for anything that is not an array.
pub(crate) fn array<'a>(field: Field<'a>) -> Option<Vec<&'a RawValue>> {
    let raw = field?;
    if !raw.get().starts_with('[') {
        return None;
    }
    serde_json::from_str(raw.get()).ok()
}

/// The entries of a JSON object in document order, borrowed.
pub(crate) struct Entries<'a>(pub(crate) Vec<(BorrowedStr<'a>, &'a RawValue)>);

impl<'de: 'a, 'a> Deserialize<'de> for Entries<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Entries<'a>, D::Error> {
        struct EntriesVisitor<'a>(std::marker::PhantomData<&'a ()>);

        impl<'de: 'a, 'a> serde::de::Visitor<'de> for EntriesVisitor<'a> {
            type Value = Entries<'a>;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object")
            }

            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Entries<'a>, A::Error> {
                let mut entries = Vec::new();
                while let Some(entry) = map.next_entry::<BorrowedStr<'a>, &'a RawValue>()? {
                    entries.push(entry);
                }
                Ok(Entries(entries))
            }
        }

        deserializer.deserialize_map(EntriesVisitor(std::marker::PhantomData))
    }
}
