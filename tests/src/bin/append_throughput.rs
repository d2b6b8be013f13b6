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

use e2e::gateway::{Client, event};
use serde_json::json;
use tokio::sync::Mutex;

const N_SESSIONS: usize = 32;
const N_APPENDS: usize = 200;
const N_APPENDS_QUICK: usize = 20;

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
