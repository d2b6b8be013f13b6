//! Size bounds through the `SessionPersistence` trait, on the memory store and the JSONL store
//! raw and zstd: whatever `create` and `append` accept reads back identically through
//! `inspect`; a header field or an event over its bound is refused with `TooLarge`, and nothing
//! is stored.

use std::{fs, sync::Arc};

use proptest::prelude::*;
use serde_json::{Value, json};
use session_core::{
    HeaderField, JsonData, MAX_EVENT_BYTES, MAX_HEADER_JSON_BYTES, Origin, Oversized, SessionEvent, SessionHeader,
    SessionId, SurfaceOp, TooLarge,
};
use session_persistence::{
    PersistenceError, SessionPersistence, encode_segment,
    format::{MAX_HEADER_BYTES, decode_header_line, encode_header_line},
    project_key,
};
use tokio_util::sync::CancellationToken;

use crate::contract::{Harness, KINDS, Kind};

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
}

fn cancel() -> CancellationToken {
    CancellationToken::new()
}

/// A field's size relative to its bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Size {
    Small,
    Below,
    At,
    Above,
}

impl Size {
    fn bytes(self, limit: usize) -> usize {
        match self {
            Size::Small => 12,
            Size::Below => limit - 1,
            Size::At => limit,
            Size::Above => limit + 1,
        }
    }
}

fn size() -> impl Strategy<Value = Size> {
    prop_oneof![3 => Just(Size::Small), 1 => Just(Size::Below), 1 => Just(Size::At), 1 => Just(Size::Above)]
}

/// Characters a field is made of: plain, multi-byte, and ones JSON escapes (up to six bytes).
fn filler() -> impl Strategy<Value = char> {
    prop_oneof![Just('a'), Just('é'), Just('"'), Just('\u{1}'), Just('😀')]
}

/// Exactly `len` bytes: `prefix`, then `filler` while it fits, then `a`s.
fn text_of(len: usize, prefix: &str, filler: char) -> String {
    let mut text = String::from(prefix);
    while text.len() + filler.len_utf8() <= len {
        text.push(filler);
    }
    while text.len() < len {
        text.push('a');
    }
    text
}

fn field() -> impl Strategy<Value = (Size, char)> {
    (size(), filler())
}

fn arb_header() -> impl Strategy<Value = SessionHeader> {
    (
        field(),
        proptest::option::of(field()),
        proptest::option::of(field()),
        proptest::option::of(field()),
        proptest::option::of(field()),
        any::<bool>(),
        0u64..4,
    )
        .prop_map(|(id, cwd, parent, preset, owner, subagent, depth)| {
            let value = |field: HeaderField, (size, filler): (Size, char)| {
                let prefix = if field == HeaderField::Cwd { "/" } else { "s" };
                text_of(size.bytes(field.limit()), prefix, filler)
            };
            let mut header = SessionHeader::new(SessionId::from(value(HeaderField::Id, id)), 1_772_442_000_000);
            header.cwd = cwd.map(|cwd| value(HeaderField::Cwd, cwd));
            header.parent_session = parent.map(|parent| SessionId::from(value(HeaderField::ParentSession, parent)));
            header.agent_preset = preset.map(|preset| value(HeaderField::AgentPreset, preset));
            header.owner = owner.map(|owner| value(HeaderField::Owner, owner));
            header.origin = subagent.then_some(Origin::Subagent);
            header.delegation_depth = depth;
            header
        })
}

/// A lossless JSON payload of assorted shapes.
fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        (-(1i64 << 53) + 1..1i64 << 53).prop_map(Value::from),
        "[a-z\"\\\\ é😀\u{1}\n]{0,16}".prop_map(Value::from),
        ".{0,600}".prop_map(Value::from),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map("[a-zA-Z]{1,6}", inner, 0..4)
                .prop_map(|map| Value::Object(map.into_iter().collect())),
        ]
    })
}

/// One generated event inside a turn.
#[derive(Debug, Clone)]
enum Item {
    /// A run of `assistant/chunk` deltas of one kind (text, reasoning, tool call) and block
    /// index; runs of three or more pack into a row on a JSONL store.
    Chunks(u8, u8, Vec<String>),
    /// A user message on the surface.
    Message(String),
    /// An ignorable event of a type no reader knows, with any payload.
    Note(Value),
}

fn item() -> impl Strategy<Value = Item> {
    let text = prop_oneof!["[a-z\"\\\\ é😀\u{1}]{0,12}", ".{0,300}"];
    prop_oneof![
        4 => (0u8..3, 0u8..2, prop::collection::vec(text.clone(), 1..8))
            .prop_map(|(kind, index, texts)| Item::Chunks(kind, index, texts)),
        1 => text.prop_map(Item::Message),
        1 => json_value().prop_map(Item::Note),
    ]
}

fn event_of(kind: &str, seq: u64, time: i64, data: &Value) -> SessionEvent {
    SessionEvent::new(kind, seq, time, JsonData::from_value(data).expect("generated payloads are lossless"))
}

/// The events of `item` from `seq` on, around `time`.
fn build_events(seq: u64, time: i64, item: &Item) -> Vec<SessionEvent> {
    match item {
        Item::Chunks(kind, index, texts) => texts
            .iter()
            .zip(seq..)
            .map(|(text, seq)| {
                let chunk = match kind {
                    0 => json!({"type": "text-delta", "index": index, "text": text}),
                    1 => json!({"type": "reasoning-delta", "index": index, "text": text}),
                    _ => json!({"type": "tool-call-delta", "index": index, "id": "call-1", "argumentsDelta": text}),
                };
                let data = json!({"turn": 1, "step": 1, "chunk": chunk});
                event_of("assistant/chunk", seq, time + (seq % 3) as i64, &data)
            })
            .collect(),
        Item::Message(text) => {
            let data = json!({"id": format!("m-{seq}"), "role": "user", "source": {"kind": "user"},
                "content": [{"type": "text", "text": text}]});
            let mut event = event_of("user/message", seq, time, &data);
            event.surface_op = Some(SurfaceOp::Append);
            vec![event]
        }
        Item::Note(data) => {
            let mut event = event_of("test/note", seq, time, data);
            event.ignorable = true;
            vec![event]
        }
    }
}

/// A closed turn around `items`, with times that may step back, cut into batches at `cuts`.
fn build_batches(items: &[(Item, i64)], cuts: &[prop::sample::Index]) -> Vec<Vec<Arc<SessionEvent>>> {
    let mut events = vec![event_of("turn/start", 0, 1_000, &json!({"turn": 1}))];
    let mut time = 1_000;
    for (item, step) in items {
        time += step;
        events.extend(build_events(events.len() as u64, time, item));
    }
    let end = json!({"turn": 1, "reason": {"kind": "completed"}});
    events.push(event_of("turn/end", events.len() as u64, time + 1, &end));
    let mut cut_at: Vec<usize> = cuts.iter().map(|cut| cut.index(events.len())).collect();
    cut_at.extend([0, events.len()]);
    cut_at.sort_unstable();
    cut_at.dedup();
    let events: Vec<Arc<SessionEvent>> = events.into_iter().map(Arc::new).collect();
    cut_at.windows(2).map(|pair| events[pair[0]..pair[1]].to_vec()).collect()
}

/// Nothing of `id` is stored: the listing is empty and a read does not find it.
async fn assert_nothing_stored(
    persistence: &dyn SessionPersistence,
    id: &SessionId,
    kind: Kind,
) -> Result<(), TestCaseError> {
    let listed = persistence.list(&cancel()).await.unwrap();
    prop_assert!(listed.is_empty(), "{kind:?}: {} session(s) listed", listed.len());
    prop_assert!(persistence.inspect(id, &cancel()).await.is_err(), "{kind:?}: the refused session reads");
    Ok(())
}

async fn check_store(
    kind: Kind,
    header: &SessionHeader,
    batches: &[Vec<Arc<SessionEvent>>],
) -> Result<(), TestCaseError> {
    let harness = Harness::new(kind);
    let persistence = harness.open();
    let id = header.id.clone();
    let refusal = header.check_sizes().err();
    match persistence.create(header.clone(), &cancel()).await {
        Ok(()) => prop_assert_eq!(&refusal, &None, "{:?}: created over a bound", kind),
        Err(PersistenceError::TooLarge(too_large)) => {
            prop_assert_eq!(Some(too_large), refusal, "{:?}", kind);
            return assert_nothing_stored(&persistence, &id, kind).await;
        }
        Err(other) => {
            // Within the bounds, only a file system's name limit may refuse an id.
            prop_assert!(refusal.is_none(), "{kind:?}: {other}");
            prop_assert!(kind != Kind::Memory && encode_segment(id.as_str()).is_err(), "{kind:?}: {other}");
            return assert_nothing_stored(&persistence, &id, kind).await;
        }
    }
    for batch in batches {
        persistence.append(&id, batch.clone(), &cancel()).await.unwrap();
    }
    let written: Vec<Arc<SessionEvent>> = batches.concat();
    // Read through a fresh coordinator, so the bytes are decoded again.
    drop(persistence);
    let persistence = harness.open();
    let read = persistence.inspect(&id, &cancel()).await.unwrap();
    prop_assert_eq!(&*read.header, header, "{:?}", kind);
    prop_assert_eq!(read.n_closers, 0);
    prop_assert_eq!(read.events.to_vec(), written, "{:?}", kind);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Whatever `create` and `append` accept reads back identically on every backend; a header
    /// over a bound is refused with its typed error before anything is stored.
    #[test]
    fn what_is_accepted_reads_back_identically(
        header in arb_header(),
        items in prop::collection::vec((item(), -3i64..4), 0..24),
        cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..3),
    ) {
        let batches = build_batches(&items, &cuts);
        runtime().block_on(async {
            for kind in KINDS {
                check_store(kind, &header, &batches).await?;
            }
            Ok::<(), TestCaseError>(())
        })?;
    }
}

/// An ignorable `test/blob` at `seq` whose record is exactly `size` bytes.
fn blob_of_size(seq: u64, size: usize) -> SessionEvent {
    let mut probe = SessionEvent::new("test/blob", seq, 5, JsonData::from_text("\"\"").unwrap());
    probe.ignorable = true;
    let text = format!("\"{}\"", "x".repeat(size - probe.encoded_len()));
    SessionEvent { data: JsonData::from_text(text).unwrap(), ..probe }
}

#[test]
fn an_event_at_the_bound_is_stored_and_one_byte_more_is_refused() {
    let at_limit = Arc::new(blob_of_size(0, MAX_EVENT_BYTES));
    assert_eq!(at_limit.encoded_len(), MAX_EVENT_BYTES);
    let small = Arc::new(blob_of_size(1, 100));
    let over = Arc::new(blob_of_size(2, MAX_EVENT_BYTES + 1));
    let expected = TooLarge {
        what: Oversized::Event { kind: "test/blob".into(), seq: 2 },
        size: MAX_EVENT_BYTES as u64 + 1,
        limit: MAX_EVENT_BYTES as u64,
    };
    let runtime = runtime();
    for kind in KINDS {
        runtime.block_on(async {
            let harness = Harness::new(kind);
            let persistence = harness.open();
            let id = SessionId::from("s-big");
            let mut header = SessionHeader::new(id.clone(), 1_000);
            header.cwd = Some("/work".to_owned());
            persistence.create(header, &cancel()).await.unwrap();
            persistence.append(&id, vec![Arc::clone(&at_limit)], &cancel()).await.unwrap();
            // The whole batch is refused: the small event before the big one is not stored either.
            let error =
                persistence.append(&id, vec![Arc::clone(&small), Arc::clone(&over)], &cancel()).await.unwrap_err();
            match error {
                PersistenceError::TooLarge(too_large) => assert_eq!(too_large, expected, "{kind:?}"),
                other => panic!("{kind:?}: expected TooLarge, got {other}"),
            }
            drop(persistence);
            let persistence = harness.open();
            let read = persistence.inspect(&id, &cancel()).await.unwrap();
            assert_eq!(read.events.len(), 1, "{kind:?}");
            assert_eq!(read.events[0], at_limit, "{kind:?}");
            // The session goes on after the refusal.
            persistence.append(&id, vec![small.clone()], &cancel()).await.unwrap();
        });
    }
}

/// A header with every bounded field at its limit, made of `filler` (the id stays short on a
/// JSONL store, whose directory names cannot hold a longer one).
fn largest_header(filler: char, id_len: usize) -> SessionHeader {
    let text = |field: HeaderField| text_of(field.limit(), if field == HeaderField::Cwd { "/" } else { "" }, filler);
    let mut header = SessionHeader::new(SessionId::from(text_of(id_len, "s", 'a')), 9_007_199_254_740_991);
    header.cwd = Some(text(HeaderField::Cwd));
    header.parent_session = Some(SessionId::from(text(HeaderField::ParentSession)));
    header.seed_length = Some(9_007_199_254_740_991);
    header.origin = Some(Origin::Subagent);
    header.delegation_depth = 9_007_199_254_740_991;
    header.agent_preset = Some(text(HeaderField::AgentPreset));
    header.owner = Some(text(HeaderField::Owner));
    header
}

#[test]
fn the_largest_header_line_is_far_under_the_reader_limit() {
    // Well under, not just under.
    const { assert!(MAX_HEADER_JSON_BYTES * 16 < MAX_HEADER_BYTES) };
    for filler in ['a', 'é', '"', '\u{1}', '😀'] {
        let header = largest_header(filler, HeaderField::Id.limit());
        assert_eq!(header.check_sizes(), Ok(()));
        let line = encode_header_line(&header);
        assert!(line.len() <= MAX_HEADER_JSON_BYTES, "{filler:?}: {} bytes", line.len());
        assert_eq!(decode_header_line(line.as_bytes(), "log".as_ref()).unwrap(), header);
    }
}

#[test]
fn the_largest_storable_header_round_trips_on_every_backend() {
    let runtime = runtime();
    for kind in KINDS {
        for filler in ['é', '\u{1}'] {
            let header = largest_header(filler, 200);
            runtime.block_on(async {
                let harness = Harness::new(kind);
                let persistence = harness.open();
                persistence.create(header.clone(), &cancel()).await.unwrap();
                let turn = vec![
                    Arc::new(event_of("turn/start", 0, 1, &json!({"turn": 1}))),
                    Arc::new(event_of("turn/end", 1, 2, &json!({"turn": 1, "reason": {"kind": "completed"}}))),
                ];
                persistence.append(&header.id, turn.clone(), &cancel()).await.unwrap();
                drop(persistence);
                let read = harness.open().inspect(&header.id, &cancel()).await.unwrap();
                assert_eq!(*read.header, header, "{kind:?}");
                assert_eq!(read.events.to_vec(), turn, "{kind:?}");
            });
        }
    }
}

#[test]
fn an_oversized_header_field_is_refused_with_its_name_and_nothing_is_stored() {
    let runtime = runtime();
    for kind in KINDS {
        runtime.block_on(async {
            let harness = Harness::new(kind);
            let persistence = harness.open();
            let mut header = SessionHeader::new(SessionId::from("s-cwd"), 1_000);
            header.cwd = Some(format!("/{}", "d".repeat(2 << 20)));
            let error = persistence.create(header, &cancel()).await.unwrap_err();
            assert_eq!(error.to_string(), "session header cwd is 2097153 bytes, over the 4096-byte limit");
            assert!(matches!(error, PersistenceError::TooLarge(_)), "{kind:?}: {error:?}");
            assert!(persistence.list(&cancel()).await.unwrap().is_empty());
            let error = persistence.inspect(&SessionId::from("s-cwd"), &cancel()).await.unwrap_err();
            assert!(error.is_not_found(), "{kind:?}: {error}");
        });
    }
}

/// The bounds apply to what is written, never to what is read: a log whose header was written
/// before them (a cwd over 4096 bytes) still reads.
#[test]
fn a_log_written_before_the_bounds_still_reads() {
    let harness = Harness::new(Kind::JsonlRaw);
    drop(harness.open());
    let mut header = SessionHeader::new(SessionId::from("s-old"), 1_000);
    header.cwd = Some(format!("/{}", "d".repeat(8_000)));
    let event = event_of("turn/start", 0, 1, &json!({"turn": 1}));
    let dir = harness.root().join(project_key(header.cwd.as_deref().unwrap()).unwrap()).join("s-old");
    fs::create_dir_all(&dir).unwrap();
    let mut text = encode_header_line(&header);
    text.push('\n');
    text.push_str(&serde_json::to_string(&event).unwrap());
    text.push('\n');
    fs::write(dir.join("session.jsonl"), text).unwrap();

    runtime().block_on(async {
        let persistence = harness.open();
        let read = persistence.inspect(&header.id, &cancel()).await.unwrap();
        assert_eq!(*read.header, header);
        assert_eq!(read.events.first().map(|event| event.kind.as_str()), Some("turn/start"));
    });
}
