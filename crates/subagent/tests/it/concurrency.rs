//! Cold reads run at most four at a time, and the output order is the candidate order whatever
//! order the reads complete in (reference 03 §5.7).

use std::sync::Arc;

use subagent::COLD_READ_CONCURRENCY;

use crate::support::*;

/// The bound the reference fixes: four cold reads at a time.
const BOUND: usize = 4;

#[test]
fn the_bound_is_four() {
    assert_eq!(COLD_READ_CONCURRENCY, BOUND);
}

/// With fewer cold children than the bound, all of them are read at once.
#[test]
fn fewer_cold_children_than_the_bound_are_read_together() {
    run_each(&NO_CACHE, async |h| {
        for idx in 0..3u64 {
            h.author(created(child_header(&format!("c{idx}"), "p"), idx), child_events(continuable("x"))).await;
        }
        let gate = Arc::new(Gate::default());
        h.persistence.set_gate(Some(gate.clone()));
        let runtime = h.runtime.clone();
        let listing = tokio::spawn(async move { runtime.list_children(&id("p"), &token()).await });
        let held = gate.held(3).await;
        for child in held.iter().rev() {
            gate.release(child);
        }
        assert_eq!(listing.await.unwrap().unwrap().len(), 3);
        assert_eq!(h.persistence.max_in_flight(), 3);
    });
}
