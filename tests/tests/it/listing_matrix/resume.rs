//! Resume authorization (reference 03 §6.2 steps 1–5) and the delivery hand-off.

use super::support::*;

#[test]
fn the_exact_live_parent_may_resume_its_continuable_child() {
    run(async |h| {
        let parent = h.parent("p");
        h.start_continuable(&parent, "c", "summarize the doc").await;
        let authorization = h.runtime.authorize_resume(&parent, &id("c"), &token()).await.unwrap();
        assert_eq!(authorization.child_id(), &id("c"));
        assert_eq!(authorization.descriptor.label, "summarize the doc");
        assert_eq!(authorization.agent_provider(), Some("demo-llm"));
        assert_eq!(authorization.agent_model(), Some("scripted-1"));
    });
}
