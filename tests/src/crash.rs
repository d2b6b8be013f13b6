//! Batches for the crash test, shared by the writer child process and the checking parent.

use std::sync::Arc;

use serde_json::json;
use session_core::{JsonData, SessionEvent};

use crate::workload::Prng;

/// The next batch, continuing at `next_seq`. Some batches leave a turn open, so a kill can land
/// while a turn is open; the following batch closes it.
pub fn next_batch(
    prng: &mut Prng,
    next_seq: u64,
    open_turn: &mut Option<u64>,
    turn_no: &mut u64,
) -> Vec<Arc<SessionEvent>> {
    let mut events = Vec::new();
    let mut seq = next_seq;
    let mut push = |kind: &str, value: serde_json::Value| {
        let data = JsonData::from_value(&value).expect("lossless");
        events.push(Arc::new(SessionEvent::new(kind, seq, 1_000 + seq as i64, data)));
        seq += 1;
    };
    match open_turn.take() {
        Some(turn) => {
            push("step/end", json!({"turn": turn, "step": 1}));
            push("turn/end", json!({"turn": turn, "reason": {"kind": "completed"}}));
        }
        None => {
            *turn_no += 1;
            let turn = *turn_no;
            push("turn/start", json!({"turn": turn}));
            push("step/start", json!({"turn": turn, "step": 1}));
            let n_chunks = 1 + prng.below(6);
            for _ in 0..n_chunks {
                let n_bytes = 20 + prng.below(400) as usize;
                let text = prng.prose(n_bytes);
                push(
                    "assistant/chunk",
                    json!({"turn": turn, "step": 1, "chunk": {"type": "text-delta", "index": 0, "text": text}}),
                );
            }
            if prng.below(2) == 0 {
                *open_turn = Some(turn);
            } else {
                push("step/end", json!({"turn": turn, "step": 1}));
                push("turn/end", json!({"turn": turn, "reason": {"kind": "completed"}}));
            }
        }
    }
    events
}

/// FNV-1a over the batch's canonical JSON.
pub fn batch_hash(events: &[Arc<SessionEvent>]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for event in events {
        let text = serde_json::to_string(&**event).expect("events serialize");
        for byte in text.bytes() {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
    }
    hash
}
