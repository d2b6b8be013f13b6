//! A store's change signal ([`Backend::watch`](session_persistence::Backend::watch)): one
//! listening connection of its own per watch, outside the pool, on the store's runtime.
//!
//! It `LISTEN`s on the schema's channel, hands each notification of another store handle to the
//! sink, and after every successful `LISTEN` (the first one and each reconnect) sends a
//! [`StoreChange::Sweep`], since what was notified while it was away is gone. A lost connection
//! is opened again after a jittered delay that doubles from `reconnect_min` up to
//! `reconnect_max`; a connection that went quiet is found by a ping every [`PING_INTERVAL`],
//! each bounded by the query timeout. Dropping the [`Watch`] closes the sink's gate (no call
//! starts after the drop returns) and cancels the task, which closes the connection.

use std::{cell::Cell, sync::Arc, time::Duration};

use parking_lot::ReentrantMutex;
use session_persistence::{DatabaseFault, PersistenceError, SharedChangeSink, StoreChange, Watch, WatchOptions};
use tokio_postgres::AsyncMessage;
use tokio_util::sync::CancellationToken;

use crate::{
    db::{Db, DialedConnection, Dialer},
    notify::{self, Notifier},
};

/// How often an idle listening connection is checked (`SELECT 1`), so one that a network fault
/// cut without a word is found and opened again.
pub(crate) const PING_INTERVAL: Duration = Duration::from_secs(5);

/// Starts a watch of `db`'s store: see the module documentation.
pub(crate) fn start(db: &Db, notifier: &Notifier, options: &WatchOptions, sink: SharedChangeSink) -> Watch {
    let gate = Arc::new(Gate { open: ReentrantMutex::new(Cell::new(true)), sink });
    let cancel = CancellationToken::new();
    let listener = Listener {
        dialer: db.dialer().clone(),
        channel: notifier.channel.clone(),
        tag: notifier.tag.clone(),
        options: options.clone(),
    };
    tracing::debug!(store = %listener.dialer.shown, channel = %listener.channel, "starting a watch");
    db.spawn(listener.run(Arc::clone(&gate), cancel.clone()));
    Watch::new(move || {
        gate.close();
        cancel.cancel();
    })
}

/// The way to the sink, closed when the watch is dropped. A call to the sink holds the lock, so
/// closing waits for a call in progress and no call starts after it; the lock is re-entrant, so a
/// sink that drops the watch from inside its call does not deadlock.
struct Gate {
    open: ReentrantMutex<Cell<bool>>,
    sink: SharedChangeSink,
}

impl Gate {
    fn send(&self, change: StoreChange) {
        let open = self.open.lock();
        if open.get() {
            session_persistence::deliver(&*self.sink, change);
        }
    }

    fn close(&self) {
        self.open.lock().set(false);
    }
}

/// What the listening task needs.
struct Listener {
    dialer: Dialer,
    channel: String,
    tag: String,
    options: WatchOptions,
}

/// How one listening connection ended.
struct Ended {
    /// Whether it got as far as listening (the backoff starts over after one that did).
    listened: bool,
    error: PersistenceError,
}

impl Listener {
    async fn run(self, gate: Arc<Gate>, cancel: CancellationToken) {
        let (min, max) = (self.options.reconnect_min, self.options.reconnect_max.max(self.options.reconnect_min));
        let mut delay = min;
        loop {
            let ended = tokio::select! {
                () = cancel.cancelled() => return,
                ended = self.listen_once(&gate) => ended,
            };
            if ended.listened {
                delay = min;
            }
            let wait = session_persistence::jittered(delay);
            if ended.listened {
                tracing::warn!(store = %self.dialer.shown, error = %ended.error, retry_in = ?wait, "the listening connection was lost; reconnecting");
            } else {
                tracing::warn!(store = %self.dialer.shown, error = %ended.error, retry_in = ?wait, "cannot listen for the store's changes; retrying");
            }
            tokio::select! {
                () = cancel.cancelled() => return,
                () = tokio::time::sleep(wait) => {}
            }
            delay = delay.saturating_mul(2).min(max);
        }
    }

    /// Connects, listens, sweeps, and hands notifications to the sink until the connection fails.
    async fn listen_once(&self, gate: &Gate) -> Ended {
        let (client, mut connection) = match self.dialer.connect().await {
            Ok(connected) => connected,
            Err(error) => return Ended { listened: false, error },
        };
        let mut driver = std::pin::pin!(self.drive(&mut connection, gate));
        let listen = format!("LISTEN {}", self.channel);
        let listened = tokio::select! {
            error = &mut driver => Err(error),
            listened = self.dialer.timed("listening", client.batch_execute(&listen)) => listened,
        };
        if let Err(error) = listened {
            return Ended { listened: false, error };
        }
        tracing::debug!(store = %self.dialer.shown, channel = %self.channel, "listening");
        // Whatever was notified before this connection listened is lost: look at everything.
        gate.send(StoreChange::Sweep);
        let pings = async {
            let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + PING_INTERVAL, PING_INTERVAL);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                ticks.tick().await;
                if let Err(error) =
                    self.dialer.timed("checking the listening connection", client.simple_query("SELECT 1")).await
                {
                    return error;
                }
            }
        };
        let error = tokio::select! {
            error = &mut driver => error,
            error = pings => error,
        };
        Ended { listened: true, error }
    }

    /// Drives `connection`, handing each notification to the sink, until it fails or closes.
    async fn drive(&self, connection: &mut DialedConnection, gate: &Gate) -> PersistenceError {
        loop {
            match std::future::poll_fn(|context| connection.poll_message(context)).await {
                Some(Ok(AsyncMessage::Notification(notification))) => {
                    if let Some(change) = notify::parse(notification.payload(), &self.tag) {
                        gate.send(change);
                    }
                }
                Some(Ok(AsyncMessage::Notice(notice))) => {
                    tracing::debug!(store = %self.dialer.shown, notice = %notice.message(), "a notice on the listening connection");
                }
                Some(Ok(_)) => {}
                Some(Err(error)) => return self.dialer.error(error),
                None => {
                    return PersistenceError::database(
                        &self.dialer.shown,
                        DatabaseFault::Connection,
                        "the server closed the listening connection",
                    );
                }
            }
        }
    }
}
