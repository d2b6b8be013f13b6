//! The narrow storage trait the coordinator drives (reference 01 §3.3).
//!
//! Backends are synchronous: the coordinator runs every call on the blocking pool, so a backend
//! is plain sequential file code. Each call is for one session id at a time; the coordinator
//! serializes calls per id, so a backend never sees two concurrent mutations of one session.

use std::{collections::BTreeMap, fmt, future::Future, path::PathBuf, pin::Pin, sync::Arc};

use session_core::{SessionEvent, SessionHeader, SessionId};
use tokio_util::sync::CancellationToken;

use crate::{
    error::{PersistenceError, Result},
    watch::{SessionPosition, SharedChangeSink, Watch, WatchOptions},
};

/// The write of [`Backend::append_batch_async`].
pub type AppendFuture = Pin<Box<dyn Future<Output = Result<()>> + Send + 'static>>;

/// An opaque token that identifies exactly one stored state of a log. Compare only for equality.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Revision(Arc<str>);

impl Revision {
    /// A revision from a backend's own token (a file's size and identity, a database's revision
    /// counter). Two revisions are equal exactly when their tokens are, so a backend must give a
    /// changed log a new token.
    pub fn new(token: impl AsRef<str>) -> Revision {
        Revision(Arc::from(token.as_ref()))
    }

    /// The token as the backend wrote it, for messages and for a backend's own comparisons.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Revision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Revision({})", &self.0)
    }
}

/// A header as listed, with the revision of its log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredHeader {
    /// The header as stored, validated.
    pub header: Arc<SessionHeader>,
    /// The revision of the log this header was read from, at the time it was read.
    pub revision: Revision,
    /// The stored log's size in bytes, as stored (compressed for zstd), when the backend knows it
    /// without reading the log. Lets a caller decide whether a read is cheap.
    pub n_bytes: Option<u64>,
}

/// A log that a listing found but could not list: what its location names, where it is, and
/// why it cannot be listed. One fault never hides another log.
#[derive(Debug)]
pub struct LogFault {
    /// The id the log's location names (for JSONL, the decoded session directory name).
    pub id: SessionId,
    /// The log file (or the directory that holds it), for backends with files.
    pub path: Option<PathBuf>,
    /// The log's header, when it was read and describes this very log (as for an id stored
    /// twice); `None` when it could not be read or names another log.
    pub header: Option<Arc<SessionHeader>>,
    /// Why the log cannot be listed: typically `Corrupt`, `FormatUnsupported` or `Io`.
    pub error: PersistenceError,
}

impl PartialEq for LogFault {
    /// Faults compare by what they report: the error by its message.
    fn eq(&self, other: &LogFault) -> bool {
        self.id == other.id
            && self.path == other.path
            && self.header == other.header
            && self.error.to_string() == other.error.to_string()
    }
}

/// What a listing found: every listable header, and every log it found but could not list.
#[derive(Debug, Default, PartialEq)]
pub struct Listing {
    /// Listable headers with their revisions, sorted by id.
    pub headers: Vec<StoredHeader>,
    /// Logs that could not be listed, sorted by id: a damaged or unreadable header, a log that
    /// is not a regular file, an id stored twice, a log in the other encoding. This includes
    /// logs the reference skips silently (an empty or incomplete first line or frame, a first
    /// line that is not a header): they stay out of `headers`, but are not lost from sight.
    pub faults: Vec<LogFault>,
}

impl Listing {
    /// A listing of `headers` with no faults.
    pub fn of(headers: Vec<StoredHeader>) -> Listing {
        Listing { headers, faults: Vec::new() }
    }

    /// Sorts both parts by id, the order every listing reports.
    pub fn sort(&mut self) {
        self.headers.sort_by(|a, b| a.header.id.cmp(&b.header.id));
        self.faults.sort_by(|a, b| a.id.cmp(&b.id).then_with(|| a.path.cmp(&b.path)));
    }
}

impl Listing {
    /// The part of this listing that a listing of `parent`'s children needs (what
    /// [`Backend::list_children`] answers): `parent` itself, every session whose
    /// `parentSession` is `parent`, and every session whose parent is one of those (so a caller
    /// can tell which children have children of their own). Faults are kept when their header
    /// still names such a session; the rest name no parent, so no catalog lists them.
    pub fn family_of(self, parent: &SessionId) -> Listing {
        let children: std::collections::HashSet<SessionId> = self
            .headers
            .iter()
            .map(|stored| &stored.header)
            .chain(self.faults.iter().filter_map(|fault| fault.header.as_ref()))
            .filter(|header| header.parent_session.as_ref() == Some(parent))
            .map(|header| header.id.clone())
            .collect();
        let in_family = |header: &SessionHeader| {
            &header.id == parent
                || header.parent_session.as_ref().is_some_and(|up| up == parent || children.contains(up))
        };
        Listing {
            headers: self.headers.into_iter().filter(|stored| in_family(&stored.header)).collect(),
            faults: self.faults.into_iter().filter(|fault| fault.header.as_deref().is_some_and(&in_family)).collect(),
        }
    }
}

/// A place in the newest-first order of sessions that paged listings use: by `createdAt`
/// descending, then by id ascending. A page starts after its key.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PageKey {
    /// The session's `createdAt` (Unix epoch ms): newer first.
    pub created_at: u64,
    /// The session's id: ties on `createdAt` go in ascending byte order.
    pub id: SessionId,
}

impl PageKey {
    /// The place of the session `header` describes.
    pub fn of(header: &SessionHeader) -> PageKey {
        PageKey { created_at: header.created_at, id: header.id.clone() }
    }
}

impl Ord for PageKey {
    /// Page order: newest first, ties by id.
    fn cmp(&self, other: &PageKey) -> std::cmp::Ordering {
        other.created_at.cmp(&self.created_at).then_with(|| self.id.cmp(&other.id))
    }
}

impl PartialOrd for PageKey {
    fn partial_cmp(&self, other: &PageKey) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

/// What page of the stored sessions to list ([`Backend::list_page`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PageRequest {
    /// Start after this key; `None` for the first page.
    pub after: Option<PageKey>,
    /// The most headers the page holds.
    pub limit: usize,
    /// Only sessions of this owner; `None` for every session.
    pub owner: Option<String>,
    /// Only sessions with a `cwd`.
    pub require_cwd: bool,
    /// Leave out subagent children (`origin: "subagent"`) when `true`.
    pub exclude_subagents: bool,
    /// Only sessions whose `cwd` is exactly this.
    pub cwd: Option<String>,
}

impl PageRequest {
    /// Whether `header` passes the request's filters (not its position).
    pub fn admits(&self, header: &SessionHeader) -> bool {
        (self.owner.is_none() || header.owner == self.owner)
            && (!self.require_cwd || header.cwd.is_some())
            && (!self.exclude_subagents || !header.is_subagent())
            && self.cwd.as_ref().is_none_or(|cwd| header.cwd.as_ref() == Some(cwd))
    }
}

/// One page of stored headers, in page order ([`PageKey`]).
#[derive(Debug, Default, PartialEq)]
pub struct HeaderPage {
    /// The page's listable headers, in page order.
    pub headers: Vec<StoredHeader>,
    /// Logs met in the page's range that cannot be listed (a backend without an order for
    /// them reports none here; [`Backend::list`] still reports every one).
    pub faults: Vec<LogFault>,
    /// The key to ask the next page after, when more sessions may follow.
    pub next: Option<PageKey>,
    /// For each header of the page that has any, the ids of its stored direct subagent children
    /// (`origin: "subagent"`) of the request's owner (every owner's for `owner: None`), sorted;
    /// found in the same pass as the page (the default cuts them from the listing, PostgreSQL asks
    /// its parent index once per page). Other request filters do not apply to children.
    pub children: BTreeMap<SessionId, Vec<SessionId>>,
}

impl HeaderPage {
    /// The page `request` asks for, cut from a whole listing (the default of
    /// [`Backend::list_page`]): costs the listing, not the page.
    pub fn from_listing(listing: Listing, request: &PageRequest) -> HeaderPage {
        let (listing_children, headers): (Vec<StoredHeader>, Vec<StoredHeader>) =
            listing.headers.into_iter().partition(|stored| {
                stored.header.is_subagent()
                    && stored.header.parent_session.is_some()
                    && (request.owner.is_none() || stored.header.owner == request.owner)
            });
        let children_admitted = listing_children.iter().filter(|stored| request.admits(&stored.header)).cloned();
        let mut headers: Vec<StoredHeader> = headers
            .into_iter()
            .chain(children_admitted)
            .filter(|stored| request.admits(&stored.header))
            .filter(|stored| request.after.as_ref().is_none_or(|after| PageKey::of(&stored.header) > *after))
            .collect();
        headers.sort_by_key(|stored| PageKey::of(&stored.header));
        let more = headers.len() > request.limit;
        headers.truncate(request.limit);
        let next = if more { headers.last().map(|stored| PageKey::of(&stored.header)) } else { None };
        let ids: std::collections::HashSet<&SessionId> = headers.iter().map(|stored| &stored.header.id).collect();
        let mut children: BTreeMap<SessionId, Vec<SessionId>> = BTreeMap::new();
        for stored in &listing_children {
            let header = &stored.header;
            if let Some(parent) = header.parent_session.as_ref().filter(|parent| ids.contains(parent)) {
                children.entry(parent.clone()).or_default().push(header.id.clone());
            }
        }
        for ids in children.values_mut() {
            ids.sort();
        }
        HeaderPage { headers, faults: Vec::new(), next, children }
    }
}

/// One log found by [`Backend::survey`]: where it is, and its header or why that cannot be read.
#[derive(Debug)]
pub struct SurveyEntry {
    /// The log's id as its location names it (the decoded directory name for JSONL).
    pub id: SessionId,
    /// The log file, for backends with files.
    pub path: Option<PathBuf>,
    /// The header with its revision, or the error that keeps it from being read (the same
    /// error a listing reports as the log's [`LogFault`]).
    pub header: Result<StoredHeader>,
}

/// The physical tail of a log that is not committed and must be cut before the next write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TornTail {
    /// Where the cut is: for a file backend, the byte length the file is truncated to; for a row
    /// backend (SQLite), the seq of the first physical row of the torn tail.
    pub truncate_to: u64,
    /// Complete events recovered from the torn region. They are part of the scanned prefix and
    /// are written again (as one new batch) after the cut.
    pub recovered: Vec<SessionEvent>,
}

/// What a scan found besides the events it streamed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScanOutcome {
    /// The log's header, as also handed to [`ScanSink::header`].
    pub header: Arc<SessionHeader>,
    /// The revision of the state that was scanned.
    pub revision: Revision,
    /// The number of events streamed: the valid stored prefix, packed rows expanded.
    pub n_events: u64,
    /// The uncommitted tail after the valid prefix, if the scan found one; `None` for a log
    /// that ends on a committed boundary.
    pub torn: Option<TornTail>,
    /// Bytes of decoded log text (decompressed for zstd), for throughput reporting.
    pub n_bytes: u64,
}

/// One whole log read ahead of its scan by [`Backend::prefetch`]: what
/// [`scan`](Backend::scan) would hand a sink, and its outcome.
#[derive(Debug, Clone)]
pub struct PrefetchedLog {
    /// What the scan reports; its `torn` is `None` (only a log that reads cleanly is prefetched).
    pub outcome: ScanOutcome,
    /// Every event of the log (of a tail read ahead, every event from its seq on), in seq order.
    pub events: Vec<Arc<SessionEvent>>,
}

impl PrefetchedLog {
    /// Hands the log to `sink` as its scan would, and returns the scan's outcome.
    pub fn replay(&self, sink: &mut dyn ScanSink) -> Result<Option<ScanOutcome>> {
        sink.header(&self.outcome.header)?;
        for event in &self.events {
            sink.event(Arc::clone(event))?;
        }
        Ok(Some(self.outcome.clone()))
    }
}

/// Receives a scan's output in order: the header once, then every event of the valid prefix.
pub trait ScanSink {
    /// Receives the log's header, once, before any event. Returning an error stops the scan with
    /// that error (returning `Cancelled` is how a sink that needs only the header stops early).
    fn header(&mut self, _header: &Arc<SessionHeader>) -> Result<()> {
        Ok(())
    }

    /// Receives the next event of the valid prefix; its `seq` is one more than the previous
    /// event's. Returning an error stops the scan with that error.
    fn event(&mut self, event: Arc<SessionEvent>) -> Result<()>;

    /// The log changed on disk while it was being scanned, and the scan is about to start over
    /// from the header: forget everything received so far and return `true`. A sink that cannot
    /// forget returns `false` (the default), and the scan then fails with an I/O error instead of
    /// retrying. Wrapping sinks should forward this call.
    fn restart(&mut self) -> bool {
        false
    }

    /// Whether the backend may read ahead on a helper thread (decompress the next frames of a
    /// long log while this sink consumes events). Defaults to `false`: the scan then runs on
    /// the calling thread only. Wrapping sinks should forward this call.
    fn read_ahead(&self) -> bool {
        false
    }

    /// How many threads may decompress ahead for this sink when [`read_ahead`](Self::read_ahead)
    /// allows it at all (the frames of a long zstd log are independent, so two decoders can take
    /// them in turn). Defaults to one: a second pays only where cores are free for it, which a
    /// sink that knows how many reads run can tell. Wrapping sinks should forward this call.
    fn read_ahead_decoders(&self) -> usize {
        1
    }

    /// The seq this sink needs no event at or past: a backend that can bound its read (a
    /// database's statement) may end the read just before it, as if the log ended there and
    /// without the checks of the log's end, rather than read on for a sink that would stop it
    /// with an error. `None` (the default): the whole log. Only a read of a stored suffix may be
    /// bounded (the coordinator's `read_from_many`): a whole-log read that ended early would
    /// balance the log where it stopped. Validating wrappers forward this call; a streamed
    /// read's sink (`SinkSlot`) does not.
    fn until_seq(&self) -> Option<u64> {
        None
    }

    /// The stream delivered everything, closers included, and ends well. A sink that only needs
    /// its result, not what it accumulated, may reduce itself here: a persistence reading many
    /// sessions calls this on the reading thread as each read ends, so finished reads waiting for
    /// the batch hold their results only. Not called when the read fails; a sink must not rely on
    /// it being called at all (`scan` does not call it).
    fn finish(&mut self) {}
}

/// Collects a scan into memory.
#[derive(Debug, Default)]
pub struct CollectSink {
    /// The events received so far, in seq order; emptied when a scan restarts.
    pub events: Vec<SessionEvent>,
}

impl ScanSink for CollectSink {
    fn event(&mut self, event: Arc<SessionEvent>) -> Result<()> {
        self.events.push(Arc::unwrap_or_clone(event));
        Ok(())
    }

    fn restart(&mut self) -> bool {
        self.events.clear();
        true
    }
}

/// Storage for session logs, one log per id.
pub trait Backend: Send + Sync + fmt::Debug + 'static {
    /// A short name for messages, such as `jsonl`.
    fn name(&self) -> &'static str;

    /// Streams the header and the valid stored prefix of `id` into `sink`, in seq order, and
    /// reports the torn tail if the physical file has one. `Ok(None)` means the id is not stored.
    /// Checks `cancel` between units of work and returns `Cancelled` once it fires.
    fn scan(&self, id: &SessionId, cancel: &CancellationToken, sink: &mut dyn ScanSink) -> Result<Option<ScanOutcome>>;

    /// Streams the header and the stored events from `from_seq` on, for a read that needs only
    /// a suffix (`read_from`, a checkpoint's tail). A backend that can seek overrides this so the
    /// read costs the suffix, not the log, and then streams only events with `seq >= from_seq`
    /// (their validation then cannot see the prefix, so rules that need it are skipped). The
    /// default scans the whole log, streaming every event from seq 0; the caller drops the ones
    /// before `from_seq`. The outcome's `torn` describes what the read saw and is not a repair
    /// marker when the backend seeks.
    fn scan_from(
        &self,
        id: &SessionId,
        from_seq: u64,
        cancel: &CancellationToken,
        sink: &mut dyn ScanSink,
    ) -> Result<Option<ScanOutcome>> {
        let _ = from_seq;
        self.scan(id, cancel, sink)
    }

    /// How many logs one [`prefetch`](Self::prefetch) reads best: more than 1 where one round
    /// trip for many short logs beats a round trip per log (a database server). The default, 1,
    /// says reading ahead gains nothing, and callers then read log by log.
    fn prefetch_batch(&self) -> usize {
        1
    }

    /// Reads ahead, in one go, the logs of `ids` that are short and read cleanly: each as its
    /// [`scan`](Self::scan) would have read it at the moment of this call. An id left out (not
    /// stored, long, past the call's memory budget, or with anything a scan would report: a
    /// fault, a torn tail) is read by its own scan, which gives its exact answer. An error fails
    /// the read ahead only; every id is then scanned. The default reads nothing ahead.
    fn prefetch(&self, ids: &[SessionId], cancel: &CancellationToken) -> Result<Vec<(SessionId, PrefetchedLog)>> {
        let _ = (ids, cancel);
        Ok(Vec::new())
    }

    /// Reads ahead, in one go, the short tails of `reads` (each a session and the seq its tail
    /// starts at) that read cleanly: each as its [`scan_from`](Self::scan_from) would have read
    /// it at the moment of this call, with the events from its seq on. An entry left out (not
    /// stored, a long tail, anything a scan would report) is read by its own `scan_from`. An
    /// error fails the read ahead only. The default reads nothing ahead.
    fn prefetch_tails(
        &self,
        reads: &[(SessionId, u64)],
        cancel: &CancellationToken,
    ) -> Result<Vec<(SessionId, PrefetchedLog)>> {
        let _ = (reads, cancel);
        Ok(Vec::new())
    }

    /// The current revision of `id`'s log without reading the log. `Ok(None)` if not stored.
    fn revision(&self, id: &SessionId) -> Result<Option<Revision>>;

    /// The header of `id`'s log with its revision, reading the header only. `Ok(None)` if not
    /// stored. The default scans until the header and stops there; a backend that can read a
    /// header alone should override it.
    fn header(&self, id: &SessionId, cancel: &CancellationToken) -> Result<Option<StoredHeader>> {
        /// Keeps the header and stops the scan at once.
        #[derive(Default)]
        struct HeaderOnly(Option<Arc<SessionHeader>>);
        impl ScanSink for HeaderOnly {
            fn header(&mut self, header: &Arc<SessionHeader>) -> Result<()> {
                self.0 = Some(Arc::clone(header));
                Err(PersistenceError::Cancelled)
            }
            fn event(&mut self, _event: Arc<SessionEvent>) -> Result<()> {
                Err(PersistenceError::Cancelled)
            }
        }
        let mut sink = HeaderOnly::default();
        let scanned = self.scan(id, cancel, &mut sink);
        let Some(header) = sink.0 else {
            // No header reached the sink: absent, or a failure before the header.
            return scanned.map(|_| None);
        };
        if cancel.is_cancelled() {
            return Err(PersistenceError::Cancelled);
        }
        let Some(revision) = self.revision(id)? else { return Ok(None) };
        Ok(Some(StoredHeader { header, revision, n_bytes: None }))
    }

    /// Durably appends `events`. When `materialized` is false the log does not exist yet and the
    /// header plus this first batch must appear atomically. Returns only after the data is durable;
    /// on failure nothing of the batch remains.
    fn append_batch(&self, header: &SessionHeader, events: &[Arc<SessionEvent>], materialized: bool) -> Result<()>;

    /// [`append_batch`](Backend::append_batch) as a future that waits on no thread, for a
    /// backend whose I/O is asynchronous underneath (a database driver on a runtime of its own):
    /// the coordinator awaits it where it would otherwise hop to the blocking pool and wait there
    /// for the driver, two thread wake-ups per durable append. `None` (the default) where the
    /// backend has no such path, or not for this batch (one too large to encode on an async
    /// thread): the coordinator then calls `append_batch` on the blocking pool. The contract is
    /// `append_batch`'s: the batch is durable when the future answers `Ok`, nothing of it
    /// remains on failure, and the write runs to its end even if the future is dropped.
    fn append_batch_async(
        self: Arc<Self>,
        header: &Arc<SessionHeader>,
        events: &[Arc<SessionEvent>],
        materialized: bool,
    ) -> Option<AppendFuture> {
        let _ = (header, events, materialized);
        None
    }

    /// Cuts the torn tail (if given), then durably appends `torn.recovered` followed by `closers`
    /// as one batch. Need not be atomic: an interrupted repair is found and redone by the next scan.
    fn commit_repair(&self, header: &SessionHeader, torn: Option<&TornTail>, closers: &[SessionEvent]) -> Result<()>;

    /// A live session of this process now writes `id`: take `id`'s writer lease, so that a
    /// repair by any other store handle or process ([`commit_repair`](Self::commit_repair)
    /// there) refuses to close its turn ([`PersistenceError::Held`]) until
    /// [`end_lease`](Self::end_lease). The coordinator calls it once the session is bound, before
    /// its first write; taking a lease twice is taking it once. The default keeps no leases: a
    /// backend that one handle alone may write (JSONL under its store lock, memory) needs none.
    fn lease(&self, _id: &SessionId) -> Result<()> {
        Ok(())
    }

    /// The live session of `id` in this process let go of it: drop its writer lease (if held).
    fn end_lease(&self, _id: &SessionId) {}

    /// Every stored header with its revision, and every log that cannot be listed as its own
    /// [`LogFault`]. Headers are read, logs are not. One damaged log never fails the listing:
    /// only a fault of the store as a whole (its root unreadable) or a cancellation does.
    fn list(&self, cancel: &CancellationToken) -> Result<Listing>;

    /// The headers a listing of `parent`'s children needs, as [`Listing::family_of`] describes
    /// them. The default filters [`list`](Self::list); a backend with an index on the parent
    /// overrides it so the answer costs the family, not the store (it may then return, of each
    /// child's own subagent children, only one per owner: enough for a listing scoped by owner to
    /// tell which children have children).
    fn list_children(&self, parent: &SessionId, cancel: &CancellationToken) -> Result<Listing> {
        Ok(self.list(cancel)?.family_of(parent))
    }

    /// One page of the stored headers in newest-first order ([`PageKey`]). The default cuts it
    /// from [`list`](Self::list); a backend with an index on the order overrides it so a page
    /// costs the page.
    fn list_page(&self, request: &PageRequest, cancel: &CancellationToken) -> Result<HeaderPage> {
        Ok(HeaderPage::from_listing(self.list(cancel)?, request))
    }

    /// Every log the backend holds, each with its header or the error that keeps it from being
    /// read: this is what an operator's `verify` walks. The default reports `list`'s headers
    /// and faults, in id order.
    fn survey(&self, cancel: &CancellationToken) -> Result<Vec<SurveyEntry>> {
        let listing = self.list(cancel)?;
        let mut entries: Vec<SurveyEntry> = listing
            .headers
            .into_iter()
            .map(|stored| SurveyEntry {
                id: stored.header.id.clone(),
                path: self.locate(&stored.header),
                header: Ok(stored),
            })
            .chain(listing.faults.into_iter().map(|fault| SurveyEntry {
                id: fault.id,
                path: fault.path,
                header: Err(fault.error),
            }))
            .collect();
        entries.sort_by(|a, b| a.id.cmp(&b.id).then_with(|| a.path.cmp(&b.path)));
        Ok(entries)
    }

    /// Where `header`'s log lives (or would live), for messages. `None` for backends without files.
    fn locate(&self, _header: &SessionHeader) -> Option<PathBuf> {
        None
    }

    /// Starts this store's change signal, if it has one: a store that other processes write
    /// (PostgreSQL's notifications, a SQLite file's change counter) calls `sink` with a wake-up
    /// whenever another writer may have changed a session, and with [`StoreChange::Sweep`] once
    /// it is listening and after every reconnect ([`crate::watch`]). Returns at once (the signal
    /// connects in the background); `Ok(None)`, the default, when only this handle writes the
    /// store (JSONL under its store lock, memory), so there is nothing to follow.
    ///
    /// [`StoreChange::Sweep`]: crate::StoreChange::Sweep
    fn watch(&self, _options: &WatchOptions, _sink: SharedChangeSink) -> Result<Option<Watch>> {
        Ok(None)
    }

    /// Where each of `ids` stands: its next seq, and whether a writer other than this handle
    /// holds it ([`SessionPosition::held`]). Ids not stored
    /// are left out. The default scans each log to count its events (a backend that follows
    /// other writers overrides it with one query).
    fn positions(&self, ids: &[SessionId], cancel: &CancellationToken) -> Result<Vec<SessionPosition>> {
        /// Counts the events and drops them.
        #[derive(Default)]
        struct Count(u64);
        impl ScanSink for Count {
            fn event(&mut self, _event: Arc<SessionEvent>) -> Result<()> {
                self.0 += 1;
                Ok(())
            }
            fn restart(&mut self) -> bool {
                self.0 = 0;
                true
            }
        }
        let mut positions = Vec::with_capacity(ids.len());
        for id in ids {
            let mut count = Count::default();
            if self.scan(id, cancel, &mut count)?.is_some() {
                positions.push(SessionPosition { id: id.clone(), next_seq: count.0, held: None });
            }
        }
        Ok(positions)
    }

    /// The headers of the sessions whose `createdAt` is at or after `since_ms`, for a follower's
    /// sweep to find sessions created elsewhere whose signal it missed. The default filters
    /// [`list`](Self::list); an indexed backend answers from its index on `createdAt`.
    fn created_since(&self, since_ms: u64, cancel: &CancellationToken) -> Result<Listing> {
        let mut listing = self.list(cancel)?;
        listing.headers.retain(|stored| stored.header.created_at >= since_ms);
        listing.faults.clear();
        Ok(listing)
    }
}
