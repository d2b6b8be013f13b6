//! `list_children` and `list_descendants` (reference 03 §5, design note "Subagent list identity
//! via the projection unit"): the live-preferred merge of the session store and persistence, the
//! candidate selection and order, the three-rung compute-and-discard ladder, and the four-state
//! row mapping.
//!
//! Nothing here parses a descriptor: the `subagent` unit, computed through the registry, is the
//! only classification authority. Nothing is memoized across listings and nothing is written.

use std::{
    collections::{HashMap, HashSet},
    panic::{AssertUnwindSafe, catch_unwind},
    sync::Arc,
};

use session_core::{Session, SessionEvent, SessionHeader, SessionId, SessionStore};
use session_persistence::{
    CorruptKind, Location, PersistenceError, ScanSink, SessionPersistence, StreamSummary, inspect_each_into,
};
use session_projection::{ProjectionRegistry, RestoreError, RestoreFold, Snapshot};
use session_storage_io::keyed::{BlockingCancelled, run_blocking};
use tokio_util::sync::CancellationToken;

use crate::{
    checkpoint::CheckpointSource,
    entry::{Activity, ChildEntry, DiagnosticReason, SubagentDescendantListEntry, SubagentListEntry},
    error::SubagentError,
    identity::{SUBAGENT_IDENTITY_KEY, SubagentIdentity},
    list_agents::AgentStatus,
    runtime::SubagentServices,
    timing::{SUBAGENT_TIMING_KEY, TimingView},
};

/// How many cold children are read at once by default: the reference's bound for a read-only
/// scan of local media. A networked backend (PostgreSQL), whose reads mostly wait on round
/// trips, may be given more lanes ([`crate::SubagentRuntime::with_cold_read_lanes`]).
pub const COLD_READ_CONCURRENCY: usize = 4;

/// The most cold-read lanes a runtime may be given.
pub const MAX_COLD_READ_LANES: usize = 64;

/// Which sessions a listing may show, for a caller that may not see every session (an owner
/// partition). A scoped listing authorizes before it reads: a parent outside the scope, or one
/// that is not enumerated at all, lists like an unknown parent (no rows, no log read), and a
/// child outside the scope is left out before any read. `hasChildren` counts only children in
/// the scope.
#[derive(Clone, Copy)]
pub enum Scope<'a> {
    /// Every session (the operator tier).
    All,
    /// Only the sessions whose header passes the check.
    Only(&'a (dyn Fn(&SessionHeader) -> bool + Send + Sync)),
}

impl Scope<'_> {
    fn admits(&self, header: &SessionHeader) -> bool {
        match self {
            Scope::All => true,
            Scope::Only(check) => check(header),
        }
    }
}

impl std::fmt::Debug for Scope<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Scope::All => "Scope::All",
            Scope::Only(_) => "Scope::Only(..)",
        })
    }
}

/// One listing's view of the services, after the precondition checks.
pub(crate) struct Listing<'a> {
    registry: &'a Arc<ProjectionRegistry>,
    sessions: &'a Arc<SessionStore>,
    persistence: Option<&'a Arc<dyn SessionPersistence>>,
    cache: Option<&'a Arc<dyn CheckpointSource>>,
    scope: Scope<'a>,
    /// How many cold children are read at once.
    lanes: usize,
}

/// One enumerated session: its header and, if it is live, the live session.
struct Record {
    header: Arc<SessionHeader>,
    live: Option<Arc<Session>>,
    /// The stored log was listed as a fault whose header still names it (an id stored twice):
    /// it cannot be read, so its row is `unavailable` without a read.
    unreadable: bool,
}

/// The merged material of one listing.
struct Corpus {
    records: HashMap<SessionId, Record>,
    /// `parentSession` of every subagent-origin record: `hasChildren(x) = x ∈ subagent_parents`.
    subagent_parents: HashSet<SessionId>,
}

fn check_cancel(cancel: &CancellationToken) -> Result<(), SubagentError> {
    if cancel.is_cancelled() { Err(SubagentError::ListingCancelled) } else { Ok(()) }
}

fn by_creation(a: &&Record, b: &&Record) -> std::cmp::Ordering {
    (a.header.created_at, &a.header.id).cmp(&(b.header.created_at, &b.header.id))
}

impl<'a> Listing<'a> {
    /// Checks the two required services, in the reference's order, before anything is read.
    pub(crate) fn new(services: &'a SubagentServices, lanes: usize) -> Result<Listing<'a>, SubagentError> {
        let registry = services.projections.as_ref().ok_or(SubagentError::ProjectionsUnavailable)?;
        let sessions = services.sessions.as_ref().ok_or(SubagentError::SessionStoreUnavailable)?;
        let (persistence, cache) = (services.persistence.as_ref(), services.cache.as_ref());
        Ok(Listing { registry, sessions, persistence, cache, scope: Scope::All, lanes })
    }

    /// The same listing, restricted to `scope`.
    pub(crate) fn scoped(self, scope: Scope<'a>) -> Listing<'a> {
        Listing { scope, ..self }
    }

    /// Whether a scoped listing may show `parent`'s children: it must be enumerated and in the
    /// scope. An unscoped listing lists the children of any id (an unknown parent has none).
    fn parent_admitted(&self, corpus: &Corpus, parent: &SessionId) -> bool {
        match self.scope {
            Scope::All => true,
            Scope::Only(_) => corpus.records.get(parent).is_some_and(|record| self.scope.admits(&record.header)),
        }
    }

    pub(crate) async fn children(
        &self,
        parent: &SessionId,
        cancel: &CancellationToken,
    ) -> Result<Vec<SubagentListEntry>, SubagentError> {
        check_cancel(cancel)?;
        let corpus = self.corpus(Some(parent), cancel).await?;
        if !self.parent_admitted(&corpus, parent) {
            return Ok(Vec::new());
        }
        let mut candidates: Vec<&Record> = corpus
            .records
            .values()
            .filter(|record| record.header.is_subagent() && record.header.parent_session.as_ref() == Some(parent))
            .collect();
        candidates.sort_by(by_creation);
        let rows = self.resolve(&candidates, &corpus, cancel).await?;
        Ok(rows.into_iter().flatten().collect())
    }

    /// The row `children(parent)` would give `child`, read alone: the same enumeration and
    /// ladder, with one candidate. `None` if `child` is not a subagent child of `parent` or its
    /// row is omitted.
    pub(crate) async fn child(
        &self,
        parent: &SessionId,
        child: &SessionId,
        cancel: &CancellationToken,
    ) -> Result<Option<SubagentListEntry>, SubagentError> {
        check_cancel(cancel)?;
        let corpus = self.corpus(Some(parent), cancel).await?;
        if !self.parent_admitted(&corpus, parent) {
            return Ok(None);
        }
        let candidates: Vec<&Record> = corpus
            .records
            .get(child)
            .filter(|record| record.header.is_subagent() && record.header.parent_session.as_ref() == Some(parent))
            .into_iter()
            .collect();
        let rows = self.resolve(&candidates, &corpus, cancel).await?;
        Ok(rows.into_iter().flatten().next())
    }

    pub(crate) async fn descendants(
        &self,
        root: &SessionId,
        cancel: &CancellationToken,
    ) -> Result<Vec<SubagentDescendantListEntry>, SubagentError> {
        check_cancel(cancel)?;
        let corpus = self.corpus(None, cancel).await?;
        if !self.parent_admitted(&corpus, root) {
            return Ok(Vec::new());
        }
        let walk = pre_order(&corpus, root);
        let candidates: Vec<&Record> = walk.iter().map(|(record, _)| *record).collect();
        let rows = self.resolve(&candidates, &corpus, cancel).await?;
        Ok(walk
            .iter()
            .zip(rows)
            .filter_map(|((record, depth), row)| {
                let parent_id = record.header.parent_session.clone()?;
                Some(SubagentDescendantListEntry { entry: row?, parent_id, depth: *depth })
            })
            .collect())
    }

    /// The live-preferred merge: persisted headers, overwritten wholesale by live sessions of the
    /// same id (no consistency check). Checkpoints (b) and (c) of reference 03 §5.9.
    ///
    /// With `family`, the persisted part is only what a listing of that parent's children needs
    /// (`SessionPersistence::list_children`: the parent, its children, and enough of their
    /// children to tell which have some), which an indexed backend answers for the cost of the
    /// family; the rows are the same as over the whole store.
    async fn corpus(&self, family: Option<&SessionId>, cancel: &CancellationToken) -> Result<Corpus, SubagentError> {
        let mut records = HashMap::new();
        if let Some(persistence) = self.persistence {
            let listed = tokio::select! {
                biased;
                () = cancel.cancelled() => return Err(SubagentError::ListingCancelled),
                listed = async {
                    match family {
                        Some(parent) => persistence.list_children(parent, cancel).await,
                        None => persistence.list_snapshots(cancel).await,
                    }
                } => listed,
            };
            let listing = match listed {
                Ok(listing) => listing,
                Err(_) if cancel.is_cancelled() => return Err(SubagentError::ListingCancelled),
                Err(error) => return Err(SubagentError::Listing(error)),
            };
            check_cancel(cancel)?;
            // A log listed as a fault joins the corpus only if its header still names it; one
            // whose header cannot be read names no parent, so no catalog can list it (the
            // persistence logs it, and `verify` reports it).
            for fault in listing.faults {
                if let Some(header) = fault.header {
                    records.insert(header.id.clone(), Record { header, live: None, unreadable: true });
                }
            }
            for stored in listing.headers {
                let header = stored.header;
                records.insert(header.id.clone(), Record { header, live: None, unreadable: false });
            }
        }
        for session in self.sessions.list() {
            let header = Arc::clone(session.header());
            records.insert(session.id().clone(), Record { header, live: Some(session), unreadable: false });
        }
        // Out of scope is as if not enumerated: no row, no read, no `hasChildren`, no walk.
        records.retain(|_, record| self.scope.admits(&record.header));
        let subagent_parents = records
            .values()
            .filter(|record| record.header.is_subagent())
            .filter_map(|record| record.header.parent_session.clone())
            .collect();
        Ok(Corpus { records, subagent_parents })
    }

    /// Runs the ladder for every candidate: `None` for an omitted row. Live candidates resolve at
    /// once; cold ones are read by at most [`COLD_READ_CONCURRENCY`] at a time, each result
    /// written to its candidate's index, so the output order does not depend on completion order.
    /// A cancellation stops the listing and aborts every read still in flight.
    async fn resolve(
        &self,
        candidates: &[&Record],
        corpus: &Corpus,
        cancel: &CancellationToken,
    ) -> Result<Vec<Option<SubagentListEntry>>, SubagentError> {
        let mut rows: Vec<Option<SubagentListEntry>> = vec![None; candidates.len()];
        let mut cold = Vec::new();
        for (idx, record) in candidates.iter().enumerate() {
            let has_children = corpus.subagent_parents.contains(&record.header.id);
            match &record.live {
                Some(session) => rows[idx] = self.resolve_live(session, has_children),
                None if record.unreadable => {
                    rows[idx] = Some(SubagentListEntry::diagnostic(&record.header.id, DiagnosticReason::Unavailable));
                }
                None => cold.push((idx, has_children)),
            }
        }
        // Rung 2 for every cold candidate first; the misses are read together.
        let cold_headers: Vec<Arc<SessionHeader>> =
            cold.iter().map(|&(idx, _)| Arc::clone(&candidates[idx].header)).collect();
        let identities = self.cached_identities(cold_headers, cancel).await?;
        let mut misses = Vec::new();
        for ((idx, has_children), identity) in cold.into_iter().zip(identities) {
            match identity {
                Some((identity, timing)) => {
                    let id = &candidates[idx].header.id;
                    rows[idx] = Some(child_row(id, identity, timing, Activity::Inactive, has_children));
                }
                None => misses.push((idx, has_children)),
            }
        }
        if !misses.is_empty() {
            // Invariant: only `corpus` makes records, and one without a live session comes from
            // `persistence.list`, so persistence is present.
            let persistence =
                self.persistence.expect("a candidate without a live session was enumerated from persistence");
            check_cancel(cancel)?;
            // Reads run under a child token that fires when this listing ends, however it ends:
            // a failed or dropped listing leaves no read running behind it.
            let reads = cancel.child_token();
            let _abort_reads = reads.clone().drop_guard();
            let sinks = misses
                .iter()
                .map(|&(idx, _)| {
                    let id = &candidates[idx].header.id;
                    (id.clone(), ColdFold::new(self.registry, id))
                })
                .collect();
            let read = inspect_each_into(persistence.as_ref(), sinks, self.lanes, &reads);
            let outcomes = tokio::select! {
                biased;
                () = cancel.cancelled() => return Err(SubagentError::ListingCancelled),
                outcomes = read => outcomes,
            };
            // A read that settled after the listing was cancelled is not used.
            check_cancel(cancel)?;
            for ((idx, has_children), outcome) in misses.into_iter().zip(outcomes) {
                rows[idx] = Some(cold_row(&candidates[idx].header, has_children, outcome));
            }
        }
        check_cancel(cancel)?;
        Ok(rows)
    }

    /// Rung 2 for `headers`, in order: the checkpoint source's identities, looked up in one hop
    /// to the blocking pool (a source may read files, which must not stall the runtime's
    /// threads). Without a source every header is a miss.
    async fn cached_identities(
        &self,
        headers: Vec<Arc<SessionHeader>>,
        cancel: &CancellationToken,
    ) -> Result<Vec<Option<(SubagentIdentity, Option<TimingView>)>>, SubagentError> {
        let n_headers = headers.len();
        let misses = || std::iter::repeat_with(|| None).take(n_headers).collect();
        let Some(cache) = self.cache.filter(|_| n_headers > 0) else { return Ok(misses()) };
        // `cached_identity` contains a source's panic per header, so the hop itself cannot fail.
        if cancel.is_cancelled() {
            return Err(SubagentError::ListingCancelled);
        }
        let cache = Arc::clone(cache);
        let lookup = run_blocking(move || cached_identities(&*cache, &headers));
        tokio::select! {
            biased;
            () = cancel.cancelled() => Err(SubagentError::ListingCancelled),
            // A runtime shutting down cancels the hop: the listing is cancelled with it.
            looked_up = lookup => looked_up.map_err(|BlockingCancelled| SubagentError::ListingCancelled),
        }
    }

    /// Rung 1: the registry's watermark cells, zero log reads.
    fn resolve_live(&self, session: &Arc<Session>, has_children: bool) -> Option<SubagentListEntry> {
        // The identity value and the failure verdict only: a listing copies no unit's value.
        let verdict = self
            .registry
            .read_view(session, SUBAGENT_IDENTITY_KEY, |identity, any_failure| verdict(any_failure, identity));
        match verdict {
            Verdict::Failed => Some(SubagentListEntry::diagnostic(session.id(), DiagnosticReason::Corrupt)),
            // The creation window: the descriptor is not appended yet.
            Verdict::Absent => None,
            Verdict::Identity(identity) => {
                let timing = self.registry.read_view(session, SUBAGENT_TIMING_KEY, |timing, _| timing_of(timing));
                Some(live_row(session, identity, timing, has_children))
            }
        }
    }
}

/// Rung 3's row for one cold candidate, from its read: a failed read is `unavailable`, a header
/// that is no longer the enumerated lifecycle or a fold without an identity is `corrupt`.
fn cold_row(
    header: &SessionHeader,
    has_children: bool,
    outcome: session_persistence::Result<(ColdFold, StreamSummary)>,
) -> SubagentListEntry {
    let id = &header.id;
    let (sink, summary) = match outcome {
        Ok(read) => read,
        Err(error) => {
            tracing::debug!(session = %id, %error, "subagent listing: cold read failed; listing the child as unavailable");
            return SubagentListEntry::diagnostic(id, DiagnosticReason::Unavailable);
        }
    };
    if !same_lifecycle(header, &summary.header) {
        return SubagentListEntry::diagnostic(id, DiagnosticReason::Corrupt);
    }
    let verdict = match sink.verdict() {
        Ok(verdict) => verdict,
        Err(error) => {
            tracing::debug!(session = %id, %error, "subagent listing: cold fold could not finish; listing the child as unavailable");
            return SubagentListEntry::diagnostic(id, DiagnosticReason::Unavailable);
        }
    };
    match verdict {
        (Verdict::Identity(identity), timing) => child_row(id, identity, timing, Activity::Inactive, has_children),
        // Settled debris, or bad data: missing, malformed or foreign-version descriptor, or a
        // unit that fails on this log.
        (Verdict::Absent | Verdict::Failed, _) => SubagentListEntry::diagnostic(id, DiagnosticReason::Corrupt),
    }
}

/// What a snapshot says about a child.
pub(crate) enum Verdict {
    /// Some registered unit failed on this child's log.
    Failed,
    /// No identity: the `null` sentinel or the key absent.
    Absent,
    Identity(SubagentIdentity),
}

fn identity_of(snapshot: &Snapshot) -> Verdict {
    verdict(snapshot.has_failures(), snapshot.values.get(SUBAGENT_IDENTITY_KEY))
}

/// The row verdict from the failure flag of a cut and its identity value.
fn verdict(any_failure: bool, identity: Option<&serde_json::Value>) -> Verdict {
    if any_failure {
        return Verdict::Failed;
    }
    match identity.and_then(SubagentIdentity::from_value) {
        Some(identity) => Verdict::Identity(identity),
        None => Verdict::Absent,
    }
}

/// The timing value of a cut, if it reads as one.
fn timing_of(value: Option<&serde_json::Value>) -> Option<TimingView> {
    value.and_then(TimingView::from_value)
}

fn child_row(
    id: &SessionId,
    identity: SubagentIdentity,
    timing: Option<TimingView>,
    activity: Activity,
    has_children: bool,
) -> SubagentListEntry {
    SubagentListEntry::Child(ChildEntry {
        id: id.clone(),
        mode: identity.mode,
        activity,
        status: AgentStatus::Ready,
        has_children,
        timing,
    })
}

/// A live child's row, with the agent status of the session it was resolved from.
fn live_row(
    session: &Session,
    identity: SubagentIdentity,
    timing: Option<TimingView>,
    has_children: bool,
) -> SubagentListEntry {
    SubagentListEntry::Child(ChildEntry {
        id: session.id().clone(),
        mode: identity.mode,
        activity: Activity::Running,
        status: AgentStatus::of_session(Some(session)),
        has_children,
        timing,
    })
}

/// Rung 2: an identity from the checkpoint source, used only if it is non-null, passes the seq
/// gate (`seq >= seedLength`, so it was folded from the child's own descriptor), and the stored
/// snapshot reports no unit failure. Anything else, a panic included, is a miss.
/// The rung-2 identities of `headers`, in order, asked of the source in one batch; a batch that
/// panics is asked again one header at a time, so a panic costs only its own header's hit.
fn cached_identities(
    cache: &dyn CheckpointSource,
    headers: &[Arc<SessionHeader>],
) -> Vec<Option<(SubagentIdentity, Option<TimingView>)>> {
    match catch_unwind(AssertUnwindSafe(|| cache.cached_snapshots(headers))) {
        Ok(snapshots) if snapshots.len() == headers.len() => headers
            .iter()
            .zip(snapshots)
            .map(|(header, snapshot)| snapshot.and_then(|snapshot| usable_identity(header, &snapshot)))
            .collect(),
        _ => headers.iter().map(|header| cached_identity(cache, header)).collect(),
    }
}

fn cached_identity(
    cache: &dyn CheckpointSource,
    header: &SessionHeader,
) -> Option<(SubagentIdentity, Option<TimingView>)> {
    let snapshot = match catch_unwind(AssertUnwindSafe(|| cache.cached_snapshot(header))) {
        Ok(snapshot) => snapshot?,
        Err(_) => {
            tracing::debug!(session = %header.id, "subagent listing: the checkpoint source panicked; falling through to the cold read");
            return None;
        }
    };
    usable_identity(header, &snapshot)
}

/// The identity a snapshot serves for `header`: one of its own suffix, never a seed's.
fn usable_identity(header: &SessionHeader, snapshot: &Snapshot) -> Option<(SubagentIdentity, Option<TimingView>)> {
    match identity_of(snapshot) {
        Verdict::Identity(identity) if identity.seq >= header.own_suffix_start() => {
            Some((identity, timing_of(snapshot.values.get(SUBAGENT_TIMING_KEY))))
        }
        _ => None,
    }
}

/// The lifecycle witness: the inspected header must still be the enumerated lifecycle, compared
/// on exactly `version, id, createdAt, cwd, parentSession, seedLength, delegationDepth`.
fn same_lifecycle(enumerated: &SessionHeader, inspected: &SessionHeader) -> bool {
    enumerated.version == inspected.version
        && enumerated.id == inspected.id
        && enumerated.created_at == inspected.created_at
        && enumerated.cwd == inspected.cwd
        && enumerated.parent_session == inspected.parent_session
        && enumerated.seed_length == inspected.seed_length
        && enumerated.delegation_depth == inspected.delegation_depth
}

/// Rung 3's sink: folds every registered unit from `init` over the events as they are decoded,
/// so the transcript is never held in memory. When the read ends ([`ScanSink::finish`]) it keeps
/// only its verdict, so a listing's finished reads hold no unit state while the others run.
pub(crate) struct ColdFold {
    registry: Arc<ProjectionRegistry>,
    id: SessionId,
    state: ColdState,
}

enum ColdState {
    Folding(RestoreFold),
    Finished(Result<(Verdict, Option<TimingView>), RestoreError>),
}

impl ColdFold {
    pub(crate) fn new(registry: &Arc<ProjectionRegistry>, id: &SessionId) -> ColdFold {
        ColdFold {
            registry: Arc::clone(registry),
            id: id.clone(),
            state: ColdState::Folding(registry.begin_full_restore()),
        }
    }

    /// The identity value and the failure verdict, with the timing value, as on the live rung:
    /// no other unit's value is copied and no checkpoint row is encoded.
    pub(crate) fn verdict(self) -> Result<(Verdict, Option<TimingView>), RestoreError> {
        match self.state {
            ColdState::Folding(fold) => fold_verdict(fold),
            ColdState::Finished(verdict) => verdict,
        }
    }
}

fn fold_verdict(mut fold: RestoreFold) -> Result<(Verdict, Option<TimingView>), RestoreError> {
    let verdict = fold.read_view(SUBAGENT_IDENTITY_KEY, |identity, any_failure| verdict(any_failure, identity))?;
    let timing = fold.read_view(SUBAGENT_TIMING_KEY, |timing, _| timing_of(timing))?;
    Ok((verdict, timing))
}

impl ScanSink for ColdFold {
    fn event(&mut self, event: Arc<SessionEvent>) -> session_persistence::Result<()> {
        let ColdState::Folding(fold) = &mut self.state else {
            return Err(PersistenceError::invalid_input("an event reached a cold fold after its read finished"));
        };
        fold.apply(&event).map_err(|error| {
            PersistenceError::corrupt(CorruptKind::SeqGap, Location::Session { id: self.id.clone() }, error.to_string())
        })
    }

    fn restart(&mut self) -> bool {
        self.state = ColdState::Folding(self.registry.begin_full_restore());
        true
    }

    fn finish(&mut self) {
        let placeholder = ColdState::Finished(Ok((Verdict::Absent, None)));
        if let ColdState::Folding(fold) = std::mem::replace(&mut self.state, placeholder) {
            self.state = ColdState::Finished(fold_verdict(fold));
        }
    }
}

/// The candidates of `list_descendants`: every session below `root`, walked in pre-order with an
/// explicit stack (no recursion, so any depth works); siblings in `createdAt`-then-id order; a
/// visited set seeded with the root ends cycles in corrupt data. Every node is walked, only
/// subagent-origin nodes are candidates. Returns each candidate with its depth.
fn pre_order<'c>(corpus: &'c Corpus, root: &SessionId) -> Vec<(&'c Record, u64)> {
    let mut children: HashMap<&SessionId, Vec<&Record>> = HashMap::new();
    for record in corpus.records.values() {
        if let Some(parent) = &record.header.parent_session {
            children.entry(parent).or_default().push(record);
        }
    }
    for siblings in children.values_mut() {
        siblings.sort_by(by_creation);
    }
    let mut visited: HashSet<&SessionId> = HashSet::from([root]);
    let mut stack: Vec<(&Record, u64)> = Vec::new();
    let push_children = |stack: &mut Vec<(&'c Record, u64)>, parent: &SessionId, depth: u64| {
        if let Some(siblings) = children.get(parent) {
            stack.extend(siblings.iter().rev().map(|record| (*record, depth)));
        }
    };
    push_children(&mut stack, root, 1);
    let mut walk = Vec::new();
    while let Some((record, depth)) = stack.pop() {
        if !visited.insert(&record.header.id) {
            continue;
        }
        if record.header.is_subagent() {
            walk.push((record, depth));
        }
        push_children(&mut stack, &record.header.id, depth + 1);
    }
    walk
}
