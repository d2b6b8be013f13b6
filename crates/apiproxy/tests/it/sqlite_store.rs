//! The `apiproxy` binary over a SQLite store (`--store sqlite:PATH`): the reference's database
//! listed, shown, its subagents listed and verified (then repaired) by the CLI, and served.

use std::{
    fs,
    io::{BufRead, BufReader, Read, Write},
    os::unix::fs::PermissionsExt,
    path::{Path, PathBuf},
    process::{Command, Output, Stdio},
};

use serde_json::Value;

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
    let mut child = Command::new(env!("CARGO_BIN_EXE_apiproxy"))
        .args(["serve", "--listen", "127.0.0.1:0", "--store", &format!("sqlite:{}", path.display())])
        .env_remove("APIPROXY_LOG")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let addr = line
        .strip_prefix("apiproxy listening on http://")
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
        .to_owned();
    let body =
        r#"{"type":"client-request","rpcId":"1","method":"subagent.list","payload":{"parentSessionId":"sq-parent"}}"#;
    let mut stream = std::net::TcpStream::connect(&addr).unwrap();
    write!(
        stream,
        "POST /api/subagent.list HTTP/1.1\r\nHost: {addr}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    for id in ["sq-child-continuable", "sq-child-oneshot", "sq-child-long", "sq-child-nodesc"] {
        assert!(response.contains(id), "{id} in {response}");
    }
    let checkpoints = session_persistence_sqlite::SqliteCheckpointStore::beside(&path);
    assert!(checkpoints.exists(), "the checkpoints live beside the session database");
}
