//! The message surface (reference 01 §2.3): the ordered seqs of the events that make up the
//! model-visible history, folded incrementally from `surfaceOp` markers.
//!
//! Validation is split from mutation: `SurfaceState::plan` checks one candidate event against the
//! current state without changing it, and `SurfaceState::commit` applies the plan. A session
//! validates an append with `plan` and commits only after every other check passed.

use std::sync::Arc;

use crate::{SessionEvent, SurfaceOp, canonical::tool_result_shape_hash};

/// How a surface-eligible append joins the surface: the marker plus the seqs of earlier events it
/// derives from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SurfaceIntent {
    /// The marker written as the event's `surfaceOp`.
    pub op: SurfaceOp,
    /// Written as the event's `sourceEventSeqs`: earlier seqs the event derives from. A replace
    /// must list every node it shadows.
    pub source_event_seqs: Option<Vec<u64>>,
}

impl SurfaceIntent {
    /// Appends the event as the next surface node, with no sources.
    pub fn append() -> SurfaceIntent {
        SurfaceIntent { op: SurfaceOp::Append, source_event_seqs: None }
    }

    /// Replaces the surface nodes `start..=end` (event seqs). The sources must cover every
    /// shadowed node; see [`SurfaceIntent::with_sources`].
    pub fn replace(start: u64, end: u64) -> SurfaceIntent {
        SurfaceIntent { op: SurfaceOp::Replace { start, end }, source_event_seqs: None }
    }

    /// Sets the seqs of the earlier events this one derives from (`sourceEventSeqs`): unique,
    /// each below the event's own seq, and non-empty except on `assistant/message`.
    pub fn with_sources(mut self, source_event_seqs: impl Into<Vec<u64>>) -> SurfaceIntent {
        self.source_event_seqs = Some(source_event_seqs.into());
        self
    }
}

/// One replacement seen while folding: the replacing event, the declared range, and the nodes it
/// actually removed, in surface order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SurfaceReplacement {
    /// The seq of the replacing event, which now stands where the range stood.
    pub seq: u64,
    /// The declared first replaced node (`surfaceOp.start`).
    pub start: u64,
    /// The declared last replaced node (`surfaceOp.end`).
    pub end: u64,
    /// The nodes the replace removed from the surface, in surface order; the events stay in the
    /// log.
    pub shadowed_seqs: Vec<u64>,
}

/// The result of a full replay: current nodes plus every replacement in event order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SurfaceFold {
    /// The surface after the last event: event seqs in model-visible order.
    pub nodes: Vec<u64>,
    /// Every replacement the log applied, in event order.
    pub replacements: Vec<SurfaceReplacement>,
}

/// The surface of a log, or of a window of a log that starts at `base_seq`.
///
/// The state needs no access to the log: for each current `tool/result` node it keeps a small
/// canonical key of its payload without the rewritable content, which is all the content-only
/// replace rule compares. A reader can therefore validate a log while streaming it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SurfaceState {
    next_seq: u64,
    nodes: Vec<u64>,
    /// The rewrite key of each current `tool/result` node, by its seq, in seq order (a node's
    /// seq is the largest so far when it joins, so pushing keeps the order). Only tool results
    /// have one: the other nodes, most of a long log's, cost their seq alone, which is what
    /// bounds the memory of a read that validates while it streams.
    tool_keys: Vec<(u64, Option<u64>)>,
    replace_generation: u64,
}

/// What the content-only replace rule needs to know about a current node.
#[derive(Debug, Clone, PartialEq, Eq)]
enum RewriteKey {
    NotToolResult,
    /// A `tool/result`, with the structural hash of its payload minus `message.content[0].content`
    /// (`None` when the payload has no message object to compare).
    ToolResult(Option<u64>),
}

/// A validated transition that has not been applied yet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum SurfacePlan {
    /// The event does not touch the surface.
    Untouched {
        seq: u64,
    },
    Append {
        seq: u64,
        key: RewriteKeyPlan,
    },
    Replace {
        seq: u64,
        start: u64,
        end: u64,
        start_idx: usize,
        end_idx: usize,
        key: RewriteKeyPlan,
    },
}

/// The rewrite key of a planned node (opaque outside this module).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RewriteKeyPlan(RewriteKey);

const TOOL_RESULT: &str = "tool/result";

impl SurfaceState {
    /// The surface of an empty log: no node, and the next event must have seq 0.
    pub fn new() -> SurfaceState {
        SurfaceState::default()
    }

    /// A surface for a window of a log whose first event has seq `base_seq`. A replace that
    /// reaches before the window fails, because its start is not found.
    pub fn with_base(base_seq: u64) -> SurfaceState {
        SurfaceState { next_seq: base_seq, ..SurfaceState::default() }
    }

    /// Current surface event seqs in model-visible order. After a replace they are no longer
    /// sorted: the replacing seq takes the place of the range it shadowed.
    pub fn nodes(&self) -> &[u64] {
        &self.nodes
    }

    /// How many replacements have been applied; derived caches rebuild when it changes.
    pub fn replace_generation(&self) -> u64 {
        self.replace_generation
    }

    /// The seq the next event must have.
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// Validates and applies the next event of the log. On error the state is unchanged.
    pub fn apply(&mut self, event: &SessionEvent) -> Result<Option<SurfaceReplacement>, String> {
        let plan = self.plan(event)?;
        Ok(self.commit(plan))
    }

    /// Validates the next event without changing the state, in the reference's order:
    /// contiguity, marker eligibility, then the append or replace rules.
    pub(crate) fn plan(&self, event: &SessionEvent) -> Result<SurfacePlan, String> {
        if event.seq != self.next_seq {
            return Err(format!("session event seq {} is not contiguous; expected {}", event.seq, self.next_seq));
        }
        event.check_eligibility()?;
        match event.surface_op {
            None => Ok(SurfacePlan::Untouched { seq: event.seq }),
            Some(SurfaceOp::Append) => {
                event.check_sources(&[])?;
                Ok(SurfacePlan::Append { seq: event.seq, key: RewriteKeyPlan(rewrite_key(event)) })
            }
            Some(SurfaceOp::Replace { start, end }) => {
                let start_idx = self
                    .position(start)
                    .ok_or_else(|| format!("surface replace: start seq {start} not found in surface"))?;
                let end_idx =
                    self.position(end).ok_or_else(|| format!("surface replace: end seq {end} not found in surface"))?;
                if start_idx > end_idx {
                    return Err(format!(
                        "surface replace: start seq {start} (index {start_idx}) is after end seq {end} (index {end_idx})"
                    ));
                }
                event.check_sources(&self.nodes[start_idx..=end_idx])?;
                let key = rewrite_key(event);
                if let RewriteKey::ToolResult(replacement) = &key {
                    self.check_tool_result_rewrite(start_idx, end_idx, *replacement)?;
                }
                Ok(SurfacePlan::Replace { seq: event.seq, start, end, start_idx, end_idx, key: RewriteKeyPlan(key) })
            }
        }
    }

    /// Applies a plan made by [`SurfaceState::plan`] against this same state.
    pub(crate) fn commit(&mut self, plan: SurfacePlan) -> Option<SurfaceReplacement> {
        match plan {
            SurfacePlan::Untouched { seq } => {
                self.next_seq = seq + 1;
                None
            }
            SurfacePlan::Append { seq, key } => {
                self.next_seq = seq + 1;
                self.nodes.push(seq);
                self.keep_key(seq, key.0);
                None
            }
            SurfacePlan::Replace { seq, start, end, start_idx, end_idx, key } => {
                assert_eq!(seq, self.next_seq, "a surface plan is committed against the state it was made for");
                self.next_seq = seq + 1;
                let shadowed_seqs: Vec<u64> = self.nodes.splice(start_idx..=end_idx, [seq]).collect();
                for shadowed in &shadowed_seqs {
                    if let Some(idx) = self.tool_key_index(*shadowed) {
                        self.tool_keys.remove(idx);
                    }
                }
                self.keep_key(seq, key.0);
                self.replace_generation += 1;
                Some(SurfaceReplacement { seq, start, end, shadowed_seqs })
            }
        }
    }

    /// Keeps the rewrite key of the node `seq` that just joined the surface, if it is a
    /// `tool/result`.
    fn keep_key(&mut self, seq: u64, key: RewriteKey) {
        if let RewriteKey::ToolResult(hash) = key {
            self.tool_keys.push((seq, hash));
        }
    }

    /// Where the current `tool/result` node `seq` keeps its rewrite key.
    fn tool_key_index(&self, seq: u64) -> Option<usize> {
        self.tool_keys.binary_search_by_key(&seq, |(node, _)| *node).ok()
    }

    fn position(&self, seq: u64) -> Option<usize> {
        self.nodes.iter().position(|&node| node == seq)
    }

    /// A `tool/result` replace may only rewrite the content of exactly one current result.
    fn check_tool_result_rewrite(
        &self,
        start_idx: usize,
        end_idx: usize,
        replacement: Option<u64>,
    ) -> Result<(), String> {
        if start_idx != end_idx {
            return Err("tool/result surface replacement must rewrite exactly one current node".to_owned());
        }
        let Some(idx) = self.tool_key_index(self.nodes[start_idx]) else {
            return Err("tool/result surface replacement must target a current tool/result".to_owned());
        };
        match (self.tool_keys[idx].1, replacement) {
            (Some(original), Some(replacement)) if original == replacement => Ok(()),
            _ => Err("tool/result surface replacement may change only content".to_owned()),
        }
    }
}

fn rewrite_key(event: &SessionEvent) -> RewriteKey {
    if event.kind == TOOL_RESULT {
        RewriteKey::ToolResult(tool_result_shape_hash(&event.data))
    } else {
        RewriteKey::NotToolResult
    }
}

/// Replays a complete log (seqs contiguous from 0) through the surface rules.
pub fn fold_surface(events: &[Arc<SessionEvent>]) -> Result<SurfaceFold, String> {
    let mut state = SurfaceState::new();
    let mut replacements = Vec::new();
    for event in events {
        if let Some(replacement) = state.apply(event)? {
            replacements.push(replacement);
        }
    }
    Ok(SurfaceFold { nodes: state.nodes, replacements })
}
