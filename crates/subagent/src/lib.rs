//! The subagent catalog: the `subagent/descriptor` event (v2), the `subagent` identity and
//! `subagentTiming` projection units, child creation, `list_children` / `list_descendants` over
//! the three-rung compute-and-discard ladder, resume authorization, and the `list_agents` tool
//! (reference 03; design note "Subagent list identity via the projection unit").
//!
//! The session log is the only authority. Listing adds no derived persistence: a live child is
//! read from the registry's watermark cells (zero log reads), a cold child from the optional
//! checkpoint source when it serves an own-suffix identity (zero reads), otherwise from exactly
//! one streamed read folded through the registry. Nothing is memoized and nothing is written.
//!
//! Decisions where the reference leaves room (reference 03 §10):
//! - Ids tie-break by ordinal byte order, not locale collation.
//! - A malformed current-version descriptor on resume is `NOT_RESUMABLE`, not an uncoded error.
//! - A cancelled listing aborts its reads in flight instead of leaving them detached.
//! - The two descriptor authorities are kept as the reference has them: listing is last-wins over
//!   the whole log, resume is first-wins over the own suffix.
//! - A checkpoint source's snapshot that reports any unit failure is a rung-2 miss, like a
//!   throwing `cachedSnapshot` in the reference: the refold decides.

mod checkpoint;
mod create;
mod descriptor;
mod entry;
mod error;
mod identity;
mod list_agents;
mod listing;
mod resume;
mod runtime;
mod timing;

#[cfg(test)]
mod tests;

pub use crate::{
    checkpoint::CheckpointSource,
    create::{
        ChildOptions, OneShotChild, child_depth, child_meta, create_continuable_child, create_one_shot_child,
        delegation_depth_of, fork_prefix,
    },
    descriptor::{
        ContinuableDescriptor, DESCRIPTOR_EVENT, Descriptor, DescriptorParse, OneShotDescriptor,
        SUBAGENT_DESCRIPTOR_VERSION, SubagentMode, ToolFilter, fold_first_descriptor, parse_descriptor,
    },
    entry::{Activity, ChildEntry, DiagnosticEntry, DiagnosticReason, SubagentDescendantListEntry, SubagentListEntry},
    error::{CreateChildError, DescriptorError, SubagentError, SubagentErrorCode},
    identity::{
        ChildMode, IdentityState, SUBAGENT_IDENTITY_KEY, SUBAGENT_IDENTITY_STATE_VERSION, SubagentIdentity,
        SubagentIdentityUnit,
    },
    list_agents::{
        AgentRow, AgentStatus, AgentStatusSource, LIST_AGENTS_DESCRIPTION, LIST_AGENTS_TOOL_NAME, ListAgentsError,
        ListAgentsScope, ListAgentsTool, LiveSessionStatus, NO_CALLING_AGENT, Position, ToolErrorInfo, ToolOutcome,
        list_agents_output_schema, list_agents_parameters, render,
    },
    listing::{COLD_READ_CONCURRENCY, Scope},
    resume::{ContinuationDelivery, ResumeAuthorization, followup},
    runtime::{SubagentRuntime, SubagentServices, SubagentUnits, register_units},
    timing::{
        ActiveInterval, SUBAGENT_TIMING_KEY, SUBAGENT_TIMING_STATE_VERSION, SubagentTimingUnit, TimingState, TimingView,
    },
};
