//! Damaged logs: torn tails, corruption, truncation. Nothing panics; the answer is a valid
//! prefix or a typed error.

use std::fs;

use proptest::prelude::*;
use session_persistence::{Backend, Compression, CorruptKind, JsonlStore, PersistenceError};

use crate::{arcs, config, event, header, id, open, scan, scan_ok, turn};

/// Writes a three-batch session and returns the store, its log path and the events.
fn written(
    dir: &std::path::Path,
    compression: Compression,
) -> (JsonlStore, std::path::PathBuf, Vec<session_core::SessionEvent>) {
    let store = open(dir, compression);
    let header = header("d", Some("/p"));
    let batches = [turn(0, 4), turn(6, 3), turn(11, 5)];
    for (index, batch) in batches.iter().enumerate() {
        store.append_batch(&header, &arcs(batch), index > 0).unwrap();
    }
    let path = store.locate(&header).unwrap();
    (store, path, batches.concat())
}

#[test]
fn raw_torn_line_is_cut_and_repaired() {
    let dir = tempfile::tempdir().unwrap();
    let (store, path, events) = written(dir.path(), Compression::None);
    let full = fs::read(&path).unwrap();
    // Drop only the final newline: the last line is complete JSON but not committed.
    fs::write(&path, &full[..full.len() - 1]).unwrap();
    let (outcome, prefix) = scan_ok(&store, "d");
    assert_eq!(prefix, events[..events.len() - 1]);
    let last_line_start = full[..full.len() - 1].iter().rposition(|byte| *byte == b'\n').unwrap() + 1;
    assert_eq!(outcome.torn.as_ref().unwrap().truncate_to, last_line_start as u64);
    let closer = event("turn/end", prefix.len() as u64, 99, r#"{"turn":1,"reason":{"kind":"interrupted"}}"#);
    store.commit_repair(&outcome.header, outcome.torn.as_ref(), std::slice::from_ref(&closer)).unwrap();
    let (repaired, repaired_events) = scan_ok(&store, "d");
    assert_eq!(repaired.torn, None);
    assert_eq!(repaired_events.last(), Some(&closer));
    assert_eq!(repaired_events.len(), events.len());
}

#[test]
fn raw_defect_rules() {
    let dir = tempfile::tempdir().unwrap();
    let (store, path, events) = written(dir.path(), Compression::None);
    let text = fs::read_to_string(&path).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    // lines[0] is the header; each turn is three lines: start, a packed row, end.
    assert_eq!(lines.len(), 10);
    let write = |lines: &[&str]| fs::write(&path, lines.join("\n") + "\n").unwrap();
    // A bad line before a later turn/end is fatal.
    write(&[&lines[..2], &["{garbage"], &lines[3..]].concat());
    let error = scan(&store, "d").unwrap_err();
    assert!(matches!(error, PersistenceError::Corrupt { kind: CorruptKind::Record, .. }), "{error:?}");
    assert!(error.to_string().starts_with("corrupt session log: unparsable committed event at line 2"), "{error}");
    // An empty line is a defect too; with no later turn/end it bounds the prefix.
    write(&[&lines[..=6], &[""], &lines[7..=8]].concat());
    let (outcome, prefix) = scan_ok(&store, "d");
    assert_eq!(prefix, events[..11]);
    assert_eq!(outcome.torn.unwrap().truncate_to, (lines[..=6].join("\n").len() + 1) as u64);
    // A seq gap before a later turn/end is fatal.
    let gap = lines[4].replace("\"seq\":6", "\"seq\":16");
    write(&[&lines[..4], &[gap.as_str()], &lines[5..]].concat());
    let error = scan(&store, "d").unwrap_err();
    assert!(matches!(error, PersistenceError::Corrupt { kind: CorruptKind::SeqGap, .. }), "{error:?}");
    assert!(error.to_string().contains("seq gap in committed region at line 4 (expected 6, got 16)"), "{error}");
    // A row with a gap and no later turn/end is dropped whole.
    let row_gap = lines[5].replace("\"seq0\":7", "\"seq0\":8");
    write(&[&lines[..5], &[row_gap.as_str()]].concat());
    let (outcome, prefix) = scan_ok(&store, "d");
    assert_eq!(prefix, events[..7]);
    assert_eq!(outcome.torn.unwrap().truncate_to, (lines[..5].join("\n").len() + 1) as u64);
    // A line split inside a multi-byte character still decodes once whole (the reader's
    // chunks are far larger, so check the scanner through a file with a long first event).
    let long = crate::event("note/x", 0, 0, &serde_json::json!({ "t": "é".repeat(200_000) }).to_string());
    let header = crate::header("utf", None);
    store.append_batch(&header, &[std::sync::Arc::new(long.clone())], false).unwrap();
    assert_eq!(scan_ok(&store, "utf").1, vec![long]);
    // No header.
    fs::write(&path, "").unwrap();
    assert!(scan(&store, "d").unwrap_err().to_string().contains("empty or header-less session log"));
}

/// Splits a zstd log into its frames' byte ranges.
fn frame_ranges(bytes: &[u8]) -> Vec<std::ops::Range<usize>> {
    let mut ranges = Vec::new();
    let mut start = 0;
    while start < bytes.len() {
        let size = zstd::zstd_safe::find_frame_compressed_size(&bytes[start..]).unwrap();
        ranges.push(start..start + size);
        start += size;
    }
    ranges
}

#[test]
fn zstd_torn_frame_recovers_complete_lines() {
    let dir = tempfile::tempdir().unwrap();
    let (store, path, events) = written(dir.path(), Compression::Zstd);
    let full = fs::read(&path).unwrap();
    let frames = frame_ranges(&full);
    assert_eq!(frames.len(), 4);
    let last = frames[3].clone();
    // Torn inside the checksum: everything decodes, nothing is verified, all lines recovered.
    fs::write(&path, &full[..full.len() - 2]).unwrap();
    let (outcome, prefix) = scan_ok(&store, "d");
    assert_eq!(prefix, events);
    let torn = outcome.torn.unwrap();
    assert_eq!(torn.truncate_to, last.start as u64);
    assert_eq!(torn.recovered, events[11..]);
    // Repair re-writes the recovered events as one new frame.
    store.commit_repair(&outcome.header, Some(&torn), &[]).unwrap();
    let repaired = fs::read(&path).unwrap();
    assert_eq!(frame_ranges(&repaired).len(), 4);
    let (outcome, prefix) = scan_ok(&store, "d");
    assert_eq!(outcome.torn, None);
    assert_eq!(prefix, events);
    // Torn inside the frame header: nothing recovered.
    fs::write(&path, &full[..last.start + 3]).unwrap();
    let (outcome, prefix) = scan_ok(&store, "d");
    assert_eq!(prefix, events[..11]);
    assert!(outcome.torn.unwrap().recovered.is_empty());
}

#[test]
fn zstd_defects_in_complete_frames_are_fatal() {
    let dir = tempfile::tempdir().unwrap();
    let (store, path, _) = written(dir.path(), Compression::Zstd);
    let full = fs::read(&path).unwrap();
    let frames = frame_ranges(&full);
    let check = |bytes: Vec<u8>, kind: CorruptKind, message: &str| {
        fs::write(&path, bytes).unwrap();
        let error = scan(&store, "d").unwrap_err();
        assert!(matches!(&error, PersistenceError::Corrupt { kind: actual, .. } if *actual == kind), "{error:?}");
        assert!(error.to_string().contains(message), "{error}");
    };
    let mut checksum = full.clone();
    checksum[frames[1].end - 1] ^= 0xFF;
    check(checksum, CorruptKind::Frame, &format!("frame at byte {} failed validation", frames[1].start));
    let mut magic = full.clone();
    magic[frames[2].start] = 0;
    check(magic, CorruptKind::Frame, &format!("invalid frame magic at byte {}", frames[2].start));
    let mut reserved = full.clone();
    reserved[frames[2].start + 4] |= 0x08;
    check(reserved, CorruptKind::Frame, &format!("reserved frame-header bit at byte {}", frames[2].start + 4));
    let mut junk = full.clone();
    junk.extend_from_slice(b"junk");
    check(junk, CorruptKind::Frame, &format!("invalid frame magic at byte {}", full.len()));
    // A complete frame whose text ends inside a line.
    let mut encoder = session_persistence::format::FrameEncoder::new().unwrap();
    let mut cut = full[..frames[3].end].to_vec();
    cut.extend(encoder.encode(b"{\"type\":\"turn/start\",\"seq\":17").unwrap());
    check(cut, CorruptKind::TornRecordInFrame, "complete frame contains a torn JSONL record");
    // An undecodable line inside a complete frame is fatal even with no later turn/end.
    let mut bad_line = full.clone();
    bad_line.extend(encoder.encode(b"{bad}\n").unwrap());
    check(
        bad_line,
        CorruptKind::Record,
        "complete frame contains a torn JSONL record: corrupt session log: unparsable",
    );
    // A two-line header frame.
    let mut two = encoder.encode(b"{}\n{}\n").unwrap();
    two.extend_from_slice(&full[frames[1].start..]);
    check(two, CorruptKind::Header, "first frame is not exactly one header line");
    // Fewer than four bytes: torn, but no complete frame.
    check(full[..3].to_vec(), CorruptKind::Header, "empty or header-less Zstandard session log");
    // A few stray bytes after the last frame are a torn frame start.
    let mut stray = full.clone();
    stray.extend_from_slice(&[0x28, 0xB5]);
    fs::write(&path, stray).unwrap();
    assert_eq!(scan_ok(&store, "d").0.torn.unwrap().truncate_to, full.len() as u64);
}

#[test]
fn listing_reads_only_the_header_frame() {
    let dir = tempfile::tempdir().unwrap();
    let (_store, path, _) = written(dir.path(), Compression::Zstd);
    let mut bytes = fs::read(&path).unwrap();
    let frames = frame_ranges(&bytes);
    bytes[frames[2].end - 1] ^= 0xFF;
    fs::write(&path, bytes).unwrap();
    let reader = JsonlStore::open_read_only(config(dir.path(), Compression::Zstd)).unwrap();
    assert_eq!(reader.list(&tokio_util::sync::CancellationToken::new()).unwrap().headers.len(), 1);
    assert!(scan(&reader, "d").is_err());
}

#[test]
fn cancellation_is_observed() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _, _) = written(dir.path(), Compression::Zstd);
    let cancel = tokio_util::sync::CancellationToken::new();
    cancel.cancel();
    let mut sink = session_persistence::CollectSink::default();
    assert!(matches!(store.scan(&crate::id("d"), &cancel, &mut sink), Err(PersistenceError::Cancelled)));
    assert!(matches!(store.list(&cancel), Err(PersistenceError::Cancelled)));
}

fn check_damaged(
    compression: Compression,
    bytes: &[u8],
    events: &[session_core::SessionEvent],
) -> Result<(), TestCaseError> {
    let dir = tempfile::tempdir().unwrap();
    let reader = JsonlStore::open_read_only(config(dir.path(), compression)).unwrap();
    let session = dir.path().join("--p--/d");
    fs::create_dir_all(&session).unwrap();
    fs::write(session.join(compression.file_name()), bytes).unwrap();
    match scan(&reader, "d") {
        Ok(Some((outcome, prefix))) => {
            prop_assert!(prefix.len() <= events.len());
            prop_assert_eq!(outcome.n_events as usize, prefix.len());
            for (index, event) in prefix.iter().enumerate() {
                prop_assert_eq!(event.seq, index as u64);
            }
            if let Some(torn) = &outcome.torn {
                prop_assert!(torn.truncate_to <= bytes.len() as u64);
            }
        }
        Ok(None) => prop_assert!(false, "the log vanished"),
        Err(
            PersistenceError::Corrupt { .. }
            | PersistenceError::FormatUnsupported { .. }
            | PersistenceError::InvalidInput { .. },
        ) => {}
        Err(other) => prop_assert!(false, "unexpected error {:?}", other),
    }
    // However damaged, the log is either listed or reported as its own fault, and never fails
    // the listing as a whole.
    let listing = reader.list(&tokio_util::sync::CancellationToken::new());
    prop_assert!(listing.is_ok(), "the listing failed: {:?}", listing.err());
    let listing = listing.unwrap();
    prop_assert_eq!(listing.headers.len() + listing.faults.len(), 1, "{:?}", listing);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn truncation_never_panics(cut in 0.0f64..1.0, zstd in any::<bool>()) {
        let compression = if zstd { Compression::Zstd } else { Compression::None };
        let dir = tempfile::tempdir().unwrap();
        let (_, path, events) = written(dir.path(), compression);
        let bytes = fs::read(&path).unwrap();
        let cut = (bytes.len() as f64 * cut) as usize;
        check_damaged(compression, &bytes[..cut], &events)?;
        // A truncated prefix still yields a prefix of the events, when it yields anything.
    }

    #[test]
    fn single_byte_corruption_never_panics(at in 0.0f64..1.0, value in any::<u8>(), zstd in any::<bool>()) {
        let compression = if zstd { Compression::Zstd } else { Compression::None };
        let dir = tempfile::tempdir().unwrap();
        let (_, path, events) = written(dir.path(), compression);
        let mut bytes = fs::read(&path).unwrap();
        let at = ((bytes.len() as f64 * at) as usize).min(bytes.len() - 1);
        bytes[at] = value;
        check_damaged(compression, &bytes, &events)?;
    }
}

/// Collects a scan and lets the backend decompress ahead on a helper thread.
#[derive(Default)]
struct ReadAheadCollect(session_persistence::CollectSink);

impl session_persistence::ScanSink for ReadAheadCollect {
    fn event(&mut self, event: std::sync::Arc<session_core::SessionEvent>) -> session_persistence::Result<()> {
        self.0.event(event)
    }

    fn read_ahead(&self) -> bool {
        true
    }
}

/// A long zstd log (many frames, far more than one read-ahead chunk) reads the same whether
/// frames are decompressed ahead on a helper thread or inline: the events, the torn tail of a
/// cut final frame, and the error of a damaged middle frame.
#[test]
fn zstd_read_ahead_reads_exactly_what_an_inline_read_does() {
    use session_persistence::{CollectSink, ScanSink};
    use tokio_util::sync::CancellationToken;

    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path(), Compression::Zstd);
    let header = header("big", Some("/p"));
    // Pseudo-random payloads compress poorly, so the log is several hundred KiB on disk.
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut noise = || {
        (0..48)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                char::from(b'a' + (state % 26) as u8)
            })
            .collect::<String>()
    };
    let mut seq = 0;
    for batch in 0..80 {
        let mut events = vec![event("turn/start", seq, 1, r#"{"turn":1}"#)];
        for _ in 0..60 {
            seq += 1;
            let text = (0..4).map(|_| noise()).collect::<Vec<_>>().join(" ");
            events.push(event("note/added", seq, 2, &serde_json::json!({ "text": text }).to_string()));
        }
        seq += 1;
        events.push(event("turn/end", seq, 3, r#"{"turn":1,"reason":{"kind":"completed"}}"#));
        seq += 1;
        store.append_batch(&header, &arcs(&events), batch > 0).unwrap();
    }
    let path = store.locate(&header).unwrap();
    assert!(fs::metadata(&path).unwrap().len() > 384 << 10, "the log must outgrow the read-ahead threshold");

    let both = |store: &JsonlStore| {
        let mut ahead = ReadAheadCollect::default();
        assert!(ahead.read_ahead() && !CollectSink::default().read_ahead());
        let cancel = CancellationToken::new();
        let with = store.scan(&id("big"), &cancel, &mut ahead).map(|outcome| outcome.map(|o| (o, ahead.0.events)));
        let mut inline = CollectSink::default();
        let without = store.scan(&id("big"), &cancel, &mut inline).map(|outcome| outcome.map(|o| (o, inline.events)));
        (with, without)
    };
    let (with, without) = both(&store);
    let (with, without) = (with.unwrap().unwrap(), without.unwrap().unwrap());
    assert_eq!(with.1.len() as u64, seq);
    assert_eq!(with.0, without.0);
    assert_eq!(with.1, without.1);

    // A cut final frame: the same torn tail and recovered prefix.
    let full = fs::read(&path).unwrap();
    fs::write(&path, &full[..full.len() - 100]).unwrap();
    let (with, without) = both(&store);
    let (with, without) = (with.unwrap().unwrap(), without.unwrap().unwrap());
    assert!(with.0.torn.is_some());
    assert_eq!(with.0, without.0);
    assert_eq!(with.1, without.1);

    // A damaged middle frame: the same error.
    let mut damaged = full.clone();
    let middle = damaged.len() / 2;
    damaged[middle] ^= 0x55;
    fs::write(&path, &damaged).unwrap();
    let (with, without) = both(&store);
    let (with, without) = (with.unwrap_err(), without.unwrap_err());
    assert_eq!(with.to_string(), without.to_string());
}
