//! `ProxyError`: why a gateway could not be built or served, or a store operation failed.

use std::{io, net::SocketAddr, path::PathBuf};

use session_persistence::PersistenceError;
use session_projection::RegisterError;

/// The library's error type. Business outcomes of requests are not errors: they are
/// [`RpcError`](crate::wire::RpcError) values answered with HTTP 200.
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    /// Listening off loopback without any bearer token would expose every session.
    #[error("refusing to listen on non-loopback address {addr} without a bearer token; pass --token")]
    InsecureListen { addr: SocketAddr },
    #[error("invalid configuration: {message}")]
    Config { message: String },
    #[error("I/O error on {what}: {source}")]
    Io {
        what: String,
        #[source]
        source: io::Error,
    },
    #[error(transparent)]
    Persistence(#[from] PersistenceError),
    #[error(transparent)]
    Register(#[from] RegisterError),
    #[error("session store {path} does not exist", path = path.display())]
    StoreMissing { path: PathBuf },
    /// The store holds logs of both encodings, so it cannot be opened in either.
    #[error(
        "session store {path} holds both encodings: {n_raw} raw log(s) (such as {raw}) and {n_zstd} zstd log(s) \
         (such as {zstd}); one store holds one encoding: move one kind to a store of its own",
        path = path.display(),
        raw = raw.display(),
        zstd = zstd.display()
    )]
    MixedStore { path: PathBuf, n_raw: u64, raw: PathBuf, n_zstd: u64, zstd: PathBuf },
    #[error("session \"{id}\" not found")]
    SessionNotFound { id: String },
    #[error("{message}")]
    Session { message: String },
}

impl ProxyError {
    pub(crate) fn io(what: impl Into<String>, source: io::Error) -> ProxyError {
        ProxyError::Io { what: what.into(), source }
    }
}
