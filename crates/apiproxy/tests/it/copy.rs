//! `apiproxy copy` between every pair of backends (JSONL zstd, JSONL raw, SQLite, PostgreSQL):
//! each session reads back from the copy exactly as from the source (`sessions show --jsonl`),
//! damaged source logs are reported and skipped, a second run finds everything copied, a
//! session the target holds otherwise is refused, and a copy killed mid-way is resumed. The
//! reference's own stores copy into every backend too.
//!
//! The PostgreSQL pairs need `SESSION_PG_URL` (see `crates/session-persistence-postgres/tests/
//! it/main.rs`): without it they are skipped with a note, and fail under CI.

use std::{
    path::{Path, PathBuf},
    process::{Command, Output, Stdio},
    sync::Arc,
    time::{Duration, Instant},
};

use serde_json::{Value, json};
use session_core::{JsonData, SessionEvent, SessionHeader, SessionId};
use session_persistence::{Backend, Compression, JsonlConfig, JsonlStore};
use session_persistence_postgres::testing::ScratchSchema;

use crate::support::copy_dir;

fn apiproxy(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_apiproxy")).args(args).env_remove("APIPROXY_LOG").output().unwrap()
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Zstd,
    Raw,
    Sqlite,
    Postgres,
}

const KINDS: [Kind; 4] = [Kind::Zstd, Kind::Raw, Kind::Sqlite, Kind::Postgres];

/// A fresh, empty store of one kind: its `--store` argument, and what keeps it alive.
struct Store {
    kind: Kind,
    arg: String,
    _schema: Option<ScratchSchema>,
}

impl Store {
    /// `None` for PostgreSQL without a server (outside CI).
    fn fresh(kind: Kind, dir: &Path, name: &str) -> Option<Store> {
        let path = dir.join(name);
        let (arg, schema) = match kind {
            Kind::Zstd | Kind::Raw => (path.display().to_string(), None),
            Kind::Sqlite => (format!("sqlite:{}.db", path.display()), None),
            Kind::Postgres => {
                let schema = ScratchSchema::bare()?;
                (schema.url().to_owned(), Some(schema))
            }
        };
        Some(Store { kind, arg, _schema: schema })
    }

    /// `apiproxy copy --from source --to self`, with the encoding of a JSONL target.
    fn copy_from(&self, source: &str) -> Output {
        let mut args = vec!["copy", "--from", source, "--to", &self.arg];
        match self.kind {
            Kind::Zstd => args.extend(["--to-compression", "zstd"]),
            Kind::Raw => args.extend(["--to-compression", "none"]),
            Kind::Sqlite | Kind::Postgres => {}
        }
        apiproxy(&args)
    }
}

/// The `sessions show --jsonl` output of each of `ids` in `store`.
fn shows(store: &str, ids: &[String]) -> Vec<(String, String)> {
    ids.iter()
        .map(|id| {
            let output = apiproxy(&["sessions", "show", id, "--jsonl", "--store", store]);
            assert!(output.status.success(), "show {id} in {store}: {output:?}");
            (id.clone(), stdout(&output))
        })
        .collect()
}

/// The headers `sessions list --json` prints.
fn listing(store: &str) -> Value {
    let output = apiproxy(&["sessions", "list", "--json", "--store", store]);
    assert!(output.status.success(), "list {store}: {output:?}");
    serde_json::from_slice(&output.stdout).unwrap()
}

fn ids_of(listing: &Value) -> Vec<String> {
    listing.as_array().unwrap().iter().map(|header| header["id"].as_str().unwrap().to_owned()).collect()
}

/// The stores of the kinds a test can reach (all of them on CI).
fn stores(dir: &Path, prefix: &str) -> Vec<Store> {
    let stores: Vec<Store> =
        KINDS.iter().filter_map(|&kind| Store::fresh(kind, dir, &format!("{prefix}-{kind:?}"))).collect();
    if stores.len() < KINDS.len() {
        eprintln!("SKIPPED: the PostgreSQL pairs (no SESSION_PG_URL)");
    }
    stores
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_backend_copies_into_every_other() {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().join("base");
    crate::cli::write_store(&base).await;
    crate::cli::damage(&base);
    let base = base.display().to_string();
    let copied: Vec<String> = ["healthy", "kid", "open", "p", "torn"].map(str::to_owned).into();
    let expected = shows(&base, &copied);

    // From the damaged raw store into each kind: the damaged logs are reported and skipped.
    let firsts = stores(dir.path(), "first");
    for store in &firsts {
        let output = store.copy_from(&base);
        assert_eq!(output.status.code(), Some(3), "{output:?}");
        let report = stdout(&output);
        assert!(report.contains("corrupt: skipped, the source log cannot be read: "), "{report}");
        assert!(report.contains("junk: skipped, the source log cannot be read: "), "{report}");
        assert!(report.contains("torn: copied 9 events (the source's torn tail was left behind)"), "{report}");
        assert!(report.contains("7 sessions: 5 copied, 0 resumed, 0 already copied"), "{report}");
        assert!(report.contains("2 skipped (damaged)"), "{report}");
        assert_eq!(ids_of(&listing(&store.arg)), copied, "{:?}", store.kind);
        assert_eq!(shows(&store.arg, &copied), expected, "{:?}", store.kind);
    }
    let headers = listing(&firsts[0].arg);

    // From each kind into each other one, and once more: the second run writes nothing.
    for source in &firsts {
        for target in stores(dir.path(), &format!("from-{:?}", source.kind)) {
            if target.kind == source.kind {
                continue;
            }
            let pair = format!("{:?} into {:?}", source.kind, target.kind);
            let output = target.copy_from(&source.arg);
            assert!(output.status.success(), "{pair}: {output:?}");
            assert!(
                stdout(&output).starts_with("5 sessions: 5 copied, 0 resumed, 0 already copied"),
                "{pair}: {output:?}"
            );
            assert_eq!(shows(&target.arg, &copied), expected, "{pair}");
            assert_eq!(listing(&target.arg), headers, "{pair}");
            let again = target.copy_from(&source.arg);
            assert!(again.status.success(), "{pair}: {again:?}");
            assert_eq!(
                stdout(&again),
                "5 sessions: 0 copied, 0 resumed, 5 already copied (0 events written)\n",
                "{pair}"
            );
        }
    }
}

fn fixture(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(path)
}

#[test]
fn the_reference_stores_copy_into_every_backend() {
    let dir = tempfile::tempdir().unwrap();
    let zstd = dir.path().join("reference-zstd");
    let raw = dir.path().join("reference-none");
    copy_dir(&fixture("session-persistence/test_data/reference-store/zstd"), &zstd);
    copy_dir(&fixture("session-persistence/test_data/reference-store/none"), &raw);
    let sqlite = dir.path().join("reference.db");
    std::fs::copy(fixture("session-persistence-sqlite/test_data/reference-sqlite/sessions.db"), &sqlite).unwrap();
    let sources = [zstd.display().to_string(), raw.display().to_string(), format!("sqlite:{}", sqlite.display())];
    for (n, source) in sources.iter().enumerate() {
        let ids = ids_of(&listing(source));
        assert!(ids.len() > 3, "{source}: {ids:?}");
        let expected = shows(source, &ids);
        for target in stores(dir.path(), &format!("reference-{n}")) {
            let output = target.copy_from(source);
            assert!(output.status.success(), "{source} into {:?}: {output:?}", target.kind);
            assert_eq!(shows(&target.arg, &ids), expected, "{source} into {:?}", target.kind);
        }
    }
}

/// The events of `n_turns` closed turns.
fn turns(n_turns: u64) -> Vec<Arc<SessionEvent>> {
    (1..=n_turns)
        .flat_map(|turn| {
            [
                ("turn/start", json!({"turn": turn})),
                ("turn/end", json!({"turn": turn, "reason": {"kind": "completed"}})),
            ]
        })
        .zip(0..)
        .map(|((kind, data), seq)| Arc::new(SessionEvent::new(kind, seq, 2_000, JsonData::from_value(&data).unwrap())))
        .collect()
}

fn raw_store(root: &Path) -> JsonlStore {
    JsonlStore::open(JsonlConfig { root: root.to_owned(), compression: Compression::None, pack_chunks: true }).unwrap()
}

#[test]
fn a_session_the_target_holds_otherwise_is_refused_and_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let (source, target) = (dir.path().join("source"), dir.path().join("target"));
    let header = |id: &str| SessionHeader::new(SessionId::from(id), 1_000);
    {
        let source = raw_store(&source);
        source.append_batch(&header("same"), &turns(1), false).unwrap();
        source.append_batch(&header("other"), &turns(2), false).unwrap();
        let target = raw_store(&target);
        let mut late = turns(1);
        Arc::make_mut(&mut late[1]).time += 1;
        target.append_batch(&header("other"), &late, false).unwrap();
    }
    let (source, target) = (source.display().to_string(), target.display().to_string());
    let before = shows(&target, &["other".to_owned()]);
    let output = apiproxy(&["copy", "--from", &source, "--to", &target]);
    assert_eq!(output.status.code(), Some(3), "{output:?}");
    assert_eq!(
        stdout(&output),
        "other: refused, the target's session differs: its first 2 events are not the source's\n\
         2 sessions: 1 copied, 0 resumed, 0 already copied (2 events written), 1 refused (the target's differs)\n"
    );
    assert_eq!(shows(&target, &["other".to_owned()]), before);
    // Into itself is refused before anything opens for writing.
    let output = apiproxy(&["copy", "--from", &source, "--to", &format!("{source}/.")]);
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    assert!(String::from_utf8_lossy(&output.stderr).contains("into itself"), "{output:?}");
}

#[test]
fn a_copy_killed_midway_is_resumed_by_the_next_run() {
    let dir = tempfile::tempdir().unwrap();
    let source = dir.path().join("source");
    let n_sessions = 600;
    {
        let store = raw_store(&source);
        let events = turns(20);
        for n in 0..n_sessions {
            let header = SessionHeader::new(SessionId::from(format!("s{n:04}").as_str()), 1_000 + n);
            store.append_batch(&header, &events, false).unwrap();
        }
    }
    let source = source.display().to_string();
    let target = format!("sqlite:{}", dir.path().join("target.db").display());
    let mut child = Command::new(env!("CARGO_BIN_EXE_apiproxy"))
        .args(["copy", "--from", &source, "--to", &target, "--jobs", "1"])
        .env_remove("APIPROXY_LOG")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Killed once the target holds some sessions: mid-way, between batches or inside one.
    let deadline = Instant::now() + crate::support::WAIT;
    loop {
        let output = apiproxy(&["sessions", "list", "--store", &target]);
        if output.status.success() && stdout(&output).lines().count() >= 10 {
            break;
        }
        assert!(Instant::now() < deadline, "the copy wrote nothing: {output:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
    child.kill().unwrap();
    let status = child.wait().unwrap();
    assert!(!status.success(), "the copy ended before it was killed; make the store larger");

    let output = apiproxy(&["copy", "--from", &source, "--to", &target]);
    assert!(output.status.success(), "{output:?}");
    let report = stdout(&output);
    let counts: Vec<u64> = report
        .split(|c: char| !c.is_ascii_digit())
        .filter(|part| !part.is_empty())
        .take(4)
        .map(|part| part.parse().unwrap())
        .collect();
    let [total, copied, resumed, identical] = counts[..] else { panic!("{report}") };
    assert_eq!(total, n_sessions, "{report}");
    assert!(identical >= 10 && copied > 0, "{report}");
    assert_eq!(copied + resumed + identical, n_sessions, "{report}");
    let ids = ids_of(&listing(&source));
    assert_eq!(ids_of(&listing(&target)), ids);
    let sample: Vec<String> = ids.iter().step_by(97).cloned().collect();
    assert_eq!(shows(&target, &sample), shows(&source, &sample));
}
