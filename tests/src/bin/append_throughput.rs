//! Throughput of concurrent durable appends through the gateway: 32 clients, each appending to
//! its own session over one keep-alive connection, against `apiproxy serve` on a JSONL store.
//!
//! `append_throughput [--quick] [APIPROXY]` starts the gateway binary (by default the `apiproxy`
//! beside this one, in the same target directory: build it with the same profile first) over a
//! fresh store in a temp dir and measures two passes in the same run: the clients as they are
//! (the gateway orders appends per session), and the clients behind one shared async mutex held
//! around every request, which emulates the one gateway-wide append lock the gateway used to
//! have. It prints appends/s of each and their ratio. `--quick` appends 20 times per session
//! instead of 200. Run by `cargo xtask bench`.

use std::{
    path::PathBuf,
    sync::Arc,
    time::{Duration, Instant},
};

use serde_json::{Value, json};
use tokio::{
    io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader as AsyncBufReader},
    net::TcpStream,
    sync::Mutex,
};

const N_SESSIONS: usize = 32;
const N_APPENDS: usize = 200;
const N_APPENDS_QUICK: usize = 20;

/// Kills the server when the probe ends, however it ends.
/// One client: a keep-alive HTTP/1.1 connection to the gateway.
struct Client {
    addr: String,
    stream: AsyncBufReader<TcpStream>,
}

impl Client {
    async fn connect(addr: &str) -> Client {
        let stream = TcpStream::connect(addr).await.expect("connect to the gateway");
        stream.set_nodelay(true).expect("TCP_NODELAY");
        Client { addr: addr.to_owned(), stream: AsyncBufReader::new(stream) }
    }

    /// One `POST /api/<method>`; the answer's `value`.
    async fn call(&mut self, method: &str, payload: Value) -> Value {
        let body = json!({"type": "client-request", "rpcId": "1", "method": method, "payload": payload}).to_string();
        let request = format!(
            "POST /api/{method} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            self.addr,
            body.len()
        );
        self.stream.get_mut().write_all(request.as_bytes()).await.expect("send the request");
        let mut content_length = None;
        let mut line = String::new();
        loop {
            line.clear();
            let n = self.stream.read_line(&mut line).await.expect("read the answer's head");
            assert!(n > 0, "the gateway closed the connection");
            let header = line.trim_end();
            if header.is_empty() {
                break;
            }
            if let Some((name, value)) = header.split_once(':')
                && name.eq_ignore_ascii_case("content-length")
            {
                content_length = value.trim().parse::<usize>().ok();
            }
        }
        let mut body = vec![0; content_length.expect("an answer with a content-length")];
        self.stream.read_exact(&mut body).await.expect("read the answer's body");
        let envelope: Value = serde_json::from_slice(&body).expect("a JSON answer");
        assert_eq!(envelope["result"]["ok"], true, "{method} failed: {envelope}");
        envelope["result"]["value"].clone()
    }
}

/// The `n`-th event (from 0) of a session made of complete turns, one event per append.
fn event(n: usize) -> Value {
    let turn = (n / 6 + 1) as u64;
    match n % 6 {
        0 => json!({"type": "turn/start", "data": {"turn": turn}}),
        1 => json!({"type": "user/message", "surfaceOp": "append", "data": {"id": format!("u{turn}"), "role": "user",
            "source": {"kind": "user"}, "content": [{"type": "text", "text": format!("question {turn}")}]}}),
        2 => json!({"type": "step/start", "data": {"turn": turn, "step": 1}}),
        3 => json!({"type": "assistant/message", "surfaceOp": "append", "data": {"turn": turn, "step": 1,
            "message": {"id": format!("a{turn}"), "role": "assistant", "source": {"kind": "model", "provider": "bench", "model": "m"},
            "content": [{"type": "text", "text": format!("answer {turn}")}]}}}),
        4 => json!({"type": "step/end", "data": {"turn": turn, "step": 1}}),
        _ => json!({"type": "turn/end", "data": {"turn": turn, "reason": {"kind": "completed"}}}),
    }
}

/// One pass: `N_SESSIONS` clients create a session each and append `n_appends` durable events to
/// it, one per call; with `lock`, every request holds that one mutex. The elapsed time of the
/// appends (creation excluded).
async fn pass(addr: &str, label: &str, n_appends: usize, lock: Option<Arc<Mutex<()>>>) -> Duration {
    let mut clients = Vec::with_capacity(N_SESSIONS);
    for idx in 0..N_SESSIONS {
        let mut client = Client::connect(addr).await;
        let id = format!("bench-{label}-{idx}");
        client.call("session.create", json!({"sessionId": id})).await;
        clients.push((client, id));
    }
    let started = Instant::now();
    let tasks: Vec<_> = clients
        .into_iter()
        .map(|(mut client, id)| {
            let lock = lock.clone();
            tokio::spawn(async move {
                for n in 0..n_appends {
                    let payload = json!({"sessionId": id, "expectedSeq": n, "durable": true, "events": [event(n)]});
                    let _serialized = match &lock {
                        Some(lock) => Some(lock.lock().await),
                        None => None,
                    };
                    let answer = client.call("session.append", payload).await;
                    assert_eq!(answer["durableSeq"], json!(n), "every append is durable when answered");
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("a client");
    }
    started.elapsed()
}

fn main() {
    let mut quick = false;
    let mut apiproxy = None;
    for arg in std::env::args().skip(1) {
        if arg == "--quick" {
            quick = true;
        } else {
            apiproxy = Some(PathBuf::from(arg));
        }
    }
    let apiproxy = apiproxy.unwrap_or_else(|| std::env::current_exe().expect("own path").with_file_name("apiproxy"));
    let n_appends = if quick { N_APPENDS_QUICK } else { N_APPENDS };
    let dir = tempfile::tempdir().expect("temp dir");
    let root = dir.path().join("store");
    let store = root.to_str().expect("utf-8 temp path");
    let server = e2e::gateway::Gateway::serve(&apiproxy, store);
    let addr = server.addr().to_owned();

    // The client side gets the machine's two cores too; the gateway runs its own runtime.
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    println!(
        "durable appends through the gateway (JSONL store): {N_SESSIONS} sessions x {n_appends} appends, {N_SESSIONS} clients"
    );
    let n_total = (N_SESSIONS * n_appends) as f64;
    // Alternating passes, so neither mode always runs on the fresher store.
    let order = if quick { vec![true, false] } else { vec![true, false, false, true] };
    let (mut locked, mut per_session) = (Duration::ZERO, Duration::ZERO);
    for (round, single_lock) in order.iter().enumerate() {
        let label = if *single_lock { format!("locked{round}") } else { format!("free{round}") };
        let lock = single_lock.then(|| Arc::new(Mutex::new(())));
        let elapsed = runtime.block_on(pass(&addr, &label, n_appends, lock));
        let name = if *single_lock { "single lock (emulated)" } else { "per-session order" };
        println!("  {name}: {:.0} appends/s ({elapsed:.2?})", n_total / elapsed.as_secs_f64());
        if *single_lock {
            locked += elapsed;
        } else {
            per_session += elapsed;
        }
    }
    let n_rounds = (order.len() / 2) as f64;
    let locked_rate = n_total * n_rounds / locked.as_secs_f64();
    let per_session_rate = n_total * n_rounds / per_session.as_secs_f64();
    println!(
        "  per-session order {per_session_rate:.0} appends/s, single lock {locked_rate:.0} appends/s: ratio {:.2}x",
        per_session_rate / locked_rate
    );
    drop(server);
}
