//! Unit tests of the settings: libpq's environment and password file filling in what a URL
//! leaves out (the URL winning), the URL's own parsing (a raw `@` in a password, escapes, IPv6),
//! the bounds and the schema names.

use std::{os::unix::fs::PermissionsExt, time::Duration};

use super::*;

fn env(vars: &[(&str, &str)]) -> PgEnv {
    PgEnv::from_vars(vars.iter().copied())
}

/// The store `url` names under `vars`, as shown.
fn check(url: &str, vars: &[(&str, &str)], expected: &str) {
    let config = PgConfig::from_url_and_env(url, &env(vars)).unwrap_or_else(|error| panic!("{url}: {error}"));
    assert_eq!(config.shown(), expected, "{url} with {vars:?}");
}

fn password(config: &PgConfig) -> Option<String> {
    config.connection.get_password().map(|bytes| String::from_utf8(bytes.to_vec()).unwrap())
}

const SERVER_ENV: &[(&str, &str)] =
    &[("PGHOST", "db.example"), ("PGPORT", "6543"), ("PGUSER", "alice"), ("PGDATABASE", "logs")];

#[test]
fn the_environment_fills_in_what_the_url_leaves_out_and_the_url_wins() {
    check("postgres://", SERVER_ENV, "postgres://alice@db.example:6543/logs?schema=public");
    check("postgresql://?schema=s1", SERVER_ENV, "postgres://alice@db.example:6543/logs?schema=s1");
    check("postgres://bob@h2:1/d2", SERVER_ENV, "postgres://bob@h2:1/d2?schema=public");
    check("postgres://h2/d2?user=bob&port=7", SERVER_ENV, "postgres://bob@h2:7/d2?schema=public");
    check("postgres://", &[("USER", "carol")], "postgres://carol@localhost:5432/carol?schema=public");
    check(
        "postgres://",
        &[("LOGNAME", "dave"), ("PGHOST", "/run/pg")],
        "postgres://dave@/run/pg:5432/dave?schema=public",
    );
    check(
        "postgres://",
        &[("USER", "carol"), ("PGHOST", "a,b"), ("PGPORT", "1,2")],
        "postgres://carol@a:1,b:2/carol?schema=public",
    );
    check("postgres://u@[::1]:5433/d", &[], "postgres://u@::1:5433/d?schema=public");
    // An empty variable is unset, as in libpq.
    check("postgres://", &[("USER", "carol"), ("PGHOST", "")], "postgres://carol@localhost:5432/carol?schema=public");
    let error = PgConfig::from_url_and_env("postgres://", &PgEnv::default()).unwrap_err();
    assert!(error.to_string().contains("PGUSER"), "{error}");

    let vars = [SERVER_ENV, &[("PGSSLMODE", "disable"), ("PGCONNECT_TIMEOUT", "3"), ("PGAPPNAME", "app-1")]].concat();
    let config = PgConfig::from_url_and_env("postgres://", &env(&vars)).unwrap();
    assert_eq!(config.tls_mode(), TlsMode::Disable);
    assert_eq!(config.connect_timeout, Duration::from_secs(3));
    assert_eq!(config.connection.get_connect_timeout(), Some(&Duration::from_secs(3)));
    assert_eq!(config.connection.get_application_name(), Some("app-1"));
    let config =
        PgConfig::from_url_and_env("postgres://?sslmode=require&connect_timeout=5&application_name=app-2", &env(&vars))
            .unwrap();
    assert_eq!(config.tls_mode(), TlsMode::Require);
    assert_eq!(config.connect_timeout, Duration::from_secs(5));
    assert_eq!(config.connection.get_application_name(), Some("app-2"));
    let roots = [SERVER_ENV, &[("PGSSLMODE", "verify-full"), ("PGSSLROOTCERT", "/etc/root.pem")]].concat();
    let config = PgConfig::from_url_and_env("postgres://", &env(&roots)).unwrap();
    assert_eq!(config.tls.root_cert.as_deref(), Some(Path::new("/etc/root.pem")));
}

#[test]
fn the_password_comes_from_the_url_then_pgpassword_then_the_password_file() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join(".pgpass");
    std::fs::write(
        &file,
        "# a comment\nother.example:*:*:*:wrong\ndb.example:6543:logs:alice:from-file\\:1\\\\\n*:*:*:*:fallback\n",
    )
    .unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let home = dir.path().to_str().unwrap();
    let with_home = [SERVER_ENV, &[("HOME", home)]].concat();
    let config = PgConfig::from_url_and_env("postgres://", &env(&with_home)).unwrap();
    assert_eq!(password(&config).as_deref(), Some("from-file:1\\"));
    assert!(!format!("{config:?}").contains("from-file"));
    // The first line that matches wins: another user falls to the wildcard line.
    let config = PgConfig::from_url_and_env("postgres://bob@", &env(&with_home)).unwrap();
    assert_eq!(password(&config).as_deref(), Some("fallback"));
    let with_variable = [&with_home[..], &[("PGPASSWORD", "from-env")]].concat();
    let config = PgConfig::from_url_and_env("postgres://", &env(&with_variable)).unwrap();
    assert_eq!(password(&config).as_deref(), Some("from-env"));
    let config = PgConfig::from_url_and_env("postgres://:from-url@", &env(&with_variable)).unwrap();
    assert_eq!(password(&config).as_deref(), Some("from-url"));
    let config = PgConfig::from_url_and_env("postgres://?password=from-param", &env(&with_variable)).unwrap();
    assert_eq!(password(&config).as_deref(), Some("from-param"));

    // PGPASSFILE and passfile= name another file.
    let other = dir.path().join("elsewhere");
    std::fs::write(&other, "*:*:*:alice:elsewhere\n").unwrap();
    std::fs::set_permissions(&other, std::fs::Permissions::from_mode(0o400)).unwrap();
    let named = [&with_home[..], &[("PGPASSFILE", other.to_str().unwrap())]].concat();
    let config = PgConfig::from_url_and_env("postgres://", &env(&named)).unwrap();
    assert_eq!(password(&config).as_deref(), Some("elsewhere"));
    let url = format!("postgres://?passfile={}", other.display());
    assert_eq!(password(&PgConfig::from_url_and_env(&url, &env(SERVER_ENV)).unwrap()).as_deref(), Some("elsewhere"));

    // A file its group or others may read is ignored.
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o640)).unwrap();
    let config = PgConfig::from_url_and_env("postgres://", &env(&with_home)).unwrap();
    assert_eq!(password(&config), None);
    // A Unix socket matches `localhost`.
    std::fs::write(&file, "localhost:5432:*:alice:over-the-socket\n").unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let socket = [("HOME", home), ("PGUSER", "alice"), ("PGHOST", "/run/postgresql")];
    let config = PgConfig::from_url_and_env("postgres://", &env(&socket)).unwrap();
    assert_eq!(password(&config).as_deref(), Some("over-the-socket"));
}

#[test]
fn password_file_lines_split_on_unescaped_colons() {
    assert_eq!(
        passfile_fields("h\\:x:1:d:u:p:w\\\\d").map(|fields| fields.to_vec()),
        Some(vec!["h:x", "1", "d", "u", "p:w\\d"].into_iter().map(String::from).collect())
    );
    assert_eq!(passfile_fields("h:1:d:u"), None);
}

#[test]
fn a_password_may_hold_a_raw_at_sign_slash_or_colon_and_escapes_are_decoded() {
    let config = PgConfig::from_url("postgres://u:p@ss:w/rd@h:5/d").unwrap();
    assert_eq!(password(&config).as_deref(), Some("p@ss:w/rd"));
    assert_eq!(config.shown(), "postgres://u@h:5/d?schema=public");
    let config = PgConfig::from_url("postgres://u%40x:p%40ss%3Fx%26@h/d%2Fe").unwrap();
    assert_eq!(password(&config).as_deref(), Some("p@ss?x&"));
    assert_eq!(config.shown(), "postgres://u@x@h:5432/d/e?schema=public");
    let config = PgConfig::from_url("postgres://u@h/d?password=a@b%26c?d").unwrap();
    assert_eq!(password(&config).as_deref(), Some("a@b&c?d"));
    // A raw `?` in the authority's password cannot be told from the query: refused, unquoted.
    let error = PgConfig::from_url("postgres://u:Secret?Tail@h/d").unwrap_err();
    assert!(!error.to_string().contains("Secret") && !error.to_string().contains("Tail"), "{error}");
    // A raw `&` in a password parameter: the parameter name it makes is not shown.
    let error = PgConfig::from_url("postgres://u@h/d?password=Secret&Tail=x").unwrap_err();
    assert!(!error.to_string().contains("Tail") && error.to_string().contains("%26"), "{error}");
    let error = PgConfig::from_url("postgres://u@h/d?bogus_option=1").unwrap_err();
    assert!(error.to_string().contains("bogus_option"), "{error}");
    assert_eq!(redact_url("postgres://u:p@ss/x@h/d?password=q&a=1"), "postgres://u:***@h/d?password=***&a=1");
}

#[test]
fn the_connect_timeout_is_bounded() {
    for url in [
        "postgres://u@h/d?connect_timeout=0",
        "postgres://u@h/d?connect_timeout=-1",
        "postgres://u@h/d?connect_timeout=x",
    ] {
        let error = PgConfig::from_url(url).unwrap_err();
        assert!(error.to_string().contains("connect_timeout"), "{url}: {error}");
    }
    let error = PgConfig::from_url("postgres://u@h:99999/d").unwrap_err();
    assert!(error.to_string().contains("port"), "{error}");
}

#[test]
fn the_query_timeout_comes_from_the_url_and_is_bounded() {
    assert_eq!(PgConfig::from_url("postgres://u@h/d").unwrap().query_timeout, Duration::from_secs(60));
    let config = PgConfig::from_url("postgres://u@h/d?query_timeout=3&connect_timeout=2").unwrap();
    assert_eq!(config.query_timeout, Duration::from_secs(3));
    assert_eq!(config.connect_timeout, Duration::from_secs(2));
    assert_eq!(config.shown(), "postgres://u@h:5432/d?schema=public", "this crate's parameter, taken out");
    for url in
        ["postgres://u@h/d?query_timeout=0", "postgres://u@h/d?query_timeout=1.5", "postgres://u@h/d?query_timeout="]
    {
        let error = PgConfig::from_url(url).unwrap_err();
        assert!(error.to_string().contains("query_timeout is not a whole number of seconds"), "{url}: {error}");
    }
}

#[test]
fn schema_names_are_quoted_and_pg_is_refused() {
    for name in ["user", "select", "order", "table", "all", "freeze", "_x1"] {
        let config = PgConfig::from_url(&format!("postgres://u@h/d?schema={name}")).unwrap();
        assert_eq!(config.schema, name);
    }
    for name in ["pg_mine", "Upper", "1st", "a-b", ""] {
        let error = PgConfig::from_url(&format!("postgres://u@h/d?schema={name}")).unwrap_err();
        assert!(error.to_string().contains("schema"), "{name}: {error}");
    }
    assert_eq!(quote_ident("user"), "\"user\"");
    assert_eq!(quote_ident("a\"b"), "\"a\"\"b\"");
    assert_eq!(crate::schema::qualify("SELECT 1 FROM {s}.t", "user"), "SELECT 1 FROM \"user\".t");
}

/// The default user where the environment names none: the account's name from `/etc/passwd`,
/// as libpq takes it from the system.
#[test]
fn an_account_without_user_variables_is_found_in_the_password_file() {
    let passwd = "# comment\nroot:x:0:0:root:/root:/bin/bash\n:x:7:7::/:/bin/sh\nbroken\nagent:x:1000:1000::/home/agent:/bin/sh\n";
    assert_eq!(super::name_of_uid(passwd, 0).as_deref(), Some("root"));
    assert_eq!(super::name_of_uid(passwd, 1000).as_deref(), Some("agent"));
    assert_eq!(super::name_of_uid(passwd, 7), None, "an entry without a name");
    assert_eq!(super::name_of_uid(passwd, 42), None);
    // This process's own account is in this machine's file, and names the process's user.
    use std::os::unix::fs::MetadataExt;
    let uid = std::fs::metadata("/proc/self").unwrap().uid();
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap();
    assert_eq!(super::account_name(), super::name_of_uid(&passwd, uid));
    assert!(super::account_name().is_some());
}
