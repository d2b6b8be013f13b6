//! Suffix reads that seek (`Backend::scan_from` of the JSONL store): a checkpoint's tail, or a
//! follower's, costs the tail and a few probes, not the whole log.
//!
//! Seqs grow with the byte offset in a log, so the start is found by bisection over the file,
//! without an index: a probe at an offset finds the next line start (raw) or frame start (zstd;
//! frames are independent and each holds whole lines), decodes that line's first event, and
//! halves the range by its seq. A zstd probe finds a frame by its magic number, and takes it only
//! if a whole, well-formed frame starts there and ends at the end of the file or at another
//! magic number (compressed bytes may hold the magic by chance; they do not also hold that
//! structure). The read then starts at the last boundary at or before the wanted seq, and streams
//! only the events from that seq on.
//!
//! A probe that cannot decode its line (damage) ends the bisection: the read then starts after
//! the header, as a whole scan would, and reports the damage the same way. What a seek never
//! reads is not checked: a defect before the start point is found by whole reads only.

use std::path::Path;

use tokio_util::sync::CancellationToken;

use super::{
    Compression, MAX_RECORD_BYTES,
    chunk_rows::decode_record,
    scan::{ByteSource, KnownHeader, LogScan, Resume, read_header, scan_log_known, scan_resumed, still_leads},
    zstd::{FrameStream, Piece, ZSTD_MAGIC, frame_at, read_full},
};
use crate::{
    backend::ScanSink,
    error::{PersistenceError, Result},
};

/// A range this small is read rather than bisected further.
const SEEK_WINDOW: u64 = 64 << 10;

/// Bytes read per probe step.
const PROBE_CHUNK: usize = 4 << 10;

/// [`scan_log_known`] that hands `sink` only the events from `from_seq` on, reading from the last
/// line or frame boundary at or before that seq (see the [module](self) documentation). The
/// outcome counts every event of the log in `n_events`; its `torn` describes what the read saw.
pub(crate) fn scan_log_from(
    source: &dyn ByteSource,
    compression: Compression,
    path: &Path,
    cancel: &CancellationToken,
    known: Option<&KnownHeader>,
    from_seq: u64,
    sink: &mut dyn ScanSink,
) -> Result<LogScan> {
    if from_seq == 0 {
        return scan_log_known(source, compression, path, cancel, known, sink);
    }
    let known = match known {
        Some(known) if still_leads(source, known).map_err(|error| PersistenceError::io(path, error))? => {
            Some(known.clone())
        }
        _ => read_header(source, compression, path, cancel)?.and_then(|read| read.known),
    };
    let Some(known) = known else {
        // A header that does not decode plainly: the read from the first byte reports it.
        return scan_resumed(source, compression, path, cancel, None, from_seq, sink);
    };
    let mut resume = Resume::after_header(&known);
    let found = match compression {
        Compression::None => bisect(source, resume.offset, from_seq, cancel, &line_after)?,
        Compression::Zstd => bisect(source, resume.offset, from_seq, cancel, &frame_after)?,
    };
    if let Some((offset, seq)) = found.filter(|(offset, _)| *offset > resume.offset) {
        let text_offset = match compression {
            Compression::None => offset,
            Compression::Zstd => 0,
        };
        resume = Resume { offset, text_offset, seq, ..resume };
    }
    scan_resumed(source, compression, path, cancel, Some(resume), from_seq, sink)
}

/// What a probe found after an offset.
enum Probe {
    /// A boundary at `start` whose first event has `seq`.
    Boundary { start: u64, seq: u64 },
    /// No boundary before the range's end.
    None,
    /// A boundary whose first line does not decode.
    Damaged,
}

/// The last boundary at or before `from_seq`'s, between `first` (the first event's boundary, seq
/// 0) and the end of the source, by bisection with `probe`; `None` when a probe met damage.
fn bisect(
    source: &dyn ByteSource,
    first: u64,
    from_seq: u64,
    cancel: &CancellationToken,
    probe: &dyn Fn(&dyn ByteSource, u64, u64) -> std::io::Result<Probe>,
) -> Result<Option<(u64, u64)>> {
    let (mut lo, mut lo_seq, mut hi) = (first, 0, source.len());
    // Invariant: the wanted boundary starts in [lo, hi), and lo is a boundary with seq lo_seq.
    while hi.saturating_sub(lo) > SEEK_WINDOW {
        if cancel.is_cancelled() {
            return Err(PersistenceError::Cancelled);
        }
        let mid = lo + (hi - lo) / 2;
        match probe(source, mid, hi).map_err(|error| PersistenceError::io("a seek probe", error))? {
            Probe::Boundary { start, seq } if seq <= from_seq => (lo, lo_seq) = (start, seq),
            Probe::Boundary { .. } | Probe::None => hi = mid,
            Probe::Damaged => return Ok(None),
        }
    }
    Ok(Some((lo, lo_seq)))
}

/// The seq of the first event of `line`, or `None` if it does not decode.
fn first_seq(line: &[u8]) -> Option<u64> {
    let text = std::str::from_utf8(line).ok()?;
    let mut events = Vec::new();
    decode_record(text, &mut events).ok()?;
    events.first().map(|event| event.seq)
}

/// Reads from `offset` until `stop` says where in the bytes so far it is satisfied, or `limit`
/// bytes have been read; the bytes and where `stop` stopped.
fn read_until(
    source: &dyn ByteSource,
    offset: u64,
    limit: usize,
    stop: &dyn Fn(&[u8], usize) -> Option<usize>,
) -> std::io::Result<(Vec<u8>, Option<usize>)> {
    let mut bytes = Vec::new();
    let mut chunk = vec![0; PROBE_CHUNK];
    while bytes.len() < limit {
        let got = read_full(source, offset + bytes.len() as u64, &mut chunk)?;
        if got == 0 {
            break;
        }
        let searched = bytes.len();
        bytes.extend_from_slice(&chunk[..got]);
        if let Some(at) = stop(&bytes, searched) {
            return Ok((bytes, Some(at)));
        }
    }
    Ok((bytes, None))
}

/// The first line that starts after `mid` and before `hi`, in a raw log.
fn line_after(source: &dyn ByteSource, mid: u64, hi: u64) -> std::io::Result<Probe> {
    let newline = |bytes: &[u8], from: usize| memchr::memchr(b'\n', &bytes[from..]).map(|at| from + at);
    let limit = usize::try_from(hi - mid).unwrap_or(usize::MAX);
    let (_, found) = read_until(source, mid, limit, &newline)?;
    let Some(at) = found else { return Ok(Probe::None) };
    let start = mid + at as u64 + 1;
    if start >= hi {
        return Ok(Probe::None);
    }
    let (line, end) = read_until(source, start, MAX_RECORD_BYTES + 1, &newline)?;
    // A line without its newline is the torn tail: no boundary to start from.
    let Some(end) = end else { return Ok(Probe::None) };
    Ok(match first_seq(&line[..end]) {
        Some(seq) => Probe::Boundary { start, seq },
        None => Probe::Damaged,
    })
}

/// The first frame that starts after `mid` and before `hi`, in a zstd log.
fn frame_after(source: &dyn ByteSource, mid: u64, hi: u64) -> std::io::Result<Probe> {
    let magic = ZSTD_MAGIC.to_le_bytes();
    let mut from = mid;
    while from < hi {
        let limit = usize::try_from(hi - from).unwrap_or(usize::MAX).saturating_add(magic.len() - 1);
        let find = |bytes: &[u8], searched: usize| {
            let back = searched.saturating_sub(magic.len() - 1);
            memchr::memmem::find(&bytes[back..], &magic).map(|at| back + at)
        };
        let (_, found) = read_until(source, from, limit, &find)?;
        let Some(at) = found else { return Ok(Probe::None) };
        let start = from + at as u64;
        if start >= hi {
            return Ok(Probe::None);
        }
        if let Some(end) = frame_at(source, source.len(), start)?
            && let Some(line) = first_line_of_frame(source, start, end)
        {
            return Ok(match first_seq(&line) {
                Some(seq) => Probe::Boundary { start, seq },
                None => Probe::Damaged,
            });
        }
        // The magic number was a chance match inside compressed bytes.
        from = start + 1;
    }
    Ok(Probe::None)
}

/// The first line of the frame in `[start, end)`, decoding no more of it than that line takes;
/// `None` if it does not decode.
fn first_line_of_frame(source: &dyn ByteSource, start: u64, end: u64) -> Option<Vec<u8>> {
    let mut stream = FrameStream::new(source, end - start).ok()?;
    let mut line = Vec::new();
    let mut complete = false;
    let cancel = CancellationToken::new();
    let _ = stream.run(start, end, Path::new(""), &cancel, &mut |piece| {
        if let Piece::Plaintext(bytes) = piece {
            match memchr::memchr(b'\n', bytes) {
                Some(at) => {
                    line.extend_from_slice(&bytes[..at]);
                    complete = true;
                    // Stops the decoder: the rest of the frame is not needed.
                    return Err(PersistenceError::Cancelled);
                }
                None if line.len() + bytes.len() > MAX_RECORD_BYTES => return Err(PersistenceError::Cancelled),
                None => line.extend_from_slice(bytes),
            }
        }
        Ok(())
    });
    complete.then_some(line)
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU64, Ordering};

    use session_core::{JsonData, SessionHeader, SessionId};

    use session_core::SessionEvent;

    use super::*;
    use crate::{
        CollectSink,
        format::{FrameEncoder, encode_batch, encode_header_line},
    };

    /// Events of a log: notes of pseudo-random text (so zstd frames stay large), with runs of
    /// text deltas that pack into chunk rows.
    fn events(n: u64) -> Vec<SessionEvent> {
        let mut state = 0x9E37_79B9_7F4A_7C15_u64;
        (0..n)
            .map(|seq| {
                state = state.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
                let data = if seq % 10 < 4 {
                    serde_json::json!({"turn": 1, "step": 1, "chunk": {"type": "text-delta", "delta": format!("{state:x}")}})
                } else {
                    serde_json::json!({"text": format!("{state:x}{:x}", state.rotate_left(17)), "turn": 1, "step": 1})
                };
                let kind = if seq % 10 < 4 { "assistant/chunk" } else { "note/added" };
                SessionEvent::new(kind, seq, seq as i64, JsonData::from_text(data.to_string()).unwrap())
            })
            .collect()
    }

    /// A log of `events` in batches of `batch`: raw lines, or one zstd frame per batch.
    fn log(events: &[SessionEvent], batch: usize, compression: Compression) -> Vec<u8> {
        let mut encoder = FrameEncoder::new().unwrap();
        let mut header = encode_header_line(&SessionHeader::new(SessionId::from("s"), 1)).into_bytes();
        header.push(b'\n');
        let mut out = match compression {
            Compression::None => header,
            Compression::Zstd => encoder.encode(&header).unwrap(),
        };
        for events in events.chunks(batch) {
            let mut text = Vec::new();
            encode_batch(events, true, &mut text).unwrap();
            match compression {
                Compression::None => out.extend_from_slice(&text),
                Compression::Zstd => out.extend(encoder.encode(&text).unwrap()),
            }
        }
        out
    }

    /// A source that counts the bytes read from it.
    struct Counted<'a> {
        bytes: &'a [u8],
        read: AtomicU64,
    }

    impl ByteSource for Counted<'_> {
        fn len(&self) -> u64 {
            self.bytes.len() as u64
        }

        fn read_at(&self, offset: u64, buf: &mut [u8]) -> std::io::Result<usize> {
            let n = self.bytes.read_at(offset, buf)?;
            self.read.fetch_add(n as u64, Ordering::Relaxed);
            Ok(n)
        }
    }

    fn read_from(source: &dyn ByteSource, compression: Compression, from_seq: u64) -> (LogScan, Vec<SessionEvent>) {
        let mut sink = CollectSink::default();
        let cancel = CancellationToken::new();
        let scan = scan_log_from(source, compression, Path::new("log"), &cancel, None, from_seq, &mut sink).unwrap();
        (scan, sink.events)
    }

    #[test]
    fn a_suffix_read_streams_exactly_the_suffix_and_reads_a_fraction_of_the_log() {
        let all = events(20_000);
        for compression in [Compression::None, Compression::Zstd] {
            let bytes = log(&all, 7, compression);
            assert!(bytes.len() > 12 * SEEK_WINDOW as usize, "{compression:?}: {} bytes", bytes.len());
            for from_seq in [1, 6, 7, 8, 999, 10_000, 19_990, 19_999, 20_000, 25_000] {
                let source = Counted { bytes: &bytes, read: AtomicU64::new(0) };
                let (scan, suffix) = read_from(&source, compression, from_seq);
                let wanted = &all[(from_seq as usize).min(all.len())..];
                assert_eq!(suffix, wanted, "{compression:?} from {from_seq}");
                assert_eq!(scan.n_events, all.len() as u64, "{compression:?} from {from_seq}");
                assert!(scan.torn.is_none());
                let read = source.read.load(Ordering::Relaxed);
                if from_seq >= 19_990 {
                    assert!(
                        read * 4 < bytes.len() as u64,
                        "{compression:?} from {from_seq}: read {read} of {} bytes",
                        bytes.len()
                    );
                }
            }
        }
    }

    #[test]
    fn a_torn_tail_reads_as_it_does_whole() {
        let all = events(5_000);
        let mut bytes = log(&all, 5, Compression::None);
        assert_eq!(bytes.pop(), Some(b'\n'));
        let (scan, suffix) = read_from(&bytes.as_slice(), Compression::None, 4_990);
        assert_eq!(suffix, &all[4_990..4_999]);
        assert_eq!(scan.n_events, 4_999);
        assert!(scan.torn.is_some());
        let mut bytes = log(&all, 5, Compression::Zstd);
        bytes.truncate(bytes.len() - 3);
        let (scan, suffix) = read_from(&bytes.as_slice(), Compression::Zstd, 4_990);
        assert_eq!(suffix, &all[4_990..]);
        assert!(scan.torn.is_some(), "the final frame is torn; its lines are recovered");
    }

    #[test]
    fn a_damaged_line_met_by_a_probe_reads_as_the_whole_log_does() {
        let all = events(20_000);
        let mut bytes = log(&all, 1, Compression::None);
        // Garble the line at the middle of the file, which the first probe decodes.
        let middle = bytes.len() / 2;
        let start = middle + memchr::memchr(b'\n', &bytes[middle..]).unwrap() + 1;
        bytes[start + 2] = b'#';
        let cancel = CancellationToken::new();
        let mut whole = CollectSink::default();
        let expected =
            super::super::scan_log(&bytes.as_slice(), Compression::None, Path::new("log"), &cancel, &mut whole).map(
                |scan| (scan.torn, whole.events.into_iter().filter(|event| event.seq >= 19_000).collect::<Vec<_>>()),
            );
        let mut sink = CollectSink::default();
        let got =
            scan_log_from(&bytes.as_slice(), Compression::None, Path::new("log"), &cancel, None, 19_000, &mut sink)
                .map(|scan| (scan.torn, sink.events));
        assert!(expected.as_ref().is_ok_and(|(torn, _)| torn.is_some()), "no turn ends after it: a torn tail");
        assert_eq!(got.unwrap(), expected.unwrap());
    }

    #[test]
    fn a_chance_magic_number_in_the_bytes_is_not_taken_for_a_frame() {
        let all = events(50);
        let frame = {
            let mut text = Vec::new();
            encode_batch(&all[20..30], true, &mut text).unwrap();
            FrameEncoder::new().unwrap().encode(&text).unwrap()
        };
        let mut bytes = vec![0x55; 100];
        bytes.extend_from_slice(&ZSTD_MAGIC.to_le_bytes());
        bytes.extend_from_slice(&[0x20, 0x40, 0xFF, 0xFF, 0x01]);
        let real = bytes.len() as u64;
        bytes.extend_from_slice(&frame);
        match frame_after(&bytes.as_slice(), 0, bytes.len() as u64).unwrap() {
            Probe::Boundary { start, seq } => assert_eq!((start, seq), (real, 20)),
            _ => panic!("the real frame was not found"),
        }
    }
}
