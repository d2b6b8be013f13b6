//! Settings against a server: every reserved word of the server's SQL is a schema name that
//! works; `connect_timeout` in the URL bounds opening a connection and the message names it; and
//! no message or log line, at any level, holds any part of a password, whatever URL-special
//! characters it has, raw or percent-encoded, in the authority or as a `password=` parameter.

use std::{
    io::Write,
    sync::{Arc, Mutex, OnceLock},
};

use proptest::prelude::*;
use session_core::{JsonData, SessionEvent, SessionHeader, SessionId};
use session_persistence::{Backend, CollectSink, DatabaseFault, PersistenceError};
use session_persistence_postgres::{PgConfig, PgStore};
use tokio_util::sync::CancellationToken;

use crate::{TestSchema, server_url};

/// PostgreSQL 15's reserved key words (`SELECT word FROM pg_get_keywords() WHERE catcode = 'R'`
/// on 15.20), so the test covers them whatever version the test server runs.
const RESERVED_15: &str = "all analyse analyze and any array as asc asymmetric both case cast check collate column \
    constraint create current_catalog current_date current_role current_time current_timestamp current_user default \
    deferrable desc distinct do else end except false fetch for foreign from grant group having in initially \
    intersect into lateral leading limit localtime localtimestamp not null offset on only or order placing primary \
    references returning select session_user some symmetric table then to trailing true union unique user using \
    variadic when where window with";

#[test]
fn every_reserved_word_is_a_schema_name_that_works() {
    let Some(probe) = TestSchema::bare() else { return };
    // The server's own list, and 15's.
    let mut words: Vec<String> = probe
        .sql("SELECT word FROM pg_get_keywords() WHERE catcode = 'R' ORDER BY word")
        .into_iter()
        .filter_map(|row| row.into_iter().next().flatten())
        .chain(RESERVED_15.split_whitespace().map(str::to_owned))
        .collect();
    words.sort();
    words.dedup();
    assert!(words.len() >= 77, "{words:?}");
    let url = server_url().unwrap();
    // `freeze` is reserved only as a function or type name (catcode T), and must work too.
    for word in words.iter().map(String::as_str).chain(["freeze", "authorization", "binary", "verbose"]) {
        let config = PgConfig::from_url(&url).unwrap().with_schema(word).unwrap().with_pool_size(1);
        // A schema of this name left over from an earlier run starts afresh.
        let (stale, _) = PgStore::setup(&config).unwrap_or_else(|error| panic!("schema {word}: {error}"));
        stale.drop_schema().unwrap_or_else(|error| panic!("dropping schema {word}: {error}"));
        let (store, _) = PgStore::setup(&config).unwrap_or_else(|error| panic!("schema {word}: {error}"));
        let id = SessionId::from(format!("s-{word}"));
        let written = (|| -> Result<usize, PersistenceError> {
            let header = SessionHeader::new(id.clone(), 1);
            let event = Arc::new(SessionEvent::new("test/n", 0, 1, JsonData::from_text("1").unwrap()));
            store.append_batch(&header, &[event], false)?;
            let mut sink = CollectSink::default();
            store.scan(&id, &CancellationToken::new(), &mut sink)?;
            Ok(sink.events.len())
        })();
        let dropped = store.drop_schema();
        assert_eq!(written.as_ref().ok(), Some(&1), "schema {word}: {written:?}");
        dropped.unwrap_or_else(|error| panic!("dropping schema {word}: {error}"));
    }
}

#[test]
fn connect_timeout_in_the_url_bounds_connecting_and_the_message_names_it() {
    // A listener that accepts and never answers: the startup exchange waits for it.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let held = std::thread::spawn(move || listener.accept().map(|(socket, _)| socket));
    let config =
        PgConfig::from_url(&format!("postgres://nobody:Zq-hidden@127.0.0.1:{port}/test?connect_timeout=1")).unwrap();
    assert_eq!(config.connect_timeout, std::time::Duration::from_secs(1));
    let error = PgStore::open(&config).unwrap_err();
    assert!(matches!(error, PersistenceError::Database { kind: DatabaseFault::Timeout, .. }), "{error:?}");
    assert!(error.to_string().contains("connecting took longer than 1s"), "{error}");
    assert!(!error.to_string().contains("Zq-hidden"), "{error}");
    drop(held.join().unwrap());
}

/// Every log line of this test binary, at every level (`log` records included).
fn captured_log() -> &'static Mutex<Vec<u8>> {
    static LOG: OnceLock<&'static Mutex<Vec<u8>>> = OnceLock::new();
    LOG.get_or_init(|| {
        let log: &'static Mutex<Vec<u8>> = Box::leak(Box::new(Mutex::new(Vec::new())));
        struct Writer(&'static Mutex<Vec<u8>>);
        impl Write for Writer {
            fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(bytes);
                Ok(bytes.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        tracing_subscriber::fmt()
            .with_max_level(tracing::Level::TRACE)
            .with_ansi(false)
            .with_writer(move || Writer(log))
            .try_init()
            .expect("the only subscriber of this test binary");
        log
    })
}

/// Every character with a meaning in a URL, or that a URL escapes.
const SPECIAL: &[char] = &[
    '@', ':', '/', '?', '#', '[', ']', '!', '$', '&', '\'', '(', ')', '*', '+', ',', ';', '=', '%', ' ', '"', '\\',
    '<', '>', '^', '`', '{', '|', '}', '~', '.', '-', '_',
];

/// A password: distinctive pieces (`Zq` and five letters or digits: a piece can never read as a
/// port number or a keyword) joined by URL-special characters, and the pieces.
fn password() -> impl Strategy<Value = (String, Vec<String>)> {
    let piece = "Zq[A-Za-z0-9]{5}";
    let special = proptest::sample::select(SPECIAL);
    proptest::collection::vec((piece, proptest::collection::vec(special, 0..3)), 1..5).prop_map(|parts| {
        let mut password = String::new();
        let mut pieces = Vec::new();
        for (piece, specials) in parts {
            password.extend(specials);
            password.push_str(&piece);
            pieces.push(piece);
        }
        (password, pieces)
    })
}

fn percent_encoded(text: &str) -> String {
    text.bytes()
        .map(|byte| match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' => (byte as char).to_string(),
            _ => format!("%{byte:02X}"),
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn no_message_or_log_line_holds_any_part_of_a_password(
        (password, pieces) in password(),
        encoded in any::<bool>(),
        as_parameter in any::<bool>(),
        trailing in any::<bool>(),
    ) {
        let log = captured_log();
        let written = if encoded { percent_encoded(&password) } else { password.clone() };
        let tail = if trailing { "&connect_timeout=2&application_name=prop" } else { "" };
        // Port 1: nothing listens, so an open fails at once with the driver's message.
        let url = if as_parameter {
            format!("postgres://alice@127.0.0.1:1/test?password={written}{tail}")
        } else {
            format!("postgres://alice:{written}@127.0.0.1:1/test?sslmode=disable{tail}")
        };
        let mut texts = Vec::new();
        match PgConfig::from_url(&url) {
            Ok(config) => {
                texts.push(config.shown().to_owned());
                texts.push(format!("{config:?}"));
                let error = PgStore::open(&config).unwrap_err();
                texts.push(error.to_string());
                texts.push(format!("{error:?}"));
                // Only the characters a URL cannot hold raw there make the URL ambiguous.
                let ambiguous = !encoded && password.contains(if as_parameter { '&' } else { '?' });
                if !ambiguous {
                    prop_assert_eq!(config.shown(), "postgres://alice@127.0.0.1:1/test?schema=public");
                }
            }
            Err(error) => {
                let ambiguous = !encoded && password.contains(if as_parameter { '&' } else { '?' });
                prop_assert!(ambiguous, "{url} refused: {error}");
                texts.push(error.to_string());
                texts.push(format!("{error:?}"));
            }
        }
        texts.push(String::from_utf8_lossy(&log.lock().unwrap()).into_owned());
        for text in &texts {
            for piece in &pieces {
                prop_assert!(!text.contains(piece.as_str()), "{piece} of {password:?} in {text}");
            }
        }
        let logged = String::from_utf8_lossy(&log.lock().unwrap()).into_owned();
        prop_assert!(logged.contains("opening a connection pool") || texts.len() == 3, "the log is captured");
    }
}
