//! The inspection cache: recently inspected cold logs, bounded by entries and by payload bytes,
//! each valid only at the stored revision it was read at.

use std::collections::VecDeque;

use session_core::SessionId;

use crate::{backend::Revision, persistence::Inspection};

/// Recently inspected logs, bounded by entry count and by payload bytes. Most recent at the back.
pub(super) struct InspectCache {
    entries: VecDeque<(SessionId, Inspection, u64)>,
    max_entries: usize,
    max_bytes: u64,
    bytes: u64,
}

impl InspectCache {
    pub(super) fn new(max_entries: usize, max_bytes: u64) -> InspectCache {
        InspectCache { entries: VecDeque::new(), max_entries, max_bytes, bytes: 0 }
    }

    /// The number of cached inspections and the payload bytes they hold.
    pub(super) fn usage(&self) -> (usize, u64) {
        (self.entries.len(), self.bytes)
    }

    pub(super) fn contains(&self, id: &SessionId) -> bool {
        self.entries.iter().any(|(entry_id, ..)| entry_id == id)
    }

    pub(super) fn peek(&self, id: &SessionId) -> Option<Inspection> {
        self.entries.iter().find(|(entry_id, ..)| entry_id == id).map(|(_, inspection, _)| inspection.clone())
    }

    /// Returns the entry if it is still at `revision`, making it most recent; drops it otherwise.
    pub(super) fn get(&mut self, id: &SessionId, revision: &Revision) -> Option<Inspection> {
        let idx = self.entries.iter().position(|(entry_id, ..)| entry_id == id)?;
        let entry = self.entries.remove(idx)?;
        if entry.1.revision.as_ref() != Some(revision) {
            self.bytes -= entry.2;
            return None;
        }
        let hit = entry.1.clone();
        self.entries.push_back(entry);
        Some(hit)
    }

    pub(super) fn insert(&mut self, id: SessionId, inspection: Inspection) {
        self.remove(&id);
        let bytes: u64 = inspection.events.iter().map(|event| event.data.as_str().len() as u64 + 64).sum();
        if bytes > self.max_bytes {
            return;
        }
        self.bytes += bytes;
        self.entries.push_back((id, inspection, bytes));
        while self.entries.len() > self.max_entries || self.bytes > self.max_bytes {
            let Some((_, _, evicted)) = self.entries.pop_front() else { break };
            self.bytes -= evicted;
        }
    }

    pub(super) fn remove(&mut self, id: &SessionId) {
        if let Some(idx) = self.entries.iter().position(|(entry_id, ..)| entry_id == id)
            && let Some((_, _, bytes)) = self.entries.remove(idx)
        {
            self.bytes -= bytes;
        }
    }
}
