//! Following a database file that other connections and processes write (issue 24): the
//! `sqlite-watch` thread behind [`SqliteStore::watch`](crate::SqliteStore), which polls the file's
//! change counter (`PRAGMA data_version`) on a read connection of its own and turns each change
//! into wake-ups ([`StoreChange`]), and the record of this handle's own commits and releases that
//! keeps it from waking its own follower for them.
//!
//! One poll, every [`WatchOptions::poll_interval`]: `PRAGMA data_version` (a read of the
//! connection's view of the WAL index or file header, no table read). Only when it moved: one pass
//! over the `sessions` rows' change marks (`incarnation`, `revision`; every append and repair
//! transaction adds 1 to `revision`), compared with the previous pass: a new id (or a new
//! incarnation) is [`ChangeKind::Created`], a moved revision [`ChangeKind::Appended`], each with
//! the session's next seq read from its last row. Every poll, whether the counter moved or not,
//! probes the writer leases of the sessions seen held (a lease is a lock file, no database row):
//! one let go is [`ChangeKind::Released`]. A [`StoreChange::Sweep`] goes out once the connection
//! is open and its baseline read, and again after every recovery from a failed poll.

use std::{
    collections::{BTreeSet, HashMap, HashSet},
    mem,
    path::PathBuf,
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicUsize, Ordering},
        mpsc::{self, RecvTimeoutError},
    },
    thread,
    time::Duration,
};

use parking_lot::Mutex;
use rusqlite::Connection;
use session_core::SessionId;
use session_persistence::{ChangeKind, PersistenceError, Result, SharedChangeSink, StoreChange, Watch, WatchOptions};

use crate::{
    config::{Access, JournalMode},
    error::sqlite_error,
    lease::{lease_held, lease_key_of, lease_keys},
    position::{ChangeMark, change_marks, next_seqs},
    schema::{OpenSpec, Role, open_connection},
};

/// More sessions than this changed in one poll are reported as one [`StoreChange::Sweep`]: the
/// follower reads every position anyway, and the poll reads no tail for them.
pub(crate) const MAX_SIGNALLED: usize = 1_024;

/// What a store handle's own writes leave for its watches to skip: a change this handle made is
/// not another writer's, and its follower already has it.
#[derive(Debug, Default)]
pub(crate) struct OwnWrites {
    /// How many watches of this handle run: commits are recorded only while one does.
    watching: AtomicUsize,
    /// Per session, the revisions this handle's commits left on its row, until a poll sees them.
    commits: Mutex<HashMap<SessionId, OwnRevisions>>,
    /// The sessions whose lease this handle let go of since the last poll.
    released: Mutex<HashSet<SessionId>>,
    /// The sessions whose lease this handle holds (kept whether or not a watch runs): held
    /// without a probe.
    leased: Mutex<HashSet<SessionId>>,
}

/// The revisions of one incarnation of a session's row that this handle's commits made.
#[derive(Debug)]
struct OwnRevisions {
    incarnation: String,
    revisions: BTreeSet<i64>,
}

impl OwnWrites {
    /// Commits a transaction that left `mark` on `id`'s row: `commit` runs under the record's
    /// lock and the revision is recorded before the lock is let go, so a poll that reads the
    /// committed row (and then takes the lock) finds it. A failed commit records nothing.
    pub(crate) fn commit(&self, id: &SessionId, mark: ChangeMark, commit: impl FnOnce() -> Result<()>) -> Result<()> {
        if self.watching.load(Ordering::Acquire) == 0 {
            return commit();
        }
        let mut commits = self.commits.lock();
        commit()?;
        let own = commits
            .entry(id.clone())
            .or_insert_with(|| OwnRevisions { incarnation: mark.incarnation.clone(), revisions: BTreeSet::new() });
        if own.incarnation != mark.incarnation {
            *own = OwnRevisions { incarnation: mark.incarnation, revisions: BTreeSet::new() };
        }
        own.revisions.insert(mark.revision);
        Ok(())
    }

    /// This handle took `id`'s lease.
    pub(crate) fn leased(&self, id: &SessionId) {
        self.leased.lock().insert(id.clone());
    }

    /// This handle let go of `id`'s lease.
    pub(crate) fn released(&self, id: &SessionId) {
        self.leased.lock().remove(id);
        if self.watching.load(Ordering::Acquire) > 0 {
            self.released.lock().insert(id.clone());
        }
    }

    /// Of `ids`, those this handle does not hold itself: only they need a probe.
    fn not_leased_here(&self, ids: impl Iterator<Item = SessionId>) -> Vec<SessionId> {
        let leased = self.leased.lock();
        ids.filter(|id| !leased.contains(id)).collect()
    }

    /// Leaves out of `changed` what this handle's own commits account for: every revision
    /// between the one the previous pass saw and the row's now is one this handle made. The
    /// revisions up to the row's are then forgotten; later ones (commits after the pass read the
    /// row) are kept for the next pass.
    fn skip_own(
        &self,
        previous: &HashMap<SessionId, ChangeMark>,
        current: &HashMap<SessionId, ChangeMark>,
        changed: &mut Vec<(SessionId, ChangeKind)>,
    ) {
        let mut commits = self.commits.lock();
        if commits.is_empty() {
            return;
        }
        changed.retain(|(id, _)| {
            let (Some(row), Some(own)) = (current.get(id), commits.get_mut(id)) else { return true };
            if own.incarnation != row.incarnation {
                return true;
            }
            // A new incarnation's row starts at 0, and its materializing commit makes it 1.
            let from = match previous.get(id) {
                Some(seen) if seen.incarnation == row.incarnation => seen.revision.saturating_add(1),
                _ => 1,
            };
            let n_changes = row.revision.saturating_sub(from).saturating_add(1);
            let all_own = usize::try_from(n_changes).is_ok_and(|n| n <= own.revisions.len())
                && (from..=row.revision).all(|revision| own.revisions.contains(&revision));
            own.revisions.retain(|revision| *revision > row.revision);
            if own.revisions.is_empty() {
                commits.remove(id);
            }
            !all_own
        });
    }

    /// Forgets the revisions that a baseline read already includes.
    fn forget_seen(&self, baseline: &HashMap<SessionId, ChangeMark>) {
        self.commits.lock().retain(|id, own| match baseline.get(id) {
            Some(row) if row.incarnation == own.incarnation => {
                own.revisions.retain(|revision| *revision > row.revision);
                !own.revisions.is_empty()
            }
            _ => true,
        });
    }
}

/// Counts a watch in [`OwnWrites::watching`] while it lives.
struct Watching(Arc<OwnWrites>);

impl Watching {
    fn new(own: Arc<OwnWrites>) -> Watching {
        own.watching.fetch_add(1, Ordering::AcqRel);
        Watching(own)
    }
}

impl Drop for Watching {
    fn drop(&mut self) {
        if self.0.watching.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.commits.lock().clear();
            self.0.released.lock().clear();
        }
    }
}

/// What the watch thread needs of its store: how to open a connection of its own.
#[derive(Debug, Clone)]
pub(crate) struct WatchSpec {
    /// The absolute database file.
    pub(crate) file: PathBuf,
    /// The path messages name.
    pub(crate) shown: PathBuf,
    pub(crate) access: Access,
    pub(crate) journal_mode: JournalMode,
    pub(crate) busy_timeout: Duration,
}

/// Starts the `sqlite-watch` thread. Dropping the returned [`Watch`] stops it and waits for it
/// (unless the drop runs on that thread, inside the sink): it wakes at once from any wait, and no
/// sink call starts after the drop returns.
pub(crate) fn start(
    spec: WatchSpec,
    options: &WatchOptions,
    sink: SharedChangeSink,
    own: Arc<OwnWrites>,
) -> Result<Watch> {
    let stopped = Arc::new(AtomicBool::new(false));
    let (stop, stop_received) = mpsc::channel::<()>();
    let shown = spec.shown.clone();
    let mut poller = Poller::new(spec, options.clone(), sink, Arc::clone(&stopped), Watching::new(own));
    let handle = thread::Builder::new()
        .name("sqlite-watch".to_owned())
        .spawn(move || {
            loop {
                let wait = poller.step();
                match stop_received.recv_timeout(wait) {
                    Err(RecvTimeoutError::Timeout) => {}
                    Ok(()) | Err(RecvTimeoutError::Disconnected) => return,
                }
            }
        })
        .map_err(|error| PersistenceError::io(&shown, error))?;
    let thread_id = handle.thread().id();
    Ok(Watch::new(move || {
        stopped.store(true, Ordering::Release);
        drop(stop);
        if thread::current().id() != thread_id && handle.join().is_err() {
            tracing::error!(database = %shown.display(), "the SQLite change poller panicked");
        }
    }))
}

/// The poller's state between polls. Driven by [`step`](Self::step), one poll per call, so a
/// test can run it without the thread.
pub(crate) struct Poller {
    spec: WatchSpec,
    options: WatchOptions,
    sink: SharedChangeSink,
    stopped: Arc<AtomicBool>,
    own: Watching,
    /// The poll connection; `None` until it opens, and after a failed poll.
    connection: Option<Connection>,
    /// The `data_version` the last completed pass saw.
    data_version: i64,
    /// Each session's change mark as of the last completed pass.
    marks: HashMap<SessionId, ChangeMark>,
    /// The sessions whose lease a probe found held: probed every poll until let go.
    held: HashSet<SessionId>,
    /// The wait before the next attempt after a failure; `None` while polls succeed.
    backoff: Option<Duration>,
}

impl Poller {
    fn new(
        spec: WatchSpec,
        options: WatchOptions,
        sink: SharedChangeSink,
        stopped: Arc<AtomicBool>,
        own: Watching,
    ) -> Poller {
        Poller {
            spec,
            options,
            sink,
            stopped,
            own,
            connection: None,
            data_version: 0,
            marks: HashMap::new(),
            held: HashSet::new(),
            backoff: None,
        }
    }

    /// A poller that no thread runs, for tests that drive [`step`](Self::step) themselves.
    /// `own` is the record of the store handle it watches for.
    #[cfg(test)]
    pub(crate) fn detached(
        spec: WatchSpec,
        options: WatchOptions,
        sink: SharedChangeSink,
        own: Arc<OwnWrites>,
    ) -> Poller {
        Poller::new(spec, options, sink, Arc::new(AtomicBool::new(false)), Watching::new(own))
    }

    /// Whether the poll connection is open.
    #[cfg(test)]
    pub(crate) fn is_connected(&self) -> bool {
        self.connection.is_some()
    }

    fn interval(&self) -> Duration {
        self.options.poll_interval.max(Duration::from_millis(1))
    }

    /// One poll (or, while there is no connection, one attempt to open it), and how long to wait
    /// before the next: the poll interval, or after a failure the backoff, which starts at
    /// [`WatchOptions::reconnect_min`] and doubles up to [`WatchOptions::reconnect_max`], each
    /// wait jittered into its second half ([`session_persistence::jittered`]).
    pub(crate) fn step(&mut self) -> Duration {
        let connected = self.connection.is_some();
        match self.poll() {
            Ok(()) => {
                self.backoff = None;
                self.interval()
            }
            // Another connection holds a lock past this connection's (short) busy timeout, as a
            // writer in a rollback-journal mode does while it commits: nothing is lost by looking
            // again at the next interval.
            Err(PersistenceError::Locked { .. }) if connected => {
                tracing::debug!(database = %self.spec.shown.display(), "the SQLite change poll met a lock; polling again");
                self.interval()
            }
            Err(error) => {
                let backoff = match self.backoff {
                    None => self.options.reconnect_min,
                    Some(delay) => (delay * 2).min(self.options.reconnect_max),
                };
                let wait = session_persistence::jittered(backoff);
                tracing::warn!(
                    database = %self.spec.shown.display(),
                    %error,
                    retry_in_ms = wait.as_millis() as u64,
                    "the SQLite change poll failed; reopening its connection, then sweeping"
                );
                self.connection = None;
                self.backoff = Some(backoff);
                wait
            }
        }
    }

    fn poll(&mut self) -> Result<()> {
        if self.connection.is_none() {
            return self.connect();
        }
        let data_version = self.data_version()?;
        if data_version != self.data_version {
            self.diff()?;
            self.data_version = data_version;
        }
        self.probe_held();
        Ok(())
    }

    /// Opens the poll connection, reads the baseline (the counter, every change mark, the leases
    /// held) and sweeps: whatever happened before is the follower's sweep to find.
    fn connect(&mut self) -> Result<()> {
        let spec = OpenSpec {
            file: Some(&self.spec.file),
            shown: &self.spec.shown,
            access: self.spec.access,
            role: Role::Reader,
            journal_mode: self.spec.journal_mode,
            // A poll never waits for a lock longer than an interval, so a drop is never kept
            // waiting longer either.
            busy_timeout: self.spec.busy_timeout.min(self.interval()),
        };
        let (connection, _) = open_connection(&spec)?;
        self.connection = Some(connection);
        self.data_version = self.data_version()?;
        let shown = &self.spec.shown;
        let transaction = open(&mut self.connection).transaction().map_err(|error| sqlite_error(shown, error))?;
        let marks = change_marks(&transaction, shown)?;
        transaction.commit().map_err(|error| sqlite_error(shown, error))?;
        self.own.0.forget_seen(&marks);
        self.marks = marks;
        self.learn_holds();
        self.emit(StoreChange::Sweep);
        Ok(())
    }

    fn data_version(&mut self) -> Result<i64> {
        open(&mut self.connection)
            .query_row("PRAGMA data_version", [], |row| row.get(0))
            .map_err(|error| sqlite_error(&self.spec.shown, error))
    }

    /// The counter moved: compare the change marks, and report each session another writer
    /// changed with its next seq (or one sweep for more than [`MAX_SIGNALLED`]).
    fn diff(&mut self) -> Result<()> {
        let shown = &self.spec.shown;
        let sql_error = |error| sqlite_error(shown, error);
        let own = &self.own.0;
        let previous = &self.marks;
        let transaction = open(&mut self.connection).transaction().map_err(sql_error)?;
        let read = change_marks(&transaction, shown).and_then(|current| {
            let mut changed: Vec<(SessionId, ChangeKind)> = current
                .iter()
                .filter_map(|(id, mark)| match previous.get(id) {
                    None => Some((id.clone(), ChangeKind::Created)),
                    Some(old) if old.incarnation != mark.incarnation => Some((id.clone(), ChangeKind::Created)),
                    Some(old) if old.revision != mark.revision => Some((id.clone(), ChangeKind::Appended)),
                    Some(_) => None,
                })
                .collect();
            own.skip_own(previous, &current, &mut changed);
            if changed.len() > MAX_SIGNALLED {
                return Ok((current, None));
            }
            changed.sort_by(|a, b| a.0.cmp(&b.0));
            let ids: Vec<SessionId> = changed.iter().map(|(id, _)| id.clone()).collect();
            let positions: HashMap<SessionId, u64> = next_seqs(&transaction, shown, &ids)?.into_iter().collect();
            Ok((current, Some((changed, positions))))
        });
        // A failed read leaves the previous marks (and the counter) as they were: the next poll
        // compares against them again.
        let (current, changes) = read?;
        transaction.commit().map_err(sql_error)?;
        self.marks = current;
        let Some((changed, positions)) = changes else {
            self.learn_holds();
            self.emit(StoreChange::Sweep);
            return Ok(());
        };
        let to_probe: HashSet<SessionId> =
            self.own.0.not_leased_here(changed.iter().map(|(id, _)| id.clone())).into_iter().collect();
        for (id, kind) in changed {
            // A lease this handle holds is held without asking the file.
            if !to_probe.contains(&id) || self.probe(&id) == Some(true) {
                self.held.insert(id.clone());
            }
            let next_seq = positions.get(&id).copied();
            if !self.emit(StoreChange::Session { id, kind, next_seq }) {
                break;
            }
        }
        Ok(())
    }

    /// Whether `id`'s lease is held; `None` (with a warning) when the probe fails.
    fn probe(&self, id: &SessionId) -> Option<bool> {
        match lease_held(&self.spec.file, id) {
            Ok(held) => Some(held),
            Err(error) => {
                tracing::warn!(database = %self.spec.shown.display(), session = %id, %error, "cannot probe a session's writer lease");
                None
            }
        }
    }

    /// Finds the leases held now among the lease files present (one directory read; a probe per
    /// file of a known session).
    fn learn_holds(&mut self) {
        self.held.clear();
        let keys = match lease_keys(&self.spec.file) {
            Ok(keys) => keys,
            Err(error) => {
                tracing::warn!(database = %self.spec.shown.display(), %error, "cannot list the writer leases");
                return;
            }
        };
        if keys.is_empty() {
            return;
        }
        let present: Vec<SessionId> =
            self.marks.keys().filter(|id| keys.contains(&lease_key_of(id))).cloned().collect();
        let to_probe: HashSet<SessionId> = self.own.0.not_leased_here(present.iter().cloned()).into_iter().collect();
        for id in present {
            if !to_probe.contains(&id) || self.probe(&id) == Some(true) {
                self.held.insert(id);
            }
        }
    }

    /// Probes every lease seen held (but this handle's own, which are held while it holds them);
    /// one let go is `Released`, unless this handle let go of it itself (and nobody else holds it).
    fn probe_held(&mut self) {
        let released_here = mem::take(&mut *self.own.0.released.lock());
        if self.held.is_empty() {
            return;
        }
        // A lease this handle holds is not probed: it is held.
        let mut ids = self.own.0.not_leased_here(self.held.iter().cloned());
        ids.sort();
        for id in ids {
            match self.probe(&id) {
                Some(true) => continue,
                Some(false) => {
                    self.held.remove(&id);
                    if !released_here.contains(&id)
                        && !self.emit(StoreChange::Session { id, kind: ChangeKind::Released, next_seq: None })
                    {
                        return;
                    }
                }
                // Not knowing is not a release: the session is no longer probed.
                None => {
                    self.held.remove(&id);
                }
            }
        }
    }

    /// Hands `change` to the sink unless the watch was dropped; `false` once it was.
    fn emit(&self, change: StoreChange) -> bool {
        if self.stopped.load(Ordering::Acquire) {
            return false;
        }
        session_persistence::deliver(&*self.sink, change);
        true
    }
}

/// The open poll connection. Invariant: polls run only on an open connection (`poll` opens it
/// first; a failed poll drops it, and the next step opens it again before polling).
fn open(connection: &mut Option<Connection>) -> &mut Connection {
    connection.as_mut().expect("the poll connection is open")
}

#[cfg(test)]
mod tests;
