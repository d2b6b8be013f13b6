//! The `apiproxy` binary against a store with healthy, torn, interrupted and corrupt logs:
//! `verify` (with and without `--repair`), `sessions list|show`, `subagents list`, and its exit
//! codes and one-line errors (bad tokens and limits of `serve` are usage errors); and against the
//! golden store of logs in the reference's legacy shapes.

use std::{
    fs,
    io::Read,
    path::{Path, PathBuf},
    process::{Command, Output, Stdio},
    sync::Arc,
};

use serde_json::{Value, json};
use session_core::{CreateOptions, HeaderMeta, ManualClock, SessionId, SessionStore, SurfaceIntent};
use session_persistence::{Compression, Coordinator, CoordinatorConfig, JsonlConfig, JsonlStore};
use subagent::{ChildOptions, ContinuableDescriptor};

use crate::support::copy_dir;

fn apiproxy(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_apiproxy"))
        .args(args)
        .env_remove("APIPROXY_LOG")
        .output()
        .expect("the binary runs")
}

/// Runs the binary like [`apiproxy`], but kills it (and fails) if it has not exited within
/// [`crate::support::WAIT`]: for invocations that must not start serving.
fn apiproxy_exits(args: &[&str]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_apiproxy"))
        .args(args)
        .env_remove("APIPROXY_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the binary runs");
    let (mut out, mut err) = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
    let (done, finished) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
        let _ = out.read_to_end(&mut stdout);
        let _ = err.read_to_end(&mut stderr);
        let _ = done.send((stdout, stderr));
    });
    match finished.recv_timeout(crate::support::WAIT) {
        Ok((stdout, stderr)) => Output { status: child.wait().unwrap(), stdout, stderr },
        Err(_) => {
            let _ = child.kill();
            let _ = child.wait();
            panic!("apiproxy {args:?} is still running");
        }
    }
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn log_path(root: &Path, id: &str) -> PathBuf {
    root.join("--w--").join(id).join("session.jsonl")
}

/// Writes a raw-encoded store: `healthy`, `torn`, `corrupt`, `open` (an interrupted turn), and a
/// parent `p` with a continuable child `kid`.
pub(crate) async fn write_store(root: &Path) {
    let backend =
        JsonlStore::open(JsonlConfig { root: root.to_owned(), compression: Compression::None, pack_chunks: true })
            .unwrap();
    let coordinator = Coordinator::new(Arc::new(backend), CoordinatorConfig::default()).unwrap();
    let store = Arc::new(SessionStore::new(Arc::new(ManualClock::new(1_000))));
    coordinator.attach(&store).unwrap();
    let meta = || HeaderMeta { cwd: Some("/w".to_owned()), ..HeaderMeta::default() };
    let mut sessions = Vec::new();
    for id in ["healthy", "torn", "corrupt", "open", "p"] {
        let session = store.create(Some(SessionId::from(id)), CreateOptions { seed: None, meta: meta() }).unwrap();
        crate::turns::append_turn(&session, 1, "question", "an answer in words").unwrap();
        sessions.push(session);
    }
    let open = &sessions[3];
    open.append("turn/start", &json!({"turn": 2}), None).unwrap();
    let message = crate::turns::user_message("u2", "again");
    open.append("user/message", &message, Some(SurfaceIntent::append())).unwrap();
    let descriptor = ContinuableDescriptor {
        provider: "test".to_owned(),
        label: "a kid".to_owned(),
        agent_provider: None,
        agent_model: None,
        persona: None,
        tool_filter: None,
    };
    let options = ChildOptions { id: Some(SessionId::from("kid")), ..ChildOptions::default() };
    let kid = subagent::create_continuable_child(&store, &sessions[4], descriptor, options).unwrap();
    crate::turns::append_turn(&kid, 1, "do it", "done").unwrap();
    sessions.push(kid);
    for session in &sessions {
        store.flush(session.id()).await.unwrap();
    }
    coordinator.close().await.unwrap();
}

/// Removes the final newline of `torn` and garbles a line in the middle of `corrupt`.
pub(crate) fn damage(root: &Path) {
    let torn = log_path(root, "torn");
    let mut bytes = fs::read(&torn).unwrap();
    assert_eq!(bytes.pop(), Some(b'\n'));
    fs::write(&torn, bytes).unwrap();
    let corrupt = log_path(root, "corrupt");
    let text = fs::read_to_string(&corrupt).unwrap();
    let mut lines: Vec<&str> = text.lines().collect();
    lines[3] = "{\"type\":\"turn/start\",\"seq\":2,\"tim";
    fs::write(&corrupt, format!("{}\n", lines.join("\n"))).unwrap();
    // A log whose header line is garbage: listings skip it, verify must report it.
    let junk = corrupt.parent().unwrap().parent().unwrap().join("junk");
    fs::create_dir_all(&junk).unwrap();
    fs::write(junk.join("session.jsonl"), "not a header\n").unwrap();
}

fn status_of(report: &str, id: &str) -> String {
    report
        .lines()
        .find(|line| line.split_whitespace().nth(1) == Some(id))
        .and_then(|line| line.split_whitespace().next())
        .unwrap_or_else(|| panic!("no line for {id} in:\n{report}"))
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_sessions_and_subagents() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("store");
    write_store(&root).await;
    let store = root.to_str().unwrap();
    let common = ["--store", store, "--compression", "none"];
    let with = |args: &[&'static str]| -> Vec<String> {
        args.iter().map(|arg| (*arg).to_owned()).chain(common.iter().map(|arg| (*arg).to_owned())).collect()
    };
    let run = |args: Vec<String>| {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        apiproxy(&args)
    };

    // Healthy except the interrupted one.
    let output = tokio::task::spawn_blocking({
        let args = with(&["verify"]);
        move || run(args)
    })
    .await
    .unwrap();
    let report = stdout(&output);
    assert_eq!(output.status.code(), Some(3), "{report}");
    assert_eq!(status_of(&report, "healthy"), "healthy");
    assert_eq!(status_of(&report, "open"), "interrupted");

    damage(&root);
    let output = run(with(&["verify"]));
    let report = stdout(&output);
    assert_eq!(output.status.code(), Some(3), "{report}");
    for (id, status) in [
        ("healthy", "healthy"),
        ("torn", "torn"),
        ("corrupt", "corrupt"),
        ("open", "interrupted"),
        ("kid", "healthy"),
        ("junk", "corrupt"),
    ] {
        assert_eq!(status_of(&report, id), status, "{report}");
    }
    assert!(report.contains("7 logs, 3 healthy, 4 not healthy"), "{report}");

    // Repair commits what can be repaired; the corrupt log stays corrupt.
    let output = run(with(&["verify", "--repair"]));
    let report = stdout(&output);
    assert_eq!(output.status.code(), Some(3), "{report}");
    assert_eq!(status_of(&report, "torn"), "repaired");
    assert_eq!(status_of(&report, "open"), "repaired");
    assert_eq!(status_of(&report, "corrupt"), "corrupt");
    assert_eq!(status_of(&report, "junk"), "corrupt");
    let output = run(with(&["verify"]));
    let report = stdout(&output);
    assert_eq!(status_of(&report, "torn"), "healthy", "{report}");
    assert_eq!(status_of(&report, "open"), "healthy", "{report}");

    // Sessions.
    let output = run(with(&["sessions", "list", "--json"]));
    assert!(output.status.success());
    let headers: Value = serde_json::from_slice(&output.stdout).unwrap();
    let ids: Vec<&str> = headers.as_array().unwrap().iter().map(|header| header["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["corrupt", "healthy", "kid", "open", "p", "torn"]);
    let output = run(with(&["sessions", "list"]));
    assert!(stdout(&output).lines().any(|line| line.starts_with("kid\t") && line.contains("origin=subagent")));
    let output = run(with(&["sessions", "show", "open", "--json"]));
    let shown: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(shown["header"]["id"], "open");
    let events = shown["events"].as_array().unwrap();
    assert_eq!(events.last().unwrap()["type"], "turn/end");
    let output = run(with(&["sessions", "show", "healthy"]));
    assert!(stdout(&output).lines().nth(1).unwrap().contains("turn/start"));

    // Subagents, as wire rows.
    let output = run(with(&["subagents", "list", "p", "--json"]));
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let rows: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(
        rows,
        json!([{"kind": "child", "id": "kid", "mode": "continuable", "label": "a kid", "activity": "inactive", "hasChildren": false}])
    );
    let output = run(with(&["subagents", "list", "p", "--descendants", "--json"]));
    let rows: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!((rows[0]["parentId"].clone(), rows[0]["depth"].clone()), (json!("p"), json!(1)));

    // One-line errors and exit codes.
    let output = run(with(&["sessions", "show", "missing"]));
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(stderr.trim(), "apiproxy: session \"missing\" not found");
    let missing = dir.path().join("nowhere");
    let output = apiproxy(&["sessions", "list", "--store", missing.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(1));
    assert_eq!(String::from_utf8_lossy(&output.stderr).lines().count(), 1);
    let output = apiproxy(&["verify", "--bogus"]);
    assert_eq!(output.status.code(), Some(2));
    // Serving off loopback without a token is refused before anything is opened.
    let output = apiproxy(&["serve", "--store", store, "--listen", "0.0.0.0:0"]);
    assert_eq!(output.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&output.stderr).contains("without a bearer token"));
}

/// A read-only `verify` while another process holds the store for writing cannot tell a live
/// turn from an interrupted one: it says so, reports the open log as `in-use` and exits 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_beside_a_running_writer_reports_open_turns_as_in_use() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("store");
    write_store(&root).await;
    let store = root.to_str().unwrap().to_owned();
    let verify = move || apiproxy(&["verify", "--store", &store, "--compression", "none"]);
    let output = tokio::task::spawn_blocking(verify.clone()).await.unwrap();
    assert_eq!(status_of(&stdout(&output), "open"), "interrupted");

    let writer =
        JsonlStore::open(JsonlConfig { root: root.clone(), compression: Compression::None, pack_chunks: true })
            .unwrap();
    let output = tokio::task::spawn_blocking(verify.clone()).await.unwrap();
    let report = stdout(&output);
    assert_eq!(output.status.code(), Some(0), "{report}");
    assert_eq!(status_of(&report, "open"), "in-use", "{report}");
    assert_eq!(status_of(&report, "healthy"), "healthy", "{report}");
    assert!(String::from_utf8_lossy(&output.stderr).contains("another process holds the store for writing"));
    // A torn tail may be an append in flight: in use too. Damage is still damage.
    damage(&root);
    let output = tokio::task::spawn_blocking(verify.clone()).await.unwrap();
    let report = stdout(&output);
    assert_eq!(status_of(&report, "torn"), "in-use", "{report}");
    assert_eq!(status_of(&report, "corrupt"), "corrupt", "{report}");
    assert_eq!(output.status.code(), Some(3), "{report}");
    drop(writer);
    let output = tokio::task::spawn_blocking(verify).await.unwrap();
    assert_eq!(status_of(&stdout(&output), "open"), "interrupted");
}

/// Without `--compression`, every command opens a store in the encoding its logs use; an empty or
/// new store takes zstd; a store holding both is refused, naming a count and a file of each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_store_encoding_is_detected() {
    let dir = tempfile::tempdir().unwrap();
    let raw_root = dir.path().join("raw");
    write_store(&raw_root).await;
    let raw = raw_root.to_str().unwrap().to_owned();
    let run = move |args: Vec<String>| {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        apiproxy(&args)
    };
    let owned = |args: &[&str]| args.iter().map(|arg| (*arg).to_owned()).collect::<Vec<_>>();

    let output = run(owned(&["sessions", "list", "--store", &raw]));
    assert!(output.status.success(), "{output:?}");
    assert!(stdout(&output).lines().any(|line| line.starts_with("healthy\t")), "{}", stdout(&output));
    let output = run(owned(&["verify", "--store", &raw]));
    assert_eq!(status_of(&stdout(&output), "healthy"), "healthy");

    // A zstd store, and an empty one.
    let zstd_root = dir.path().join("zstd");
    let backend = JsonlStore::open(JsonlConfig::new(&zstd_root)).unwrap();
    let header = session_core::SessionHeader::new(SessionId::from("z"), 1);
    let events = [session_core::SessionEvent::new(
        "turn/start",
        0,
        1,
        session_core::JsonData::from_value(&json!({"turn": 1})).unwrap(),
    )];
    session_persistence::Backend::append_batch(&backend, &header, &events.map(Arc::new), false).unwrap();
    drop(backend);
    // Which encoding a store without `--compression` gets (its logs', else zstd) is unit-tested
    // in the binary's `cli::ops`; here the CLI reads the zstd store it detects.
    let output = run(owned(&["sessions", "list", "--store", zstd_root.to_str().unwrap()]));
    assert!(stdout(&output).starts_with("z\t"), "{output:?}");
    let empty = dir.path().join("empty");
    fs::create_dir_all(&empty).unwrap();

    // Both kinds: refused, with a count and an example of each.
    fs::create_dir_all(raw_root.join("--z--/z")).unwrap();
    fs::copy(zstd_root.join("_no-cwd/z/session.jsonl.zstd"), raw_root.join("--z--/z/session.jsonl.zstd")).unwrap();
    for command in
        [&["sessions", "list"][..], &["verify"], &["subagents", "list", "p"], &["serve", "--listen", "127.0.0.1:0"]]
    {
        let mut args = owned(command);
        args.extend(owned(&["--store", &raw]));
        let output = run(args);
        assert_eq!(output.status.code(), Some(1), "{command:?}: {output:?}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains("holds both encodings: 6 raw log(s)") && stderr.contains("1 zstd log(s)"), "{stderr}");
        assert!(stderr.contains("session.jsonl.zstd"), "{stderr}");
    }
    // Naming the encoding still opens it (the other kind is then refused per log).
    let output = run(owned(&["sessions", "list", "--store", &raw, "--compression", "none"]));
    assert!(output.status.success(), "{output:?}");
    // A command that reads one session takes that session's own encoding, without a walk of
    // the store: a raw session reads in the mixed store.
    let output = run(owned(&["sessions", "show", "open", "--jsonl", "--store", &raw]));
    assert!(output.status.success(), "{output:?}");
    let first: Value = serde_json::from_str(stdout(&output).lines().next().unwrap()).unwrap();
    assert_eq!(first["seq"], 0);
}

/// `sessions show --jsonl` streams one compact event per line: the same events as `--json`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_show_streams_json_lines() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("store");
    write_store(&root).await;
    let store = root.to_str().unwrap();
    let lines = apiproxy(&["sessions", "show", "open", "--jsonl", "--store", store]);
    assert!(lines.status.success(), "{lines:?}");
    let streamed: Vec<Value> = stdout(&lines).lines().map(|line| serde_json::from_str(line).unwrap()).collect();
    let whole = apiproxy(&["sessions", "show", "open", "--json", "--store", store]);
    let shown: Value = serde_json::from_slice(&whole.stdout).unwrap();
    assert_eq!(Value::Array(streamed), shown["events"]);
    assert!(stdout(&lines).lines().all(|line| !line.contains("\n  ")), "compact lines");
    let missing = apiproxy(&["sessions", "show", "missing", "--jsonl", "--store", store]);
    assert_eq!(missing.status.code(), Some(1));
}

/// `cache warm` writes a checkpoint record for every healthy stored session, then finds them all
/// current; `serve` runs the same backfill in the background at start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cache_warm_and_the_background_backfill_write_the_missing_records() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("store");
    write_store(&root).await;
    let store = root.to_str().unwrap().to_owned();
    let records = root.join(".projection-cache").join("records");
    assert!(!records.exists(), "the store arrives without checkpoints");

    let warm = {
        let store = store.clone();
        move || apiproxy(&["cache", "warm", "--store", &store])
    };
    let output = tokio::task::spawn_blocking(warm.clone()).await.unwrap();
    assert!(output.status.success(), "{output:?}");
    assert_eq!(stdout(&output).trim(), "6 sessions: 6 warmed, 0 already current, 0 failed");
    assert_eq!(fs::read_dir(&records).unwrap().count(), 6);
    let output = tokio::task::spawn_blocking(warm).await.unwrap();
    assert_eq!(stdout(&output).trim(), "6 sessions: 0 warmed, 6 already current, 0 failed");

    // The server backfills a store whose cache was deleted, in the background.
    fs::remove_dir_all(root.join(".projection-cache")).unwrap();
    let mut server = Command::new(env!("CARGO_BIN_EXE_apiproxy"))
        .args(["serve", "--store", &store, "--listen", "127.0.0.1:0"])
        .env("APIPROXY_LOG", "info")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The backfill logs its end: wait for that line (bounded, so a server that never gets there
    // fails the test instead of hanging it).
    let log = server.stderr.take().unwrap();
    let done = tokio::task::spawn_blocking(move || {
        use std::io::BufRead;
        std::io::BufReader::new(log)
            .lines()
            .map_while(Result::ok)
            .any(|line| line.contains("projection cache backfill done"))
    });
    let finished = tokio::time::timeout(std::time::Duration::from_secs(60), done).await;
    server.kill().unwrap();
    server.wait().unwrap();
    assert!(matches!(finished, Ok(Ok(true))), "the server logs the end of its backfill: {finished:?}");
    assert_eq!(fs::read_dir(&records).unwrap().count(), 6, "the server wrote every missing record");
}

/// Every file under `root` with its bytes, by path.
fn snapshot(root: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut files = Vec::new();
    let mut dirs = vec![root.to_owned()];
    while let Some(dir) = dirs.pop() {
        for entry in fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|extension| extension == "jsonl" || extension == "zstd") {
                let bytes = fs::read(&path).unwrap();
                files.push((path, bytes));
            }
        }
    }
    files.sort();
    files
}

/// The golden legacy store (`session-persistence/test_data/legacy-store`) in both encodings:
/// `verify` finds every log healthy, `sessions show` prints the imported events, `subagents list`
/// lists the legacy children, and nothing rewrites a stored byte.
#[test]
fn legacy_logs_show_list_and_verify_healthy() {
    let golden = Path::new(env!("CARGO_MANIFEST_DIR")).join("../session-persistence/test_data/legacy-store");
    for encoding in ["none", "zstd"] {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("store");
        copy_dir(&golden.join(encoding), &root);
        let before = snapshot(&root);
        let store = root.to_str().unwrap();
        let run = |args: &[&str]| apiproxy(&[args, &["--store", store, "--compression", encoding]].concat());

        for verify in [&["verify"][..], &["verify", "--repair"]] {
            let output = run(verify);
            let report = stdout(&output);
            assert_eq!(output.status.code(), Some(0), "{encoding}: {report}");
            for id in ["l-parent", "l-child-continuable", "l-child-oneshot"] {
                assert_eq!(status_of(&report, id), "healthy", "{encoding}: {report}");
            }
            assert!(report.contains("3 logs, 3 healthy, 0 not healthy"), "{report}");
        }

        let output = run(&["sessions", "show", "l-parent", "--json"]);
        assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
        let shown: Value = serde_json::from_slice(&output.stdout).unwrap();
        let events = shown["events"].as_array().unwrap();
        assert_eq!(events.len(), 21);
        assert!(
            events.iter().all(|event| event["type"] != "steering/message" && event["data"].get("trigger").is_none())
        );
        assert_eq!(events[8]["type"], "user/message");
        assert_eq!(events[8]["data"]["id"], "legacy-message:l-parent:8");
        assert_eq!(events[15]["data"]["message"]["id"], "legacy-message:l-parent:5");
        assert_eq!(events[18]["data"]["reason"], json!({"kind": "aborted", "reason": {"kind": "disposed"}}));
        let output = run(&["sessions", "show", "l-child-oneshot"]);
        assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));

        let output = run(&["subagents", "list", "l-parent", "--json"]);
        assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
        let rows: Value = serde_json::from_slice(&output.stdout).unwrap();
        assert_eq!(
            rows,
            json!([
                {"kind": "child", "id": "l-child-continuable", "mode": "continuable", "label": "triage the cache tests",
                 "activity": "inactive", "hasChildren": false},
                {"kind": "child", "id": "l-child-oneshot", "mode": "one-shot", "label": "check the TTL default",
                 "activity": "inactive", "hasChildren": false},
            ])
        );
        assert_eq!(snapshot(&root), before, "{encoding}: no command rewrote a stored byte");
    }
}

/// An empty (or unusable) bearer token is a usage error, also where it would be the token that
/// allows listening off loopback; so are limits of zero and an owner share over the cap. Nothing is
/// opened or served.
#[test]
fn bad_tokens_and_limits_are_usage_errors() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let store = store.to_str().unwrap();
    let cases: [(&[&str], &str); 11] = [
        (&["--listen", "0.0.0.0:0", "--token", ""], "must not be empty"),
        (&["--listen", "127.0.0.1:0", "--token", ""], "must not be empty"),
        (&["--listen", "127.0.0.1:0", "--token", " padded "], "must not start or end with a space"),
        (&["--listen", "0.0.0.0:0", "--owner-token", "alice="], "must not be empty"),
        (&["--listen", "127.0.0.1:0", "--owner-token", "=secret"], "expected OWNER=TOKEN"),
        (&["--listen", "127.0.0.1:0", "--max-connections", "0"], "expected a positive integer"),
        (&["--listen", "127.0.0.1:0", "--header-timeout-secs", "0"], "expected a positive integer"),
        (&["--listen", "127.0.0.1:0", "--body-timeout-secs", "0"], "expected a positive integer"),
        (&["--listen", "127.0.0.1:0", "--idle-timeout-secs", "0"], "expected a positive integer"),
        (&["--listen", "127.0.0.1:0", "--max-owner-connections", "0"], "expected a positive integer"),
        (
            &["--listen", "127.0.0.1:0", "--max-connections", "4", "--max-owner-connections", "5"],
            "--max-owner-connections (5) must not exceed --max-connections (4)",
        ),
    ];
    for (flags, message) in cases {
        let args: Vec<&str> = ["serve", "--store", store].iter().chain(flags).copied().collect();
        let output = apiproxy_exits(&args);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(message), "{args:?}: {stderr}");
        assert!(!Path::new(store).exists(), "{args:?} opened the store");
    }
}

/// One token bound to two owners (or twice to one), or the operator token reused as an owner
/// token, is a usage error naming both bindings (never the token); nothing is opened or served.
#[test]
fn a_token_bound_twice_is_a_usage_error() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let store = store.to_str().unwrap();
    let cases: [(&[&str], &str); 3] = [
        (
            &["--owner-token", "alice=tok-secret", "--owner-token", "bob=tok-secret"],
            "one token is configured twice: as the owner token of \"alice\" and as the owner token of \"bob\"",
        ),
        (
            &["--owner-token", "alice=tok-secret", "--owner-token", "alice=tok-secret"],
            "one token is configured twice: as the owner token of \"alice\" and as the owner token of \"alice\"",
        ),
        (
            &["--token", "tok-secret", "--owner-token", "carol=tok-secret"],
            "one token is configured twice: as the operator token and as the owner token of \"carol\"",
        ),
    ];
    for (flags, message) in cases {
        let args: Vec<&str> =
            ["serve", "--listen", "127.0.0.1:0", "--store", store].iter().chain(flags).copied().collect();
        let output = apiproxy_exits(&args);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(message), "{args:?}: {stderr}");
        assert!(!stderr.contains("tok-secret"), "{args:?} printed the token: {stderr}");
        assert!(!Path::new(store).exists(), "{args:?} opened the store");
    }
    // Two tokens of one owner are fine (a rotation): the gateway starts.
    let gateway =
        crate::support::Gateway::start_with(store, &["--owner-token", "alice=one", "--owner-token", "alice=two"]);
    drop(gateway);
}

/// The threads of a `serve` process's runtime: its workers and its blocking pool's (Tokio names
/// both `tokio-rt-worker`).
fn runtime_threads(pid: u32) -> usize {
    fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .filter(|task| {
            let comm = fs::read_to_string(task.as_ref().unwrap().path().join("comm")).unwrap_or_default();
            comm.trim_end() == "tokio-rt-worker"
        })
        .count()
}

/// `serve --worker-threads N` runs its runtime on N workers (one per core by default); zero is a
/// usage error.
#[test]
fn serve_runs_on_the_worker_threads_it_is_given() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let store = store.to_str().unwrap();
    let output = apiproxy_exits(&["serve", "--listen", "127.0.0.1:0", "--store", store, "--worker-threads", "0"]);
    assert_eq!(output.status.code(), Some(2), "{}", String::from_utf8_lossy(&output.stderr));
    for workers in [1, 8] {
        let gateway = crate::support::Gateway::start_with(store, &["--worker-threads", &workers.to_string()]);
        gateway.ok("host.describe", json!({}));
        assert!(runtime_threads(gateway.pid()) >= workers, "{workers} workers");
    }
}
