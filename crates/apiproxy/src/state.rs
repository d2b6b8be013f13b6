//! `Shared`: the request state every handler reads (store, persistence, projections, hub, config,
//! locks and budgets). A leaf of the crate's module graph: it names only the modules that define
//! its fields' types, none of which reads it, so handlers import it without importing the server.

use std::{net::SocketAddr, sync::Arc};

use session_core::{ObserverId, SessionStore};
use session_persistence::SessionPersistence;
use session_projection::{ChangeSubscription, ProjectionRegistry, Registration, StoreAttachment};
use session_projection_cache::{CacheAttachment, ProjectionCache};

use crate::{
    config::ProxyConfig, connection::Connections, follow::Follower, history::budget::InflightBudget, hub::Hub,
};

/// Everything a request handler reads.
pub(crate) struct Shared {
    pub(crate) store: Arc<SessionStore>,
    pub(crate) persistence: Option<Arc<dyn SessionPersistence>>,
    pub(crate) registry: Arc<ProjectionRegistry>,
    pub(crate) hub: Arc<Hub>,
    pub(crate) config: ProxyConfig,
    /// The open TCP connections, counted against `config.max_connections`.
    pub(crate) connections: Arc<Connections>,
    /// The address being served, once `ApiProxy::serve` runs (the trust fence accepts it).
    pub(crate) listen: parking_lot::Mutex<Option<SocketAddr>>,
    /// Serializes, per id, everything that makes an id live or lets it go (create, resume, fork,
    /// spawn, release), so checking that an id is free and taking it are one step: no live
    /// session can shadow a stored one.
    pub(crate) id_locks: session_storage_io::keyed::KeyedLocks,
    /// The subagent catalog over the same store, registry and persistence.
    pub(crate) subagents: subagent::SubagentRuntime,
    /// The in-flight budget of history reads (`config.history_inflight_bytes`).
    pub(crate) history_budget: InflightBudget,
    /// One-shot children whose descriptor is appended when their first step starts.
    pub(crate) pending_one_shots:
        parking_lot::Mutex<std::collections::HashMap<session_core::SessionId, Arc<subagent::OneShotChild>>>,
    /// The hub's observer on `store`, removed when the state is dropped.
    pub(crate) hub_observer: ObserverId,
    /// Held for the state's lifetime: the registry's attachment to `store`.
    pub(crate) _registry_attachment: StoreAttachment,
    /// Held for the state's lifetime: the `sessionListMetadata` unit's registration.
    pub(crate) _list_metadata: Registration,
    /// Held for the state's lifetime: the hub's subscription to the projection change feed.
    pub(crate) _projection_feed: ChangeSubscription,
    /// Follows the store's other writers into the hub (`crate::follow`), while it lives; `None`
    /// when the store has no change signal or following is off.
    pub(crate) follower: Option<Follower>,
    /// The checkpoint cache, if mounted, with its write policy attached to the store.
    pub(crate) cache: Option<ProjectionCache>,
    /// Held for the state's lifetime: the cache's write policy on `store`.
    pub(crate) _cache_attachment: Option<CacheAttachment>,
}

impl Drop for Shared {
    fn drop(&mut self) {
        self.store.remove_observer(self.hub_observer);
    }
}
