//! The web viewer's speed in a real headless Chromium: how long after navigation the page's
//! performance marks (`dsh:list-painted`, `dsh:history-painted`, `dsh:tree-painted`) come, against
//! a release `apiproxy serve` on a store of 100,000 sessions, and the page's JS heap while it pages
//! through a 100,000-event session.
//!
//! `viewer_speed [--quick] [APIPROXY]` writes one store per backend straight through its
//! `Backend` (`append_batch`, never HTTP): SQLite, JSONL and, with `SESSION_PG_URL`, a PostgreSQL
//! schema of its own (dropped at the end). Each holds `bulk-*` sessions of one short turn, a
//! parent with 1,000 children (`tree-parent`), a parent whose one child has 10,000 events
//! (`tail-child`) and a 100,000-event session (`long-session`). It starts the gateway binary (by
//! default the `apiproxy` beside this one: build it with the same profile first) on each store,
//! and chromedriver with a headless Chromium (Debian's `chromium`, `chromium-driver`), then
//! reloads each view several times and prints the median and p95 of each mark, with the
//! gateway's share: the time from the request's start to the end of its answer, from the page's
//! resource timing. The heap is read through chromedriver's DevTools bridge
//! (`HeapProfiler.collectGarbage`, then `Runtime.getHeapUsage`).
//!
//! Nothing is cached between runs. The SQLite and JSONL stores go to `/dev/shm` when it exists
//! (writing 100,000 sessions is 100,000 durable commits; in memory they take seconds), so what the
//! reads cost there is a page-cache figure, as it is for any store that fits in memory. `--quick`
//! writes 10,000 sessions and a 20,000-event long session, and reloads each view 3 times instead
//! of 10; the heap is read over at most 200 pages back (40 with `--quick`). Run by `cargo xtask bench`; the figures are in `docs/benchmarks.md` ("Viewer").
//! With `VIEWER_SPEED_KEEP` set, the stores are kept (their directory is printed at the end), to
//! profile a gateway on them afterwards.

use std::{
    path::{Path, PathBuf},
    sync::Arc,
    time::{Duration, Instant},
};

use e2e::{
    gateway::Gateway,
    probe::{PgSchema, quantile, store_dir, timed},
    workload::TranscriptBuilder,
};
use serde_json::{Value, json};
use session_core::{JsonData, Origin, SessionEvent, SessionHeader, SessionId, SurfaceOp};
use session_persistence::{Backend, Compression, JsonlConfig, JsonlStore};
use session_persistence_postgres::PgStore;
use session_persistence_sqlite::{SqliteConfig, SqliteStore};
use webdriver::Browser;

/// The `cwd` of every session.
const CWD: &str = "/srv/agents/viewer-bench";
/// The first `createdAt` (epoch ms); later sessions are newer.
const T0: i64 = 1_772_000_000_000;
const TREE_PARENT: &str = "tree-parent";
const N_TREE_CHILDREN: usize = 1_000;
const TAIL_PARENT: &str = "tail-parent";
const TAIL_CHILD: &str = "tail-child";
const N_TAIL_EVENTS: u64 = 10_000;
const LONG_SESSION: &str = "long-session";

/// The sizes and repetitions of one run.
#[derive(Debug, Clone, Copy)]
struct Plan {
    n_sessions: usize,
    n_long_events: u64,
    n_samples: usize,
    max_pages: usize,
}

const FULL: Plan = Plan { n_sessions: 100_000, n_long_events: 100_000, n_samples: 10, max_pages: 200 };
const QUICK: Plan = Plan { n_sessions: 10_000, n_long_events: 20_000, n_samples: 3, max_pages: 40 };

fn data(value: Value) -> JsonData {
    JsonData::from_value(&value).expect("benchmark payloads are lossless JSON")
}

fn header(id: &str, created_at: i64, parent: Option<&str>) -> SessionHeader {
    let mut header = SessionHeader::new(SessionId::from(id), created_at as u64);
    header.cwd = Some(CWD.to_owned());
    if let Some(parent) = parent {
        header.parent_session = Some(SessionId::from(parent));
        header.origin = Some(Origin::Subagent);
        header.delegation_depth = 1;
    }
    header
}

/// A bulk session's log: one short complete turn with a prompt.
fn bulk_events(idx: usize, created_at: i64) -> Vec<Arc<SessionEvent>> {
    let mut prompt = SessionEvent::new(
        "user/message",
        1,
        created_at + 2,
        data(json!({"id": format!("u-{idx}"), "role": "user", "source": {"kind": "user"},
            "content": [{"type": "text", "text": format!("bulk task {idx}")}]})),
    );
    prompt.surface_op = Some(SurfaceOp::Append);
    vec![
        Arc::new(SessionEvent::new("turn/start", 0, created_at + 1, data(json!({"turn": 1})))),
        Arc::new(prompt),
        Arc::new(SessionEvent::new(
            "turn/end",
            2,
            created_at + 3,
            data(json!({"turn": 1, "reason": {"kind": "completed"}})),
        )),
    ]
}

/// Appends `events` to a new session in batches of at most 2,000 events.
fn write_log(backend: &dyn Backend, header: &SessionHeader, events: &[Arc<SessionEvent>]) {
    for (idx, batch) in events.chunks(2_000).enumerate() {
        backend.append_batch(header, batch, idx > 0).unwrap_or_else(|error| panic!("write {}: {error}", header.id));
    }
}

fn transcript(seed: u64, start: i64, label: Option<String>, n_events: u64) -> Vec<Arc<SessionEvent>> {
    TranscriptBuilder::new(seed, start, label).transcript(n_events).into_iter().flatten().collect()
}

/// Writes the benchmark store into `backend`: the special sessions first (so they are the
/// oldest), then the bulk sessions, newest last, on `n_writers` threads.
fn write_store(backend: &(dyn Backend + Sync), plan: Plan, n_writers: usize) {
    let mut t = T0;
    let mut next_time = || {
        t += 1_000;
        t
    };
    write_log(backend, &header(LONG_SESSION, next_time(), None), &transcript(1, T0, None, plan.n_long_events));
    let tail_parent = header(TAIL_PARENT, next_time(), None);
    write_log(backend, &tail_parent, &transcript(2, T0, None, 11));
    let tail_child = header(TAIL_CHILD, next_time(), Some(TAIL_PARENT));
    write_log(backend, &tail_child, &transcript(3, T0, Some("the long child".into()), N_TAIL_EVENTS));
    write_log(backend, &header(TREE_PARENT, next_time(), None), &transcript(4, T0, None, 11));
    let children: Vec<SessionHeader> = (0..N_TREE_CHILDREN)
        .map(|idx| header(&format!("tree-child-{idx:04}"), next_time(), Some(TREE_PARENT)))
        .collect();
    let n_bulk = plan.n_sessions - N_TREE_CHILDREN - 4;
    let bulk_start = next_time();
    std::thread::scope(|scope| {
        for writer in 0..n_writers {
            let children = &children;
            scope.spawn(move || {
                for (idx, child) in children.iter().enumerate().skip(writer).step_by(n_writers) {
                    let events = transcript(100 + idx as u64, T0, Some(format!("child task {idx}")), 12);
                    write_log(backend, child, &events);
                }
                for idx in (writer..n_bulk).step_by(n_writers) {
                    let created_at = bulk_start + idx as i64 * 1_000;
                    let header = header(&format!("bulk-{idx:06}"), created_at, None);
                    write_log(backend, &header, &bulk_events(idx, created_at));
                }
            });
        }
    });
}

/// Median and 95th percentile (nearest rank) of `samples`, in ms.
fn median_p95(samples: &[f64]) -> (f64, f64) {
    (quantile(samples, 0.5), quantile(samples, 0.95))
}

/// One row of the printed table.
struct Row {
    view: &'static str,
    store: String,
    mark: Vec<f64>,
    api: Vec<f64>,
    /// When the page sent the call (ms since navigation start): what loading the page took.
    asked: Vec<f64>,
    api_method: &'static str,
    target: Option<f64>,
}

/// Reloads the page at `url` `n` times (after one warm-up load) and reads, each time, when
/// `mark` came (ms since navigation start) and how long the slowest request whose URL holds
/// `call` (`/api/session.list`, say) took from its start to the end of its answer, and when the
/// first of them started.
async fn navigations(browser: &Browser, url: &str, mark: &str, call: &str, n: usize) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    browser.goto(url).await;
    // A hash change alone keeps the document (and its marks): reload once before waiting.
    browser.refresh().await;
    let condition = format!("performance.getEntriesByName({mark:?}).length > 0");
    browser.wait_for(&condition, Duration::from_secs(60)).await;
    let (mut marks, mut api, mut asked) = (Vec::with_capacity(n), Vec::with_capacity(n), Vec::with_capacity(n));
    for _ in 0..n {
        browser.refresh().await;
        browser.wait_for(&condition, Duration::from_secs(60)).await;
        let read = browser
            .js_with(
                "const [mark, path] = arguments;
                 const at = performance.getEntriesByName(mark)[0].startTime;
                 const calls = performance.getEntriesByType('resource').filter(e => e.name.includes(path));
                 return [at, Math.max(0, ...calls.map(e => e.responseEnd - e.startTime)),
                         Math.min(...calls.map(e => e.startTime))];",
                vec![json!(mark), json!(call)],
            )
            .await;
        marks.push(read[0].as_f64().unwrap_or(f64::NAN));
        api.push(read[1].as_f64().unwrap_or(f64::NAN));
        asked.push(read[2].as_f64().unwrap_or(f64::NAN));
    }
    (marks, api, asked)
}

/// The page's JS heap in use and its DOM nodes after a full garbage collection (DevTools'
/// `Performance.getMetrics`): `(heap MB, nodes)`.
async fn heap_and_nodes(browser: &Browser) -> (f64, f64) {
    browser.cdp("HeapProfiler.collectGarbage", json!({})).await;
    let metrics = browser.cdp("Performance.getMetrics", json!({})).await;
    let metric = |name: &str| {
        metrics["metrics"]
            .as_array()
            .and_then(|metrics| metrics.iter().find(|metric| metric["name"] == name))
            .and_then(|metric| metric["value"].as_f64())
            .unwrap_or(f64::NAN)
    };
    (metric("JSHeapUsedSize") / 1e6, metric("Nodes"))
}

async fn dom_rows(browser: &Browser) -> u64 {
    browser.js("return document.querySelectorAll('#history li.event').length;").await.as_u64().unwrap_or(0)
}

/// Opens the long session at its tail, then pages back through it (`beforeSeq` pages, as
/// scrolling to the top asks for) until seq 0 or `max_pages`, reading the JS heap, the DOM's
/// nodes and its event rows as it goes.
async fn heap_while_paging(browser: &Browser, base: &str, plan: Plan) {
    browser.goto(&format!("{base}#/s/{LONG_SESSION}")).await;
    // A hash change alone keeps the document: reload, so the view is the only one painted.
    browser.refresh().await;
    browser.wait_for("performance.getEntriesByName('dsh:history-painted').length > 0", Duration::from_secs(60)).await;
    browser.cdp("Performance.enable", json!({})).await;
    println!(
        "\nJS heap with the {}-event `{LONG_SESSION}` open (SQLite), paging back (at most {} pages):",
        plan.n_long_events, plan.max_pages
    );
    println!("  {:>6} {:>10} {:>9} {:>10} {:>9}", "pages", "first seq", "DOM rows", "DOM nodes", "heap MB");
    let first_seq =
        || async { browser.js(&format!("return window.__dsh.seqs({LONG_SESSION:?})[0] ?? null;")).await.as_u64() };
    let report = |pages: usize, seq: Option<u64>, rows: u64, (heap, nodes): (f64, f64)| {
        let seq = seq.map_or("-".to_owned(), |seq| seq.to_string());
        println!("  {pages:>6} {seq:>10} {rows:>9} {nodes:>10.0} {heap:>9.1}");
    };
    report(0, first_seq().await, dom_rows(browser).await, heap_and_nodes(browser).await);
    let started = Instant::now();
    let (mut pages, mut max_rows) = (0, 0);
    let mut seq = first_seq().await;
    while let Some(before) = seq.filter(|&seq| seq > 0 && pages < plan.max_pages) {
        // What scrolling to the top does: the page asks for the page before its first row.
        browser.js("document.getElementById('history-older').click(); return true;").await;
        let moved = format!("(window.__dsh.seqs({LONG_SESSION:?})[0] ?? {before}) < {before}");
        browser.wait_for(&moved, Duration::from_secs(30)).await;
        pages += 1;
        seq = first_seq().await;
        max_rows = max_rows.max(dom_rows(browser).await);
        if pages % (plan.max_pages / 4).max(1) == 0 {
            report(pages, seq, dom_rows(browser).await, heap_and_nodes(browser).await);
        }
    }
    if pages % (plan.max_pages / 4).max(1) != 0 {
        report(pages, seq, dom_rows(browser).await, heap_and_nodes(browser).await);
    }
    println!(
        "  {pages} pages in {:.1?}; at most {max_rows} event rows in the DOM at once (cap 2,000)",
        started.elapsed()
    );
}

fn print_table(rows: &[Row], plan: Plan) {
    println!(
        "\nviewer speed: ms from navigation start to the mark, {} reloads each, store of {} sessions",
        plan.n_samples, plan.n_sessions
    );
    println!(
        "  {:<28} {:<9} {:>8} {:>8} {:>11} {:>10} {:>9} {:>8}",
        "view (mark)", "store", "median", "p95", "api call", "api median", "asked at", "target"
    );
    for row in rows {
        let (median, p95) = median_p95(&row.mark);
        let (api_median, _) = median_p95(&row.api);
        let (asked, _) = median_p95(&row.asked);
        let target = match row.target {
            Some(target) if p95 <= target => format!("{target:.0} ok"),
            Some(target) => format!("{target:.0} MISSED"),
            None => "-".to_owned(),
        };
        println!(
            "  {:<28} {:<9} {median:>8.1} {p95:>8.1} {:>11} {api_median:>10.1} {asked:>9.1} {target:>8}",
            row.view, row.store, row.api_method
        );
    }
}

/// Measures the three views on the store at `location`, cold (a fresh gateway and checkpoint
/// cache); the heap too with `heap`, and with `warm` the list and the tree again once the cache
/// is warm ([`measure_warm`]).
async fn measure(apiproxy: &Path, location: &str, label: &str, views: &[&str], plan: Plan, rows: &mut Vec<Row>) {
    let gateway = Gateway::serve(apiproxy, location);
    let base = format!("http://{}/", gateway.addr());
    let browser = Browser::start().await;
    if views.contains(&"list") {
        let (mark, api, asked) =
            navigations(&browser, &base, "dsh:list-painted", "/api/session.list", plan.n_samples).await;
        rows.push(Row {
            view: "list (first page)",
            store: label.into(),
            mark,
            api,
            asked,
            api_method: "session.list",
            target: Some(150.0),
        });
    }
    if views.contains(&"tail") {
        let url = format!("{base}#/s/{TAIL_CHILD}");
        let (mark, api, asked) = navigations(&browser, &url, "dsh:history-painted", ".history", plan.n_samples).await;
        rows.push(Row {
            view: "tail of a 10,000-event child",
            store: label.into(),
            mark,
            api,
            asked,
            api_method: "*history",
            target: Some(300.0),
        });
    }
    if views.contains(&"tree") {
        let url = format!("{base}#/s/{TREE_PARENT}");
        let (mark, api, asked) =
            navigations(&browser, &url, "dsh:tree-painted", "/api/subagent.list", plan.n_samples).await;
        let n_items = browser.js("return document.querySelectorAll('#subagent-tree > [role=treeitem]').length;").await;
        assert_eq!(n_items, json!(N_TREE_CHILDREN), "the tree shows every child");
        rows.push(Row {
            view: "tree of 1,000 children",
            store: label.into(),
            mark,
            api,
            asked,
            api_method: "subagent.list",
            target: Some(200.0),
        });
    }
    if views.contains(&"heap") {
        heap_while_paging(&browser, &base, plan).await;
    }
    browser.close().await;
    drop(gateway);
    if views.contains(&"warm") {
        measure_warm(apiproxy, location, label, plan, rows).await;
    }
}

/// The steady state of a gateway that has run for a while: `apiproxy cache warm` writes every
/// session's checkpoint (what the background backfill does over time), then a fresh gateway on
/// the warmed store serves the first list page (no blank probe: the checkpoints say which rows
/// are blank) and the tree (rung 2: no child's log is read).
async fn measure_warm(apiproxy: &Path, location: &str, label: &str, plan: Plan, rows: &mut Vec<Row>) {
    timed(&format!("warmed the {label} checkpoint cache"), || {
        let status = std::process::Command::new(apiproxy)
            .args(["cache", "warm", "--store", location])
            .stdout(std::process::Stdio::null())
            .status()
            .expect("run apiproxy cache warm");
        assert!(status.success(), "apiproxy cache warm failed: {status}");
    });
    let gateway = Gateway::serve(apiproxy, location);
    let base = format!("http://{}/", gateway.addr());
    let browser = Browser::start().await;
    let (mark, api, asked) =
        navigations(&browser, &base, "dsh:list-painted", "/api/session.list", plan.n_samples).await;
    rows.push(Row {
        view: "list, warm cache",
        store: label.into(),
        mark,
        api,
        asked,
        api_method: "session.list",
        target: Some(150.0),
    });
    let url = format!("{base}#/s/{TREE_PARENT}");
    let (mark, api, asked) =
        navigations(&browser, &url, "dsh:tree-painted", "/api/subagent.list", plan.n_samples).await;
    rows.push(Row {
        view: "tree of 1,000, warm cache",
        store: label.into(),
        mark,
        api,
        asked,
        api_method: "subagent.list",
        target: Some(200.0),
    });
    browser.close().await;
    drop(gateway);
}

async fn run(apiproxy: PathBuf, plan: Plan) {
    let mut rows = Vec::new();
    let dir = store_dir();

    let sqlite_path = dir.path().join("sessions.db");
    timed(&format!("wrote the SQLite store ({} sessions)", plan.n_sessions), || {
        let store = SqliteStore::open(SqliteConfig::file(&sqlite_path)).expect("open the SQLite store");
        write_store(&store, plan, 1);
    });
    let sqlite = format!("sqlite:{}", sqlite_path.display());
    measure(&apiproxy, &sqlite, "sqlite", &["list", "tail", "tree", "heap", "warm"], plan, &mut rows).await;

    match std::env::var("SESSION_PG_URL").ok().filter(|url| !url.is_empty()) {
        Some(server) => {
            let schema = PgSchema::create(&server, "viewer_speed");
            timed(&format!("wrote the PostgreSQL store ({} sessions)", plan.n_sessions), || {
                let (store, _) = PgStore::setup(&schema.config).expect("set up the PostgreSQL schema");
                write_store(&store, plan, 8);
            });
            schema.sql(&format!("ANALYZE {0}.sessions; ANALYZE {0}.events;", schema.name));
            measure(&apiproxy, &schema.url, "postgres", &["list", "tail", "tree", "warm"], plan, &mut rows).await;
        }
        None => eprintln!(
            "viewer_speed: SKIPPED the PostgreSQL store: set SESSION_PG_URL=postgres://postgres@127.0.0.1:5432/test"
        ),
    }

    let jsonl_root = dir.path().join("jsonl");
    timed(&format!("wrote the JSONL store ({} sessions)", plan.n_sessions), || {
        let config = JsonlConfig { root: jsonl_root.clone(), compression: Compression::None, pack_chunks: true };
        let store = JsonlStore::open(config).expect("open the JSONL store");
        write_store(&store, plan, 2);
    });
    let jsonl = jsonl_root.to_str().expect("a UTF-8 temp path").to_owned();
    measure(&apiproxy, &jsonl, "jsonl", &["list"], plan, &mut rows).await;

    print_table(&rows, plan);
    if std::env::var_os("VIEWER_SPEED_KEEP").is_some() {
        eprintln!("kept the stores in {}", dir.keep().display());
    }
}

fn main() {
    let mut plan = FULL;
    let mut apiproxy = None;
    for arg in std::env::args().skip(1) {
        if arg == "--quick" {
            plan = QUICK;
        } else {
            apiproxy = Some(PathBuf::from(arg));
        }
    }
    let apiproxy = apiproxy.unwrap_or_else(|| std::env::current_exe().expect("own path").with_file_name("apiproxy"));
    let missing = webdriver::missing();
    if !missing.is_empty() {
        eprintln!("viewer_speed: SKIPPED: {missing:?} missing (apt-get install chromium chromium-driver)");
        return;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    runtime.block_on(run(apiproxy, plan));
}
