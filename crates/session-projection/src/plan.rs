//! The registry's immutable view of its units, rebuilt on every registration change: the units in
//! registration order and a dispatch table from event type to the units that read it.

use std::{collections::HashMap, sync::Arc};

use crate::erased::ErasedUnit;

/// One registered unit as the folds see it.
pub(crate) struct PlanUnit {
    /// Unique per registration entry: a key removed and registered again gets a new id, so no
    /// cell of the old registration is ever reused.
    pub(crate) id: u64,
    pub(crate) key: Arc<str>,
    pub(crate) state_version: u64,
    /// The event types the unit reads; `None` for every event.
    pub(crate) reads: Option<&'static [&'static str]>,
    pub(crate) unit: Arc<dyn ErasedUnit>,
}

impl PlanUnit {
    pub(crate) fn is_client_visible(&self) -> bool {
        self.unit.is_client_visible()
    }
}

/// The units in registration order, with the event-type dispatch table.
pub(crate) struct Plan {
    /// Bumped on every change; cells laid out for another generation are re-laid out.
    pub(crate) generation: u64,
    pub(crate) units: Vec<PlanUnit>,
    /// Event type → indices (ascending) of the units that read it: those that list it and those
    /// that read every event. Looked up once per event folded, so hashed with foldhash.
    by_type: HashMap<Box<str>, Box<[usize]>, foldhash::fast::FixedState>,
    /// Indices of the units that read every event: the dispatch of an unlisted type.
    every_event: Box<[usize]>,
}

impl Plan {
    pub(crate) fn empty() -> Plan {
        Plan { generation: 0, units: Vec::new(), by_type: HashMap::default(), every_event: Box::new([]) }
    }

    pub(crate) fn new(generation: u64, units: Vec<PlanUnit>) -> Plan {
        let every_event: Box<[usize]> =
            units.iter().enumerate().filter(|(_, unit)| unit.reads.is_none()).map(|(idx, _)| idx).collect();
        let mut by_type: HashMap<Box<str>, Vec<usize>> = HashMap::new();
        for (idx, unit) in units.iter().enumerate() {
            for kind in unit.reads.iter().flat_map(|kinds| kinds.iter()) {
                by_type.entry(Box::from(*kind)).or_default().push(idx);
            }
        }
        let by_type = by_type
            .into_iter()
            .map(|(kind, mut readers)| {
                readers.extend_from_slice(&every_event);
                readers.sort_unstable();
                readers.dedup();
                (kind, readers.into_boxed_slice())
            })
            .collect();
        Plan { generation, units, by_type, every_event }
    }

    /// The indices of the units that read events of type `kind`, in registration order.
    pub(crate) fn readers(&self, kind: &str) -> &[usize] {
        match self.by_type.get(kind) {
            Some(readers) => readers,
            None => &self.every_event,
        }
    }

    pub(crate) fn position(&self, key: &str) -> Option<usize> {
        self.units.iter().position(|unit| &*unit.key == key)
    }
}
