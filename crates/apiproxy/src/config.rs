//! `ProxyConfig`: everything a gateway is tuned by, with the defaults of `apiproxy serve`, and the
//! check that a bearer token is usable.

use std::time::Duration;

use session_core::{MAX_EVENT_BYTES, Oversized, SessionEvent, TooLarge};
use session_persistence::WatchOptions;

use crate::error::ProxyError;

/// How a gateway runs.
#[derive(Debug, Clone)]
pub struct ProxyConfig {
    /// Reported by `host.describe`.
    pub version: String,
    /// The `cwd` of sessions created without one, and `host.describe`'s `cwd`. Must be absolute.
    pub default_cwd: String,
    /// Requests whose body is larger get HTTP 413.
    pub max_body_bytes: usize,
    /// Frames one WebSocket connection may have waiting; a connection that falls this far behind
    /// is sent `stream/error` and closed.
    pub push_queue_frames: usize,
    /// How long one WebSocket send may block before the connection is dropped.
    pub push_send_timeout: Duration,
    /// How long the goodbye of a WebSocket connection the gateway closes may take (its last
    /// frames, the close frame and the client's close reply). A client that has not completed it
    /// by then is reset, so its socket and send queue are gone.
    pub push_close_timeout: Duration,
    /// The largest message (and frame) a WebSocket client may send. The downlinks take no client
    /// messages beyond control frames, so this only has to hold a close frame (125 bytes or more).
    pub max_incoming_message_bytes: usize,
    /// A request header must have arrived this long after its first byte (or after the connection
    /// was accepted); otherwise the connection is closed.
    pub header_read_timeout: Duration,
    /// A request body must have arrived this long after its header; otherwise the request gets
    /// HTTP 408 and the connection is closed.
    pub body_read_timeout: Duration,
    /// A connection with no request in progress is closed after this long.
    pub idle_timeout: Duration,
    /// Open connections (WebSocket downlinks included); one more is answered 503 and closed.
    pub max_connections: usize,
    /// How many of those connections one owner may hold (its share of the cap), so one owner
    /// cannot lock the others out; a request of an owner that holds its whole share on other
    /// connections is answered 429 and its connection closed. A connection counts against the owner of the last request it carried,
    /// from that request until it closes. `None` is half of `max_connections` (at least 1); a
    /// value must be from 1 to `max_connections`.
    pub max_owner_connections: Option<usize>,
    /// `session.list` reads a cold log whose stored size is at most this many bytes to tell
    /// whether it is blank, when no checkpoint says it is not (reference `coldBlankProbeMaxBytes`).
    /// 0 disables the probe: such a row is then listed as not blank.
    pub cold_blank_probe_max_bytes: u64,
    /// How many cold children one `subagent.list` reads at once (from 1 to
    /// `subagent::MAX_COLD_READ_LANES`): the reference's 4 by default; `serve` on PostgreSQL
    /// uses the connection pool's size, since its reads wait on round trips, not on a disk.
    pub subagent_cold_read_lanes: usize,
    /// The byte budget of one `session.history` / `subagent.history` page, counted as the events'
    /// stored JSON (`docs/wire.md`, "History budget"): a page stops before the event that would
    /// take it over, with `hasMore` and `truncated`; one event over the budget is served alone.
    /// Must be positive.
    pub history_page_bytes: usize,
    /// The bytes all history reads in flight may hold together: each read takes its page budget
    /// (at most this much) before it reads and gives it back once its answer is built, so the
    /// excess waits. Must be positive.
    pub history_inflight_bytes: usize,
    /// How long a history read waits for its share of `history_inflight_bytes`; then it is
    /// answered `agent-busy`. Must be positive.
    pub history_wait: Duration,
    /// The largest event `session.append` and `subagent.spawn` take, measured as its stored JSON
    /// record ([`SessionEvent::encoded_len`]); an event over it is refused with a `too_big`
    /// issue. Default and maximum: the session's own bound, [`session_core::MAX_EVENT_BYTES`];
    /// must be positive. A smaller bound is checked by the gateway before the event is appended,
    /// measured with the seq and time it would get at that moment.
    pub max_event_bytes: usize,
    /// Bearer tokens, owners and extra trusted hosts (default: no token, loopback only).
    pub access: AccessConfig,
    /// Following the sessions other writers of a shared store write (`docs/wire.md`, "Across
    /// gateways"): on by default, where the store has a change signal.
    pub follow: FollowConfig,
}

impl ProxyConfig {
    /// The connections one owner may hold: `max_owner_connections`, or half of `max_connections`
    /// (at least 1).
    pub fn owner_connection_share(&self) -> usize {
        self.max_owner_connections.unwrap_or((self.max_connections / 2).max(1))
    }

    /// Checks `event` against `max_event_bytes`.
    pub(crate) fn check_event_size(&self, event: &SessionEvent) -> Result<(), TooLarge> {
        let size = event.encoded_len();
        if size <= self.max_event_bytes {
            return Ok(());
        }
        Err(TooLarge {
            what: Oversized::Event { kind: event.kind.clone(), seq: event.seq },
            size: size as u64,
            limit: self.max_event_bytes as u64,
        })
    }
}

impl Default for ProxyConfig {
    fn default() -> ProxyConfig {
        let default_cwd = std::env::current_dir()
            .ok()
            .and_then(|dir| dir.to_str().map(str::to_owned))
            .filter(|dir| session_core::is_absolute_path(dir))
            .unwrap_or_else(|| "/".to_owned());
        ProxyConfig {
            version: env!("CARGO_PKG_VERSION").to_owned(),
            default_cwd,
            max_body_bytes: 16 << 20,
            push_queue_frames: 1024,
            push_send_timeout: Duration::from_secs(30),
            push_close_timeout: Duration::from_secs(5),
            max_incoming_message_bytes: 4096,
            header_read_timeout: Duration::from_secs(10),
            body_read_timeout: Duration::from_secs(30),
            idle_timeout: Duration::from_secs(60),
            max_connections: 1024,
            max_owner_connections: None,
            cold_blank_probe_max_bytes: 1024,
            subagent_cold_read_lanes: subagent::COLD_READ_CONCURRENCY,
            history_page_bytes: 4 << 20,
            history_inflight_bytes: 32 << 20,
            history_wait: Duration::from_secs(10),
            max_event_bytes: MAX_EVENT_BYTES,
            access: AccessConfig::default(),
            follow: FollowConfig::default(),
        }
    }
}

/// Who may reach the gateway, and as which owner (see `docs/wire.md`, "Access").
#[derive(Debug, Clone, Default)]
pub struct AccessConfig {
    /// Operator tokens: a request bearing one sees every session, or acts as the owner named by
    /// its `x-dsh-owner` header.
    pub operator_tokens: Vec<String>,
    /// Owner tokens: a request bearing one is pinned to that owner.
    pub owner_tokens: Vec<OwnerToken>,
    /// Extra `Host` authorities the trust fence accepts besides loopback ones: `host:port`, or a
    /// bare host for any port.
    pub allowed_hosts: Vec<String>,
}

/// A bearer token bound to one owner partition.
#[derive(Clone, PartialEq, Eq)]
pub struct OwnerToken {
    /// The owner partition the token's requests act in; sessions they create carry it.
    pub owner: String,
    /// The bearer token itself (never printed: `Debug` leaves it out). Must not be empty.
    pub token: String,
}

impl std::fmt::Debug for OwnerToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OwnerToken").field("owner", &self.owner).finish_non_exhaustive()
    }
}

impl AccessConfig {
    /// Whether any bearer token is configured (and therefore required on every request).
    pub fn requires_token(&self) -> bool {
        !self.operator_tokens.is_empty() || !self.owner_tokens.is_empty()
    }

    /// Checks the tokens: each one usable (see [`token_problem`]), each owner
    /// token with an owner, and no token configured twice: bound to two owners (or twice to one),
    /// or both an operator token and an owner token, it would mean whichever binding is looked up
    /// first. The message names the bindings, never the token.
    pub fn check(&self) -> Result<(), ProxyError> {
        let config = |message: String| ProxyError::Config { message };
        let tokens = self.operator_tokens.iter().chain(self.owner_tokens.iter().map(|bound| &bound.token));
        if let Some(problem) = tokens.filter_map(|token| token_problem(token)).next() {
            return Err(config(problem.to_owned()));
        }
        if self.owner_tokens.iter().any(|bound| bound.owner.is_empty()) {
            return Err(config("an owner token needs a non-empty owner".to_owned()));
        }
        let mut bindings: Vec<(&str, String)> = Vec::new();
        let named = self.operator_tokens.iter().map(|token| (token.as_str(), "the operator token".to_owned()));
        let owned = self
            .owner_tokens
            .iter()
            .map(|bound| (bound.token.as_str(), format!("the owner token of {:?}", bound.owner)));
        for (token, binding) in named.chain(owned) {
            if let Some((_, first)) = bindings.iter().find(|(seen, _)| *seen == token) {
                return Err(config(format!("one token is configured twice: as {first} and as {binding}")));
            }
            bindings.push((token, binding));
        }
        Ok(())
    }
}

/// Why `token` cannot be a bearer token, if it cannot. An empty token would admit anyone who sends
/// `Authorization: Bearer ` (and says nothing about who configured it), and a token that no
/// header carries exactly (surrounding spaces, which are trimmed off what is presented, or bytes
/// outside printable ASCII) would admit no one.
pub fn token_problem(token: &str) -> Option<&'static str> {
    if token.is_empty() {
        Some("a bearer token must not be empty")
    } else if !token.bytes().all(|byte| (b' '..=b'~').contains(&byte)) {
        Some("a bearer token must be printable ASCII")
    } else if token.trim() != token {
        Some("a bearer token must not start or end with a space")
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_problems() {
        for good in ["t", "op-secret", "with inner space", "~!@#$%^&*()"] {
            assert_eq!(token_problem(good), None, "{good:?}");
        }
        for bad in ["", " ", " lead", "trail ", "tab\t", "caf\u{e9}", "nul\0"] {
            assert!(token_problem(bad).is_some(), "{bad:?}");
        }
    }
}

/// How the follower runs (`ProxyConfig::follow`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FollowConfig {
    /// Whether to follow the store at all (on by default; the store must have a change signal,
    /// which JSONL and memory stores, written by this gateway alone, do not).
    pub enabled: bool,
    /// Whether to listen to the store's change signal (on by default). Off, the follower finds
    /// changes by its sweeps alone: for networks that cut long-lived connections, and to measure
    /// what a lost signal costs.
    pub signal: bool,
    /// The safety poll: a sweep at this interval even when no signal came (1 s by default).
    pub sweep_interval: Duration,
    /// The least time between the starts of two rounds that wake-ups start (50 ms by default;
    /// zero starts each at once). A wake-up after a quiet stretch is read at once; the wake-ups of
    /// a burst (a session written elsewhere many times a second) wait for the gap and are read
    /// together, so a followed session costs the store at most one tail read per gap, not one
    /// per append, and a frame waits at most the gap longer. The safety poll's sweeps do not
    /// count. At most `sweep_interval`.
    pub round_gap: Duration,
    /// The store's change signal (SQLite's poll interval, the listener's reconnect back-off).
    pub watch: WatchOptions,
}

impl Default for FollowConfig {
    fn default() -> FollowConfig {
        FollowConfig {
            enabled: true,
            signal: true,
            sweep_interval: Duration::from_secs(1),
            round_gap: Duration::from_millis(50),
            watch: WatchOptions::default(),
        }
    }
}
