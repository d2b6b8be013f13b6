//! Writing logs and reading them back: both encodings, packed and unpacked.

use std::{fs, sync::Arc};

use proptest::prelude::*;
use session_core::{JsonData, SessionEvent, SessionHeader};
use session_persistence::{Backend, Compression, JsonlConfig, JsonlStore};
use tokio_util::sync::CancellationToken;

use crate::{ENCODINGS, arcs, config, event, fixture_store, header, id, open, scan_ok, turn};

/// Splits a zstd file into its frames' plaintexts.
pub(crate) fn frame_plaintexts(bytes: &[u8]) -> Vec<Vec<u8>> {
    let mut frames = Vec::new();
    let mut rest = bytes;
    while !rest.is_empty() {
        let size = zstd::zstd_safe::find_frame_compressed_size(rest).expect("a complete frame");
        frames.push(zstd::bulk::decompress(&rest[..size], 1 << 26).expect("the frame decodes"));
        rest = &rest[size..];
    }
    frames
}

fn store_with(root: &std::path::Path, compression: Compression, pack_chunks: bool) -> JsonlStore {
    JsonlStore::open(JsonlConfig { root: root.to_owned(), compression, pack_chunks }).unwrap()
}

fn write_batches(store: &JsonlStore, header: &SessionHeader, batches: &[Vec<SessionEvent>]) {
    for (index, batch) in batches.iter().enumerate() {
        store.append_batch(header, &arcs(batch), index > 0).unwrap();
    }
}

#[test]
fn round_trip_in_every_mode() {
    for compression in ENCODINGS {
        for pack_chunks in [true, false] {
            let dir = tempfile::tempdir().unwrap();
            let store = store_with(dir.path(), compression, pack_chunks);
            let mut header = header("s-1", Some("/work/demo"));
            header.agent_preset = Some("coder".into());
            header.owner = Some("alice".into());
            let batches = vec![turn(0, 5), turn(7, 2), turn(11, 40)];
            write_batches(&store, &header, &batches);

            let (outcome, events) = scan_ok(&store, "s-1");
            assert_eq!(events, batches.concat(), "{compression:?} pack={pack_chunks}");
            assert_eq!(*outcome.header, header);
            assert_eq!(outcome.torn, None);

            let path = store.locate(&header).unwrap();
            assert!(path.ends_with(format!("--work-demo--/s-1/{}", compression.file_name())));
            let bytes = fs::read(&path).unwrap();
            let text = match compression {
                Compression::Zstd => {
                    let frames = frame_plaintexts(&bytes);
                    assert_eq!(frames.len(), 1 + batches.len(), "one header frame, then one frame per batch");
                    assert_eq!(frames[0].iter().filter(|byte| **byte == b'\n').count(), 1);
                    frames.concat()
                }
                Compression::None => bytes,
            };
            let text = String::from_utf8(text).unwrap();
            let lines: Vec<&str> = text.lines().collect();
            assert!(lines[0].starts_with(r#"{"type":"session","version":0,"id":"s-1","createdAt":"#));
            assert!(
                lines[0].ends_with(r#""cwd":"/work/demo","delegationDepth":0,"agentPreset":"coder","owner":"alice"}"#)
            );
            let n_rows = lines.iter().filter(|line| line.starts_with(r#"{"type":"text-chunks""#)).count();
            assert_eq!(n_rows, if pack_chunks { 2 } else { 0 }, "runs of 5 and 40 pack, a run of 2 does not");
            assert_eq!(lines.len(), 1 + if pack_chunks { 3 + 4 + 3 } else { 7 + 4 + 42 });
        }
    }
}

#[test]
fn appends_keep_a_byte_identical_prefix() {
    for compression in ENCODINGS {
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path(), compression);
        let header = header("s-append", None);
        store.append_batch(&header, &arcs(&turn(0, 3)), false).unwrap();
        let path = store.locate(&header).unwrap();
        assert!(path.ends_with(format!("_no-cwd/s-append/{}", compression.file_name())));
        let mut before = fs::read(&path).unwrap();
        let mut revision = store.revision(&id("s-append")).unwrap();
        for batch in 1..4u64 {
            store.append_batch(&header, &arcs(&turn(batch * 5, 3)), true).unwrap();
            let after = fs::read(&path).unwrap();
            assert!(after.starts_with(&before), "{compression:?}: appending rewrote earlier bytes");
            assert!(after.len() > before.len());
            let next = store.revision(&id("s-append")).unwrap();
            assert_ne!(next, revision);
            revision = next;
            before = after;
        }
        if compression == Compression::Zstd {
            assert_eq!(frame_plaintexts(&before).len(), 1 + 4);
        }
        assert_eq!(scan_ok(&store, "s-append").1.len(), 20);
        // An empty batch on a materialized log writes nothing.
        store.append_batch(&header, &[], true).unwrap();
        assert_eq!(fs::read(&path).unwrap(), before);
    }
}

#[test]
fn raw_and_zstd_plaintexts_are_identical() {
    let batches = vec![turn(0, 4), turn(6, 9)];
    let header = header("twin", Some("/w"));
    let raw_dir = tempfile::tempdir().unwrap();
    let zstd_dir = tempfile::tempdir().unwrap();
    let raw = open(raw_dir.path(), Compression::None);
    let zstd = open(zstd_dir.path(), Compression::Zstd);
    write_batches(&raw, &header, &batches);
    write_batches(&zstd, &header, &batches);
    let raw_bytes = fs::read(raw.locate(&header).unwrap()).unwrap();
    let zstd_bytes = fs::read(zstd.locate(&header).unwrap()).unwrap();
    assert_eq!(frame_plaintexts(&zstd_bytes).concat(), raw_bytes);
}

/// Our writer reproduces the reference's bytes: the one-shot child was written as one batch.
#[test]
fn writer_reproduces_reference_bytes() {
    let fixture = JsonlStore::open_read_only(config(&fixture_store(Compression::None), Compression::None)).unwrap();
    for (session, batches) in [("s-child-oneshot", vec![54usize]), ("s-child-continuable", vec![2, 63])] {
        let (outcome, events) = scan_ok(&fixture, session);
        let reference = fs::read(fixture.locate(&outcome.header).unwrap()).unwrap();
        for compression in ENCODINGS {
            let dir = tempfile::tempdir().unwrap();
            let store = open(dir.path(), compression);
            let mut start = 0;
            for (index, n) in batches.iter().enumerate() {
                let batch = arcs(&events[start..start + n]);
                store.append_batch(&outcome.header, &batch, index > 0).unwrap();
                start += n;
            }
            let written = fs::read(store.locate(&outcome.header).unwrap()).unwrap();
            let text = match compression {
                Compression::Zstd => frame_plaintexts(&written).concat(),
                Compression::None => written,
            };
            assert_eq!(String::from_utf8(text).unwrap(), String::from_utf8(reference.clone()).unwrap(), "{session}");
        }
    }
}

#[test]
fn materializing_twice_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path(), Compression::Zstd);
    let header = header("once", Some("/a"));
    store.append_batch(&header, &arcs(&turn(0, 1)), false).unwrap();
    let error = store.append_batch(&header, &arcs(&turn(0, 1)), false).unwrap_err();
    assert!(error.to_string().contains("refusing to materialize \"once\""), "{error}");
    // The same id under another project is a duplicate, not a second session.
    let elsewhere = crate::header("once", Some("/b"));
    let error = store.append_batch(&elsewhere, &arcs(&turn(0, 1)), false).unwrap_err();
    assert!(error.to_string().contains("already has a persisted log"), "{error}");
    assert_eq!(scan_ok(&store, "once").1.len(), 3);
}

#[test]
fn header_only_log_and_modes() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    let store = open(&root, Compression::Zstd);
    let header = header("empty", Some("/p"));
    store.append_batch(&header, &[], false).unwrap();
    let (outcome, events) = scan_ok(&store, "empty");
    assert!(events.is_empty());
    assert_eq!(outcome.torn, None);
    let path = store.locate(&header).unwrap();
    let mode = |path: &std::path::Path| fs::metadata(path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&path), 0o600);
    assert_eq!(mode(path.parent().unwrap()), 0o700);
    assert_eq!(mode(path.parent().unwrap().parent().unwrap()), 0o700);
    assert_eq!(mode(&root), 0o700);
    let leftovers: Vec<_> = fs::read_dir(path.parent().unwrap()).unwrap().collect();
    assert_eq!(leftovers.len(), 1, "no temp file is left behind");
}

#[test]
fn oversized_records_are_refused_before_writing() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path(), Compression::None);
    let header = header("big", None);
    store.append_batch(&header, &arcs(&turn(0, 1)), false).unwrap();
    let path = store.locate(&header).unwrap();
    let before = fs::read(&path).unwrap();
    let huge = format!("\"{}\"", "x".repeat(session_persistence::format::MAX_RECORD_BYTES));
    let big = SessionEvent::new("tool/output", 3, 0, JsonData::from_text(huge).unwrap());
    let error = store.append_batch(&header, &[Arc::new(big)], true).unwrap_err();
    assert!(error.to_string().contains("\"tool/output\" at seq 3"), "{error}");
    assert_eq!(fs::read(&path).unwrap(), before);
}

/// One generated event: kind, block index, whether named, text, time step.
type EventSpec = (u8, u8, u8, String, i64);

/// One generated event: a delta of some kind, or a plain event.
fn arb_event() -> impl Strategy<Value = EventSpec> {
    (0u8..6, 0u8..2, 0u8..2, "[a-z\"\\\\ é\u{1F600}]{0,6}", -3i64..4)
}

fn build_event(seq: u64, time: i64, (kind, index, name, text, _): &EventSpec) -> SessionEvent {
    let chunk = match kind {
        0 => serde_json::json!({"type": "text-delta", "index": index, "text": text}),
        1 => serde_json::json!({"type": "reasoning-delta", "index": index, "text": text}),
        2 if *name == 0 => {
            serde_json::json!({"type": "tool-call-delta", "index": index, "id": "c1", "argumentsDelta": text})
        }
        2 => {
            serde_json::json!({"type": "tool-call-delta", "index": index, "id": "c1", "name": "read", "argumentsDelta": text})
        }
        3 => serde_json::json!({"type": "text-delta", "index": index, "text": text, "extra": true}),
        4 => return event("note/added", seq, time, &serde_json::json!({ "text": text }).to_string()),
        _ => return event("user/message", seq, time, &serde_json::json!({ "id": text }).to_string()),
    };
    let data = serde_json::json!({"turn": 1, "step": index, "chunk": chunk});
    event("assistant/chunk", seq, time, &data.to_string())
}

fn arb_batches() -> impl Strategy<Value = Vec<Vec<EventSpec>>> {
    prop::collection::vec(prop::collection::vec(arb_event(), 0..24), 1..5)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn any_batch_sequence_round_trips(batches in arb_batches(), zstd in any::<bool>(), pack_chunks in any::<bool>()) {
        let compression = if zstd { Compression::Zstd } else { Compression::None };
        let dir = tempfile::tempdir().unwrap();
        let store = store_with(dir.path(), compression, pack_chunks);
        let header = header("prop", Some("/p"));
        let mut seq = 0;
        let mut time = 1_000;
        let mut written = Vec::new();
        for (index, batch) in batches.iter().enumerate() {
            let events: Vec<SessionEvent> = batch.iter().map(|spec| {
                time += spec.4;
                let event = build_event(seq, time, spec);
                seq += 1;
                event
            }).collect();
            store.append_batch(&header, &arcs(&events), index > 0).unwrap();
            written.extend(events);
        }
        let (outcome, events) = scan_ok(&store, "prop");
        prop_assert_eq!(outcome.torn, None);
        prop_assert_eq!(events, written);
        let listed = store.list(&CancellationToken::new()).unwrap().headers;
        prop_assert_eq!(listed.len(), 1);
        prop_assert_eq!(&*listed[0].header, &header);
    }
}
