//! `GET /api/session.export` and `apiproxy sessions export`: each session's lines are exactly
//! those of `apiproxy sessions show <id> --jsonl`, descendants follow depth first, and an
//! export is authorized like `session.history`.

use std::process::Command;

use hyper::StatusCode;
use serde_json::{Value, json};
use session_persistence::Compression;

use crate::support::{Server, session_with_turns, turn};

fn show_jsonl(root: &std::path::Path, id: &str) -> Vec<u8> {
    let output = Command::new(env!("CARGO_BIN_EXE_apiproxy"))
        .args(["sessions", "show", id, "--jsonl", "--store"])
        .arg(root)
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    output.stdout
}

/// Splits an export into `(session id, header, the session's lines)` blocks.
fn blocks(export: &[u8]) -> Vec<(String, Value, Vec<u8>)> {
    let mut out: Vec<(String, Value, Vec<u8>)> = Vec::new();
    for line in export.split_inclusive(|byte| *byte == b'\n') {
        let value: Value = serde_json::from_slice(line).unwrap();
        if value.get("export").is_some() {
            assert_eq!(value["export"], "session");
            out.push((value["sessionId"].as_str().unwrap().to_owned(), value["header"].clone(), Vec::new()));
        } else {
            out.last_mut().expect("an export opens with a session line").2.extend_from_slice(line);
        }
    }
    out
}

/// A parent with two turns, a continuable child with a grandchild, and a one-shot child; all
/// released, so the export reads them from the store.
async fn family(server: &Server, owner: Option<&str>) {
    session_with_turns(server, owner, "root", 2).await;
    let spawn = |child: &str, parent: &str, mode: &str| json!({"parentSessionId": parent, "childSessionId": child, "mode": mode, "label": format!("work on {child}")});
    server.ok(owner, "subagent.spawn", spawn("kid-a", "root", "continuable")).await;
    server.ok(owner, "subagent.spawn", spawn("kid-b", "root", "continuable")).await;
    server.ok(owner, "subagent.spawn", spawn("grandkid", "kid-a", "continuable")).await;
    for (child, parent) in [("kid-a", "root"), ("kid-b", "root"), ("grandkid", "kid-a")] {
        let events = turn(1);
        server
            .ok(owner, "session.append", json!({"sessionId": child, "parentSessionId": parent, "events": events}))
            .await;
    }
    for (child, parent) in [("grandkid", "kid-a"), ("kid-a", "root"), ("kid-b", "root")] {
        server.ok(owner, "session.release", json!({"sessionId": child, "parentSessionId": parent})).await;
    }
    server.ok(owner, "session.release", json!({"sessionId": "root"})).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_export_holds_each_sessions_show_jsonl_bytes_depth_first() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("store");
    let server = Server::start_on_store(&root, Compression::Zstd).await;
    family(&server, None).await;

    let (status, headers, body) =
        server.raw("GET", "/api/session.export?sessionId=root&descendants=true", &[], "").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(headers["content-type"], "application/x-ndjson");
    assert_eq!(headers["content-disposition"], "attachment; filename=\"root.jsonl\"");
    let exported = blocks(&body);
    let order: Vec<&str> = exported.iter().map(|(id, _, _)| id.as_str()).collect();
    assert_eq!(order, ["root", "kid-a", "grandkid", "kid-b"], "depth first, siblings by creation");
    for (id, header, lines) in &exported {
        assert_eq!(header["id"], id.as_str());
        assert!(!lines.is_empty(), "{id} has events");
        assert_eq!(lines, &show_jsonl(&root, id), "{id}: the lines of `sessions show --jsonl`");
    }

    // Without descendants: the root alone. The CLI writes the same bytes as the gateway.
    let (_, _, alone) = server.raw("GET", "/api/session.export?sessionId=root", &[], "").await;
    assert_eq!(blocks(&alone).len(), 1);
    let output = Command::new(env!("CARGO_BIN_EXE_apiproxy"))
        .args(["sessions", "export", "root", "--descendants", "--store"])
        .arg(&root)
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    assert_eq!(output.stdout, body.to_vec());

    // HEAD: the headers, no body.
    let (status, headers, body) = server.raw("HEAD", "/api/session.export?sessionId=root", &[], "").await;
    assert_eq!((status, body.len()), (StatusCode::OK, 0));
    assert_eq!(headers["content-type"], "application/x-ndjson");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_export_is_authorized_like_history_and_checks_its_parameters() {
    let server = Server::start().await;
    family(&server, Some("alice")).await;
    let alice = [("x-dsh-owner", "alice")];
    let (status, _, body) = server.raw("GET", "/api/session.export?sessionId=root&descendants=true", &alice, "").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(blocks(&body).len(), 4);
    for (path, status, text) in [
        ("/api/session.export?sessionId=root", StatusCode::NOT_FOUND, "session not found"),
        ("/api/session.export?sessionId=kid-a", StatusCode::NOT_FOUND, "session not found"),
        ("/api/session.export?sessionId=missing", StatusCode::NOT_FOUND, "session not found"),
        ("/api/session.export", StatusCode::BAD_REQUEST, "missing sessionId parameter"),
        ("/api/session.export?sessionId=", StatusCode::BAD_REQUEST, "missing sessionId parameter"),
        ("/api/session.export?sessionId=root&descendants=1", StatusCode::BAD_REQUEST, "invalid descendants parameter"),
    ] {
        let (got, _, body) = server.raw("GET", path, &[("x-dsh-owner", "bob")], "").await;
        assert_eq!((got, String::from_utf8_lossy(&body).as_ref()), (status, text), "{path}");
    }
    // A live session is exported with what it appended (made durable first).
    session_with_turns(&server, Some("alice"), "live-one", 1).await;
    let (status, _, body) = server.raw("GET", "/api/session.export?sessionId=live-one", &alice, "").await;
    assert_eq!(status, StatusCode::OK);
    let exported = blocks(&body);
    assert_eq!(exported[0].2.split(|byte| *byte == b'\n').filter(|line| !line.is_empty()).count(), turn(1).len());
    server.stop().await;
}
