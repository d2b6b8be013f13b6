//! The row encodings of the `events` table (reference 05 §5): `data` as TEXT or one zstd frame,
//! the varint `source_event_seqs`, `surface_op` as JSON text, scalar rows (one event) and packed
//! rows (a run of chunk deltas, `ignorable = 0`), and the reference's packing of a batch.
//!
//! Packed rows reuse the JSONL format's chunk-row codec ([`session_persistence::ChunkRow`] and
//! its kin): a SQLite row's `data` is exactly the `data` object of a JSONL row, so both stores
//! expand runs with one decoder.

use std::{borrow::Borrow, fmt::Write, io::Read};

use rusqlite::types::{ToSqlOutput, ValueRef};
use session_core::{MAX_EVENT_BYTES, SessionEvent, StoredParts, SurfaceOp, json::MAX_SAFE_INTEGER};
use session_persistence::{ChunkKind, ChunkRow, MIN_RUN, Record, chunk_runs, decode_record};

/// `data` of at least this many bytes is stored as a zstd BLOB when that is shorter.
pub const COMPRESS_MIN_BYTES: usize = 4096;
/// The zstd level of `data` BLOBs.
pub const ZSTD_LEVEL: i32 = 3;
/// The most members one packed row holds.
pub const MAX_PACKED_MEMBERS: usize = 1024;
/// The most UTF-8 bytes a packed row's `data` holds.
pub const MAX_PACKED_DATA_BYTES: usize = 1 << 20;

/// A `data` value as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Data {
    Text(String),
    /// One zstd frame of the UTF-8 text.
    Blob(Vec<u8>),
}

impl rusqlite::ToSql for Data {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(match self {
            Data::Text(text) => ToSqlOutput::Borrowed(ValueRef::Text(text.as_bytes())),
            Data::Blob(blob) => ToSqlOutput::Borrowed(ValueRef::Blob(blob)),
        })
    }
}

/// §5.2: TEXT below 4 KiB; above, a zstd BLOB only when strictly shorter than the text.
pub(crate) fn encode_data(text: String) -> Data {
    if text.len() < COMPRESS_MIN_BYTES {
        return Data::Text(text);
    }
    match zstd::bulk::compress(text.as_bytes(), ZSTD_LEVEL) {
        Ok(blob) if blob.len() < text.len() => Data::Blob(blob),
        _ => Data::Text(text),
    }
}

/// The text of a stored `data` value: TEXT as is, a BLOB decompressed (at most `limit` bytes)
/// and decoded as strict UTF-8.
pub(crate) fn decode_data(data: Data, limit: usize) -> Result<String, String> {
    match data {
        Data::Text(text) => Ok(text),
        Data::Blob(blob) => {
            let decoder = zstd::stream::read::Decoder::new(blob.as_slice())
                .map_err(|error| format!("stored data is not a zstd frame: {error}"))?;
            let mut bytes = Vec::new();
            decoder
                .take((limit as u64).saturating_add(1))
                .read_to_end(&mut bytes)
                .map_err(|error| format!("stored data is not a valid zstd frame: {error}"))?;
            if bytes.len() > limit {
                return Err(format!("data exceeds {limit} UTF-8 bytes"));
            }
            String::from_utf8(bytes).map_err(|_| "stored data is not UTF-8".to_owned())
        }
    }
}

/// §5.5: the first value as an unsigned LEB128 varint, each later one as the ZigZag varint of
/// its difference from the previous one. An empty list is an empty BLOB.
pub(crate) fn encode_sources(sources: &[u64]) -> Vec<u8> {
    let mut out = Vec::with_capacity(sources.len() + 1);
    let mut previous: Option<u64> = None;
    for &value in sources {
        let coded = match previous {
            None => value,
            Some(previous) if value >= previous => 2 * (value - previous),
            Some(previous) => 2 * (previous - value) - 1,
        };
        write_varint(coded, &mut out);
        previous = Some(value);
    }
    out
}

fn write_varint(mut value: u64, out: &mut Vec<u8>) {
    loop {
        let byte = (value & 0x7f) as u8;
        value >>= 7;
        if value == 0 {
            out.push(byte);
            return;
        }
        out.push(byte | 0x80);
    }
}

fn malformed_sources(why: &str) -> String {
    format!("malformed source_event_seqs storage value: {why}")
}

/// Reads one strict varint at `*pos`: canonical, at most 9 bytes.
fn read_varint(bytes: &[u8], pos: &mut usize) -> Result<u64, String> {
    let mut value = 0u64;
    for idx in 0.. {
        if idx == 9 {
            return Err(malformed_sources("varint is out of range"));
        }
        let Some(&byte) = bytes.get(*pos) else {
            return Err(malformed_sources("truncated varint"));
        };
        *pos += 1;
        value |= u64::from(byte & 0x7f) << (7 * idx);
        if byte & 0x80 == 0 {
            if idx > 0 && byte == 0 {
                return Err(malformed_sources("non-canonical varint"));
            }
            return Ok(value);
        }
    }
    unreachable!("the loop returns by its ninth byte")
}

/// Decodes a `source_event_seqs` BLOB strictly (§5.5).
pub(crate) fn decode_sources(bytes: &[u8]) -> Result<Vec<u64>, String> {
    let mut values = Vec::new();
    let mut pos = 0;
    let mut previous: Option<u64> = None;
    while pos < bytes.len() {
        let coded = read_varint(bytes, &mut pos)?;
        let value = match previous {
            None if coded > MAX_SAFE_INTEGER => return Err(malformed_sources("varint is out of range")),
            None => coded,
            Some(_) if coded > 2 * MAX_SAFE_INTEGER => return Err(malformed_sources("varint is out of range")),
            Some(previous) if coded.is_multiple_of(2) => previous + coded / 2,
            Some(previous) => previous
                .checked_sub(coded.div_ceil(2))
                .ok_or_else(|| malformed_sources("decoded seq is out of range"))?,
        };
        if value > MAX_SAFE_INTEGER {
            return Err(malformed_sources("decoded seq is out of range"));
        }
        values.push(value);
        previous = Some(value);
    }
    Ok(values)
}

/// A scalar row's decoded columns, written as the event's canonical JSON line.
struct LineParts<'a> {
    kind: &'a str,
    seq: u64,
    time: i64,
    data: &'a str,
    sources: Option<&'a [u64]>,
    surface_op: Option<SurfaceOp>,
    ignorable: Option<i64>,
}

impl LineParts<'_> {
    fn write(&self, line: &mut String) {
        line.reserve(self.data.len() + self.kind.len() + 64);
        line.push_str("{\"type\":");
        if self.kind.bytes().all(|byte| byte.is_ascii_alphanumeric() || b"/-_.:".contains(&byte)) {
            // Nothing to escape: the string's JSON is itself in quotes.
            line.push('"');
            line.push_str(self.kind);
            line.push('"');
        } else {
            // Invariant: serializing a string into a string cannot fail.
            line.push_str(&serde_json::to_string(self.kind).expect("a string serializes"));
        }
        let _ = write!(line, ",\"seq\":{},\"time\":{},\"data\":", self.seq, self.time);
        line.push_str(self.data);
        if let Some(sources) = self.sources {
            line.push_str(",\"sourceEventSeqs\":[");
            for (idx, source) in sources.iter().enumerate() {
                if idx > 0 {
                    line.push(',');
                }
                let _ = write!(line, "{source}");
            }
            line.push(']');
        }
        if let Some(op) = self.surface_op {
            line.push_str(",\"surfaceOp\":");
            line.push_str(&encode_surface_op(op));
        }
        if self.ignorable == Some(1) {
            line.push_str(",\"ignorable\":true");
        }
        line.push('}');
    }
}

/// The stored `surface_op` of an append, as the reference writes it.
const APPEND_JSON: &str = "\"append\"";

/// The largest line buffer a thread keeps between rows.
const LINE_KEEP_BYTES: usize = 64 << 10;

thread_local! {
    /// The line a scalar row is decoded through, kept per thread between rows.
    static LINE: std::cell::RefCell<String> = const { std::cell::RefCell::new(String::new()) };
}

/// `surface_op` as the reference writes it: `JSON.stringify(surfaceOp)`.
pub(crate) fn encode_surface_op(op: SurfaceOp) -> String {
    match op {
        SurfaceOp::Append => APPEND_JSON.to_owned(),
        SurfaceOp::Replace { start, end } => format!(r#"{{"op":"replace","start":{start},"end":{end}}}"#),
    }
}

/// One row to insert.
#[derive(Debug)]
pub(crate) struct NewRow<'a> {
    pub(crate) seq: u64,
    pub(crate) kind: &'a str,
    pub(crate) time: i64,
    pub(crate) data: Data,
    pub(crate) sources: Option<Vec<u8>>,
    pub(crate) surface_op: Option<String>,
    /// `Some(1)` for an ignorable event, `Some(0)` for a packed row, else `None`.
    pub(crate) ignorable: Option<i64>,
}

/// A scalar row: one event (§5.3).
pub(crate) fn scalar_row(event: &SessionEvent) -> NewRow<'_> {
    NewRow {
        seq: event.seq,
        kind: event.kind.as_str(),
        time: event.time,
        data: encode_data(event.data.as_str().to_owned()),
        sources: event.source_event_seqs.as_deref().map(encode_sources),
        surface_op: event.surface_op.map(encode_surface_op),
        ignorable: event.ignorable.then_some(1),
    }
}

fn packed_data(row: &ChunkRow<'_>) -> String {
    let mut out = Vec::new();
    row.write_data_json(&mut out);
    // Invariant: the row is written from JSON tokens and ASCII punctuation.
    String::from_utf8(out).expect("a chunk row's JSON is UTF-8")
}

fn packed_row(row: &ChunkRow<'_>, data: String) -> NewRow<'static> {
    NewRow {
        seq: row.seq0,
        kind: row.kind.tag(),
        time: row.time0,
        data: encode_data(data),
        sources: None,
        surface_op: None,
        ignorable: Some(0),
    }
}

/// The rows of one append batch, in seq order (§5.4 "Writing"): each run of at least three chunk
/// deltas is cut greedily into packed rows of up to 1,024 members and 1 MiB of `data` (the
/// largest member count that fits, found by bisection, when 1,024 do not); a member that cannot
/// start a row of three goes out as a scalar row, as does a remainder shorter than three.
pub(crate) fn pack_batch<E: Borrow<SessionEvent>>(events: &[E]) -> Vec<NewRow<'_>> {
    let mut rows = Vec::with_capacity(events.len());
    let mut cursor = 0;
    for record in chunk_runs(events) {
        match record {
            Record::Event(event) => {
                rows.push(scalar_row(event));
                cursor += 1;
            }
            Record::Chunks(run) => {
                let members = &events[cursor..cursor + run.members.len()];
                cursor += run.members.len();
                cut_run(&run, members, &mut rows);
            }
        }
    }
    rows
}

fn cut_run<'a, E: Borrow<SessionEvent>>(run: &ChunkRow<'_>, members: &'a [E], rows: &mut Vec<NewRow<'a>>) {
    let n_members = run.members.len();
    let fitting = |start: usize, len: usize| {
        let data = packed_data(&run.slice(start, len));
        (data.len() <= MAX_PACKED_DATA_BYTES).then_some(data)
    };
    let mut start = 0;
    while n_members - start >= MIN_RUN {
        let take = MAX_PACKED_MEMBERS.min(n_members - start);
        if let Some(data) = fitting(start, take) {
            rows.push(packed_row(&run.slice(start, take), data));
            start += take;
            continue;
        }
        let Some(mut best) = fitting(start, MIN_RUN) else {
            rows.push(scalar_row(members[start].borrow()));
            start += 1;
            continue;
        };
        // `lo` members fit, `hi` do not.
        let (mut lo, mut hi) = (MIN_RUN, take);
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            match fitting(start, mid) {
                Some(data) => (lo, best) = (mid, data),
                None => hi = mid,
            }
        }
        rows.push(packed_row(&run.slice(start, lo), best));
        start += lo;
    }
    rows.extend(members[start..].iter().map(|event| scalar_row(event.borrow())));
}

/// One `events` row as read, its columns checked (§5.1).
#[derive(Debug)]
pub(crate) struct StoredRow {
    pub(crate) seq: u64,
    pub(crate) kind: String,
    pub(crate) time: i64,
    pub(crate) data: Data,
    pub(crate) sources: Option<Vec<u8>>,
    pub(crate) surface_op: Option<String>,
    pub(crate) ignorable: Option<i64>,
}

/// The columns of one result row: a row of a running statement, or one copied out of it to be
/// decoded on another thread ([`crate::ahead`]).
pub(crate) trait Columns {
    /// The value of column `idx`.
    fn value(&self, idx: usize) -> rusqlite::Result<ValueRef<'_>>;
}

impl Columns for rusqlite::Row<'_> {
    fn value(&self, idx: usize) -> rusqlite::Result<ValueRef<'_>> {
        self.get_ref(idx)
    }
}

/// The columns every row query selects, in [`StoredRow::read`]'s order.
pub(crate) const ROW_COLUMNS: &str = "seq, type, time, data, source_event_seqs, surface_op, ignorable";

/// How many columns [`ROW_COLUMNS`] names.
pub(crate) const ROW_COLUMN_COUNT: usize = 7;

fn safe_integer(value: ValueRef<'_>, column: &str) -> Result<i64, String> {
    match value {
        ValueRef::Integer(n) if n.unsigned_abs() <= MAX_SAFE_INTEGER => Ok(n),
        _ => Err(format!("stored {column} must be a safe integer")),
    }
}

fn text(value: ValueRef<'_>, column: &str) -> Result<String, String> {
    match value {
        ValueRef::Text(bytes) => {
            String::from_utf8(bytes.to_vec()).map_err(|_| format!("stored {column} must be a string"))
        }
        _ => Err(format!("stored {column} must be a string")),
    }
}

/// The event of a plain scalar row of [`ROW_COLUMNS`], decoded from the columns in place (no
/// copy of its text before the event's own): every column as the reference writes it for a
/// common event, `data` as text. `None` for any other row, which [`StoredRow::read`] and
/// [`StoredRow::decode`] then take (and refuse or decode) as before, so the answer is the same.
pub(crate) fn decode_plain_row(row: &impl Columns) -> Option<SessionEvent> {
    let get = |idx: usize| row.value(idx).ok();
    let ValueRef::Integer(seq) = get(0)? else { return None };
    let ValueRef::Text(kind) = get(1)? else { return None };
    let ValueRef::Integer(time) = get(2)? else { return None };
    let ValueRef::Text(data) = get(3)? else { return None };
    let sources = match get(4)? {
        ValueRef::Null => None,
        ValueRef::Blob(bytes) => Some(decode_sources(bytes).ok()?),
        _ => return None,
    };
    let surface_op = match get(5)? {
        ValueRef::Null => None,
        ValueRef::Text(text) if text == APPEND_JSON.as_bytes() => Some(SurfaceOp::Append),
        _ => return None,
    };
    let ignorable = match get(6)? {
        ValueRef::Null => false,
        ValueRef::Integer(1) => true,
        _ => return None,
    };
    if time.unsigned_abs() > MAX_SAFE_INTEGER {
        return None;
    }
    SessionEvent::from_stored_parts(StoredParts {
        kind: std::str::from_utf8(kind).ok()?,
        seq: u64::try_from(seq).ok()?,
        time,
        data: std::str::from_utf8(data).ok()?,
        sources: sources.as_deref(),
        surface_op,
        ignorable,
    })
}

impl StoredRow {
    /// Reads and checks the columns of [`ROW_COLUMNS`]. A failure is the reference's message,
    /// fatal for the read whatever the row's place (§5.1).
    pub(crate) fn read(row: &impl Columns) -> Result<StoredRow, RowError> {
        StoredRow::read_at(row, 0)
    }

    /// [`read`](Self::read) of the [`ROW_COLUMNS`] that start at column `first` of `row`.
    pub(crate) fn read_at(row: &impl Columns, first: usize) -> Result<StoredRow, RowError> {
        let get = |idx: usize| row.value(first + idx).map_err(RowError::Sqlite);
        let seq = safe_integer(get(0)?, "seq").map_err(RowError::Column)?;
        let seq = u64::try_from(seq).map_err(|_| RowError::Column("stored seq must be non-negative".to_owned()))?;
        let kind = text(get(1)?, "type").map_err(RowError::Column)?;
        if kind.is_empty() {
            return Err(RowError::Column("stored type must not be empty".to_owned()));
        }
        let time = safe_integer(get(2)?, "time").map_err(RowError::Column)?;
        let data = match get(3)? {
            ValueRef::Text(bytes) => match String::from_utf8(bytes.to_vec()) {
                Ok(text) => Data::Text(text),
                // Text that is not UTF-8 cannot be a JSON text: the row does not decode.
                Err(error) => Data::Blob(error.into_bytes()),
            },
            ValueRef::Blob(bytes) => Data::Blob(bytes.to_vec()),
            _ => return Err(RowError::Column("stored data must be a string or blob".to_owned())),
        };
        let sources = match get(4)? {
            ValueRef::Null => None,
            ValueRef::Blob(bytes) => Some(bytes.to_vec()),
            _ => return Err(RowError::Column("stored source_event_seqs must be a blob or null".to_owned())),
        };
        let surface_op = match get(5)? {
            ValueRef::Null => None,
            other => Some(
                text(other, "surface_op")
                    .map_err(|_| RowError::Column("stored surface_op must be a string or null".to_owned()))?,
            ),
        };
        let ignorable = match get(6)? {
            ValueRef::Null => None,
            ValueRef::Integer(flag @ (0 | 1)) => Some(flag),
            _ => return Err(RowError::Column("stored event ignorable must be 0, 1, or null".to_owned())),
        };
        Ok(StoredRow { seq, kind, time, data, sources, surface_op, ignorable })
    }

    /// Whether this is a packed row: `ignorable = 0` is the discriminator.
    pub(crate) fn is_packed(&self) -> bool {
        self.ignorable == Some(0)
    }

    /// Decodes the row into its events, appended to `out` (§5.3, §5.4). On error `out` is
    /// unchanged and the message says why (the scan turns it into torn or corrupt, §7).
    pub(crate) fn decode(self, out: &mut Vec<SessionEvent>) -> Result<(), String> {
        if self.is_packed() {
            self.decode_packed(out)
        } else {
            out.push(self.decode_scalar()?);
            Ok(())
        }
    }

    /// A scalar row as the event's canonical JSON line, decoded by the same strict (and fast)
    /// path as a JSONL line, so message payloads are verified as they are decoded.
    fn decode_scalar(self) -> Result<SessionEvent, String> {
        let StoredRow { seq, kind, time, data, sources, surface_op, ignorable } = self;
        let sources = sources.as_deref().map(decode_sources).transpose()?;
        let surface_op = match surface_op.as_deref() {
            None => None,
            // What the reference writes for nearly every surface event, without a JSON parse.
            Some(APPEND_JSON) => Some(SurfaceOp::Append),
            Some(text) => {
                let value: serde_json::Value =
                    serde_json::from_str(text).map_err(|error| format!("stored surface_op is not JSON: {error}"))?;
                Some(SurfaceOp::from_json(&value).map_err(|why| format!("stored surface_op {why}"))?)
            }
        };
        let data = decode_data(data, MAX_EVENT_BYTES)?;
        // The common row becomes its event without its line being written and scanned again.
        let stored = StoredParts {
            kind: &kind,
            seq,
            time,
            data: &data,
            sources: sources.as_deref(),
            surface_op,
            ignorable: ignorable == Some(1),
        };
        if let Some(event) = SessionEvent::from_stored_parts(stored) {
            return Ok(event);
        }
        let parts =
            LineParts { kind: &kind, seq, time, data: &data, sources: sources.as_deref(), surface_op, ignorable };
        // One line buffer per thread, reused from row to row.
        LINE.with_borrow_mut(|line| {
            line.clear();
            parts.write(line);
            let decoded = SessionEvent::from_json_line(line).map_err(|error| error.to_string());
            if line.capacity() > LINE_KEEP_BYTES {
                // A large event's buffer is not kept for the thread's life.
                *line = String::new();
            }
            decoded
        })
    }

    fn decode_packed(self, out: &mut Vec<SessionEvent>) -> Result<(), String> {
        let malformed = |why: &str| format!("malformed {} storage row: {why}", self.kind);
        let Some(kind) = ChunkKind::from_tag(&self.kind) else {
            return Err(malformed("packed discriminator requires a chunk tag"));
        };
        if self.sources.is_some() || self.surface_op.is_some() {
            return Err(malformed("packed surface fields must be null"));
        }
        let data = decode_data(self.data, MAX_PACKED_DATA_BYTES).map_err(|why| malformed(&why))?;
        if data.len() > MAX_PACKED_DATA_BYTES {
            return Err(malformed(&format!("data exceeds {MAX_PACKED_DATA_BYTES} UTF-8 bytes")));
        }
        let line = format!(r#"{{"type":"{}","seq0":{},"time0":{},"data":{data}}}"#, kind.tag(), self.seq, self.time);
        let before = out.len();
        decode_record(&line, out).map_err(|error| error.to_string())?;
        let n_members = out.len() - before;
        if !(MIN_RUN..=MAX_PACKED_MEMBERS).contains(&n_members) {
            out.truncate(before);
            let payload = if kind == ChunkKind::ToolCall { "args" } else { "texts" };
            return Err(malformed(&format!("{payload} must contain {MIN_RUN}..{MAX_PACKED_MEMBERS} strings")));
        }
        Ok(())
    }
}

/// Why a row could not be read at all.
#[derive(Debug)]
pub(crate) enum RowError {
    /// A column has the wrong type or range (§5.1): fatal for the read.
    Column(String),
    Sqlite(rusqlite::Error),
}

impl From<rusqlite::Error> for RowError {
    fn from(error: rusqlite::Error) -> RowError {
        RowError::Sqlite(error)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The line a scalar row is decoded through is the event's canonical JSON whatever its type's
    /// characters (the plain ones are quoted directly, the others through `serde_json`).
    #[test]
    fn a_row_line_is_the_canonical_json_of_its_event() {
        for kind in ["turn/start", "host/custom-1.2:x_y", "quote\"d", "é/uni", "tab\there", "back\\slash"] {
            for surface_op in [None, Some(SurfaceOp::Append), Some(SurfaceOp::Replace { start: 2, end: 5 })] {
                let parts = LineParts {
                    kind,
                    seq: 7,
                    time: -3,
                    data: r#"{"a":[1,"x"]}"#,
                    sources: Some(&[1, 4]),
                    surface_op,
                    ignorable: Some(1),
                };
                let mut line = String::new();
                parts.write(&mut line);
                let mut expected = format!(
                    r#"{{"type":{},"seq":7,"time":-3,"data":{{"a":[1,"x"]}},"sourceEventSeqs":[1,4]"#,
                    serde_json::to_string(kind).unwrap()
                );
                if let Some(op) = surface_op {
                    expected.push_str(&format!(r#","surfaceOp":{}"#, encode_surface_op(op)));
                }
                expected.push_str(r#","ignorable":true}"#);
                assert_eq!(line, expected, "{kind:?} {surface_op:?}");
            }
        }
        assert_eq!(encode_surface_op(SurfaceOp::Append), APPEND_JSON);
    }
}
