//! `CacheError`: every way a projection cache operation can fail.

use std::{io, path::PathBuf, sync::Arc};

use session_persistence::PersistenceError;
use session_projection::RestoreError;
use session_storage_io::keyed::BlockingCancelled;

/// The one error type of this crate. It is `Clone` (sources are shared) because callers that share
/// one cold read all receive its outcome.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum CacheError {
    /// The write-policy configuration is invalid; the message names the field (reference 02 §8.1).
    #[error("{message}")]
    InvalidConfig {
        /// The reference's text (`writeIntervalMs must be an integer between 1 and ...`).
        message: String,
    },
    /// A unit state cannot be stored as lossless JSON (reference 02 §7.4). `key` names the unit.
    #[error(
        "projection checkpoint is not losslessly JSON-serializable (a unit state violates the plain-JSON contract)"
    )]
    NotLossless {
        /// The key of the unit whose state cannot be stored.
        key: String,
        /// Why: the serializer's error, or the unit's fold failure when it has no row to store.
        message: String,
    },
    /// Reading or flushing the session log failed (`session "<id>" not found` among others).
    #[error(transparent)]
    Persistence(Arc<PersistenceError>),
    /// The stored log could not be folded (its events do not continue from seq 0).
    #[error(transparent)]
    Restore(#[from] RestoreError),
    /// The caller's cancellation token fired before the operation finished (a log read that
    /// observed it reports it here too, never as [`CacheError::Persistence`]).
    #[error("operation cancelled")]
    Cancelled,
    /// The on-disk checkpoint store failed.
    #[error("I/O error on {path}: {source}", path = path.display())]
    Io {
        /// The file or directory the failing call was about.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: Arc<io::Error>,
    },
    /// A checkpoint store without files failed; `message` says how.
    #[error("{message}")]
    Storage {
        /// The store's own description of the failure.
        message: String,
    },
    /// The caller passed something this operation cannot accept.
    #[error("{message}")]
    InvalidInput {
        /// What was refused: an id the disk store cannot name as a file, or
        /// [`ProjectionCache::attach`](crate::ProjectionCache::attach) called outside a Tokio
        /// runtime.
        message: String,
    },
}

impl CacheError {
    /// [`CacheError::Io`] for a failed operation on `path`; for a [`CheckpointStore`] of your
    /// own.
    ///
    /// [`CheckpointStore`]: crate::CheckpointStore
    pub fn io(path: impl Into<PathBuf>, source: io::Error) -> CacheError {
        CacheError::Io { path: path.into(), source: Arc::new(source) }
    }

    /// Whether the session log does not exist.
    pub fn is_not_found(&self) -> bool {
        matches!(self, CacheError::Persistence(source) if source.is_not_found())
    }
}

impl From<PersistenceError> for CacheError {
    fn from(error: PersistenceError) -> CacheError {
        match error {
            PersistenceError::Cancelled => CacheError::Cancelled,
            other => CacheError::Persistence(Arc::new(other)),
        }
    }
}

impl From<BlockingCancelled> for CacheError {
    fn from(_: BlockingCancelled) -> CacheError {
        CacheError::Cancelled
    }
}

/// The result of a projection cache operation; the error defaults to [`CacheError`].
pub type Result<T, E = CacheError> = std::result::Result<T, E>;
