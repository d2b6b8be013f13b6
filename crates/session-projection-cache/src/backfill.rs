//! The backfill: a checkpoint record for every stored session that lacks a current one, so a store
//! that arrives without checkpoints (written by the reference, copied from elsewhere, or whose
//! cache directory was deleted) stops paying a cold read per child on every listing.
//!
//! It only ever runs [`ProjectionCache::cold_snapshot`] on sessions without a usable record: the
//! values come from the log, through the registry, exactly as a cold read computes them, and a
//! record that is already current is never touched. It is resumable by construction: a second run
//! skips what the first wrote.

use std::{collections::BTreeMap, sync::Arc, time::Duration};

use session_core::{SessionHeader, SessionId};
use tokio_util::sync::CancellationToken;

use crate::{
    cache::ProjectionCache,
    error::{CacheError, Result},
    record::CheckpointRecord,
};

/// How a backfill runs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BackfillOptions {
    /// Waits this long after each session it had to read, and after each check of up to 256
    /// records, so a backfill running beside a serving gateway leaves it the machine (0 for an
    /// offline `cache warm`).
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
        for batch in listing.headers.chunks(CHECK_BATCH) {
            if cancel.is_cancelled() {
                return Err(CacheError::Cancelled);
            }
            let headers: Vec<Arc<SessionHeader>> = batch.iter().map(|stored| Arc::clone(&stored.header)).collect();
            let current = self.current_records(headers).await;
            for (stored, current) in batch.iter().zip(current) {
                if cancel.is_cancelled() {
                    return Err(CacheError::Cancelled);
                }
                if current {
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
                    pause(options, cancel).await?;
                }
                report.done += 1;
                progress(&report);
            }
            // A batch of checks is a read of up to CHECK_BATCH records: a serving gateway's
            // backfill pauses after it too, so a warm store is checked without a burst.
            pause(options, cancel).await?;
        }
        Ok(report)
    }

    /// Whether the stored record of each of `headers`' lifetimes has a row (or a recorded failure)
    /// for every registered unit at its current state version: one `get_many` of the store (one
    /// query on a database). A record that cannot be read counts as missing.
    async fn current_records(&self, headers: Vec<Arc<SessionHeader>>) -> Vec<bool> {
        let ids: Vec<SessionId> = headers.iter().map(|header| header.id.clone()).collect();
        let n_headers = headers.len();
        let Some(records) = self.inner.records_of(ids).await else { return vec![false; n_headers] };
        let versions = self.unit_versions();
        headers
            .iter()
            .zip(records.into_iter().chain(std::iter::repeat_with(|| Ok(None))))
            .map(|(header, record)| match record {
                Ok(Some(record)) => record.identity.matches(header) && covers_every_unit(&record, &versions),
                Ok(None) => false,
                Err(error) => {
                    tracing::warn!(session = %header.id, %error, "cache backfill: cannot read the record (warming it again)");
                    false
                }
            })
            .collect()
    }

    fn unit_versions(&self) -> BTreeMap<String, u64> {
        self.inner.registry.units().into_iter().map(|unit| (unit.key.to_string(), unit.state_version)).collect()
    }
}

/// How many records one check of the backfill reads at once.
const CHECK_BATCH: usize = 256;

/// The caller's pause, so a backfill leaves the store to live traffic; cancellation still ends it
/// at once. None for an offline `cache warm` (a zero pause).
async fn pause(options: BackfillOptions, cancel: &CancellationToken) -> Result<()> {
    if options.pause.is_zero() {
        return Ok(());
    }
    tokio::select! {
        () = cancel.cancelled() => Err(CacheError::Cancelled),
        () = tokio::time::sleep(options.pause) => Ok(()),
    }
}

fn covers_every_unit(record: &CheckpointRecord, versions: &BTreeMap<String, u64>) -> bool {
    versions.iter().all(|(key, version)| {
        record.rows.get(key.as_str()).is_some_and(|row| row.ver == *version)
            || record.failures.get(key).is_some_and(|failure| failure.ver == *version)
    })
}
