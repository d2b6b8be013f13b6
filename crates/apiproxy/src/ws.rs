//! The WebSocket downlinks (reference 04 §4.3): one task per socket pumps the connection's queue
//! as `server-request` text messages. The socket is downlink-only: any data message from the client
//! closes it with 1008 `downlink only`. A connection that fell behind gets one `stream/error` frame
//! and is closed.
//!
//! Every close the gateway starts is bounded by `push_close_timeout`: its last frames, the close
//! frame and the client's close reply must be through by then, or the socket is reset, which also
//! discards what a client that stopped reading left in its send queue. A send that blocks for
//! `push_send_timeout` resets the socket at once; so does the pong a client's ping is owed, which is
//! written out before the next client message is read, so pings cannot pile replies up. Frames
//! already queued go out together, with one flush per batch (at most [`BATCH_FRAMES`] frames,
//! none added past [`BATCH_BYTES`]), and the send timeout bounds each batch.

use std::sync::Arc;

use axum::extract::ws::{CloseFrame, Message, WebSocket, close_code};
use futures::{
    SinkExt, StreamExt,
    stream::{SplitSink, SplitStream},
};

use crate::{
    access::Caller,
    connection::ConnectionHandle,
    hub::{StreamKind, overflow_error},
    state::Shared,
    wire::Frame,
};

/// Why the pump stopped.
enum Ending {
    /// The client fell behind: `stream/error`, then the close.
    Overflow,
    /// The gateway closes: a close frame (with this status, if any) and the client's reply.
    Close(Option<CloseFrame>),
    /// The client sent its close frame; its reply is owed.
    ClientClosed,
    /// A send blocked for the whole send timeout: the client does not read.
    Stuck,
    /// The socket is broken.
    Gone,
}

pub(crate) async fn pump(
    shared: Arc<Shared>,
    caller: Caller,
    kind: StreamKind,
    socket: WebSocket,
    connection: Option<ConnectionHandle>,
) {
    // The owner is captured once, at upgrade.
    let mut subscription = shared.hub.subscribe(kind, caller.owner);
    let send_timeout = shared.config.push_send_timeout;
    let close_timeout = shared.config.push_close_timeout;
    drop(shared);
    let (mut sink, mut incoming) = socket.split();
    let ending = loop {
        tokio::select! {
            biased;
            () = subscription.overflow.cancelled() => break Ending::Overflow,
            message = incoming.next() => match message {
                None => break Ending::Gone,
                Some(Ok(Message::Close(_))) => break Ending::ClientClosed,
                // tungstenite has queued the pong; it goes out before the next client message is
                // read, bounded like a send, so a client that pings and never reads holds one pong
                // in the gateway (the rest waits in the kernel's buffers) and is reset as stuck.
                Some(Ok(Message::Ping(_))) => {
                    tokio::select! {
                        biased;
                        () = subscription.overflow.cancelled() => break Ending::Overflow,
                        flushed = tokio::time::timeout(send_timeout, sink.flush()) => match flushed {
                            Ok(Ok(())) => {}
                            Ok(Err(_)) => break Ending::Gone,
                            Err(_) => break Ending::Stuck,
                        },
                    }
                }
                Some(Ok(Message::Pong(_))) => {}
                Some(Ok(Message::Text(_) | Message::Binary(_))) => {
                    break Ending::Close(Some(CloseFrame { code: close_code::POLICY, reason: "downlink only".into() }));
                }
                // A message over the size bound, or a protocol violation; the socket may still work.
                Some(Err(error)) => {
                    tracing::debug!(%error, "a WebSocket client sent what the downlink does not take");
                    break Ending::Close(None);
                }
            },
            frame = subscription.frames.recv() => match frame {
                None => break Ending::Close(None),
                Some(frame) => {
                    let batch = send_batch(&mut sink, &frame, &mut subscription.frames);
                    // An overflow while a send blocks ends the send: the close bound runs from the
                    // overflow, not from whenever the send would have given up.
                    tokio::select! {
                        biased;
                        () = subscription.overflow.cancelled() => break Ending::Overflow,
                        sent = tokio::time::timeout(send_timeout, batch) => match sent {
                            Ok(Ok(())) => {}
                            Ok(Err(_)) => break Ending::Gone,
                            Err(_) => break Ending::Stuck,
                        },
                    }
                }
            },
        }
    };
    drop(subscription);
    let closed_cleanly = match ending {
        Ending::Gone => true,
        Ending::Stuck => {
            tracing::warn!("a WebSocket send timed out; resetting the connection");
            false
        }
        Ending::ClientClosed => {
            // Sends the reply tungstenite queued, and flushes.
            tokio::time::timeout(close_timeout, sink.close()).await.is_ok_and(|closed| closed.is_ok())
        }
        Ending::Overflow => {
            let error = Message::Text(Frame::stream_error(&overflow_error()).envelope().into());
            let goodbye = goodbye(&mut sink, &mut incoming, Some(error), None);
            tokio::time::timeout(close_timeout, goodbye).await.is_ok_and(|done| done.is_ok())
        }
        Ending::Close(frame) => {
            let goodbye = goodbye(&mut sink, &mut incoming, None, frame);
            tokio::time::timeout(close_timeout, goodbye).await.is_ok_and(|done| done.is_ok())
        }
    };
    if !closed_cleanly {
        tracing::debug!("a WebSocket client did not complete the close in time; resetting the socket");
        if let Some(connection) = &connection {
            connection.reset_on_close();
        }
    }
    // Dropping both halves drops the socket.
}

/// At most this many frames go out with one flush.
const BATCH_FRAMES: usize = 64;

/// No frame joins a batch once the batch holds this many bytes, so the send timeout, which
/// bounds a batch, asks of a slow client about what it asked of one large frame.
const BATCH_BYTES: usize = 256 << 10;

/// Sends `first` and the frames already queued behind it (up to [`BATCH_FRAMES`] in all, and
/// while the batch holds under [`BATCH_BYTES`]) as messages with one flush at the end: a burst,
/// such as a tail read from the store, costs the socket one write instead of one per frame.
async fn send_batch(
    sink: &mut SplitSink<WebSocket, Message>,
    first: &Frame,
    queued: &mut tokio::sync::mpsc::Receiver<Arc<Frame>>,
) -> Result<(), axum::Error> {
    let text = first.envelope();
    let mut bytes = text.len();
    sink.feed(Message::Text(text.into())).await?;
    for _ in 1..BATCH_FRAMES {
        if bytes >= BATCH_BYTES {
            break;
        }
        let Ok(frame) = queued.try_recv() else { break };
        let text = frame.envelope();
        bytes += text.len();
        sink.feed(Message::Text(text.into())).await?;
    }
    sink.flush().await
}

/// The closing handshake the gateway starts: `last` (if any), the close frame, then the client's
/// close reply, after which nothing is left unread on either side.
async fn goodbye(
    sink: &mut SplitSink<WebSocket, Message>,
    incoming: &mut SplitStream<WebSocket>,
    last: Option<Message>,
    frame: Option<CloseFrame>,
) -> Result<(), axum::Error> {
    if let Some(message) = last {
        sink.send(message).await?;
    }
    sink.send(Message::Close(frame)).await?;
    while let Some(message) = incoming.next().await {
        if matches!(message?, Message::Close(_)) {
            break;
        }
    }
    Ok(())
}
