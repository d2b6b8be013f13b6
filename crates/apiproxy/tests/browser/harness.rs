//! The browser tests' harness: a chromedriver child, a headless Chromium session through a small
//! W3C WebDriver client of its own (plain HTTP to chromedriver on loopback), an `apiproxy serve --demo` child on a temporary store, plain HTTP calls to it, and
//! waits on the page's own state (`document.body.dataset.state`).

use std::{
    io::{BufRead, BufReader, Read, Write},
    net::{TcpListener, TcpStream},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

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

/// The WebDriver key of an element reference.
const ELEMENT_KEY: &str = "element-6066-11e4-a52e-4f735466cecf";

/// WebDriver key codes for `send_keys`.
pub(crate) mod keys {
    /// Enter.
    pub(crate) const ENTER: &str = "\u{E007}";
    /// Arrow left.
    pub(crate) const LEFT: &str = "\u{E012}";
    /// Arrow right.
    pub(crate) const RIGHT: &str = "\u{E014}";
}

/// One W3C WebDriver command to chromedriver on `port`: its `value`, or a panic with the error.
fn webdriver(port: u16, method: &str, path: &str, body: Option<&Value>) -> Value {
    let body = body.map(Value::to_string).unwrap_or_default();
    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\ncontent-type: application/json\r\n\
         content-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    // chromedriver may keep the connection open: read the head, then exactly the body it announces.
    let mut reader = BufReader::new(stream);
    let mut head = String::new();
    let mut length = None;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap() == 0 || line == "\r\n" {
            break;
        }
        if let Some(value) = line.to_ascii_lowercase().strip_prefix("content-length:") {
            length = value.trim().parse::<usize>().ok();
        }
        head.push_str(&line);
    }
    let mut bytes = vec![0; length.unwrap_or_else(|| panic!("{method} {path}: no content-length in {head}"))];
    reader.read_exact(&mut bytes).unwrap();
    let body = String::from_utf8_lossy(&bytes).into_owned();
    let answer: Value = serde_json::from_str(&body).unwrap_or_else(|error| panic!("{method} {path}: {error}: {body}"));
    assert!(head.starts_with("HTTP/1.1 200"), "{method} {path}: {answer}");
    answer["value"].clone()
}

/// A headless Chromium driven through its own chromedriver, with a fresh profile, over the W3C
/// WebDriver protocol.
pub(crate) struct Browser {
    port: u16,
    session: Option<String>,
    _driver: KillOnDrop,
    _profile: tempfile::TempDir,
}

/// An element of the page.
pub(crate) struct Element<'a> {
    browser: &'a Browser,
    id: String,
}

impl Element<'_> {
    fn command(&self, method: &str, what: &str, body: Option<&Value>) -> Value {
        self.browser.command(method, &format!("/element/{}/{what}", self.id), body)
    }

    /// Clicks it.
    pub(crate) async fn click(&self) {
        self.command("POST", "click", Some(&json!({})));
    }

    /// Types `text` into it (see [`keys`]).
    pub(crate) async fn send_keys(&self, text: &str) {
        self.command("POST", "value", Some(&json!({"text": text})));
    }

    /// Clears an input.
    pub(crate) async fn clear(&self) {
        self.command("POST", "clear", Some(&json!({})));
    }
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
        let args = json!([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--window-size=1280,900",
            format!("--user-data-dir={}", profile.path().display()),
        ]);
        let capabilities =
            json!({"capabilities": {"alwaysMatch": {"goog:chromeOptions": {"binary": CHROMIUM, "args": args}}}});
        let session = webdriver(port, "POST", "/session", Some(&capabilities));
        let session = session["sessionId"].as_str().unwrap_or_else(|| panic!("no session in {session}")).to_owned();
        Browser { port, session: Some(session), _driver: driver, _profile: profile }
    }

    fn command(&self, method: &str, path: &str, body: Option<&Value>) -> Value {
        let session = self.session.as_deref().unwrap_or_default();
        webdriver(self.port, method, &format!("/session/{session}{path}"), body)
    }

    /// Navigates to `url`.
    pub(crate) async fn goto(&self, url: &str) {
        self.command("POST", "/url", Some(&json!({"url": url})));
    }

    /// Reloads the page.
    pub(crate) async fn refresh(&self) {
        self.command("POST", "/refresh", Some(&json!({})));
    }

    /// The page's address.
    pub(crate) async fn current_url(&self) -> String {
        self.command("GET", "/url", None).as_str().unwrap_or_default().to_owned()
    }

    /// Opens `url` and waits until the page says its view is painted.
    pub(crate) async fn open(&self, url: &str) {
        self.goto(url).await;
        self.wait_ready().await;
    }

    /// Waits until `document.body.dataset.state` is `ready`.
    pub(crate) async fn wait_ready(&self) {
        self.wait_for("document.body && document.body.dataset.state === 'ready'", Duration::from_secs(10)).await;
    }

    /// Runs `body` (a function body that `return`s) in the page.
    pub(crate) async fn js(&self, body: &str) -> Value {
        self.js_with(body, Vec::new()).await
    }

    /// Runs `body` with `arguments` in the page.
    pub(crate) async fn js_with(&self, body: &str, arguments: Vec<Value>) -> Value {
        self.command("POST", "/execute/sync", Some(&json!({"script": body, "args": arguments})))
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
    pub(crate) async fn find(&self, css: &str) -> Element<'_> {
        self.wait_for(&format!("document.querySelector({})", json!(css)), Duration::from_secs(5)).await;
        let found = self.command("POST", "/element", Some(&json!({"using": "css selector", "value": css})));
        let id = found[ELEMENT_KEY].as_str().unwrap_or_else(|| panic!("{css}: {found}")).to_owned();
        Element { browser: self, id }
    }

    /// An attribute of the element `css` finds.
    pub(crate) async fn attr(&self, css: &str, name: &str) -> Option<String> {
        self.find(css).await.command("GET", &format!("attribute/{name}"), None).as_str().map(str::to_owned)
    }

    /// The visible text of the element `css` finds.
    pub(crate) async fn text(&self, css: &str) -> String {
        self.find(css).await.command("GET", "text", None).as_str().unwrap_or_default().to_owned()
    }

    /// The page's source as the browser holds it now.
    pub(crate) async fn source(&self) -> String {
        self.command("GET", "/source", None).as_str().unwrap_or_default().to_owned()
    }

    /// Writes a PNG of the screen to `target/viewer-screens/<name>.png`.
    pub(crate) async fn screenshot(&self, name: &str) {
        use base64::Engine as _;
        let encoded = self.command("GET", "/screenshot", None);
        let png = base64::engine::general_purpose::STANDARD.decode(encoded.as_str().unwrap_or_default()).unwrap();
        std::fs::write(screens_dir().join(format!("{name}.png")), png).unwrap();
    }

    /// Ends the WebDriver session (Chromium exits; chromedriver is killed on drop).
    pub(crate) async fn close(self) {}
}

impl Drop for Browser {
    /// Ends the session through chromedriver (so Chromium exits with it), also after a panic,
    /// before chromedriver itself is killed.
    fn drop(&mut self) {
        if let Some(session) = self.session.take() {
            let _ = std::panic::catch_unwind(|| webdriver(self.port, "DELETE", &format!("/session/{session}"), None));
        }
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
                // The demo's sessions take the gateway's cwd: a fixed one keeps the goldens
                // independent of where the checkout is.
                .current_dir("/")
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
