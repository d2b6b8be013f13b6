//! Packed chunk rows (reference 01 §2.9): a run of streamed `assistant/chunk` deltas stored as
//! one `text-chunks`, `reasoning-chunks` or `tool-call-chunks` line, and expanded back on read.
//!
//! Only exact, whitelisted event shapes pack; everything else is written verbatim, so an unknown
//! field costs compression, never data. Numbers and strings move between events and rows as raw
//! JSON tokens, so expansion reproduces the member events' values exactly.

use std::{borrow::Borrow, fmt};

use serde_json::value::RawValue;
use session_core::{JsonData, SessionEvent, json::MAX_SAFE_INTEGER};

use super::fields::{Fields, is_number, is_str, is_string, parse_fields, parse_raw_array, safe_i64, safe_u64};

/// The fewest members a run needs to be packed; shorter runs stay one event per line.
pub const MIN_RUN: usize = 3;

/// A run is cut after this many members, so one row stays a bounded line.
const MAX_RUN_MEMBERS: usize = 1024;

/// A run is cut once its payload tokens reach this many bytes.
const MAX_RUN_PAYLOAD_BYTES: usize = 1 << 20;

/// A row's bytes besides its raw tokens, `dt` and members: `{"type":"tool-call-chunks","seq0":`
/// through `]}}`, with a 16-digit `seq0` and a 17-character `time0`, is 144 bytes.
const ROW_OVERHEAD_BYTES: usize = 192;

/// What each member after the first adds besides its payload: a comma before it and its time
/// gap (at most 17 characters, since a gap is a safe integer) with a comma.
const MEMBER_OVERHEAD_BYTES: usize = 19;

const CHUNK_EVENT: &str = "assistant/chunk";

/// Which delta a row packs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ChunkKind {
    /// `text-delta` chunks; the row's payload is `texts`.
    Text,
    /// `reasoning-delta` chunks; the row's payload is `texts`.
    Reasoning,
    /// `tool-call-delta` chunks of one call; the row's payload is `args`, plus the call's `id`
    /// and, when every member has one, its `name`.
    ToolCall,
}

impl ChunkKind {
    /// The row's `type` tag. Tags have no slash, so they never collide with an event type.
    pub fn tag(self) -> &'static str {
        match self {
            ChunkKind::Text => "text-chunks",
            ChunkKind::Reasoning => "reasoning-chunks",
            ChunkKind::ToolCall => "tool-call-chunks",
        }
    }

    /// The kind whose [`tag`](ChunkKind::tag) is `tag`; `None` for any other string (an event
    /// type, say).
    pub fn from_tag(tag: &str) -> Option<ChunkKind> {
        match tag {
            "text-chunks" => Some(ChunkKind::Text),
            "reasoning-chunks" => Some(ChunkKind::Reasoning),
            "tool-call-chunks" => Some(ChunkKind::ToolCall),
            _ => None,
        }
    }

    /// The `chunk.type` of the events this kind packs.
    fn delta_type(self) -> &'static str {
        match self {
            ChunkKind::Text => "text-delta",
            ChunkKind::Reasoning => "reasoning-delta",
            ChunkKind::ToolCall => "tool-call-delta",
        }
    }

    fn payload_key(self) -> &'static str {
        match self {
            ChunkKind::Text | ChunkKind::Reasoning => "texts",
            ChunkKind::ToolCall => "args",
        }
    }
}

/// One packed run. Member `k` has seq `seq0 + k` and time `time0 + dt[0] + … + dt[k-1]`.
#[derive(Debug, Clone)]
pub struct ChunkRow<'a> {
    /// Which delta the members are.
    pub kind: ChunkKind,
    /// The first member's `seq`.
    pub seq0: u64,
    /// The first member's `time` (milliseconds since the Unix epoch, as in the events).
    pub time0: i64,
    /// `turn`, `step` and `index` as the raw JSON numbers of the member events.
    pub turn: &'a RawValue,
    /// The members' `step`, a raw JSON number.
    pub step: &'a RawValue,
    /// The members' chunk `index`, a raw JSON number.
    pub index: &'a RawValue,
    /// Time gaps between consecutive members; one fewer than the members, possibly negative.
    pub dt: Vec<i64>,
    /// Tool-call rows only: the call id and, when every member carries one, the tool name.
    pub id: Option<&'a RawValue>,
    /// Tool-call rows only: the tool name, a raw JSON string, when every member carries one.
    pub name: Option<&'a RawValue>,
    /// Each member's text or arguments fragment, as a raw JSON string.
    pub members: Vec<&'a RawValue>,
}

/// One storage line: an event written verbatim, or a packed run.
#[derive(Debug, Clone)]
pub enum Record<'a> {
    /// An event stored as its own line, exactly as it serializes.
    Event(&'a SessionEvent),
    /// A run of at least [`MIN_RUN`] chunk events stored as one row.
    Chunks(ChunkRow<'a>),
}

impl Record<'_> {
    /// Appends the record's JSON (without a newline) to `out`.
    pub fn write_json(&self, out: &mut Vec<u8>) {
        match self {
            Record::Event(event) => event.write_json(out),
            Record::Chunks(row) => row.write_json(out),
        }
    }
}

impl ChunkRow<'_> {
    fn write_json(&self, out: &mut Vec<u8>) {
        use std::io::Write;
        let _ = write!(out, r#"{{"type":"{}","seq0":{},"time0":{},"data":"#, self.kind.tag(), self.seq0, self.time0);
        self.write_data_json(out);
        out.push(b'}');
    }

    /// Appends the row's `data` object alone: `{"turn","step","index","dt","id"?,"name"?,"texts"|"args"}`,
    /// the run object a SQLite `events` row stores in its `data` column.
    pub fn write_data_json(&self, out: &mut Vec<u8>) {
        use std::io::Write;
        let _ = write!(
            out,
            r#"{{"turn":{},"step":{},"index":{},"dt":["#,
            self.turn.get(),
            self.step.get(),
            self.index.get(),
        );
        for (k, gap) in self.dt.iter().enumerate() {
            if k > 0 {
                out.push(b',');
            }
            let _ = write!(out, "{gap}");
        }
        out.extend_from_slice(b"]");
        if let Some(id) = self.id {
            out.extend_from_slice(b",\"id\":");
            out.extend_from_slice(id.get().as_bytes());
        }
        if let Some(name) = self.name {
            out.extend_from_slice(b",\"name\":");
            out.extend_from_slice(name.get().as_bytes());
        }
        let _ = write!(out, r#","{}":["#, self.kind.payload_key());
        for (k, member) in self.members.iter().enumerate() {
            if k > 0 {
                out.push(b',');
            }
            out.extend_from_slice(member.get().as_bytes());
        }
        out.extend_from_slice(b"]}");
    }

    /// The members `start..start + len` as a row of their own: seq and time move to the first
    /// of them. Panics if the range is not inside the row (a caller's bug).
    pub fn slice(&self, start: usize, len: usize) -> Self {
        assert!(len > 0 && start + len <= self.members.len(), "a row slice lies inside the row");
        ChunkRow {
            seq0: self.seq0 + start as u64,
            time0: self.time0 + self.dt[..start].iter().sum::<i64>(),
            dt: self.dt[start..start + len - 1].to_vec(),
            members: self.members[start..start + len].to_vec(),
            ..self.clone()
        }
    }
}

/// A run member: a whitelisted delta event, seen through raw tokens of its data.
#[derive(Debug, Clone, Copy)]
struct Member<'a> {
    kind: ChunkKind,
    seq: u64,
    time: i64,
    turn: &'a RawValue,
    step: &'a RawValue,
    index: &'a RawValue,
    id: Option<&'a RawValue>,
    name: Option<&'a RawValue>,
    payload: &'a RawValue,
}

const DATA_KEYS: [&str; 3] = ["turn", "step", "chunk"];
const CHUNK_KEYS: [&str; 6] = ["type", "index", "text", "id", "name", "argumentsDelta"];

/// The member view of `event` when its whole shape is whitelisted, else `None` (store verbatim).
fn classify(event: &SessionEvent) -> Option<Member<'_>> {
    if !event.is(CHUNK_EVENT) || event.source_event_seqs.is_some() || event.surface_op.is_some() || event.ignorable {
        return None;
    }
    if event.seq > MAX_SAFE_INTEGER || event.time.unsigned_abs() > MAX_SAFE_INTEGER {
        return None;
    }
    let data: Fields<'_, 3> = parse_fields(event.data.as_str(), &DATA_KEYS).ok()?;
    if !data.has_exactly(&[0, 1, 2]) {
        return None;
    }
    let (turn, step, chunk) = (data.get(0)?, data.get(1)?, data.get(2)?);
    if !is_number(turn) || !is_number(step) || !chunk.get().starts_with('{') {
        return None;
    }
    let chunk: Fields<'_, 6> = parse_fields(chunk.get(), &CHUNK_KEYS).ok()?;
    let (kind_token, index) = (chunk.get(0)?, chunk.get(1)?);
    if !is_number(index) {
        return None;
    }
    let string = |slot: usize| chunk.get(slot).filter(|raw| is_string(raw));
    let (kind, payload, id, name) = if is_str(kind_token, "text-delta") || is_str(kind_token, "reasoning-delta") {
        let kind = if is_str(kind_token, "text-delta") { ChunkKind::Text } else { ChunkKind::Reasoning };
        if !chunk.has_exactly(&[0, 1, 2]) {
            return None;
        }
        (kind, string(2)?, None, None)
    } else if is_str(kind_token, "tool-call-delta") {
        let with_name = chunk.has_exactly(&[0, 1, 3, 4, 5]);
        if !with_name && !chunk.has_exactly(&[0, 1, 3, 5]) {
            return None;
        }
        let name = if with_name { Some(string(4)?) } else { None };
        (ChunkKind::ToolCall, string(5)?, Some(string(3)?), name)
    } else {
        return None;
    };
    Some(Member { kind, seq: event.seq, time: event.time, turn, step, index, id, name, payload })
}

/// Whether `next` extends a run ending in `prev`. Raw tokens compare by text, so a run never
/// merges members whose values would expand differently.
fn continues(prev: &Member<'_>, next: &Member<'_>) -> bool {
    next.kind == prev.kind
        && next.seq == prev.seq + 1
        && (next.time - prev.time).unsigned_abs() <= MAX_SAFE_INTEGER
        && next.turn.get() == prev.turn.get()
        && next.step.get() == prev.step.get()
        && next.index.get() == prev.index.get()
        && next.id.map(RawValue::get) == prev.id.map(RawValue::get)
        && next.name.map(RawValue::get) == prev.name.map(RawValue::get)
}

impl Member<'_> {
    /// An upper bound of the bytes of a row that starts with this member.
    fn first_row_bytes(&self) -> usize {
        let tokens = [Some(self.turn), Some(self.step), Some(self.index), self.id, self.name, Some(self.payload)];
        ROW_OVERHEAD_BYTES + tokens.iter().flatten().map(|raw| raw.get().len()).sum::<usize>()
    }
}

/// Packs a batch for storage: each run of at least [`MIN_RUN`] consecutive same-block deltas
/// becomes one [`ChunkRow`]; every other event passes through verbatim, in order.
///
/// A row never encodes to more than [`MAX_RECORD_BYTES`](super::MAX_RECORD_BYTES): a run is cut
/// before a member that could take it over, so packing never turns events a reader can hold
/// into a line it cannot.
pub fn pack_chunk_runs<E: Borrow<SessionEvent>>(events: &[E]) -> Vec<Record<'_>> {
    pack_chunk_runs_within(events, super::MAX_RECORD_BYTES)
}

/// [`pack_chunk_runs`] with rows of at most `max_row_bytes`.
pub(crate) fn pack_chunk_runs_within<E: Borrow<SessionEvent>>(events: &[E], max_row_bytes: usize) -> Vec<Record<'_>> {
    pack_runs(
        events,
        RunLimits { max_members: MAX_RUN_MEMBERS, max_payload_bytes: MAX_RUN_PAYLOAD_BYTES, max_row_bytes },
    )
}

/// The runs of chunk deltas in `events`, each packed whole into one [`ChunkRow`]: a run of at
/// least [`MIN_RUN`] consecutive deltas of one block (same kind, turn, step, index and, for tool
/// calls, call id and name) with consecutive seqs. Shorter runs and every other event pass
/// through verbatim as [`Record::Event`], in order.
///
/// Unlike the JSONL writer's packing, no run is cut by a member count or a size, so a backend
/// with row limits of its own (the SQLite store's) cuts each row with [`ChunkRow::slice`].
pub fn chunk_runs<E: Borrow<SessionEvent>>(events: &[E]) -> Vec<Record<'_>> {
    pack_runs(events, RunLimits { max_members: usize::MAX, max_payload_bytes: usize::MAX, max_row_bytes: usize::MAX })
}

/// Where a run is cut into rows.
#[derive(Debug, Clone, Copy)]
struct RunLimits {
    max_members: usize,
    max_payload_bytes: usize,
    max_row_bytes: usize,
}

fn pack_runs<E: Borrow<SessionEvent>>(events: &[E], limits: RunLimits) -> Vec<Record<'_>> {
    let RunLimits { max_members, max_payload_bytes, max_row_bytes } = limits;
    let mut records = Vec::with_capacity(events.len());
    let mut run: Vec<(&SessionEvent, Member<'_>)> = Vec::new();
    let mut run_bytes = 0;
    // An upper bound of the row the run would encode to.
    let mut row_bytes: usize = 0;
    for event in events {
        let event = event.borrow();
        let Some(member) = classify(event) else {
            flush_run(&mut run, &mut records);
            records.push(Record::Event(event));
            continue;
        };
        let added = member.payload.get().len() + MEMBER_OVERHEAD_BYTES;
        let extends = run.last().is_some_and(|(_, last)| continues(last, &member))
            && run.len() < max_members
            && run_bytes < max_payload_bytes
            && row_bytes.saturating_add(added) <= max_row_bytes;
        if extends {
            row_bytes += added;
        } else {
            flush_run(&mut run, &mut records);
            run_bytes = 0;
            row_bytes = member.first_row_bytes();
        }
        run_bytes += member.payload.get().len();
        run.push((event, member));
    }
    flush_run(&mut run, &mut records);
    records
}

fn flush_run<'a>(run: &mut Vec<(&'a SessionEvent, Member<'a>)>, records: &mut Vec<Record<'a>>) {
    if run.len() < MIN_RUN {
        records.extend(run.drain(..).map(|(event, _)| Record::Event(event)));
        return;
    }
    let first = run[0].1;
    let row = ChunkRow {
        kind: first.kind,
        seq0: first.seq,
        time0: first.time,
        turn: first.turn,
        step: first.step,
        index: first.index,
        dt: run.windows(2).map(|pair| pair[1].1.time - pair[0].1.time).collect(),
        id: first.id,
        name: first.name,
        members: run.iter().map(|(_, member)| member.payload).collect(),
    };
    run.clear();
    records.push(Record::Chunks(row));
}

/// Why a storage line does not decode. For a malformed row the message is the reference's
/// `malformed <tag> storage row: <why>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordError {
    message: String,
}

impl RecordError {
    fn malformed(kind: ChunkKind, why: impl fmt::Display) -> RecordError {
        RecordError { message: format!("malformed {} storage row: {why}", kind.tag()) }
    }

    /// The message, as the reference words it for a malformed row.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for RecordError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for RecordError {}

const ROW_KEYS: [&str; 4] = ["type", "seq0", "time0", "data"];
const ROW_DATA_KEYS: [&str; 8] = ["turn", "step", "index", "dt", "texts", "id", "name", "args"];

/// Decodes one storage line (without its newline) into the events it stores, appended to `out`.
///
/// An event line goes through `SessionEvent`'s strict envelope decoding in one pass; only a line
/// that is not an event envelope is probed again as a packed row, which fails fast on a row's
/// second key. A row-tagged value is validated strictly and expanded. On error `out` is unchanged.
pub fn decode_record(line: &str, out: &mut Vec<SessionEvent>) -> Result<(), RecordError> {
    let event_error = match SessionEvent::from_json_line(line) {
        Ok(event) => {
            if let Some(kind) = ChunkKind::from_tag(&event.kind) {
                return Err(RecordError::malformed(kind, "envelope must be exactly {type, seq0, time0, data}"));
            }
            out.push(event);
            return Ok(());
        }
        Err(error) => error,
    };
    let row = parse_fields(line, &ROW_KEYS).ok();
    let kind = row.and_then(|row| row.get(0)).and_then(|tag| {
        [ChunkKind::Text, ChunkKind::Reasoning, ChunkKind::ToolCall].into_iter().find(|kind| is_str(tag, kind.tag()))
    });
    match (row, kind) {
        (Some(row), Some(kind)) => decode_row(kind, &row, out),
        _ => Err(RecordError { message: event_error.to_string() }),
    }
}

fn decode_row(kind: ChunkKind, row: &Fields<'_, 4>, out: &mut Vec<SessionEvent>) -> Result<(), RecordError> {
    let malformed = |why: &str| RecordError::malformed(kind, why);
    if !row.has_exactly(&[0, 1, 2, 3]) {
        return Err(malformed("envelope must be exactly {type, seq0, time0, data}"));
    }
    let (seq0, time0, data) = (row.get(1), row.get(2), row.get(3));
    let seq0 = seq0.and_then(safe_u64).ok_or_else(|| malformed("seq0 must be a non-negative safe integer"))?;
    let time0 = time0.and_then(safe_i64).ok_or_else(|| malformed("time0 must be a safe integer"))?;
    let data = data.map_or("", RawValue::get);
    let exact_keys_message = match kind {
        ChunkKind::ToolCall => "data must be exactly {turn, step, index, id, name?, dt, args}",
        ChunkKind::Text | ChunkKind::Reasoning => "data must be exactly {turn, step, index, dt, texts}",
    };
    if data.starts_with('[') {
        // An array is an object to the reference's check, and then fails the exact-key test.
        return Err(malformed(exact_keys_message));
    }
    if !data.starts_with('{') {
        return Err(malformed("data must be an object"));
    }
    let fields: Fields<'_, 8> = parse_fields(data, &ROW_DATA_KEYS).map_err(|_| malformed("data must be an object"))?;
    let (id, name) = match kind {
        ChunkKind::ToolCall => {
            let with_name = fields.has_exactly(&[0, 1, 2, 3, 5, 6, 7]);
            if !with_name && !fields.has_exactly(&[0, 1, 2, 3, 5, 7]) {
                return Err(malformed(exact_keys_message));
            }
            let id = fields.get(5).filter(|raw| is_string(raw));
            let name = fields.get(6);
            if id.is_none() || name.is_some_and(|raw| !is_string(raw)) {
                return Err(malformed("id (and name when present) must be strings"));
            }
            (id, name)
        }
        ChunkKind::Text | ChunkKind::Reasoning => {
            if !fields.has_exactly(&[0, 1, 2, 3, 4]) {
                return Err(malformed(exact_keys_message));
            }
            (None, None)
        }
    };
    let (turn, step, index) = match (fields.get(0), fields.get(1), fields.get(2)) {
        (Some(turn), Some(step), Some(index)) if is_number(turn) && is_number(step) && is_number(index) => {
            (turn, step, index)
        }
        _ => return Err(malformed("turn/step/index must be numbers")),
    };
    let payload_slot = if kind == ChunkKind::ToolCall { 7 } else { 4 };
    let members = fields
        .get(payload_slot)
        .and_then(|raw| parse_raw_array(raw.get()))
        .filter(|members| !members.is_empty() && members.iter().all(|member| is_string(member)))
        .ok_or_else(|| {
            RecordError::malformed(kind, format!("{} must be a non-empty string array", kind.payload_key()))
        })?;
    let dt = fields
        .get(3)
        .and_then(|raw| parse_raw_array(raw.get()))
        .and_then(|gaps| gaps.into_iter().map(safe_i64).collect::<Option<Vec<i64>>>())
        .ok_or_else(|| malformed("dt must be an array of safe integers"))?;
    if dt.len() + 1 != members.len() {
        return Err(RecordError::malformed(
            kind,
            format!("dt length {} does not match {} members", dt.len(), members.len()),
        ));
    }
    if seq0 + (members.len() as u64 - 1) > MAX_SAFE_INTEGER {
        return Err(malformed("member seqs must stay safe integers"));
    }
    let mut time = time0;
    let mut times = Vec::with_capacity(members.len());
    times.push(time0);
    for gap in &dt {
        time += gap;
        if time.unsigned_abs() > MAX_SAFE_INTEGER {
            return Err(malformed("member times must stay safe integers"));
        }
        times.push(time);
    }
    let row = ChunkRow { kind, seq0, time0, turn, step, index, dt, id, name, members };
    out.reserve(row.members.len());
    for (k, (member, time)) in row.members.iter().zip(times).enumerate() {
        let data = member_data(&row, member);
        let data = JsonData::from_text(data).map_err(|error| malformed(&error.to_string()))?;
        out.push(SessionEvent::new(CHUNK_EVENT, seq0 + k as u64, time, data));
    }
    Ok(())
}

/// The data of one expanded member: `{turn, step, chunk: {type, index, …}}` in the reference's order.
fn member_data(row: &ChunkRow<'_>, member: &RawValue) -> String {
    let mut data = String::with_capacity(96 + member.get().len());
    data.push_str("{\"turn\":");
    data.push_str(row.turn.get());
    data.push_str(",\"step\":");
    data.push_str(row.step.get());
    data.push_str(",\"chunk\":{\"type\":\"");
    data.push_str(row.kind.delta_type());
    data.push_str("\",\"index\":");
    data.push_str(row.index.get());
    match row.kind {
        ChunkKind::Text | ChunkKind::Reasoning => data.push_str(",\"text\":"),
        ChunkKind::ToolCall => {
            data.push_str(",\"id\":");
            data.push_str(row.id.map_or("null", RawValue::get));
            if let Some(name) = row.name {
                data.push_str(",\"name\":");
                data.push_str(name.get());
            }
            data.push_str(",\"argumentsDelta\":");
        }
    }
    data.push_str(member.get());
    data.push_str("}}");
    data
}
