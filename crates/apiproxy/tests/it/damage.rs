//! The damage matrix: a store of healthy sessions plus one damaged log per case (a flipped
//! header, truncation, zeros, a directory, a FIFO, a symlink loop, a dangling symlink, a swapped
//! log, an oversized header written by hand, an unreadable file, a file where the session
//! directory belongs), in both encodings. Every other session still lists, shows and folds
//! exactly as before, through the storage and catalog libraries, the CLI and the gateway; the
//! damaged one gets its documented status (`docs/storage-format.md`, "Damaged logs"); nothing
//! hangs (every case runs under a time bound of the harness) and nothing panics.

use std::{
    collections::BTreeMap,
    fs,
    path::{Path, PathBuf},
    process::{Command, Output, Stdio},
    sync::Arc,
    time::Duration,
};

use serde_json::{Value, json};
use session_core::{CreateOptions, HeaderMeta, ManualClock, SessionId, SessionStore};
use session_persistence::{Compression, Coordinator, CoordinatorConfig, JsonlConfig, JsonlStore, SessionPersistence};
use subagent::{ChildOptions, ContinuableDescriptor};
use tokio_util::sync::CancellationToken;

use crate::support::{Server, copy_dir};

/// Every case, with everything it may run, must finish within this.
const CASE_BOUND: Duration = Duration::from_secs(90);
/// One CLI run must finish within this.
const RUN_BOUND: Duration = Duration::from_secs(30);

/// The damaged session: the second of three subagent children of `p`.
const VICTIM: &str = "kid-b";
const SESSIONS: [&str; 5] = ["kid-a", "kid-b", "kid-c", "p", "solo"];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Damage {
    HeaderFlip,
    Truncation,
    Zeros,
    Directory,
    Fifo,
    SymlinkLoop,
    DanglingSymlink,
    Swapped,
    OversizedHeader,
    Unreadable,
    SessionDirIsFile,
}

const CASES: [Damage; 11] = [
    Damage::HeaderFlip,
    Damage::Truncation,
    Damage::Zeros,
    Damage::Directory,
    Damage::Fifo,
    Damage::SymlinkLoop,
    Damage::DanglingSymlink,
    Damage::Swapped,
    Damage::OversizedHeader,
    Damage::Unreadable,
    Damage::SessionDirIsFile,
];

/// What the damaged session looks like afterwards.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Expected {
    /// Its header is still listed (the damage is past the header).
    listed: bool,
    /// Its `verify` status label.
    verify: &'static str,
}

fn expected(damage: Damage, victim_readable: bool) -> Expected {
    let fault = |verify| Expected { listed: false, verify };
    match damage {
        Damage::Truncation => Expected { listed: true, verify: "torn" },
        Damage::HeaderFlip | Damage::Zeros | Damage::Swapped | Damage::OversizedHeader => fault("corrupt"),
        Damage::Directory | Damage::Fifo | Damage::SymlinkLoop | Damage::DanglingSymlink | Damage::SessionDirIsFile => {
            fault("unreadable")
        }
        // Permissions are the operating system's to enforce: a process that may read anyway
        // (root) reads the log as before.
        Damage::Unreadable if victim_readable => Expected { listed: true, verify: "healthy" },
        Damage::Unreadable => fault("unreadable"),
    }
}

fn session_dir(root: &Path, id: &str) -> PathBuf {
    root.join("--w--").join(id)
}

fn log_path(root: &Path, compression: Compression, id: &str) -> PathBuf {
    session_dir(root, id).join(compression.file_name())
}

/// Writes `p` with three continuable children and `solo`, each with a settled turn.
async fn write_store(root: &Path, compression: Compression) {
    let backend = JsonlStore::open(JsonlConfig { root: root.to_owned(), compression, pack_chunks: true }).unwrap();
    let coordinator = Coordinator::new(Arc::new(backend), CoordinatorConfig::default()).unwrap();
    let store = Arc::new(SessionStore::new(Arc::new(ManualClock::new(1_000))));
    coordinator.attach(&store).unwrap();
    let meta = || HeaderMeta { cwd: Some("/w".to_owned()), ..HeaderMeta::default() };
    let mut sessions = Vec::new();
    for id in ["p", "solo"] {
        let session = store.create(Some(SessionId::from(id)), CreateOptions { seed: None, meta: meta() }).unwrap();
        crate::turns::append_turn(&session, 1, "question", "an answer in words").unwrap();
        sessions.push(session);
    }
    for kid in ["kid-a", "kid-b", "kid-c"] {
        let descriptor = ContinuableDescriptor {
            provider: "test".to_owned(),
            label: format!("the {kid}"),
            agent_provider: None,
            agent_model: None,
            persona: None,
            tool_filter: None,
        };
        let options = ChildOptions { id: Some(SessionId::from(kid)), ..ChildOptions::default() };
        let child = subagent::create_continuable_child(&store, &sessions[0], descriptor, options).unwrap();
        crate::turns::append_turn(&child, 1, "do it", "done").unwrap();
        sessions.push(child);
    }
    for session in &sessions {
        store.flush(session.id()).await.unwrap();
    }
    coordinator.close().await.unwrap();
}

/// A header line whose `agentPreset` alone is 2 MiB: over the reader's 1 MiB header limit.
fn oversized_header(compression: Compression) -> Vec<u8> {
    let line = format!(
        "{{\"type\":\"session\",\"version\":0,\"id\":\"{VICTIM}\",\"createdAt\":1000,\"cwd\":\"/w\",\
         \"parentSession\":\"p\",\"origin\":\"subagent\",\"delegationDepth\":1,\"agentPreset\":\"{}\"}}\n",
        "x".repeat(2 << 20)
    );
    match compression {
        Compression::None => line.into_bytes(),
        Compression::Zstd => {
            let mut encoder = zstd::stream::Encoder::new(Vec::new(), 3).unwrap();
            encoder.include_checksum(true).unwrap();
            std::io::Write::write_all(&mut encoder, line.as_bytes()).unwrap();
            encoder.finish().unwrap()
        }
    }
}

/// Applies `damage` to the victim's log. Returns whether this process can still read the log
/// (for the permission case).
fn apply(damage: Damage, root: &Path, compression: Compression) -> bool {
    let path = log_path(root, compression, VICTIM);
    match damage {
        Damage::HeaderFlip => {
            let mut bytes = fs::read(&path).unwrap();
            // Three bytes inside the header: its line (raw) or its frame (zstd).
            let header_len = match compression {
                Compression::None => bytes.iter().position(|byte| *byte == b'\n').unwrap(),
                Compression::Zstd => 40,
            };
            for offset in [header_len / 4, header_len / 2, header_len * 3 / 4] {
                bytes[offset] ^= 0x5A;
            }
            fs::write(&path, bytes).unwrap();
        }
        Damage::Truncation => {
            let len = fs::metadata(&path).unwrap().len();
            fs::OpenOptions::new().write(true).open(&path).unwrap().set_len(len - 3).unwrap();
        }
        Damage::Zeros => {
            let len = fs::metadata(&path).unwrap().len();
            fs::write(&path, vec![0u8; len as usize]).unwrap();
        }
        Damage::Directory => {
            fs::remove_file(&path).unwrap();
            fs::create_dir(&path).unwrap();
        }
        Damage::Fifo => {
            fs::remove_file(&path).unwrap();
            let status = Command::new("mkfifo").arg(&path).status().expect("mkfifo runs");
            assert!(status.success());
        }
        Damage::SymlinkLoop => {
            fs::remove_file(&path).unwrap();
            std::os::unix::fs::symlink(&path, &path).unwrap();
        }
        Damage::DanglingSymlink => {
            fs::remove_file(&path).unwrap();
            std::os::unix::fs::symlink(root.join("nowhere"), &path).unwrap();
        }
        Damage::Swapped => {
            fs::copy(log_path(root, compression, "kid-c"), &path).unwrap();
        }
        Damage::OversizedHeader => fs::write(&path, oversized_header(compression)).unwrap(),
        Damage::Unreadable => {
            use std::os::unix::fs::PermissionsExt;
            fs::set_permissions(&path, fs::Permissions::from_mode(0o000)).unwrap();
            return fs::File::open(&path).is_ok();
        }
        Damage::SessionDirIsFile => {
            let dir = session_dir(root, VICTIM);
            fs::remove_dir_all(&dir).unwrap();
            fs::write(&dir, b"not a directory").unwrap();
        }
    }
    true
}

/// What the library says about a store: listed ids, faulty ids, every listed session's
/// inspected events, and the parent's catalog rows.
#[derive(Debug, Clone, PartialEq)]
struct View {
    listed: Vec<String>,
    faults: Vec<String>,
    events: BTreeMap<String, Value>,
    rows: Vec<Value>,
}

async fn view(root: &Path, compression: Compression) -> View {
    // Opened as the CLI opens a store for reading: without its lock, a server may be writing it.
    let config = JsonlConfig { root: root.to_owned(), compression, pack_chunks: true };
    let backend = JsonlStore::open_read_only(config).unwrap();
    let persistence: Arc<dyn SessionPersistence> =
        Arc::new(Coordinator::new(Arc::new(backend), CoordinatorConfig::default()).unwrap());
    let cancel = CancellationToken::new();
    let listing = persistence.list_snapshots(&cancel).await.unwrap();
    let listed: Vec<String> = listing.headers.iter().map(|stored| stored.header.id.to_string()).collect();
    let faults = listing.faults.iter().map(|fault| fault.id.to_string()).collect();
    let mut events = BTreeMap::new();
    for id in &listed {
        // A log whose damage is past its header still shows (torn tails are cut in memory).
        let inspection = persistence.inspect(&SessionId::from(id.as_str()), &cancel).await.unwrap();
        events.insert(id.clone(), serde_json::to_value(&*inspection.events).unwrap());
    }
    let runtime = subagent::SubagentRuntime::new(subagent::SubagentServices {
        sessions: Some(Arc::new(SessionStore::new(Arc::new(ManualClock::new(1_000))))),
        projections: Some(apiproxy::ProjectionRegistry::new()),
        persistence: Some(persistence),
        cache: None,
    })
    .unwrap();
    let children = runtime.list_children(&SessionId::from("p"), &cancel).await.unwrap();
    let rows = children.iter().map(|row| serde_json::to_value(row).unwrap()).collect();
    View { listed, faults, events, rows }
}

/// Runs the binary with `args`, killing it if it outlives [`RUN_BOUND`].
fn run(args: &[&str]) -> Output {
    let child = Command::new(env!("CARGO_BIN_EXE_apiproxy"))
        .args(args)
        .env_remove("APIPROXY_LOG")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the binary runs");
    // Waits for the exit itself, on a thread, bounded so a hung run fails instead of hanging.
    let pid = child.id().to_string();
    let (exited, on_exit) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = exited.send(child.wait_with_output().unwrap());
    });
    match on_exit.recv_timeout(RUN_BOUND) {
        Ok(output) => output,
        Err(_) => {
            let _ = Command::new("kill").args(["-KILL", &pid]).status();
            let output = on_exit.recv().unwrap();
            panic!("`apiproxy {}` hung: {output:?}", args.join(" "));
        }
    }
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn cli_checks(root: &Path, compression: Compression, expect: Expected, baseline: &View) {
    let store = root.to_str().unwrap();
    let encoding = compression.as_str();
    let with = |args: &[&str]| -> Vec<String> {
        args.iter().chain(&["--store", store, "--compression", encoding]).map(|arg| (*arg).to_owned()).collect()
    };
    let go = |args: Vec<String>| run(&args.iter().map(String::as_str).collect::<Vec<_>>());

    // `verify` reports every log on its own line, the victim with its status.
    let output = go(with(&["verify"]));
    let report = stdout(&output);
    let healthy_victim = expect.verify == "healthy";
    assert_eq!(output.status.code(), Some(if healthy_victim { 0 } else { 3 }), "{report}");
    for id in SESSIONS {
        let line = report
            .lines()
            .find(|line| line.split_whitespace().nth(1) == Some(id))
            .unwrap_or_else(|| panic!("no verify line for {id}:\n{report}"));
        let status = line.split_whitespace().next().unwrap();
        let want = if id == VICTIM { expect.verify } else { "healthy" };
        assert_eq!(status, want, "{id}: {report}");
    }

    // `sessions list` lists the others, and the victim either as a session or as unlistable.
    let output = go(with(&["sessions", "list"]));
    assert!(output.status.success(), "{output:?}");
    let listing = stdout(&output);
    // The persistence logs each fault as a warning (the gateway's log shows the same line).
    let warned = String::from_utf8_lossy(&output.stderr).contains("a stored log cannot be listed");
    assert_eq!(warned, !expect.listed, "{output:?}");
    for id in SESSIONS {
        let line = listing.lines().find(|line| line.split('\t').next() == Some(id));
        let line = line.unwrap_or_else(|| panic!("no line for {id}:\n{listing}"));
        let unlistable = line.split('\t').nth(1).is_some_and(|field| field.starts_with("unlistable"));
        assert_eq!(unlistable, id == VICTIM && !expect.listed, "{id}: {listing}");
    }

    // `sessions show` of a healthy session, and `subagents list` of the parent.
    let output = go(with(&["sessions", "show", "solo", "--json"]));
    assert!(output.status.success(), "{output:?}");
    let shown: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(shown["events"], baseline.events["solo"]);
    let output = go(with(&["subagents", "list", "p", "--json"]));
    assert!(output.status.success(), "{output:?}");
    let rows: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(rows, Value::Array(expected_rows(baseline, expect)));
}

/// The parent's catalog after the damage: the same rows, the victim's only if it is listed.
fn expected_rows(baseline: &View, expect: Expected) -> Vec<Value> {
    baseline.rows.iter().filter(|row| expect.listed || row["id"] != VICTIM).cloned().collect()
}

async fn gateway_checks(root: &Path, compression: Compression, expect: Expected, baseline: &View) {
    let server = Server::start_on_store(root, compression).await;
    let listed = server.ok(None, "session.list", json!({})).await;
    let mut ids: Vec<&str> =
        listed["items"].as_array().unwrap().iter().map(|item| item["sessionId"].as_str().unwrap()).collect();
    ids.sort_unstable();
    let want: Vec<&str> = SESSIONS.iter().copied().filter(|id| expect.listed || *id != VICTIM).collect();
    assert_eq!(ids, want);
    let mut catalog = server.ok(None, "subagent.list", json!({"parentSessionId": "p"})).await;
    // The gateway's rows add `activeMs` to the catalog's (the CLI's `subagents list --json`).
    for entry in catalog["entries"].as_array_mut().unwrap() {
        if entry["kind"] == "child" {
            let active_ms = entry.as_object_mut().unwrap().remove("activeMs");
            assert!(active_ms.as_ref().is_some_and(Value::is_u64), "{entry}: activeMs {active_ms:?}");
        }
    }
    assert_eq!(catalog["entries"], Value::Array(expected_rows(baseline, expect)));
    let history = server.ok(None, "session.history", json!({"sessionId": "solo"})).await;
    let served: Vec<&Value> = history["events"].as_array().unwrap().iter().map(|entry| &entry["event"]).collect();
    let stored = baseline.events["solo"].as_array().unwrap();
    assert_eq!(served, stored.iter().collect::<Vec<_>>());
    // The victim answers (an error, or its history), and does not hang.
    let _ = server.call_as(None, "session.history", json!({"sessionId": VICTIM})).await;
    server.stop().await;
}

async fn check_case(damage: Damage, compression: Compression, pristine: &Path, baseline: &View) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("store");
    copy_dir(pristine, &root);
    let readable = apply(damage, &root, compression);
    let expect = expected(damage, readable);

    let after = view(&root, compression).await;
    let mut want = baseline.clone();
    if !expect.listed {
        want.listed.retain(|id| id != VICTIM);
        want.faults = vec![VICTIM.to_owned()];
        want.events.remove(VICTIM);
    }
    if damage == Damage::Truncation {
        // The torn tail is cut in memory and the open turn closed: the victim shows its prefix.
        want.events.insert(VICTIM.to_owned(), after.events[VICTIM].clone());
    }
    want.rows = expected_rows(baseline, expect);
    assert_eq!(after, want, "{damage:?} {compression:?}");

    let (cli_root, cli_baseline) = (root.clone(), baseline.clone());
    tokio::task::spawn_blocking(move || cli_checks(&cli_root, compression, expect, &cli_baseline)).await.unwrap();
    gateway_checks(&root, compression, expect, baseline).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_damaged_log_never_takes_down_more_than_itself() {
    for compression in [Compression::None, Compression::Zstd] {
        let dir = tempfile::tempdir().unwrap();
        let pristine = dir.path().join("pristine");
        write_store(&pristine, compression).await;
        let baseline = view(&pristine, compression).await;
        assert_eq!(baseline.listed, SESSIONS);
        assert!(baseline.faults.is_empty());
        assert_eq!(baseline.rows.len(), 3, "{:?}", baseline.rows);
        for damage in CASES {
            tokio::time::timeout(CASE_BOUND, check_case(damage, compression, &pristine, &baseline))
                .await
                .unwrap_or_else(|_| panic!("{damage:?} {compression:?}: the case did not finish in {CASE_BOUND:?}"));
        }
    }
}
