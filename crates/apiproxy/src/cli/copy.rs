//! `apiproxy copy`: every session of one store into another, of any backend
//! ([`session_persistence::copy`] does the copying; this opens the stores and sums up).

use std::sync::Arc;

use apiproxy::ProxyError;
use session_persistence::{CopyOptions, CopyOutcome, PersistenceError, SessionCopy, copy_store};
use session_storage_io::keyed::run_blocking;
use tokio_util::sync::CancellationToken;

use crate::cli::ops::{self, StoreLocation};

/// Copies `from` into `to` (created on first use, a PostgreSQL schema set up), `jobs` sessions
/// at a time, calling `progress` as each session ends. The source is opened for reading only, so
/// a server may keep writing it (what it writes after a session's copy is left for the next run).
pub(crate) async fn copy_stores(
    from: &StoreLocation,
    to: &StoreLocation,
    jobs: usize,
    cancel: &CancellationToken,
    progress: impl Fn(usize, usize, &SessionCopy) + Send + Sync + 'static,
) -> Result<Vec<SessionCopy>, ProxyError> {
    if same_store(from, to) {
        return Err(ProxyError::Session { message: format!("cannot copy {} into itself", from.path().display()) });
    }
    let source = ops::open_location_read_only(from)?;
    let target = ops::open_location_writable(to)?;
    let (reader, writer) = (Arc::clone(source.backend()), Arc::clone(target.backend()));
    let options = CopyOptions { jobs, ..CopyOptions::default() };
    let cancel = cancel.clone();
    let copied = run_blocking(move || copy_store(&*reader, &*writer, &options, &cancel, &progress))
        .await
        .map_err(|error| ProxyError::Session { message: format!("the copy stopped: {error}") })?;
    target.close().await?;
    match copied {
        Ok(copies) => Ok(copies),
        Err(PersistenceError::Cancelled) => Err(ProxyError::Session {
            message: "the copy was interrupted; run the same command again to resume it".to_owned(),
        }),
        Err(error) => Err(error.into()),
    }
}

/// Whether two locations name one store (a directory or file by its canonical path).
fn same_store(a: &StoreLocation, b: &StoreLocation) -> bool {
    let canonical = |location: &StoreLocation| match location {
        StoreLocation::Postgres(_) => location.path().to_owned(),
        _ => std::fs::canonicalize(location.path()).unwrap_or_else(|_| location.path().to_owned()),
    };
    std::mem::discriminant(a) == std::mem::discriminant(b) && canonical(a) == canonical(b)
}

/// The report of a copy: a line per session that needs attention (refused, skipped, failed, or
/// with a torn tail left behind), then one line of totals; and whether every session is in the
/// target.
pub(crate) fn summary(copies: &[SessionCopy]) -> (Vec<String>, bool) {
    let mut lines: Vec<String> =
        copies.iter().filter(|copy| !copy.outcome.is_done() || copy.torn).map(|copy| copy.to_string()).collect();
    let (mut copied, mut resumed, mut identical, mut empty, mut refused, mut damaged, mut failed) =
        (0, 0, 0, 0, 0, 0, 0);
    let mut events = 0;
    for copy in copies {
        match &copy.outcome {
            CopyOutcome::Copied { events: n } => {
                copied += 1;
                events += n;
            }
            CopyOutcome::Resumed { from, events: n } => {
                resumed += 1;
                events += n - from;
            }
            CopyOutcome::Identical { .. } => identical += 1,
            CopyOutcome::NothingToStore => empty += 1,
            CopyOutcome::Differs { .. } => refused += 1,
            CopyOutcome::Damaged { .. } => damaged += 1,
            CopyOutcome::Failed { .. } => failed += 1,
        }
    }
    let mut total = format!(
        "{} sessions: {copied} copied, {resumed} resumed, {identical} already copied ({events} events written)",
        copies.len()
    );
    for (n, what) in [
        (empty, "without events (not stored by the target)"),
        (refused, "refused (the target's differs)"),
        (damaged, "skipped (damaged)"),
        (failed, "failed"),
    ] {
        if n > 0 {
            total.push_str(&format!(", {n} {what}"));
        }
    }
    lines.push(total);
    (lines, refused + damaged + failed == 0)
}
