//! The connection layer under the router: the accept loop with its connection cap, the header-read
//! and idle timeouts of each connection, graceful shutdown, and the reset of a socket the gateway
//! gave up on, and each owner's share of the cap.
//!
//! The owner of a connection is known only once a request on it is admitted, so the cap counts
//! sockets from accept and the owner share counts a socket from its first request with an owner
//! ([`ConnectionHandle::charge_owner`]): a connection is charged to the owner of the last such
//! request it carried until it closes, WebSocket downlinks included. Operator-tier requests without
//! an owner are charged to no one.
//!
//! hyper's own `header_read_timeout` starts when the connection waits for a request head, which on
//! a keep-alive connection is as soon as the previous response is out: it cannot tell an idle
//! connection from a slow header. So each connection keeps its own [`Activity`] instead: the
//! socket marks the first byte of a request head, the service marks a request as in progress
//! until its response body is dropped, and a watchdog beside the hyper connection drops the
//! connection when the deadline of its current phase passes. The socket cannot tell a body from
//! the next head, so bytes of a next request that arrived while one was in progress count as idle
//! time until more arrive (the idle timeout still bounds them). The body-read timeout belongs to
//! the one place that reads bodies (`http::read_body`), which answers 408.

use std::{
    collections::HashMap,
    convert::Infallible,
    future::Future,
    io::{Read, Write},
    pin::{Pin, pin},
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    task::{Context, Poll},
    time::Duration,
};

use axum::{
    Router,
    body::{Body, Bytes, HttpBody},
    http::{Request, Response, StatusCode, header},
};
use hyper::{
    body::{Frame, Incoming, SizeHint},
    service::Service,
};
use hyper_util::{rt::TokioIo, service::TowerToHyperService};
use parking_lot::Mutex;
use tokio::{
    io::{AsyncRead, AsyncWrite, ReadBuf},
    net::{TcpListener, TcpStream},
    sync::{Notify, watch},
    time::Instant,
};
use tokio_util::sync::CancellationToken;

use crate::{config::ProxyConfig, date::DateHeader};

/// The answer to a connection over the cap, written without reading its request.
const REFUSAL: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain; charset=utf-8\r\n\
content-length: 24\r\nconnection: close\r\n\r\nconnection limit reached";

/// The answer to a request of an owner whose share of the cap is used up.
pub(crate) const OWNER_REFUSAL: &str = "owner connection limit reached";

/// The open connections of one gateway, counted against its cap and their owners' shares.
#[derive(Debug)]
pub(crate) struct Connections {
    count: watch::Sender<usize>,
    max: usize,
    /// The connections charged to each owner; an owner with none has no entry.
    owners: Mutex<HashMap<String, OwnerCount>>,
    /// How many connections one owner may be charged with.
    owner_share: usize,
}

#[derive(Debug)]
struct OwnerCount {
    n_charged: usize,
    /// A refusal was logged since the owner was last under its share (one warning per episode).
    refusing: bool,
}

/// An owner's share of the cap is used up.
#[derive(Debug)]
pub(crate) struct OwnerShareFull;

impl Connections {
    pub(crate) fn new(max: usize, owner_share: usize) -> Arc<Connections> {
        Arc::new(Connections { count: watch::Sender::new(0), max, owners: Mutex::default(), owner_share })
    }

    /// Charges one connection to `owner` if its share has room.
    fn try_charge(self: &Arc<Self>, owner: &str) -> Result<OwnerCharge, OwnerShareFull> {
        let mut owners = self.owners.lock();
        let count = owners.entry(owner.to_owned()).or_insert(OwnerCount { n_charged: 0, refusing: false });
        if count.n_charged >= self.owner_share {
            if !count.refusing {
                tracing::warn!(
                    owner,
                    share = self.owner_share,
                    "an owner's share of the connection cap is used up; refusing its requests"
                );
            }
            count.refusing = true;
            return Err(OwnerShareFull);
        }
        count.n_charged += 1;
        Ok(OwnerCharge { connections: Arc::clone(self), owner: owner.to_owned() })
    }

    /// Takes a slot if one is free.
    fn try_admit(self: &Arc<Self>) -> Option<Slot> {
        let admitted = self.count.send_if_modified(|count| {
            let free = *count < self.max;
            if free {
                *count += 1;
            }
            free
        });
        admitted.then(|| Slot { connections: Arc::clone(self) })
    }

    pub(crate) fn n_open(&self) -> usize {
        *self.count.borrow()
    }

    pub(crate) fn watch(&self) -> watch::Receiver<usize> {
        self.count.subscribe()
    }
}

/// One connection charged to an owner; dropping it frees a place in the owner's share.
#[derive(Debug)]
struct OwnerCharge {
    connections: Arc<Connections>,
    owner: String,
}

impl Drop for OwnerCharge {
    fn drop(&mut self) {
        let mut owners = self.connections.owners.lock();
        // Invariant: a charge is counted in its owner's entry until it is dropped.
        let count = owners.get_mut(&self.owner).expect("a charged owner has an entry");
        count.n_charged -= 1;
        count.refusing = false;
        if count.n_charged == 0 {
            owners.remove(&self.owner);
        }
    }
}

/// One counted connection; dropping it (with the socket) frees the slot.
#[derive(Debug)]
struct Slot {
    connections: Arc<Connections>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.connections.count.send_modify(|count| *count -= 1);
    }
}

/// The timeouts the watchdog applies.
#[derive(Debug, Clone, Copy)]
struct Timeouts {
    header: Duration,
    idle: Duration,
}

/// What one connection is doing, shared by its socket, its requests and its watchdog.
#[derive(Debug)]
struct Connection {
    activity: Mutex<Activity>,
    /// Signalled when the deadline may have moved earlier or appeared.
    changed: Notify,
    /// Set when the gateway gives up on the client: the socket is then reset when it is dropped,
    /// discarding whatever the client left unread in its send queue.
    reset_on_close: AtomicBool,
    /// The owner this connection counts against, once a request with an owner was admitted on it;
    /// released when the socket is dropped.
    owner: Mutex<Option<OwnerCharge>>,
}

#[derive(Debug)]
struct Activity {
    /// Requests whose response body has not been dropped yet.
    in_flight: usize,
    /// The connection was handed to a WebSocket; the downlink bounds it from then on.
    upgraded: bool,
    /// Bytes of a request head have arrived (or the connection is new) and no request started.
    reading_head: bool,
    /// When the current phase began.
    since: Instant,
}

impl Connection {
    fn new() -> Arc<Connection> {
        Arc::new(Connection {
            // A new connection owes its first request head within the header timeout.
            activity: Mutex::new(Activity { in_flight: 0, upgraded: false, reading_head: true, since: Instant::now() }),
            changed: Notify::new(),
            reset_on_close: AtomicBool::new(false),
            owner: Mutex::new(None),
        })
    }

    /// The instant the current phase times out, and which timeout that is; none while a request is
    /// in progress or after an upgrade.
    fn deadline(&self, timeouts: Timeouts) -> Option<(Instant, &'static str)> {
        let activity = self.activity.lock();
        if activity.upgraded || activity.in_flight > 0 {
            None
        } else if activity.reading_head {
            Some((activity.since + timeouts.header, "header read"))
        } else {
            Some((activity.since + timeouts.idle, "idle"))
        }
    }

    /// Bytes arrived: on an idle connection they start a request head.
    fn on_read(&self) {
        let mut activity = self.activity.lock();
        if !activity.reading_head && !activity.upgraded && activity.in_flight == 0 {
            activity.reading_head = true;
            activity.since = Instant::now();
            drop(activity);
            self.changed.notify_one();
        }
    }

    /// A request head was parsed and handed to the router.
    fn start_request(self: &Arc<Self>) -> InFlight {
        let mut activity = self.activity.lock();
        activity.in_flight += 1;
        activity.reading_head = false;
        InFlight { connection: Arc::clone(self) }
    }
}

/// A request in progress, from its head until its response body is dropped.
#[derive(Debug)]
struct InFlight {
    connection: Arc<Connection>,
}

impl InFlight {
    fn upgraded(&self) {
        self.connection.activity.lock().upgraded = true;
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let mut activity = self.connection.activity.lock();
        activity.in_flight -= 1;
        if activity.in_flight == 0 {
            activity.since = Instant::now();
            drop(activity);
            self.connection.changed.notify_one();
        }
    }
}

/// A handle on the connection a request arrived on, in the request's extensions (absent when the
/// router is served by something else).
#[derive(Debug, Clone)]
pub(crate) struct ConnectionHandle(Arc<Connection>);

impl ConnectionHandle {
    /// Resets the socket when it closes instead of letting the kernel deliver (or retry) what is
    /// still queued for a client that does not read.
    pub(crate) fn reset_on_close(&self) {
        self.0.reset_on_close.store(true, Ordering::Relaxed);
    }

    /// Charges this connection to `owner` (moving the charge from another owner, if a request of
    /// another owner came first), or refuses when `owner` already holds its whole share.
    pub(crate) fn charge_owner(&self, connections: &Arc<Connections>, owner: &str) -> Result<(), OwnerShareFull> {
        let mut charged = self.0.owner.lock();
        if charged.as_ref().is_some_and(|charge| charge.owner == owner) {
            return Ok(());
        }
        let charge = connections.try_charge(owner)?;
        // Replacing drops the previous owner's charge.
        *charged = Some(charge);
        Ok(())
    }
}

/// The accepted socket: it holds the connection's slot, marks request heads, and resets itself on
/// drop when asked to. It moves into the WebSocket on an upgrade, so a downlink keeps its slot.
#[derive(Debug)]
struct Socket {
    stream: TcpStream,
    connection: Arc<Connection>,
    _slot: Slot,
}

impl Drop for Socket {
    fn drop(&mut self) {
        // The owner's place frees with the socket, whoever still holds a handle on the connection.
        drop(self.connection.owner.lock().take());
        if self.connection.reset_on_close.load(Ordering::Relaxed)
            && let Err(error) = self.stream.set_zero_linger()
        {
            tracing::debug!(%error, "cannot set a zero linger on a socket being reset");
        }
    }
}

impl AsyncRead for Socket {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let poll = Pin::new(&mut this.stream).poll_read(cx, buf);
        if matches!(poll, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            this.connection.on_read();
        }
        poll
    }
}

impl AsyncWrite for Socket {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }
}

/// A response body that keeps its request in flight until hyper drops it.
struct TrackedBody {
    body: Body,
    _in_flight: InFlight,
}

impl HttpBody for TrackedBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.get_mut().body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// Serves `router` on `listener` until `shutdown` resolves; then stops accepting, lets every open
/// request finish (idle connections close at once) and returns when the last HTTP connection has
/// ended. WebSocket downlinks live on past that; they end with the hub. Every response's `Date`
/// header comes from `clock`.
pub(crate) async fn serve(
    connections: Arc<Connections>,
    config: &ProxyConfig,
    clock: Arc<dyn session_core::Clock>,
    router: Router,
    listener: TcpListener,
    shutdown: impl Future<Output = ()>,
) {
    let timeouts = Timeouts { header: config.header_read_timeout, idle: config.idle_timeout };
    let service = TowerToHyperService::new(router);
    let date = Arc::new(DateHeader::new(clock));
    let stopping = CancellationToken::new();
    // Every connection task holds a clone of `running`; `closed` resolves when the last one ended.
    let (ended, running) = watch::channel(());
    let mut shutdown = pin!(shutdown);
    let mut refusing = false;
    loop {
        let stream = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _peer)) => stream,
                Err(error) if is_connection_error(&error) => continue,
                Err(error) => {
                    // Out of descriptors or memory: wait a little instead of spinning.
                    tracing::error!(%error, "accepting a connection failed");
                    tokio::select! {
                        () = &mut shutdown => break,
                        () = tokio::time::sleep(Duration::from_secs(1)) => continue,
                    }
                }
            },
        };
        let Some(slot) = connections.try_admit() else {
            if !refusing {
                tracing::warn!(max = connections.max, "the connection cap is reached; refusing new connections");
            }
            refusing = true;
            refuse(stream);
            continue;
        };
        refusing = false;
        let connection = Connection::new();
        let socket = Socket { stream, connection: Arc::clone(&connection), _slot: slot };
        let task = serve_connection(socket, connection, service.clone(), Arc::clone(&date), timeouts, stopping.clone());
        let running = running.clone();
        tokio::spawn(async move {
            task.await;
            drop(running);
        });
    }
    drop(listener);
    stopping.cancel();
    drop(running);
    ended.closed().await;
}

/// Errors of one connection that was reset before it was accepted: the listener is fine.
fn is_connection_error(error: &std::io::Error) -> bool {
    matches!(
        error.kind(),
        std::io::ErrorKind::ConnectionRefused
            | std::io::ErrorKind::ConnectionAborted
            | std::io::ErrorKind::ConnectionReset
    )
}

/// Answers a connection over the cap with 503 and closes it, without a task or a wait: what the
/// client already sent is drained first (so the close is not a reset racing the answer), and the
/// answer fits an empty send buffer.
fn refuse(stream: TcpStream) {
    let Ok(stream) = stream.into_std() else { return };
    let mut sink = [0u8; 4096];
    for _ in 0..16 {
        match (&stream).read(&mut sink) {
            Ok(n) if n > 0 => {}
            _ => break,
        }
    }
    let _ = (&stream).write(REFUSAL);
}

/// Runs one HTTP/1.1 connection (with upgrades) beside its watchdog.
async fn serve_connection(
    socket: Socket,
    connection: Arc<Connection>,
    service: TowerToHyperService<Router>,
    date: Arc<DateHeader>,
    timeouts: Timeouts,
    stopping: CancellationToken,
) {
    let handle = ConnectionHandle(Arc::clone(&connection));
    let tracked = Arc::clone(&connection);
    let service = hyper::service::service_fn(move |mut request: Request<Incoming>| {
        let in_flight = tracked.start_request();
        request.extensions_mut().insert(handle.clone());
        let response = service.call(request);
        let date = Arc::clone(&date);
        async move {
            let mut response: Response<Body> = response.await?;
            response.headers_mut().entry(header::DATE).or_insert_with(|| date.value());
            if response.status() == StatusCode::SWITCHING_PROTOCOLS {
                in_flight.upgraded();
            }
            Ok::<_, Infallible>(response.map(|body| TrackedBody { body, _in_flight: in_flight }))
        }
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    // The watchdog below times heads; hyper's timer would also cut idle keep-alive connections.
    builder.header_read_timeout(None);
    // hyper's own `Date` reads the system time and panics on one before 1970; ours comes from the
    // gateway's clock, clamped.
    builder.auto_date_header(false);
    let mut conn = pin!(builder.serve_connection(TokioIo::new(socket), service).with_upgrades());
    let mut draining = false;
    loop {
        let deadline = connection.deadline(timeouts);
        let expiry = async {
            match deadline {
                Some((at, _)) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            result = conn.as_mut() => {
                if let Err(error) = result {
                    tracing::debug!(%error, "a connection ended with an error");
                }
                return;
            }
            () = stopping.cancelled(), if !draining => {
                draining = true;
                conn.as_mut().graceful_shutdown();
            }
            () = expiry => {
                // The phase may have changed since the deadline was taken; only a current one counts.
                if let Some((at, what)) = connection.deadline(timeouts)
                    && at <= Instant::now()
                {
                    tracing::debug!(timeout = what, "closing a connection that timed out");
                    return;
                }
            }
            () = connection.changed.notified() => {}
        }
    }
}
