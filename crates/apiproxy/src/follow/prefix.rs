//! A followed session's projection fold seeded from its stored log as the log is read.

use std::sync::Arc;

use session_core::SessionEvent;
use session_persistence::{PersistenceError, ScanSink};
use session_projection::{ProjectionRegistry, RestoreFold};

/// Folds a followed session's stored events before `until` as they are read, holding none of
/// them (a long log costs its read, not its size in memory): the values before a tail are its
/// baseline's.
pub(super) struct PrefixFold {
    pub(super) registry: Arc<ProjectionRegistry>,
    pub(super) fold: RestoreFold,
    pub(super) until: u64,
    /// An event did not fold (the log is not contiguous): the session goes without projections.
    pub(super) failed: bool,
}

impl ScanSink for PrefixFold {
    fn event(&mut self, event: Arc<SessionEvent>) -> Result<(), PersistenceError> {
        if event.seq < self.until && !self.failed {
            self.failed = self.fold.apply(&event).is_err();
        }
        Ok(())
    }

    fn restart(&mut self) -> bool {
        self.fold = self.registry.begin_full_restore();
        self.failed = false;
        true
    }
}
