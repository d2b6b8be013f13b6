//! Following the store: sessions that another gateway (or any other writer of a shared store)
//! writes reach this gateway's WebSocket clients as the same frames as its own sessions
//! (`docs/wire.md`, "Across gateways").
//!
//! The store's change signal ([`SessionPersistence::watch`]: PostgreSQL's notifications, a
//! SQLite file's change counter) only wakes the follower; what it sends comes from storage. A
//! wake-up for a session makes the follower read the session's position and then its tail from
//! the last seq the hub sent (a seek read, in pieces of a bounded size), and a sweep (after every
//! reconnect of the signal, and on a safety poll) does that for every followed session, every
//! session live here, every session created since the last sweep and every session woken since
//! the last round, so a lost notification costs latency, never an event, for any session followed
//! or created in the window. The sweep after a reconnect (the first included) reads every stored
//! session's position too, so sessions another writer took while this gateway could not hear it
//! are followed, idle ones included.
//! Wake-ups that arrive while a round runs coalesce into the next round, and a round reads each
//! session's tail at most once, so at most one tail read per session is ever in flight. Rounds
//! that signals start are paced ([`FollowConfig::round_gap`]): a wake-up after a quiet stretch
//! starts one at once, and those of a burst join the next round once the gap since the last one
//! has passed, so a session written many times a second elsewhere costs the store one tail read
//! per gap.
//!
//! A session live here whose stored log another writer moved on (this copy is fenced) is handed
//! to the hub as followed: its subscribers get a fresh `session/subscribed` baseline at what this
//! gateway stored, then the store's events.

use std::{
    collections::{HashMap, HashSet, VecDeque},
    sync::Arc,
    time::Duration,
};

use futures::StreamExt;
use parking_lot::Mutex;
use session_core::{SessionEvent, SessionHeader, SessionId, SessionStore};
use session_persistence::{ChangeSink, PersistenceError, SessionPersistence, SessionPosition, Watch};
use session_projection::{ProjectionRegistry, RestoreFold};
use tokio_util::sync::CancellationToken;

mod room;
mod stored;
mod wakes;

use room::wait_for_room;
use stored::{TAIL_LIMIT, ends_in_turn, read_pieces};
use wakes::Wakes;

use crate::{
    config::FollowConfig,
    hub::{Delivered, Hub},
};

/// How far back, in the store's clock, a sweep looks for sessions created elsewhere beyond the
/// previous sweep's start: room for the clocks of other gateways to be behind this one's.
const CREATED_SLACK_MS: u64 = 60_000;

/// A session first seen through its creation is followed from its first event when its log is
/// at most this long; a longer one (or one first seen later) from its current position.
const REPLAY_CREATED_MAX: u64 = 100_000;

/// A long tail goes to the hub in chunks of this many events, each once the clients' queues
/// have room for it.
const TAIL_CHUNK: usize = 256;

/// How many sessions' tails one round reads at once.
const TAIL_READS: usize = 8;

/// The running follower: stops when dropped.
pub(crate) struct Follower {
    cancel: CancellationToken,
    /// The store's change signal, unless following by sweeps alone.
    _watch: Option<Watch>,
}

impl Drop for Follower {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

impl std::fmt::Debug for Follower {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Follower").finish_non_exhaustive()
    }
}

/// What a round needs.
struct Context {
    /// The wake-up queue: a round carries sessions it cannot settle yet to the next one.
    wakes: Arc<Wakes>,
    hub: Arc<Hub>,
    store: Arc<SessionStore>,
    persistence: Arc<dyn SessionPersistence>,
    registry: Arc<ProjectionRegistry>,
    /// The projection fold of each followed session, so its client-visible units' changes go out
    /// as `session/projection` frames as they would for a session live here.
    folds: Mutex<HashMap<SessionId, Fold>>,
    /// Followed sessions whose clients may hold values the store's log does not give: a fold's
    /// seed failed after the hub sent a tail (the values that tail changed are owed), or a fenced
    /// copy's own events gave them. The next seed's baseline is empty, so every value goes out.
    owed: Mutex<HashSet<SessionId>>,
}

/// A session a round brings up: the tail to read (from this seq), and whether to let go of it
/// afterwards (no writer holds it).
struct Prepared {
    id: SessionId,
    from_seq: Option<u64>,
    /// Where the round read the session's log to end: a tail read in pieces stops there (what
    /// was written since is the next round's, so one busy session cannot hold a round).
    until: u64,
    release: bool,
}

/// Why a round did not do all it set out to.
enum Missed {
    /// The round itself failed (the positions or the new sessions did not read): the next round
    /// is a sweep.
    Round(PersistenceError),
    /// Some sessions' own steps failed (a check, a tail read, a delivery), each with whether the
    /// round saw it created, and the first error; every other session's went through. A followed
    /// one is read again by the next sweep or its next wake-up; the others are carried to the
    /// next round. One log that keeps failing costs its own reads, not every round a sweep.
    Sessions(Vec<(SessionId, bool)>, PersistenceError),
}

impl From<PersistenceError> for Missed {
    fn from(error: PersistenceError) -> Missed {
        Missed::Round(error)
    }
}

impl Missed {
    /// The misses of two parts of one round as one: a failed round stays failed.
    fn and(self, other: Missed) -> Missed {
        match (self, other) {
            (Missed::Round(error), _) | (_, Missed::Round(error)) => Missed::Round(error),
            (Missed::Sessions(mut sessions, first), Missed::Sessions(more, _)) => {
                sessions.extend(more);
                Missed::Sessions(sessions, first)
            }
        }
    }

    /// `first`'s misses and `then`'s.
    fn both(first: Result<(), Missed>, then: Result<(), Missed>) -> Result<(), Missed> {
        match (first, then) {
            (Ok(()), then) => then,
            (Err(missed), Ok(())) => Err(missed),
            (Err(missed), Err(more)) => Err(missed.and(more)),
        }
    }
}

/// A followed session's fold and the client values its subscribers last got.
struct Fold {
    fold: RestoreFold,
    values: serde_json::Map<String, serde_json::Value>,
}

impl Follower {
    /// Starts following the store behind `persistence`, if it has a change signal; `Ok(None)`
    /// when it has none (only this gateway writes it) or `config` turns following off.
    pub(crate) fn start(
        config: &FollowConfig,
        hub: Arc<Hub>,
        store: Arc<SessionStore>,
        persistence: Arc<dyn SessionPersistence>,
        registry: Arc<ProjectionRegistry>,
    ) -> Result<Option<Follower>, PersistenceError> {
        if !config.enabled {
            return Ok(None);
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            tracing::warn!("not following the store: the gateway was built outside a Tokio runtime");
            return Ok(None);
        };
        let wakes = Arc::new(Wakes::default());
        // The signal is what says the store is shared; without it (off by configuration) the
        // sweeps still need one, so it is started and dropped at once.
        let Some(watch) = persistence.watch(&config.watch, Arc::clone(&wakes) as Arc<dyn ChangeSink>)? else {
            return Ok(None);
        };
        let watch = if config.signal {
            Some(watch)
        } else {
            drop(watch);
            None
        };
        // A new client may watch a session the follower did not read while nobody did.
        let woken = Arc::downgrade(&wakes);
        hub.set_on_subscribe(move || {
            if let Some(wakes) = woken.upgrade() {
                // A sweep, not a rescan: every connecting client would otherwise cost a read of
                // every stored session's position.
                wakes.sweep_soon();
            }
        });
        let cancel = CancellationToken::new();
        let context =
            Context { wakes, hub, store, persistence, registry, folds: Mutex::default(), owed: Mutex::default() };
        runtime.spawn(run(context, config.sweep_interval, config.round_gap, cancel.clone()));
        Ok(Some(Follower { cancel, _watch: watch }))
    }
}

fn now_ms(store: &SessionStore) -> u64 {
    u64::try_from(store.clock().now_ms()).unwrap_or(0)
}

async fn run(context: Context, sweep_interval: Duration, round_gap: Duration, cancel: CancellationToken) {
    let wakes = Arc::clone(&context.wakes);
    let mut poll = tokio::time::interval(sweep_interval);
    poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut created_from = now_ms(&context.store).saturating_sub(CREATED_SLACK_MS);
    let mut last_round: Option<tokio::time::Instant> = None;
    loop {
        let woken = tokio::select! {
            () = cancel.cancelled() => return,
            () = wakes.notify.notified() => true,
            _ = poll.tick() => {
                wakes.pending.lock().sweep = true;
                false
            }
        };
        // Only signals pace each other (the safety poll's sweep does not hold back the signal
        // after it): a signal soon after the last one's round waits out the gap, and the wake-ups
        // meanwhile join it.
        if woken {
            if let Some(due) = last_round.and_then(|last| last.checked_add(round_gap)) {
                tokio::select! {
                    () = cancel.cancelled() => return,
                    () = tokio::time::sleep_until(due) => {}
                }
            }
            last_round = Some(tokio::time::Instant::now());
        }
        let round = std::mem::take(&mut *wakes.pending.lock());
        // What a failed round hands on to the next: a sweep could not find every woken session.
        let woken = round.sessions.clone();
        let outcome = if round.sweep {
            let started = now_ms(&context.store);
            let swept = context.sweep(created_from, round.sessions, round.rescan, &cancel).await;
            // Sessions whose own steps failed are carried below: the window moves on.
            if !matches!(swept, Err(Missed::Round(_))) {
                created_from = started.saturating_sub(CREATED_SLACK_MS);
            }
            swept
        } else {
            context.wake(round.sessions, round.appended, &cancel).await
        };
        let (lost, sweep) = match outcome {
            Ok(()) => continue,
            Err(_) if cancel.is_cancelled() => return,
            Err(Missed::Round(error)) => {
                // The store is unreachable or failing: the next sweep tries again, with this
                // round's wake-ups.
                tracing::warn!(%error, "following the store: a round failed; the next sweep retries");
                wakes.pending.lock().rescan |= round.rescan;
                (woken.into_iter().collect::<Vec<_>>(), true)
            }
            Err(Missed::Sessions(sessions, error)) => {
                tracing::warn!(
                    %error,
                    sessions = sessions.len(),
                    "following the store: some sessions did not read; their next round retries"
                );
                (sessions, false)
            }
        };
        // Only those a sweep cannot find: not followed and not live here (a followed session
        // whose own read keeps failing is not carried from round to round).
        let lost: Vec<(SessionId, bool)> = lost
            .into_iter()
            .filter(|(id, _)| !context.hub.is_local(id) && context.hub.remote_last_seq(id).is_none())
            .collect();
        wakes.carry(lost, sweep);
    }
}

impl Context {
    /// Every followed session, every session live here, every session created since
    /// `created_from`, and the sessions woken since the last round (`woken`, each with whether
    /// one of its wake-ups was its creation): a sweep finds no session on its own that was created
    /// before its window and is followed by nobody here, so a wake-up that joins it is read in it.
    /// A `rescan` (after the signal (re)connected) reads every stored session's position too, so a
    /// session another writer took while this gateway could not hear it is followed however long
    /// it has been idle since. (One taken later without a write, a resume that stores nothing,
    /// sends no signal: it is followed from its first write.)
    async fn sweep(
        &self,
        created_from: u64,
        woken: HashMap<SessionId, bool>,
        rescan: bool,
        cancel: &CancellationToken,
    ) -> Result<(), Missed> {
        let mut sessions: HashMap<SessionId, bool> = self.hub.remote_ids().into_iter().map(|id| (id, false)).collect();
        // Folds of sessions no longer followed (written here since, or let go of) go.
        self.folds.lock().retain(|id, _| sessions.contains_key(id));
        self.owed.lock().retain(|id| sessions.contains_key(id));
        for session in self.store.list() {
            sessions.insert(session.id().clone(), false);
        }
        // A rescan reads every stored session (one read: a session created meanwhile is not
        // taken for an old one); those older than the window are followed, if another writer
        // holds them, from where they stand, their headers read only then.
        let since = if rescan { 0 } else { created_from };
        let mut headers = HashMap::new();
        for stored in self.persistence.created_since(since, cancel).await?.headers {
            let id = stored.header.id.clone();
            let created = stored.header.created_at >= created_from;
            sessions.entry(id.clone()).or_insert(created);
            if created {
                headers.insert(id, stored.header);
            }
        }
        for (id, created) in woken {
            *sessions.entry(id).or_default() |= created;
        }
        self.reconcile(sessions, headers, cancel).await
    }

    /// The sessions a signal woke: a followed one whose wake-ups were all appends has its tail
    /// read at once (the signal's next seq says there is one; the read says what it holds), the
    /// others their positions first.
    async fn wake(
        &self,
        mut sessions: HashMap<SessionId, bool>,
        appended: HashMap<SessionId, u64>,
        cancel: &CancellationToken,
    ) -> Result<(), Missed> {
        let mut tails = Vec::new();
        for (id, next_seq) in appended {
            if self.hub.remote_last_seq(&id).is_some() && sessions.remove(&id).is_some() {
                tails.push(SessionPosition { id, next_seq, held: None });
            }
        }
        let work = tails.into_iter().map(|position| (position, false, None)).collect();
        let tails = self.bring_up_all(work, cancel).await;
        Missed::both(tails, self.reconcile(sessions, HashMap::new(), cancel).await)
    }

    /// Reads where each session stands and brings the hub up to it.
    async fn reconcile(
        &self,
        sessions: HashMap<SessionId, bool>,
        mut headers: HashMap<SessionId, Arc<SessionHeader>>,
        cancel: &CancellationToken,
    ) -> Result<(), Missed> {
        if sessions.is_empty() {
            return Ok(());
        }
        let ids: Vec<SessionId> = sessions.keys().cloned().collect();
        let positions = self.persistence.positions(&ids, cancel).await?;
        let mut seen = HashSet::with_capacity(positions.len());
        let work: Vec<_> = positions
            .into_iter()
            .filter(|position| seen.insert(position.id.clone()))
            .map(|position| {
                let created = sessions.get(&position.id).copied().unwrap_or(false);
                let header = headers.remove(&position.id);
                (position, created, header)
            })
            .collect();
        self.bring_up_all(work, cancel).await
    }

    /// Brings the hub up to each session of `work`: each session's checks ([`Self::prepare`]),
    /// then the tails to read, [`TAIL_READS`] sessions' in one
    /// [`read_from_many`](SessionPersistence::read_from_many) (one round trip on a database
    /// server), then each tail delivered, then the sessions no writer holds let go of.
    async fn bring_up_all(
        &self,
        work: Vec<(SessionPosition, bool, Option<Arc<SessionHeader>>)>,
        cancel: &CancellationToken,
    ) -> Result<(), Missed> {
        let mut first_error = None;
        let mut missed = Vec::new();
        let mut failed = |id: SessionId, created: bool, error: PersistenceError| {
            tracing::debug!(session = %id, %error, "following the store: one session's round failed");
            missed.push((id, created));
            first_error.get_or_insert(error);
        };
        let mut prepared = Vec::with_capacity(work.len());
        let mut checks = futures::stream::iter(work)
            .map(|(position, created, header)| async move {
                let id = position.id.clone();
                (id, created, self.prepare(position, created, header, cancel).await)
            })
            .buffer_unordered(TAIL_READS);
        while let Some((id, created, outcome)) = checks.next().await {
            match outcome {
                Ok(Some(prepared_one)) => prepared.push(prepared_one),
                Ok(None) => {}
                Err(error) => failed(id, created, error),
            }
        }
        drop(checks);
        let mut reads: VecDeque<(SessionId, u64)> =
            prepared.iter().filter_map(|one| Some((one.id.clone(), one.from_seq?))).collect();
        let ends: HashMap<SessionId, u64> = prepared.iter().map(|one| (one.id.clone(), one.until)).collect();
        // Tails are read [`TAIL_READS`] at a time, each up to [`TAIL_LIMIT`], and delivered at
        // most `TAIL_READS` at once: a session whose clients are slow to take its tail holds one
        // place, the next tails are read as places free up, and a tail cut at the limit is read
        // on from where it was cut once its piece is delivered (behind the others waiting).
        let mut answered = VecDeque::new();
        let mut delivering = futures::stream::FuturesUnordered::new();
        // A session whose tail failed stays followed: the next sweep reads it again. Unless its
        // log is damaged there (no read will get past it): once no writer holds it, it is let go
        // of all the same, its clients keeping what they got.
        let mut unread = HashSet::new();
        loop {
            while delivering.len() < TAIL_READS {
                if answered.is_empty() && !reads.is_empty() {
                    let chunk: Vec<_> = reads.drain(..reads.len().min(TAIL_READS)).collect();
                    let mut answers = self.persistence.read_from_many(&chunk, TAIL_LIMIT, cancel).await.into_iter();
                    for (id, from_seq) in chunk {
                        let answer = answers.next().unwrap_or_else(|| {
                            Err(PersistenceError::invalid_input("a batched tail read gave fewer answers than reads"))
                        });
                        answered.push_back((id, from_seq, answer));
                    }
                }
                let Some((id, from_seq, tail)) = answered.pop_front() else { break };
                delivering.push(async move {
                    let delivered = match tail {
                        Ok(tail) => self.deliver_piece(&id, from_seq, &tail, cancel).await,
                        Err(error) => Err(error),
                    };
                    (id, delivered)
                });
            }
            let Some((id, outcome)) = delivering.next().await else { break };
            match outcome {
                Ok(Some(next)) if next < ends.get(&id).copied().unwrap_or(0) => reads.push_back((id, next)),
                Ok(_) => {}
                Err(error) => {
                    if !matches!(error, PersistenceError::Corrupt { .. } | PersistenceError::FormatUnsupported { .. }) {
                        unread.insert(id.clone());
                    }
                    failed(id, false, error);
                }
            }
        }
        for one in prepared.into_iter().filter(|one| one.release && !unread.contains(&one.id)) {
            if self.hub.unfollow_remote(&one.id) {
                self.folds.lock().remove(&one.id);
            }
        }
        first_error.map_or(Ok(()), |error| Err(Missed::Sessions(missed, error)))
    }

    /// One session's checks: a fence check if it is live here (`None` then), else the tail it
    /// needs (following it first if the hub does not yet), and whether to let go of it once that
    /// is delivered (no writer holds it).
    async fn prepare(
        &self,
        position: SessionPosition,
        created: bool,
        header: Option<Arc<SessionHeader>>,
        cancel: &CancellationToken,
    ) -> Result<Option<Prepared>, PersistenceError> {
        let id = &position.id;
        if self.hub.is_local(id) {
            // Written here now (resumed here): a fold from when it was followed is stale.
            self.folds.lock().remove(id);
            self.check_fence(&position, cancel).await?;
            return Ok(None);
        }
        let last_seq = match self.hub.remote_last_seq(id) {
            Some(last_seq) => last_seq,
            None => {
                // Followed only while another writer is known to hold it. Not live anywhere:
                // nothing to follow (a cold write, a release we did not see). Unknown: this
                // gateway's own lease still holds it (a session being let go of here, its hub
                // entry gone, its lease not yet ended, or kept by a release whose last write
                // failed), and the store cannot see past it, or a probe failed: it is carried to
                // the next round, which reads it again.
                match position.held {
                    Some(true) => {}
                    Some(false) => return Ok(None),
                    None => {
                        self.wakes.carry(vec![(id.clone(), created)], false);
                        return Ok(None);
                    }
                }
                let header = match header {
                    Some(header) => header,
                    None => match self.persistence.stored_header(id, cancel).await? {
                        Some(stored) => stored.header,
                        None => return Ok(None),
                    },
                };
                let baseline =
                    if created && position.next_seq <= REPLAY_CREATED_MAX { -1 } else { position.next_seq as i64 - 1 };
                // Replayed from its start, its tail says when a turn runs; followed from further
                // in, whether one runs now is read from the end of its log.
                let running = baseline >= 0
                    && match self.ends_in_turn(id, position.next_seq, cancel).await {
                        Ok(running) => running,
                        Err(PersistenceError::Cancelled) => return Err(PersistenceError::Cancelled),
                        // A log that does not read is followed all the same (its tail read says
                        // why, if anyone watches it); only its first status may be wrong.
                        Err(error) => {
                            tracing::debug!(session = %id, %error, "following: the log's turn state does not read");
                            false
                        }
                    };
                // Its baseline is one more frame in each mux queue that sees it.
                wait_for_room(self.hub.mux_queues_seeing(header.owner.as_deref()), 1, cancel).await;
                if !self.hub.follow_remote(header, baseline, running) {
                    // It became live here, or another round follows it already.
                    return Ok(None);
                }
                // A fold from an earlier time it was followed (it was then written here, and
                // let go of before a round saw it) is behind this baseline.
                self.folds.lock().remove(id);
                baseline
            }
        };
        // Nobody watches it here: its tail waits (a subscription wakes a sweep that reads it).
        let from_seq =
            (position.next_seq as i64 > last_seq + 1 && self.hub.watched(id)).then_some((last_seq + 1) as u64);
        let until = position.next_seq;
        Ok(Some(Prepared { id: position.id, from_seq, until, release: position.held == Some(false) }))
    }

    /// Whether `id`'s stored log, up to `next_seq`, ends inside a turn ([`ends_in_turn`]).
    async fn ends_in_turn(
        &self,
        id: &SessionId,
        next_seq: u64,
        cancel: &CancellationToken,
    ) -> Result<bool, PersistenceError> {
        ends_in_turn(&*self.persistence, id, next_seq, cancel).await
    }

    /// Reads `id`'s stored events from `from_seq` and delivers them, a piece of at most
    /// [`TAIL_LIMIT`] at a time ([`Self::deliver_piece`]), up to `until` at least (where the
    /// round found the log's end; what comes after is the next round's).
    async fn read_tail(
        &self,
        id: &SessionId,
        mut from_seq: u64,
        until: u64,
        cancel: &CancellationToken,
    ) -> Result<(), PersistenceError> {
        loop {
            let piece = stored::read_piece(&*self.persistence, id, from_seq, TAIL_LIMIT, cancel).await?;
            match self.deliver_piece(id, from_seq, &piece, cancel).await? {
                Some(next) if next < until => from_seq = next,
                _ => return Ok(()),
            }
        }
    }

    /// Delivers one piece of `id`'s tail ([`Self::deliver_tail`]), and says where the tail goes
    /// on when the piece was cut at its read's limit and went out whole.
    async fn deliver_piece(
        &self,
        id: &SessionId,
        from_seq: u64,
        piece: &session_persistence::Suffix,
        cancel: &CancellationToken,
    ) -> Result<Option<u64>, PersistenceError> {
        self.deliver_tail(id, from_seq, &piece.events, cancel).await?;
        let last = piece.events.last().map(|event| event.seq);
        let whole = last.is_some() && self.hub.remote_last_seq(id) == last.map(|seq| seq as i64);
        Ok(last.filter(|_| piece.cut && whole).map(|seq| seq + 1))
    }

    /// Hands `id`'s stored events from `from_seq` (`tail`) to the hub, then folds what went out
    /// into the session's projections and sends the client values that changed.
    async fn deliver_tail(
        &self,
        id: &SessionId,
        from_seq: u64,
        tail: &[Arc<SessionEvent>],
        cancel: &CancellationToken,
    ) -> Result<(), PersistenceError> {
        let mut last_seq = from_seq as i64 - 1;
        for chunk in tail.chunks(TAIL_CHUNK) {
            self.wait_for_room(id, chunk.len(), cancel).await;
            match self.hub.deliver_remote(id, chunk) {
                Delivered::UpTo(delivered) => last_seq = delivered,
                Delivered::NotFollowed => return Ok(()),
            }
        }
        if last_seq + 1 < from_seq as i64 + tail.len() as i64 {
            tracing::debug!(session = %id, last_seq, "a followed session's tail had a gap; the next sweep reads it again");
        }
        let has_fold = self.folds.lock().contains_key(id);
        if !has_fold {
            match self.seed(id, from_seq, cancel).await {
                Ok(Some(fold)) => drop(self.folds.lock().insert(id.clone(), fold)),
                Ok(None) => return Ok(()),
                Err(error) => {
                    // The hub sent this tail: the values it changed are owed to the next seed.
                    self.owed.lock().insert(id.clone());
                    return Err(error);
                }
            }
        }
        let changed = {
            let mut folds = self.folds.lock();
            let Some(fold) = folds.get_mut(id) else { return Ok(()) };
            for event in tail.iter().filter(|event| event.seq as i64 <= last_seq) {
                if event.seq == fold.fold.next_seq() && fold.fold.apply(event).is_err() {
                    break;
                }
            }
            match fold.fold.snapshot() {
                Ok(snapshot) => {
                    let changed: Vec<(String, serde_json::Value)> = snapshot
                        .values
                        .iter()
                        .filter(|(key, value)| fold.values.get(*key) != Some(*value))
                        .map(|(key, value)| (key.clone(), value.clone()))
                        .collect();
                    fold.values = snapshot.values;
                    changed
                }
                Err(_) => Vec::new(),
            }
        };
        if let Some(seq) = u64::try_from(last_seq).ok().filter(|_| !changed.is_empty()) {
            // One frame per changed value: after a tail that filled a queue, they wait for room
            // as its events did.
            self.wait_for_room(id, changed.len(), cancel).await;
            self.hub.project_remote(id, &changed, seq);
        }
        Ok(())
    }

    /// A followed session's fold at `from_seq`: its stored events before it folded quietly, the
    /// values they give its baseline (`None` when they do not fold). After a seed that failed
    /// once the hub had sent a tail, the baseline is empty, so every value goes out.
    async fn seed(
        &self,
        id: &SessionId,
        from_seq: u64,
        cancel: &CancellationToken,
    ) -> Result<Option<Fold>, PersistenceError> {
        let mut fold = Fold { fold: self.registry.begin_full_restore(), values: serde_json::Map::new() };
        if from_seq > 0 {
            // Its stored events before the tail, folded as they are read, a piece at a time,
            // from the store: never from a copy still bound here (fenced, not yet released),
            // whose events past what it stored are not the log's.
            let mut failed = false;
            read_pieces(&*self.persistence, id, 0, from_seq, cancel, |events| {
                for event in events {
                    // An event that does not fold (the log is not contiguous): no projections.
                    failed = failed || fold.fold.apply(event).is_err();
                }
                Ok(())
            })
            .await?;
            if failed {
                return Ok(None);
            }
            if let Ok(snapshot) = fold.fold.snapshot() {
                fold.values = snapshot.values;
            }
        }
        if self.owed.lock().remove(id) {
            fold.values.clear();
        }
        Ok(Some(fold))
    }

    /// Waits (up to [`room::ROOM_WAIT`]) until every mux queue that sees `id` has room for `n` more
    /// frames. A client that stays behind that long is then cut by the hub's overflow rule, as
    /// for a session live here; one that keeps up never is, however long the tail.
    async fn wait_for_room(&self, id: &SessionId, n: usize, cancel: &CancellationToken) {
        wait_for_room(self.hub.mux_queues_of(id), n, cancel).await;
    }

    /// A session live here is fenced once its write met another writer's, or once the store
    /// holds more of it than this copy does (no write of this copy can explain that). Then its
    /// subscribers get the baseline of what this gateway stored, and the store's events.
    async fn check_fence(
        &self,
        position: &SessionPosition,
        cancel: &CancellationToken,
    ) -> Result<(), PersistenceError> {
        let id = &position.id;
        // The session is not held past this step: a strong reference kept across the reads
        // below would keep a released copy bound in the persistence, and a resume would read it.
        // Its header says which copy this is: the hub is switched only while it holds this one.
        let (fenced, header) = match self.store.get(id) {
            Some(session) => (
                self.persistence.fence(id).is_some() || position.next_seq > session.len(),
                Arc::clone(session.header()),
            ),
            None => return Ok(()),
        };
        if !fenced {
            return Ok(());
        }
        // Not fenced by a write of its own yet: fenced now (a copy never written, by the binding
        // its first write would run), so it holds no lease past this round (it may never write
        // again). Not behind the store after all, read again under its locks: left alone. When
        // that read fails, the hub still switches on what this round read, and the copy's next
        // write meets the fence.
        if self.persistence.fence(id).is_none() {
            match self.persistence.fence_if_overtaken(id, cancel).await {
                Ok(true) => {}
                Ok(false) => return Ok(()),
                Err(error) => {
                    tracing::debug!(session = %id, %error, "cannot fence a live copy another writer took over");
                }
            }
        }
        let durable = self.persistence.durable_len(id).unwrap_or(0).min(position.next_seq);
        // The new baseline is one more frame in each mux queue that sees the session.
        self.wait_for_room(id, 1, cancel).await;
        // Whether a turn runs at what this gateway stored: one the copy started (or ended) past
        // it is not the log's.
        let running = match self.ends_in_turn(id, durable, cancel).await {
            Ok(running) => Some(running),
            Err(PersistenceError::Cancelled) => return Err(PersistenceError::Cancelled),
            Err(error) => {
                tracing::debug!(session = %id, %error, "a fenced copy's stored turn state does not read");
                None
            }
        };
        if self.hub.fence_local(&header, durable as i64 - 1, running) {
            self.folds.lock().remove(id);
            // Its clients hold the values the copy's own events gave, which the store's log
            // may not: every value goes out again, folded from the stored log.
            self.owed.lock().insert(id.clone());
            tracing::info!(session = %id, durable, "another writer moved this session on; following it from the store");
            self.read_tail(id, durable, position.next_seq, cancel).await?;
        }
        Ok(())
    }
}
