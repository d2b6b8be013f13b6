//! The persistence contract (reference 01 §7.1 and §7.2), cold part: what a `Coordinator` over
//! any backend must do, from create and append to crash repair, and the helpers every persistence
//! case shares. The live write-behind cases are in `live`, the batched streams in `streams`, the
//! legacy-log cases in `legacy`; all run on the context defined here.

use std::{sync::Arc, time::Duration};

use serde_json::{Value, json};
use session_core::{SessionEvent, SessionHeader, SessionId};
use session_persistence::{Coordinator, CoordinatorConfig, PersistenceError, ReadLimit, SessionPersistence};
use tokio_util::sync::CancellationToken;

use crate::{Place, inspect::kinds};

/// A persistence case's context: its place.
pub(crate) type Cx<'a> = crate::runner::Cx<'a, dyn Place>;

impl Cx<'_> {
    /// A fresh coordinator over the place's storage. Drop the previous one first: a backend may
    /// hold a lock for as long as it lives, as the JSONL store holds its root's.
    pub(crate) fn open(&self) -> Coordinator {
        let config =
            CoordinatorConfig { write_batch_max_delay: Duration::from_millis(20), ..CoordinatorConfig::default() };
        Coordinator::new(self.place.open(), config).unwrap()
    }
}

pub(crate) fn cancel() -> CancellationToken {
    CancellationToken::new()
}

pub(crate) fn header(id: &str) -> SessionHeader {
    let mut header = SessionHeader::new(SessionId::from(id), 1_000);
    header.cwd = Some("/work/project".to_owned());
    header
}

pub(crate) fn event(value: Value) -> Arc<SessionEvent> {
    Arc::new(serde_json::from_value(value).unwrap())
}

fn user_message(seq: u64, turn: u64) -> Arc<SessionEvent> {
    event(json!({"type": "user/message", "seq": seq, "time": 10 + seq, "surfaceOp": "append",
        "data": {"id": format!("m-{seq}"), "role": "user", "source": {"kind": "user"},
                 "content": [{"type": "text", "text": format!("hello {turn}")}]}}))
}

fn assistant_message(seq: u64, turn: u64, tool_calls: &[&str]) -> Arc<SessionEvent> {
    let mut content = vec![json!({"type": "text", "text": "ok"})];
    for call in tool_calls {
        content.push(json!({"type": "tool-call", "id": call, "name": "read_file", "arguments": "{}"}));
    }
    event(json!({"type": "assistant/message", "seq": seq, "time": 10 + seq, "surfaceOp": "append",
        "data": {"turn": turn, "step": 1, "message": {"id": format!("a-{seq}"), "role": "assistant",
                 "source": {"kind": "model", "provider": "p", "model": "m"}, "content": content}}}))
}

pub(crate) fn plain(kind: &str, seq: u64, data: Value) -> Arc<SessionEvent> {
    event(json!({"type": kind, "seq": seq, "time": 10 + seq, "data": data}))
}

/// A complete one-turn log starting at `seq0`: 6 events.
pub(crate) fn one_turn(seq0: u64, turn: u64) -> Vec<Arc<SessionEvent>> {
    vec![
        plain("turn/start", seq0, json!({"turn": turn})),
        user_message(seq0 + 1, turn),
        plain("step/start", seq0 + 2, json!({"turn": turn, "step": 1})),
        assistant_message(seq0 + 3, turn, &[]),
        plain("step/end", seq0 + 4, json!({"turn": turn, "step": 1})),
        plain("turn/end", seq0 + 5, json!({"turn": turn, "reason": {"kind": "completed"}})),
    ]
}

pub(crate) fn seqs(events: &[Arc<SessionEvent>]) -> Vec<u64> {
    events.iter().map(|event| event.seq).collect()
}

pub(crate) async fn round_trip(h: &Cx<'_>) {
    let persistence = h.open();
    persistence.create(header("s-1"), &cancel()).await.unwrap();
    persistence.append(&SessionId::from("s-1"), one_turn(0, 1), &cancel()).await.unwrap();
    drop(persistence);
    let persistence = h.open();
    let loaded = persistence.load(&SessionId::from("s-1"), &cancel()).await.unwrap();
    assert_eq!(*loaded.header, header("s-1"));
    assert_eq!(loaded.events.to_vec(), one_turn(0, 1));
}

pub(crate) async fn create_validates_the_whole_header_and_reserves_nothing_on_failure(h: &Cx<'_>) {
    let persistence = h.open();
    let mut bad = header("s-1");
    bad.cwd = Some("relative/dir".into());
    let err = persistence.create(bad, &cancel()).await.unwrap_err();
    assert_eq!(err.to_string(), "session header cwd must be an absolute path, got \"relative/dir\"");
    persistence.create(header("s-1"), &cancel()).await.unwrap();
    let err = persistence.create(header("s-1"), &cancel()).await.unwrap_err();
    assert_eq!(err.to_string(), "session \"s-1\" already exists in this backend");
}

/// A log that stops inside step 1 of turn 1 (the process died).
pub(crate) fn open_step_log() -> Vec<Arc<SessionEvent>> {
    let mut events = one_turn(0, 1);
    events.extend([
        plain("turn/start", 6, json!({"turn": 2})),
        user_message(7, 2),
        plain("step/start", 8, json!({"turn": 2, "step": 1})),
    ]);
    events
}

pub(crate) async fn crash_recovery_of_an_open_step(h: &Cx<'_>) {
    let id = SessionId::from("s-open");
    let persistence = h.open();
    persistence.create(header("s-open"), &cancel()).await.unwrap();
    persistence.append(&id, open_step_log(), &cancel()).await.unwrap();
    drop(persistence);

    let persistence = h.open();
    let before = persistence.list_snapshots(&cancel()).await.unwrap();
    let inspected = persistence.inspect(&id, &cancel()).await.unwrap();
    assert_eq!(seqs(&inspected.events), (0..11).collect::<Vec<_>>());
    assert_eq!(kinds(&inspected.events[9..]), ["step/end", "turn/end"]);
    assert_eq!(inspected.events[10].data.to_value().unwrap(), json!({"turn": 2, "reason": {"kind": "interrupted"}}));
    assert_eq!(persistence.list_snapshots(&cancel()).await.unwrap(), before, "inspect must not write");

    let loaded = persistence.load(&id, &cancel()).await.unwrap();
    assert_eq!(loaded.events.to_vec(), inspected.events.to_vec());
    assert_ne!(persistence.list_snapshots(&cancel()).await.unwrap(), before, "load commits the repair");

    persistence.append(&id, vec![plain("turn/start", 11, json!({"turn": 3}))], &cancel()).await.unwrap();
    drop(persistence);
    let persistence = h.open();
    let reloaded = persistence.load(&id, &cancel()).await.unwrap();
    assert_eq!(seqs(&reloaded.events), (0..13).collect::<Vec<_>>());
    assert_eq!(kinds(&reloaded.events[11..]), ["turn/start", "turn/end"]);
}

pub(crate) async fn crash_recovery_of_pending_tool_calls(h: &Cx<'_>) {
    let id = SessionId::from("s-tools");
    let events = vec![
        plain("turn/start", 0, json!({"turn": 1})),
        user_message(1, 1),
        plain("step/start", 2, json!({"turn": 1, "step": 1})),
        assistant_message(3, 1, &["call-a", "call-b"]),
        plain(
            "tool/call",
            4,
            json!({"turn": 1, "step": 1, "callId": "call-a", "name": "read_file", "arguments": "{}"}),
        ),
    ];
    let persistence = h.open();
    persistence.create(header("s-tools"), &cancel()).await.unwrap();
    persistence.append(&id, events, &cancel()).await.unwrap();
    let inspected = persistence.inspect(&id, &cancel()).await.unwrap();
    assert_eq!(kinds(&inspected.events[5..]), ["tool/result", "tool/result", "step/end", "turn/end"]);
    let unknown = inspected.events[5].data.to_value().unwrap();
    assert_eq!(unknown["error"], json!({"name": "ToolOutcomeUnknownError", "code": "TOOL_OUTCOME_UNKNOWN"}));
    assert_eq!(inspected.events[5].source_event_seqs.as_deref(), Some(&[4][..]));
    let not_started = inspected.events[6].data.to_value().unwrap();
    assert_eq!(not_started["error"], json!({"name": "ToolNotStartedError", "code": "TOOL_NOT_STARTED"}));
    assert_eq!(not_started["message"]["source"]["callId"], "call-b");
    assert_eq!(inspected.events[6].source_event_seqs, None);
}

pub(crate) async fn lists_only_written_sessions_and_honours_cancellation(h: &Cx<'_>) {
    let persistence = h.open();
    assert_eq!(persistence.list_snapshots(&cancel()).await.unwrap(), session_persistence::Listing::default());
    persistence.create(header("s-lazy"), &cancel()).await.unwrap();
    persistence.append(&SessionId::from("s-lazy"), Vec::new(), &cancel()).await.unwrap();
    persistence.create(header("s-real"), &cancel()).await.unwrap();
    persistence.append(&SessionId::from("s-real"), one_turn(0, 1), &cancel()).await.unwrap();
    let listed = persistence.list(&cancel()).await.unwrap();
    assert_eq!(listed.iter().map(|h| h.id.as_str()).collect::<Vec<_>>(), ["s-real"]);

    let cancelled = CancellationToken::new();
    cancelled.cancel();
    let id = SessionId::from("s-real");
    assert!(matches!(persistence.list(&cancelled).await, Err(PersistenceError::Cancelled)));
    assert!(matches!(persistence.list_snapshots(&cancelled).await, Err(PersistenceError::Cancelled)));
    assert!(matches!(persistence.inspect(&id, &cancelled).await, Err(PersistenceError::Cancelled)));
    assert!(matches!(persistence.read_from(&id, 0, &cancelled).await, Err(PersistenceError::Cancelled)));
    assert!(matches!(persistence.load(&id, &cancelled).await, Err(PersistenceError::Cancelled)));
    assert!(matches!(persistence.append(&id, one_turn(6, 2), &cancelled).await, Err(PersistenceError::Cancelled)));
    assert_eq!(persistence.read_from(&id, 0, &cancel()).await.unwrap().events.len(), 6, "nothing was written");
}

pub(crate) async fn read_from_serves_stored_suffixes_without_closers(h: &Cx<'_>) {
    let id = SessionId::from("s-read");
    let persistence = h.open();
    persistence.create(header("s-read"), &cancel()).await.unwrap();
    persistence.append(&id, open_step_log(), &cancel()).await.unwrap();
    let read = |from| {
        let persistence = persistence.clone();
        let id = id.clone();
        async move { seqs(&persistence.read_from(&id, from, &cancel()).await.unwrap().events) }
    };
    assert_eq!(read(0).await, (0..9).collect::<Vec<_>>());
    assert_eq!(read(3).await, (3..9).collect::<Vec<_>>());
    assert_eq!(read(9).await, Vec::<u64>::new());
    assert_eq!(read(100).await, Vec::<u64>::new());
    let missing = persistence.read_from(&SessionId::from("nope"), 0, &cancel()).await.unwrap_err();
    assert_eq!(missing.to_string(), "session \"nope\" not found");
}

/// Tails asked together answer what each asked alone answers, in the order asked: from seq 0,
/// from inside the log, past its end, a session not stored, one asked twice, and a tail longer
/// than a short read (several appends, so several rows where rows hold runs).
pub(crate) async fn read_from_many_answers_what_read_from_answers(h: &Cx<'_>) {
    let persistence = h.open();
    for (name, turns) in [("s-many-a", 1u64), ("s-many-b", 3), ("s-many-c", 60)] {
        let id = SessionId::from(name);
        persistence.create(header(name), &cancel()).await.unwrap();
        for turn in 0..turns {
            persistence.append(&id, one_turn(turn * 6, turn + 1), &cancel()).await.unwrap();
        }
    }
    let reads: Vec<(SessionId, u64)> = [
        ("s-many-a", 0),
        ("s-many-b", 3),
        ("nope", 0),
        ("s-many-c", 7),
        ("s-many-c", 355),
        ("s-many-b", 100),
        ("s-many-b", 12),
        ("s-many-c", 0),
    ]
    .into_iter()
    .map(|(id, from)| (SessionId::from(id), from))
    .collect();
    let together = persistence.read_from_many(&reads, ReadLimit::NONE, &cancel()).await;
    assert_eq!(together.len(), reads.len());
    let shown = |id: &SessionId, events: &[Arc<SessionEvent>]| {
        (id.clone(), events.iter().map(|event| (event.seq, event.kind.to_string())).collect::<Vec<_>>())
    };
    for ((id, from), answer) in reads.iter().zip(&together) {
        let alone = persistence.read_from(id, *from, &cancel()).await;
        let answer = answer.as_ref().map(|suffix| {
            assert!(!suffix.cut && suffix.revision.is_some(), "{id} from {from}: no limit, nothing cut");
            shown(&suffix.header.id, &suffix.events)
        });
        let alone = alone.as_ref().map(|inspection| shown(&inspection.header.id, &inspection.events));
        assert_eq!(answer.map_err(ToString::to_string), alone.map_err(ToString::to_string), "{id} from {from}");
    }
    assert_eq!(together[3].as_ref().unwrap().events.len(), 353, "the long tail whole");
    assert_eq!(together[2].as_ref().unwrap_err().to_string(), "session \"nope\" not found");
}

/// Tails read under a limit stop after the event that reaches it, say they were cut, and read
/// on from the next seq give the whole tail, alone and in a batch (where a database server reads
/// them ahead); a tail that ends right at the limit is cut, and the read after it is empty.
pub(crate) async fn read_from_many_stops_at_its_limit(h: &Cx<'_>) {
    let persistence = h.open();
    for (name, turns) in [("s-cut-a", 40u64), ("s-cut-b", 2)] {
        let id = SessionId::from(name);
        persistence.create(header(name), &cancel()).await.unwrap();
        for turn in 0..turns {
            persistence.append(&id, one_turn(turn * 6, turn + 1), &cancel()).await.unwrap();
        }
    }
    let (long, short) = (SessionId::from("s-cut-a"), SessionId::from("s-cut-b"));
    let whole = persistence.read_from(&long, 5, &cancel()).await.unwrap().events;
    let seqs = |events: &[Arc<SessionEvent>]| events.iter().map(|event| event.seq).collect::<Vec<_>>();
    let one_line = whole[0].encoded_len();
    for limit in [
        ReadLimit { events: 50, bytes: usize::MAX },
        ReadLimit { events: usize::MAX, bytes: 4 * one_line },
        ReadLimit { events: 1, bytes: 1 },
    ] {
        let mut read = Vec::new();
        let mut from = 5;
        loop {
            // Read beside another session's tail, so a batch is read ahead where one can be.
            let answers =
                persistence.read_from_many(&[(long.clone(), from), (short.clone(), 0)], limit, &cancel()).await;
            let mut answers = answers.into_iter();
            let suffix = answers.next().unwrap().unwrap();
            assert_eq!(suffix.header.id, long);
            assert_eq!(suffix.revision.is_none(), suffix.cut, "{limit:?}");
            assert!(suffix.events.len() <= limit.events, "{limit:?}");
            // Only the read after a piece that ended right at the log's end is empty.
            if let Some(last) = suffix.events.last() {
                let bytes: usize = suffix.events.iter().map(|event| event.encoded_len()).sum();
                assert!(
                    bytes - last.encoded_len() < limit.bytes,
                    "{limit:?}: it ends at the event that reaches the bound"
                );
                read.extend(suffix.events.iter().cloned());
                from = last.seq + 1;
            } else {
                assert!(!suffix.cut && from == whole.last().unwrap().seq + 1, "{limit:?}: an empty read from {from}");
            }
            let other = answers.next().unwrap().unwrap();
            assert_eq!(other.events[0].seq, 0);
            if !suffix.cut {
                break;
            }
        }
        assert_eq!(seqs(&read), seqs(&whole), "{limit:?}");
    }
    // A tail of exactly the limit's length is whole, and cut; the read after it is empty.
    let exact = ReadLimit { events: whole.len(), bytes: usize::MAX };
    let answer = persistence.read_from_many(&[(long.clone(), 5)], exact, &cancel()).await.pop().unwrap().unwrap();
    assert_eq!(seqs(&answer.events), seqs(&whole));
    assert!(answer.cut && answer.revision.is_none());
    let after = whole.last().unwrap().seq + 1;
    let answer = persistence.read_from_many(&[(long.clone(), after)], exact, &cancel()).await.pop().unwrap().unwrap();
    assert!(answer.events.is_empty() && !answer.cut && answer.revision.is_some());
}

pub(crate) async fn revisions_are_stable_and_change_on_append(h: &Cx<'_>) {
    let id = SessionId::from("s-rev");
    let persistence = h.open();
    persistence.create(header("s-rev"), &cancel()).await.unwrap();
    persistence.append(&id, one_turn(0, 1), &cancel()).await.unwrap();
    let first = persistence.list_snapshots(&cancel()).await.unwrap();
    assert_eq!(persistence.list_snapshots(&cancel()).await.unwrap(), first);
    persistence.inspect(&id, &cancel()).await.unwrap();
    assert_eq!(persistence.list_snapshots(&cancel()).await.unwrap(), first);
    persistence.append(&id, one_turn(6, 2), &cancel()).await.unwrap();
    assert_ne!(persistence.list_snapshots(&cancel()).await.unwrap().headers[0].revision, first.headers[0].revision);
}

pub(crate) async fn append_rejects_stale_and_gapped_batches(h: &Cx<'_>) {
    let id = SessionId::from("s-gap");
    let persistence = h.open();
    persistence.create(header("s-gap"), &cancel()).await.unwrap();
    persistence.append(&id, one_turn(0, 1), &cancel()).await.unwrap();
    let err = persistence.append(&id, one_turn(0, 1), &cancel()).await.unwrap_err();
    assert_eq!(err.to_string(), "append seq mismatch for \"s-gap\": expected 6 at index 0, got 0");
    let mut gapped = one_turn(6, 2);
    gapped.remove(2);
    let err = persistence.append(&id, gapped, &cancel()).await.unwrap_err();
    assert_eq!(err.to_string(), "append seq mismatch for \"s-gap\": expected 8 at index 2, got 9");
    assert_eq!(persistence.read_from(&id, 0, &cancel()).await.unwrap().events.len(), 6);
}

pub(crate) async fn missing_sessions_are_not_found_and_duplicates_are_refused(h: &Cx<'_>) {
    let persistence = h.open();
    let missing = SessionId::from("missing");
    assert!(persistence.load(&missing, &cancel()).await.unwrap_err().is_not_found());
    assert!(persistence.inspect(&missing, &cancel()).await.unwrap_err().is_not_found());
    persistence.create(header("s-dup"), &cancel()).await.unwrap();
    persistence.append(&SessionId::from("s-dup"), one_turn(0, 1), &cancel()).await.unwrap();
    drop(persistence);
    let persistence = h.open();
    let err = persistence.create(header("s-dup"), &cancel()).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "session \"s-dup\" already has a persisted log on disk; load/resume it instead of creating"
    );
}

pub(crate) async fn append_adopts_a_stored_session(h: &Cx<'_>) {
    let id = SessionId::from("s-adopt");
    let persistence = h.open();
    persistence.create(header("s-adopt"), &cancel()).await.unwrap();
    persistence.append(&id, one_turn(0, 1), &cancel()).await.unwrap();
    drop(persistence);
    let persistence = h.open();
    persistence.append(&id, vec![plain("turn/start", 6, json!({"turn": 2}))], &cancel()).await.unwrap();
    drop(persistence);
    let persistence = h.open();
    // The adopted log had no open turn, so nothing was added besides the new event; the
    // new event opened a turn, which a cold load now closes.
    let loaded = persistence.load(&id, &cancel()).await.unwrap();
    assert_eq!(kinds(&loaded.events[6..]), ["turn/start", "turn/end"]);
}

pub(crate) async fn unknown_event_types_are_refused_unless_ignorable(h: &Cx<'_>) {
    let persistence = h.open();
    let id = SessionId::from("s-future");
    let mut future = one_turn(0, 1);
    future.push(plain("future/event", 6, json!({"x": 1})));
    // No writer stores an unknown type (the storable check), so the log is written as a newer
    // harness would have written it.
    persistence.create(header("s-future"), &cancel()).await.unwrap();
    let err = persistence.append(&id, future.clone(), &cancel()).await.unwrap_err();
    assert!(matches!(&err, PersistenceError::Unstorable { index: 6, .. }), "{err:?}");
    match persistence.inspect(&id, &cancel()).await {
        Err(PersistenceError::NotFound { .. }) => {}
        Ok(stored) => assert!(stored.events.is_empty(), "nothing of a refused batch is stored"),
        Err(error) => panic!("{error}"),
    }
    crate::legacy::store_raw(&persistence, &header("s-future-raw"), &future);
    let id = SessionId::from("s-future-raw");
    let err = persistence.inspect(&id, &cancel()).await.unwrap_err();
    assert!(matches!(err, PersistenceError::FormatUnsupported { .. }), "{err:?}");
    assert!(err.to_string().contains("contains event type \"future/event\" (seq 6) unknown to this harness"), "{err}");

    persistence.create(header("s-future-ok"), &cancel()).await.unwrap();
    let id = SessionId::from("s-future-ok");
    let mut tolerated = one_turn(0, 1);
    tolerated.push(event(json!({"type": "future/event", "seq": 6, "time": 1, "data": null, "ignorable": true})));
    persistence.append(&id, tolerated, &cancel()).await.unwrap();
    let inspected = persistence.inspect(&id, &cancel()).await.unwrap();
    assert_eq!(inspected.events.len(), 7);
    assert!(inspected.events[6].ignorable);
}
