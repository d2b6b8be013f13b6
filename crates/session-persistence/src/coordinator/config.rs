//! `CoordinatorConfig`: the coordinator's tuning, and the range check `Coordinator::new` runs.

use std::time::Duration;

use session_core::KnownTypes;

use crate::{
    error::{PersistenceError, Result},
    validate::ReadThreads,
};

/// Tuning of a [`Coordinator`](crate::Coordinator). Validated by
/// [`Coordinator::new`](crate::Coordinator::new).
#[derive(Debug, Clone)]
pub struct CoordinatorConfig {
    /// How long the first buffered event of a live session may wait before its batch is written.
    pub write_batch_max_delay: Duration,
    /// How many inspected logs stay cached (at least 1).
    pub inspect_cache_entries: usize,
    /// How many bytes of payload the inspection cache may hold in all.
    pub inspect_cache_bytes: u64,
    /// The event types a read accepts without `ignorable: true`.
    pub known_types: KnownTypes,
    /// When a cold read may use helper threads.
    pub read_threads: ReadThreads,
}

impl Default for CoordinatorConfig {
    fn default() -> CoordinatorConfig {
        CoordinatorConfig {
            write_batch_max_delay: Duration::from_millis(200),
            inspect_cache_entries: 5,
            inspect_cache_bytes: 64 << 20,
            known_types: KnownTypes::default(),
            read_threads: ReadThreads::default(),
        }
    }
}

impl CoordinatorConfig {
    pub(super) fn validate(&self) -> Result<()> {
        if self.inspect_cache_entries == 0 {
            return Err(PersistenceError::invalid_input("preparedSessionCacheSize must be a positive safe integer"));
        }
        let delay_ms = self.write_batch_max_delay.as_millis();
        if !(1..=2_147_483_647).contains(&delay_ms) {
            return Err(PersistenceError::invalid_input(
                "writeBatchMaxDelayMs must be an integer between 1 and 2147483647",
            ));
        }
        Ok(())
    }
}
