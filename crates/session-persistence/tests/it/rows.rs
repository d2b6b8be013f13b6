//! The pure format: packed chunk rows, header lines and batch encoding.

use std::path::Path;

use proptest::prelude::*;
use session_core::{JsonData, SessionEvent, json::MAX_SAFE_INTEGER};
use session_persistence::{
    PersistenceError,
    format::{
        ChunkKind, MIN_RUN, Record, decode_header_line, decode_record, encode_batch, encode_header_line,
        pack_chunk_runs,
    },
};

use crate::{event, header, text_delta};

fn decode_lines(text: &str) -> Vec<SessionEvent> {
    let mut events = Vec::new();
    for line in text.lines() {
        decode_record(line, &mut events).unwrap_or_else(|error| panic!("{line}: {error}"));
    }
    events
}

fn encode(events: &[SessionEvent], pack: bool) -> String {
    let mut out = Vec::new();
    encode_batch(events, pack, &mut out).unwrap();
    String::from_utf8(out).unwrap()
}

#[test]
fn runs_pack_from_three_members() {
    for n in 1..6u64 {
        let events: Vec<SessionEvent> = (0..n).map(|k| text_delta(k, 100 + k as i64 * 7, "t")).collect();
        let records = pack_chunk_runs(&events);
        if n as usize >= MIN_RUN {
            assert_eq!(records.len(), 1);
            assert!(
                matches!(&records[0], Record::Chunks(row) if row.kind == ChunkKind::Text && row.members.len() == n as usize)
            );
        } else {
            assert!(records.iter().all(|record| matches!(record, Record::Event(_))));
        }
    }
    let events: Vec<SessionEvent> = (0..3).map(|k| text_delta(k, 5 - k as i64, "a\"b")).collect();
    assert_eq!(
        encode(&events, true),
        "{\"type\":\"text-chunks\",\"seq0\":0,\"time0\":5,\"data\":{\"turn\":1,\"step\":1,\"index\":0,\"dt\":[-1,-1],\
         \"texts\":[\"a\\\"b\",\"a\\\"b\",\"a\\\"b\"]}}\n"
    );
    assert_eq!(decode_lines(&encode(&events, true)), events);
    assert_eq!(encode(&events, false).lines().count(), 3);
}

#[test]
fn tool_call_rows_keep_id_and_name() {
    let delta = |seq: u64, name: Option<&str>| {
        let mut chunk = serde_json::json!({"type": "tool-call-delta", "index": 2, "id": "call_1"});
        if let Some(name) = name {
            chunk["name"] = name.into();
        }
        chunk["argumentsDelta"] = format!("a{seq}").into();
        event("assistant/chunk", seq, 10, &serde_json::json!({"turn": 1, "step": 2, "chunk": chunk}).to_string())
    };
    // The first delta names the tool and so cannot join the nameless rest.
    let events = vec![delta(0, Some("read")), delta(1, None), delta(2, None), delta(3, None)];
    let text = encode(&events, true);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2);
    assert_eq!(
        lines[1],
        r#"{"type":"tool-call-chunks","seq0":1,"time0":10,"data":{"turn":1,"step":2,"index":2,"dt":[0,0],"id":"call_1","args":["a1","a2","a3"]}}"#
    );
    assert_eq!(decode_lines(&text), events);
    let named: Vec<SessionEvent> = (0..3).map(|seq| delta(seq, Some("read"))).collect();
    assert!(encode(&named, true).contains(r#""id":"call_1","name":"read","args":["#));
    assert_eq!(decode_lines(&encode(&named, true)), named);
}

#[test]
fn non_whitelisted_shapes_stay_verbatim() {
    let base = |data: &str, seq: u64| event("assistant/chunk", seq, 0, data);
    for data in [
        r#"{"turn":1,"step":1,"chunk":{"type":"text-delta","index":0,"text":"x","extra":1}}"#,
        r#"{"turn":1,"step":1,"chunk":{"type":"text-delta","index":0,"text":5}}"#,
        r#"{"turn":"1","step":1,"chunk":{"type":"text-delta","index":0,"text":"x"}}"#,
        r#"{"turn":1,"step":1,"chunk":{"type":"block-start","index":0,"blockType":"text"}}"#,
        r#"{"turn":1,"step":1,"extra":0,"chunk":{"type":"text-delta","index":0,"text":"x"}}"#,
        r#"{"turn":1,"step":1,"chunk":{"type":"text-delta","index":0,"text":"x","text":"y"}}"#,
    ] {
        let events: Vec<SessionEvent> = (0..4).map(|seq| base(data, seq)).collect();
        assert!(pack_chunk_runs(&events).iter().all(|record| matches!(record, Record::Event(_))), "{data}");
    }
    let mut ignorable = text_delta(0, 0, "x");
    ignorable.ignorable = true;
    let events = vec![ignorable, text_delta(1, 0, "x"), text_delta(2, 0, "x")];
    assert_eq!(pack_chunk_runs(&events).len(), 3);
    // A seq gap or a time gap beyond the safe range breaks a run.
    let events = vec![text_delta(0, 0, "a"), text_delta(1, 0, "b"), text_delta(3, 0, "c")];
    assert_eq!(pack_chunk_runs(&events).len(), 3);
    let far = MAX_SAFE_INTEGER as i64;
    let events = vec![text_delta(0, -far, "a"), text_delta(1, far, "b"), text_delta(2, far, "c")];
    assert_eq!(pack_chunk_runs(&events).len(), 3);
}

fn check_malformed(line: &str, expected: &str) {
    let mut out = Vec::new();
    let error = decode_record(line, &mut out).expect_err(line);
    assert_eq!(error.message(), expected, "{line}");
    assert!(out.is_empty());
}

#[test]
fn malformed_rows_are_rejected_with_reasons() {
    let row = |data: &str| format!(r#"{{"type":"text-chunks","seq0":0,"time0":0,"data":{data}}}"#);
    let ok = r#"{"turn":1,"step":1,"index":0,"dt":[1],"texts":["a","b"]}"#;
    let mut out = Vec::new();
    decode_record(&row(ok), &mut out).unwrap();
    assert_eq!(out.len(), 2);
    let prefix = "malformed text-chunks storage row: ";
    for (line, why) in [
        (r#"{"type":"text-chunks","seq0":0,"time0":0,"data":{},"x":1}"#.to_owned(), "envelope must be exactly {type, seq0, time0, data}"),
        (r#"{"type":"text-chunks","seq":0,"time":0,"data":{}}"#.to_owned(), "envelope must be exactly {type, seq0, time0, data}"),
        (r#"{"type":"text-chunks","seq0":-1,"time0":0,"data":{}}"#.to_owned(), "seq0 must be a non-negative safe integer"),
        (r#"{"type":"text-chunks","seq0":1.5,"time0":0,"data":{}}"#.to_owned(), "seq0 must be a non-negative safe integer"),
        (r#"{"type":"text-chunks","seq0":0,"time0":"0","data":{}}"#.to_owned(), "time0 must be a safe integer"),
        (r#"{"type":"text-chunks","seq0":0,"time0":0,"data":null}"#.to_owned(), "data must be an object"),
        (row(r#"[]"#), "data must be exactly {turn, step, index, dt, texts}"),
        (row(r#"{"turn":1,"step":1,"index":0,"dt":[]}"#), "data must be exactly {turn, step, index, dt, texts}"),
        (row(r#"{"turn":"1","step":1,"index":0,"dt":[],"texts":["a"]}"#), "turn/step/index must be numbers"),
        (row(r#"{"turn":1,"step":1,"index":0,"dt":[],"texts":[]}"#), "texts must be a non-empty string array"),
        (row(r#"{"turn":1,"step":1,"index":0,"dt":[],"texts":[1]}"#), "texts must be a non-empty string array"),
        (row(r#"{"turn":1,"step":1,"index":0,"dt":[0.5],"texts":["a","b"]}"#), "dt must be an array of safe integers"),
        (row(r#"{"turn":1,"step":1,"index":0,"dt":[1,2],"texts":["a","b"]}"#), "dt length 2 does not match 2 members"),
        (
            r#"{"type":"text-chunks","seq0":9007199254740991,"time0":0,"data":{"turn":1,"step":1,"index":0,"dt":[1],"texts":["a","b"]}}"#.to_owned(),
            "member seqs must stay safe integers",
        ),
        (
            r#"{"type":"text-chunks","seq0":0,"time0":9007199254740991,"data":{"turn":1,"step":1,"index":0,"dt":[1],"texts":["a","b"]}}"#.to_owned(),
            "member times must stay safe integers",
        ),
    ] {
        check_malformed(&line, &format!("{prefix}{why}"));
    }
    let tool = |data: &str| format!(r#"{{"type":"tool-call-chunks","seq0":0,"time0":0,"data":{data}}}"#);
    check_malformed(
        &tool(r#"{"turn":1,"step":1,"index":0,"dt":[],"args":["a"]}"#),
        "malformed tool-call-chunks storage row: data must be exactly {turn, step, index, id, name?, dt, args}",
    );
    check_malformed(
        &tool(r#"{"turn":1,"step":1,"index":0,"id":"c","name":7,"dt":[],"args":["a"]}"#),
        "malformed tool-call-chunks storage row: id (and name when present) must be strings",
    );
    check_malformed(
        &tool(r#"{"turn":1,"step":1,"index":0,"id":"c","dt":[],"args":"a"}"#),
        "malformed tool-call-chunks storage row: args must be a non-empty string array",
    );
    // Keys in any order, and escaped tags, still make a row.
    let mut out = Vec::new();
    decode_record(r#"{"seq0":4,"data":{"texts":["x"],"dt":[],"index":0,"step":1,"turn":1},"time0":3,"type":"reasoning\u002dchunks"}"#, &mut out).unwrap();
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].seq, 4);
    assert_eq!(out[0].data.as_str(), r#"{"turn":1,"step":1,"chunk":{"type":"reasoning-delta","index":0,"text":"x"}}"#);
}

#[test]
fn event_lines_decode_strictly() {
    let mut out = Vec::new();
    decode_record(r#"{"type":"a/b","seq":0,"time":-5,"data":{"k":[1,2]},"ignorable":true}"#, &mut out).unwrap();
    assert!(out[0].ignorable);
    for line in [
        "",
        "   ",
        "{",
        "[]",
        "null",
        r#"{"type":"a/b","seq":0,"time":0}"#,
        r#"{"type":"a/b","seq":0,"time":0,"data":1,"x":2}"#,
    ] {
        assert!(decode_record(line, &mut out).is_err(), "{line:?}");
    }
    assert_eq!(out.len(), 1);
}

#[test]
fn header_lines_encode_in_reference_order() {
    let mut header = header("s-1", Some("/w"));
    header.parent_session = Some("p".into());
    header.seed_length = Some(3);
    header.origin = Some(session_core::Origin::Subagent);
    header.delegation_depth = 2;
    header.agent_preset = Some("preset".into());
    header.owner = Some("o".into());
    let line = encode_header_line(&header);
    assert_eq!(
        line,
        r#"{"type":"session","version":0,"id":"s-1","createdAt":1772442000000,"cwd":"/w","parentSession":"p","seedLength":3,"origin":"subagent","delegationDepth":2,"agentPreset":"preset","owner":"o"}"#
    );
    assert_eq!(decode_header_line(line.as_bytes(), Path::new("log")).unwrap(), header);
    let minimal = crate::header("m", None);
    assert_eq!(
        encode_header_line(&minimal),
        r#"{"type":"session","version":0,"id":"m","createdAt":1772442000000,"delegationDepth":0}"#
    );
}

fn check_header(line: &str, expected: Result<(), &str>) {
    let actual = decode_header_line(line.as_bytes(), Path::new("/logs/x")).map(|_| ()).map_err(|error| match error {
        PersistenceError::Corrupt { message, .. } => message,
        PersistenceError::FormatUnsupported { message, .. } => format!("unsupported: {message}"),
        other => panic!("unexpected error {other:?}"),
    });
    assert_eq!(actual, expected.map_err(str::to_owned), "{line}");
}

#[test]
fn header_line_validation() {
    let base = r#""type":"session","id":"x","createdAt":5,"delegationDepth":0"#;
    check_header(&format!(r#"{{"version":0,{base}}}"#), Ok(()));
    check_header(&format!(r#"{{"version":0,{base},"futureKey":{{"a":1}}}}"#), Ok(()));
    check_header("not json", Err("corrupt session log: header line is not valid JSON"));
    check_header("[1]", Err("corrupt session log: first line is not a session header"));
    check_header(
        r#"{"version":0,"type":"session","id":"x","createdAt":5}"#,
        Err("corrupt session log: first line is not a session header"),
    );
    check_header(
        r#"{"version":0,"type":"session","id":"x","createdAt":-0,"delegationDepth":0}"#,
        Err("corrupt session log: first line is not a session header"),
    );
    check_header(
        r#"{"version":0,"type":"session","id":"x","createdAt":5,"delegationDepth":1.5}"#,
        Err("corrupt session log: first line is not a session header"),
    );
    check_header(
        &format!(r#"{{"version":0,{base},"owner":""}}"#),
        Err("corrupt session log: first line is not a session header"),
    );
    check_header(
        &format!(r#"{{"version":0,{base},"origin":"user"}}"#),
        Err("corrupt session log: first line is not a session header"),
    );
    check_header(
        &format!(r#"{{"version":0,{base},"sandboxMode":"x"}}"#),
        Err("session header uses retired policy baseline fields"),
    );
    check_header(
        &format!(r#"{{"version":0,{base},"cwd":"relative"}}"#),
        Err(
            "corrupt session log: first line is not a session header: session header cwd must be an absolute path, got \"relative\"",
        ),
    );
    check_header(
        r#"{"version":3,"id":"x"}"#,
        Err(
            "unsupported: session \"x\" uses log format v3, but this harness reads only v0: the log was written by a newer harness — upgrade the harness to open it (raw log: /logs/x)",
        ),
    );
    check_header(
        r#"{"version":-1,"id":7}"#,
        Err(
            "unsupported: session \"7\" uses log format v-1, older than the supported v0, and this build ships no upgrade path for it (raw log: /logs/x)",
        ),
    );
}

fn arb_delta() -> impl Strategy<Value = (u8, u8, bool, String, i64)> {
    (0u8..4, 0u8..2, any::<bool>(), "\\PC{0,4}", prop_oneof![Just(0i64), -2i64..3, any::<i64>()])
}

proptest! {
    /// decode(pack(batch)) == batch, with times drawn from the whole safe range.
    #[test]
    fn decode_of_pack_is_identity(
        specs in prop::collection::vec(arb_delta(), 0..40),
        start in -(MAX_SAFE_INTEGER as i64)..=(MAX_SAFE_INTEGER as i64),
        seq_skip in 0usize..40,
    ) {
        let mut events = Vec::new();
        let mut time = start;
        let mut seq = 0u64;
        for (index, (kind, block, named, text, gap)) in specs.iter().enumerate() {
            let limit = MAX_SAFE_INTEGER as i64;
            time = if gap.unsigned_abs() > 2 { gap % (limit + 1) } else { (time + gap).clamp(-limit, limit) };
            let chunk = match kind {
                0 => serde_json::json!({"type": "text-delta", "index": block, "text": text}),
                1 => serde_json::json!({"type": "reasoning-delta", "index": block, "text": text}),
                2 if *named => serde_json::json!({"type": "tool-call-delta", "index": block, "id": "c", "name": "n", "argumentsDelta": text}),
                2 => serde_json::json!({"type": "tool-call-delta", "index": block, "id": "c", "argumentsDelta": text}),
                _ => serde_json::json!({"type": "usage", "usage": {"in": 1}}),
            };
            let data = serde_json::json!({"turn": 1, "step": 1, "chunk": chunk}).to_string();
            events.push(SessionEvent::new("assistant/chunk", seq, time, JsonData::from_text(data).unwrap()));
            seq += if index == seq_skip { 2 } else { 1 };
        }
        let text = encode(&events, true);
        prop_assert_eq!(decode_lines(&text), events.clone());
        prop_assert_eq!(decode_lines(&encode(&events, false)), events);
    }
}
