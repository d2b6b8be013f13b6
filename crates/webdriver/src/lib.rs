//! A small W3C WebDriver client: a chromedriver child on a free loopback port, a headless
//! Chromium session through it with a fresh profile, and the few commands the viewer's browser
//! tests (`crates/apiproxy/tests/browser`) and the e2e viewer benchmark (`viewer_speed`) use,
//! including Chromium's DevTools commands through chromedriver (`goog/cdp/execute`).
//!
//! Plain HTTP/1.1 to chromedriver on loopback, one connection per command, so it needs no HTTP
//! client crate. For tests and benchmarks only: a failed command panics with chromedriver's
//! answer, which is what a test or a benchmark wants to show.

use std::{
    io::{BufRead, BufReader, Read, Write},
    net::{TcpListener, TcpStream},
    path::Path,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use serde_json::{Value, json};

/// Where Chromium is installed (Debian's `chromium`).
pub const CHROMIUM: &str = "/usr/bin/chromium";
/// Where chromedriver is installed (Debian's `chromium-driver`).
pub const CHROMEDRIVER: &str = "/usr/bin/chromedriver";

/// Which of [`CHROMIUM`] and [`CHROMEDRIVER`] are missing (empty when both are installed).
pub fn missing() -> Vec<&'static str> {
    [CHROMIUM, CHROMEDRIVER].into_iter().filter(|path| !Path::new(path).exists()).collect()
}

/// A free TCP port on loopback (bound, then released).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|addr| addr.port())
        .expect("a free port on 127.0.0.1")
}

/// A child process killed and reaped when dropped, whatever happens in the caller.
#[derive(Debug)]
pub struct KillOnDrop(pub Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The WebDriver key of an element reference.
const ELEMENT_KEY: &str = "element-6066-11e4-a52e-4f735466cecf";

/// WebDriver key codes for [`Element::send_keys`].
pub mod keys {
    /// Enter.
    pub const ENTER: &str = "\u{E007}";
    /// Arrow left.
    pub const LEFT: &str = "\u{E012}";
    /// Arrow right.
    pub const RIGHT: &str = "\u{E014}";
}

/// One W3C WebDriver command to chromedriver on `port`: its `value`, or a panic with the error.
fn webdriver(port: u16, method: &str, path: &str, body: Option<&Value>) -> Value {
    let body = body.map(Value::to_string).unwrap_or_default();
    let mut stream = TcpStream::connect(("127.0.0.1", port)).expect("connect to chromedriver");
    stream.set_read_timeout(Some(Duration::from_secs(60))).expect("a read timeout");
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\ncontent-type: application/json\r\n\
         content-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
    .expect("send a command to chromedriver");
    // chromedriver may keep the connection open: read the head, then exactly the body it announces.
    let mut reader = BufReader::new(stream);
    let mut head = String::new();
    let mut length = None;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).expect("read chromedriver's answer") == 0 || line == "\r\n" {
            break;
        }
        if let Some(value) = line.to_ascii_lowercase().strip_prefix("content-length:") {
            length = value.trim().parse::<usize>().ok();
        }
        head.push_str(&line);
    }
    let mut bytes = vec![0; length.unwrap_or_else(|| panic!("{method} {path}: no content-length in {head}"))];
    reader.read_exact(&mut bytes).expect("read chromedriver's answer body");
    let body = String::from_utf8_lossy(&bytes).into_owned();
    let answer: Value = serde_json::from_str(&body).unwrap_or_else(|error| panic!("{method} {path}: {error}: {body}"));
    assert!(head.starts_with("HTTP/1.1 200"), "{method} {path}: {answer}");
    answer["value"].clone()
}

/// A headless Chromium driven through its own chromedriver, with a fresh profile, over the W3C
/// WebDriver protocol. Dropping it ends the session (Chromium exits) and kills chromedriver.
pub struct Browser {
    port: u16,
    session: Option<String>,
    _driver: KillOnDrop,
    _profile: tempfile::TempDir,
}

impl std::fmt::Debug for Browser {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Browser").field("port", &self.port).field("session", &self.session).finish_non_exhaustive()
    }
}

/// An element of the page.
#[derive(Debug)]
pub struct Element<'a> {
    browser: &'a Browser,
    id: String,
}

impl Element<'_> {
    fn command(&self, method: &str, what: &str, body: Option<&Value>) -> Value {
        self.browser.command(method, &format!("/element/{}/{what}", self.id), body)
    }

    /// Clicks it.
    pub async fn click(&self) {
        self.command("POST", "click", Some(&json!({})));
    }

    /// Types `text` into it (see [`keys`]).
    pub async fn send_keys(&self, text: &str) {
        self.command("POST", "value", Some(&json!({"text": text})));
    }

    /// Clears an input.
    pub async fn clear(&self) {
        self.command("POST", "clear", Some(&json!({})));
    }

    /// The value of its attribute `name`.
    pub async fn attr(&self, name: &str) -> Option<String> {
        self.command("GET", &format!("attribute/{name}"), None).as_str().map(str::to_owned)
    }

    /// Its visible text.
    pub async fn text(&self) -> String {
        self.command("GET", "text", None).as_str().unwrap_or_default().to_owned()
    }
}

impl Browser {
    /// Starts chromedriver on a free port and a headless Chromium session through it, with a
    /// 1280×900 window.
    pub async fn start() -> Browser {
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
        let profile = tempfile::tempdir().expect("a temp dir for the browser profile");
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

    /// Navigates to `url` (returns once the page has loaded).
    pub async fn goto(&self, url: &str) {
        self.command("POST", "/url", Some(&json!({"url": url})));
    }

    /// Reloads the page (returns once it has loaded).
    pub async fn refresh(&self) {
        self.command("POST", "/refresh", Some(&json!({})));
    }

    /// The page's address.
    pub async fn current_url(&self) -> String {
        self.command("GET", "/url", None).as_str().unwrap_or_default().to_owned()
    }

    /// Runs `body` (a function body that `return`s) in the page.
    pub async fn js(&self, body: &str) -> Value {
        self.js_with(body, Vec::new()).await
    }

    /// Runs `body` with `arguments` in the page.
    pub async fn js_with(&self, body: &str, arguments: Vec<Value>) -> Value {
        self.command("POST", "/execute/sync", Some(&json!({"script": body, "args": arguments})))
    }

    /// Runs the Chrome DevTools Protocol command `cmd` with `params` on the page's target
    /// (chromedriver's `goog/cdp/execute`): its result.
    pub async fn cdp(&self, cmd: &str, params: Value) -> Value {
        self.command("POST", "/goog/cdp/execute", Some(&json!({"cmd": cmd, "params": params})))
    }

    /// Waits until the JS expression `condition` is truthy, or panics after `timeout` with the
    /// page's text.
    pub async fn wait_for(&self, condition: &str, timeout: Duration) {
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
    pub async fn find(&self, css: &str) -> Element<'_> {
        self.wait_for(&format!("document.querySelector({})", json!(css)), Duration::from_secs(5)).await;
        let found = self.command("POST", "/element", Some(&json!({"using": "css selector", "value": css})));
        let id = found[ELEMENT_KEY].as_str().unwrap_or_else(|| panic!("{css}: {found}")).to_owned();
        Element { browser: self, id }
    }

    /// An attribute of the element `css` finds.
    pub async fn attr(&self, css: &str, name: &str) -> Option<String> {
        self.find(css).await.attr(name).await
    }

    /// The visible text of the element `css` finds.
    pub async fn text(&self, css: &str) -> String {
        self.find(css).await.text().await
    }

    /// The page's source as the browser holds it now.
    pub async fn source(&self) -> String {
        self.command("GET", "/source", None).as_str().unwrap_or_default().to_owned()
    }

    /// A PNG of the screen.
    pub async fn screenshot_png(&self) -> Vec<u8> {
        use base64::Engine as _;
        let encoded = self.command("GET", "/screenshot", None);
        base64::engine::general_purpose::STANDARD
            .decode(encoded.as_str().unwrap_or_default())
            .expect("chromedriver's screenshot is base64")
    }

    /// Ends the WebDriver session (Chromium exits; chromedriver is killed on drop).
    pub async fn close(self) {}
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
