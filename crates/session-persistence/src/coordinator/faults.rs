//! Fault reporting: each log a listing cannot list is logged as a warning once, not on every
//! listing, and never silently left out.

use std::collections::HashSet;

use parking_lot::Mutex;

use crate::backend::LogFault;

/// How many distinct listing faults are remembered as logged; past it, the memory starts over
/// (and faults still present are logged again).
const MAX_REPORTED_FAULTS: usize = 4096;

/// The faults listings have already logged.
#[derive(Default)]
pub(super) struct FaultLog {
    reported: Mutex<HashSet<String>>,
}

impl FaultLog {
    /// Logs each listing fault as a warning the first time a listing finds it: the log is left
    /// out of the listing, but never silently.
    pub(super) fn report(&self, faults: &[LogFault]) {
        if faults.is_empty() {
            return;
        }
        let mut reported = self.reported.lock();
        for fault in faults {
            let path = fault.path.as_ref().map(|path| path.display().to_string());
            let key = format!("{}\0{}\0{}", fault.id, path.as_deref().unwrap_or(""), fault.error);
            if reported.contains(&key) {
                continue;
            }
            if reported.len() >= MAX_REPORTED_FAULTS {
                reported.clear();
            }
            tracing::warn!(
                session = %fault.id,
                path = path.as_deref().unwrap_or("-"),
                error = %fault.error,
                "a stored log cannot be listed; it is left out of listings (run `apiproxy verify` for a report)"
            );
            reported.insert(key);
        }
    }
}
