//! `ApiProxy`: the assembled gateway (store, persistence, projections, hub) and its server loop.

use std::{fmt, future::Future, net::SocketAddr, sync::Arc};

use session_core::{HeaderField, SessionStore};
use session_persistence::SessionPersistence;
use session_projection::ProjectionRegistry;
use session_projection_cache::ProjectionCache;
use tokio::net::TcpListener;

use crate::{
    access::is_loopback_listen, config::ProxyConfig, connection::Connections, error::ProxyError, follow::Follower,
    history::budget::InflightBudget, hub::Hub, state::Shared, units::SessionListMetadata,
};

/// The services a gateway is built over.
#[derive(Clone)]
pub struct ProxyParts {
    /// The live sessions. The gateway adds its observers to it.
    pub store: Arc<SessionStore>,
    /// Durable storage for cold sessions; already attached to `store` by the caller (so live
    /// sessions are persisted). Without it, only live sessions exist.
    pub persistence: Option<Arc<dyn SessionPersistence>>,
    /// The projection registry, **not** yet attached to `store`: the gateway attaches it after its
    /// hub, so a `session/event` frame precedes the `session/projection` frames of the same seq.
    pub registry: Arc<ProjectionRegistry>,
    /// The optional projection checkpoint cache over `registry` and `persistence`: rung 2 of the
    /// subagent listing, and the projections and recency of cold `session.list` rows. The gateway
    /// attaches its write policy to `store`.
    pub cache: Option<ProjectionCache>,
}

impl fmt::Debug for ProxyParts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProxyParts")
            .field("store", &self.store)
            .field("persistence", &self.persistence)
            .field("registry", &self.registry)
            .finish()
    }
}

/// The gateway. Cheap to clone; clones share everything.
#[derive(Clone)]
pub struct ApiProxy {
    pub(crate) shared: Arc<Shared>,
}

impl fmt::Debug for ApiProxy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ApiProxy")
            .field("store", &self.shared.store)
            .field("hub", &self.shared.hub)
            .finish_non_exhaustive()
    }
}

impl ApiProxy {
    /// Assembles a gateway: registers the `sessionListMetadata` unit and the subagent units
    /// (`subagentTiming`, `subagent`), attaches the hub and then
    /// the registry to the store, and subscribes the hub to the projection change feed.
    pub fn new(parts: ProxyParts, config: ProxyConfig) -> Result<ApiProxy, ProxyError> {
        if !session_core::is_absolute_path(&config.default_cwd) {
            return Err(ProxyError::Config {
                message: format!("the default cwd must be an absolute path, got {:?}", config.default_cwd),
            });
        }
        // The configured values end up in session headers; one over its bound would make every
        // creation that uses it fail.
        let bounded = std::iter::once((HeaderField::Cwd, config.default_cwd.as_str()))
            .chain(config.access.owner_tokens.iter().map(|bound| (HeaderField::Owner, bound.owner.as_str())));
        for (field, value) in bounded {
            field.check(value).map_err(|too_large| ProxyError::Config { message: too_large.to_string() })?;
        }
        if config.max_body_bytes == 0 || config.push_queue_frames == 0 || config.max_connections == 0 {
            return Err(ProxyError::Config {
                message: "max_body_bytes, push_queue_frames and max_connections must be positive".to_owned(),
            });
        }
        if let Some(share) = config.max_owner_connections
            && !(1..=config.max_connections).contains(&share)
        {
            return Err(ProxyError::Config {
                message: format!(
                    "max_owner_connections must be from 1 to max_connections ({}), got {share}",
                    config.max_connections
                ),
            });
        }
        if config.history_page_bytes == 0 || config.history_inflight_bytes == 0 {
            return Err(ProxyError::Config {
                message: "history_page_bytes and history_inflight_bytes must be positive".to_owned(),
            });
        }
        if !(1..=session_core::MAX_EVENT_BYTES).contains(&config.max_event_bytes) {
            return Err(ProxyError::Config {
                message: format!(
                    "max_event_bytes must be from 1 to {}, got {}",
                    session_core::MAX_EVENT_BYTES,
                    config.max_event_bytes
                ),
            });
        }
        let timeouts = [
            config.push_send_timeout,
            config.push_close_timeout,
            config.header_read_timeout,
            config.body_read_timeout,
            config.idle_timeout,
            config.history_wait,
            // `tokio::time::interval` panics on a zero period.
            config.follow.sweep_interval,
            config.follow.watch.poll_interval,
            config.follow.watch.reconnect_min,
            config.follow.watch.reconnect_max,
        ];
        if timeouts.contains(&std::time::Duration::ZERO) {
            return Err(ProxyError::Config { message: "every timeout must be positive".to_owned() });
        }
        if config.follow.round_gap > config.follow.sweep_interval {
            return Err(ProxyError::Config {
                message: "the follower's round gap must not exceed its sweep interval".to_owned(),
            });
        }
        // A client's close frame (up to 125 bytes) has to fit, or no client could close cleanly.
        if config.max_incoming_message_bytes < 125 {
            return Err(ProxyError::Config {
                message: format!(
                    "max_incoming_message_bytes must be at least 125 (a close frame), got {}",
                    config.max_incoming_message_bytes
                ),
            });
        }
        if !(1..=subagent::MAX_COLD_READ_LANES).contains(&config.subagent_cold_read_lanes) {
            return Err(ProxyError::Config {
                message: format!(
                    "subagent_cold_read_lanes must be from 1 to {}, got {}",
                    subagent::MAX_COLD_READ_LANES,
                    config.subagent_cold_read_lanes
                ),
            });
        }
        config.access.check()?;
        let ProxyParts { store, persistence, registry, cache } = parts;
        let list_metadata = registry.register(SessionListMetadata)?;
        let subagents = subagent::SubagentRuntime::new(subagent::SubagentServices {
            sessions: Some(Arc::clone(&store)),
            projections: Some(Arc::clone(&registry)),
            persistence: persistence.clone(),
            cache: cache.clone().map(|cache| Arc::new(cache) as Arc<dyn subagent::CheckpointSource>),
        })?
        .with_cold_read_lanes(config.subagent_cold_read_lanes);
        // The cache's write policy attaches before the registry, as the cache recommends (it
        // saves a refold at disposal).
        let cache_attachment = match &cache {
            Some(cache) => {
                Some(cache.attach(&store).map_err(|error| ProxyError::Config { message: error.to_string() })?)
            }
            None => None,
        };
        let hub = Hub::new(config.push_queue_frames);
        let hub_observer = hub.attach(&store);
        let registry_attachment = registry.attach(&store);
        let feed_hub = Arc::downgrade(&hub);
        let projection_feed = registry.on_changed(move |change: &session_projection::ProjectionChange<'_>| {
            if let Some(hub) = feed_hub.upgrade() {
                hub.on_projection(change);
            }
        });
        let follower = match &persistence {
            Some(persistence) => Follower::start(
                &config.follow,
                Arc::clone(&hub),
                Arc::clone(&store),
                Arc::clone(persistence),
                Arc::clone(&registry),
            )
            .map_err(|error| ProxyError::Config { message: format!("following the store: {error}") })?,
            None => None,
        };
        Ok(ApiProxy {
            shared: Arc::new(Shared {
                follower,
                store,
                persistence,
                registry,
                hub,
                connections: Connections::new(config.max_connections, config.owner_connection_share()),
                history_budget: InflightBudget::new(config.history_inflight_bytes),
                config,
                listen: parking_lot::Mutex::new(None),
                id_locks: session_storage_io::keyed::KeyedLocks::new(),
                subagents,
                pending_one_shots: parking_lot::Mutex::default(),
                hub_observer,
                _registry_attachment: registry_attachment,
                _list_metadata: list_metadata,
                _projection_feed: projection_feed,
                cache,
                _cache_attachment: cache_attachment,
            }),
        })
    }

    /// The live session store.
    pub fn store(&self) -> &Arc<SessionStore> {
        &self.shared.store
    }

    /// The projection registry.
    pub fn registry(&self) -> &Arc<ProjectionRegistry> {
        &self.shared.registry
    }

    /// The configuration the gateway was built with.
    pub fn config(&self) -> &ProxyConfig {
        &self.shared.config
    }

    /// Writes a checkpoint record for every stored session that lacks a current one, with every
    /// unit this gateway serves (see `ProjectionCache::backfill`); `None` when no cache is
    /// mounted. Listings never write records; this is how a store that arrives without them
    /// (written by the reference, copied, or with its cache deleted) gets them.
    pub async fn backfill_cache(
        &self,
        options: session_projection_cache::BackfillOptions,
        cancel: &tokio_util::sync::CancellationToken,
        progress: impl FnMut(&session_projection_cache::BackfillReport),
    ) -> Result<Option<session_projection_cache::BackfillReport>, session_projection_cache::CacheError> {
        match &self.shared.cache {
            Some(cache) => cache.backfill(options, cancel, progress).await.map(Some),
            None => Ok(None),
        }
    }

    /// The number of open WebSocket downlinks.
    pub fn n_stream_connections(&self) -> usize {
        self.shared.hub.n_subscribers()
    }

    /// The number of open TCP connections (WebSocket downlinks included) of [`ApiProxy::serve`].
    pub fn n_connections(&self) -> usize {
        self.shared.connections.n_open()
    }

    /// Watches the number of open TCP connections, which changes as connections are accepted and
    /// as their sockets close.
    pub fn watch_connections(&self) -> tokio::sync::watch::Receiver<usize> {
        self.shared.connections.watch()
    }

    /// The router: every path of the gateway.
    pub fn router(&self) -> axum::Router {
        crate::http::router(Arc::clone(&self.shared))
    }

    /// Checks that serving on `addr` is allowed: loopback, or a bearer token is configured.
    pub fn check_listen(&self, addr: &SocketAddr) -> Result<(), ProxyError> {
        if is_loopback_listen(addr) || self.shared.config.access.requires_token() {
            Ok(())
        } else {
            Err(ProxyError::InsecureListen { addr: *addr })
        }
    }

    /// Serves on `listener` until `shutdown` resolves, then stops accepting and waits for open
    /// requests to finish. Refuses a non-loopback listener without a bearer token. Applies the
    /// connection limits of the config: the cap, each owner's share of it, and the header-read,
    /// body-read and idle timeouts.
    pub async fn serve(
        &self,
        listener: TcpListener,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), ProxyError> {
        let addr = listener.local_addr().map_err(|source| ProxyError::io("the listening socket", source))?;
        self.check_listen(&addr)?;
        *self.shared.listen.lock() = Some(addr);
        let connections = Arc::clone(&self.shared.connections);
        let clock = Arc::clone(self.shared.store.clock());
        crate::connection::serve(connections, &self.shared.config, clock, self.router(), listener, shutdown).await;
        Ok(())
    }
}
