//! TLS, as libpq's `sslmode` says: `prefer` (the default) and `require` encrypt, `disable` does
//! not; `verify-ca` checks the chain against `sslrootcert`, `verify-full` the host name too, and a
//! certificate that fails either is a typed error at open; a bad mode, an unreadable root file and
//! client certificates are refused with messages that say why. The server's own certificate (its
//! `ssl_cert_file`) is the root these tests trust.

use session_core::{JsonData, SessionEvent, SessionHeader, SessionId};
use session_persistence::{Backend, DatabaseFault, PersistenceError};
use session_persistence_postgres::{PgConfig, PgStore, TlsMode};

use crate::{TestSchema, server_url};

/// A scratch schema, and the server's certificate file when the server offers TLS (else, after
/// saying so, `None`: TLS is the server's setting, not this crate's).
fn tls_server() -> Option<(TestSchema, String)> {
    let schema = TestSchema::new()?;
    if schema.value("SHOW ssl").as_deref() != Some("on") {
        eprintln!("SKIPPED: the test server does not offer TLS (ssl = off)");
        return None;
    }
    let cert = schema.value("SHOW ssl_cert_file").expect("the server names its certificate");
    // A relative name is inside the server's data directory, which a test may not see.
    if !std::path::Path::new(&cert).is_absolute() || std::fs::File::open(&cert).is_err() {
        eprintln!("SKIPPED: the server's certificate ({cert}) cannot be read here");
        return None;
    }
    Some((schema, cert))
}

/// The store URL of `schema` with `params` added and an application name to find its connections.
fn url_with(schema: &TestSchema, name: &str, params: &str) -> String {
    let url = schema.url();
    format!("{url}&application_name={name}{}{params}", if params.is_empty() { "" } else { "&" })
}

/// Whether every connection of the application `name` is encrypted (`None` when it has none).
fn encrypted(schema: &TestSchema, name: &str) -> Option<bool> {
    let value = schema.value(&format!(
        "SELECT bool_and(s.ssl)::text FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid) \
         WHERE a.application_name = '{name}'"
    ))?;
    Some(value == "true")
}

fn write_one(store: &PgStore, id: &str) {
    let mut header = SessionHeader::new(SessionId::from(id), 1);
    header.cwd = Some("/w".to_owned());
    let event = std::sync::Arc::new(SessionEvent::new("test/n", 0, 1, JsonData::from_text("1").unwrap()));
    store.append_batch(&header, &[event], false).unwrap();
}

#[test]
fn prefer_and_require_encrypt_and_disable_does_not() {
    let Some((schema, _)) = tls_server() else { return };
    for (mode, params, expected) in
        [("default", "", true), ("require", "sslmode=require", true), ("disable", "sslmode=disable", false)]
    {
        let name = format!("tls-{mode}-{}", schema.name());
        let config = PgConfig::from_url(&url_with(&schema, &name, params)).unwrap();
        let store = PgStore::open(&config).unwrap();
        write_one(&store, &format!("s-{mode}"));
        assert_eq!(encrypted(&schema, &name), Some(expected), "sslmode {mode}");
    }
}

#[test]
fn verify_modes_check_the_chain_and_the_host_name() {
    let Some((schema, cert)) = tls_server() else { return };
    let root = format!("sslrootcert={cert}");
    // The server's certificate names `localhost`: verify-ca trusts its chain whatever the host.
    let name = format!("tls-ca-{}", schema.name());
    let config = PgConfig::from_url(&url_with(&schema, &name, &format!("sslmode=verify-ca&{root}"))).unwrap();
    assert_eq!(config.tls_mode(), TlsMode::VerifyCa);
    let store = PgStore::open(&config).unwrap();
    write_one(&store, "s-ca");
    assert_eq!(encrypted(&schema, &name), Some(true));
    // `require` with a root certificate checks the chain, as libpq does.
    let config = PgConfig::from_url(&url_with(&schema, "tls-require-root", &format!("sslmode=require&{root}")));
    PgStore::open(&config.unwrap()).unwrap();

    // verify-full also checks the name: the server is reached as 127.0.0.1, which the
    // certificate does not name (when the URL says `localhost`, it does).
    let url = url_with(&schema, "tls-full", &format!("sslmode=verify-full&{root}"));
    if url.contains("@127.0.0.1") {
        let error = PgStore::open(&PgConfig::from_url(&url).unwrap()).unwrap_err();
        assert!(matches!(error, PersistenceError::Database { kind: DatabaseFault::Connection, .. }), "{error:?}");
        assert!(error.to_string().to_lowercase().contains("certificate"), "{error}");
        let by_name = url.replacen("@127.0.0.1", "@localhost", 1);
        PgStore::open(&PgConfig::from_url(&by_name).unwrap()).expect("the certificate names localhost");
    }
    // Roots that do not hold the server's self-signed certificate: it chains to none of them.
    let bundle = "/etc/ssl/certs/ca-certificates.crt";
    if std::path::Path::new(bundle).is_file() {
        let untrusted = url_with(&schema, "tls-untrusted", &format!("sslmode=verify-ca&sslrootcert={bundle}"));
        let error = PgStore::open(&PgConfig::from_url(&untrusted).unwrap()).unwrap_err();
        assert!(error.to_string().contains("invalid peer certificate: UnknownIssuer"), "{error}");
    }
}

#[test]
fn bad_tls_settings_are_refused_with_the_reason() {
    let Some(url) = server_url() else { return };
    let join = if url.contains('?') { '&' } else { '?' };
    let error = PgConfig::from_url(&format!("{url}{join}sslmode=sometimes")).unwrap_err();
    assert!(error.to_string().contains("sslmode=sometimes is not a TLS mode"), "{error}");
    for key in ["sslcert", "sslkey"] {
        let error = PgConfig::from_url(&format!("{url}{join}{key}=/tmp/client.pem")).unwrap_err();
        assert!(error.to_string().contains(&format!("{key} is not supported")), "{error}");
    }
    // verify-ca checks no name, so it never trusts the system's roots: it needs a root of its own.
    for roots in ["", "&sslrootcert=system"] {
        let error = PgConfig::from_url(&format!("{url}{join}sslmode=verify-ca{roots}")).unwrap_err();
        assert!(error.to_string().contains("set sslrootcert=PATH"), "{error}");
    }
    let config =
        PgConfig::from_url(&format!("{url}{join}sslmode=verify-full&sslrootcert=/nonexistent/root%20ca.pem")).unwrap();
    let error = PgStore::open(&config).unwrap_err();
    assert!(error.to_string().contains("/nonexistent/root ca.pem"), "the decoded path is named: {error}");
}

#[test]
fn a_unix_socket_connects_whatever_the_tls_mode() {
    let Some(schema) = TestSchema::new() else { return };
    let socket_dir = "/var/run/postgresql";
    let port = PgConfig::from_url(&server_url().unwrap())
        .unwrap()
        .shown()
        .rsplit_once(':')
        .and_then(|(_, rest)| rest.split('/').next().map(str::to_owned));
    let Some(port) = port.filter(|port| std::path::Path::new(&format!("{socket_dir}/.s.PGSQL.{port}")).exists()) else {
        eprintln!("SKIPPED: the test server has no Unix socket in {socket_dir}");
        return;
    };
    // The URL's user and database, over the socket instead of TCP.
    let url = schema.url();
    let (scheme_user, rest) = url.split_once('@').unwrap();
    let database_and_query = rest.split_once('/').unwrap().1;
    let join = if database_and_query.contains('?') { '&' } else { '?' };
    for mode in ["prefer", "disable"] {
        let over_socket =
            format!("{scheme_user}@/{database_and_query}{join}host={socket_dir}&port={port}&sslmode={mode}");
        let store = PgStore::open(&PgConfig::from_url(&over_socket).unwrap())
            .unwrap_or_else(|error| panic!("sslmode={mode} over the socket: {error}"));
        write_one(&store, &format!("s-socket-{mode}"));
    }
}
