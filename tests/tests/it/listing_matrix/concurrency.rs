//! Cold reads run at most four at a time, and the output order is the candidate order whatever
//! order the reads complete in (reference 03 §5.7).

use std::sync::Arc;

use serde_json::Value;

use super::support::*;

/// The bound the reference fixes: four cold reads at a time.
const BOUND: usize = 4;

#[test]
fn cold_reads_are_bounded_by_four_and_rows_keep_candidate_order() {
    run(async |h| {
        let n_children = 10;
        let names: Vec<String> = (0..n_children).map(|idx| format!("child-{idx:02}")).collect();
        for (idx, name) in names.iter().enumerate() {
            h.author(created(child_header(name, "p"), idx as u64 + 1), child_events(continuable(name))).await;
        }
        let gate = Arc::new(Gate::default());
        h.persistence.set_gate(Some(gate.clone()));
        let runtime = h.runtime.clone();
        let listing = tokio::spawn(async move { runtime.list_children(&id("p"), &token()).await });

        // Release the most recently listed held read each time, so reads complete out of order.
        let mut completion_order = Vec::new();
        for released in 0..n_children {
            let held = gate.held(BOUND.min(n_children - released)).await;
            let last = held.iter().max().unwrap().clone();
            gate.release(&last);
            completion_order.push(last.to_string());
        }
        let rows = listing.await.unwrap().unwrap();
        let ids: Vec<&str> = rows.iter().map(|row| row.id().as_str()).collect();
        assert_eq!(ids, names.iter().map(String::as_str).collect::<Vec<_>>());
        assert_ne!(completion_order, names, "the reads completed out of candidate order");
        let labels: Vec<Value> =
            serde_json::to_value(&rows).unwrap().as_array().unwrap().iter().map(|row| row["label"].clone()).collect();
        assert_eq!(labels, names.iter().map(|name| Value::from(name.as_str())).collect::<Vec<_>>());
        assert_eq!(h.persistence.max_in_flight(), BOUND);
        assert_eq!(h.persistence.total_reads(), n_children as u64);
    });
}
