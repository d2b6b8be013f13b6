//! The envelope's decode, encode and marker rules.

use super::*;

#[test]
fn envelope_round_trip_keeps_key_order() {
    let text =
        r#"{"type":"tool/result","seq":4,"time":-3,"data":{"b":1,"a":2},"sourceEventSeqs":[3],"surfaceOp":"append"}"#;
    let event: SessionEvent = serde_json::from_str(text).unwrap();
    assert_eq!(event.seq, 4);
    assert_eq!(event.time, -3);
    assert_eq!(event.surface_op, Some(SurfaceOp::Append));
    assert_eq!(serde_json::to_string(&event).unwrap(), text);
}

/// `write_json` writes what serde writes, and `encoded_len` counts it: kinds with and
/// without characters to escape, negative and extreme integers, every optional field.
#[test]
fn write_json_is_the_serde_encoding() {
    let mut events = Vec::new();
    for kind in ["tool/result", "a\"b", "back\\slash", "tab\there", "nul\u{0}", "é😀", ""] {
        for (seq, time) in [(0, 0), (4, -3), (MAX_SAFE_INTEGER, i64::MIN), (17, i64::MAX)] {
            events.push(SessionEvent::new(kind, seq, time, JsonData::from_text(r#"{"b":1,"a":[2]}"#).unwrap()));
        }
    }
    let mut full = SessionEvent::new("user/message", 9, -1, JsonData::empty_object());
    full.source_event_seqs = Some(vec![0, 8, 3].into());
    full.surface_op = Some(SurfaceOp::Replace { start: 1, end: 12 });
    full.ignorable = true;
    events.push(full);
    for event in events {
        let mut written = Vec::new();
        event.write_json(&mut written);
        let expected = serde_json::to_string(&event).unwrap();
        assert_eq!(std::str::from_utf8(&written).unwrap(), expected);
        assert_eq!(event.encoded_len(), expected.len(), "{expected}");
    }
}

#[test]
fn envelope_rejections() {
    for text in [
        r#"{"type":"a/b","seq":0,"time":0}"#,
        r#"{"type":"a/b","seq":-1,"time":0,"data":1}"#,
        r#"{"type":"a/b","seq":1.5,"time":0,"data":1}"#,
        r#"{"type":"a/b","seq":0,"time":0.5,"data":1}"#,
        r#"{"type":"a/b","seq":0,"time":0,"data":1,"ignorable":false}"#,
        r#"{"type":"a/b","seq":0,"time":0,"data":1,"extra":1}"#,
        r#"{"type":1,"seq":0,"time":0,"data":1}"#,
        r#"{"type":"a/b","seq":9007199254740992,"time":0,"data":1}"#,
    ] {
        assert!(serde_json::from_str::<SessionEvent>(text).is_err(), "{text}");
    }
    let ok: SessionEvent =
        serde_json::from_str(r#"{"type":"a/b","seq":0,"time":0,"data":null,"ignorable":true}"#).unwrap();
    assert!(ok.ignorable);
}

#[test]
fn marker_rules() {
    let mut event = SessionEvent::new("user/message", 2, 0, JsonData::empty_object());
    assert_eq!(
        event.check_markers().unwrap_err(),
        "session event \"user/message\" is surface-eligible and requires a surfaceOp marker"
    );
    event.surface_op = Some(SurfaceOp::Append);
    event.source_event_seqs = Some(vec![2].into());
    assert_eq!(event.check_markers().unwrap_err(), "sourceEventSeqs must reference earlier events: 2 >= current seq 2");
    let mut plain = SessionEvent::new("turn/start", 0, 0, JsonData::empty_object());
    plain.surface_op = Some(SurfaceOp::Append);
    assert_eq!(
        plain.check_markers().unwrap_err(),
        "session event \"turn/start\" is not surface-eligible and cannot carry surfaceOp"
    );
}

/// The canonical line of `parts`, written as the SQLite codec writes a row's line.
fn line_of(parts: &StoredParts<'_>) -> String {
    let mut line = format!(
        "{{\"type\":{},\"seq\":{},\"time\":{},\"data\":{}",
        serde_json::to_string(parts.kind).unwrap(),
        parts.seq,
        parts.time,
        parts.data
    );
    if let Some(sources) = parts.sources {
        let listed: Vec<String> = sources.iter().map(u64::to_string).collect();
        line.push_str(&format!(",\"sourceEventSeqs\":[{}]", listed.join(",")));
    }
    match parts.surface_op {
        None => {}
        Some(SurfaceOp::Append) => line.push_str(",\"surfaceOp\":\"append\""),
        Some(SurfaceOp::Replace { start, end }) => {
            line.push_str(&format!(",\"surfaceOp\":{{\"op\":\"replace\",\"start\":{start},\"end\":{end}}}"))
        }
    }
    if parts.ignorable {
        line.push_str(",\"ignorable\":true");
    }
    line.push('}');
    line
}

/// `from_stored_parts` answers what the fast path of `from_json_line` decodes from the
/// parts' line, payload verification included, or nothing where that path declines.
#[test]
fn stored_parts_decode_as_their_line_does() {
    let user = r#"{"content":[{"type":"text","text":"The nightly build went red. Can you find out what broke?"}],"source":{"kind":"user"},"role":"user","id":"5eed0000-0000-4000-a000-000000000001"}"#;
    let result = r#"{"turn":1,"step":1,"message":{"source":{"kind":"tool","callId":"call_o5e1"},"content":[{"type":"tool-result","toolCallId":"call_o5e1","content":[{"type":"text","text":"NODE_ENV=test\nLANG=C.UTF-8\n"}],"isError":false}],"role":"user","id":"5eed0000-0000-4000-a000-000000000014"}}"#;
    let call =
        r#"{"turn":1,"step":1,"callId":"call_n1a7","name":"read_file","arguments":"{\"path\":\"ci/nightly.log\"}"}"#;
    let part = |kind, data, sources, surface_op, ignorable| StoredParts {
        kind,
        seq: 7,
        time: -12,
        data,
        sources,
        surface_op,
        ignorable,
    };
    let replace = Some(SurfaceOp::Replace { start: 2, end: 5 });
    let taken = [
        part("user/message", user, None, Some(SurfaceOp::Append), false),
        part("tool/result", result, Some(&[6][..]), Some(SurfaceOp::Append), false),
        part(
            "assistant/message",
            r#"{"turn":1,"step":1,"message":{"role":"assistant","content":[]}}"#,
            Some(&[][..]),
            replace,
            false,
        ),
        part("tool/call", call, None, None, false),
        part("turn/start", r#"{"turn":1}"#, None, None, false),
        part("host/custom", r#"[1,"two",{"three":null},true,-0.5e3]"#, None, None, true),
        part("host/custom", r#""a \"quoted\" string""#, None, None, false),
        part("host/custom", "5", None, None, false),
        // A message the fast walk does not verify is still taken, unverified, as on the line.
        part("user/message", r#"{"role":"user","content":"plain"}"#, None, Some(SurfaceOp::Append), false),
    ];
    for parts in taken {
        let line = line_of(&parts);
        let direct = SessionEvent::from_stored_parts(parts).unwrap_or_else(|| panic!("taken: {line}"));
        let fast = fast_envelope(&line).unwrap_or_else(|| panic!("the line's fast path: {line}"));
        assert_eq!(direct, fast, "{line}");
        assert_eq!(direct.data.as_str(), fast.data.as_str());
        assert_eq!(direct.data.verified_message(), fast.data.verified_message(), "{line}");
        assert_eq!(direct.data.masked_content(), fast.data.masked_content(), "{line}");
        assert_eq!(direct.source_event_seqs, fast.source_event_seqs);
        let mut written = Vec::new();
        direct.write_json(&mut written);
        assert_eq!(String::from_utf8(written).unwrap(), line);
    }
    let big = MAX_SAFE_INTEGER + 1;
    let too_far = [big];
    let declined = [
        part("host/custom", " {}", None, None, false),
        part("host/custom", "{} ", None, None, false),
        part("host/custom", "{}{}", None, None, false),
        part("host/custom", "{", None, None, false),
        part("host \"odd\"", "{}", None, None, false),
        part("", "{}", None, None, false),
        part("host/custom", "{}", Some(&too_far[..]), None, false),
        part("assistant/message", "{}", None, Some(SurfaceOp::Replace { start: 0, end: big }), false),
    ];
    for parts in declined {
        let line = line_of(&parts);
        assert!(SessionEvent::from_stored_parts(parts).is_none(), "declined: {line}");
    }
    let mut far = part("turn/start", "{}", None, None, false);
    far.seq = big;
    assert!(SessionEvent::from_stored_parts(far).is_none());
    far.seq = 0;
    far.time = -(big as i64);
    assert!(SessionEvent::from_stored_parts(far).is_none());
}
