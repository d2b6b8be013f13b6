//! The `apiproxy` binary as a child process, for the probes that measure the gateway itself, and
//! the keep-alive HTTP client and the event stream the probes drive it with.

use std::{
    io::{BufRead, BufReader},
    path::Path,
    process::{Child, Command, Stdio},
};

use serde_json::{Value, json};
use tokio::{
    io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader as AsyncBufReader},
    net::TcpStream,
};

/// A running `apiproxy serve` over a store directory; killed and reaped when dropped.
#[derive(Debug)]
pub struct Gateway {
    child: Child,
    addr: String,
}

impl Gateway {
    /// Starts `apiproxy serve --listen 127.0.0.1:0 --store <store>` and waits for the line that
    /// says where it listens (the gateway prints it once it does).
    pub fn serve(apiproxy: &Path, store: &str) -> Gateway {
        Gateway::serve_with(apiproxy, store, &[])
    }

    /// [`Gateway::serve`] with more flags for `serve`.
    pub fn serve_with(apiproxy: &Path, store: &str, flags: &[&str]) -> Gateway {
        Gateway::start(Command::new(apiproxy), apiproxy, store, flags)
    }

    /// [`Gateway::serve_with`] on the CPUs `cpus` only (`taskset -c`, say `1` or `0-1`), every
    /// thread of it from its start.
    pub fn serve_on_cpus(apiproxy: &Path, store: &str, cpus: &str, flags: &[&str]) -> Gateway {
        let mut taskset = Command::new("taskset");
        // `taskset` execs the gateway, so the child is the gateway itself.
        taskset.args(["-c", cpus]).arg(apiproxy);
        Gateway::start(taskset, apiproxy, store, flags)
    }

    fn start(mut command: Command, apiproxy: &Path, store: &str, flags: &[&str]) -> Gateway {
        let mut child = command
            .args(["serve", "--listen", "127.0.0.1:0", "--store", store])
            .args(flags)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|error| panic!("start {}: {error}", apiproxy.display()));
        let stdout = child.stdout.take().expect("piped stdout");
        // Owned from here on, so a panic below still kills the child.
        let mut gateway = Gateway { child, addr: String::new() };
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).expect("the listening line");
        gateway.addr = line
            .split("http://")
            .nth(1)
            .and_then(|rest| rest.split_whitespace().next())
            .unwrap_or_else(|| panic!("no address in {line:?}"))
            .to_owned();
        gateway
    }

    /// The `host:port` it listens on.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// The child's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One client: a keep-alive HTTP/1.1 connection to the gateway.
#[derive(Debug)]
pub struct Client {
    addr: String,
    stream: AsyncBufReader<TcpStream>,
}

impl Client {
    /// Connects to the gateway at `addr` (`host:port`), with `TCP_NODELAY`.
    pub async fn connect(addr: &str) -> Client {
        let stream = TcpStream::connect(addr).await.expect("connect to the gateway");
        stream.set_nodelay(true).expect("TCP_NODELAY");
        Client { addr: addr.to_owned(), stream: AsyncBufReader::new(stream) }
    }

    /// One `POST /api/<method>`; the answer's `value`.
    pub async fn call(&mut self, method: &str, payload: Value) -> Value {
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
pub fn event(n: usize) -> Value {
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
