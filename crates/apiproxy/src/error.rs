//! `ProxyError`: why a gateway could not be built or served, or a store operation failed.

use std::{io, net::SocketAddr, path::PathBuf};

use session_persistence::PersistenceError;
use session_projection::RegisterError;

/// The library's error type. Business outcomes of requests are not errors: they are
/// [`RpcError`](crate::wire::RpcError) values answered with HTTP 200.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProxyError {
    /// Listening off loopback without any bearer token would expose every session.
    #[error("refusing to listen on non-loopback address {addr} without a bearer token; pass --token")]
    InsecureListen {
        /// The address that was asked for.
        addr: SocketAddr,
    },
    /// A [`ProxyConfig`](crate::ProxyConfig) value is out of range (a relative default `cwd`, an
    /// empty token, a bound that cannot hold a close frame).
    #[error("invalid configuration: {message}")]
    Config {
        /// Which setting is wrong, and why.
        message: String,
    },
    /// Binding, accepting or writing failed.
    #[error("I/O error on {what}: {source}")]
    Io {
        /// What the failed call was on (an address, `standard output`).
        what: String,
        /// The operating system's error.
        #[source]
        source: io::Error,
    },
    /// The store failed: opening it, reading or writing a log.
    #[error(transparent)]
    Persistence(#[from] PersistenceError),
    /// The gateway's projection units could not be registered: the registry it was given already
    /// holds one of their keys at another state version.
    #[error(transparent)]
    Register(#[from] RegisterError),
    /// A read-only command named a store that does not exist (it is created only by `serve`).
    #[error("session store {path} does not exist", path = path.display())]
    StoreMissing {
        /// The store directory or database file.
        path: PathBuf,
    },
    /// The store holds logs of both encodings, so it cannot be opened in either.
    #[error(
        "session store {path} holds both encodings: {n_raw} raw log(s) (such as {raw}) and {n_zstd} zstd log(s) \
         (such as {zstd}); one store holds one encoding: move one kind to a store of its own",
        path = path.display(),
        raw = raw.display(),
        zstd = zstd.display()
    )]
    MixedStore {
        /// The store's root directory.
        path: PathBuf,
        /// How many raw (`session.jsonl`) logs it holds.
        n_raw: u64,
        /// One of them, for the message.
        raw: PathBuf,
        /// How many zstd (`session.jsonl.zstd`) logs it holds.
        n_zstd: u64,
        /// One of them, for the message.
        zstd: PathBuf,
    },
    /// A CLI command named a session the store does not hold.
    #[error("session \"{id}\" not found")]
    SessionNotFound {
        /// The id as given on the command line.
        id: String,
    },
    /// A session-level operation the CLI or the demo ran failed (seeding the demo, listing
    /// subagents); `message` says which and why.
    #[error("{message}")]
    Session {
        /// What failed, with the underlying error's text.
        message: String,
    },
}

impl ProxyError {
    pub(crate) fn io(what: impl Into<String>, source: io::Error) -> ProxyError {
        ProxyError::Io { what: what.into(), source }
    }
}
