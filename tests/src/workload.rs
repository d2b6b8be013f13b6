//! The benchmark workload of `docs/reference/bench.md`: realistic agent transcripts made of
//! 11-event turns with pseudo-English text, deterministic for a given seed.

use std::sync::Arc;

use serde_json::{Value, json};
use session_core::{JsonData, SessionEvent, SurfaceOp};

/// About 150 common words; prose built from them compresses like real transcripts (~2.85x).
const WORDS: &[&str] = &[
    "the",
    "of",
    "and",
    "to",
    "in",
    "is",
    "that",
    "for",
    "it",
    "as",
    "was",
    "with",
    "be",
    "by",
    "on",
    "not",
    "he",
    "this",
    "are",
    "or",
    "his",
    "from",
    "at",
    "which",
    "but",
    "have",
    "an",
    "had",
    "they",
    "you",
    "were",
    "their",
    "one",
    "all",
    "we",
    "can",
    "her",
    "has",
    "there",
    "been",
    "if",
    "more",
    "when",
    "will",
    "would",
    "who",
    "so",
    "no",
    "she",
    "other",
    "its",
    "may",
    "these",
    "what",
    "them",
    "than",
    "some",
    "him",
    "time",
    "into",
    "only",
    "do",
    "could",
    "new",
    "about",
    "two",
    "first",
    "then",
    "made",
    "also",
    "any",
    "like",
    "after",
    "our",
    "where",
    "most",
    "over",
    "such",
    "many",
    "through",
    "before",
    "must",
    "well",
    "should",
    "each",
    "because",
    "between",
    "under",
    "build",
    "test",
    "failing",
    "nightly",
    "runner",
    "image",
    "config",
    "module",
    "function",
    "error",
    "result",
    "value",
    "change",
    "commit",
    "branch",
    "merge",
    "deploy",
    "server",
    "client",
    "request",
    "response",
    "cache",
    "index",
    "query",
    "table",
    "column",
    "schema",
    "migration",
    "version",
    "release",
    "package",
    "dependency",
    "compile",
    "link",
    "thread",
    "process",
    "memory",
    "disk",
    "network",
    "socket",
    "buffer",
    "stream",
    "frame",
    "log",
    "trace",
    "metric",
    "alert",
    "timeout",
    "retry",
    "queue",
    "worker",
    "job",
    "task",
    "step",
    "turn",
    "session",
    "agent",
    "model",
    "tool",
    "file",
    "path",
    "line",
    "word",
];

/// A small deterministic PRNG (SplitMix64).
#[derive(Debug, Clone)]
pub struct Prng(u64);

impl Prng {
    /// A generator whose whole sequence is fixed by `seed`.
    pub fn new(seed: u64) -> Prng {
        Prng(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (with a modulo bias no workload notices). `n` must not be 0.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    /// Prose of roughly `n_bytes` bytes.
    pub fn prose(&mut self, n_bytes: usize) -> String {
        let mut text = String::with_capacity(n_bytes + 16);
        let mut sentence_start = true;
        while text.len() < n_bytes {
            let word = WORDS[self.below(WORDS.len() as u64) as usize];
            if sentence_start {
                let mut chars = word.chars();
                if let Some(first) = chars.next() {
                    text.extend(first.to_uppercase());
                    text.push_str(chars.as_str());
                }
            } else {
                text.push_str(word);
            }
            sentence_start = self.below(12) == 0;
            text.push_str(if sentence_start { ". " } else { " " });
        }
        text.truncate(text.trim_end().len());
        text
    }
}

/// Builds the events of one transcript, turn by turn, with contiguous seqs.
#[derive(Debug)]
pub struct TranscriptBuilder {
    prng: Prng,
    next_seq: u64,
    time: i64,
    turn: u64,
    label: Option<String>,
}

fn data(value: Value) -> JsonData {
    JsonData::from_value(&value).expect("workload payloads are lossless JSON")
}

impl TranscriptBuilder {
    /// `label`: when set, turn 1 carries a continuable `subagent/descriptor` with this label.
    pub fn new(seed: u64, start_time: i64, label: Option<String>) -> TranscriptBuilder {
        TranscriptBuilder { prng: Prng::new(seed), next_seq: 0, time: start_time, turn: 0, label }
    }

    /// The seq the next event gets, which is also the number of events built so far.
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }

    fn push(&mut self, events: &mut Vec<Arc<SessionEvent>>, kind: &str, value: Value, surface: bool) {
        self.time += 1 + self.prng.below(40) as i64;
        let mut event = SessionEvent::new(kind, self.next_seq, self.time, data(value));
        if surface {
            event.surface_op = Some(SurfaceOp::Append);
        }
        self.next_seq += 1;
        events.push(Arc::new(event));
    }

    /// One complete turn: 11 events, 12 for turn 1 of a subagent child.
    pub fn turn(&mut self) -> Vec<Arc<SessionEvent>> {
        self.turn += 1;
        let turn = self.turn;
        let mut events = Vec::with_capacity(12);
        let seq = self.next_seq;
        self.push(&mut events, "turn/start", json!({"turn": turn}), false);
        self.push(&mut events, "step/start", json!({"turn": turn, "step": 1}), false);
        let user_text = self.prng.prose(560);
        self.push(
            &mut events,
            "user/message",
            json!({"id": format!("u-{seq}"), "role": "user", "source": {"kind": "user"},
                   "content": [{"type": "text", "text": user_text}]}),
            true,
        );
        if turn == 1
            && let Some(label) = self.label.clone()
        {
            self.push(
                &mut events,
                "subagent/descriptor",
                json!({"version": 2, "mode": "continuable", "provider": "spawn", "label": label}),
                false,
            );
        }
        let call_id = format!("call-{seq}");
        let assistant_text = self.prng.prose(520);
        self.push(
            &mut events,
            "assistant/message",
            json!({"turn": turn, "step": 1, "message": {"id": format!("a-{seq}"), "role": "assistant",
                   "source": {"kind": "model", "provider": "bench", "model": "bench-1"},
                   "content": [{"type": "text", "text": assistant_text},
                               {"type": "tool-call", "id": call_id, "name": "read_file", "arguments": "{\"path\":\"src/lib.rs\"}"}]},
                   "usage": {"inputTokens": 1200 + turn, "outputTokens": 180, "cacheReadTokens": 1024}}),
            true,
        );
        self.push(
            &mut events,
            "tool/call",
            json!({"turn": turn, "step": 1, "callId": call_id, "name": "read_file",
                   "arguments": "{\"path\":\"src/lib.rs\",\"offset\":0,\"limit\":400}"}),
            false,
        );
        let tool_seq = self.next_seq - 1;
        let result_text = self.prng.prose(900);
        let before = events.len();
        self.push(
            &mut events,
            "tool/result",
            json!({"turn": turn, "step": 1, "message": {"id": format!("t-{seq}"), "role": "user",
                   "source": {"kind": "tool", "callId": call_id},
                   "content": [{"type": "tool-result", "toolCallId": call_id, "isError": false,
                                "content": [{"type": "text", "text": result_text}]}]}}),
            true,
        );
        if let Some(last) = events.get_mut(before) {
            let mut result = SessionEvent::clone(last);
            result.source_event_seqs = Some(vec![tool_seq].into());
            *last = Arc::new(result);
        }
        self.push(&mut events, "step/end", json!({"turn": turn, "step": 1}), false);
        self.push(&mut events, "step/start", json!({"turn": turn, "step": 2}), false);
        let answer = self.prng.prose(620);
        self.push(
            &mut events,
            "assistant/message",
            json!({"turn": turn, "step": 2, "message": {"id": format!("b-{seq}"), "role": "assistant",
                   "source": {"kind": "model", "provider": "bench", "model": "bench-1"},
                   "content": [{"type": "text", "text": answer}]}}),
            true,
        );
        self.push(&mut events, "step/end", json!({"turn": turn, "step": 2}), false);
        self.push(&mut events, "turn/end", json!({"turn": turn, "reason": {"kind": "completed"}}), false);
        events
    }

    /// Turns until the transcript holds exactly `n_events` events (the last turn may be cut short,
    /// which leaves it open).
    pub fn transcript(&mut self, n_events: u64) -> Vec<Vec<Arc<SessionEvent>>> {
        let mut batches = Vec::new();
        while self.next_seq < n_events {
            let mut turn = self.turn();
            let excess = self.next_seq.saturating_sub(n_events) as usize;
            if excess > 0 {
                turn.truncate(turn.len() - excess);
                self.next_seq = n_events;
            }
            batches.push(turn);
        }
        batches
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transcripts_have_exact_lengths_and_contiguous_seqs() {
        let mut builder = TranscriptBuilder::new(7, 1_000, Some("label".into()));
        let batches = builder.transcript(100);
        let events: Vec<_> = batches.into_iter().flatten().collect();
        assert_eq!(events.len(), 100);
        assert!(events.iter().enumerate().all(|(idx, event)| event.seq == idx as u64));
        assert_eq!(events[3].kind, "subagent/descriptor");
        let mean = events.iter().map(|e| serde_json::to_string(&**e).unwrap().len()).sum::<usize>() / events.len();
        assert!((250..500).contains(&mean), "mean line size {mean} should be near 373 bytes");
    }

    #[test]
    fn same_seed_same_transcript() {
        let a: Vec<_> = TranscriptBuilder::new(3, 0, None).transcript(50).into_iter().flatten().collect();
        let b: Vec<_> = TranscriptBuilder::new(3, 0, None).transcript(50).into_iter().flatten().collect();
        assert_eq!(a, b);
    }
}
