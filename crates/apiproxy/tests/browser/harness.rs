//! The browser tests' harness: a chromedriver child, a headless Chromium session through
//! fantoccini, an `apiproxy serve --demo` child on a temporary store, plain HTTP calls to it, and
//! waits on the page's own state (`document.body.dataset.state`).

use std::{
    io::{BufRead, BufReader, Read, Write},
    net::{TcpListener, TcpStream},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use fantoccini::{Client, ClientBuilder, Locator};
use hyper_util::client::legacy::connect::HttpConnector;
use serde_json::{Value, json};

/// Where Chromium and chromedriver are installed (Debian's `chromium`, `chromium-driver`).
const CHROMIUM: &str = "/usr/bin/chromium";
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";

/// Whether this runs under CI (`CI` set to anything but empty, `false` or `0`).
fn under_ci() -> bool {
    std::env::var_os("CI").is_some_and(|value| !value.is_empty() && value != "false" && value != "0")
}

/// Whether the browser is installed; when it is not, fails under CI and otherwise says loudly
/// that the test was skipped.
pub(crate) fn browser_available() -> bool {
    let missing: Vec<_> = [CHROMIUM, CHROMEDRIVER].into_iter().filter(|path| !Path::new(path).exists()).collect();
    if missing.is_empty() {
        return true;
    }
    assert!(
        !under_ci(),
        "{missing:?} missing, and CI must run the browser tests: install chromium and chromium-driver (.ci/run does)"
    );
    eprintln!(
        "SKIPPED: a browser test did not run because {missing:?} is missing; install chromium and chromium-driver \
         (apt-get install chromium chromium-driver) to run it"
    );
    false
}

/// A free TCP port on loopback (bound, then released).
pub(crate) fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").and_then(|listener| listener.local_addr()).map(|addr| addr.port()).unwrap()
}

/// A child process killed and reaped when dropped, whatever happens in the test.
#[derive(Debug)]
struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Where the screenshots go: `target/viewer-screens/`.
pub(crate) fn screens_dir() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target"));
    let dir = target.join("viewer-screens");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A headless Chromium driven through its own chromedriver, with a fresh profile.
pub(crate) struct Browser {
    /// The WebDriver session.
    pub(crate) client: Client,
    _driver: KillOnDrop,
    _profile: tempfile::TempDir,
}

impl Browser {
    /// Starts chromedriver on a free port and a headless Chromium session through it.
    pub(crate) async fn start() -> Browser {
        let port = free_port();
        let driver = KillOnDrop(
            Command::new(CHROMEDRIVER)
                .arg(format!("--port={port}"))
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap_or_else(|error| panic!("start {CHROMEDRIVER}: {error}")),
        );
        let deadline = Instant::now() + Duration::from_secs(20);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "chromedriver did not listen on {port}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let profile = tempfile::tempdir().unwrap();
        let args = [
            "--headless".to_owned(),
            "--no-sandbox".to_owned(),
            "--disable-gpu".to_owned(),
            "--disable-quic".to_owned(),
            "--no-first-run".to_owned(),
            "--disable-background-networking".to_owned(),
            "--disable-component-update".to_owned(),
            "--disable-sync".to_owned(),
            "--window-size=1280,900".to_owned(),
            format!("--user-data-dir={}", profile.path().display()),
        ];
        let mut capabilities = serde_json::Map::new();
        capabilities.insert("goog:chromeOptions".to_owned(), json!({"binary": CHROMIUM, "args": args}));
        let client = ClientBuilder::new(HttpConnector::new())
            .capabilities(capabilities)
            .connect(&format!("http://127.0.0.1:{port}"))
            .await
            .unwrap_or_else(|error| panic!("a Chromium session through chromedriver: {error}"));
        Browser { client, _driver: driver, _profile: profile }
    }

    /// Opens `url` and waits until the page says its view is painted.
    pub(crate) async fn open(&self, url: &str) {
        self.client.goto(url).await.unwrap();
        self.wait_ready().await;
    }

    /// Waits until `document.body.dataset.state` is `ready`.
    pub(crate) async fn wait_ready(&self) {
        self.wait_for("document.body && document.body.dataset.state === 'ready'", Duration::from_secs(10)).await;
    }

    /// Runs `body` (a function body that `return`s) in the page.
    pub(crate) async fn js(&self, body: &str) -> Value {
        self.client.execute(body, Vec::new()).await.unwrap_or_else(|error| panic!("{body}: {error}"))
    }

    /// Waits until the JS expression `condition` is truthy, or panics after `timeout` with the
    /// page's text.
    pub(crate) async fn wait_for(&self, condition: &str, timeout: Duration) {
        let script = format!("try {{ return !!({condition}); }} catch (e) {{ return false; }}");
        let deadline = Instant::now() + timeout;
        loop {
            if self.js(&script).await == Value::Bool(true) {
                return;
            }
            if Instant::now() >= deadline {
                let text = self.js("return document.body ? document.body.innerText : '(no body)';").await;
                panic!("waited {timeout:?} for {condition}; the page reads:\n{}", text.as_str().unwrap_or(""));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The element `css` finds (waiting up to 5 s for it).
    pub(crate) async fn find(&self, css: &str) -> fantoccini::elements::Element {
        self.wait_for(&format!("document.querySelector({})", json!(css)), Duration::from_secs(5)).await;
        self.client.find(Locator::Css(css)).await.unwrap()
    }

    /// An attribute of the element `css` finds.
    pub(crate) async fn attr(&self, css: &str, name: &str) -> Option<String> {
        self.find(css).await.attr(name).await.unwrap()
    }

    /// The visible text of the element `css` finds.
    pub(crate) async fn text(&self, css: &str) -> String {
        self.find(css).await.text().await.unwrap()
    }

    /// The page's source as the browser holds it now.
    pub(crate) async fn source(&self) -> String {
        self.client.source().await.unwrap()
    }

    /// Writes a PNG of the screen to `target/viewer-screens/<name>.png`.
    pub(crate) async fn screenshot(&self, name: &str) {
        let png = self.client.screenshot().await.unwrap();
        std::fs::write(screens_dir().join(format!("{name}.png")), png).unwrap();
    }

    /// Ends the WebDriver session (Chromium exits; chromedriver is killed on drop).
    pub(crate) async fn close(self) {
        let _ = self.client.close().await;
    }
}

/// A gateway process `apiproxy serve --demo` on a port of its own, killed on drop (or a second
/// handle on one, see [`Gateway::attach`]).
pub(crate) struct Gateway {
    child: Option<KillOnDrop>,
    port: u16,
    token: Option<String>,
}

impl Gateway {
    /// `apiproxy serve --demo --store STORE FLAGS…` on a free port, once it listens.
    pub(crate) fn start(store: &str, flags: &[&str]) -> Gateway {
        Gateway::start_on(store, free_port(), flags)
    }

    /// The same on `port` (a restart on the port of a gateway that was stopped).
    pub(crate) fn start_on(store: &str, port: u16, flags: &[&str]) -> Gateway {
        let listen = format!("127.0.0.1:{port}");
        let mut child = KillOnDrop(
            Command::new(env!("CARGO_BIN_EXE_apiproxy"))
                .args(["serve", "--demo", "--listen", &listen, "--store", store])
                .args(flags)
                .env_remove("APIPROXY_LOG")
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()
                .unwrap(),
        );
        let mut stdout = BufReader::new(child.0.stdout.take().unwrap());
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        assert!(line.starts_with("apiproxy listening on http://"), "unexpected first line {line:?}");
        // The demo prints its examples after; drain them so the gateway never writes to a closed pipe.
        std::thread::spawn(move || std::io::copy(&mut stdout, &mut std::io::sink()));
        Gateway { child: Some(child), port, token: None }
    }

    /// A handle that calls the gateway on `port` with `token` (it owns no process).
    pub(crate) fn attach(port: u16, token: &str) -> Gateway {
        Gateway { child: None, port, token: Some(token.to_owned()) }
    }

    /// Calls made through [`Gateway::call`] carry `token`.
    pub(crate) fn with_token(mut self, token: &str) -> Gateway {
        self.token = Some(token.to_owned());
        self
    }

    /// The page's address.
    pub(crate) fn url(&self) -> String {
        format!("http://127.0.0.1:{}/", self.port)
    }

    /// The port it listens on.
    pub(crate) fn port(&self) -> u16 {
        self.port
    }

    /// Kills the process (its sockets drop at once) and reaps it.
    pub(crate) fn kill(self) {
        drop(self.child);
    }

    /// The `result` of one call (`{ok, value}` or `{ok: false, error}`).
    pub(crate) fn call(&self, method: &str, payload: Value) -> Value {
        let body = json!({"type": "client-request", "rpcId": "1", "method": method, "payload": payload}).to_string();
        let authorization =
            self.token.as_ref().map(|token| format!("authorization: Bearer {token}\r\n")).unwrap_or_default();
        let mut stream = TcpStream::connect(("127.0.0.1", self.port)).unwrap();
        write!(
            stream,
            "POST /api/{method} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\ncontent-type: application/json\r\n{authorization}\
             content-length: {}\r\nconnection: close\r\n\r\n{body}",
            self.port,
            body.len()
        )
        .unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).unwrap();
        assert!(response.starts_with("HTTP/1.1 200"), "{response}");
        let (_, body) = response.split_once("\r\n\r\n").unwrap();
        let envelope: Value = serde_json::from_str(body).unwrap();
        envelope["result"].clone()
    }

    /// The `value` of one call that must succeed.
    pub(crate) fn ok(&self, method: &str, payload: Value) -> Value {
        let result = self.call(method, payload);
        assert_eq!(result["ok"], true, "{method}: {result}");
        result["value"].clone()
    }
}

/// The events of one complete turn: start, prompt, step, answer, end (as the gateway's tests append).
pub(crate) fn turn(turn: u64) -> Vec<Value> {
    vec![
        json!({"type": "turn/start", "data": {"turn": turn}}),
        json!({"type": "user/message", "surfaceOp": "append", "data": {"id": format!("u{turn}"), "role": "user",
            "source": {"kind": "user"}, "content": [{"type": "text", "text": format!("question {turn}")}]}}),
        json!({"type": "step/start", "data": {"turn": turn, "step": 1}}),
        json!({"type": "assistant/message", "surfaceOp": "append", "data": {"turn": turn, "step": 1,
            "message": {"id": format!("a{turn}"), "role": "assistant",
                "source": {"kind": "model", "provider": "test", "model": "m"},
                "content": [{"type": "text", "text": format!("answer {turn}")}]}}}),
        json!({"type": "step/end", "data": {"turn": turn, "step": 1}}),
        json!({"type": "turn/end", "data": {"turn": turn, "reason": {"kind": "completed"}}}),
    ]
}
