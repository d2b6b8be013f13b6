//! What to connect to and how: the URL (with this crate's `schema` parameter and the TLS
//! settings taken out), the pool size and the time bounds, and the URL as messages show it,
//! without its password.

use std::{fmt, path::PathBuf, str::FromStr, time::Duration};

use session_persistence::{PersistenceError, Result};

use crate::tls::{TlsMode, TlsSettings};

/// The schema a URL without a `schema` parameter uses.
pub const DEFAULT_SCHEMA: &str = "public";

/// How to reach a PostgreSQL session store. Built from a URL by [`PgConfig::from_url`].
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
    /// Encryption and certificate checks (`sslmode`, `sslrootcert`).
    pub(crate) tls: TlsSettings,
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
            .field("sslmode", &self.tls.mode)
            .field("sslrootcert", &self.tls.root_cert)
            .finish()
    }
}

/// Whether `text` names a PostgreSQL store: a `postgres://` or `postgresql://` URL.
pub fn is_postgres_url(text: &str) -> bool {
    text.starts_with("postgres://") || text.starts_with("postgresql://")
}

/// Whether `name` is a schema name this crate accepts: a lowercase SQL identifier that needs no
/// quoting (`[a-z_][a-z0-9_]*`, at most 63 bytes).
pub fn is_valid_schema(name: &str) -> bool {
    let mut chars = name.chars();
    name.len() <= 63
        && chars.next().is_some_and(|first| first.is_ascii_lowercase() || first == '_')
        && chars.all(|rest| rest.is_ascii_lowercase() || rest.is_ascii_digit() || rest == '_')
}

impl PgConfig {
    /// Parses `postgres://user[:password]@host[:port]/database[?schema=NAME&...]`. The `schema`
    /// parameter is this crate's; `sslmode` (`disable`, `prefer` (the default), `require`,
    /// `verify-ca`, `verify-full`) and `sslrootcert=PATH` mean what they mean to libpq (see
    /// [`TlsMode`]); every other parameter is libpq's, as `tokio-postgres` reads them. A refusal
    /// never quotes the password.
    pub fn from_url(url: &str) -> Result<PgConfig> {
        if !is_postgres_url(url) {
            return Err(PersistenceError::invalid_input(
                "a PostgreSQL store is named by a postgres:// or postgresql:// URL",
            ));
        }
        let (base, query) = url.split_once('?').unwrap_or((url, ""));
        let mut schema = DEFAULT_SCHEMA.to_owned();
        let mut tls = TlsSettings::default();
        let mut kept = Vec::new();
        for pair in query.split('&').filter(|pair| !pair.is_empty()) {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            match key {
                "schema" => schema = value.to_owned(),
                "sslmode" => {
                    tls.mode = TlsMode::parse(value).ok_or_else(|| {
                        PersistenceError::invalid_input(format!(
                            "sslmode={value} is not a TLS mode: use disable, prefer, require, verify-ca or verify-full"
                        ))
                    })?;
                }
                "sslrootcert" => tls.root_cert = Some(PathBuf::from(percent_decoded(value))),
                "sslcert" | "sslkey" | "sslpassword" => {
                    return Err(PersistenceError::invalid_input(format!(
                        "{key} is not supported: this store does not present client certificates (authenticate \
                         with a password or trust instead)"
                    )));
                }
                _ => kept.push(pair),
            }
        }
        if !is_valid_schema(&schema) {
            return Err(PersistenceError::invalid_input(format!(
                "schema {schema:?} is not a valid schema name: use lowercase letters, digits and _, starting with a \
                 letter or _, at most 63 bytes"
            )));
        }
        let rest = if kept.is_empty() { base.to_owned() } else { format!("{base}?{}", kept.join("&")) };
        let mut connection = tokio_postgres::Config::from_str(&rest).map_err(|error| {
            let password = password_in(url);
            PersistenceError::invalid_input(format!(
                "invalid PostgreSQL URL {}: {}",
                redact_url(url),
                scrub(&error.to_string(), password.as_deref())
            ))
        })?;
        tls.check().map_err(PersistenceError::invalid_input)?;
        connection.ssl_mode(tls.mode.negotiation());
        let mut config = PgConfig {
            connection,
            tls,
            schema,
            pool_size: 8,
            connect_timeout: Duration::from_secs(10),
            query_timeout: Duration::from_secs(60),
            shown: String::new(),
        };
        config.shown = config.describe();
        Ok(config)
    }

    /// The same store in another schema (each test uses its own).
    pub fn with_schema(mut self, schema: &str) -> Result<PgConfig> {
        if !is_valid_schema(schema) {
            return Err(PersistenceError::invalid_input(format!("schema {schema:?} is not a valid schema name")));
        }
        self.schema = schema.to_owned();
        self.shown = self.describe();
        Ok(self)
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

    /// The password, to scrub it from any text a server or driver hands back.
    pub(crate) fn password(&self) -> Option<String> {
        self.connection.get_password().map(|bytes| String::from_utf8_lossy(bytes).into_owned())
    }

    fn describe(&self) -> String {
        use tokio_postgres::config::Host;
        let connection = &self.connection;
        let user = connection.get_user().map(|user| format!("{user}@")).unwrap_or_default();
        let hosts: Vec<String> = connection
            .get_hosts()
            .iter()
            .enumerate()
            .map(|(idx, host)| {
                let name = match host {
                    Host::Tcp(name) => name.clone(),
                    Host::Unix(path) => path.display().to_string(),
                };
                match connection.get_ports().get(idx).or(connection.get_ports().first()) {
                    Some(port) => format!("{name}:{port}"),
                    None => name,
                }
            })
            .collect();
        let database = connection.get_dbname().unwrap_or("");
        format!("postgres://{user}{}/{database}?schema={}", hosts.join(","), self.schema)
    }
}

/// The password of a URL, if it has one: between the first `:` and the `@` of the authority, or
/// a `password=` parameter.
fn password_in(url: &str) -> Option<String> {
    let from_userinfo = || {
        let authority = url.split_once("://")?.1;
        let authority = authority.split(['/', '?']).next()?;
        let userinfo = authority.rsplit_once('@')?.0;
        let password = userinfo.split_once(':')?.1;
        (!password.is_empty()).then(|| password.to_owned())
    };
    from_userinfo().or_else(|| password_parameter(url))
}

/// The value of a `password=` parameter of `url`.
fn password_parameter(url: &str) -> Option<String> {
    let query = url.split_once('?')?.1;
    let value = query.split('&').find_map(|pair| pair.strip_prefix("password="))?;
    (!value.is_empty()).then(|| value.to_owned())
}

/// `url` with its password replaced by `***`, whether it is in the authority or a `password=`
/// parameter.
pub fn redact_url(url: &str) -> String {
    let mut redacted = url.to_owned();
    let from_authority = url.split_once("://").and_then(|(_, rest)| {
        let authority = rest.split(['/', '?']).next()?;
        let password = authority.rsplit_once('@')?.0.split_once(':')?.1;
        (!password.is_empty()).then(|| password.to_owned())
    });
    if let Some(password) = from_authority {
        redacted = redacted.replacen(&format!(":{password}@"), ":***@", 1);
    }
    if let Some(password) = password_parameter(url) {
        redacted = redacted.replace(&format!("password={password}"), "password=***");
    }
    redacted
}

/// `text` with every occurrence of `password` replaced by `***`.
pub(crate) fn scrub(text: &str, password: Option<&str>) -> String {
    match password {
        Some(password) if !password.is_empty() => text.replace(password, "***"),
        _ => text.to_owned(),
    }
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
