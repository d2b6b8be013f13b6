//! The `list_agents` tool (reference 03 §7, §9.4): schemas, row projection, status source, and
//! the rendered text, pinned with `expect-test` snapshots.

use std::sync::Arc;

use expect_test::expect;
use serde_json::{Value, json};
use subagent::{LIST_AGENTS_DESCRIPTION, ListAgentsTool, SubagentRuntime, SubagentServices, render};

use crate::support::*;

/// (1, 6) Name, the single optional `scope` parameter, the description, and the output schema.
#[test]
fn the_tool_schema() {
    runtime().block_on(async {
        let h = Harness::new(NO_CACHE[0]);
        let tool = h.list_agents_tool();
        assert_eq!(tool.name(), "list_agents");
        assert_eq!(
            tool.parameters(),
            json!({"type": "object", "properties": {"scope": {"type": "string", "enum": ["children", "descendants"],
                "description": "children (default) lists direct children only; descendants walks the complete tree below you."}}})
        );
        assert!(tool.parameters().get("required").is_none());
        let description = tool.description();
        assert_eq!(description, LIST_AGENTS_DESCRIPTION);
        for phrase in ["send_message", "interrupt_agent", "you are told when one finishes", "resumable, not terminal"] {
            assert!(description.contains(phrase), "{phrase}");
        }
        let schema = tool.output_schema();
        let arms = schema["items"]["oneOf"].as_array().unwrap();
        assert_eq!(arms[0]["properties"]["status"]["enum"], json!(["running", "idle", "ready"]));
        assert_eq!(arms[1]["properties"]["reason"]["enum"], json!(["corrupt", "unsupported", "unavailable"]));
        for arm in arms {
            assert_eq!(arm["additionalProperties"], json!(false));
            assert_eq!(arm["properties"]["kind"]["required"], json!(true));
            assert!(arm["properties"]["parent"].get("required").is_none());
        }
    });
}

/// (2) No subagents: `(no subagents)`, not an error.
#[test]
fn no_subagents() {
    run_each(&NO_CACHE, async |h| {
        h.parent("p");
        let outcome = h.list_agents_tool().execute(Some(&id("p")), &json!({}), &token()).await;
        assert!(!outcome.is_error);
        expect!["(no subagents)"].assert_eq(&outcome.text);
        assert_eq!(outcome.rows, Some(vec![]));
    });
}

/// (4, 12) The tool's own token reaches the listing in both scopes.
#[test]
fn the_call_token_is_forwarded_to_the_listing() {
    run_each(&NO_CACHE, async |h| {
        h.parent("p");
        let cancel = token();
        cancel.cancel();
        for arguments in [json!({}), json!({"scope": "children"}), json!({"scope": "descendants"}), Value::Null] {
            let outcome = h.list_agents_tool().execute(Some(&id("p")), &arguments, &cancel).await;
            assert!(outcome.is_error);
            assert_eq!(outcome.text, "Error: subagent listing was cancelled");
            let info = outcome.error.unwrap();
            assert_eq!((info.name.as_str(), info.code.as_deref()), ("SubagentError", Some("CANCELLED")));
        }
        assert_eq!(h.persistence.lists(), 0);
    });
}

/// (7) Without a calling agent the call is an errored result.
#[test]
fn a_call_without_a_calling_agent_is_an_error() {
    run_each(&NO_CACHE, async |h| {
        let outcome = h.list_agents_tool().execute(None, &json!({}), &token()).await;
        assert!(outcome.is_error);
        assert!(outcome.text.contains("requires a calling agent"));
        expect!["Error: list_agents requires a calling agent (exec.agent was undefined)"].assert_eq(&outcome.text);
        let bad = h.list_agents_tool().execute(Some(&id("p")), &json!({"scope": "everything"}), &token()).await;
        assert!(bad.is_error);
        expect![[r#"Error: list_agents arguments are invalid: scope must be "children" or "descendants""#]]
            .assert_eq(&bad.text);
    });
}

/// Listing errors become errored results with `{name, code}`.
#[test]
fn listing_errors_are_errored_results() {
    run_each(&NO_CACHE, async |h| {
        let runtime = SubagentRuntime::new(SubagentServices { projections: None, ..h.services() }).unwrap();
        let tool = ListAgentsTool::with_live_status(Arc::new(runtime));
        let outcome = tool.execute(Some(&id("p")), &json!({}), &token()).await;
        assert!(outcome.is_error);
        expect!["Error: listing subagents requires the sessionProjections registry (load @monotykamary/dsh-session-projection)"]
            .assert_eq(&outcome.text);
        let info = outcome.error.unwrap();
        assert_eq!(info.code.as_deref(), Some("SUBAGENT_CONTROL_PROJECTIONS_UNAVAILABLE"));
    });
}

#[test]
fn rendering_of_an_empty_list() {
    assert_eq!(render(&[]), "(no subagents)");
}
