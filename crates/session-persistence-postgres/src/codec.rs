//! An event row's record: the event's canonical JSON line, byte for byte what a JSONL log holds
//! (so key order and number spelling survive), as `text`, or from [`COMPRESS_MIN_BYTES`] as one
//! zstd frame when that is shorter.

use std::io::Read;

use session_core::{MAX_EVENT_BYTES, SessionEvent};

/// A record of at least this many bytes is stored compressed when that is shorter.
pub const COMPRESS_MIN_BYTES: usize = 4096;
/// The zstd level of compressed records.
pub const ZSTD_LEVEL: i32 = 3;

/// One event as its row stores it.
#[derive(Debug)]
pub(crate) struct EncodedEvent {
    pub(crate) seq: i64,
    pub(crate) kind: String,
    pub(crate) time: i64,
    pub(crate) text: Option<String>,
    pub(crate) zstd: Option<Vec<u8>>,
    /// The record's length as text.
    pub(crate) n_bytes: i64,
}

pub(crate) fn encode(event: &SessionEvent) -> EncodedEvent {
    let mut line = Vec::with_capacity(event.encoded_len());
    event.write_json(&mut line);
    let n_bytes = line.len() as i64;
    // Invariant: an event writes UTF-8 JSON.
    let line = String::from_utf8(line).expect("an event record is UTF-8");
    let compressed = (line.len() >= COMPRESS_MIN_BYTES)
        .then(|| zstd::bulk::compress(line.as_bytes(), ZSTD_LEVEL).ok())
        .flatten()
        .filter(|blob| blob.len() < line.len());
    let seq = i64::try_from(event.seq).unwrap_or(i64::MAX);
    let (text, zstd) = match compressed {
        Some(blob) => (None, Some(blob)),
        None => (Some(line), None),
    };
    EncodedEvent { seq, kind: event.kind.as_str().to_owned(), time: event.time, text, zstd, n_bytes }
}

/// The event a row stores: its text, or its frame decompressed (at most one record's bound),
/// decoded as an event line. The error says why the row does not decode.
pub(crate) fn decode(text: Option<String>, zstd: Option<Vec<u8>>) -> Result<SessionEvent, String> {
    let line = match (text, zstd) {
        (Some(text), None) => text,
        (None, Some(blob)) => {
            let decoder = zstd::stream::read::Decoder::new(blob.as_slice())
                .map_err(|error| format!("not a zstd frame: {error}"))?;
            let mut bytes = Vec::new();
            decoder
                .take(MAX_EVENT_BYTES as u64 + 1)
                .read_to_end(&mut bytes)
                .map_err(|error| format!("not a valid zstd frame: {error}"))?;
            if bytes.len() > MAX_EVENT_BYTES {
                return Err(format!("the record exceeds {MAX_EVENT_BYTES} bytes"));
            }
            String::from_utf8(bytes).map_err(|_| "the record is not UTF-8".to_owned())?
        }
        _ => return Err("the row holds neither or both of record and record_zstd".to_owned()),
    };
    SessionEvent::from_json_line(&line).map_err(|error| error.to_string())
}
