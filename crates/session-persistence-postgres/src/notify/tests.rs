//! The notification payload: its shape, its parse back, the own-tag filter and the id-less
//! fallback at PostgreSQL's limit.

use std::time::Duration;

use session_core::SessionId;
use session_persistence::{ChangeKind, StoreChange};

use super::{Notifier, PAYLOAD_MAX_BYTES, Pacer, Turn, channel, parse};

fn notifier() -> Notifier {
    Notifier::new("public")
}

#[test]
fn the_channel_is_a_short_plain_identifier_for_any_schema() {
    let long = "s".repeat(63);
    for schema in ["public", "user", "select", "_", "t_1_2_abc", long.as_str()] {
        let name = channel(schema);
        assert_eq!(name.len(), 20, "{name}");
        assert!(name.starts_with("dsh_"), "{name}");
        assert!(name[4..].bytes().all(|byte| byte.is_ascii_digit() || (b'a'..=b'f').contains(&byte)), "{name}");
        assert_eq!(name, channel(schema), "stable");
    }
    assert_ne!(channel("a"), channel("b"));
    // Fixed: two builds must agree on the channel, or their gateways would not hear each other
    // (the value docs/storage-format.md shows).
    assert_eq!(channel("public"), "dsh_fe084a275f921216");
}

#[test]
fn a_payload_names_the_kind_the_next_seq_the_tag_and_the_id() {
    let notifier = notifier();
    let payload = notifier.payload(ChangeKind::Appended, &SessionId::from("s-1"), 12);
    assert_eq!(payload, format!(r#"{{"k":"appended","t":"{}","s":12,"id":"s-1"}}"#, notifier.tag));
    assert_eq!(notifier.tag.len(), 8);
    assert_ne!(notifier.tag, Notifier::new("public").tag, "each handle has a tag of its own");
}

#[test]
fn payloads_parse_back_and_the_handles_own_are_dropped() {
    let writer = notifier();
    let reader = notifier();
    let check = |kind: ChangeKind, id: &str, next_seq: u64| {
        let payload = writer.payload(kind, &SessionId::from(id), next_seq);
        assert_eq!(
            parse(&payload, &reader.tag),
            Some(StoreChange::Session { id: SessionId::from(id), kind, next_seq: Some(next_seq) }),
            "{payload}"
        );
        assert_eq!(parse(&payload, &writer.tag), None, "its own: {payload}");
    };
    check(ChangeKind::Created, "a", 1);
    check(ChangeKind::Appended, "with \"quotes\", \\ and \u{1} and ünïcödé", u64::MAX);
    check(ChangeKind::Released, "r", 0);

    // A release whose row was never stored carries no seq.
    let (head, tail) = writer.parts(ChangeKind::Released, &SessionId::from("r"));
    assert_eq!(
        parse(&format!("{head}{tail}"), &reader.tag),
        Some(StoreChange::Session { id: SessionId::from("r"), kind: ChangeKind::Released, next_seq: None })
    );
}

#[test]
fn what_does_not_parse_or_names_no_session_is_a_sweep() {
    for payload in
        ["", "not json", "[]", "{}", r#"{"k":"renamed","id":"a"}"#, r#"{"k":"appended","s":1}"#, r#"{"k":1}"#]
    {
        assert_eq!(parse(payload, "tag"), Some(StoreChange::Sweep), "{payload}");
    }
}

#[test]
fn an_id_too_long_for_the_limit_gives_an_id_less_wake_up() {
    let writer = notifier();
    let fits = |id: &SessionId| writer.parts(ChangeKind::Appended, id).1 != "}";
    // Every payload stays under the limit, whatever the id; the longest id that still fits is
    // sent whole, and one byte more drops it.
    let mut longest = 0;
    for n_bytes in 7_900..8_000 {
        let id = SessionId::from("x".repeat(n_bytes));
        let payload = writer.payload(ChangeKind::Appended, &id, u64::MAX);
        assert!(payload.len() <= PAYLOAD_MAX_BYTES, "{n_bytes}: {}", payload.len());
        if fits(&id) {
            longest = n_bytes;
        }
    }
    assert!(longest > 7_900, "ids near the limit fit: {longest}");
    let id = SessionId::from("x".repeat(longest + 1));
    assert!(!fits(&id));
    let payload = writer.payload(ChangeKind::Appended, &id, 3);
    assert_eq!(payload, format!(r#"{{"k":"appended","t":"{}","s":3}}"#, writer.tag));
    assert_eq!(parse(&payload, "another"), Some(StoreChange::Sweep));

    // Escaping counts: an id of control characters takes six bytes per character.
    let escaped = SessionId::from("\u{1}".repeat(1_400));
    assert!(!fits(&escaped), "8,400 bytes escaped");
    assert!(fits(&SessionId::from("\u{1}".repeat(1_300))));
    // Any id a header may hold fits.
    assert!(fits(&SessionId::from("\u{1}".repeat(session_core::MAX_ID_BYTES))));
}

#[test]
fn a_pacer_sends_after_a_quiet_stretch_at_once_and_a_bursts_notifications_together() {
    let gap = Duration::from_secs(3_600);
    let pacer = Pacer::new(gap);
    let (a, b) = (SessionId::from("a"), SessionId::from("b"));
    assert_eq!(pacer.turn(), Turn::Now, "the first append notifies in its transaction");
    assert_eq!(pacer.turn(), Turn::Later, "the next one within the gap waits");
    let deferred = pacer.defer(&a, "a-2".to_owned()).expect("the first waiting one schedules a send");
    assert!(deferred.due >= tokio::time::Instant::now() + gap - Duration::from_secs(1), "due when the gap has passed");
    assert!(pacer.defer(&a, "a-3".to_owned()).is_none(), "later ones join the scheduled send");
    assert!(pacer.defer(&b, "b-1".to_owned()).is_none());
    assert!(pacer.defer(&SessionId::from("c"), "c-1".to_owned()).is_none());
    pacer.forget(&SessionId::from("c"));
    assert_eq!(pacer.turn(), Turn::Later, "a send is scheduled: appends join it");

    let mut sent = deferred.take();
    sent.sort();
    assert_eq!(sent, ["a-3", "b-1"], "one per session, its latest; a released one's dropped");
    assert!(deferred.take().is_empty(), "taken once");
    assert_eq!(pacer.turn(), Turn::Later, "the send counts as the last notification");
    let next = pacer.defer(&a, "a-4".to_owned()).expect("a new send once the last was taken");
    assert!(next.due > deferred.due, "a gap after the last send");

    let every = Pacer::new(Duration::ZERO);
    assert_eq!((every.turn(), every.turn()), (Turn::Now, Turn::Now), "no gap: every append at once");
}
