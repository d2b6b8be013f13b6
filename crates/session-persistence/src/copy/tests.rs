//! Tests of the copier over memory and JSONL stores (the backend pairs are `apiproxy`'s `it copy::`).

use std::sync::atomic::AtomicI64;

use serde_json::json;
use session_core::JsonData;

use super::*;
use crate::{
    CollectSink, Compression, JsonlConfig, JsonlStore, MemoryStore,
    backend::{Listing, Revision, ScanOutcome, TornTail},
};

fn event(seq: u64) -> Arc<SessionEvent> {
    let (kind, data) = if seq.is_multiple_of(2) {
        ("turn/start", json!({"turn": seq / 2 + 1}))
    } else {
        ("turn/end", json!({"turn": seq / 2 + 1, "reason": {"kind": "completed"}}))
    };
    Arc::new(SessionEvent::new(kind, seq, 1_000 + seq as i64, JsonData::from_value(&data).unwrap()))
}

fn write(store: &dyn Backend, id: &str, n_events: u64) -> SessionHeader {
    let header = SessionHeader::new(SessionId::from(id), 1_000);
    let events: Vec<_> = (0..n_events).map(event).collect();
    store.append_batch(&header, &events, false).unwrap();
    header
}

fn lines(store: &dyn Backend, id: &str) -> Option<Vec<String>> {
    let mut sink = CollectSink::default();
    store.scan(&SessionId::from(id), &CancellationToken::new(), &mut sink).unwrap()?;
    Some(sink.events.iter().map(|event| serde_json::to_string(event).unwrap()).collect())
}

fn copy(source: &dyn Backend, target: &dyn Backend, options: &CopyOptions) -> Vec<(String, String)> {
    let copies = copy_store(source, target, options, &CancellationToken::new(), &|_, _, _| {}).unwrap();
    copies.iter().map(|copy| (copy.id.to_string(), copy.to_string())).collect()
}

fn outcomes(copies: &[(String, String)]) -> Vec<&str> {
    copies.iter().map(|(_, text)| text.as_str()).collect()
}

/// A memory store holding sessions `a`, `b` and `c` of 2, 31 and 1 events.
fn three_sessions() -> MemoryStore {
    let source = MemoryStore::new();
    for (id, n) in [("a", 2), ("b", 31), ("c", 1)] {
        write(&source, id, n);
    }
    source
}

/// Checks that `copies` copied [`three_sessions`] into `target` whole.
fn assert_three_copied(copies: &[(String, String)], source: &MemoryStore, target: &MemoryStore) {
    assert_eq!(outcomes(copies), ["a: copied 2 events", "b: copied 31 events", "c: copied 1 events"]);
    for id in ["a", "b", "c"] {
        assert_eq!(lines(target, id), lines(source, id));
    }
}

#[test]
fn every_session_is_copied_and_a_second_run_finds_them_identical() {
    let (source, target) = (three_sessions(), MemoryStore::new());
    let options = CopyOptions { jobs: 2, batch_events: 4, ..CopyOptions::default() };
    assert_three_copied(&copy(&source, &target, &options), &source, &target);
    assert_eq!(
        outcomes(&copy(&source, &target, &options)),
        ["a: already copied (2 events)", "b: already copied (31 events)", "c: already copied (1 events)"]
    );
}

/// A copy whose threads the system will not start copies every session on the calling thread.
#[test]
fn a_copy_without_its_threads_copies_on_the_calling_thread() {
    let (source, target) = (three_sessions(), MemoryStore::new());
    let options = CopyOptions { jobs: 4, batch_events: 4, ..CopyOptions::default() };
    let copies = crate::threads::without_helpers(|| copy(&source, &target, &options));
    assert_three_copied(&copies, &source, &target);
}

#[test]
fn a_session_too_large_to_hold_is_read_twice_and_written_in_batches() {
    let source = MemoryStore::new();
    let target = Arc::new(MemoryStore::new());
    let counting = crate::CountingBackend::new(target.clone());
    write(&source, "big", 100);
    let options = CopyOptions { jobs: 1, batch_events: 7, buffer_bytes: 200, ..CopyOptions::default() };
    assert_eq!(outcomes(&copy(&source, &counting, &options)), ["big: copied 100 events"]);
    assert_eq!(counting.appends(), 15, "100 events in batches of 7");
    assert_eq!(lines(&*target, "big"), lines(&source, "big"));
}

/// A memory store whose appends fail once `appends_left` runs out.
#[derive(Debug)]
struct Flaky {
    inner: MemoryStore,
    appends_left: AtomicI64,
}

impl Backend for Flaky {
    fn name(&self) -> &'static str {
        "flaky"
    }
    fn scan(&self, id: &SessionId, cancel: &CancellationToken, sink: &mut dyn ScanSink) -> Result<Option<ScanOutcome>> {
        self.inner.scan(id, cancel, sink)
    }
    fn revision(&self, id: &SessionId) -> Result<Option<Revision>> {
        self.inner.revision(id)
    }
    fn append_batch(&self, header: &SessionHeader, events: &[Arc<SessionEvent>], materialized: bool) -> Result<()> {
        if self.appends_left.fetch_sub(1, Ordering::SeqCst) <= 0 {
            return Err(PersistenceError::io("flaky", std::io::Error::other("the disk went away")));
        }
        self.inner.append_batch(header, events, materialized)
    }
    fn commit_repair(&self, header: &SessionHeader, torn: Option<&TornTail>, closers: &[SessionEvent]) -> Result<()> {
        self.inner.commit_repair(header, torn, closers)
    }
    fn list(&self, cancel: &CancellationToken) -> Result<Listing> {
        self.inner.list(cancel)
    }
}

#[test]
fn an_interrupted_copy_resumes_where_it_stopped() {
    let source = MemoryStore::new();
    write(&source, "a", 4);
    write(&source, "b", 50);
    let target = Flaky { inner: MemoryStore::new(), appends_left: AtomicI64::new(4) };
    let options = CopyOptions { jobs: 1, batch_events: 10, ..CopyOptions::default() };
    let first = copy(&source, &target, &options);
    assert_eq!(first[0].1, "a: copied 4 events");
    assert!(first[1].1.starts_with("b: failed: "), "{first:?}");
    assert_eq!(lines(&target.inner, "b").map(|lines| lines.len()), Some(30), "three batches of b landed");
    target.appends_left.store(i64::MAX, Ordering::SeqCst);
    assert_eq!(
        outcomes(&copy(&source, &target, &options)),
        ["a: already copied (4 events)", "b: resumed at seq 30, 50 events"]
    );
    assert_eq!(lines(&target.inner, "b"), lines(&source, "b"));
    // A source that grew since is resumed the same way.
    let header = SessionHeader::new(SessionId::from("a"), 1_000);
    source.append_batch(&header, &[event(4), event(5)], true).unwrap();
    assert_eq!(outcomes(&copy(&source, &target, &options))[0], "a: resumed at seq 4, 6 events");
    assert_eq!(lines(&target.inner, "a"), lines(&source, "a"));
}

#[test]
fn a_session_the_target_holds_otherwise_is_refused_and_left_alone() {
    let (source, target) = (MemoryStore::new(), MemoryStore::new());
    write(&source, "longer", 3);
    write(&target, "longer", 5);
    write(&source, "other", 4);
    let header = SessionHeader::new(SessionId::from("other"), 1_000);
    let mut changed = (*event(1)).clone();
    changed.time += 1;
    target.append_batch(&header, &[event(0), Arc::new(changed)], false).unwrap();
    let mut moved = SessionHeader::new(SessionId::from("header"), 1_000);
    write(&source, "header", 2);
    moved.cwd = Some("/elsewhere".to_owned());
    target.append_batch(&moved, &[event(0)], false).unwrap();
    let before: Vec<_> = ["longer", "other", "header"].map(|id| lines(&target, id)).into();
    assert_eq!(
        outcomes(&copy(&source, &target, &CopyOptions::default())),
        [
            "header: refused, the target's session differs: the headers differ",
            "longer: refused, the target's session differs: the target holds 5 events, the source 3",
            "other: refused, the target's session differs: its first 2 events are not the source's",
        ]
    );
    let after: Vec<_> = ["longer", "other", "header"].map(|id| lines(&target, id)).into();
    assert_eq!(after, before);
}

#[test]
fn a_damaged_source_log_is_skipped_whole_and_a_torn_tail_is_left_behind() {
    let dir = tempfile::tempdir().unwrap();
    let config = JsonlConfig { root: dir.path().to_owned(), compression: Compression::None, pack_chunks: true };
    let source = JsonlStore::open(config).unwrap();
    let corrupt = write(&source, "corrupt", 6);
    let torn = write(&source, "torn", 4);
    write(&source, "fine", 2);
    let path = source.locate(&corrupt).unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    let mut garbled: Vec<&str> = text.lines().collect();
    garbled[3] = "{\"type\":\"turn/start\",\"seq\":2,\"tim";
    std::fs::write(&path, format!("{}\n", garbled.join("\n"))).unwrap();
    let path = source.locate(&torn).unwrap();
    let mut bytes = std::fs::read(&path).unwrap();
    assert_eq!(bytes.pop(), Some(b'\n'));
    std::fs::write(&path, bytes).unwrap();
    let target = MemoryStore::new();
    let copies = copy(&source, &target, &CopyOptions::default());
    assert!(copies[0].1.starts_with("corrupt: skipped, the source log cannot be read: "), "{copies:?}");
    assert_eq!(copies[1].1, "fine: copied 2 events");
    assert_eq!(copies[2].1, "torn: copied 3 events (the source's torn tail was left behind)");
    assert_eq!(lines(&target, "corrupt"), None, "nothing of a damaged log is written");
    assert_eq!(lines(&target, "torn").unwrap(), lines(&source, "torn").unwrap());
}

#[test]
fn a_torn_tail_an_interrupted_copy_left_on_the_target_is_cut_before_the_rest_is_appended() {
    for compression in [Compression::None, Compression::Zstd] {
        let dir = tempfile::tempdir().unwrap();
        let config = JsonlConfig { root: dir.path().to_owned(), compression, pack_chunks: true };
        let source = MemoryStore::new();
        let header = write(&source, "s", 30);
        let all: Vec<_> = (0..30).map(event).collect();
        let target = JsonlStore::open(config).unwrap();
        target.append_batch(&header, &all[..10], false).unwrap();
        target.append_batch(&header, &all[10..16], true).unwrap();
        // A write of the interrupted run stopped short: the log ends inside its last batch.
        let path = target.locate(&header).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        std::fs::write(&path, &bytes[..bytes.len() - 3]).unwrap();
        let copies = copy(&source, &target, &CopyOptions::default());
        assert!(copies[0].1.starts_with("s: resumed at seq 1"), "{compression:?}: {copies:?}");
        assert_eq!(lines(&target, "s"), lines(&source, "s"), "{compression:?}");
        let mut sink = CollectSink::default();
        let outcome = target.scan(&header.id, &CancellationToken::new(), &mut sink).unwrap().unwrap();
        assert!(outcome.torn.is_none(), "{compression:?}: the copy reads back whole");
    }
}

/// A source whose first scan of each log sees `first` and every later one `second`.
#[derive(Debug)]
struct Fickle {
    first: MemoryStore,
    second: MemoryStore,
    scans: AtomicI64,
}

impl Backend for Fickle {
    fn name(&self) -> &'static str {
        "fickle"
    }
    fn scan(&self, id: &SessionId, cancel: &CancellationToken, sink: &mut dyn ScanSink) -> Result<Option<ScanOutcome>> {
        match self.scans.fetch_add(1, Ordering::SeqCst) {
            0 => self.first.scan(id, cancel, sink),
            _ => self.second.scan(id, cancel, sink),
        }
    }
    fn revision(&self, id: &SessionId) -> Result<Option<Revision>> {
        self.first.revision(id)
    }
    fn append_batch(&self, header: &SessionHeader, events: &[Arc<SessionEvent>], materialized: bool) -> Result<()> {
        self.first.append_batch(header, events, materialized)
    }
    fn commit_repair(&self, header: &SessionHeader, torn: Option<&TornTail>, closers: &[SessionEvent]) -> Result<()> {
        self.first.commit_repair(header, torn, closers)
    }
    fn list(&self, cancel: &CancellationToken) -> Result<Listing> {
        self.first.list(cancel)
    }
}

#[test]
fn a_source_that_changes_between_its_two_reads_is_not_copied_half_old_half_new() {
    let source = Fickle { first: MemoryStore::new(), second: MemoryStore::new(), scans: AtomicI64::new(0) };
    let header = write(&source.first, "s", 10);
    let mut changed: Vec<_> = (0..10).map(event).collect();
    Arc::make_mut(&mut changed[0]).time += 1;
    source.second.append_batch(&header, &changed, false).unwrap();
    let target = MemoryStore::new();
    let held: Vec<_> = (0..2).map(event).collect();
    target.append_batch(&header, &held, false).unwrap();
    // Too large to hold, so it is read twice; the second read sees another first event.
    let options = CopyOptions { buffer_bytes: 10, ..CopyOptions::default() };
    let copies = copy(&source, &target, &options);
    assert_eq!(copies[0].1, "s: failed: the source changed during the copy");
    assert_eq!(lines(&target, "s").map(|lines| lines.len()), Some(2), "nothing was appended");
}

#[test]
fn a_header_without_events_is_copied_where_the_target_stores_one() {
    let dir = tempfile::tempdir().unwrap();
    let config = JsonlConfig { root: dir.path().to_owned(), compression: Compression::Zstd, pack_chunks: true };
    let source = MemoryStore::new();
    write(&source, "empty", 0);
    let target = JsonlStore::open(config).unwrap();
    assert_eq!(outcomes(&copy(&source, &target, &CopyOptions::default())), ["empty: copied 0 events"]);
    assert_eq!(lines(&target, "empty"), Some(Vec::new()));
    assert_eq!(outcomes(&copy(&source, &target, &CopyOptions::default())), ["empty: already copied (0 events)"]);
}
