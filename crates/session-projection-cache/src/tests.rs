//! Unit tests of the pieces that need no runtime: configuration, record codec and checksum.

use serde_json::json;
use session_core::{SessionHeader, SessionId};
use session_projection::{CheckpointRow, CheckpointRows};

use crate::{
    CacheConfig, CheckpointRecord, RecordIdentity,
    disk::{crc32, encode},
};

fn check_config(value: serde_json::Value, expected: Result<(u64, u64), &str>) {
    let actual = CacheConfig::from_json(&value)
        .map(|config| (config.write_every_events, config.write_interval_ms))
        .map_err(|error| error.to_string());
    assert_eq!(actual, expected.map_err(str::to_owned), "config {value}");
}

#[test]
fn config_validation_names_the_field() {
    check_config(json!({"writeEveryEvents": 200, "writeIntervalMs": 5000}), Ok((200, 5000)));
    check_config(json!({"writeEveryEvents": 1, "writeIntervalMs": 1, "extra": true}), Ok((1, 1)));
    check_config(json!({"writeEveryEvents": 1.0, "writeIntervalMs": 2147483647}), Ok((1, 2_147_483_647)));
    check_config(
        json!({"writeEveryEvents": 0, "writeIntervalMs": 5000}),
        Err("writeEveryEvents must be a positive safe integer, got 0"),
    );
    check_config(
        json!({"writeEveryEvents": -3, "writeIntervalMs": 5000}),
        Err("writeEveryEvents must be a positive safe integer, got -3"),
    );
    check_config(
        json!({"writeEveryEvents": 2.5, "writeIntervalMs": 5000}),
        Err("writeEveryEvents must be a positive safe integer, got 2.5"),
    );
    check_config(
        json!({"writeEveryEvents": "200", "writeIntervalMs": 5000}),
        Err("writeEveryEvents must be a positive safe integer, got \"200\""),
    );
    check_config(
        json!({"writeEveryEvents": 200, "writeIntervalMs": 0}),
        Err("writeIntervalMs must be an integer between 1 and 2147483647, got 0"),
    );
    check_config(
        json!({"writeEveryEvents": 200, "writeIntervalMs": 2147483648u64}),
        Err("writeIntervalMs must be an integer between 1 and 2147483647, got 2147483648"),
    );
    check_config(json!({"writeIntervalMs": 5000}), Err("session projection cache config requires writeEveryEvents"));
    check_config(json!({"writeEveryEvents": 5}), Err("session projection cache config requires writeIntervalMs"));
    check_config(json!([1, 2]), Err("session projection cache config must be an object, got [1,2]"));
    assert_eq!(
        CacheConfig::new(0, 1).map_err(|error| error.to_string()),
        Err("writeEveryEvents must be a positive safe integer, got 0".to_owned())
    );
}

#[test]
fn crc32_matches_the_standard_check_value() {
    assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
    assert_eq!(crc32(b""), 0);
}

fn record() -> CheckpointRecord {
    let mut rows = CheckpointRows::new();
    rows.insert("test/marks".into(), CheckpointRow { ver: 1, seq: 4, val: json!({"marks": ["a"]}) });
    rows.insert("test/count".into(), CheckpointRow { ver: 2, seq: 4, val: json!(5) });
    CheckpointRecord {
        identity: RecordIdentity { created_at: 7, cwd: Some("/work".into()) },
        as_of_seq: 4,
        rows,
        failures: Default::default(),
    }
}

#[test]
fn record_file_is_one_stamped_line() {
    let bytes = encode(&SessionId::from("s/1"), &record());
    let text = String::from_utf8(bytes).unwrap();
    let body = r#"{"identity":{"createdAt":7,"cwd":"/work"},"asOfSeq":4,"rows":{"test/count":{"ver":2,"seq":4,"val":5},"test/marks":{"ver":1,"seq":4,"val":{"marks":["a"]}}}}"#;
    let expected = format!(
        "{{\"format\":\"session-projection-cache\",\"version\":1,\"id\":\"s/1\",\"crc32\":{},\"record\":{body}}}\n",
        crc32(body.as_bytes())
    );
    assert_eq!(text, expected);
}

#[test]
fn identity_binds_created_at_and_cwd() {
    let identity = RecordIdentity { created_at: 7, cwd: Some("/work".into()) };
    let mut header = SessionHeader::new(SessionId::from("s"), 7);
    assert!(!identity.matches(&header), "present cwd against absent");
    header.cwd = Some("/work".into());
    assert!(identity.matches(&header));
    header.cwd = Some("/elsewhere".into());
    assert!(!identity.matches(&header));
    header.cwd = Some("/work".into());
    header.created_at = 8;
    assert!(!identity.matches(&header));
    assert!(RecordIdentity { created_at: 8, cwd: None }.matches(&SessionHeader::new(SessionId::from("s"), 8)));
}

#[test]
fn record_validation_rejects_out_of_range_watermarks() {
    assert_eq!(record().validate(), Ok(()));
    let mut ahead = record();
    ahead.rows.get_mut("test/count").unwrap().seq = 5;
    assert_eq!(ahead.validate(), Err("row \"test/count\" is at seq 5, outside [-1, 4]".to_owned()));
    let mut below = record();
    below.as_of_seq = -2;
    assert!(below.validate().is_err());
}
