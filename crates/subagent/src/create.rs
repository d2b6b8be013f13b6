//! Creating child sessions (reference 03 §2.5, §3.2–§3.6): the child header (`origin`,
//! `parentSession`, `delegationDepth`, `seedLength`), the delegation depth rules with `maxDepth`,
//! and where each mode's descriptor lands in the child's log.
//!
//! - Continuable: the descriptor is part of the creation seed. Spawn: `descriptor(0)`,
//!   `session/end-seed(1)`. Fork: the inherited prefix `0..N`, `session/end-seed(N)`,
//!   `descriptor(N+1)`, `session/end-seed(N+2)`, with `seedLength = N`. Either way the descriptor
//!   is in the own suffix (`seq >= seedLength`).
//! - One-shot: the descriptor is appended inside the child's first turn, when its first step is
//!   entered ([`OneShotChild::enter_first_step`]). Spawn has no seed; fork has the inherited
//!   prefix and its `session/end-seed`. A child whose first step never starts gets no descriptor.

use std::sync::{
    Arc,
    atomic::{AtomicBool, Ordering},
};

use session_core::{
    CreateOptions, END_SEED, HeaderMeta, JsonData, Origin, Session, SessionEvent, SessionHeader, SessionId,
    SessionStore, StoreError, json::MAX_SAFE_INTEGER,
};

use crate::{
    descriptor::{ContinuableDescriptor, DESCRIPTOR_EVENT, Descriptor, OneShotDescriptor},
    error::CreateChildError,
};

/// How a child is created, besides its descriptor.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ChildOptions {
    /// The child's id; the store mints one when absent.
    pub id: Option<SessionId>,
    /// Fork: seed the child with the parent's log up to and including its last `turn/end`.
    pub fork: bool,
    /// The deepest delegation depth the child may have.
    pub max_depth: Option<u64>,
    /// The parent agent's runtime `subagentDepth`, if it has one.
    pub parent_agent_depth: Option<u64>,
    /// The preset composed in the parent's live scope, recorded as the child's `agentPreset`.
    pub agent_preset: Option<String>,
}

/// A parent's delegation depth (reference 03 §3.5): the larger of its header's
/// `delegationDepth` (the monotone floor, so a resumed child never counts as top level) and its
/// agent's runtime `subagentDepth`.
pub fn delegation_depth_of(parent: &SessionHeader, agent_depth: Option<u64>) -> Result<u64, CreateChildError> {
    if agent_depth.is_some_and(|depth| depth > MAX_SAFE_INTEGER) {
        return Err(CreateChildError::InvalidSubagentDepth);
    }
    Ok(parent.delegation_depth.max(agent_depth.unwrap_or(0)))
}

/// The depth a new child of `parent` gets: one deeper than the parent, within `max_depth`.
pub fn child_depth(
    parent: &SessionHeader,
    agent_depth: Option<u64>,
    max_depth: Option<u64>,
) -> Result<u64, CreateChildError> {
    if max_depth.is_some_and(|max| max > MAX_SAFE_INTEGER) {
        return Err(CreateChildError::InvalidMaxDepth);
    }
    let depth = delegation_depth_of(parent, agent_depth)?
        .checked_add(1)
        .filter(|depth| *depth <= MAX_SAFE_INTEGER)
        .ok_or(CreateChildError::DepthOverflow)?;
    match max_depth {
        Some(max_depth) if depth > max_depth => {
            Err(CreateChildError::DepthExceeded { attempted_depth: depth, max_depth })
        }
        _ => Ok(depth),
    }
}

/// The fork prefix of `parent`: its events up to and including the last `turn/end` (a turn in
/// flight is excluded). Empty when no turn has ended.
pub fn fork_prefix(parent: &Session) -> Vec<Arc<SessionEvent>> {
    let events = parent.events();
    match events.iter().rposition(|event| event.kind == "turn/end") {
        Some(last_end) => events[..=last_end].to_vec(),
        None => Vec::new(),
    }
}

/// The header fields of a child (reference 03 §3.3): the parent's `cwd` and `owner`, the parent
/// as `parentSession`, `origin: subagent`, the child's depth, and `seedLength` only when the
/// inherited prefix is non-empty. `createdAt` is left to the store's clock.
pub fn child_meta(parent: &SessionHeader, depth: u64, seed_length: u64, agent_preset: Option<String>) -> HeaderMeta {
    HeaderMeta {
        cwd: parent.cwd.clone(),
        parent_session: Some(parent.id.clone()),
        created_at: None,
        seed_length: (seed_length > 0).then_some(seed_length),
        origin: Some(Origin::Subagent),
        delegation_depth: depth,
        agent_preset,
        // Children inherit the creator's owner, so an owner-filtered host sees its whole tree.
        owner: parent.owner.clone(),
    }
}

/// Creates and publishes a continuable child of `parent` in `store`, with the descriptor in its
/// creation seed.
pub fn create_continuable_child(
    store: &SessionStore,
    parent: &Session,
    descriptor: ContinuableDescriptor,
    options: ChildOptions,
) -> Result<Arc<Session>, CreateChildError> {
    let depth = child_depth(parent.header(), options.parent_agent_depth, options.max_depth)?;
    check_free(store, options.id.as_ref())?;
    let mut seed = if options.fork { fork_prefix(parent) } else { Vec::new() };
    let seed_length = seed.len() as u64;
    let now = store.clock().now_ms();
    if !seed.is_empty() {
        // What the staging session of the reference adds when it is created from the prefix.
        seed.push(Arc::new(SessionEvent::new(END_SEED, seed_length, now, JsonData::empty_object())));
    }
    let descriptor = Descriptor::Continuable(descriptor);
    seed.push(Arc::new(SessionEvent::new(DESCRIPTOR_EVENT, seed.len() as u64, now, descriptor.to_data())));
    let meta = child_meta(parent.header(), depth, seed_length, options.agent_preset);
    store.create(options.id, CreateOptions { seed: Some(seed), meta }).map_err(store_error)
}

/// Creates and publishes a one-shot child of `parent` in `store`. Its descriptor is appended when
/// the host enters the child's first step.
pub fn create_one_shot_child(
    store: &SessionStore,
    parent: &Session,
    descriptor: OneShotDescriptor,
    options: ChildOptions,
) -> Result<OneShotChild, CreateChildError> {
    let depth = child_depth(parent.header(), options.parent_agent_depth, options.max_depth)?;
    check_free(store, options.id.as_ref())?;
    let seed = if options.fork { fork_prefix(parent) } else { Vec::new() };
    let seed_length = seed.len() as u64;
    let meta = child_meta(parent.header(), depth, seed_length, options.agent_preset);
    let seed = (!seed.is_empty()).then_some(seed);
    let session = store.create(options.id, CreateOptions { seed, meta }).map_err(store_error)?;
    Ok(OneShotChild { session, descriptor: Descriptor::OneShot(descriptor), appended: AtomicBool::new(false) })
}

fn check_free(store: &SessionStore, id: Option<&SessionId>) -> Result<(), CreateChildError> {
    match id {
        Some(id) if store.contains(id) => Err(CreateChildError::DuplicateChild { id: id.clone() }),
        _ => Ok(()),
    }
}

fn store_error(error: StoreError) -> CreateChildError {
    match error {
        StoreError::AlreadyExists { id } => CreateChildError::DuplicateChild { id },
        other => CreateChildError::Store(other),
    }
}

/// A live one-shot child whose descriptor is still to be appended.
#[derive(Debug)]
pub struct OneShotChild {
    session: Arc<Session>,
    descriptor: Descriptor,
    appended: AtomicBool,
}

impl OneShotChild {
    /// The child session, published in the store it was created in.
    pub fn session(&self) -> &Arc<Session> {
        &self.session
    }

    /// The one-shot descriptor [`OneShotChild::enter_first_step`] appends.
    pub fn descriptor(&self) -> &Descriptor {
        &self.descriptor
    }

    /// Call when the child's pre-step chain decides to enter a step: the first call appends the
    /// descriptor (inside the first turn, before its first step) and returns it; later calls
    /// append nothing. If the append fails, a later call tries again.
    pub fn enter_first_step(&self) -> Result<Option<Arc<SessionEvent>>, CreateChildError> {
        if self.appended.swap(true, Ordering::SeqCst) {
            return Ok(None);
        }
        match self.session.append_data(DESCRIPTOR_EVENT, self.descriptor.to_data(), None) {
            Ok(event) => Ok(Some(event)),
            Err(error) => {
                self.appended.store(false, Ordering::SeqCst);
                Err(CreateChildError::Append(error))
            }
        }
    }
}
