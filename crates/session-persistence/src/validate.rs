//! Read-side validation shared by every cold read: the events a backend decodes are imported
//! from the reference's legacy shapes and checked once, as they stream past, and the crash
//! closers are computed on the way.

use std::{
    path::PathBuf,
    sync::{
        Arc, OnceLock,
        atomic::{AtomicUsize, Ordering},
    },
};

use session_core::{
    KnownTypes, LegacyImport, RepairScan, SessionEvent, SessionHeader, SessionId, StorableRule, SurfaceState,
};

use crate::{
    backend::{Backend, PrefetchedLog, ScanSink},
    error::{CorruptKind, Location, PersistenceError, Result},
    threads::spawn_helper,
};

/// Imports each event from the legacy shapes, validates it and forwards it to `inner`; tracks
/// what repair needs.
///
/// Every cold read (`inspect`, the streamed reads, `read_from`, `load`, the adoption of a stored
/// log by a live session or an append) goes through this sink, so each sees the same current view
/// of a legacy log, and the closers are computed over that view.
pub(crate) struct ValidatingSink<'a> {
    id: SessionId,
    backend: &'a dyn Backend,
    path: Option<PathBuf>,
    known: &'a KnownTypes,
    legacy: LegacyImport,
    surface: SurfaceState,
    repair: RepairScan,
    last: Option<(u64, i64)>,
    /// Set when the stream starts past seq 0 (a seek read): the surface rules and the crash
    /// closers need the whole prefix, so they are skipped, as the reference's `readFrom` skips them.
    suffix_only: bool,
    /// A seek read met an event in a legacy shape: importing it may need the prefix (a replacing
    /// `tool/result` inherits its target's id), so the read stops and starts over from seq 0
    /// (reference 01 §3.7).
    needs_prefix: bool,
    pub(crate) inner: &'a mut (dyn ScanSink + Send),
}

impl<'a> ValidatingSink<'a> {
    pub(crate) fn new(
        id: SessionId,
        backend: &'a dyn Backend,
        known: &'a KnownTypes,
        inner: &'a mut (dyn ScanSink + Send),
    ) -> Self {
        ValidatingSink {
            legacy: LegacyImport::new(id.clone()),
            id,
            backend,
            path: None,
            known,
            surface: SurfaceState::default(),
            repair: RepairScan::default(),
            last: None,
            suffix_only: false,
            needs_prefix: false,
            inner,
        }
    }

    fn location(&self) -> Location {
        match &self.path {
            Some(path) => Location::file(path.clone()),
            None => Location::Session { id: self.id.clone() },
        }
    }

    fn unsupported(&self, message: String) -> PersistenceError {
        let message = match &self.path {
            Some(path) => format!("{message} (raw log: {})", path.display()),
            None => message,
        };
        PersistenceError::FormatUnsupported { id: self.id.clone(), message, location: Some(self.location()) }
    }

    fn invalid(&self, detail: String) -> PersistenceError {
        PersistenceError::corrupt(
            CorruptKind::Validation,
            self.location(),
            format!("stored session \"{}\" failed validation: {detail}", self.id),
        )
    }

    /// The closers that balance what streamed past, continuing its seqs (none for a suffix).
    pub(crate) fn closers(&self) -> Vec<SessionEvent> {
        match self.last {
            Some((seq, time)) if !self.suffix_only => self.repair.closers(seq, time),
            _ => Vec::new(),
        }
    }

    /// The retired vocabulary no import exists for (reference 01 §1.4), refused before the
    /// legacy import as the reference does.
    fn check_vocabulary(&self, event: &SessionEvent) -> Result<()> {
        if session_core::is_retired(&event.kind) {
            return Err(self.unsupported(format!(
                "session \"{}\" contains unsupported legacy {} event at seq {}",
                self.id, event.kind, event.seq
            )));
        }
        Ok(())
    }

    /// Checks an event in its current shape.
    fn check(&mut self, event: &SessionEvent) -> Result<()> {
        // The rules of the storable check that apply to an event in its current shape (the
        // unknown-type check runs after the import: a `steering/message` reads as the
        // `user/message` it became); the writers run the same check before they store anything.
        session_core::check_current_shape(event, self.known).map_err(|refused| match refused.rule {
            StorableRule::UnknownType => self.unsupported(format!(
                "session \"{}\" contains event type \"{}\" (seq {}) unknown to this harness and not marked ignorable; refusing to interpret the log — it was likely written by a newer harness",
                self.id, event.kind, event.seq
            )),
            _ => self.invalid(refused.message),
        })?;
        // The surface rules include the marker rules (`check_markers`).
        if !self.suffix_only {
            self.surface.apply(event).map_err(|err| self.invalid(err))?;
        }
        Ok(())
    }
}

impl ScanSink for ValidatingSink<'_> {
    fn header(&mut self, header: &Arc<SessionHeader>) -> Result<()> {
        if header.id != self.id {
            return Err(PersistenceError::corrupt(
                CorruptKind::Identity,
                self.location(),
                format!(
                    "stored session identity mismatch: requested \"{}\", header contains \"{}\"",
                    self.id, header.id
                ),
            ));
        }
        self.path = self.backend.locate(header);
        // The rules without the size bounds: a log written before the bounds still reads.
        header.validate_stored(&self.id).map_err(|err| self.invalid(err.message))?;
        self.inner.header(header)
    }

    fn restart(&mut self) -> bool {
        self.legacy = LegacyImport::new(self.id.clone());
        self.surface = SurfaceState::default();
        self.repair = RepairScan::default();
        self.last = None;
        self.suffix_only = false;
        self.needs_prefix = false;
        self.inner.restart()
    }

    fn until_seq(&self) -> Option<u64> {
        self.inner.until_seq()
    }

    fn event(&mut self, event: Arc<SessionEvent>) -> Result<()> {
        if self.last.is_none() && event.seq != 0 {
            self.suffix_only = true;
        }
        self.check_vocabulary(&event)?;
        let imported = self.legacy.import(&event);
        if self.suffix_only && !matches!(imported, Ok(None)) {
            self.needs_prefix = true;
            return Err(PersistenceError::Cancelled);
        }
        let event = match imported {
            Ok(None) => event,
            Ok(Some(imported)) => Arc::new(imported),
            Err(message) => return Err(self.invalid(message)),
        };
        self.check(&event)?;
        if !self.suffix_only {
            self.repair.observe(&event);
        }
        self.last = Some((event.seq, event.time));
        self.inner.event(event)
    }
}

/// When a cold read may use helper threads: a validating thread next to the decoding one, and,
/// for a compressed log, a thread that decompresses ahead (see [`ScanSink::read_ahead`]), or two
/// where the cores are free for them (see [`ScanSink::read_ahead_decoders`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ReadThreads {
    /// Helpers only while few cold reads run in the process: fewer than half as many as there
    /// are cores. One read then uses two to four threads; reads that already run side by side
    /// (a listing reads several children at once) each stay on one thread, which costs less CPU
    /// in all than threads handing events to each other.
    #[default]
    Auto,
    /// Every long read uses helper threads.
    Always,
    /// Every read runs on the calling thread only.
    Never,
}

/// Cold reads running in this process, for [`ReadThreads::Auto`]. Cores are a process-wide
/// resource, so the count spans every coordinator.
static READS_IN_FLIGHT: AtomicUsize = AtomicUsize::new(0);

/// Holds one place in [`READS_IN_FLIGHT`].
struct InFlight;

impl InFlight {
    fn enter() -> (InFlight, usize) {
        (InFlight, READS_IN_FLIGHT.fetch_add(1, Ordering::Relaxed))
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        READS_IN_FLIGHT.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Cores per running read before a read decompresses on a second thread. A read ahead already
/// runs three threads (decompressing, parsing, validating); with fewer cores free they keep every
/// core busy, and a second decoder only adds hand-overs (measured on two cores: a 100,000-event
/// `inspect_stream` 71 -> 79 ms, `docs/benchmarks.md`).
const CORES_FOR_TWO_DECODERS: usize = 4;

/// The cores this process may use.
fn cores() -> usize {
    static CORES: OnceLock<usize> = OnceLock::new();
    *CORES.get_or_init(|| std::thread::available_parallelism().map_or(1, usize::from))
}

impl ReadThreads {
    /// Whether a read that starts with `others` reads already running may use helpers.
    fn allows_helpers(self, others: usize) -> bool {
        match self {
            ReadThreads::Always => true,
            ReadThreads::Never => false,
            ReadThreads::Auto => cores() > 1 && others * 2 < cores(),
        }
    }

    /// How many threads may decompress ahead for a read that starts with `others` reads already
    /// running: two while each running read has [`CORES_FOR_TWO_DECODERS`] cores, else one.
    fn decoders(self, others: usize) -> usize {
        let free = self.allows_helpers(others) && cores() >= CORES_FOR_TWO_DECODERS * (others + 1);
        if free { 2 } else { 1 }
    }
}

/// Events relayed in one message between the scanning and the validating thread.
const RELAY_BATCH: usize = 256;

enum Relayed {
    Header(Arc<SessionHeader>),
    Events(Vec<Arc<SessionEvent>>),
    Restart,
}

/// Scans `id` (the whole log when `from_seq` is 0, else through [`Backend::scan_from`]),
/// validating what the backend decodes and forwarding it to `inner`, and returns the scan's
/// outcome with the closers that balance it (none when the backend streamed a suffix only).
///
/// When `threads` allows helpers, a long log is validated on a second thread while the backend
/// keeps decoding (and may decompress ahead on a third, or a third and a fourth), so one cold
/// read can use two cores or more. A
/// log shorter than one relay batch is handled inline without a thread. Memory stays bounded:
/// at most a few batches are in flight.
pub(crate) fn scan_validated(
    backend: &dyn Backend,
    id: &SessionId,
    from_seq: u64,
    known: &KnownTypes,
    threads: ReadThreads,
    cancel: &tokio_util::sync::CancellationToken,
    inner: &mut (dyn ScanSink + Send),
) -> Result<Option<(crate::backend::ScanOutcome, Vec<SessionEvent>)>> {
    validated(backend, id, Source::From(from_seq), known, threads, cancel, inner)
}

/// Where a validated read takes its events from.
#[derive(Clone, Copy)]
pub(crate) enum Source<'a> {
    /// The backend's scan from a seq.
    From(u64),
    /// A whole log that [`Backend::prefetch`] read ahead: the same validation, closers and
    /// answer as its scan, from the events in memory.
    Prefetched(&'a PrefetchedLog),
}

/// [`scan_validated`] from any [`Source`].
pub(crate) fn validated(
    backend: &dyn Backend,
    id: &SessionId,
    source: Source<'_>,
    known: &KnownTypes,
    threads: ReadThreads,
    cancel: &tokio_util::sync::CancellationToken,
    inner: &mut (dyn ScanSink + Send),
) -> Result<Option<(crate::backend::ScanOutcome, Vec<SessionEvent>)>> {
    let (_in_flight, others) = InFlight::enter();
    let helpers = threads.allows_helpers(others);
    let decoders = threads.decoders(others);
    let mut validating = ValidatingSink::new(id.clone(), backend, known, inner);
    let until = validating.until_seq();
    let run = |validating: &mut ValidatingSink<'_>, source: Source<'_>| {
        std::thread::scope(|scope| {
            let mut relay = Relay {
                validating: Some(validating),
                helpers,
                decoders,
                until,
                scope,
                sender: None,
                worker: None,
                batch: Vec::new(),
                returned: None,
            };
            let scanned = match source {
                Source::Prefetched(log) => log.replay(&mut relay),
                Source::From(0) => backend.scan(id, cancel, &mut relay),
                Source::From(from_seq) => backend.scan_from(id, from_seq, cancel, &mut relay),
            };
            match (scanned, relay.finish()) {
                (_, Err(error)) => Err(error),
                (scanned, Ok(())) => scanned,
            }
        })
    };
    let mut scanned = run(&mut validating, source);
    if validating.needs_prefix && !cancel.is_cancelled() {
        // A seek read whose suffix needs the legacy prefix reads the prefix: the whole log, from
        // which the caller keeps the suffix.
        if !validating.restart() {
            return Err(PersistenceError::invalid_input(format!(
                "the read of session \"{id}\" must start over from seq 0 for its legacy records, and its sink cannot"
            )));
        }
        scanned = run(&mut validating, Source::From(0));
    }
    Ok(scanned?.map(|outcome| (outcome, validating.closers())))
}

/// The scan-side sink of [`scan_validated`]: validates inline until the log proves long, then
/// hands batches to a validating thread.
struct Relay<'scope, 'env, 'a> {
    /// Present until the validating thread takes it.
    validating: Option<&'env mut ValidatingSink<'a>>,
    /// Whether this read may use helper threads.
    helpers: bool,
    /// How many of them may decompress ahead.
    decoders: usize,
    /// The validated sink's [`until_seq`](ScanSink::until_seq), asked before the validator may
    /// move to its thread.
    until: Option<u64>,
    scope: &'scope std::thread::Scope<'scope, 'env>,
    sender: Option<std::sync::mpsc::SyncSender<Relayed>>,
    worker: Option<std::thread::ScopedJoinHandle<'scope, Result<()>>>,
    batch: Vec<Arc<SessionEvent>>,
    /// Batches the validating thread is done with, back on this thread to be dropped. The events
    /// were allocated here: freed here too, they never take the allocator's lock of this thread's
    /// arena from the other thread, which (with glibc's allocator) made the two threads contend
    /// on every event and left a long read waiting a third of its time.
    returned: Option<std::sync::mpsc::Receiver<Vec<Arc<SessionEvent>>>>,
}

/// A log changed under a read whose sink cannot start over.
fn cannot_restart() -> PersistenceError {
    PersistenceError::invalid_input("the log changed while it was being read and the read cannot start over")
}

/// The error a scan sees once the validating thread stopped; the thread's own error replaces it.
fn relay_stopped() -> PersistenceError {
    PersistenceError::invalid_input("the validating side of a cold read stopped")
}

impl<'scope, 'env, 'a> Relay<'scope, 'env, 'a>
where
    'a: 'env,
{
    fn send(&mut self, message: Relayed) -> Result<()> {
        if self.sender.is_none() {
            let (sender, receiver) = std::sync::mpsc::sync_channel::<Relayed>(4);
            let (giver, returned) = std::sync::mpsc::channel();
            // The validator goes to the thread once it runs: one the system refuses leaves it here.
            let (hand, handed) = std::sync::mpsc::sync_channel::<&'env mut ValidatingSink<'a>>(1);
            let started = spawn_helper(self.scope, move || {
                let Ok(validating) = handed.recv() else { return Ok(()) };
                for message in receiver {
                    match message {
                        Relayed::Header(header) => validating.header(&header)?,
                        Relayed::Events(events) => {
                            for event in &events {
                                validating.event(Arc::clone(event))?;
                            }
                            // Freed by the scanning thread (see `Relay::returned`); once it is
                            // gone, here.
                            let _ = giver.send(events);
                        }
                        Relayed::Restart => {
                            if !validating.restart() {
                                return Err(cannot_restart());
                            }
                        }
                    }
                }
                Ok(())
            });
            match started {
                Ok(worker) => {
                    // Invariant: `validating` is taken here only, the one time `sender` is still
                    // unset and a thread started.
                    let validating =
                        self.validating.take().expect("the validator is taken only when the thread starts");
                    // A thread gone already shows at the first send, and its join says why.
                    let _ = hand.send(validating);
                    self.worker = Some(worker);
                    self.returned = Some(returned);
                    self.sender = Some(sender);
                }
                Err(error) => {
                    tracing::debug!(%error, "no thread to validate on; validating on the reading thread");
                    self.helpers = false;
                    return self.validate_here(message);
                }
            }
        }
        // Invariant: the branch above sets `sender` if it was unset.
        let sender = self.sender.as_ref().expect("the sender exists once the thread started");
        sender.send(message).map_err(|_| relay_stopped())
    }

    /// `message` validated on this thread, which keeps the validator while no thread runs.
    fn validate_here(&mut self, message: Relayed) -> Result<()> {
        // Invariant: called only when the validating thread could not start, which leaves it here.
        let validating = self.validating.as_mut().expect("the validator stays here without a thread");
        match message {
            Relayed::Header(header) => validating.header(&header),
            Relayed::Events(events) => events.into_iter().try_for_each(|event| validating.event(event)),
            Relayed::Restart if validating.restart() => Ok(()),
            Relayed::Restart => Err(cannot_restart()),
        }
    }

    fn flush_batch(&mut self) -> Result<()> {
        // The next batch reuses a returned one's buffer; its events are freed here.
        let next = self.drop_returned().unwrap_or_default();
        let batch = std::mem::replace(&mut self.batch, next);
        self.send(Relayed::Events(batch))
    }

    /// Drops the batches the validating thread gave back, keeping one emptied buffer.
    fn drop_returned(&mut self) -> Option<Vec<Arc<SessionEvent>>> {
        let mut buffer = None;
        for mut batch in self.returned.iter().flat_map(|returned| returned.try_iter()) {
            batch.clear();
            buffer = Some(batch);
        }
        buffer
    }

    /// Delivers what is pending and waits for the validating side.
    fn finish(mut self) -> Result<()> {
        if let Some(validating) = self.validating.take() {
            for event in std::mem::take(&mut self.batch) {
                validating.event(event)?;
            }
            return Ok(());
        }
        let flushed = if self.batch.is_empty() { Ok(()) } else { self.flush_batch() };
        drop(self.sender.take());
        // Invariant: this path runs only when `validating` is gone, which `send` does as it
        // starts the worker.
        let worker = self.worker.take().expect("the thread exists once the validator was taken");
        let joined = worker.join();
        self.drop_returned();
        match joined {
            Ok(result) => result.and(flushed),
            Err(panic) => std::panic::resume_unwind(panic),
        }
    }
}

impl<'a> ScanSink for Relay<'_, '_, 'a> {
    fn header(&mut self, header: &Arc<SessionHeader>) -> Result<()> {
        match self.validating.as_mut() {
            Some(validating) => validating.header(header),
            None => self.send(Relayed::Header(header.clone())),
        }
    }

    fn event(&mut self, event: Arc<SessionEvent>) -> Result<()> {
        if !self.helpers
            && let Some(validating) = self.validating.as_mut()
        {
            return validating.event(event);
        }
        self.batch.push(event);
        if self.batch.len() >= RELAY_BATCH {
            self.flush_batch()?;
        }
        Ok(())
    }

    fn read_ahead(&self) -> bool {
        self.helpers
    }

    fn read_ahead_decoders(&self) -> usize {
        self.decoders
    }

    fn until_seq(&self) -> Option<u64> {
        self.until
    }

    fn restart(&mut self) -> bool {
        match self.validating.as_mut() {
            Some(validating) => {
                self.batch.clear();
                validating.restart()
            }
            None => {
                self.batch.clear();
                self.send(Relayed::Restart).is_ok()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn read_threads_allow_helpers_only_while_few_reads_run() {
        use super::ReadThreads;
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        for others in [0, 1, 4, 64] {
            assert!(ReadThreads::Always.allows_helpers(others));
            assert!(!ReadThreads::Never.allows_helpers(others));
            assert_eq!(ReadThreads::Auto.allows_helpers(others), cores > 1 && others * 2 < cores, "{others}");
        }
        // However many cores, a read among many others stays on its own thread.
        assert!(!ReadThreads::Auto.allows_helpers(cores));
        // A second decoder only where each running read has four cores.
        for threads in [ReadThreads::Auto, ReadThreads::Always] {
            assert_eq!(threads.decoders(0), if cores >= 4 { 2 } else { 1 }, "{threads:?}");
            assert_eq!(threads.decoders(cores), 1, "{threads:?}: reads side by side decode on one thread each");
        }
        assert_eq!(ReadThreads::Never.decoders(0), 1);
        assert_eq!(ReadThreads::default(), ReadThreads::Auto);
    }

    /// A read whose validating thread the system will not start validates on its own thread
    /// instead, and answers as a read without helpers does (no panic).
    #[test]
    fn a_read_whose_helper_thread_cannot_start_validates_on_its_own_thread() {
        use std::sync::Arc;

        use session_core::{JsonData, SessionEvent, SessionHeader, SessionId};
        use tokio_util::sync::CancellationToken;

        use super::{ReadThreads, scan_validated};
        use crate::{Backend, CollectSink, MemoryStore};

        let store = MemoryStore::new();
        let id = SessionId::from("s-long");
        // Four relay batches of turns.
        let events: Vec<Arc<SessionEvent>> = (0..1_024u64)
            .map(|seq| {
                let turn = seq / 2 + 1;
                let (kind, data) = match seq % 2 {
                    0 => ("turn/start", format!(r#"{{"turn":{turn}}}"#)),
                    _ => ("turn/end", format!(r#"{{"turn":{turn},"reason":{{"kind":"completed"}}}}"#)),
                };
                Arc::new(SessionEvent::new(kind, seq, 1, JsonData::from_text(data).unwrap()))
            })
            .collect();
        store.append_batch(&SessionHeader::new(id.clone(), 1), &events, false).unwrap();
        let known = super::KnownTypes::default();
        let read = |threads| {
            let mut sink = CollectSink::default();
            let outcome = scan_validated(&store, &id, 0, &known, threads, &CancellationToken::new(), &mut sink);
            (outcome.unwrap().map(|(outcome, closers)| (outcome.n_events, closers.len())), sink.events)
        };
        let alone = read(ReadThreads::Never);
        assert_eq!(alone.1.len(), 1_024);
        let refused = crate::threads::without_helpers(|| read(ReadThreads::Always));
        assert_eq!(refused, alone);
        assert_eq!(read(ReadThreads::Always), alone, "and with its thread");
    }

    #[test]
    fn known_types_hold_the_vocabulary_and_the_extras() {
        let known = super::KnownTypes::with_extra(["host/custom"]);
        assert!(known.contains("turn/start") && known.contains("host/custom") && !known.contains("turn/begin"));
    }
}
