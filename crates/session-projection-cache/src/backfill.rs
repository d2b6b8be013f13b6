//! The backfill: a checkpoint record for every stored session that lacks a current one, so a store
//! that arrives without checkpoints (written by the reference, copied from elsewhere, or whose
//! cache directory was deleted) stops paying a cold read per child on every listing.
//!
//! It only ever runs [`ProjectionCache::cold_snapshot`] on sessions without a usable record: the
//! values come from the log, through the registry, exactly as a cold read computes them, and a
//! record that is already current is never touched. It is resumable by construction: a second run
//! skips what the first wrote.

use std::{collections::BTreeMap, time::Duration};

use session_core::SessionHeader;
use tokio_util::sync::CancellationToken;

use crate::{
    cache::ProjectionCache,
    error::{CacheError, Result},
    record::CheckpointRecord,
};

/// How a backfill runs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BackfillOptions {
    /// Waits this long after each session it had to read, so a backfill running beside a
    /// serving gateway leaves it the machine (0 for an offline `cache warm`).
    pub pause: Duration,
}

/// What a backfill did, so far or in all.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BackfillReport {
    /// Stored sessions that can be listed (the ones it looked at).
    pub sessions: usize,
    /// Sessions it has looked at so far.
    pub done: usize,
    /// Sessions that already had a current record: nothing was read.
    pub current: usize,
    /// Sessions it read and folded; their record was written (or found equal and left alone).
    pub warmed: usize,
    /// Sessions whose read or write failed (each is logged); a later run tries them again.
    pub failed: usize,
}

impl ProjectionCache {
    /// Writes a checkpoint record for every stored session that lacks a current one (see the
    /// module documentation), one session at a time, calling `progress` after each. A session
    /// whose read fails is counted and skipped; only a failing listing or `cancel` stops it.
    pub async fn backfill(
        &self,
        options: BackfillOptions,
        cancel: &CancellationToken,
        mut progress: impl FnMut(&BackfillReport),
    ) -> Result<BackfillReport> {
        let listing = self.inner.persistence.list_snapshots(cancel).await.map_err(CacheError::from)?;
        let mut report = BackfillReport { sessions: listing.headers.len(), ..BackfillReport::default() };
        for stored in &listing.headers {
            if cancel.is_cancelled() {
                return Err(CacheError::Cancelled);
            }
            if self.has_current_record(&stored.header).await {
                report.current += 1;
            } else {
                match self.cold_snapshot(&stored.header.id, cancel).await {
                    Ok(_) => report.warmed += 1,
                    Err(CacheError::Cancelled) => return Err(CacheError::Cancelled),
                    Err(error) => {
                        tracing::warn!(session = %stored.header.id, %error, "cache backfill: cannot warm this session (a later run tries again)");
                        report.failed += 1;
                    }
                }
                if !options.pause.is_zero() {
                    // A true delay: the caller's pause between two warmings, so a backfill leaves
                    // the disk to live traffic; cancellation still ends it at once.
                    tokio::select! {
                        () = cancel.cancelled() => return Err(CacheError::Cancelled),
                        () = tokio::time::sleep(options.pause) => {}
                    }
                }
            }
            report.done += 1;
            progress(&report);
        }
        Ok(report)
    }

    /// Whether the stored record of `header`'s lifetime has a row (or a recorded failure) for
    /// every registered unit at its current state version.
    async fn has_current_record(&self, header: &SessionHeader) -> bool {
        let Some(record) = self.inner.record_of(&header.id).await else { return false };
        record.identity.matches(header) && covers_every_unit(&record, &self.unit_versions())
    }

    fn unit_versions(&self) -> BTreeMap<String, u64> {
        self.inner.registry.units().into_iter().map(|unit| (unit.key.to_string(), unit.state_version)).collect()
    }
}

fn covers_every_unit(record: &CheckpointRecord, versions: &BTreeMap<String, u64>) -> bool {
    versions.iter().all(|(key, version)| {
        record.rows.get(key.as_str()).is_some_and(|row| row.ver == *version)
            || record.failures.get(key).is_some_and(|failure| failure.ver == *version)
    })
}
