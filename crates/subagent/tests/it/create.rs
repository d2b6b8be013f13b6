//! Child creation (reference 03 §2.5, §3.3, §3.5): the child header, descriptor placement for
//! each mode (spawn and fork), and the delegation depth rules.

use std::sync::Arc;

use serde_json::json;
use session_core::{CreateOptions, HeaderMeta, ManualClock, Origin, Session, SessionStore};
use subagent::{
    ChildOptions, CreateChildError, OneShotDescriptor, child_depth, create_continuable_child, create_one_shot_child,
    delegation_depth_of, fork_prefix,
};

use crate::support::*;

fn kinds(session: &Session) -> Vec<String> {
    session.events().iter().map(|event| event.kind.to_string()).collect()
}

fn store() -> Arc<SessionStore> {
    Arc::new(SessionStore::new(Arc::new(ManualClock::new(1_772_442_000_000))))
}

fn parent(store: &SessionStore) -> Arc<Session> {
    let meta = HeaderMeta {
        cwd: Some("/srv/agents/demo".to_owned()),
        owner: Some("alice".to_owned()),
        ..HeaderMeta::default()
    };
    let parent = store.create(Some(id("parent")), CreateOptions { seed: None, meta }).unwrap();
    run_turn(&parent, 1, None::<fn()>);
    parent
}

#[test]
fn a_spawned_continuable_child_has_its_descriptor_in_the_seed() {
    let store = store();
    let parent = parent(&store);
    let options =
        ChildOptions { id: Some(id("child")), agent_preset: Some("reviewer".to_owned()), ..Default::default() };
    let child =
        create_continuable_child(&store, &parent, continuable_descriptor("Reply with CHILD_OK"), options).unwrap();
    let header = child.header();
    assert_eq!(header.parent_session, Some(id("parent")));
    assert_eq!(header.origin, Some(Origin::Subagent));
    assert_eq!(header.delegation_depth, 1);
    assert_eq!(header.seed_length, None);
    assert_eq!(header.cwd.as_deref(), Some("/srv/agents/demo"));
    assert_eq!(header.owner.as_deref(), Some("alice"));
    assert_eq!(header.agent_preset.as_deref(), Some("reviewer"));
    assert_eq!(kinds(&child), ["subagent/descriptor", "session/end-seed"]);
    assert_eq!(
        child.events()[0].data.as_str(),
        r#"{"version":2,"mode":"continuable","provider":"spawn","label":"Reply with CHILD_OK","agentProvider":"demo-llm","agentModel":"scripted-1"}"#
    );
    assert!(child.events()[0].surface_op.is_none(), "the descriptor is log-only");
    assert!(store.get(&id("child")).is_some(), "the child is published");
}

#[test]
fn a_forked_continuable_child_keeps_its_descriptor_in_the_own_suffix() {
    let store = store();
    let parent = parent(&store);
    run_turn(&parent, 2, None::<fn()>);
    append(&parent, "turn/start", json!({"turn": 3}));
    let prefix_len = fork_prefix(&parent).len();
    assert_eq!(prefix_len, 12, "two closed turns; the open third is excluded");
    let options = ChildOptions { id: Some(id("fork-child")), fork: true, ..Default::default() };
    let child = create_continuable_child(&store, &parent, continuable_descriptor("forked"), options).unwrap();
    assert_eq!(child.header().seed_length, Some(12));
    let kinds = kinds(&child);
    assert_eq!(kinds[12..], ["session/end-seed", "subagent/descriptor", "session/end-seed"]);
    assert_eq!(child.events()[13].seq, 13);
    assert!(child.events()[13].seq >= child.header().own_suffix_start());
    assert_eq!(child.events()[..12], parent.events()[..12]);
}

#[test]
fn a_fork_of_a_parent_without_a_closed_turn_has_no_seed() {
    let store = store();
    let parent = store.create(Some(id("fresh")), CreateOptions::default()).unwrap();
    let options = ChildOptions { fork: true, ..Default::default() };
    let child = create_continuable_child(&store, &parent, continuable_descriptor("x"), options).unwrap();
    assert_eq!(child.header().seed_length, None);
    assert_eq!(kinds(&child), ["subagent/descriptor", "session/end-seed"]);
}

#[test]
fn a_one_shot_child_gets_its_descriptor_at_the_first_step_only() {
    let store = store();
    let parent = parent(&store);
    let descriptor =
        OneShotDescriptor { provider: "spawn".to_owned(), label: Some("check the runner image".to_owned()) };
    let options = ChildOptions { id: Some(id("one-shot")), ..Default::default() };
    let child = create_one_shot_child(&store, &parent, descriptor, options).unwrap();
    assert!(child.session().is_empty(), "a spawned one-shot child has no seed");
    assert_eq!(child.session().header().seed_length, None);
    append(child.session(), "turn/start", json!({"turn": 1}));
    let appended = child.enter_first_step().unwrap().unwrap();
    assert_eq!(appended.seq, 1);
    assert_eq!(
        appended.data.as_str(),
        r#"{"version":2,"mode":"one-shot","provider":"spawn","label":"check the runner image"}"#
    );
    assert!(child.enter_first_step().unwrap().is_none(), "appended exactly once");
    append(child.session(), "step/start", json!({"turn": 1, "step": 1}));
    assert_eq!(kinds(child.session()), ["turn/start", "subagent/descriptor", "step/start"]);
}

#[test]
fn a_forked_one_shot_child_has_the_prefix_and_the_descriptor_later() {
    let store = store();
    let parent = parent(&store);
    let descriptor = OneShotDescriptor { provider: "fork".to_owned(), label: None };
    let options = ChildOptions { fork: true, ..Default::default() };
    let child = create_one_shot_child(&store, &parent, descriptor, options).unwrap();
    assert_eq!(child.session().header().seed_length, Some(6));
    assert_eq!(kinds(child.session())[6], "session/end-seed");
    append(child.session(), "turn/start", json!({"turn": 2}));
    let descriptor = child.enter_first_step().unwrap().unwrap();
    assert_eq!(descriptor.seq, 8);
}

#[test]
fn delegation_depth_rules() {
    let store = store();
    let mut header = session_core::SessionHeader::new(id("p"), 1);
    assert_eq!(child_depth(&header, None, None).unwrap(), 1);
    header.delegation_depth = 2;
    assert_eq!(delegation_depth_of(&header, Some(1)).unwrap(), 2, "the header is the floor");
    assert_eq!(delegation_depth_of(&header, Some(5)).unwrap(), 5);
    assert_eq!(child_depth(&header, Some(5), Some(6)).unwrap(), 6);
    let error = child_depth(&header, None, Some(2)).unwrap_err();
    assert!(matches!(error, CreateChildError::DepthExceeded { attempted_depth: 3, max_depth: 2 }));
    assert_eq!(error.to_string(), "subagent depth 3 exceeds maxDepth 2");
    header.delegation_depth = 0;
    assert_eq!(child_depth(&header, None, Some(0)).unwrap_err().to_string(), "subagent depth 1 exceeds maxDepth 0");
    assert_eq!(
        child_depth(&header, None, Some(u64::MAX)).unwrap_err().to_string(),
        "subagent maxDepth must be a non-negative safe integer"
    );
    assert_eq!(
        child_depth(&header, Some(u64::MAX), None).unwrap_err().to_string(),
        "agent subagentDepth must be a non-negative safe integer"
    );
    header.delegation_depth = session_core::json::MAX_SAFE_INTEGER;
    assert!(matches!(child_depth(&header, None, None), Err(CreateChildError::DepthOverflow)));

    let parent = parent(&store);
    let deep = ChildOptions { parent_agent_depth: Some(1), max_depth: Some(1), ..Default::default() };
    let error = create_continuable_child(&store, &parent, continuable_descriptor("x"), deep).unwrap_err();
    assert_eq!(error.to_string(), "subagent depth 2 exceeds maxDepth 1");
    assert_eq!(store.list().len(), 1, "no child was created");
    let nested =
        create_continuable_child(&store, &parent, continuable_descriptor("x"), ChildOptions::default()).unwrap();
    let grandchild =
        create_continuable_child(&store, &nested, continuable_descriptor("y"), ChildOptions::default()).unwrap();
    assert_eq!(grandchild.header().delegation_depth, 2);
}

#[test]
fn a_live_id_cannot_be_reused() {
    let store = store();
    let parent = parent(&store);
    let options = ChildOptions { id: Some(id("parent")), ..Default::default() };
    let error = create_continuable_child(&store, &parent, continuable_descriptor("x"), options).unwrap_err();
    assert!(matches!(error, CreateChildError::DuplicateChild { .. }));
    assert_eq!(error.to_string(), "subagent \"parent\" already exists");
    assert_eq!(error.code().unwrap().as_str(), "DUPLICATE_CHILD");
}
