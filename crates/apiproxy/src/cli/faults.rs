//! Fault hooks for the process-level tests (the `fault-hooks` feature, which only the crate's own
//! tests turn on): what the in-process tests do to a store handle, done to the binary's.
//!
//! - `APIPROXY_FAULT_NOTIFICATIONS_OFF_WHILE=PATH`: while a file exists at `PATH`, a PostgreSQL
//!   store's writes send no change notification (their transactions commit as ever), as if every
//!   notification were lost on the way; other gateways then find the writes by their sweeps
//!   alone. Checked every few milliseconds; each switch is logged at `warn`.

use std::{
    path::PathBuf,
    sync::{Arc, Weak},
    time::Duration,
};

use session_persistence_postgres::PgStore;

/// The variable naming the file whose presence suppresses notifications.
const NOTIFICATIONS_OFF_WHILE: &str = "APIPROXY_FAULT_NOTIFICATIONS_OFF_WHILE";

/// How often the file is looked for.
const POLL: Duration = Duration::from_millis(5);

/// Starts the hooks the environment asks for on `store`; each stops once the store is dropped.
pub(crate) fn install(store: &Arc<PgStore>) {
    let Some(path) = std::env::var_os(NOTIFICATIONS_OFF_WHILE).map(PathBuf::from) else { return };
    let store = Arc::downgrade(store);
    let spawned =
        std::thread::Builder::new().name("fault-notifications".to_owned()).spawn(move || switch(&store, &path));
    if let Err(error) = spawned {
        tracing::error!(%error, "cannot start the notification fault hook");
    }
}

fn switch(store: &Weak<PgStore>, path: &std::path::Path) {
    let mut suppressed = false;
    while let Some(store) = store.upgrade() {
        let wanted = path.exists();
        if wanted != suppressed {
            store.suppress_notifications(wanted);
            suppressed = wanted;
            tracing::warn!(path = %path.display(), suppressed, "fault hook: change notifications switched");
        }
        drop(store);
        std::thread::sleep(POLL);
    }
}
