//! The browser tests' harness: a headless Chromium through the workspace's small WebDriver client
//! (the `webdriver` crate), an `apiproxy serve --demo` child on a temporary store, plain HTTP
//! calls to it, and waits on the page's own state (`document.body.dataset.state`).

use std::{
    io::{BufRead, BufReader, Read, Write},
    net::TcpStream,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::Duration,
};

use serde_json::{Value, json};
pub(crate) use webdriver::{Browser, keys};
use webdriver::{KillOnDrop, free_port};

/// Whether this runs under CI (`CI` set to anything but empty, `false` or `0`).
fn under_ci() -> bool {
    std::env::var_os("CI").is_some_and(|value| !value.is_empty() && value != "false" && value != "0")
}

/// Whether the browser is installed; when it is not, fails under CI and otherwise says loudly
/// that the test was skipped.
pub(crate) fn browser_available() -> bool {
    let missing = webdriver::missing();
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

/// Where the screenshots go: `target/viewer-screens/`.
pub(crate) fn screens_dir() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target"));
    let dir = target.join("viewer-screens");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// What the scenarios do with the viewer's page beyond plain WebDriver commands.
pub(crate) trait Viewer {
    /// Opens `url` and waits until the page says its view is painted.
    async fn open(&self, url: &str);
    /// Waits until `document.body.dataset.state` is `ready`.
    async fn wait_ready(&self);
    /// Writes a PNG of the screen to `target/viewer-screens/<name>.png`.
    async fn screenshot(&self, name: &str);
}

impl Viewer for Browser {
    async fn open(&self, url: &str) {
        self.goto(url).await;
        self.wait_ready().await;
    }

    async fn wait_ready(&self) {
        self.wait_for("document.body && document.body.dataset.state === 'ready'", Duration::from_secs(10)).await;
    }

    async fn screenshot(&self, name: &str) {
        let png = self.screenshot_png().await;
        std::fs::write(screens_dir().join(format!("{name}.png")), png).unwrap();
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
