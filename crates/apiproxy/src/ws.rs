//! The WebSocket downlinks (reference 04 §4.3): one task per socket pumps the connection's queue
//! as `server-request` text messages. The socket is downlink-only: any data message from the client
//! closes it with 1008 `downlink only`. A connection that fell behind gets one `stream/error` frame
//! and is closed.

use std::sync::Arc;

use axum::extract::ws::{CloseFrame, Message, WebSocket, close_code};
use futures::{SinkExt, StreamExt};

use crate::{
    access::Caller,
    hub::{StreamKind, overflow_error},
    proxy::Shared,
    wire::Frame,
};

pub(crate) async fn pump(shared: Arc<Shared>, caller: Caller, kind: StreamKind, socket: WebSocket) {
    // The owner is captured once, at upgrade.
    let mut subscription = shared.hub.subscribe(kind, caller.owner);
    let send_timeout = shared.config.push_send_timeout;
    drop(shared);
    let (mut sink, mut incoming) = socket.split();
    let close = loop {
        tokio::select! {
            biased;
            () = subscription.overflow.cancelled() => {
                let frame = Frame::stream_error(&overflow_error());
                let sent = tokio::time::timeout(send_timeout, sink.send(Message::Text(frame.envelope().into()))).await;
                break sent.is_ok_and(|sent| sent.is_ok()).then_some(None);
            }
            message = incoming.next() => match message {
                None | Some(Err(_)) | Some(Ok(Message::Close(_))) => break None,
                Some(Ok(Message::Ping(_) | Message::Pong(_))) => {}
                Some(Ok(Message::Text(_) | Message::Binary(_))) => {
                    break Some(Some(CloseFrame { code: close_code::POLICY, reason: "downlink only".into() }));
                }
            },
            frame = subscription.frames.recv() => match frame {
                None => break Some(None),
                Some(frame) => {
                    let message = Message::Text(frame.envelope().into());
                    match tokio::time::timeout(send_timeout, sink.send(message)).await {
                        Ok(Ok(())) => {}
                        Ok(Err(_)) => break None,
                        Err(_) => {
                            tracing::warn!("a WebSocket send timed out; closing the connection");
                            break None;
                        }
                    }
                }
            },
        }
    };
    drop(subscription);
    if let Some(frame) = close {
        let _ = tokio::time::timeout(send_timeout, sink.send(Message::Close(frame))).await;
    }
    let _ = sink.close().await;
}
