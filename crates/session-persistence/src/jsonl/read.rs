//! Reading one log: find it, open it (regular files only), stream it through the format
//! scanner with the identity check in front of the caller's sink, and start over, a bounded
//! number of times, when the file changed under the read.

use std::{
    fs, io,
    path::{Path, PathBuf},
    sync::Arc,
};

use session_core::{SessionEvent, SessionHeader, SessionId};
use tokio_util::sync::CancellationToken;

use super::{
    JsonlStore,
    discovery::check_cancel,
    files::{FileSource, open_for_reading, revision_of},
    header_cache::{Listed, same_identity},
};
use crate::{
    backend::{ScanOutcome, ScanSink, StoredHeader},
    error::{PersistenceError, Result},
    format::{LogScan, scan_log_from},
};

/// How often a scan re-reads a log that changed while it was being read before giving up.
const MAX_READ_ATTEMPTS: u32 = 3;

/// Checks the header's identity before anything reaches the caller's sink.
struct BoundSink<'a> {
    store: &'a JsonlStore,
    path: &'a Path,
    id: &'a SessionId,
    inner: &'a mut dyn ScanSink,
}

impl ScanSink for BoundSink<'_> {
    fn header(&mut self, header: &Arc<SessionHeader>) -> Result<()> {
        self.store.check_identity(self.path, header, Some(self.id))?;
        self.inner.header(header)
    }

    fn event(&mut self, event: Arc<SessionEvent>) -> Result<()> {
        self.inner.event(event)
    }

    fn restart(&mut self) -> bool {
        self.inner.restart()
    }

    fn read_ahead(&self) -> bool {
        self.inner.read_ahead()
    }

    fn read_ahead_decoders(&self) -> usize {
        self.inner.read_ahead_decoders()
    }
}

impl JsonlStore {
    /// [`Backend::scan`](crate::Backend::scan) of the JSONL store, and with `from_seq` above 0
    /// its [`scan_from`](crate::Backend::scan_from), which seeks (`format::seek`).
    pub(super) fn scan_log(
        &self,
        id: &SessionId,
        from_seq: u64,
        cancel: &CancellationToken,
        sink: &mut dyn ScanSink,
    ) -> Result<Option<ScanOutcome>> {
        check_cancel(cancel)?;
        let mut last_path: PathBuf = self.root.clone();
        for attempt in 1..=MAX_READ_ATTEMPTS {
            // The first attempt trusts the index without a `stat`: opening the file tells.
            let indexed = if attempt == 1 { self.indexed_log(id)? } else { None };
            let path = match indexed {
                Some(path) => path,
                None => match self.find_log(id, cancel)? {
                    Some(path) => path,
                    None => return Ok(None),
                },
            };
            last_path.clone_from(&path);
            let Some((file, before)) = open_for_reading(&path)? else {
                self.index.lock().remove(id);
                continue;
            };
            let source = FileSource { file: &file, len: before.len() };
            let known = self.known_header(&path, &before);
            let result = {
                let mut bound = BoundSink { store: self, path: &path, id, inner: &mut *sink };
                scan_log_from(&source, self.compression, &path, cancel, known.as_ref(), from_seq, &mut bound)
            };
            self.hooks.after_read(&path);
            let after = match fs::metadata(&path) {
                Ok(after) => Some(after),
                Err(error) if error.kind() == io::ErrorKind::NotFound => None,
                Err(error) => return Err(PersistenceError::io(&path, error)),
            };
            let revision = revision_of(&before);
            let stable = after.as_ref().is_some_and(|after| revision_of(after) == revision);
            let outcome = |scan: LogScan| ScanOutcome {
                header: scan.header,
                revision: revision.clone(),
                n_events: scan.n_events,
                torn: scan.torn,
                n_bytes: scan.n_bytes,
            };
            if stable || matches!(result, Err(PersistenceError::Cancelled)) {
                return result.map(|scan| Some(outcome(scan)));
            }
            // The file changed under the read. Start over if the sink can forget what it got.
            if attempt < MAX_READ_ATTEMPTS && sink.restart() {
                continue;
            }
            // An append on the same file leaves the bytes read a consistent (older) state, and
            // whatever the read found in them, event or defect, still stands.
            let appended =
                after.as_ref().is_some_and(|after| same_identity(after, &before) && after.len() >= before.len());
            if appended {
                return result.map(|scan| Some(outcome(scan)));
            }
            break;
        }
        Err(PersistenceError::io(
            last_path,
            io::Error::other(format!("the log of session \"{id}\" kept changing while it was being read")),
        ))
    }

    /// [`Backend::header`](crate::Backend::header) of the JSONL store: the log's first line or
    /// frame only, through the listing's header cache, bound to `id` like a scan.
    pub(super) fn log_header(&self, id: &SessionId, cancel: &CancellationToken) -> Result<Option<StoredHeader>> {
        check_cancel(cancel)?;
        let Some(path) = self.find_log(id, cancel)? else { return Ok(None) };
        match self.listed_header(&path, cancel, self.listings.load(std::sync::atomic::Ordering::Relaxed))? {
            Listed::Absent => Ok(None),
            Listed::Skipped => Err(crate::error::PersistenceError::corrupt(
                crate::error::CorruptKind::Header,
                crate::error::Location::file(&path),
                "corrupt session log: the first line is missing or is not a session header",
            )),
            Listed::Header(stored) => {
                self.check_identity(&path, &stored.header, Some(id))?;
                Ok(Some(stored))
            }
        }
    }

    /// [`Backend::revision`](crate::Backend::revision) of the JSONL store.
    pub(super) fn log_revision(&self, id: &SessionId) -> Result<Option<crate::Revision>> {
        let Some(path) = self.find_log(id, &CancellationToken::new())? else { return Ok(None) };
        match super::files::log_metadata(&path) {
            Ok(Some(metadata)) => Ok(Some(revision_of(&metadata))),
            Ok(None) => {
                self.index.lock().remove(id);
                Ok(None)
            }
            Err(error) => Err(error),
        }
    }
}
