//! What to connect to and how: the URL (with this crate's `schema` parameter and the TLS
//! settings taken out), libpq's environment variables and password file filling in what it
//! leaves out, the pool size and the time bounds, and the URL as messages show it, without its
//! password.

use std::{
    collections::BTreeMap,
    fmt,
    io::Read,
    path::{Path, PathBuf},
    str::FromStr,
    time::Duration,
};

use session_persistence::{PersistenceError, Result};

use crate::tls::{TlsMode, TlsSettings};

/// The schema a URL without a `schema` parameter uses.
pub const DEFAULT_SCHEMA: &str = "public";

/// The default of [`PgConfig::notify_gap`]: half a following gateway's default round gap, so a
/// burst written here reaches a follower within about one of its rounds.
pub const DEFAULT_NOTIFY_GAP: Duration = Duration::from_millis(25);

/// How to reach a PostgreSQL session store. Built from a URL (and libpq's environment) by
/// [`PgConfig::from_url_and_env`].
#[derive(Clone)]
pub struct PgConfig {
    /// The connection settings, password included: never shown.
    pub(crate) connection: tokio_postgres::Config,
    /// The schema that holds the store's tables (`schema=NAME` in the URL, else `public`).
    pub schema: String,
    /// The most connections the pool opens.
    pub pool_size: usize,
    /// How long opening a connection may take.
    pub connect_timeout: Duration,
    /// How long one query (or waiting for a pooled connection) may take; the server is told the
    /// same bound as `statement_timeout`, so a query is never left running without one.
    pub query_timeout: Duration,
    /// The least time between two of a store handle's notifications of appends (25 ms by
    /// default; zero: every append notifies in its own transaction). An append after a quiet
    /// stretch notifies at once; those of a burst wait for the gap and go out together, one per
    /// session (`docs/storage-format.md`, "Change notifications").
    pub notify_gap: Duration,
    /// Encryption and certificate checks (`sslmode`, `sslrootcert`).
    pub(crate) tls: TlsSettings,
    /// The password in every form it was given (to scrub from messages): never shown.
    secrets: Vec<String>,
    /// The URL as messages show it: no password.
    shown: String,
}

impl fmt::Debug for PgConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PgConfig")
            .field("url", &self.shown)
            .field("schema", &self.schema)
            .field("pool_size", &self.pool_size)
            .field("connect_timeout", &self.connect_timeout)
            .field("query_timeout", &self.query_timeout)
            .field("notify_gap", &self.notify_gap)
            .field("sslmode", &self.tls.mode)
            .field("sslrootcert", &self.tls.root_cert)
            .finish()
    }
}

/// Whether `text` names a PostgreSQL store: a `postgres://` or `postgresql://` URL.
pub fn is_postgres_url(text: &str) -> bool {
    text.starts_with("postgres://") || text.starts_with("postgresql://")
}

/// Whether `name` is a schema name this crate accepts: a lowercase SQL identifier
/// (`[a-z_][a-z0-9_]*`, at most 63 bytes) that does not start with `pg_` (PostgreSQL keeps that
/// prefix for its own schemas). Reserved words (`user`, `select`, …) are accepted: every
/// statement quotes the name.
pub fn is_valid_schema(name: &str) -> bool {
    let mut chars = name.chars();
    name.len() <= 63
        && !name.starts_with("pg_")
        && chars.next().is_some_and(|first| first.is_ascii_lowercase() || first == '_')
        && chars.all(|rest| rest.is_ascii_lowercase() || rest.is_ascii_digit() || rest == '_')
}

/// `name` as a quoted SQL identifier: in `"`, each `"` doubled, so a reserved word names the
/// schema and not the keyword.
pub(crate) fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// A URL's timeout parameter: whole seconds, at least 1 (every bound is a bound: libpq's 0, "wait
/// forever", is refused); `default` when the URL names none.
fn whole_seconds(text: Option<String>, default: Duration, refusal: &str) -> Result<Duration> {
    match text {
        None => Ok(default),
        Some(text) => match text.trim().parse::<u64>() {
            Ok(seconds) if seconds >= 1 => Ok(Duration::from_secs(seconds)),
            _ => Err(PersistenceError::invalid_input(refusal)),
        },
    }
}

fn invalid_schema(schema: &str) -> PersistenceError {
    PersistenceError::invalid_input(format!(
        "schema {schema:?} is not a valid schema name: use lowercase letters, digits and _, starting with a letter \
         or _ (not pg_, which PostgreSQL keeps for its own schemas), at most 63 bytes"
    ))
}

/// The environment a store's settings fall back on, as libpq reads it: `PGHOST`, `PGHOSTADDR`,
/// `PGPORT`, `PGUSER`, `PGPASSWORD`, `PGDATABASE`, `PGSSLMODE`, `PGSSLROOTCERT`,
/// `PGCONNECT_TIMEOUT`, `PGAPPNAME`, `PGOPTIONS`, `PGPASSFILE`, and `HOME` (for `~/.pgpass`)
/// and `USER`/`LOGNAME` (the default user name). An explicit input, so tests pass their own and
/// only a program's edge reads the process environment ([`PgEnv::from_process`]). Its `Debug`
/// shows the variables' names, never their values.
#[derive(Clone, Default)]
pub struct PgEnv {
    vars: BTreeMap<String, String>,
}

/// The variables [`PgEnv::from_process`] takes.
const ENV_NAMES: &[&str] = &[
    "PGHOST",
    "PGHOSTADDR",
    "PGPORT",
    "PGUSER",
    "PGPASSWORD",
    "PGDATABASE",
    "PGSSLMODE",
    "PGSSLROOTCERT",
    "PGCONNECT_TIMEOUT",
    "PGAPPNAME",
    "PGOPTIONS",
    "PGPASSFILE",
    "HOME",
    "USER",
    "LOGNAME",
];

/// Each URL parameter libpq's environment fills in, and its variable.
const ENV_DEFAULTS: &[(&str, &str)] = &[
    ("host", "PGHOST"),
    ("hostaddr", "PGHOSTADDR"),
    ("port", "PGPORT"),
    ("user", "PGUSER"),
    ("password", "PGPASSWORD"),
    ("dbname", "PGDATABASE"),
    ("sslmode", "PGSSLMODE"),
    ("sslrootcert", "PGSSLROOTCERT"),
    ("connect_timeout", "PGCONNECT_TIMEOUT"),
    ("application_name", "PGAPPNAME"),
    ("options", "PGOPTIONS"),
    ("passfile", "PGPASSFILE"),
];

/// The parameters the driver reads (every other one is refused at parse).
const DRIVER_KEYS: &[&str] = &[
    "user",
    "password",
    "dbname",
    "options",
    "application_name",
    "host",
    "hostaddr",
    "port",
    "tcp_user_timeout",
    "keepalives",
    "keepalives_idle",
    "keepalives_interval",
    "keepalives_retries",
    "target_session_attrs",
    "channel_binding",
    "load_balance_hosts",
];

impl fmt::Debug for PgEnv {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PgEnv").field("set", &self.vars.keys().collect::<Vec<_>>()).finish()
    }
}

impl PgEnv {
    /// The process environment's variables of the list above (the program's edge only: a
    /// library reads its settings from its caller).
    /// Where neither `USER` nor `LOGNAME` is set (a container, a service), the account the
    /// process runs as stands for `USER`, as libpq takes the user name from the system.
    pub fn from_process() -> PgEnv {
        let mut env = PgEnv::from_vars(ENV_NAMES.iter().filter_map(|name| Some((*name, std::env::var(name).ok()?))));
        if env.get("USER").or_else(|| env.get("LOGNAME")).is_none()
            && let Some(name) = account_name()
        {
            env.vars.insert("USER".to_owned(), name);
        }
        env
    }

    /// An environment of the given variables (others than the list above are kept and ignored).
    pub fn from_vars<K: Into<String>, V: Into<String>>(vars: impl IntoIterator<Item = (K, V)>) -> PgEnv {
        PgEnv { vars: vars.into_iter().map(|(key, value)| (key.into(), value.into())).collect() }
    }

    /// A variable's value; an empty one counts as unset, as in libpq.
    fn get(&self, name: &str) -> Option<&str> {
        self.vars.get(name).map(String::as_str).filter(|value| !value.is_empty())
    }
}

/// The name of the account this process runs as (libpq's `getpwuid(geteuid())`): the
/// `/etc/passwd` entry of the user that owns `/proc/self`. `None` where either cannot be read,
/// or the account is not in that file (a directory service's).
fn account_name() -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let uid = std::fs::metadata("/proc/self").ok()?.uid();
    name_of_uid(&std::fs::read_to_string("/etc/passwd").ok()?, uid)
}

/// The name of `uid`'s entry in `passwd` (lines `name:password:uid:...`).
fn name_of_uid(passwd: &str, uid: u32) -> Option<String> {
    passwd.lines().find_map(|line| {
        let mut fields = line.split(':');
        let name = fields.next().filter(|name| !name.is_empty() && !name.starts_with('#'))?;
        let _password = fields.next()?;
        (fields.next()?.parse::<u32>().ok()? == uid).then(|| name.to_owned())
    })
}

impl PgConfig {
    /// Parses `postgres://user[:password]@host[:port][,host[:port]…]/database[?schema=NAME&...]`
    /// with nothing taken from the environment (see [`PgConfig::from_url_and_env`]): a URL
    /// without a host connects to `localhost`, one without a user name is refused.
    pub fn from_url(url: &str) -> Result<PgConfig> {
        PgConfig::from_url_and_env(url, &PgEnv::default())
    }

    /// Parses a store's URL, `postgres://user[:password]@host[:port][,…]/database[?params]`, every
    /// part optional (`postgres://` alone is a store named by the environment), and fills in what
    /// it leaves out as libpq does: from `env`'s `PG…` variables, then the password from the
    /// password file (`passfile=` or `PGPASSFILE`, else `~/.pgpass`; used only if it is a regular
    /// file that only its owner can read), then `localhost:5432`, the user named by `USER` (or
    /// `LOGNAME`), and a database named as the user. What the URL says always wins.
    ///
    /// The user information ends at the URL's last `@` before its `?`, so a raw `@`, `/` or `:` in
    /// a password works; a `?` in one must be percent-encoded (`%3F`), as must an `@` in a database
    /// name (`%40`). `%XX` escapes are decoded everywhere.
    ///
    /// Parameters: `schema` is this crate's (default `public`; see [`is_valid_schema`]);
    /// `sslmode` (`disable`, `prefer` (the default), `require`, `verify-ca`, `verify-full`) and
    /// `sslrootcert=PATH` mean what they mean to libpq (see [`TlsMode`]); `connect_timeout`
    /// (whole seconds, at least 1: every connection attempt is bounded) sets
    /// [`connect_timeout`](PgConfig::connect_timeout); `query_timeout` (this crate's: whole
    /// seconds, at least 1; 60 by default) sets [`query_timeout`](PgConfig::query_timeout), the
    /// bound of every query, of a wait for a pooled connection and of unacknowledged data on a
    /// connection (TCP's user timeout), so a store behind a network fault fails within it;
    /// `passfile` names the password file;
    /// `host`, `hostaddr`, `port`, `user`, `password`, `dbname`, `options`, `application_name`,
    /// `tcp_user_timeout`, `keepalives*`, `target_session_attrs`, `channel_binding` and
    /// `load_balance_hosts` are libpq's, as `tokio-postgres` reads them; any other is refused. A
    /// refusal never quotes any part of a password.
    pub fn from_url_and_env(url: &str, env: &PgEnv) -> Result<PgConfig> {
        let parsed = parse_url(url)?;
        let mut settings = parsed.settings;
        let mut secrets: Vec<String> = parsed.raw_secrets;
        for (key, var) in ENV_DEFAULTS {
            if !settings.contains_key(*key)
                && let Some(value) = env.get(var)
            {
                settings.insert((*key).to_owned(), value.to_owned());
            }
        }
        if !settings.contains_key("host") && !settings.contains_key("hostaddr") {
            settings.insert("host".to_owned(), "localhost".to_owned());
        }
        if !settings.contains_key("user") {
            let user = env.get("USER").or_else(|| env.get("LOGNAME")).ok_or_else(|| {
                PersistenceError::invalid_input(
                    "the PostgreSQL store names no user: put one in the URL (postgres://USER@host/database) or set \
                     PGUSER",
                )
            })?;
            settings.insert("user".to_owned(), user.to_owned());
        }
        if !settings.contains_key("password")
            && let Some(password) = password_from_file(&settings, env)
        {
            settings.insert("password".to_owned(), password);
        }
        secrets.extend(settings.get("password").filter(|password| !password.is_empty()).cloned());
        // A URL that names a password at all, even an empty one (a raw `&` may have cut it
        // short), gets messages that quote none of its parameters.
        let with_secret = !secrets.is_empty() || parsed.names_password;

        let schema = settings.remove("schema").unwrap_or_else(|| DEFAULT_SCHEMA.to_owned());
        if !is_valid_schema(&schema) {
            return Err(invalid_schema(&schema));
        }
        let mut tls = TlsSettings::default();
        if let Some(mode) = settings.remove("sslmode") {
            tls.mode = TlsMode::parse(&mode).ok_or_else(|| {
                PersistenceError::invalid_input(format!(
                    "sslmode={} is not a TLS mode: use disable, prefer, require, verify-ca or verify-full",
                    if with_secret { "…" } else { &mode }
                ))
            })?;
        }
        tls.root_cert = settings.remove("sslrootcert").map(PathBuf::from);
        let connect_timeout = whole_seconds(
            settings.remove("connect_timeout"),
            Duration::from_secs(10),
            "connect_timeout is not a whole number of seconds of at least 1 (this store bounds every connection \
             attempt, so 0, libpq's \"wait forever\", is refused too)",
        )?;
        let query_timeout = whole_seconds(
            settings.remove("query_timeout"),
            Duration::from_secs(60),
            "query_timeout is not a whole number of seconds of at least 1 (this store bounds every query)",
        )?;
        settings.remove("passfile");
        for key in settings.keys() {
            if matches!(key.as_str(), "sslcert" | "sslkey" | "sslpassword") {
                return Err(PersistenceError::invalid_input(format!(
                    "{key} is not supported: this store does not present client certificates (authenticate with a \
                     password or trust instead)"
                )));
            }
            if !DRIVER_KEYS.contains(&key.as_str()) {
                // A raw `&` in a password parameter makes a piece of the password a parameter
                // name: with a password in the URL, the name is not shown.
                return Err(PersistenceError::invalid_input(if with_secret {
                    "the PostgreSQL URL has a parameter that is not a libpq parameter this store reads (its name is \
                     not shown, as the URL holds a password: a `&` in a password parameter must be written %26)"
                        .to_owned()
                } else {
                    format!("the PostgreSQL URL has a parameter {key:?} that is not a libpq parameter this store reads")
                }));
            }
        }
        if let Some(ports) = settings.get("port")
            && !ports.split(',').all(|port| port.is_empty() || port.parse::<u16>().is_ok_and(|port| port != 0))
        {
            return Err(PersistenceError::invalid_input(
                "a port of the PostgreSQL store is not a number from 1 to 65535",
            ));
        }
        let conninfo: Vec<String> = settings
            .iter()
            .map(|(key, value)| format!("{key}='{}'", value.replace('\\', "\\\\").replace('\'', "\\'")))
            .collect();
        let mut connection = tokio_postgres::Config::from_str(&conninfo.join(" ")).map_err(|error| {
            PersistenceError::invalid_input(format!(
                "invalid PostgreSQL settings: {}",
                scrub_all(&error.to_string(), &secrets)
            ))
        })?;
        tls.check().map_err(PersistenceError::invalid_input)?;
        connection.ssl_mode(tls.mode.negotiation());
        connection.connect_timeout(connect_timeout);
        let mut config = PgConfig {
            connection,
            tls,
            schema,
            pool_size: 8,
            connect_timeout,
            query_timeout,
            notify_gap: DEFAULT_NOTIFY_GAP,
            secrets,
            shown: String::new(),
        };
        config.shown = config.describe();
        Ok(config)
    }

    /// The same store in another schema (each test uses its own).
    pub fn with_schema(mut self, schema: &str) -> Result<PgConfig> {
        if !is_valid_schema(schema) {
            return Err(invalid_schema(schema));
        }
        self.schema = schema.to_owned();
        self.shown = self.describe();
        Ok(self)
    }

    /// The same settings with append notifications at least `gap` apart (see
    /// [`notify_gap`](PgConfig::notify_gap)).
    pub fn with_notify_gap(mut self, gap: Duration) -> PgConfig {
        self.notify_gap = gap;
        self
    }

    /// The same settings with at most `pool_size` connections in the pool (at least 1).
    pub fn with_pool_size(mut self, pool_size: usize) -> PgConfig {
        self.pool_size = pool_size.max(1);
        self
    }

    /// The same settings with `timeout` as the bound of every statement (its `statement_timeout`).
    pub fn with_query_timeout(mut self, timeout: Duration) -> PgConfig {
        self.query_timeout = timeout;
        self
    }

    /// The same settings with `timeout` as the bound of opening a connection.
    pub fn with_connect_timeout(mut self, timeout: Duration) -> PgConfig {
        self.connect_timeout = timeout;
        self
    }

    /// How connections are encrypted and what of the server's certificate is checked.
    pub fn tls_mode(&self) -> TlsMode {
        self.tls.mode
    }

    /// The same settings with `mode` and the root certificates in `root_cert` (PEM; `None` for
    /// the system's), as `sslmode` and `sslrootcert` in a URL set them.
    pub fn with_tls(mut self, mode: TlsMode, root_cert: Option<PathBuf>) -> Result<PgConfig> {
        let tls = TlsSettings { mode, root_cert };
        tls.check().map_err(PersistenceError::invalid_input)?;
        self.connection.ssl_mode(mode.negotiation());
        self.tls = tls;
        Ok(self)
    }

    /// The store as messages show it: `postgres://user@host:port/database?schema=NAME`, never
    /// the password.
    pub fn shown(&self) -> &str {
        &self.shown
    }

    /// Every form of the password (as used, and as the URL spelled it), to scrub from any text a
    /// server or driver hands back.
    pub(crate) fn secrets(&self) -> &[String] {
        &self.secrets
    }

    fn describe(&self) -> String {
        use tokio_postgres::config::Host;
        let connection = &self.connection;
        let user = connection.get_user().map(|user| format!("{user}@")).unwrap_or_default();
        let mut hosts: Vec<String> = connection
            .get_hosts()
            .iter()
            .map(|host| match host {
                Host::Tcp(name) => name.clone(),
                Host::Unix(path) => path.display().to_string(),
            })
            .collect();
        if hosts.is_empty() {
            hosts = connection.get_hostaddrs().iter().map(ToString::to_string).collect();
        }
        let hosts: Vec<String> = hosts
            .into_iter()
            .enumerate()
            .map(|(idx, name)| match connection.get_ports().get(idx).or(connection.get_ports().first()) {
                Some(port) => format!("{name}:{port}"),
                None => format!("{name}:5432"),
            })
            .collect();
        let database = connection.get_dbname().or(connection.get_user()).unwrap_or("");
        // Built only of parts that are never the password (a URL whose password could be taken
        // for a host or port is refused at parse), and never scrubbed: a password that happens to
        // equal the user or the database name must not blank them out.
        format!("postgres://{user}{}/{database}?schema={}", hosts.join(","), self.schema)
    }
}

/// What a URL says: libpq's parameters, decoded (the authority's parts as `user`, `password`,
/// `host`, `port`, `dbname`; a query parameter wins over the authority), and the password as the
/// URL spells it, to scrub.
struct ParsedUrl {
    settings: BTreeMap<String, String>,
    raw_secrets: Vec<String>,
    /// Whether the URL has a password in its authority or a `password` parameter, empty or not.
    names_password: bool,
}

fn parse_url(url: &str) -> Result<ParsedUrl> {
    let rest = url.strip_prefix("postgres://").or_else(|| url.strip_prefix("postgresql://")).ok_or_else(|| {
        PersistenceError::invalid_input("a PostgreSQL store is named by a postgres:// or postgresql:// URL")
    })?;
    let (before_query, query) = rest.split_once('?').unwrap_or((rest, ""));
    let (userinfo, host_and_path) = match before_query.rsplit_once('@') {
        Some((userinfo, after)) => (Some(userinfo), after),
        None => (None, before_query),
    };
    let (authority, path) = host_and_path.split_once('/').unwrap_or((host_and_path, ""));
    let mut settings = BTreeMap::new();
    let mut raw_secrets = Vec::new();
    let mut names_password = false;
    if let Some(userinfo) = userinfo {
        let (user, password) = match userinfo.split_once(':') {
            Some((user, password)) => {
                names_password = true;
                (user, Some(password))
            }
            None => (userinfo, None),
        };
        if !user.is_empty() {
            settings.insert("user".to_owned(), percent_decoded(user));
        }
        if let Some(password) = password.filter(|password| !password.is_empty()) {
            raw_secrets.push(password.to_owned());
            settings.insert("password".to_owned(), percent_decoded(password));
        }
    }
    if !authority.is_empty() {
        let (mut hosts, mut ports) = (Vec::new(), Vec::new());
        for entry in authority.split(',') {
            let (host, port) = split_host_port(entry).ok_or_else(|| {
                PersistenceError::invalid_input(
                    "a host of the PostgreSQL URL is malformed (an IPv6 address goes in [ ], a port after :)",
                )
            })?;
            hosts.push(percent_decoded(host));
            ports.push(port.unwrap_or("").to_owned());
        }
        if hosts.iter().any(|host| !host.is_empty()) {
            settings.insert("host".to_owned(), hosts.join(","));
        }
        if ports.iter().any(|port| !port.is_empty()) {
            settings.insert("port".to_owned(), ports.join(","));
        }
    }
    if !path.is_empty() {
        settings.insert("dbname".to_owned(), percent_decoded(path));
    }
    for pair in query.split('&').filter(|pair| !pair.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        let key = percent_decoded(key);
        if key == "password" {
            names_password = true;
            if !value.is_empty() {
                raw_secrets.push(value.to_owned());
            }
        }
        settings.insert(key, percent_decoded(value));
    }
    Ok(ParsedUrl { settings, raw_secrets, names_password })
}

/// A host entry of the authority split into the host and its port: `name`, `name:port`,
/// `[v6]` or `[v6]:port`. `None` if it is malformed.
fn split_host_port(entry: &str) -> Option<(&str, Option<&str>)> {
    if let Some(bracketed) = entry.strip_prefix('[') {
        let (host, after) = bracketed.split_once(']')?;
        return match after {
            "" => Some((host, None)),
            _ => Some((host, Some(after.strip_prefix(':')?))),
        };
    }
    Some(match entry.split_once(':') {
        Some((host, port)) => (host, Some(port)),
        None => (entry, None),
    })
}

/// The largest password file read (libpq's are a few lines).
const MAX_PASSFILE_BYTES: u64 = 1 << 20;

/// The password the password file gives for the first host, its port, the database and the user,
/// as libpq looks it up: the file is `passfile`, else `PGPASSFILE` (both already in `settings`),
/// else `~/.pgpass`; it is read only if it is a regular file with no permission for its group or
/// others (else a warning names it and it is ignored); lines are
/// `hostname:port:database:username:password`, `*` matching anything, `\:` and `\\` escapes, `#`
/// starting a comment line; the first line that matches wins.
fn password_from_file(settings: &BTreeMap<String, String>, env: &PgEnv) -> Option<String> {
    use std::os::unix::fs::PermissionsExt;
    let path = match settings.get("passfile") {
        Some(path) => PathBuf::from(path),
        None => Path::new(env.get("HOME")?).join(".pgpass"),
    };
    let metadata = std::fs::metadata(&path).ok()?;
    if !metadata.is_file() {
        tracing::warn!(path = %path.display(), "the password file is not a plain file: it is ignored");
        return None;
    }
    if metadata.permissions().mode() & 0o077 != 0 {
        tracing::warn!(
            path = %path.display(),
            "the password file has group or world access: it is ignored (permissions should be u=rw (0600) or less)"
        );
        return None;
    }
    let mut text = String::new();
    std::fs::File::open(&path).ok()?.take(MAX_PASSFILE_BYTES).read_to_string(&mut text).ok()?;
    let first = |key: &str| settings.get(key).and_then(|value| value.split(',').next()).unwrap_or("");
    let host = match first("host") {
        // As libpq: a Unix socket (or no host name) matches `localhost`.
        "" => "localhost",
        host if host.starts_with('/') => "localhost",
        host => host,
    };
    let port = match first("port") {
        "" => "5432",
        port => port,
    };
    let user = first("user");
    let database = settings.get("dbname").map(String::as_str).unwrap_or(user);
    text.lines().filter(|line| !line.starts_with('#')).find_map(|line| {
        let fields = passfile_fields(line)?;
        let matches = |field: &str, wanted: &str| field == "*" || field == wanted;
        (matches(&fields[0], host)
            && matches(&fields[1], port)
            && matches(&fields[2], database)
            && matches(&fields[3], user))
        .then(|| fields[4].clone())
    })
}

/// A password file line's five fields, escapes undone; `None` for a line with fewer. The fifth
/// field (the password) is the rest of the line.
fn passfile_fields(line: &str) -> Option<[String; 5]> {
    let mut fields: Vec<String> = vec![String::new()];
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => fields.last_mut()?.extend(chars.next()),
            ':' if fields.len() < 5 => fields.push(String::new()),
            c => fields.last_mut()?.push(c),
        }
    }
    fields.try_into().ok()
}

/// `url` with its password replaced by `***`, whether it is in the authority (up to the last
/// `@` before the `?`) or a `password=` parameter.
pub fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else { return url.to_owned() };
    let (before_query, query) = match rest.split_once('?') {
        Some((before, query)) => (before, Some(query)),
        None => (rest, None),
    };
    let before_query = match before_query.rsplit_once('@') {
        Some((userinfo, after)) => match userinfo.split_once(':') {
            Some((user, password)) if !password.is_empty() => format!("{user}:***@{after}"),
            _ => before_query.to_owned(),
        },
        None => before_query.to_owned(),
    };
    let query = query.map(|query| {
        let pairs: Vec<String> = query
            .split('&')
            .map(|pair| match pair.split_once('=') {
                Some((key, value)) if percent_decoded(key) == "password" && !value.is_empty() => format!("{key}=***"),
                _ => pair.to_owned(),
            })
            .collect();
        format!("?{}", pairs.join("&"))
    });
    format!("{scheme}://{before_query}{}", query.unwrap_or_default())
}

/// `text` with every occurrence of `password` replaced by `***`.
pub(crate) fn scrub(text: &str, password: Option<&str>) -> String {
    match password {
        Some(password) if !password.is_empty() => text.replace(password, "***"),
        _ => text.to_owned(),
    }
}

/// `text` with every occurrence of each of `secrets` (longest first) replaced by `***`.
pub(crate) fn scrub_all(text: &str, secrets: &[String]) -> String {
    let mut secrets: Vec<&String> = secrets.iter().collect();
    secrets.sort_by_key(|secret| std::cmp::Reverse(secret.len()));
    secrets.into_iter().fold(text.to_owned(), |text, secret| scrub(&text, Some(secret)))
}

/// `%XX` escapes in a URL parameter decoded (a path in `sslrootcert` may hold `%2F`, spaces…);
/// text that is not a valid escape is kept as it is.
fn percent_decoded(value: &str) -> String {
    let bytes = value.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut idx = 0;
    while idx < bytes.len() {
        let hex = |at: usize| bytes.get(at).and_then(|byte| (*byte as char).to_digit(16));
        match (bytes[idx], hex(idx + 1), hex(idx + 2)) {
            (b'%', Some(high), Some(low)) => {
                out.push((high * 16 + low) as u8);
                idx += 3;
            }
            (byte, _, _) => {
                out.push(byte);
                idx += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests;
