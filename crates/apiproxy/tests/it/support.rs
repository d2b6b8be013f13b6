//! The test harness: a gateway on `127.0.0.1:0` over a temporary JSONL store, a raw HTTP client,
//! a JSON-RPC helper, a WebSocket client, and an `apiproxy serve` process over any store. Every wait is bounded and waits on data, not time.

use std::{
    fs,
    io::{BufRead, BufReader, Read, Write},
    net::SocketAddr,
    path::Path,
    process::{Child, Command, Stdio},
    sync::Arc,
    time::Duration,
};

use apiproxy::{ApiProxy, ProxyConfig, ProxyParts, SessionStore};
use futures::{SinkExt, StreamExt};
use http_body_util::{BodyExt, Full};
use hyper::{Request, StatusCode, body::Bytes, header::HeaderMap};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use session_core::{Clock, ManualClock};
use session_persistence::{Backend, Compression, Coordinator, CoordinatorConfig, JsonlConfig, JsonlStore};
use session_projection::ProjectionRegistry;
use session_projection_cache::{CacheConfig, MemoryCheckpointStore, ProjectionCache};
use tempfile::TempDir;
use tokio::{net::TcpStream, sync::oneshot, task::JoinHandle};
use tokio_tungstenite::{
    MaybeTlsStream, WebSocketStream,
    tungstenite::{Message, client::IntoClientRequest},
};

/// Copies a directory tree (a golden or pristine store) to `to`.
pub(crate) fn copy_dir(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for entry in fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            fs::copy(entry.path(), &target).unwrap();
        }
    }
}

/// How long any single wait for the server may take before the test fails.
pub(crate) const WAIT: Duration = Duration::from_secs(20);

pub(crate) struct Server {
    pub(crate) proxy: ApiProxy,
    /// The projection cache, when the server was started with one.
    pub(crate) cache: Option<ProjectionCache>,
    pub(crate) addr: SocketAddr,
    _dir: TempDir,
    shutdown: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
}

impl Server {
    pub(crate) async fn start() -> Server {
        Server::start_with(ProxyConfig::default()).await
    }

    /// A gateway over a fresh raw-encoded JSONL store with a manual clock.
    pub(crate) async fn start_with(config: ProxyConfig) -> Server {
        Server::start_over(config, false).await
    }

    /// A gateway that also mounts a projection checkpoint cache (in memory).
    pub(crate) async fn start_cached() -> Server {
        Server::start_over(ProxyConfig::default(), true).await
    }

    async fn start_over(config: ProxyConfig, cached: bool) -> Server {
        Server::start_with_clock(config, cached, Arc::new(ManualClock::new(1_700_000_000_000))).await
    }

    /// A gateway whose live store stamps with `clock` (and whose `Date` header reads it).
    pub(crate) async fn start_with_clock(config: ProxyConfig, cached: bool, clock: Arc<dyn Clock>) -> Server {
        let dir = tempfile::tempdir().expect("a temp dir");
        let root = dir.path().join("store");
        Server::boot(dir, &root, Compression::None, config, cached, clock).await
    }

    /// A gateway over the existing store at `root`, in `compression`.
    pub(crate) async fn start_on_store(root: &std::path::Path, compression: Compression) -> Server {
        let dir = tempfile::tempdir().expect("a temp dir");
        let clock = Arc::new(ManualClock::new(1_700_000_000_000));
        Server::boot(dir, root, compression, ProxyConfig::default(), false, clock).await
    }

    async fn boot(
        dir: TempDir,
        root: &std::path::Path,
        compression: Compression,
        config: ProxyConfig,
        cached: bool,
        clock: Arc<dyn Clock>,
    ) -> Server {
        let backend = JsonlStore::open(JsonlConfig { root: root.to_owned(), compression, pack_chunks: true })
            .expect("the store opens");
        Server::boot_on(dir, Arc::new(backend), config, cached, clock).await
    }

    /// A gateway over `backend` (shared with other gateways, for the tests of following a store).
    pub(crate) async fn start_on_backend(backend: Arc<dyn Backend>, config: ProxyConfig) -> Server {
        Server::start_on_backend_with_clock(backend, config, Arc::new(ManualClock::new(1_700_000_000_000))).await
    }

    /// [`Server::start_on_backend`] stamping with `clock`.
    pub(crate) async fn start_on_backend_with_clock(
        backend: Arc<dyn Backend>,
        config: ProxyConfig,
        clock: Arc<dyn Clock>,
    ) -> Server {
        let dir = tempfile::tempdir().expect("a temp dir");
        Server::boot_on(dir, backend, config, false, clock).await
    }

    async fn boot_on(
        dir: TempDir,
        backend: Arc<dyn Backend>,
        config: ProxyConfig,
        cached: bool,
        clock: Arc<dyn Clock>,
    ) -> Server {
        let coordinator = Arc::new(Coordinator::new(backend, CoordinatorConfig::default()).unwrap());
        let store = Arc::new(SessionStore::new(clock));
        coordinator.attach(&store).unwrap();
        let registry = ProjectionRegistry::new();
        let cache = cached.then(|| {
            ProjectionCache::new(
                Arc::clone(&registry),
                coordinator.clone(),
                Arc::new(MemoryCheckpointStore::new()),
                Arc::new(ManualClock::new(1_700_000_000_000)),
                CacheConfig::new(100, 60_000).unwrap(),
            )
            .unwrap()
        });
        let parts = ProxyParts { store, persistence: Some(coordinator), registry, cache: cache.clone() };
        let config = ProxyConfig { default_cwd: "/srv/work".to_owned(), ..config };
        let proxy = ApiProxy::new(parts, config).expect("the proxy builds");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (shutdown, stopped) = oneshot::channel::<()>();
        let serving = proxy.clone();
        let task = tokio::spawn(async move {
            let stop = async move {
                let _ = stopped.await;
            };
            serving.serve(listener, stop).await.expect("the server runs");
        });
        Server { proxy, cache, addr, _dir: dir, shutdown: Some(shutdown), task: Some(task) }
    }

    pub(crate) fn store(&self) -> &Arc<SessionStore> {
        self.proxy.store()
    }

    /// Sends one raw HTTP/1.1 request on a fresh connection.
    pub(crate) async fn raw(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: impl Into<Bytes>,
    ) -> (StatusCode, HeaderMap, Bytes) {
        let stream = TcpStream::connect(self.addr).await.unwrap();
        let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await.unwrap();
        tokio::spawn(connection);
        let mut request = Request::builder().method(method).uri(path);
        let has_host = headers.iter().any(|(name, _)| name.eq_ignore_ascii_case("host"));
        if !has_host {
            request = request.header("host", self.addr.to_string());
        }
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let request = request.body(Full::new(body.into())).unwrap();
        let response =
            tokio::time::timeout(WAIT, sender.send_request(request)).await.expect("a timely answer").unwrap();
        let status = response.status();
        let headers = response.headers().clone();
        let body = response.into_body().collect().await.map(|body| body.to_bytes()).unwrap_or_default();
        (status, headers, body)
    }

    /// POSTs a `client-request` and returns the whole `server-response` envelope.
    pub(crate) async fn envelope(&self, owner: Option<&str>, method: &str, payload: Value) -> Value {
        let body = json!({"type": "client-request", "rpcId": "rpc-1", "method": method, "payload": payload});
        let mut headers = vec![("content-type", "application/json")];
        if let Some(owner) = owner {
            headers.push(("x-dsh-owner", owner));
        }
        let (status, _, body) = self.raw("POST", &format!("/api/{method}"), &headers, body.to_string()).await;
        assert_eq!(status, StatusCode::OK, "{method}: {}", String::from_utf8_lossy(&body));
        let envelope: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(envelope["type"], "server-response");
        assert_eq!(envelope["rpcId"], "rpc-1");
        envelope
    }

    pub(crate) async fn call_as(&self, owner: Option<&str>, method: &str, payload: Value) -> Value {
        self.envelope(owner, method, payload).await["result"].take()
    }

    /// Calls `method` and returns its value, failing on an error result.
    pub(crate) async fn ok(&self, owner: Option<&str>, method: &str, payload: Value) -> Value {
        let mut result = self.call_as(owner, method, payload).await;
        assert_eq!(result["ok"], true, "{method}: {result}");
        result["value"].take()
    }

    /// Calls `method` expecting an error with `code`; returns the error.
    pub(crate) async fn err(&self, owner: Option<&str>, method: &str, payload: Value, code: &str) -> Value {
        let mut result = self.call_as(owner, method, payload).await;
        assert_eq!(result["ok"], false, "{method}: {result}");
        assert_eq!(result["error"]["code"], code, "{method}: {result}");
        assert!(result["error"]["details"].is_object(), "{result}");
        result["error"].take()
    }

    /// Opens a WebSocket downlink.
    pub(crate) async fn ws(&self, path: &str, owner: Option<&str>) -> Ws {
        Ws::connect(&self.addr.to_string(), path, owner).await
    }

    pub(crate) async fn stop(mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
        if let Some(task) = self.task.take() {
            let _ = tokio::time::timeout(WAIT, task).await;
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

pub(crate) struct Ws {
    pub(crate) socket: WebSocketStream<MaybeTlsStream<TcpStream>>,
}

impl Ws {
    /// Opens a WebSocket downlink of the gateway at `addr` (`host:port`).
    pub(crate) async fn connect(addr: &str, path: &str, owner: Option<&str>) -> Ws {
        Ws::connect_with(addr, path, owner, None).await
    }

    /// Opens a WebSocket downlink of the gateway at `addr`, with `token` as its bearer token.
    pub(crate) async fn connect_with(addr: &str, path: &str, owner: Option<&str>, token: Option<&str>) -> Ws {
        let mut request = format!("ws://{addr}{path}").into_client_request().unwrap();
        if let Some(owner) = owner {
            request.headers_mut().insert("x-dsh-owner", owner.parse().unwrap());
        }
        if let Some(token) = token {
            request.headers_mut().insert("authorization", format!("Bearer {token}").parse().unwrap());
        }
        let (socket, _) =
            tokio::time::timeout(WAIT, tokio_tungstenite::connect_async(request)).await.expect("timely").unwrap();
        Ws { socket }
    }

    /// The next frame's payload (`server-request` envelope checked), or `None` once the server
    /// closed the socket.
    pub(crate) async fn next(&mut self) -> Option<Value> {
        loop {
            let message = tokio::time::timeout(WAIT, self.socket.next()).await.expect("a frame or a close in time");
            match message {
                None | Some(Err(_)) | Some(Ok(Message::Close(_))) => return None,
                Some(Ok(message)) => {
                    if let Some(payload) = Ws::payload(message) {
                        return Some(payload);
                    }
                }
            }
        }
    }

    /// A text frame's payload (its `server-request` envelope checked); `None` for any other
    /// message.
    pub(crate) fn payload(message: Message) -> Option<Value> {
        let Message::Text(text) = message else { return None };
        let envelope: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(envelope["type"], "server-request", "{envelope}");
        assert!(envelope["rpcId"].as_str().is_some_and(|id| !id.is_empty()));
        assert_eq!(envelope["method"], envelope["payload"]["type"], "{envelope}");
        Some(envelope["payload"].clone())
    }

    /// Frames up to and including the first one `stop` accepts.
    pub(crate) async fn until(&mut self, stop: impl Fn(&Value) -> bool) -> Vec<Value> {
        let mut frames = Vec::new();
        for _ in 0..100_000 {
            let frame = self.next().await.expect("the stream stays open");
            let done = stop(&frame);
            frames.push(frame);
            if done {
                return frames;
            }
        }
        panic!("the expected frame never came");
    }

    /// Sends a ping and waits for its pong: the gateway has read from this socket since.
    pub(crate) async fn ping_pong(&mut self) {
        self.socket.send(Message::Ping(b"p".to_vec().into())).await.unwrap();
        loop {
            let message = tokio::time::timeout(WAIT, self.socket.next()).await.expect("a pong in time");
            if let Some(Ok(Message::Pong(_))) = message {
                return;
            }
            assert!(matches!(message, Some(Ok(_))), "the socket closed before its pong: {message:?}");
        }
    }

    pub(crate) async fn send_text(&mut self, text: &str) {
        self.socket.send(Message::Text(text.into())).await.unwrap();
    }
}

/// A `user/message` event for `session.append`.
pub(crate) fn user_message(id: &str, text: &str) -> Value {
    json!({"type": "user/message", "surfaceOp": "append",
        "data": {"id": id, "role": "user", "source": {"kind": "user"}, "content": [{"type": "text", "text": text}]}})
}

/// An `assistant/message` event for `session.append`.
pub(crate) fn assistant_message(id: &str, turn: u64, text: &str) -> Value {
    json!({"type": "assistant/message", "surfaceOp": "append",
        "data": {"turn": turn, "step": 1, "message": {"id": id, "role": "assistant",
            "source": {"kind": "model", "provider": "test", "model": "m"},
            "content": [{"type": "text", "text": text}]}}})
}

/// The events of one complete turn: start, prompt, step, answer, end.
pub(crate) fn turn(turn: u64) -> Vec<Value> {
    vec![
        json!({"type": "turn/start", "data": {"turn": turn}}),
        user_message(&format!("u{turn}"), &format!("question {turn}")),
        json!({"type": "step/start", "data": {"turn": turn, "step": 1}}),
        assistant_message(&format!("a{turn}"), turn, &format!("answer {turn}")),
        json!({"type": "step/end", "data": {"turn": turn, "step": 1}}),
        json!({"type": "turn/end", "data": {"turn": turn, "reason": {"kind": "completed"}}}),
    ]
}

/// Creates a session (as `owner`) with `n_turns` complete turns; returns its id.
pub(crate) async fn session_with_turns(server: &Server, owner: Option<&str>, id: &str, n_turns: u64) -> String {
    let created = server.ok(owner, "session.create", json!({"sessionId": id})).await;
    assert_eq!(created["sessionId"], id);
    for n in 1..=n_turns {
        server.ok(owner, "session.append", json!({"sessionId": id, "events": turn(n)})).await;
    }
    id.to_owned()
}

/// A gateway process, on `127.0.0.1:0` unless started elsewhere, killed on drop.
pub(crate) struct Gateway {
    child: Child,
    addr: String,
    /// The bearer token its calls carry, when it was started with one.
    token: Option<String>,
}

impl Gateway {
    /// `apiproxy serve --store STORE` on a port of its own, once it listens.
    pub(crate) fn start(store: &str) -> Gateway {
        Gateway::start_with(store, &[])
    }

    /// `apiproxy serve --store STORE` with more flags, once it listens.
    pub(crate) fn start_with(store: &str, flags: &[&str]) -> Gateway {
        Gateway::spawn(store, flags, Stdio::null())
    }

    /// `apiproxy serve --store STORE`, once it listens, with its log (stderr) going to `log`.
    pub(crate) fn start_logging(store: &str, log: &Path) -> Gateway {
        Gateway::spawn(store, &[], Stdio::from(fs::File::create(log).unwrap()))
    }

    /// `apiproxy serve --store STORE` with more variables in its environment (the fault hooks'
    /// `APIPROXY_FAULT_*`, say), once it listens, with its log (stderr) going to `log`.
    pub(crate) fn start_with_env(store: &str, envs: &[(&str, &std::ffi::OsStr)], log: &Path) -> Gateway {
        let mut command = Command::new(env!("CARGO_BIN_EXE_apiproxy"));
        command.args(["serve", "--listen", "127.0.0.1:0", "--store", store]).envs(envs.iter().copied());
        Gateway::spawn_command(command, None, Stdio::from(fs::File::create(log).unwrap()))
    }

    fn spawn(store: &str, flags: &[&str], stderr: Stdio) -> Gateway {
        let mut command = Command::new(env!("CARGO_BIN_EXE_apiproxy"));
        command.args(["serve", "--listen", "127.0.0.1:0", "--store", store]).args(flags);
        Gateway::spawn_command(command, None, stderr)
    }

    /// `apiproxy serve --listen LISTEN --store STORE --token TOKEN` with more flags, run inside
    /// the network namespace `namespace` (through `ip netns exec`, which becomes the gateway
    /// process), once it listens; its log (stderr) goes to `log`. Its calls carry the token.
    pub(crate) fn start_in_namespace(
        namespace: &str,
        listen: &str,
        store: &str,
        token: &str,
        flags: &[&str],
        log: &Path,
    ) -> Gateway {
        let mut command = Command::new("ip");
        command
            .args(["netns", "exec", namespace, env!("CARGO_BIN_EXE_apiproxy")])
            .args(["serve", "--listen", listen, "--store", store, "--token", token])
            .args(flags);
        Gateway::spawn_command(command, Some(token.to_owned()), Stdio::from(fs::File::create(log).unwrap()))
    }

    fn spawn_command(mut command: Command, token: Option<String>, stderr: Stdio) -> Gateway {
        let mut child = command.env_remove("APIPROXY_LOG").stdout(Stdio::piped()).stderr(stderr).spawn().unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        let addr = line
            .strip_prefix("apiproxy listening on http://")
            .and_then(|rest| rest.split_whitespace().next())
            .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
            .to_owned();
        Gateway { child, addr, token }
    }

    /// The gateway process's id.
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Where it listens: `host:port`.
    pub(crate) fn addr(&self) -> &str {
        &self.addr
    }

    /// The bearer token its calls carry, if it was started with one.
    pub(crate) fn token(&self) -> Option<&str> {
        self.token.as_deref()
    }

    /// The `result` of one call.
    pub(crate) fn call(&self, method: &str, payload: Value) -> Value {
        let body = json!({"type": "client-request", "rpcId": "1", "method": method, "payload": payload}).to_string();
        let mut stream = std::net::TcpStream::connect(&self.addr).unwrap();
        // Bounded, as every wait of the harness is: a gateway that stops answering fails the test.
        stream.set_read_timeout(Some(WAIT)).unwrap();
        let authorization =
            self.token.as_ref().map_or_else(String::new, |token| format!("authorization: Bearer {token}\r\n"));
        write!(
            stream,
            "POST /api/{method} HTTP/1.1\r\nHost: {}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
             {authorization}connection: close\r\n\r\n{body}",
            self.addr,
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

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
