//! The `apiproxy` binary over a SQLite store (`--store sqlite:PATH`): the reference's database
//! listed, shown, its subagents listed and verified (then repaired) by the CLI, and served.

use std::{
    fs,
    os::unix::fs::PermissionsExt,
    path::{Path, PathBuf},
    process::{Command, Output},
};

use serde_json::Value;

use crate::support::Gateway;

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../session-persistence-sqlite/test_data/reference-sqlite")
}

/// The reference's database in a private directory, at mode 0600 (a checkout makes it 0644).
fn private_copy(dir: &Path) -> PathBuf {
    let private = dir.join("private");
    fs::create_dir(&private).unwrap();
    fs::set_permissions(&private, fs::Permissions::from_mode(0o700)).unwrap();
    let path = private.join("sessions.db");
    fs::copy(fixture().join("sessions.db"), &path).unwrap();
    fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).unwrap();
    path
}

fn apiproxy(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_apiproxy"))
        .args(args)
        .env_remove("APIPROXY_LOG")
        .output()
        .expect("the binary runs")
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn expected() -> Value {
    serde_json::from_str(&fs::read_to_string(fixture().join("expected.json")).unwrap()).unwrap()
}

#[test]
fn the_cli_reads_verifies_and_repairs_a_sqlite_store() {
    let dir = tempfile::tempdir().unwrap();
    let path = private_copy(dir.path());
    let store = format!("sqlite:{}", path.display());
    let expected = expected();

    let output = apiproxy(&["sessions", "list", "--json", "--store", &store]);
    assert!(output.status.success(), "{output:?}");
    let listed: Value = serde_json::from_str(&stdout(&output)).unwrap();
    assert_eq!(listed.as_array().unwrap().len(), 7);

    let output = apiproxy(&["subagents", "list", "sq-parent", "--json", "--store", &store]);
    assert!(output.status.success(), "{output:?}");
    let rows: Value = serde_json::from_str(&stdout(&output)).unwrap();
    assert_eq!(rows, expected["listChildren"]["sq-parent"]);

    let output = apiproxy(&["sessions", "show", "sq-open-turn", "--json", "--store", &store]);
    let shown: Value = serde_json::from_str(&stdout(&output)).unwrap();
    assert_eq!(shown["events"].as_array().unwrap().len(), 67, "the balanced view, closers included");

    let output = apiproxy(&["verify", "--store", &store]);
    let report = stdout(&output);
    assert_eq!(output.status.code(), Some(3), "{report}");
    assert!(report.lines().any(|line| line.starts_with("interrupted") && line.contains("sq-open-turn")), "{report}");
    let output = apiproxy(&["verify", "--repair", "--store", &store]);
    assert!(stdout(&output).lines().any(|line| line.starts_with("repaired") && line.contains("sq-open-turn")));
    let output = apiproxy(&["verify", "--store", &store]);
    assert_eq!(output.status.code(), Some(0), "{}", stdout(&output));

    let missing = format!("sqlite:{}", dir.path().join("private/none.db").display());
    let output = apiproxy(&["sessions", "list", "--store", &missing]);
    assert_eq!(output.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&output.stderr).contains("does not exist"), "{output:?}");
}

#[test]
fn serve_answers_from_a_sqlite_store() {
    let dir = tempfile::tempdir().unwrap();
    let path = private_copy(dir.path());
    let gateway = Gateway::start(&format!("sqlite:{}", path.display()));
    let listed = gateway.ok("subagent.list", serde_json::json!({"parentSessionId": "sq-parent"})).to_string();
    drop(gateway);
    for id in ["sq-child-continuable", "sq-child-oneshot", "sq-child-long", "sq-child-nodesc"] {
        assert!(listed.contains(id), "{id} in {listed}");
    }
    let checkpoints = session_persistence_sqlite::SqliteCheckpointStore::beside(&path);
    assert!(checkpoints.exists(), "the checkpoints live beside the session database");
}

/// The events of an open turn for `session.append`: the turn's start, prompt and step, not its end.
fn open_turn() -> Vec<Value> {
    crate::support::turn(1).into_iter().take(3).collect()
}

/// The report line of `id` in `verify`'s output.
fn line_of<'a>(report: &'a str, id: &str) -> &'a str {
    report.lines().find(|line| line.split_whitespace().nth(1) == Some(id)).unwrap_or_else(|| panic!("{id} in {report}"))
}

/// `verify --repair` beside a serving gateway: the session the gateway holds live mid-turn is
/// left alone and reported in-use naming the gateway, the database's other interrupted session
/// (no writer holds it) and one the gateway released mid-turn are repaired, and the gateway's copy
/// goes on writing.
#[test]
fn verify_repair_beside_a_serving_gateway_leaves_its_live_turn_alone() {
    let dir = tempfile::tempdir().unwrap();
    let path = private_copy(dir.path());
    let store = format!("sqlite:{}", path.display());
    let gateway = Gateway::start(&store);
    gateway.ok("session.create", serde_json::json!({"sessionId": "live", "cwd": "/srv/work"}));
    gateway.ok("session.append", serde_json::json!({"sessionId": "live", "events": open_turn()}));
    gateway.ok("session.flush", serde_json::json!({"sessionId": "live"}));
    // Released mid-turn, a session is no longer held: its lease ends with the release.
    gateway.ok("session.create", serde_json::json!({"sessionId": "released", "cwd": "/srv/work"}));
    gateway.ok("session.append", serde_json::json!({"sessionId": "released", "events": open_turn()}));
    gateway.ok("session.release", serde_json::json!({"sessionId": "released"}));

    let output = apiproxy(&["verify", "--repair", "--store", &store]);
    let report = stdout(&output);
    assert_eq!(output.status.code(), Some(0), "{report}");
    let live = line_of(&report, "live");
    assert!(live.starts_with("in-use") && live.contains("held live by a writer: host "), "{report}");
    assert!(line_of(&report, "sq-open-turn").starts_with("repaired"), "{report}");
    assert!(line_of(&report, "released").starts_with("repaired"), "{report}");

    // The live copy is not stuck: the rest of its turn is stored after what it wrote.
    let rest: Vec<Value> = crate::support::turn(1).into_iter().skip(3).collect();
    gateway.ok("session.append", serde_json::json!({"sessionId": "live", "events": rest}));
    let flushed = gateway.ok("session.flush", serde_json::json!({"sessionId": "live"}));
    assert_eq!(flushed["durableSeq"], 5, "all six events of the turn are stored: {flushed}");
    drop(gateway);
    let output = apiproxy(&["verify", "--store", &store]);
    assert_eq!(output.status.code(), Some(0), "{}", stdout(&output));
    assert!(line_of(&stdout(&output), "live").starts_with("healthy"), "{}", stdout(&output));
}

/// Event rows with no `sessions` row leave the id unwritable: `verify` reports them on that
/// session's own line and exits non-zero.
#[test]
fn verify_reports_event_rows_without_a_sessions_row() {
    let dir = tempfile::tempdir().unwrap();
    let path = private_copy(dir.path());
    rusqlite::Connection::open(&path)
        .unwrap()
        .execute_batch("PRAGMA foreign_keys = OFF; DELETE FROM sessions WHERE id = 'sq-parent'")
        .unwrap();
    let store = format!("sqlite:{}", path.display());
    let output = apiproxy(&["verify", "--store", &store]);
    let report = stdout(&output);
    assert_eq!(output.status.code(), Some(3), "{report}");
    let line = line_of(&report, "sq-parent");
    assert!(line.starts_with("corrupt") && line.contains("but no sessions row"), "{report}");
}

/// A damaged projection-cache database beside the session database does not stop `serve`: it
/// is moved aside under a timestamped name, with a warning saying the file is derived data, a
/// fresh one takes its place, and `cache warm` fills it again.
#[test]
fn serve_moves_a_damaged_checkpoint_database_aside() {
    let dir = tempfile::tempdir().unwrap();
    let path = private_copy(dir.path());
    let checkpoints = session_persistence_sqlite::SqliteCheckpointStore::beside(&path);
    fs::write(&checkpoints, b"damaged: not a database").unwrap();
    fs::set_permissions(&checkpoints, fs::Permissions::from_mode(0o600)).unwrap();
    let log = dir.path().join("serve.log");
    let store = format!("sqlite:{}", path.display());
    let gateway = Gateway::start_logging(&store, &log);
    let listed = gateway.ok("subagent.list", serde_json::json!({"parentSessionId": "sq-parent"})).to_string();
    drop(gateway);
    assert!(listed.contains("sq-child-continuable"), "{listed}");

    let log = fs::read_to_string(&log).unwrap();
    let warning =
        log.lines().find(|line| line.contains("moved aside")).unwrap_or_else(|| panic!("no warning in {log}"));
    assert!(warning.contains("WARN") && warning.contains("derived data"), "{warning}");
    let private = path.parent().unwrap();
    let moved: Vec<PathBuf> = fs::read_dir(private)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|entry| entry.to_string_lossy().contains(".projection-cache.damaged-"))
        .collect();
    assert_eq!(moved.len(), 1, "{moved:?}");
    assert!(warning.contains(&*moved[0].to_string_lossy()), "the warning names where it went: {warning}");
    assert_eq!(fs::read(&moved[0]).unwrap(), b"damaged: not a database", "the damaged file is kept as it was");

    let warmed = apiproxy(&["cache", "warm", "--store", &store]);
    assert!(warmed.status.success(), "{}", String::from_utf8_lossy(&warmed.stderr));
    assert!(stdout(&warmed).contains("warmed"), "{}", stdout(&warmed));
    let records =
        session_persistence_sqlite::SqliteCheckpointStore::open(&session_persistence_sqlite::Target::File(checkpoints))
            .unwrap();
    drop(records);
}
