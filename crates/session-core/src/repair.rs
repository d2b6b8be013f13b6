//! Crash-repair closers (reference 01 §2.7): the synthetic events that close a turn a crash left
//! open, so a resumed transcript is balanced.
//!
//! [`RepairScan`] is incremental: a reader feeds it events as it decodes them and asks for the
//! closers at the end, so a long log never has to be held in memory. It reads only the few
//! fields the rules need, through borrowed views of each payload.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use crate::{
    JsonData, SessionEvent, SurfaceOp,
    view::{Field, array, is_null, object, object_text, present, string},
};

/// `error.code` of a closer for a tool call that was never recorded as started.
pub const TOOL_NOT_STARTED: &str = "TOOL_NOT_STARTED";
/// `error.code` of a closer for a recorded tool call whose result was never recorded.
pub const TOOL_OUTCOME_UNKNOWN: &str = "TOOL_OUTCOME_UNKNOWN";

const OUTCOME_UNKNOWN_TEXT: &str = "The tool call was interrupted after it was recorded, but no result was durably recorded. Its outcome is unknown. Decide whether to retry from the tool semantics: retry only if the operation is read-only or idempotent; if it may have side effects, first verify external state or ask the user. Do not retry blindly.";
const NOT_STARTED_TEXT: &str =
    "The tool call was interrupted before the Harness recorded it as started. Retry it if it is still needed.";

/// A JSON value as the reference's scan sees it: `None` is an absent field (`undefined`), which
/// closers omit.
type Copied = Option<Box<RawValue>>;

fn copy(field: Field<'_>) -> Copied {
    field.map(ToOwned::to_owned)
}

/// Turn and step numbers are copied verbatim from the log into the closers. A present `null`
/// means "not open", as in the reference; an absent number still opens (and is omitted).
#[derive(Debug, Clone)]
enum Bracket {
    Closed,
    Open(Copied),
}

impl Bracket {
    fn from_field(field: Field<'_>) -> Bracket {
        if is_null(field) { Bracket::Closed } else { Bracket::Open(copy(field)) }
    }
}

#[derive(Debug, Clone)]
struct PendingCall {
    /// The call id as a match key: the string itself, or the raw JSON of a non-string id.
    key: String,
    call_id: Box<RawValue>,
    step: Copied,
    call_seq: Option<u64>,
}

/// Incremental state of the closer scan: the open turn, the open step, and the events that
/// decide which tool calls are pending.
///
/// Message payloads are large and matter only if the log ends inside their step, so the scan
/// keeps the step's `assistant/message`, `tool/call` and `tool/result` events (shared, not
/// copied) and parses them only when closers are asked for. Memory is bounded by one step.
#[derive(Debug, Clone)]
pub struct RepairScan {
    open_turn: Bracket,
    open_step: Bracket,
    /// The call-relevant events since pending calls were last cleared, in log order.
    window: Vec<Arc<SessionEvent>>,
}

/// The tool calls requested in the open step that have no result yet, in request order.
#[derive(Debug, Default)]
struct Pending {
    calls: Vec<PendingCall>,
}

impl Default for RepairScan {
    fn default() -> RepairScan {
        RepairScan::new()
    }
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct DataView<'a> {
    #[serde(default, borrow, deserialize_with = "present")]
    turn: Field<'a>,
    #[serde(default, borrow, deserialize_with = "present")]
    step: Field<'a>,
    #[serde(default, borrow, deserialize_with = "present")]
    call_id: Field<'a>,
    #[serde(default, borrow, deserialize_with = "present")]
    message: Field<'a>,
}

#[derive(Deserialize)]
struct MessageView<'a> {
    #[serde(default, borrow, deserialize_with = "present")]
    content: Field<'a>,
    #[serde(default, borrow, deserialize_with = "present")]
    source: Field<'a>,
}

#[derive(Deserialize)]
struct BlockView<'a> {
    #[serde(default, borrow, deserialize_with = "present", rename = "type")]
    kind: Field<'a>,
    #[serde(default, borrow, deserialize_with = "present")]
    id: Field<'a>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SourceView<'a> {
    #[serde(default, borrow, deserialize_with = "present")]
    call_id: Field<'a>,
}

/// The match key of a call id: strings match strings, anything else matches its JSON text.
fn call_key(call_id: &RawValue) -> String {
    match string(Some(call_id)) {
        Some(text) => format!("s{text}"),
        None => format!("r{}", call_id.get()),
    }
}

/// How a call id reads inside a message id: a string as itself, anything else as JSON.
fn call_label(call_id: &RawValue) -> String {
    string(Some(call_id)).map_or_else(|| call_id.get().to_owned(), |text| text.into_owned())
}

impl RepairScan {
    /// A scan that has seen no event: no turn or step open, no call pending.
    pub fn new() -> RepairScan {
        RepairScan { open_turn: Bracket::Closed, open_step: Bracket::Closed, window: Vec::new() }
    }

    /// Whether the events seen so far leave a turn open.
    pub fn is_turn_open(&self) -> bool {
        matches!(self.open_turn, Bracket::Open(_))
    }

    /// Feeds the next event of the log. Events of other types are skipped without parsing.
    pub fn observe(&mut self, event: &Arc<SessionEvent>) {
        // A payload that is not an object has no fields; the rules then see them all absent.
        // Only the two openers read their payload.
        let data = || -> DataView<'_> { object_text(event.data.as_str()).unwrap_or_default() };
        match event.kind.as_str() {
            "turn/start" => {
                self.open_turn = Bracket::from_field(data().turn);
                self.open_step = Bracket::Closed;
                self.window.clear();
            }
            "turn/end" => {
                self.open_turn = Bracket::Closed;
                self.open_step = Bracket::Closed;
                self.window.clear();
            }
            "step/start" => self.open_step = Bracket::from_field(data().step),
            "step/end" => {
                self.window.clear();
                self.open_step = Bracket::Closed;
            }
            // Pending calls only matter while a turn is open: the next `turn/start` clears them.
            "assistant/message" | "tool/call" | "tool/result" if self.is_turn_open() => {
                self.window.push(Arc::clone(event));
            }
            _ => {}
        }
    }

    /// Replays the window's call-relevant events into the pending set.
    fn pending(&self) -> Pending {
        let mut pending = Pending::default();
        for event in &self.window {
            let data: DataView<'_> = object_text(event.data.as_str()).unwrap_or_default();
            match event.kind.as_str() {
                "assistant/message" => {
                    let message: Option<MessageView<'_>> = object(data.message);
                    let blocks = message.and_then(|message| array(message.content)).unwrap_or_default();
                    for block in blocks {
                        let Some(block) = object::<BlockView<'_>>(Some(block)) else { continue };
                        let Some(call_id) = block.id.filter(|_| string(block.kind).as_deref() == Some("tool-call"))
                        else {
                            continue;
                        };
                        pending.register(call_id, data.step);
                    }
                }
                "tool/call" => {
                    if let Some(call_id) = data.call_id {
                        let key = call_key(call_id);
                        if let Some(call) = pending.calls.iter_mut().find(|call| call.key == key) {
                            call.call_seq = Some(event.seq);
                        }
                    }
                }
                _ => {
                    let message: Option<MessageView<'_>> = object(data.message);
                    let source: Option<SourceView<'_>> = message.and_then(|message| object(message.source));
                    if let Some(call_id) = source.and_then(|source| source.call_id) {
                        let key = call_key(call_id);
                        pending.calls.retain(|call| call.key != key);
                    }
                }
            }
        }
        pending
    }
}

impl Pending {
    /// Registers a requested call. Re-registering an id keeps its place and resets its state,
    /// like a JavaScript `Map.set`.
    fn register(&mut self, call_id: &RawValue, step: Field<'_>) {
        let key = call_key(call_id);
        let call = PendingCall { key, call_id: call_id.to_owned(), step: copy(step), call_seq: None };
        match self.calls.iter_mut().find(|pending| pending.key == call.key) {
            Some(pending) => *pending = call,
            None => self.calls.push(call),
        }
    }
}

impl RepairScan {
    /// The closers to append after the observed log, whose last event has `last_seq` and
    /// `last_time`: a `tool/result` per pending call, a `step/end` if a step is open, and an
    /// interrupted `turn/end`. Empty when no turn is open.
    pub fn closers(&self, last_seq: u64, last_time: i64) -> Vec<SessionEvent> {
        let Bracket::Open(turn) = &self.open_turn else { return Vec::new() };
        let turn = turn.as_deref();
        let mut seq = last_seq + 1;
        let pending = self.pending();
        let mut closers = Vec::with_capacity(pending.calls.len() + 2);
        for call in &pending.calls {
            let started = call.call_seq.is_some();
            let data = ToolResultCloser {
                turn,
                step: call.step.as_deref(),
                message: CloserMessage {
                    id: format!("interrupted-tool-result-{}-{seq}", call_label(&call.call_id)),
                    role: "user",
                    source: CloserSource { kind: "tool", call_id: &call.call_id },
                    content: [CloserResultBlock {
                        kind: "tool-result",
                        tool_call_id: &call.call_id,
                        is_error: true,
                        content: [CloserText {
                            kind: "text",
                            text: if started { OUTCOME_UNKNOWN_TEXT } else { NOT_STARTED_TEXT },
                        }],
                    }],
                },
                error: if started {
                    CloserError { name: "ToolOutcomeUnknownError", code: TOOL_OUTCOME_UNKNOWN }
                } else {
                    CloserError { name: "ToolNotStartedError", code: TOOL_NOT_STARTED }
                },
            };
            let mut event = SessionEvent::new("tool/result", seq, last_time, payload(&data));
            event.surface_op = Some(SurfaceOp::Append);
            event.source_event_seqs = call.call_seq.map(|call_seq| Box::from([call_seq]));
            closers.push(event);
            seq += 1;
        }
        if let Bracket::Open(step) = &self.open_step {
            let data = StepEndCloser { turn, step: step.as_deref() };
            closers.push(SessionEvent::new("step/end", seq, last_time, payload(&data)));
            seq += 1;
        }
        let data = TurnEndCloser { turn, reason: InterruptedReason { kind: "interrupted" } };
        closers.push(SessionEvent::new("turn/end", seq, last_time, payload(&data)));
        closers
    }
}

/// The closers for a whole log (reference `interruptedTurnClosers`). Empty for an empty or
/// balanced log.
pub fn interrupted_turn_closers(events: &[Arc<SessionEvent>]) -> Vec<SessionEvent> {
    let mut scan = RepairScan::new();
    for event in events {
        scan.observe(event);
    }
    match events.last() {
        Some(last) => scan.closers(last.seq, last.time),
        None => Vec::new(),
    }
}

fn payload<T: Serialize>(data: &T) -> JsonData {
    let text = serde_json::to_string(data).expect("closer payloads are plain JSON structs and always serialize");
    // `from_raw`, not `from_text`: a turn number copied from a damaged log is kept verbatim
    // rather than turned into a panic here; the session that admits the closers re-checks them.
    JsonData::from_raw(RawValue::from_string(text).expect("serde_json output is valid JSON text"))
}

#[derive(Serialize)]
struct ToolResultCloser<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    turn: Option<&'a RawValue>,
    #[serde(skip_serializing_if = "Option::is_none")]
    step: Option<&'a RawValue>,
    message: CloserMessage<'a>,
    error: CloserError,
}

#[derive(Serialize)]
struct CloserMessage<'a> {
    id: String,
    role: &'static str,
    source: CloserSource<'a>,
    content: [CloserResultBlock<'a>; 1],
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct CloserSource<'a> {
    kind: &'static str,
    call_id: &'a RawValue,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct CloserResultBlock<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    tool_call_id: &'a RawValue,
    is_error: bool,
    content: [CloserText; 1],
}

#[derive(Serialize)]
struct CloserText {
    #[serde(rename = "type")]
    kind: &'static str,
    text: &'static str,
}

#[derive(Serialize)]
struct CloserError {
    name: &'static str,
    code: &'static str,
}

#[derive(Serialize)]
struct StepEndCloser<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    turn: Option<&'a RawValue>,
    #[serde(skip_serializing_if = "Option::is_none")]
    step: Option<&'a RawValue>,
}

#[derive(Serialize)]
struct TurnEndCloser<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    turn: Option<&'a RawValue>,
    reason: InterruptedReason,
}

#[derive(Serialize)]
struct InterruptedReason {
    kind: &'static str,
}
