//! Peak memory of concurrent history reads: 8 clients ask `apiproxy serve` at once for the default
//! tail page of one cold ~150 MB session (raw JSONL).
//!
//! `history_memory [APIPROXY]` writes the store into a temp dir, warms its checkpoint cache (`cache
//! warm`, so `serve`'s background backfill reads nothing), starts the gateway binary (by default the
//! `apiproxy` beside this one, in the same target directory: build it with the same profile first),
//! and reports the server's peak resident set size (`VmHWM`) before and after the reads, with what
//! each read got. Run by `cargo xtask bench`.

use std::{
    io::{Read, Write},
    net::TcpStream,
    path::PathBuf,
    process::Command,
    time::Instant,
};

use e2e::fleet;
use session_persistence::Compression;

const N_READERS: usize = 8;
/// About 150 MB of raw JSONL at the workload's 373 bytes per event.
const N_EVENTS: u64 = 402_000;

/// `VmHWM` (peak resident set) of process `pid`, in MiB.
fn peak_rss_mib(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|value| value.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(f64::NAN, |kib| kib / 1024.0)
}

/// Kills the server when the probe ends, however it ends.
/// Decodes a `transfer-encoding: chunked` body.
fn dechunk(mut body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let Some(line_end) = body.windows(2).position(|pair| pair == b"\r\n") else { return out };
        let size =
            std::str::from_utf8(&body[..line_end]).ok().and_then(|size| usize::from_str_radix(size.trim(), 16).ok());
        let Some(size) = size.filter(|size| *size > 0) else { return out };
        let start = line_end + 2;
        out.extend_from_slice(&body[start..(start + size).min(body.len())]);
        body = &body[(start + size + 2).min(body.len())..];
    }
}

/// One `POST /api/<method>` on a fresh connection; the answer's `value`.
fn call(addr: &str, method: &str, payload: serde_json::Value) -> serde_json::Value {
    let body =
        serde_json::json!({"type": "client-request", "rpcId": "1", "method": method, "payload": payload}).to_string();
    let mut stream = TcpStream::connect(addr).expect("connect to the gateway");
    write!(
        stream,
        "POST /api/{method} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .expect("send the request");
    let mut response = Vec::new();
    stream.read_to_end(&mut response).expect("read the answer");
    let split = response.windows(4).position(|quad| quad == b"\r\n\r\n").expect("an HTTP answer");
    let head = String::from_utf8_lossy(&response[..split]).to_ascii_lowercase();
    let raw = &response[split + 4..];
    let body = if head.contains("transfer-encoding: chunked") { dechunk(raw) } else { raw.to_vec() };
    let envelope: serde_json::Value = serde_json::from_slice(&body).expect("a JSON answer");
    assert_eq!(envelope["result"]["ok"], true, "{method} failed: {envelope}");
    envelope["result"]["value"].clone()
}

fn main() {
    let apiproxy = std::env::args()
        .nth(1)
        .map_or_else(|| std::env::current_exe().expect("own path").with_file_name("apiproxy"), PathBuf::from);
    let dir = tempfile::tempdir().expect("temp dir");
    let root = dir.path().join("store");
    let started = Instant::now();
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    runtime.block_on(fleet::write_fleet(&root, Compression::None, 1, N_EVENTS));
    drop(runtime);
    let id = fleet::child_id(0);
    let log = root.join("--srv-agents-bench--").join(id.as_str()).join(Compression::None.file_name());
    let log_bytes = std::fs::metadata(&log).map(|metadata| metadata.len()).unwrap_or(0);
    eprintln!("wrote one session of {N_EVENTS} events ({:.0} MB) in {:.1?}", log_bytes as f64 / 1e6, started.elapsed());

    let store = root.to_str().expect("utf-8 temp path");
    let warmed = Command::new(&apiproxy).args(["cache", "warm", "--store", store]).output().expect("run cache warm");
    assert!(warmed.status.success(), "cache warm failed: {}", String::from_utf8_lossy(&warmed.stderr));
    let server = e2e::gateway::Gateway::serve(&apiproxy, store);
    let addr = server.addr().to_owned();
    let pid = server.pid();
    // One small call, so the server is fully up before the baseline.
    call(&addr, "host.describe", serde_json::json!({}));
    let before = peak_rss_mib(pid);

    println!("history reads of one cold {:.0} MB session, {N_READERS} at once:", log_bytes as f64 / 1e6);
    println!("  server peak_rss_mib={before:.1} before any read");
    // The default tail page (50 messages), then one that asks for every message, so the byte
    // budget is what ends it.
    for (label, max_messages) in [("default page", None), ("maxMessages 10^6", Some(1_000_000u64))] {
        let mut payload = serde_json::json!({"sessionId": id.as_str()});
        if let Some(max_messages) = max_messages {
            payload["maxMessages"] = serde_json::json!(max_messages);
        }
        let started = Instant::now();
        let readers: Vec<_> = (0..N_READERS)
            .map(|_| {
                let (addr, payload) = (addr.clone(), payload.clone());
                std::thread::spawn(move || call(&addr, "session.history", payload))
            })
            .collect();
        let pages: Vec<serde_json::Value> =
            readers.into_iter().map(|reader| reader.join().expect("a reader")).collect();
        let elapsed = started.elapsed();
        let after = peak_rss_mib(pid);
        let page = &pages[0];
        assert!(pages.iter().all(|other| other == page), "every reader got the same page");
        let events = page["events"].as_array().map_or(&[][..], Vec::as_slice);
        let page_bytes: usize = events.iter().map(|entry| entry["event"].to_string().len()).sum();
        println!(
            "  {label}: events={} page_bytes={page_bytes} hasMore={} truncated={} elapsed_ms={} peak_rss_mib={after:.1}",
            events.len(),
            page["hasMore"],
            page.get("truncated").unwrap_or(&serde_json::Value::Bool(false)),
            elapsed.as_millis()
        );
    }
    drop(server);
}
