//! The listing rows the cases expect, as the JSON a row serializes to.

use serde_json::{Value, json};

/// A `list_children` child row (`label` omitted when `None`).
pub fn child(id: &str, mode: &str, label: Option<&str>, activity: &str, has_children: bool) -> Value {
    let mut row = json!({"kind": "child", "id": id, "mode": mode});
    if let Some(label) = label {
        row["label"] = json!(label);
    }
    row["activity"] = json!(activity);
    row["hasChildren"] = json!(has_children);
    row
}

/// A `list_children` diagnostic row.
pub fn diagnostic(id: &str, reason: &str) -> Value {
    json!({"kind": "diagnostic", "id": id, "reason": reason})
}

/// A labelled continuable child row without children.
pub fn continuable_row(id: &str, label: &str, activity: &str) -> Value {
    child(id, "continuable", Some(label), activity, false)
}

/// A `list_descendants` child row: a [`child`] row with its parent and depth.
pub fn child_at(
    id: &str,
    mode: &str,
    label: Option<&str>,
    activity: &str,
    has_children: bool,
    parent: &str,
    depth: u64,
) -> Value {
    let mut row = child(id, mode, label, activity, has_children);
    row["parentId"] = json!(parent);
    row["depth"] = json!(depth);
    row
}

/// A `list_descendants` diagnostic row: a [`diagnostic`] row with its parent and depth.
pub fn diagnostic_at(id: &str, reason: &str, parent: &str, depth: u64) -> Value {
    let mut row = diagnostic(id, reason);
    row["parentId"] = json!(parent);
    row["depth"] = json!(depth);
    row
}
