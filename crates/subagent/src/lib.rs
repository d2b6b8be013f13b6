//! The subagent catalog: the `subagent/descriptor` event (v2), the `subagent` identity and
//! `subagentTiming` projection units, child creation, `list_children` / `list_descendants` over
//! the three-rung compute-and-discard ladder, resume authorization, and the `list_agents` tool
//! (reference 03; design note "Subagent list identity via the projection unit").
//!
//! - [`SubagentRuntime`] is the catalog service over [`SubagentServices`] (the live store, the
//!   projection registry, session persistence and an optional [`CheckpointSource`]). It
//!   registers the [`SubagentIdentityUnit`] and [`SubagentTimingUnit`] for as long as it lives,
//!   lists children with [`list_children`](SubagentRuntime::list_children) and
//!   [`list_descendants`](SubagentRuntime::list_descendants) (rows: [`SubagentListEntry`]), and
//!   decides resumes with [`authorize_resume`](SubagentRuntime::authorize_resume), whose errors
//!   carry the reference's stable codes ([`SubagentError`], [`SubagentErrorCode`]).
//! - [`Descriptor`] is the `subagent/descriptor` payload, the only durable record of a child's
//!   mode and label; [`create_continuable_child`] and [`create_one_shot_child`] create children
//!   with the right header and put the descriptor where each mode needs it.
//! - [`ListAgentsTool`] is the `list_agents` model tool over the catalog.
//!
//! The session log is the only authority. Listing adds no derived persistence: a live child is
//! read from the registry's watermark cells (zero log reads), a cold child from the optional
//! checkpoint source when it serves an own-suffix identity (zero reads), otherwise from exactly
//! one streamed read folded through the registry. Nothing is memoized and nothing is written.
//!
//! This crate sits on every layer below it and reaches each through its public contract: live
//! sessions through [`SessionStore`](session_core::SessionStore), stored logs through
//! [`SessionPersistence`](session_persistence::SessionPersistence), folds through
//! [`ProjectionRegistry`](session_projection::ProjectionRegistry), and stored values through
//! [`ProjectionCache`](session_projection_cache::ProjectionCache) as its [`CheckpointSource`].
//! It knows neither the on-disk bytes nor the wire JSON; `apiproxy` serves its rows.
//!
//! # Example
//!
//! A parent with three children, one live and two cold, each listed by a different rung of the
//! ladder:
//!
//! ```
//! use std::sync::Arc;
//!
//! use session_core::{CreateOptions, ManualClock, SessionId, SessionStore};
//! use session_persistence::{Coordinator, CoordinatorConfig, MemoryStore};
//! use session_projection::ProjectionRegistry;
//! use session_projection_cache::{CacheConfig, MemoryCheckpointStore, ProjectionCache};
//! use subagent::{Activity, ChildOptions, ContinuableDescriptor, SubagentRuntime, SubagentServices};
//! use tokio_util::sync::CancellationToken;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! tokio::runtime::Runtime::new()?.block_on(async {
//!     // The stack below: live sessions written behind to storage, the registry folding them,
//!     // and a checkpoint cache over both.
//!     let clock = Arc::new(ManualClock::new(1_772_442_000_000));
//!     let store = Arc::new(SessionStore::new(clock.clone()));
//!     let persistence = Arc::new(Coordinator::new(Arc::new(MemoryStore::new()), CoordinatorConfig::default())?);
//!     persistence.attach(&store)?;
//!     let registry = ProjectionRegistry::new();
//!     let _folding = registry.attach(&store);
//!     let records = Arc::new(MemoryCheckpointStore::new());
//!     let throttles = CacheConfig::new(100, 5_000)?;
//!     let cache =
//!         ProjectionCache::new(registry.clone(), persistence.clone(), records.clone(), clock.clone(), throttles)?;
//!
//!     // The catalog; it registers the `subagent` and `subagentTiming` units while it lives.
//!     let catalog = SubagentRuntime::new(SubagentServices {
//!         sessions: Some(store.clone()),
//!         projections: Some(registry.clone()),
//!         persistence: Some(persistence.clone()),
//!         cache: Some(Arc::new(cache.clone())),
//!     })?;
//!
//!     // A parent and three continuable children, one second apart.
//!     let parent = store.create(Some(SessionId::from("parent")), CreateOptions::default())?;
//!     let spawn = |id: &str, label: &str| {
//!         clock.advance(1_000);
//!         let descriptor = ContinuableDescriptor {
//!             provider: "example".to_owned(),
//!             label: label.to_owned(),
//!             agent_provider: None,
//!             agent_model: None,
//!             persona: None,
//!             tool_filter: None,
//!         };
//!         let options = ChildOptions { id: Some(SessionId::from(id)), ..ChildOptions::default() };
//!         subagent::create_continuable_child(&store, &parent, descriptor, options)
//!     };
//!     let _live = spawn("child-live", "still working")?;
//!     let checkpointed = spawn("child-checkpointed", "done, checkpointed")?;
//!     let cold = spawn("child-cold", "done, log only")?;
//!
//!     // Two children go cold: durable, then out of the live store. One of them leaves a
//!     // checkpoint record behind (`write` flushes its log first).
//!     cache.write(&checkpointed).await?;
//!     store.flush(cold.id()).await?;
//!     store.detach(checkpointed.id());
//!     store.detach(cold.id());
//!     assert_eq!(records.ids(), [SessionId::from("child-checkpointed")]);
//!
//!     let rows = catalog.list_children(parent.id(), &CancellationToken::new()).await?;
//!     let shown: Vec<_> = rows
//!         .iter()
//!         .filter_map(|row| row.as_child())
//!         .map(|child| (child.id.as_str(), child.mode.label(), child.activity))
//!         .collect();
//!     assert_eq!(shown, [
//!         // Rung 1: the registry's live cells, zero log reads.
//!         ("child-live", Some("still working"), Activity::Running),
//!         // Rung 2: the checkpoint record of its own descriptor, zero log reads.
//!         ("child-checkpointed", Some("done, checkpointed"), Activity::Inactive),
//!         // Rung 3: one streamed read of its log, folded by the registry.
//!         ("child-cold", Some("done, log only"), Activity::Inactive),
//!     ]);
//!     Ok(())
//! })
//! # }
//! ```
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
    listing::{COLD_READ_CONCURRENCY, MAX_COLD_READ_LANES, Scope},
    resume::{ContinuationDelivery, ResumeAuthorization, followup},
    runtime::{SubagentRuntime, SubagentServices, SubagentUnits, register_units},
    timing::{
        ActiveInterval, SUBAGENT_TIMING_KEY, SUBAGENT_TIMING_STATE_VERSION, SubagentTimingUnit, TimingState, TimingView,
    },
};
