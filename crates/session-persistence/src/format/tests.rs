//! Unit tests of the format module: the scanner over arbitrary chunking, and zstd framing.

use std::{path::Path, sync::Arc};

use session_core::{JsonData, SessionEvent, SessionHeader, SessionId};
use tokio_util::sync::CancellationToken;

use super::{
    Compression, FrameEncoder, KnownHeader, encode_batch, encode_header_line, read_header,
    scan::scan_log_known,
    scan_log,
    scanner::LineScanner,
    zstd::{FrameWalk, walk_frames},
};
use crate::{CollectSink, PersistenceError};

fn events(n: u64) -> Vec<SessionEvent> {
    (0..n)
        .map(|seq| {
            let data = serde_json::json!({"text": format!("é😀 {seq}"), "turn": 1, "step": 1});
            SessionEvent::new("note/added", seq, seq as i64, JsonData::from_text(data.to_string()).unwrap())
        })
        .collect()
}

fn log_text(events: &[SessionEvent]) -> Vec<u8> {
    let mut text = encode_header_line(&SessionHeader::new(SessionId::from("s"), 1)).into_bytes();
    text.push(b'\n');
    encode_batch(events, true, &mut text).unwrap();
    text
}

#[test]
fn the_scanner_is_blind_to_chunk_boundaries() {
    let events = events(6);
    let text = log_text(&events);
    let header_len = text.iter().position(|byte| *byte == b'\n').unwrap() + 1;
    for split in 1..text.len() - header_len {
        let mut scanner = LineScanner::new(Path::new("log"), header_len as u64);
        let mut seen = Vec::new();
        for piece in text[header_len..].chunks(split) {
            scanner
                .feed(piece, &mut |event| {
                    seen.push(event);
                    Ok(())
                })
                .unwrap();
        }
        assert_eq!(seen, events, "chunks of {split}");
        assert_eq!(scanner.committed(), text.len() as u64);
        assert_eq!(scanner.input(), text.len() as u64);
    }
}

#[test]
fn invalid_utf8_is_a_defect_not_a_panic() {
    let mut text = log_text(&events(2));
    let second = text.len() - 3;
    text[second] = 0xFF;
    let mut sink = CollectSink::default();
    let scan = scan_log(&text, Compression::None, Path::new("log"), &CancellationToken::new(), &mut sink).unwrap();
    assert_eq!(sink.events.len(), 1);
    assert!(scan.torn.is_some());
}

fn frames(texts: &[&[u8]]) -> Vec<u8> {
    let mut encoder = FrameEncoder::new().unwrap();
    texts.iter().flat_map(|text| encoder.encode(text).unwrap()).collect()
}

fn walk(bytes: &[u8]) -> Result<FrameWalk, PersistenceError> {
    walk_frames(&bytes, bytes.len() as u64, Path::new("log"), &CancellationToken::new(), None)
}

#[test]
fn the_walker_follows_block_structure() {
    // Incompressible text makes raw blocks; a long run makes an RLE block; both span blocks.
    let mut noise = Vec::new();
    let mut state = 1u32;
    for _ in 0..300_000 {
        state = state.wrapping_mul(1_103_515_245).wrapping_add(12345);
        noise.push(b'a' + (state >> 24) as u8 % 26);
    }
    let run = vec![b'x'; 400_000];
    let bytes = frames(&[b"h\n", &noise, &run]);
    let walked = walk(&bytes).unwrap();
    assert_eq!(walked, FrameWalk { n_complete: 3, complete_end: bytes.len() as u64, torn_start: None });
    let last = bytes.len() as u64 - frames(&[&run]).len() as u64;
    for cut in [bytes.len() - 1, bytes.len() - 4, last as usize + 2, last as usize + 4] {
        let torn = walk(&bytes[..cut]).unwrap();
        assert_eq!(torn.torn_start, Some(last), "cut at {cut}");
        assert_eq!(torn.n_complete, 2);
    }
    // A skippable frame is not accepted.
    let mut skippable = vec![0x50, 0x2A, 0x4D, 0x18, 4, 0, 0, 0, 1, 2, 3, 4];
    skippable.extend(frames(&[b"h\n"]));
    let error = walk(&skippable).unwrap_err();
    assert!(error.to_string().contains("invalid frame magic at byte 0"), "{error}");
}

#[test]
fn frames_without_checksum_still_read() {
    let text = log_text(&events(3));
    let newline = text.iter().position(|byte| *byte == b'\n').unwrap() + 1;
    let mut bytes = zstd::bulk::compress(&text[..newline], 3).unwrap();
    bytes.extend(zstd::bulk::compress(&text[newline..], 3).unwrap());
    let mut sink = CollectSink::default();
    let scan = scan_log(&bytes, Compression::Zstd, Path::new("log"), &CancellationToken::new(), &mut sink).unwrap();
    assert_eq!(sink.events.len(), 3);
    assert_eq!(scan.torn, None);
    assert_eq!(scan.n_bytes, text.len() as u64);
}

#[test]
fn a_torn_multi_block_frame_recovers_its_complete_blocks() {
    let events = events(4000);
    let text = log_text(&events);
    let newline = text.iter().position(|byte| *byte == b'\n').unwrap() + 1;
    let bytes = frames(&[&text[..newline], &text[newline..]]);
    let header_frame = frames(&[&text[..newline]]).len();
    let cut = &bytes[..bytes.len() - 100];
    let mut sink = CollectSink::default();
    let scan = scan_log(&cut, Compression::Zstd, Path::new("log"), &CancellationToken::new(), &mut sink).unwrap();
    let torn = scan.torn.unwrap();
    assert_eq!(torn.truncate_to, header_frame as u64);
    assert!(!torn.recovered.is_empty() && torn.recovered.len() < events.len(), "{}", torn.recovered.len());
    assert_eq!(torn.recovered, sink.events);
    assert_eq!(sink.events[..], events[..sink.events.len()]);
}

#[test]
fn scans_stream_into_any_sink() {
    struct Counting(u64, Option<Arc<SessionHeader>>);
    impl crate::ScanSink for Counting {
        fn header(&mut self, header: &Arc<SessionHeader>) -> crate::Result<()> {
            self.1 = Some(Arc::clone(header));
            Ok(())
        }
        fn event(&mut self, _event: std::sync::Arc<SessionEvent>) -> crate::Result<()> {
            self.0 += 1;
            Ok(())
        }
    }
    let text = log_text(&events(10));
    let mut sink = Counting(0, None);
    let scan = scan_log(&text, Compression::None, Path::new("log"), &CancellationToken::new(), &mut sink).unwrap();
    assert_eq!((sink.0, scan.n_events), (10, 10));
    assert_eq!(sink.1.as_deref(), Some(&*scan.header));
}

/// A sink that lets the backend decompress ahead, on this many threads.
struct AheadSink(CollectSink, usize);

impl AheadSink {
    fn on(decoders: usize) -> AheadSink {
        AheadSink(CollectSink::default(), decoders)
    }
}

impl crate::ScanSink for AheadSink {
    fn header(&mut self, header: &Arc<SessionHeader>) -> crate::Result<()> {
        self.0.header(header)
    }

    fn event(&mut self, event: Arc<SessionEvent>) -> crate::Result<()> {
        self.0.event(event)
    }

    fn read_ahead(&self) -> bool {
        true
    }

    fn read_ahead_decoders(&self) -> usize {
        self.1
    }
}

/// A long zstd log is decompressed on helper threads (on two where the sink says so) exactly
/// when the sink allows it, and the events are the same either way.
#[test]
fn read_ahead_runs_only_when_the_sink_allows_it() {
    use crate::ScanSink;
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut encoder = FrameEncoder::new().unwrap();
    let mut header = encode_header_line(&SessionHeader::new(SessionId::from("s"), 1)).into_bytes();
    header.push(b'\n');
    let mut bytes = encoder.encode(&header).unwrap();
    let mut seq = 0;
    for _ in 0..80 {
        let batch: Vec<SessionEvent> = (0..50)
            .map(|_| {
                let text: String = (0..200)
                    .map(|_| {
                        state ^= state << 13;
                        state ^= state >> 7;
                        state ^= state << 17;
                        char::from(b'a' + (state % 26) as u8)
                    })
                    .collect();
                seq += 1;
                let data = JsonData::from_text(serde_json::json!({ "text": text }).to_string()).unwrap();
                SessionEvent::new("note/added", seq - 1, 1, data)
            })
            .collect();
        let mut text = Vec::new();
        encode_batch(&batch, false, &mut text).unwrap();
        bytes.extend(encoder.encode(&text).unwrap());
    }
    assert!(bytes.len() as u64 > super::scan::RUN_AHEAD_MIN_BYTES, "the log must outgrow the read-ahead threshold");
    let calls = || super::zstd::RUN_AHEAD_CALLS.with(std::cell::Cell::get);
    let cancel = CancellationToken::new();

    let before = calls();
    let mut inline = CollectSink::default();
    assert!(!inline.read_ahead());
    scan_log(&bytes, Compression::Zstd, Path::new("log"), &cancel, &mut inline).unwrap();
    assert_eq!(calls(), before, "a sink that does not allow read-ahead gets none");

    let other_decoders = || super::zstd::SEGMENTS_FROM_OTHER_DECODERS.with(std::cell::Cell::get);
    let taken = other_decoders();
    let mut ahead = AheadSink::on(1);
    scan_log(&bytes, Compression::Zstd, Path::new("log"), &cancel, &mut ahead).unwrap();
    assert_eq!(calls(), before + 1, "the long log was decompressed ahead");
    assert_eq!(other_decoders(), taken, "on one decoding thread");
    assert_eq!(ahead.0.events.len() as u64, seq);
    assert_eq!(ahead.0.events, inline.events);

    // Given two decoding threads (what a read gets where cores are free), both took segments.
    let (walk, segment_ends) = super::zstd::walk_segments(
        &bytes,
        bytes.len() as u64,
        0,
        Path::new("log"),
        &cancel,
        super::zstd::SEGMENT_BYTES,
    )
    .unwrap();
    assert!(segment_ends.len() > 4, "the log must span several segments");
    assert_eq!(segment_ends.last().copied(), Some(walk.complete_end));
    let bounds: Vec<u64> = std::iter::once(0).chain(segment_ends.iter().copied()).collect();
    assert!(
        bounds[..bounds.len() - 1].windows(2).all(|pair| pair[1] - pair[0] >= super::zstd::SEGMENT_BYTES),
        "only the last segment is short"
    );
    let magic = super::zstd::ZSTD_MAGIC.to_le_bytes();
    for &end in &segment_ends[..segment_ends.len() - 1] {
        assert_eq!(bytes[end as usize..end as usize + 4], magic, "segment end {end} is where a frame starts");
    }
    let mut ahead = AheadSink::on(2);
    scan_log(&bytes, Compression::Zstd, Path::new("log"), &cancel, &mut ahead).unwrap();
    assert_eq!(ahead.0.events, inline.events);
    assert!(other_decoders() > taken, "a second thread decompressed some of the segments");
    // A read that starts past the header frame (its header known) cuts its segments from there.
    let known = read_header(&bytes.as_slice(), Compression::Zstd, Path::new("log"), &cancel).unwrap().unwrap();
    let known = known.known.expect("the header is reusable");
    let mut resumed = AheadSink::on(2);
    scan_log_known(&bytes, Compression::Zstd, Path::new("log"), &cancel, Some(&known), &mut resumed).unwrap();
    assert_eq!(resumed.0.events, inline.events);
    // Decoders the system will not start: the reading thread decodes the log itself.
    let mut refused = AheadSink::on(2);
    let scanned = crate::threads::without_helpers(|| {
        scan_log(&bytes, Compression::Zstd, Path::new("log"), &cancel, &mut refused)
    });
    assert_eq!(scanned.unwrap().n_events, seq);
    assert_eq!(refused.0.events, inline.events);

    // The helpers hand over runs that span several frames, and the reader takes them back in
    // segment order; frame ends inside a run still reach the scan in order, so a torn final
    // frame, a corrupt frame in any segment (the first of two corrupt ones is the answer, wherever
    // the other lies) and a read that fails part way read the same way.
    let corrupt_at = |fractions: &[usize]| {
        let mut corrupt = bytes.clone();
        for fraction in fractions {
            let at = corrupt.len() * fraction / 10;
            corrupt[at] ^= 0x40;
        }
        corrupt
    };
    let logs = [
        bytes[..bytes.len() - 7].to_vec(),
        corrupt_at(&[5]),
        corrupt_at(&[2, 6]),
        corrupt_at(&[3, 4]),
        corrupt_at(&[9]),
    ];
    for log in logs {
        let mut inline = CollectSink::default();
        let plain = scan_log(&log, Compression::Zstd, Path::new("log"), &cancel, &mut inline);
        let mut ahead = AheadSink::on(2);
        let fast = scan_log(&log, Compression::Zstd, Path::new("log"), &cancel, &mut ahead);
        match (plain, fast) {
            (Ok(plain), Ok(fast)) => {
                assert!(plain.torn.is_some(), "the cut log has a torn tail");
                assert_eq!((fast.n_events, fast.n_bytes, fast.torn), (plain.n_events, plain.n_bytes, plain.torn));
            }
            (Err(plain), Err(fast)) => assert_eq!(fast.to_string(), plain.to_string()),
            (plain, fast) => panic!("the two reads disagree: {plain:?} against {fast:?}"),
        }
        assert_eq!(ahead.0.events, inline.events);
    }
    // A read of the log that fails part way (not during the walk, which reads it first) fails the
    // same way whichever thread meets the failure.
    for fraction in [1, 4, 8] {
        let failing =
            FailingSource { bytes: &bytes, at: bytes.len() as u64 * fraction / 10, reads: Default::default() };
        let mut inline = CollectSink::default();
        let plain = scan_log(&failing, Compression::Zstd, Path::new("log"), &cancel, &mut inline).unwrap_err();
        failing.reads.store(0, std::sync::atomic::Ordering::Relaxed);
        let mut ahead = AheadSink::on(2);
        let fast = scan_log(&failing, Compression::Zstd, Path::new("log"), &cancel, &mut ahead).unwrap_err();
        assert!(matches!(plain, PersistenceError::Io { .. }), "{plain:?}");
        assert_eq!(fast.to_string(), plain.to_string());
        // Events decoded before a failed read may reach the sink; a read ahead may hold back a
        // run it had not handed over. Never another event.
        let (fast, plain) = (&ahead.0.events, &inline.events);
        assert!(fast.len() <= plain.len() && fast[..] == plain[..fast.len()], "a prefix of the same events");
    }
}

/// Bytes whose reads that cover `at` fail from the second on.
struct FailingSource<'a> {
    bytes: &'a [u8],
    at: u64,
    reads: std::sync::atomic::AtomicUsize,
}

impl super::ByteSource for FailingSource<'_> {
    fn len(&self) -> u64 {
        self.bytes.len() as u64
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> std::io::Result<usize> {
        let covers = offset <= self.at && self.at < offset + buf.len() as u64;
        if covers && self.reads.fetch_add(1, std::sync::atomic::Ordering::Relaxed) > 0 {
            return Err(std::io::Error::other("the disk failed"));
        }
        self.bytes.read_at(offset, buf)
    }
}

/// A scan given the header a listing decoded skips decoding it while the log still starts with
/// the header's stored bytes, and gives the same events, byte count and torn tail; a log that
/// starts with other bytes is scanned from its first byte.
#[test]
fn a_known_header_is_reused_only_while_its_bytes_lead_the_log() {
    let events = events(5);
    let text = log_text(&events);
    let newline = text.iter().position(|byte| *byte == b'\n').unwrap() + 1;
    let zstd_bytes = frames(&[&text[..newline], &text[newline..]]);
    for (compression, bytes) in [(Compression::None, text.clone()), (Compression::Zstd, zstd_bytes)] {
        let cancel = CancellationToken::new();
        let cut = &bytes[..bytes.len() - 2];
        for log in [&bytes[..], cut] {
            let read = read_header(&log, compression, Path::new("log"), &cancel).unwrap().unwrap();
            let known = read.known.expect("a header that decoded is reusable");
            // A header the bytes do not decode to shows whether the scan decoded them again.
            let mut marked = (*known.header).clone();
            marked.cwd = Some("/marked".to_owned());
            let marked = KnownHeader { header: Arc::new(marked), ..known.clone() };

            let mut plain = CollectSink::default();
            let scan = scan_log(&log, compression, Path::new("log"), &cancel, &mut plain).unwrap();
            let mut reused = CollectSink::default();
            let fast =
                scan_log_known(&log, compression, Path::new("log"), &cancel, Some(&marked), &mut reused).unwrap();
            assert_eq!(fast.header.cwd.as_deref(), Some("/marked"), "{compression:?}: the stored header was reused");
            assert_eq!(reused.events, plain.events, "{compression:?}");
            assert_eq!((fast.n_events, fast.n_bytes), (scan.n_events, scan.n_bytes), "{compression:?}");
            assert_eq!(fast.torn, scan.torn, "{compression:?}");

            // Other leading bytes: the header is decoded from the log.
            let mut other_bytes = known.bytes.to_vec();
            other_bytes[known.bytes.len() / 2] ^= 1;
            let stale = KnownHeader { bytes: other_bytes.into(), ..marked.clone() };
            let mut sink = CollectSink::default();
            let fresh = scan_log_known(&log, compression, Path::new("log"), &cancel, Some(&stale), &mut sink).unwrap();
            assert_eq!(fresh.header, scan.header, "{compression:?}");
            assert_eq!(sink.events, plain.events, "{compression:?}");
        }
    }
}

/// One generated `assistant/chunk`: block index, text length, whether it carries a long call id.
type ChunkSpec = (u8, usize, bool);

fn chunk_event(seq: u64, (index, len, long_id): &ChunkSpec) -> SessionEvent {
    let id = if *long_id { "c".repeat(300) } else { "c1".to_owned() };
    let chunk =
        serde_json::json!({"type": "tool-call-delta", "index": index, "id": id, "argumentsDelta": "a".repeat(*len)});
    let data = serde_json::json!({"turn": 1, "step": 1, "chunk": chunk});
    SessionEvent::new("assistant/chunk", seq, 1_000 + seq as i64 * 7, JsonData::from_text(data.to_string()).unwrap())
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(128))]

    /// Packing never makes a row longer than the limit it is given, and the records decode to
    /// exactly the events packed.
    #[test]
    fn packed_rows_stay_within_their_limit(
        specs in proptest::collection::vec((0u8..2, 0usize..400, proptest::prelude::any::<bool>()), 0..40),
        max_row_bytes in 200usize..3000,
    ) {
        let events: Vec<SessionEvent> =
            specs.iter().enumerate().map(|(seq, spec)| chunk_event(seq as u64, spec)).collect();
        let records = super::chunk_rows::pack_chunk_runs_within(&events, max_row_bytes);
        let mut decoded = Vec::new();
        for record in &records {
            let mut line = Vec::new();
            record.write_json(&mut line);
            if matches!(record, super::Record::Chunks(_)) {
                proptest::prop_assert!(line.len() <= max_row_bytes, "a {}-byte row over {max_row_bytes}", line.len());
            }
            super::decode_record(std::str::from_utf8(&line).unwrap(), &mut decoded).unwrap();
        }
        proptest::prop_assert_eq!(decoded, events);
    }
}

#[test]
fn rows_pack_when_they_fit() {
    // Small deltas under a roomy limit still pack into one row.
    let events: Vec<SessionEvent> = (0..10).map(|seq| chunk_event(seq, &(0, 10, false))).collect();
    let records = super::chunk_rows::pack_chunk_runs_within(&events, 1 << 20);
    assert_eq!(records.len(), 1);
    assert!(matches!(records[0], super::Record::Chunks(_)));
}
