//! The event envelope (reference 01 §1.3), surface markers (§2.3) and the known event vocabulary.

use std::{borrow::Cow, fmt};

use serde::{
    Deserialize, Deserializer, Serialize, Serializer,
    de::{self, MapAccess, Visitor},
    ser::SerializeMap,
};
use serde_json::value::RawValue;
use smol_str::SmolStr;

use crate::{
    bounds::{MAX_EVENT_BYTES, Oversized, TooLarge, decimal_len, json_string_len},
    json::{JsonData, MAX_SAFE_INTEGER},
};

/// An event type such as `turn/start`. Short types are stored inline.
pub type EventType = SmolStr;

/// How a surface-eligible event changes the message surface.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SurfaceOp {
    /// Adds the event as the next surface node (`"surfaceOp":"append"`).
    Append,
    /// Replaces the surface nodes from `start` through `end` (event seqs, inclusive).
    Replace {
        /// The seq of the first node replaced; it must be a current surface node.
        start: u64,
        /// The seq of the last node replaced; a current surface node at or after `start`.
        end: u64,
    },
}

/// One committed entry of a session log. `seq` is the event's index in the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionEvent {
    /// The event type (`type` in JSON), such as `turn/start` or `tool/result`.
    pub kind: EventType,
    /// The event's 0-based position in its log; a log always has `events[i].seq == i`.
    pub seq: u64,
    /// When the event was appended, in Unix epoch milliseconds from the session's clock. Not
    /// required to increase along the log, and may be negative.
    pub time: i64,
    /// The payload: lossless JSON whose shape depends on `kind` (reference 01 §1.4).
    pub data: JsonData,
    /// `sourceEventSeqs`: the seqs of earlier events a surface-eligible event derives from. A
    /// replace must list every surface node it shadows; only surface-eligible events carry it.
    pub source_event_seqs: Option<Box<[u64]>>,
    /// `surfaceOp`: how the event joins the message surface. Required on the
    /// [surface-eligible types](SURFACE_ELIGIBLE_TYPES), absent on every other type.
    pub surface_op: Option<SurfaceOp>,
    /// A reader that does not know `kind` may skip this event.
    pub ignorable: bool,
}

/// Event types that produce messages on the surface.
pub const SURFACE_ELIGIBLE_TYPES: [&str; 3] = ["user/message", "assistant/message", "tool/result"];

/// Whether events of type `kind` join the message surface (one of [`SURFACE_ELIGIBLE_TYPES`]),
/// and so must carry a [`SurfaceOp`].
pub fn is_surface_eligible(kind: &str) -> bool {
    SURFACE_ELIGIBLE_TYPES.contains(&kind)
}

/// Every event type the reference declares (reference 01 §1.4). Readers refuse a type outside
/// their known set unless the event is marked `ignorable`; hosts extend the set with their own.
pub const KNOWN_SESSION_EVENT_TYPES: [&str; 48] = [
    "agent-preset/selected",
    "agent/inbox/spliced",
    "approval/asked",
    "approval/decided",
    "approval/policy",
    "assistant/chunk",
    "assistant/message",
    "command/done",
    "command/run",
    "compaction/end",
    "compaction/prune",
    "compaction/start",
    "compaction/summary",
    "feedback/record",
    "goal/change",
    "hook/invoked",
    "hook/result",
    "llm/retry",
    "llm/retry-started",
    "permission/preset",
    "plan/mode",
    "request/context",
    "request/header",
    "sandbox/mode",
    "schedule/change",
    "session/end-seed",
    "session/title",
    "session/title-llm-request",
    "step/end",
    "step/start",
    "subagent/descriptor",
    "team/member",
    "team/message/delivered",
    "team/message/queued",
    "team/task",
    "todo/write",
    "tool-workflow/agent-end",
    "tool-workflow/agent-start",
    "tool-workflow/run-end",
    "tool-workflow/run-start",
    "tool/call",
    "tool/code-dispatch",
    "tool/code-dispatch-start",
    "tool/result",
    "turn/end",
    "turn/start",
    "user/message",
    "web/deepseek-search-llm-request",
];

/// The end-of-seed boundary marker (reference 01 §2.4).
pub const END_SEED: &str = "session/end-seed";

impl SessionEvent {
    /// A plain event with no surface marker.
    pub fn new(kind: impl Into<EventType>, seq: u64, time: i64, data: JsonData) -> SessionEvent {
        SessionEvent { kind: kind.into(), seq, time, data, source_event_seqs: None, surface_op: None, ignorable: false }
    }

    /// Whether the event's type is `kind`.
    pub fn is(&self, kind: &str) -> bool {
        self.kind == kind
    }

    /// Checks the surface-marker rules that do not depend on the rest of the log (§2.3): marker
    /// eligibility, then the `sourceEventSeqs` rules.
    pub fn check_markers(&self) -> Result<(), String> {
        self.check_eligibility()?;
        self.check_sources(&[])
    }

    /// Surface eligibility: eligible types require a `surfaceOp`, other types carry no marker.
    pub(crate) fn check_eligibility(&self) -> Result<(), String> {
        let kind = &self.kind;
        if is_surface_eligible(kind) {
            if self.surface_op.is_none() {
                return Err(format!("session event \"{kind}\" is surface-eligible and requires a surfaceOp marker"));
            }
        } else {
            if self.surface_op.is_some() {
                return Err(format!("session event \"{kind}\" is not surface-eligible and cannot carry surfaceOp"));
            }
            if self.source_event_seqs.is_some() {
                return Err(format!(
                    "session event \"{kind}\" is not surface-eligible and cannot carry sourceEventSeqs"
                ));
            }
        }
        Ok(())
    }

    /// The `sourceEventSeqs` rules, in the reference's order, plus the replace rule that the
    /// sources cover every `shadowed` surface node.
    pub(crate) fn check_sources(&self, shadowed: &[u64]) -> Result<(), String> {
        let seq = self.seq;
        let sources: &[u64] = self.source_event_seqs.as_deref().unwrap_or(&[]);
        if let Some(declared) = &self.source_event_seqs {
            if declared.is_empty() && self.kind != "assistant/message" {
                return Err("sourceEventSeqs must not be empty except on assistant/message".to_owned());
            }
            if declared.iter().any(|&source| source > MAX_SAFE_INTEGER) {
                return Err(format!(
                    "session event \"{}\" sourceEventSeqs must densely contain non-negative safe integers",
                    self.kind
                ));
            }
            if has_duplicates(declared) {
                return Err("sourceEventSeqs must not contain duplicates".to_owned());
            }
            if let Some(source) = declared.iter().find(|&&source| source >= seq) {
                return Err(format!("sourceEventSeqs must reference earlier events: {source} >= current seq {seq}"));
            }
        }
        let missing: Vec<String> =
            shadowed.iter().filter(|node| !sources.contains(node)).map(|node| node.to_string()).collect();
        if !missing.is_empty() {
            return Err(format!(
                "surface replace: sourceEventSeqs must include every shadowed surface node; missing {}",
                missing.join(", ")
            ));
        }
        Ok(())
    }

    /// Rejects the permanently retired legacy vocabulary (§1.4), as `session event "<type>" ...`.
    pub fn check_legacy(&self) -> Result<(), String> {
        if !self.kind.starts_with("request/header") {
            return Ok(());
        }
        self.check_legacy_at(&format!("session event \"{}\"", self.kind))
    }

    /// Rejects the permanently retired legacy vocabulary (§1.4); `subject` prefixes the message
    /// (`seed event at index 3`, `session event "request/header"`).
    pub fn check_legacy_at(&self, subject: &str) -> Result<(), String> {
        if self.kind == "request/header-delta" {
            return Err(format!("{subject} uses unsupported legacy request/header-delta format"));
        }
        if self.kind == "request/header"
            && let Ok(probe) = self.data.parse_borrowed::<ReasonProbe<'_>>()
            && probe.reason.as_deref() == Some("fallback")
        {
            return Err(format!("{subject} uses unsupported legacy request/header reason \"fallback\""));
        }
        Ok(())
    }
}

#[derive(Deserialize)]
struct ReasonProbe<'a> {
    #[serde(borrow, default)]
    reason: Option<Cow<'a, str>>,
}

impl Serialize for SurfaceOp {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            SurfaceOp::Append => serializer.serialize_str("append"),
            SurfaceOp::Replace { start, end } => {
                let mut map = serializer.serialize_map(Some(3))?;
                map.serialize_entry("op", "replace")?;
                map.serialize_entry("start", start)?;
                map.serialize_entry("end", end)?;
                map.end()
            }
        }
    }
}

impl SurfaceOp {
    /// Parses a surface marker with the reference's messages (without the `session event` prefix).
    pub fn from_json(value: &serde_json::Value) -> Result<SurfaceOp, &'static str> {
        match value {
            serde_json::Value::String(op) if op == "append" => Ok(SurfaceOp::Append),
            serde_json::Value::Object(map) if map.get("op").and_then(|op| op.as_str()) == Some("replace") => {
                let start = map.get("start").and_then(crate::json::as_safe_u64);
                let end = map.get("end").and_then(crate::json::as_safe_u64);
                match (map.len(), start, end) {
                    (3, Some(start), Some(end)) => Ok(SurfaceOp::Replace { start, end }),
                    _ => Err("carries an invalid replace surfaceOp"),
                }
            }
            _ => Err("carries an invalid surfaceOp"),
        }
    }
}

impl<'de> Deserialize<'de> for SurfaceOp {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<SurfaceOp, D::Error> {
        let value = serde_json::Value::deserialize(deserializer)?;
        SurfaceOp::from_json(&value).map_err(de::Error::custom)
    }
}

impl Serialize for SessionEvent {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let n_fields = 4
            + usize::from(self.source_event_seqs.is_some())
            + usize::from(self.surface_op.is_some())
            + usize::from(self.ignorable);
        let mut map = serializer.serialize_map(Some(n_fields))?;
        map.serialize_entry("type", self.kind.as_str())?;
        map.serialize_entry("seq", &self.seq)?;
        map.serialize_entry("time", &self.time)?;
        map.serialize_entry("data", &self.data)?;
        if let Some(sources) = &self.source_event_seqs {
            map.serialize_entry("sourceEventSeqs", sources)?;
        }
        if let Some(op) = &self.surface_op {
            map.serialize_entry("surfaceOp", op)?;
        }
        if self.ignorable {
            map.serialize_entry("ignorable", &true)?;
        }
        map.end()
    }
}

impl SessionEvent {
    /// Decodes one stored envelope line, with the same result as deserializing it with
    /// `serde_json` (the strict envelope rules, `data` checked for syntax only).
    ///
    /// Lines in the canonical compact shape, which every writer of a log produces, take a fast
    /// path that checks `data` without `serde_json`; anything else is decoded by `serde_json`.
    pub fn from_json_line(line: &str) -> Result<SessionEvent, serde_json::Error> {
        match fast_envelope(line) {
            Some(event) => Ok(event),
            None => serde_json::from_str(line),
        }
    }

    /// Appends the event's canonical JSON, byte for byte what `serde_json` writes for it,
    /// without re-checking the payload text.
    pub fn write_json(&self, out: &mut Vec<u8>) {
        use std::io::Write;
        let mut digits = itoa::Buffer::new();
        out.extend_from_slice(b"{\"type\":");
        let kind = self.kind.as_str();
        if kind.bytes().all(|byte| byte >= 0x20 && byte != b'"' && byte != b'\\') {
            // Nothing to escape (every kind this workspace writes).
            out.push(b'"');
            out.extend_from_slice(kind.as_bytes());
            out.push(b'"');
        } else {
            // Invariant: serializing a `str` cannot fail, and neither can writing to a `Vec`.
            serde_json::to_writer(&mut *out, kind).expect("writing a string into memory cannot fail");
        }
        out.extend_from_slice(b",\"seq\":");
        out.extend_from_slice(digits.format(self.seq).as_bytes());
        out.extend_from_slice(b",\"time\":");
        out.extend_from_slice(digits.format(self.time).as_bytes());
        out.extend_from_slice(b",\"data\":");
        out.extend_from_slice(self.data.as_str().as_bytes());
        if let Some(sources) = &self.source_event_seqs {
            out.extend_from_slice(b",\"sourceEventSeqs\":[");
            for (idx, source) in sources.iter().enumerate() {
                if idx > 0 {
                    out.push(b',');
                }
                out.extend_from_slice(digits.format(*source).as_bytes());
            }
            out.push(b']');
        }
        match self.surface_op {
            None => {}
            Some(SurfaceOp::Append) => out.extend_from_slice(b",\"surfaceOp\":\"append\""),
            Some(SurfaceOp::Replace { start, end }) => {
                let _ = write!(out, ",\"surfaceOp\":{{\"op\":\"replace\",\"start\":{start},\"end\":{end}}}");
            }
        }
        if self.ignorable {
            out.extend_from_slice(b",\"ignorable\":true");
        }
        out.push(b'}');
    }

    /// The length of the event's canonical JSON ([`SessionEvent::write_json`]) without writing
    /// it: the payload's text length plus the envelope around it, so it costs no copy of `data`.
    pub fn encoded_len(&self) -> usize {
        // `{"type":` `,"seq":` `,"time":` `,"data":` `}`
        let mut len = 8 + json_string_len(&self.kind) + 7 + decimal_len(self.seq) + 8;
        len += usize::from(self.time < 0) + decimal_len(self.time.unsigned_abs());
        len += 8 + self.data.as_str().len() + 1;
        if let Some(sources) = &self.source_event_seqs {
            // `,"sourceEventSeqs":[` `]`, and a comma between sources.
            len += 20 + 1 + sources.len().saturating_sub(1);
            len += sources.iter().map(|source| decimal_len(*source)).sum::<usize>();
        }
        match self.surface_op {
            None => {}
            Some(SurfaceOp::Append) => len += ",\"surfaceOp\":\"append\"".len(),
            Some(SurfaceOp::Replace { start, end }) => {
                len += ",\"surfaceOp\":{\"op\":\"replace\",\"start\":".len() + decimal_len(start);
                len += ",\"end\":".len() + decimal_len(end) + 1;
            }
        }
        if self.ignorable {
            len += ",\"ignorable\":true".len();
        }
        len
    }

    /// Checks the event against [`MAX_EVENT_BYTES`], measured by [`SessionEvent::encoded_len`].
    pub fn check_size(&self) -> Result<(), TooLarge> {
        let size = self.encoded_len();
        if size <= MAX_EVENT_BYTES {
            return Ok(());
        }
        Err(TooLarge {
            what: Oversized::Event { kind: self.kind.clone(), seq: self.seq },
            size: size as u64,
            limit: MAX_EVENT_BYTES as u64,
        })
    }
}

/// The canonical envelope `{"type":..,"seq":..,"time":..,"data":..[,"sourceEventSeqs":..]
/// [,"surfaceOp":..][,"ignorable":true]}` with plain tokens; `None` for any other line, which
/// `serde_json` then decodes (or rejects).
fn fast_envelope(line: &str) -> Option<SessionEvent> {
    let bytes = line.as_bytes();
    let mut cursor = Cursor { bytes, idx: 0 };
    cursor.need(b"{\"type\":\"")?;
    let kind_start = cursor.idx;
    let kind_end = memchr::memchr2(b'"', b'\\', &bytes[kind_start..])? + kind_start;
    if bytes[kind_end] != b'"' || bytes[kind_start..kind_end].iter().any(|byte| *byte < 0x20) {
        return None;
    }
    cursor.idx = kind_end + 1;
    cursor.need(b",\"seq\":")?;
    let seq = cursor.safe_u64()?;
    cursor.need(b",\"time\":")?;
    let negative = cursor.eat(b"-");
    let magnitude = cursor.safe_u64()?;
    let time = match (negative, magnitude) {
        (false, time) => time as i64,
        // `-0` is left to serde_json.
        (true, 0) => return None,
        (true, time) => -(time as i64),
    };
    cursor.need(b",\"data\":")?;
    let data_start = cursor.idx;
    let kind = &line[kind_start..kind_end];
    let (data_len, verified) = scan_payload(kind, &line[data_start..])?;
    let data_end = data_start + data_len;
    cursor.idx = data_end;
    let data_text = &line[data_start..data_end];
    let data = JsonData::from_scanned(data_text, verified);
    let mut source_event_seqs = None;
    if cursor.eat(b",\"sourceEventSeqs\":[") {
        let mut sources = Vec::new();
        if !cursor.eat(b"]") {
            loop {
                sources.push(cursor.safe_u64()?);
                if cursor.eat(b"]") {
                    break;
                }
                cursor.need(b",")?;
            }
        }
        source_event_seqs = Some(sources.into_boxed_slice());
    }
    let mut surface_op = None;
    if cursor.eat(b",\"surfaceOp\":") {
        if cursor.eat(b"\"append\"") {
            surface_op = Some(SurfaceOp::Append);
        } else {
            cursor.need(b"{\"op\":\"replace\",\"start\":")?;
            let start = cursor.safe_u64()?;
            cursor.need(b",\"end\":")?;
            let end = cursor.safe_u64()?;
            cursor.need(b"}")?;
            surface_op = Some(SurfaceOp::Replace { start, end });
        }
    }
    let ignorable = cursor.eat(b",\"ignorable\":true");
    cursor.need(b"}")?;
    if cursor.idx != bytes.len() {
        return None;
    }
    Some(SessionEvent { kind: EventType::new(kind), seq, time, data, source_event_seqs, surface_op, ignorable })
}

/// The length of the one JSON value `text` starts with, the payload of an event of type `kind`:
/// a message is walked with its shape check, which validates it in the same pass; any other
/// payload (or a message the walk leaves to the full rules) is validated on its own.
fn scan_payload(kind: &str, text: &str) -> Option<(usize, Option<crate::json::Verified>)> {
    let walked = crate::messages::MessageKind::of(kind).and_then(|message| {
        let (len, masked) = crate::messages::walk_message(message, text)?;
        // A range that does not fit the compact offsets is simply not recorded.
        let masked = masked.and_then(|range| Some((u32::try_from(range.start).ok()?, u32::try_from(range.end).ok()?)));
        Some((len, crate::json::Verified { kind: message, masked }))
    });
    match walked {
        Some((len, verified)) => Some((len, Some(verified))),
        None => Some((crate::jsontext::skip_value(text.as_bytes(), 0)?, None)),
    }
}

/// The decoded fields of an event stored column by column (a SQLite row), for
/// [`SessionEvent::from_stored_parts`].
#[derive(Debug, Clone, Copy)]
pub struct StoredParts<'a> {
    /// `type`.
    pub kind: &'a str,
    /// `seq`, at most [`MAX_SAFE_INTEGER`].
    pub seq: u64,
    /// `time`, within ±[`MAX_SAFE_INTEGER`].
    pub time: i64,
    /// `data`: JSON text.
    pub data: &'a str,
    /// `sourceEventSeqs`.
    pub sources: Option<&'a [u64]>,
    /// `surfaceOp`.
    pub surface_op: Option<SurfaceOp>,
    /// `ignorable`.
    pub ignorable: bool,
}

impl SessionEvent {
    /// The event whose canonical line ([`SessionEvent::write_json`]) `parts` make,
    /// without writing that line: exactly what [`SessionEvent::from_json_line`] decodes from it
    /// on its fast path. `None` where that path would not take the line (a type that needs
    /// escaping, a payload that is not one plain JSON value, a number out of the safe range):
    /// the caller then decodes the written line, which gives the same event or the same error.
    pub fn from_stored_parts(parts: StoredParts<'_>) -> Option<SessionEvent> {
        let StoredParts { kind, seq, time, data, sources, surface_op, ignorable } = parts;
        let plain_kind = |byte: u8| byte.is_ascii_alphanumeric() || b"/-_.:".contains(&byte);
        if kind.is_empty() || !kind.bytes().all(plain_kind) {
            return None;
        }
        let safe = |value: u64| value <= MAX_SAFE_INTEGER;
        if !safe(seq) || !safe(time.unsigned_abs()) || !sources.unwrap_or_default().iter().all(|s| safe(*s)) {
            return None;
        }
        if let Some(SurfaceOp::Replace { start, end }) = surface_op
            && !(safe(start) && safe(end))
        {
            return None;
        }
        let (len, verified) = scan_payload(kind, data)?;
        if len != data.len() {
            return None;
        }
        Some(SessionEvent {
            kind: EventType::new(kind),
            seq,
            time,
            data: JsonData::from_scanned(data, verified),
            source_event_seqs: sources.map(Box::from),
            surface_op,
            ignorable,
        })
    }
}

struct Cursor<'a> {
    bytes: &'a [u8],
    idx: usize,
}

impl Cursor<'_> {
    /// Consumes `token` if the text continues with it. The token's length is a constant, so
    /// the comparison compiles to a few loads instead of a call to `memcmp`.
    #[inline]
    fn eat<const N: usize>(&mut self, token: &[u8; N]) -> bool {
        let found = self.bytes[self.idx..].first_chunk::<N>() == Some(token);
        if found {
            self.idx += N;
        }
        found
    }

    /// Consumes `token`, or gives up on the fast path.
    #[inline]
    fn need<const N: usize>(&mut self, token: &[u8; N]) -> Option<()> {
        self.eat(token).then_some(())
    }

    /// A plain non-negative integer of at most 16 digits, no leading zero, at most
    /// [`MAX_SAFE_INTEGER`].
    fn safe_u64(&mut self) -> Option<u64> {
        let digits = &self.bytes[self.idx..];
        let mut value = 0u64;
        let mut len = 0;
        while let Some(digit) = digits.get(len).filter(|byte| byte.is_ascii_digit()) {
            if len == 16 {
                return None;
            }
            value = value * 10 + u64::from(digit - b'0');
            len += 1;
        }
        if len == 0 || (len > 1 && digits[0] == b'0') {
            return None;
        }
        // A fraction or exponent after the digits is left to serde_json.
        if matches!(digits.get(len), Some(b'.' | b'e' | b'E')) || value > MAX_SAFE_INTEGER {
            return None;
        }
        self.idx += len;
        Some(value)
    }
}

/// Whether `seqs` repeats a value. Source lists are short, so small ones are compared pairwise
/// rather than hashed (this runs for every message read from a log).
fn has_duplicates(seqs: &[u64]) -> bool {
    if seqs.len() <= 16 {
        return seqs.iter().enumerate().any(|(idx, seq)| seqs[idx + 1..].contains(seq));
    }
    let mut seen = std::collections::HashSet::with_capacity(seqs.len());
    !seqs.iter().all(|seq| seen.insert(*seq))
}

/// The message every malformed envelope gets, whatever the defect.
pub const INVALID_ENVELOPE: &str = "invalid event envelope";

impl<'de> Deserialize<'de> for SessionEvent {
    /// Strict envelope decoding: exactly the seven known keys, `seq` a non-negative safe
    /// integer, `time` a safe integer, `data` present, `ignorable` only `true`.
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<SessionEvent, D::Error> {
        deserializer.deserialize_map(EnvelopeVisitor)
    }
}

struct EnvelopeVisitor;

impl<'de> Visitor<'de> for EnvelopeVisitor {
    type Value = SessionEvent;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a session event envelope")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<SessionEvent, A::Error> {
        let mut kind: Option<EventType> = None;
        let mut seq: Option<serde_json::Number> = None;
        let mut time: Option<serde_json::Number> = None;
        let mut data: Option<Box<RawValue>> = None;
        let mut sources: Option<Vec<serde_json::Number>> = None;
        let mut surface_op: Option<SurfaceOp> = None;
        let mut ignorable: Option<bool> = None;
        while let Some(key) = map.next_key::<Cow<'de, str>>()? {
            match key.as_ref() {
                "type" if kind.is_none() => kind = Some(EventType::from(map.next_value::<Cow<'de, str>>()?)),
                "seq" if seq.is_none() => seq = Some(map.next_value()?),
                "time" if time.is_none() => time = Some(map.next_value()?),
                "data" if data.is_none() => data = Some(map.next_value()?),
                "sourceEventSeqs" if sources.is_none() => sources = Some(map.next_value()?),
                "surfaceOp" if surface_op.is_none() => surface_op = Some(map.next_value()?),
                "ignorable" if ignorable.is_none() => ignorable = Some(map.next_value()?),
                _ => return Err(de::Error::custom(INVALID_ENVELOPE)),
            }
        }
        let invalid = || de::Error::custom(INVALID_ENVELOPE);
        let kind = kind.ok_or_else(invalid)?;
        let seq = seq.as_ref().and_then(number_as_safe_u64).ok_or_else(invalid)?;
        let time = time.as_ref().and_then(number_as_safe_i64).ok_or_else(invalid)?;
        let data = JsonData::from_raw(data.ok_or_else(invalid)?);
        let ignorable = match ignorable {
            None => false,
            Some(true) => true,
            Some(false) => return Err(invalid()),
        };
        let source_event_seqs = match sources {
            None => None,
            Some(numbers) => {
                Some(numbers.iter().map(number_as_safe_u64).collect::<Option<Box<[u64]>>>().ok_or_else(|| {
                    de::Error::custom(format!("sourceEventSeqs on event at seq {seq} must be an array when present"))
                })?)
            }
        };
        Ok(SessionEvent { kind, seq, time, data, source_event_seqs, surface_op, ignorable })
    }
}

fn number_as_safe_u64(number: &serde_json::Number) -> Option<u64> {
    crate::json::as_safe_u64(&serde_json::Value::Number(number.clone()))
}

fn number_as_safe_i64(number: &serde_json::Number) -> Option<i64> {
    crate::json::as_safe_i64(&serde_json::Value::Number(number.clone()))
}

#[cfg(test)]
mod tests;
