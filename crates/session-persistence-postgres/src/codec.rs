//! An event row's record: a run of a batch's consecutive events (`n_events` of them, one for a
//! row of schema version 1), their canonical JSON lines, byte for byte what a JSONL log holds (so
//! key order and number spelling survive), joined by newlines, as `text`, or from
//! [`COMPRESS_MIN_BYTES`] as one zstd frame when that is shorter. A canonical line holds no raw
//! newline, so the lines split back exactly.

use std::{cell::RefCell, io::Read};

use session_core::{MAX_EVENT_BYTES, SessionEvent};

/// A record of at least this many bytes is stored compressed when that is shorter.
pub const COMPRESS_MIN_BYTES: usize = 4096;
/// The zstd level of compressed records.
pub const ZSTD_LEVEL: i32 = 3;
/// The most events one row holds.
pub const RUN_EVENTS: usize = 512;
/// A run takes no further event once its lines reach this many bytes (an event larger than that
/// is a run of its own), so a read from a seq inside a run decodes at most this much before it.
pub const RUN_BYTES: usize = 128 * 1024;

/// One row as it is stored: a run of consecutive events.
#[derive(Debug)]
pub(crate) struct EncodedRow {
    /// The first event's seq, type and time.
    pub(crate) seq: i64,
    pub(crate) kind: String,
    pub(crate) time: i64,
    pub(crate) text: Option<String>,
    pub(crate) zstd: Option<Vec<u8>>,
    pub(crate) n_events: i32,
    /// The lines' length as text, the newlines between them not counted (what the sessions'
    /// `n_bytes` adds up).
    pub(crate) n_bytes: i64,
}

/// `events` (consecutive, in seq order) as rows: runs of at most [`RUN_EVENTS`] events, each
/// closed once its lines reach [`RUN_BYTES`]. A line that holds a raw newline (an imported
/// payload's own whitespace) is a run of its own, which is read whole as one line.
pub(crate) fn encode_runs(events: &[&SessionEvent]) -> Vec<EncodedRow> {
    let mut rows = Vec::new();
    let mut run: Vec<u8> = Vec::new();
    // The run being built: its first event, and its lines' count and bytes.
    let mut open: Option<(&SessionEvent, usize, usize)> = None;
    for event in events {
        if let Some((first, n_events, n_bytes)) = open
            && (n_events == RUN_EVENTS || run.len() >= RUN_BYTES)
        {
            rows.push(finish_run(first, &mut run, n_events, n_bytes));
            open = None;
        }
        let start = run.len() + usize::from(open.is_some());
        if open.is_some() {
            run.push(b'\n');
        }
        event.write_json(&mut run);
        if memchr::memchr(b'\n', &run[start..]).is_some() {
            let mut line = run.split_off(start);
            if let Some((first, n_events, n_bytes)) = open.take() {
                run.pop();
                rows.push(finish_run(first, &mut run, n_events, n_bytes));
            }
            let n_line = line.len();
            rows.push(finish_run(event, &mut line, 1, n_line));
            continue;
        }
        let (first, n_events, n_bytes) = open.unwrap_or((event, 0, 0));
        open = Some((first, n_events + 1, n_bytes + run.len() - start));
    }
    if let Some((first, n_events, n_bytes)) = open {
        rows.push(finish_run(first, &mut run, n_events, n_bytes));
    }
    rows
}

fn finish_run(first: &SessionEvent, run: &mut Vec<u8>, n_events: usize, n_bytes: usize) -> EncodedRow {
    // Invariant: events write UTF-8 JSON, and the separators are ASCII.
    let text = String::from_utf8(std::mem::take(run)).expect("a run's records are UTF-8");
    let compressed = (text.len() >= COMPRESS_MIN_BYTES)
        .then(|| zstd::bulk::compress(text.as_bytes(), ZSTD_LEVEL).ok())
        .flatten()
        .filter(|blob| blob.len() < text.len());
    let (text, zstd) = match compressed {
        Some(blob) => (None, Some(blob)),
        None => (Some(text), None),
    };
    EncodedRow {
        seq: i64::try_from(first.seq).unwrap_or(i64::MAX),
        kind: first.kind.as_str().to_owned(),
        time: first.time,
        text,
        zstd,
        n_events: i32::try_from(n_events).unwrap_or(i32::MAX),
        n_bytes: n_bytes as i64,
    }
}

/// The events a row stores, in order, each handed to `each` with its line's length: its text, or
/// its frame decompressed (at most `n_events` records' bound), split into `n_events` lines, each
/// decoded as an event line. The error says why the row does not decode; `each`'s own error
/// stops the decode and is returned as it is.
pub(crate) fn decode_run<E>(
    text: Option<&str>,
    zstd: Option<&[u8]>,
    n_events: i32,
    mut each: impl FnMut(SessionEvent, usize) -> Result<(), E>,
) -> Result<(), RunError<E>> {
    let n_events = usize::try_from(n_events)
        .ok()
        .filter(|n| (1..=RUN_EVENTS).contains(n))
        .ok_or_else(|| RunError::Row(format!("the row says it holds {n_events} events")))?;
    // What a writer stores at most: one record, or a run closed once it reached `RUN_BYTES`
    // (every line but the last before that, the last one record).
    let bound = match n_events {
        1 => MAX_EVENT_BYTES,
        _ => RUN_BYTES + MAX_EVENT_BYTES,
    };
    // The columns are read in place from the row; only a decompressed run is a new buffer.
    let text: std::borrow::Cow<'_, str> = match (text, zstd) {
        (Some(text), None) => text.into(),
        (None, Some(blob)) => {
            let bytes = decompress(blob, bound).map_err(RunError::Row)?;
            String::from_utf8(bytes).map_err(|_| RunError::Row("the record is not UTF-8".to_owned()))?.into()
        }
        _ => return Err(RunError::Row("the row holds neither or both of record and record_zstd".to_owned())),
    };
    if n_events == 1 {
        let event = SessionEvent::from_json_line(&text).map_err(|error| RunError::Row(error.to_string()))?;
        return each(event, text.len()).map_err(RunError::Sink);
    }
    let mut lines = text.split('\n');
    for _ in 0..n_events {
        let Some(line) = lines.next() else {
            return Err(RunError::Row(format!("the row says it holds {n_events} events, and holds fewer")));
        };
        let event = SessionEvent::from_json_line(line).map_err(|error| RunError::Row(error.to_string()))?;
        each(event, line.len()).map_err(RunError::Sink)?;
    }
    if lines.next().is_some() {
        return Err(RunError::Row(format!("the row says it holds {n_events} events, and holds more")));
    }
    Ok(())
}

thread_local! {
    /// A decompression context per reading thread: creating one costs more than decompressing a
    /// run of a few kilobytes.
    static DECOMPRESSOR: RefCell<Option<zstd::bulk::Decompressor<'static>>> = const { RefCell::new(None) };
}

/// One zstd frame's content, at most `bound` bytes: in one call into a reused context when the
/// frame says its size (ours always do), else streamed.
fn decompress(blob: &[u8], bound: usize) -> Result<Vec<u8>, String> {
    let too_long = || format!("the record exceeds {bound} bytes");
    match zstd::zstd_safe::get_frame_content_size(blob) {
        Ok(Some(size)) if size > bound as u64 => Err(too_long()),
        Ok(Some(size)) => DECOMPRESSOR.with(|slot| {
            let mut slot = slot.borrow_mut();
            let decompressor = match &mut *slot {
                Some(decompressor) => decompressor,
                None => slot
                    .insert(zstd::bulk::Decompressor::new().map_err(|error| format!("no zstd decompressor: {error}"))?),
            };
            // A frame whose content is larger than it says fails here: the buffer holds no more.
            let mut bytes = Vec::with_capacity(size as usize);
            decompressor
                .decompress_to_buffer(blob, &mut bytes)
                .map_err(|error| format!("not a valid zstd frame: {error}"))?;
            if bytes.len() as u64 != size {
                return Err(format!("the zstd frame holds {} bytes, not the {size} it says", bytes.len()));
            }
            Ok(bytes)
        }),
        _ => {
            let decoder =
                zstd::stream::read::Decoder::new(blob).map_err(|error| format!("not a zstd frame: {error}"))?;
            let mut bytes = Vec::new();
            decoder
                .take(bound as u64 + 1)
                .read_to_end(&mut bytes)
                .map_err(|error| format!("not a valid zstd frame: {error}"))?;
            if bytes.len() > bound {
                return Err(too_long());
            }
            Ok(bytes)
        }
    }
}

/// Why [`decode_run`] stopped.
#[derive(Debug)]
pub(crate) enum RunError<E> {
    /// The row does not decode: why.
    Row(String),
    /// The callback failed.
    Sink(E),
}

#[cfg(test)]
mod tests {
    use session_core::JsonData;

    use super::*;

    fn event(seq: u64, text: &str) -> SessionEvent {
        SessionEvent::new("test/n", seq, seq as i64, JsonData::from_text(format!("{{\"t\":\"{text}\"}}")).unwrap())
    }

    fn decoded(row: EncodedRow) -> Vec<SessionEvent> {
        let mut events = Vec::new();
        decode_run(row.text.as_deref(), row.zstd.as_deref(), row.n_events, |event, _| {
            events.push(event);
            Ok::<(), ()>(())
        })
        .unwrap();
        events
    }

    #[test]
    fn runs_split_by_count_and_bytes_and_decode_back() {
        let small: Vec<SessionEvent> = (0..1_050).map(|seq| event(seq, "a\\nb")).collect();
        let refs: Vec<&SessionEvent> = small.iter().collect();
        let rows = encode_runs(&refs);
        assert_eq!(rows.iter().map(|row| row.n_events).collect::<Vec<_>>(), [512, 512, 26]);
        assert_eq!(rows.iter().map(|row| row.seq).collect::<Vec<_>>(), [0, 512, 1024]);
        // Runs of 4 KiB and more compress; the last, shorter one stays text.
        assert_eq!(rows.iter().map(|row| row.zstd.is_some()).collect::<Vec<_>>(), [true, true, false]);
        let total: i64 = small.iter().map(|event| event.encoded_len() as i64).sum();
        assert_eq!(rows.iter().map(|row| row.n_bytes).sum::<i64>(), total);
        let back: Vec<SessionEvent> = rows.into_iter().flat_map(decoded).collect();
        assert_eq!(back, small);

        let big: Vec<SessionEvent> = (0..5).map(|seq| event(seq, &"x".repeat(60_000))).collect();
        let refs: Vec<&SessionEvent> = big.iter().collect();
        let rows = encode_runs(&refs);
        assert_eq!(rows.iter().map(|row| row.n_events).collect::<Vec<_>>(), [3, 2]);
        assert_eq!(rows.into_iter().flat_map(decoded).collect::<Vec<_>>(), big);

        let one = [event(7, "z")];
        let rows = encode_runs(&[&one[0]]);
        let mut line = Vec::new();
        one[0].write_json(&mut line);
        assert_eq!(rows[0].text.as_deref().map(str::as_bytes), Some(line.as_slice()), "a run of one is its line");
    }

    #[test]
    fn a_line_with_a_raw_newline_is_a_run_of_its_own() {
        let pretty = SessionEvent::new("test/n", 1, 1, JsonData::from_text("{\n  \"a\": 1\n}").unwrap());
        let events = [event(0, "a"), pretty, event(2, "b"), event(3, "c")];
        let refs: Vec<&SessionEvent> = events.iter().collect();
        let rows = encode_runs(&refs);
        assert_eq!(rows.iter().map(|row| (row.seq, row.n_events)).collect::<Vec<_>>(), [(0, 1), (1, 1), (2, 2)]);
        let total: i64 = events.iter().map(|event| event.encoded_len() as i64).sum();
        assert_eq!(rows.iter().map(|row| row.n_bytes).sum::<i64>(), total);
        assert_eq!(rows.into_iter().flat_map(decoded).collect::<Vec<_>>(), events);
    }

    #[test]
    fn a_frame_larger_than_a_run_can_be_does_not_decode() {
        let over = RUN_BYTES + MAX_EVENT_BYTES + 1;
        // A frame that says it holds more than any run may: refused before anything is allocated.
        let mut blob = zstd::bulk::compress(&vec![b'x'; 1 << 20], 1).unwrap();
        assert!(zstd::zstd_safe::get_frame_content_size(&blob).unwrap().is_some());
        assert!(decompress(&blob, 1 << 19).is_err_and(|why| why.contains("exceeds")));
        blob.truncate(blob.len() - 1);
        assert!(decompress(&blob, over).is_err(), "a damaged frame");
        let huge = i32::try_from(RUN_EVENTS + 1).unwrap();
        let run = decode_run(Some("{}"), None, huge, |_, _| Ok::<(), ()>(()));
        assert!(matches!(run, Err(RunError::Row(why)) if why.contains("holds 513 events")));
    }

    #[test]
    fn a_row_that_miscounts_its_events_does_not_decode() {
        let events: Vec<SessionEvent> = (0..3).map(|seq| event(seq, "a")).collect();
        let refs: Vec<&SessionEvent> = events.iter().collect();
        let row = encode_runs(&refs).remove(0);
        let text = row.text.clone();
        let run = |n: i32| decode_run(text.as_deref(), None, n, |_, _| Ok::<(), ()>(()));
        assert!(run(3).is_ok());
        for n in [0, -1, 2, 4] {
            assert!(matches!(run(n), Err(RunError::Row(_))), "{n}");
        }
        let stop = decode_run(text.as_deref(), None, 3, |event, _| if event.seq == 1 { Err("stop") } else { Ok(()) });
        assert!(matches!(stop, Err(RunError::Sink("stop"))));
    }
}
