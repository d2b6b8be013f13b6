//! File-mutation receipts (reference 01 §1.7): the shape of `data.mutations` on `tool/result`
//! and `tool/code-dispatch`, and the commit orders that must be unique across a session.
//!
//! Most events carry no receipts, so both functions first look for the `"mutations"` key in the
//! payload text and parse only when it is there. Writers never escape ASCII in keys, so a key
//! spelled with escapes is not looked for.

use serde::Deserialize;
use serde_json::{Map, Value};

use crate::{
    JsonData,
    json::as_safe_u64,
    view::{Field, present},
};

const RECEIPT_KEYS: [&str; 9] =
    ["version", "commitOrder", "beforeSha1", "afterSha1", "beforeSha256", "afterSha256", "path", "operation", "diffs"];

#[derive(Deserialize)]
struct MutationsView<'a> {
    #[serde(default, borrow, deserialize_with = "present")]
    mutations: Field<'a>,
}

/// `data.mutations` parsed as a tree, or `None` when the key is absent (or `data` is no object).
fn mutations(data: &JsonData) -> Option<Value> {
    if !data.as_str().contains("\"mutations\"") || !data.as_str().starts_with('{') {
        return None;
    }
    let raw = data.parse_borrowed::<MutationsView<'_>>().ok()?.mutations?;
    serde_json::from_str(raw.get()).ok()
}

/// Whether an event type carries receipts that must be validated.
pub(crate) fn carries_receipts(kind: &str) -> bool {
    kind == "tool/result" || kind == "tool/code-dispatch"
}

/// Validates the receipts of a `tool/result` or `tool/code-dispatch` payload. `subject` starts
/// every message (`session event "tool/result"`, `seed event at index 3`).
pub(crate) fn check_file_mutations(data: &JsonData, subject: &str) -> Result<(), String> {
    let Some(value) = mutations(data) else { return Ok(()) };
    let receipts = match &value {
        Value::Array(receipts) if !receipts.is_empty() => receipts,
        _ => return Err(format!("{subject} has invalid file mutations")),
    };
    for (idx, receipt) in receipts.iter().enumerate() {
        let location = format!("{subject} file mutation at index {idx}");
        let Value::Object(receipt) = receipt else { return Err(format!("{location} is invalid")) };
        let Some(operation) = valid_receipt_operation(receipt) else { return Err(format!("{location} is invalid")) };
        let Some(Value::Array(diffs)) = receipt.get("diffs") else { return Err(format!("{location} is invalid")) };
        for (diff_idx, diff) in diffs.iter().enumerate() {
            if !valid_diff(diff, operation) {
                return Err(format!("{location} diff at index {diff_idx} is invalid"));
            }
        }
    }
    Ok(())
}

/// The receipt's operation if everything but its diffs' contents is valid.
fn valid_receipt_operation(receipt: &Map<String, Value>) -> Option<&str> {
    if receipt.keys().any(|key| !RECEIPT_KEYS.contains(&key.as_str())) {
        return None;
    }
    if receipt.get("version").and_then(Value::as_f64) != Some(1.0) {
        return None;
    }
    receipt.get("commitOrder").and_then(as_safe_u64)?;
    // Each hash is null or lowercase hex of its length; an absent hash is invalid.
    let hash = |key: &str, len: usize| -> Option<bool> {
        match receipt.get(key)? {
            Value::Null => Some(false),
            Value::String(hex) if hex.len() == len && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) => {
                Some(true)
            }
            _ => None,
        }
    };
    let before_sha1 = hash("beforeSha1", 40)?;
    let after_sha1 = hash("afterSha1", 40)?;
    let before_sha256 = hash("beforeSha256", 64)?;
    let after_sha256 = hash("afterSha256", 64)?;
    let operation = receipt.get("operation").and_then(Value::as_str)?;
    let hashes_fit = match operation {
        "create" => !before_sha1 && !before_sha256 && after_sha1 && after_sha256,
        "modify" => before_sha1 && after_sha1 && before_sha256 && after_sha256,
        "delete" => before_sha1 && !after_sha1 && before_sha256 && !after_sha256,
        _ => false,
    };
    let path = receipt.get("path").and_then(Value::as_str)?;
    let path_blank = path.trim_matches(|c: char| c.is_whitespace() || c == '\u{feff}').is_empty();
    let has_diffs = matches!(receipt.get("diffs"), Some(Value::Array(diffs)) if !diffs.is_empty());
    (hashes_fit && !path_blank && has_diffs).then_some(operation)
}

fn valid_diff(diff: &Value, operation: &str) -> bool {
    let Value::Object(diff) = diff else { return false };
    if diff.keys().any(|key| key != "oldText" && key != "newText") {
        return false;
    }
    // `Some(None)` is null, `Some(Some(_))` a string; anything else (absent included) is invalid.
    let text = |key: &str| match diff.get(key) {
        Some(Value::Null) => Some(None),
        Some(Value::String(text)) => Some(Some(text)),
        _ => None,
    };
    let (Some(old_text), Some(new_text)) = (text("oldText"), text("newText")) else { return false };
    if old_text.is_none() && new_text.is_none() {
        return false;
    }
    !(operation == "create" && old_text.is_some() || operation == "delete" && new_text.is_some())
}

/// The commit orders named by `data.mutations` of any event type, as canonical number keys, in
/// order. Entries without a numeric `commitOrder` name none.
pub(crate) fn file_mutation_orders(data: &JsonData) -> Vec<CommitOrder> {
    let Some(Value::Array(receipts)) = mutations(data) else { return Vec::new() };
    receipts
        .iter()
        .filter_map(|receipt| receipt.get("commitOrder").and_then(Value::as_f64))
        .map(CommitOrder::from_f64)
        .collect()
}

/// A commit order compared as a number (`1` and `1.0` are the same order).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct CommitOrder(u64);

impl CommitOrder {
    fn from_f64(order: f64) -> CommitOrder {
        CommitOrder(order.to_bits())
    }

    pub(crate) fn value(self) -> f64 {
        f64::from_bits(self.0)
    }
}
