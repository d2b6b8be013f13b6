//! `SubagentRuntime`: the services the catalog reads, the registration of the two projection
//! units, and the public listing and resume-authorization operations.

use std::sync::Arc;

use session_core::{Session, SessionId, SessionStore};
use session_persistence::SessionPersistence;
use session_projection::{ProjectionRegistry, RegisterError, Registration};
use tokio_util::sync::CancellationToken;

use crate::{
    checkpoint::CheckpointSource,
    entry::{SubagentDescendantListEntry, SubagentListEntry},
    error::SubagentError,
    identity::SubagentIdentityUnit,
    listing::{COLD_READ_CONCURRENCY, Listing, MAX_COLD_READ_LANES, Scope},
    resume::{ResumeAuthorization, authorize},
    timing::SubagentTimingUnit,
};

/// What the catalog reads. Every service is optional here; each operation states which ones it
/// requires and fails with a stable code when one is missing.
#[derive(Debug, Clone, Default)]
pub struct SubagentServices {
    /// The live session store (the strict global one). Required by listing.
    pub sessions: Option<Arc<SessionStore>>,
    /// The projection registry. Required by listing; the runtime registers its two units on it.
    pub projections: Option<Arc<ProjectionRegistry>>,
    /// Session persistence. Without it a listing is live-only; a resume needs it.
    pub persistence: Option<Arc<dyn SessionPersistence>>,
    /// The optional checkpoint source of rung 2 (normally the projection cache).
    pub cache: Option<Arc<dyn CheckpointSource>>,
}

/// The two units' registrations; dropping this unregisters both (when no one else shares them).
#[derive(Debug)]
pub struct SubagentUnits {
    _timing: Registration,
    _identity: Registration,
}

/// Registers `subagentTiming` and `subagent` on `registry`, in that order.
pub fn register_units(registry: &Arc<ProjectionRegistry>) -> Result<SubagentUnits, RegisterError> {
    let timing = registry.register(SubagentTimingUnit)?;
    let identity = registry.register(SubagentIdentityUnit)?;
    Ok(SubagentUnits { _timing: timing, _identity: identity })
}

/// The subagent catalog service.
///
/// Built over a registry, it registers the `subagentTiming` and `subagent` units for as long as it
/// lives: a snapshot taken after it is dropped has neither key. Listing needs neither providers,
/// an agent registry nor any query service.
#[derive(Debug)]
pub struct SubagentRuntime {
    services: SubagentServices,
    cold_read_lanes: usize,
    _units: Option<SubagentUnits>,
}

impl SubagentRuntime {
    /// Builds the service and registers its units on `services.projections`, if given. Fails if
    /// another unit already holds one of the two keys.
    pub fn new(services: SubagentServices) -> Result<SubagentRuntime, RegisterError> {
        let units = services.projections.as_ref().map(register_units).transpose()?;
        Ok(SubagentRuntime { services, cold_read_lanes: COLD_READ_CONCURRENCY, _units: units })
    }

    /// The same runtime reading at most `lanes` cold children of a listing at once (1 to
    /// [`MAX_COLD_READ_LANES`]; [`COLD_READ_CONCURRENCY`] unless set): for a networked backend
    /// whose pool serves that many reads side by side. Outside that range it panics: the caller
    /// validates its configuration.
    pub fn with_cold_read_lanes(self, lanes: usize) -> SubagentRuntime {
        assert!(
            (1..=MAX_COLD_READ_LANES).contains(&lanes),
            "cold read lanes must be from 1 to {MAX_COLD_READ_LANES}, got {lanes}"
        );
        SubagentRuntime { cold_read_lanes: lanes, ..self }
    }

    /// The services the runtime was built over.
    pub fn services(&self) -> &SubagentServices {
        &self.services
    }

    /// The direct subagent children of `parent` (reference 03 §5), in `createdAt` order, ties by
    /// id in byte order. An unknown parent gives an empty list.
    ///
    /// Checks, before any read and even with zero children: the registry
    /// (`SUBAGENT_CONTROL_PROJECTIONS_UNAVAILABLE`), then the session store
    /// (`SUBAGENT_CONTROL_SESSION_STORE_UNAVAILABLE`). Without persistence the listing is
    /// live-only. A live child costs zero log reads, a cold child served by the checkpoint source
    /// zero, any other cold child exactly one streamed read. Any observed cancellation fails the
    /// listing with `CANCELLED` and aborts the reads in flight.
    pub async fn list_children(
        &self,
        parent: &SessionId,
        cancel: &CancellationToken,
    ) -> Result<Vec<SubagentListEntry>, SubagentError> {
        Listing::new(&self.services, self.cold_read_lanes)?.children(parent, cancel).await
    }

    /// [`Self::list_children`] on behalf of a caller who may see only the sessions in `scope`:
    /// one enumeration, authorized before any read (see [`Scope`]).
    pub async fn list_children_in(
        &self,
        parent: &SessionId,
        scope: Scope<'_>,
        cancel: &CancellationToken,
    ) -> Result<Vec<SubagentListEntry>, SubagentError> {
        Listing::new(&self.services, self.cold_read_lanes)?.scoped(scope).children(parent, cancel).await
    }

    /// [`Self::list_child`] within `scope` (see [`Scope`]).
    pub async fn list_child_in(
        &self,
        parent: &SessionId,
        child: &SessionId,
        scope: Scope<'_>,
        cancel: &CancellationToken,
    ) -> Result<Option<SubagentListEntry>, SubagentError> {
        Listing::new(&self.services, self.cold_read_lanes)?.scoped(scope).child(parent, child, cancel).await
    }

    /// [`Self::list_descendants`] within `scope` (see [`Scope`]): the walk does not pass
    /// through sessions outside it.
    pub async fn list_descendants_in(
        &self,
        root: &SessionId,
        scope: Scope<'_>,
        cancel: &CancellationToken,
    ) -> Result<Vec<SubagentDescendantListEntry>, SubagentError> {
        Listing::new(&self.services, self.cold_read_lanes)?.scoped(scope).descendants(root, cancel).await
    }

    /// The row [`Self::list_children`] would give `child` under `parent`, computed for that
    /// child alone: the same enumeration, checks, ladder and errors, but at most one log read.
    /// `None` when `child` is not a subagent child of `parent` or has no row (the creation
    /// window). Used to authorize access to one child without reading its siblings.
    pub async fn list_child(
        &self,
        parent: &SessionId,
        child: &SessionId,
        cancel: &CancellationToken,
    ) -> Result<Option<SubagentListEntry>, SubagentError> {
        Listing::new(&self.services, self.cold_read_lanes)?.child(parent, child, cancel).await
    }

    /// Every subagent below `root` in stable pre-order (reference 03 §5.10): ordinary sessions and
    /// one-shot children are walked through, each row carries its durable direct parent and its
    /// depth. Same preconditions, ladder, errors and cancellation as [`Self::list_children`].
    pub async fn list_descendants(
        &self,
        root: &SessionId,
        cancel: &CancellationToken,
    ) -> Result<Vec<SubagentDescendantListEntry>, SubagentError> {
        Listing::new(&self.services, self.cold_read_lanes)?.descendants(root, cancel).await
    }

    /// Decides whether `parent` may continue the child `child` (reference 03 §6.2 steps 1–5): the
    /// stored header names `parent` as its direct parent, `parent` is the exact live session of
    /// the store, and the first descriptor of the child's own suffix is a valid continuable one.
    pub async fn authorize_resume(
        &self,
        parent: &Arc<Session>,
        child: &SessionId,
        cancel: &CancellationToken,
    ) -> Result<ResumeAuthorization, SubagentError> {
        authorize(&self.services, parent, child, cancel).await
    }
}
