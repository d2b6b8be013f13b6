//! The reference cold-fold matrix (reference 02 §11.1, tests 16–22), adapted: `restore_floor`,
//! `restore` over whole logs and suffixes, `view_checkpoint`, and the checks we add (contiguous
//! slices, undecodable rows as unusable, rows ignored over a whole log).

use expect_test::expect;
use serde_json::{Value, json};
use session_core::SessionEvent;
use session_projection::{CheckpointRow, CheckpointRows, ProjectionRegistry, RestoreError, RowProblem};

use crate::support::{Count, Marks, Title, event};

fn registry_with_marks_and_count() -> (std::sync::Arc<ProjectionRegistry>, Vec<session_projection::Registration>) {
    let registry = ProjectionRegistry::new();
    let registrations = vec![registry.register(Marks).unwrap(), registry.register_host_only(Count).unwrap()];
    (registry, registrations)
}

fn row(ver: u64, seq: i64, val: Value) -> CheckpointRow {
    CheckpointRow { ver, seq, val }
}

fn rows(entries: &[(&str, CheckpointRow)]) -> CheckpointRows {
    entries.iter().map(|(key, row)| ((*key).to_owned(), row.clone())).collect()
}

/// `n` events: `test/mark` at even seqs (marks `["m<seq>"]`), `test/other` at odd ones.
fn log(n: u64) -> Vec<SessionEvent> {
    (0..n)
        .map(|seq| {
            if seq % 2 == 0 {
                event(seq, "test/mark", json!({ "marks": [format!("m{seq}")] }))
            } else {
                event(seq, "test/other", json!({}))
            }
        })
        .collect()
}

#[test]
fn restore_floor_cases() {
    let registry = ProjectionRegistry::new();
    assert_eq!(registry.restore_floor(&CheckpointRows::new()), None);

    let (registry, _registrations) = registry_with_marks_and_count();
    let check = |rows: CheckpointRows, expected: u64| assert_eq!(registry.restore_floor(&rows), Some(expected));
    check(CheckpointRows::new(), 0);
    check(rows(&[("test/marks", row(1, 10, Value::Null)), ("test/count", row(1, 5, json!(6)))]), 5);
    check(rows(&[("test/marks", row(2, 10, Value::Null)), ("test/count", row(1, 5, json!(6)))]), 0);
    check(rows(&[("test/marks", row(1, 10, Value::Null)), ("test/count", row(7, 5, json!(6)))]), 0);
    check(rows(&[("test/marks", row(1, -1, Value::Null)), ("test/count", row(1, -1, json!(0)))]), 0);
    check(rows(&[("test/marks", row(1, 9, Value::Null)), ("test/count", row(1, 9, json!(10)))]), 9);
    check(rows(&[("test/marks", row(1, 9, Value::Null)), ("test/count", row(1, -5, json!(0)))]), 0);

    let single = ProjectionRegistry::new();
    let _marks = single.register(Marks).unwrap();
    assert_eq!(single.restore_floor(&rows(&[("test/marks", row(1, 9, Value::Null))])), Some(9));
}

#[test]
fn a_suffix_restore_needs_a_usable_row_for_every_unit() {
    let (registry, _registrations) = registry_with_marks_and_count();
    let stored = rows(&[("test/marks", row(1, 2, json!({ "marks": ["m2"] }))), ("test/count", row(99, 2, json!(3)))]);
    let tail = &log(5)[3..];

    let error = registry.restore(&stored, tail, 3).unwrap_err();
    expect![[r#"session projection "test/count" cannot restore from seq 3: its checkpoint row is missing, version-mismatched, or beyond the supplied log end; re-read from seq 0"#]]
        .assert_eq(&error.to_string());
    assert!(
        matches!(error, RestoreError::NeedsFullRead { problem: RowProblem::VersionMismatch { row: 99, unit: 1 }, .. }),
        "{error:?}"
    );

    // Over the whole log the rows are not needed: every unit refolds from init.
    let restored = registry.restore(&stored, log(5), 0).unwrap();
    assert_eq!(restored.snapshot.as_of_seq, 4);
    assert_eq!(restored.snapshot.values["test/marks"], json!({ "marks": ["m4"] }));
    assert_eq!(restored.checkpoint.rows["test/count"], row(1, 4, json!(5)));
    assert_eq!(restored.checkpoint.rows["test/marks"], row(1, 4, json!({ "marks": ["m4"] })));
}

#[test]
fn a_suffix_restore_folds_each_unit_only_past_its_watermark() {
    let (registry, _registrations) = registry_with_marks_and_count();
    // The marks row already covers seq 4 (its value is deliberately not what the log says, to show
    // the events up to its watermark are not applied again); count folds exactly seqs 3 and 4.
    let stored =
        rows(&[("test/marks", row(1, 4, json!({ "marks": ["from-row"] }))), ("test/count", row(1, 2, json!(3)))]);
    let restored = registry.restore(&stored, &log(5)[2..], 2).unwrap();
    assert_eq!(restored.snapshot.as_of_seq, 4);
    assert_eq!(restored.snapshot.values["test/marks"], json!({ "marks": ["from-row"] }));
    assert_eq!(restored.checkpoint.rows["test/count"], row(1, 4, json!(5)));

    // An empty tail serves the cut `base_seq - 1` with the rows unchanged.
    let stored = rows(&[("test/marks", row(1, 4, json!({ "marks": ["m4"] }))), ("test/count", row(1, 4, json!(5)))]);
    let restored = registry.restore(&stored, Vec::<SessionEvent>::new(), 5).unwrap();
    assert_eq!(restored.snapshot.as_of_seq, 4);
    assert_eq!(restored.checkpoint.rows, stored);
}

#[test]
fn view_checkpoint_serves_matching_client_rows_only() {
    let registry = ProjectionRegistry::new();
    let _marks = registry.register(Marks).unwrap();
    let _title = registry.register(Title).unwrap();
    let _count = registry.register_host_only(Count).unwrap();

    let empty = registry.view_checkpoint(&CheckpointRows::new());
    assert_eq!((empty.as_of_seq, empty.values.len()), (-1, 0));

    let stored = rows(&[
        ("test/marks", row(1, 4, json!({ "marks": ["a"] }))),
        ("test/title", row(1, 6, Value::Null)),
        ("test/count", row(1, 9, json!(10))),
        ("test/unregistered", row(1, 1, json!(1))),
    ]);
    let view = registry.view_checkpoint(&stored);
    assert_eq!(view.as_of_seq, 4);
    assert_eq!(Value::Object(view.values), json!({ "test/marks": { "marks": ["a"] }, "test/title": null }));

    let stale = rows(&[("test/marks", row(2, 4, json!({ "marks": ["a"] }))), ("test/title", row(1, 6, json!("t")))]);
    let view = registry.view_checkpoint(&stale);
    assert_eq!(view.as_of_seq, 6);
    assert_eq!(Value::Object(view.values), json!({ "test/title": "t" }));
}

#[test]
fn restores_exclude_host_only_values_but_keep_their_rows() {
    let (registry, _registrations) = registry_with_marks_and_count();
    let restored = registry.restore(&CheckpointRows::new(), log(3), 0).unwrap();
    assert_eq!(restored.snapshot.values.keys().collect::<Vec<_>>(), vec!["test/marks"]);
    assert_eq!(restored.checkpoint.rows.keys().collect::<Vec<_>>(), vec!["test/count", "test/marks"]);
    assert_eq!(restored.checkpoint.as_of_seq, 2);
}

#[test]
fn an_undecodable_row_is_unusable() {
    let (registry, _registrations) = registry_with_marks_and_count();
    let stored =
        rows(&[("test/marks", row(1, 2, json!({ "marks": "not a list" }))), ("test/count", row(1, 2, json!(3)))]);
    assert!(registry.view_checkpoint(&stored).values.is_empty());

    let error = registry.restore(&stored, Vec::<SessionEvent>::new(), 3).unwrap_err();
    assert!(
        matches!(
            &error,
            RestoreError::NeedsFullRead { key, problem: RowProblem::Undecodable { .. }, base_seq: 3 } if key == "test/marks"
        ),
        "{error:?}"
    );
    // The authoritative refold does not care.
    let restored = registry.restore(&stored, log(3), 0).unwrap();
    assert_eq!(restored.snapshot.values["test/marks"], json!({ "marks": ["m2"] }));
}

#[test]
fn a_row_beyond_the_supplied_end_needs_a_full_read() {
    let registry = ProjectionRegistry::new();
    let _count = registry.register_host_only(Count).unwrap();
    let stored = rows(&[("test/count", row(1, 9, json!(10)))]);

    // The anchor event (seq 9) is present: the row stands.
    let anchored = registry.restore(&stored, [event(9, "test/other", json!({})), event(10, "x", json!(1))], 9).unwrap();
    assert_eq!(anchored.checkpoint.rows["test/count"], row(1, 10, json!(11)));

    // The log was cut below the row: the empty tail at the anchored floor proves it.
    let error = registry.restore(&stored, Vec::<SessionEvent>::new(), 9).unwrap_err();
    assert!(
        matches!(error, RestoreError::NeedsFullRead { problem: RowProblem::BeyondEnd { row_seq: 9, end_seq: 8 }, .. }),
        "{error:?}"
    );
    // A fold read through `read_view` refuses the same cut.
    let mut fold = registry.begin_restore(&stored, 9).unwrap();
    let error = fold.read_view("test/count", |_, _| ()).unwrap_err();
    assert!(matches!(error, RestoreError::NeedsFullRead { problem: RowProblem::BeyondEnd { .. }, .. }), "{error:?}");

    // The full re-read discards the row and refolds.
    let restored = registry.restore(&stored, log(2), 0).unwrap();
    assert_eq!(restored.snapshot.as_of_seq, 1);
    assert_eq!(restored.checkpoint.rows["test/count"], row(1, 1, json!(2)));
}

#[test]
fn a_row_that_predates_the_slice_needs_a_full_read() {
    let registry = ProjectionRegistry::new();
    let _count = registry.register_host_only(Count).unwrap();
    let stored = rows(&[("test/count", row(1, 3, json!(4)))]);
    let error = registry.restore(&stored, &log(8)[6..], 6).unwrap_err();
    assert!(matches!(error, RestoreError::NeedsFullRead { problem: RowProblem::Predates { row_seq: 3 }, .. }));
}

#[test]
fn the_slice_must_be_contiguous_from_base_seq() {
    let (registry, _registrations) = registry_with_marks_and_count();
    let events = log(5);

    let error = registry.restore(&CheckpointRows::new(), &events[1..], 0).unwrap_err();
    assert_eq!(error, RestoreError::Discontiguous { expected: 0, found: 1 });
    let gapped = [events[0].clone(), events[1].clone(), events[3].clone()];
    let error = registry.restore(&CheckpointRows::new(), &gapped, 0).unwrap_err();
    expect![[r#"session projection restore expected the event at seq 2, got seq 3"#]].assert_eq(&error.to_string());
}

#[test]
fn a_registry_without_units_restores_the_cut_only() {
    let registry = ProjectionRegistry::new();
    let restored = registry.restore(&CheckpointRows::new(), log(3), 0).unwrap();
    assert_eq!(restored.snapshot.as_of_seq, 2);
    assert!(restored.snapshot.values.is_empty() && restored.checkpoint.rows.is_empty());
    let empty = registry.restore(&CheckpointRows::new(), Vec::<SessionEvent>::new(), 0).unwrap();
    assert_eq!(empty.snapshot.as_of_seq, -1);
}

#[test]
fn a_fold_can_be_fed_while_the_log_is_decoded() {
    // The push form folds event by event; nothing holds the log.
    let (registry, _registrations) = registry_with_marks_and_count();
    let mut fold = registry.begin_restore(&CheckpointRows::new(), 0).unwrap();
    for line in log(4).iter().map(|event| serde_json::to_string(event).unwrap()) {
        let decoded: SessionEvent = serde_json::from_str(&line).unwrap();
        fold.apply(&decoded).unwrap();
    }
    assert_eq!(fold.next_seq(), 4);
    let restored = fold.finish().unwrap();
    assert_eq!(restored, registry.restore(&CheckpointRows::new(), log(4), 0).unwrap());
    assert_eq!(restored.snapshot.values["test/marks"], json!({ "marks": ["m2"] }));
}
