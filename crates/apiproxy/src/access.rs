//! Who may reach the gateway and as whom: the Host/Origin trust fence (reference 04 §4.1), bearer
//! tokens, and the caller's owner partition.
//!
//! The fence is DNS-rebinding and cross-site defence, not authentication. Authentication is the
//! bearer token, required on every request once any token is configured (and a token must be
//! configured to listen off loopback). The owner comes from an owner token, or from the
//! `x-dsh-owner` header of an operator-tier request (loopback without tokens, or an operator
//! token): the front that reached the gateway declares whom it acts for.

use std::net::{IpAddr, SocketAddr};

use axum::http::{HeaderMap, Uri, header};
// The longest owner name accepted is the bound of a session header's `owner`.
use session_core::{MAX_OWNER_BYTES, SessionHeader};

use crate::config::AccessConfig;

/// The request header naming the owner partition an operator-tier caller acts for.
pub const OWNER_HEADER: &str = "x-dsh-owner";

/// Whether listening on `addr` is loopback-only.
pub fn is_loopback_listen(addr: &SocketAddr) -> bool {
    addr.ip().is_loopback()
}

/// The admitted caller of one request (or one WebSocket connection, captured at upgrade).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Caller {
    /// `None` is the operator tier, which sees every session.
    pub(crate) owner: Option<String>,
}

impl Caller {
    /// Whether this caller may see the session of `header`.
    pub(crate) fn sees(&self, header: &SessionHeader) -> bool {
        sees(self.owner.as_deref(), header.owner.as_deref())
    }
}

/// The owner rule: the operator tier sees everything, an owner sees only its own sessions.
pub(crate) fn sees(caller_owner: Option<&str>, session_owner: Option<&str>) -> bool {
    caller_owner.is_none() || caller_owner == session_owner
}

/// Why a request was turned away before dispatch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// HTTP 403: the trust fence, or an owner header that contradicts an owner token.
    Forbidden,
    /// HTTP 401: a token is required and none (or an unknown one) was presented.
    Unauthenticated,
    /// HTTP 400: the owner header is not a valid owner name.
    BadOwner,
    /// HTTP 400: the request is ambiguous about who it is from or for (the text says how): more
    /// than one `Host`, `Origin`, `Authorization` or `x-dsh-owner` header, or an absolute-form
    /// target whose authority is not the `Host`.
    Ambiguous(&'static str),
}

/// Applies the trust fence, then the token, then the owner header. `target` is the request
/// target: an absolute-form one (`http://host/path`) must name the `Host` authority.
pub(crate) fn admit(
    access: &AccessConfig,
    listen: Option<SocketAddr>,
    target: &Uri,
    headers: &HeaderMap,
) -> Result<Caller, Refusal> {
    fence(access, listen, target, headers)?;
    caller(access, headers)
}

/// The trust fence alone (no token, no owner): what the viewer's static page passes, since it
/// holds no data. Ambiguous `Host`/`Origin`/`Authorization`/owner headers are refused here too.
pub(crate) fn fence(
    access: &AccessConfig,
    listen: Option<SocketAddr>,
    target: &Uri,
    headers: &HeaderMap,
) -> Result<(), Refusal> {
    // Only one value can be checked: with two, a front and the gateway may each read another.
    let single = [
        (header::HOST.as_str(), "more than one Host header"),
        (header::ORIGIN.as_str(), "more than one Origin header"),
        (header::AUTHORIZATION.as_str(), "more than one Authorization header"),
        (OWNER_HEADER, "more than one x-dsh-owner header"),
    ];
    if let Some((_, refusal)) = single.iter().find(|(name, _)| headers.get_all(*name).iter().nth(1).is_some()) {
        return Err(Refusal::Ambiguous(refusal));
    }
    let host = headers.get(header::HOST).and_then(|value| value.to_str().ok()).ok_or(Refusal::Forbidden)?;
    let Some(host_authority) = Authority::parse(host, 80) else { return Err(Refusal::Forbidden) };
    // HTTP/1.1 lets an absolute-form target override `Host` (RFC 9112 §3.2.2); the fence checks
    // `Host`, so the two must agree.
    if let Some(authority) = target.authority() {
        let default_port = match target.scheme_str().map(str::to_ascii_lowercase).as_deref() {
            Some("https" | "wss") => 443,
            _ => 80,
        };
        if Authority::parse(authority.as_str(), default_port).as_ref() != Some(&host_authority) {
            return Err(Refusal::Ambiguous("the request target names another authority than the Host header"));
        }
    }
    if !trusted_host(access, listen, &host_authority) {
        return Err(Refusal::Forbidden);
    }
    if headers.get("sec-fetch-site").and_then(|value| value.to_str().ok()) == Some("cross-site") {
        return Err(Refusal::Forbidden);
    }
    if let Some(origin) = headers.get(header::ORIGIN) {
        let origin = origin.to_str().map_err(|_| Refusal::Forbidden)?;
        let origin_authority = origin_authority(origin).ok_or(Refusal::Forbidden)?;
        if origin_authority != host_authority {
            return Err(Refusal::Forbidden);
        }
    }
    Ok(())
}

/// The token, then the owner header, of a request that passed the fence.
fn caller(access: &AccessConfig, headers: &HeaderMap) -> Result<Caller, Refusal> {
    let declared_owner = match headers.get(OWNER_HEADER) {
        None => None,
        Some(value) => {
            let owner = value.to_str().map_err(|_| Refusal::BadOwner)?;
            let valid = !owner.is_empty()
                && owner.len() <= MAX_OWNER_BYTES
                && owner.bytes().all(|byte| byte.is_ascii_graphic());
            if !valid {
                return Err(Refusal::BadOwner);
            }
            Some(owner.to_owned())
        }
    };
    if !access.requires_token() {
        return Ok(Caller { owner: declared_owner });
    }
    let header_token = headers
        .get(header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.strip_prefix("Bearer "))
        .map(str::trim);
    let protocol_token = subprotocol_token(headers)?;
    let token = match (header_token, protocol_token.as_deref()) {
        (Some(_), Some(_)) => {
            return Err(Refusal::Ambiguous("both an Authorization header and a bearer subprotocol"));
        }
        (Some(token), None) | (None, Some(token)) => token,
        (None, None) => return Err(Refusal::Unauthenticated),
    };
    if let Some(bound) = access.owner_tokens.iter().find(|bound| same_secret(&bound.token, token)) {
        if declared_owner.as_ref().is_some_and(|declared| *declared != bound.owner) {
            return Err(Refusal::Forbidden);
        }
        return Ok(Caller { owner: Some(bound.owner.clone()) });
    }
    if access.operator_tokens.iter().any(|operator| same_secret(operator, token)) {
        return Ok(Caller { owner: declared_owner });
    }
    Err(Refusal::Unauthenticated)
}

/// The WebSocket subprotocol a downlink speaks; the gateway echoes it when a client offers it.
pub(crate) const SUBPROTOCOL: &str = "dsh.v1";

/// The prefix of the subprotocol that carries a bearer token, base64url-encoded (a browser cannot
/// set an `Authorization` header on a WebSocket, only the offered subprotocols). It is never
/// echoed back.
const BEARER_SUBPROTOCOL: &str = "dsh.bearer.";

/// The bearer token a WebSocket upgrade offers as a subprotocol, if it offers one. Only upgrades
/// are read; more than one bearer entry is ambiguous, and one that is not base64url of UTF-8 text
/// is an unknown token.
fn subprotocol_token(headers: &HeaderMap) -> Result<Option<String>, Refusal> {
    let upgrade = headers.get(header::UPGRADE).and_then(|value| value.to_str().ok());
    if !upgrade.is_some_and(|value| value.eq_ignore_ascii_case("websocket")) {
        return Ok(None);
    }
    let mut offered = headers
        .get_all(header::SEC_WEBSOCKET_PROTOCOL)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .filter_map(|protocol| protocol.trim().strip_prefix(BEARER_SUBPROTOCOL));
    let Some(encoded) = offered.next() else { return Ok(None) };
    if offered.next().is_some() {
        return Err(Refusal::Ambiguous("more than one bearer subprotocol"));
    }
    use base64::Engine as _;
    let decoded = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(encoded.trim_end_matches('='))
        .map_err(|_| Refusal::Unauthenticated)?;
    String::from_utf8(decoded).map(Some).map_err(|_| Refusal::Unauthenticated)
}

/// Compares two secrets in time that depends only on their lengths.
fn same_secret(expected: &str, presented: &str) -> bool {
    let (expected, presented) = (expected.as_bytes(), presented.as_bytes());
    if expected.len() != presented.len() {
        return false;
    }
    expected.iter().zip(presented).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0
}

/// A normalized `host:port` authority.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Authority {
    host: String,
    port: u16,
}

impl Authority {
    /// Parses `host[:port]` or `[v6][:port]`, lowercasing the host; `default_port` fills an absent port.
    fn parse(text: &str, default_port: u16) -> Option<Authority> {
        let text = text.trim();
        if text.is_empty() || text.contains(['/', '@', ' ']) {
            return None;
        }
        let (host, port) = if let Some(rest) = text.strip_prefix('[') {
            let (host, after) = rest.split_once(']')?;
            let port = match after {
                "" => None,
                _ => Some(after.strip_prefix(':')?),
            };
            (format!("[{}]", host.to_ascii_lowercase()), port)
        } else {
            match text.rsplit_once(':') {
                Some((host, port)) => (host.to_ascii_lowercase(), Some(port)),
                None => (text.to_ascii_lowercase(), None),
            }
        };
        let port = match port {
            None => default_port,
            Some(port) => port.parse().ok()?,
        };
        (!host.is_empty()).then_some(Authority { host, port })
    }

    fn is_loopback(&self) -> bool {
        if self.host == "localhost" {
            return true;
        }
        let bare = self.host.trim_start_matches('[').trim_end_matches(']');
        bare.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
    }
}

fn trusted_host(access: &AccessConfig, listen: Option<SocketAddr>, authority: &Authority) -> bool {
    if authority.is_loopback() {
        return true;
    }
    if let Some(listen) = listen
        && !listen.ip().is_unspecified()
        && Authority::parse(&listen.to_string(), 80).as_ref() == Some(authority)
    {
        return true;
    }
    // An entry without a port (parsed with port 0) matches the host on any port.
    access.allowed_hosts.iter().any(|allowed| match Authority::parse(allowed, 0) {
        Some(entry) if entry.port == 0 => entry.host == authority.host,
        Some(entry) => entry == *authority,
        None => false,
    })
}

/// The authority of an `Origin` header (`scheme://host[:port]`), with the scheme's default port.
fn origin_authority(origin: &str) -> Option<Authority> {
    if origin == "null" {
        return None;
    }
    let (scheme, rest) = origin.split_once("://")?;
    let default_port = match scheme.to_ascii_lowercase().as_str() {
        "http" | "ws" => 80,
        "https" | "wss" => 443,
        _ => return None,
    };
    Authority::parse(rest.trim_end_matches('/'), default_port)
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;

    use super::*;
    use crate::config::OwnerToken;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(*name, HeaderValue::from_str(value).unwrap());
        }
        map
    }

    fn check(access: &AccessConfig, pairs: &[(&'static str, &str)], expected: Result<Option<&str>, Refusal>) {
        check_target(access, "/api/host.describe", pairs, expected);
    }

    fn check_target(
        access: &AccessConfig,
        target: &str,
        pairs: &[(&'static str, &str)],
        expected: Result<Option<&str>, Refusal>,
    ) {
        let target: Uri = target.parse().unwrap();
        let actual = admit(access, None, &target, &headers(pairs)).map(|caller| caller.owner);
        assert_eq!(actual, expected.map(|owner| owner.map(str::to_owned)), "{target} {pairs:?}");
    }

    #[test]
    fn ambiguous_authorities() {
        let open = AccessConfig::default();
        let two_hosts = Err(Refusal::Ambiguous("more than one Host header"));
        check(&open, &[("host", "127.0.0.1:8420"), ("host", "127.0.0.1:8420")], two_hosts);
        check(&open, &[("host", "127.0.0.1:8420"), ("host", "evil.example")], two_hosts);
        let two_origins = Err(Refusal::Ambiguous("more than one Origin header"));
        let origin = ("origin", "http://127.0.0.1:8420");
        check(&open, &[("host", "127.0.0.1:8420"), origin, origin], two_origins);
        check(&open, &[("host", "127.0.0.1:8420"), origin, ("origin", "http://evil.example")], two_origins);
        let host = ("host", "127.0.0.1:8420");
        let two_owners = Err(Refusal::Ambiguous("more than one x-dsh-owner header"));
        check(&open, &[host, (OWNER_HEADER, "alice"), (OWNER_HEADER, "bob")], two_owners);
        let two_tokens = Err(Refusal::Ambiguous("more than one Authorization header"));
        check(&open, &[host, ("authorization", "Bearer a"), ("authorization", "Bearer b")], two_tokens);
        let other = Err(Refusal::Ambiguous("the request target names another authority than the Host header"));
        check_target(&open, "http://127.0.0.1:8420/api/x", &[host], Ok(None));
        check_target(&open, "http://LOCALHOST/api/x", &[("host", "localhost:80")], Ok(None));
        check_target(&open, "https://localhost/api/x", &[("host", "localhost:443")], Ok(None));
        check_target(&open, "http://evil.example:8420/api/x", &[host], other);
        check_target(&open, "http://127.0.0.1:8421/api/x", &[host], other);
        check_target(&open, "https://127.0.0.1/api/x", &[("host", "127.0.0.1")], other);
        check_target(&open, "http://user@127.0.0.1:8420/api/x", &[host], other);
    }

    #[test]
    fn trust_fence() {
        let open = AccessConfig::default();
        check(&open, &[("host", "127.0.0.1:8420")], Ok(None));
        check(&open, &[("host", "localhost")], Ok(None));
        check(&open, &[("host", "[::1]:9")], Ok(None));
        check(&open, &[], Err(Refusal::Forbidden));
        check(&open, &[("host", "evil.example:8420")], Err(Refusal::Forbidden));
        check(&open, &[("host", "127.0.0.1:8420"), ("origin", "http://127.0.0.1:8420")], Ok(None));
        check(&open, &[("host", "127.0.0.1:8420"), ("origin", "http://evil.example")], Err(Refusal::Forbidden));
        check(&open, &[("host", "127.0.0.1:8420"), ("origin", "null")], Err(Refusal::Forbidden));
        check(&open, &[("host", "localhost:80"), ("origin", "http://LOCALHOST")], Ok(None));
        check(&open, &[("host", "127.0.0.1:1"), ("sec-fetch-site", "cross-site")], Err(Refusal::Forbidden));
        check(&open, &[("host", "127.0.0.1:1"), ("sec-fetch-site", "same-origin")], Ok(None));
        let allowed = AccessConfig {
            allowed_hosts: vec!["box.lan".to_owned(), "api.example:8443".to_owned()],
            ..AccessConfig::default()
        };
        check(&allowed, &[("host", "box.lan:1234")], Ok(None));
        check(&allowed, &[("host", "api.example:8443")], Ok(None));
        check(&allowed, &[("host", "api.example:8444")], Err(Refusal::Forbidden));
    }

    #[test]
    fn tokens_and_owner() {
        let open = AccessConfig::default();
        check(&open, &[("host", "127.0.0.1"), (OWNER_HEADER, "alice")], Ok(Some("alice")));
        check(&open, &[("host", "127.0.0.1"), (OWNER_HEADER, "has space")], Err(Refusal::BadOwner));
        let access = AccessConfig {
            operator_tokens: vec!["op-secret".to_owned()],
            owner_tokens: vec![OwnerToken { owner: "bob".to_owned(), token: "bob-secret".to_owned() }],
            allowed_hosts: Vec::new(),
        };
        check(&access, &[("host", "127.0.0.1")], Err(Refusal::Unauthenticated));
        check(&access, &[("host", "127.0.0.1"), ("authorization", "Bearer nope")], Err(Refusal::Unauthenticated));
        check(&access, &[("host", "127.0.0.1"), ("authorization", "Bearer op-secret")], Ok(None));
        check(
            &access,
            &[("host", "127.0.0.1"), ("authorization", "Bearer op-secret"), (OWNER_HEADER, "carol")],
            Ok(Some("carol")),
        );
        check(&access, &[("host", "127.0.0.1"), ("authorization", "Bearer bob-secret")], Ok(Some("bob")));
        check(
            &access,
            &[("host", "127.0.0.1"), ("authorization", "Bearer bob-secret"), (OWNER_HEADER, "alice")],
            Err(Refusal::Forbidden),
        );
    }
}
