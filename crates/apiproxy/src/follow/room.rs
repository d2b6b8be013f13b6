//! Waiting for room in clients' queues before the follower hands the hub more frames, without
//! holding any of it.

use std::{sync::Arc, time::Duration};

use tokio_util::sync::CancellationToken;

use crate::wire::Frame;

/// How long a chunk waits for room in a client's queue.
pub(super) const ROOM_WAIT: Duration = Duration::from_secs(10);

/// How often a wait for room looks at the queues again.
const ROOM_POLL: Duration = Duration::from_millis(5);

/// Waits (up to [`ROOM_WAIT`]) until each of `queues` has room for `n` more frames. It looks at
/// the room every [`ROOM_POLL`] and holds none of it meanwhile: a wait that took the slots a
/// reading client frees would leave none for the frames other sessions send it (the hub's
/// `try_send`), and cut a client that keeps up.
pub(super) async fn wait_for_room(
    queues: Vec<tokio::sync::mpsc::Sender<Arc<Frame>>>,
    n: usize,
    cancel: &CancellationToken,
) {
    let deadline = tokio::time::Instant::now() + ROOM_WAIT;
    for queue in queues {
        let wanted = n.min(queue.max_capacity());
        while queue.capacity() < wanted && !queue.is_closed() && tokio::time::Instant::now() < deadline {
            tokio::select! {
                () = cancel.cancelled() => return,
                () = tokio::time::sleep(ROOM_POLL) => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::{sync::Arc, time::Duration};

    use tokio_util::sync::CancellationToken;

    use super::wait_for_room;
    use crate::wire::Frame;

    /// A wait for more room than a queue has leaves the room there is to the other senders: a
    /// frame another session sends meanwhile still goes in, and the wait ends once the reader has
    /// made the room.
    #[tokio::test]
    async fn a_wait_for_room_holds_none_of_it() {
        let (sender, mut receiver) = tokio::sync::mpsc::channel::<Arc<Frame>>(4);
        let frame = || Arc::new(Frame::session_subscribed("s", 0));
        for _ in 0..3 {
            sender.try_send(frame()).unwrap();
        }
        let queue = sender.clone();
        let waiting = tokio::spawn(async move { wait_for_room(vec![queue], 4, &CancellationToken::new()).await });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(sender.try_send(frame()).is_ok(), "the free slot stays free while the wait goes on");
        assert!(!waiting.is_finished(), "no room for 4 yet");
        for _ in 0..4 {
            receiver.recv().await.unwrap();
        }
        tokio::time::timeout(Duration::from_secs(10), waiting).await.unwrap().unwrap();
    }
}
