//! The gateway's own projection unit, `sessionListMetadata` (reference 04 §10): whether a session
//! is still blank and when a human last prompted it, for `session.list` rows.

use serde::{Deserialize, Serialize};
use session_core::SessionEvent;
use session_projection::{ClientView, ProjectionUnit, UnitError};

/// The key of [`SessionListMetadata`].
pub const LIST_METADATA_KEY: &str = "sessionListMetadata";

/// `{blank, lastPromptAt}`: `blank` until the first `turn/start` (monotonic), `lastPromptAt` the
/// time of the latest `user/message` whose source is a user (`null` before one).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ListMetadata {
    /// `true` until the session's first `turn/start`, then `false` for good.
    pub blank: bool,
    /// The `time` (Unix epoch milliseconds) of the latest `user/message` whose source is a
    /// user; `None` (`null`) before one.
    pub last_prompt_at: Option<i64>,
}

/// The unit folding [`ListMetadata`].
#[derive(Debug, Clone, Copy, Default)]
pub struct SessionListMetadata;

#[derive(Deserialize)]
struct UserMessageView {
    #[serde(default)]
    source: Option<SourceView>,
}

#[derive(Deserialize)]
struct SourceView {
    #[serde(default)]
    kind: Option<String>,
}

impl ProjectionUnit for SessionListMetadata {
    type State = ListMetadata;

    fn key(&self) -> &str {
        LIST_METADATA_KEY
    }

    fn state_version(&self) -> u64 {
        1
    }

    fn init(&self) -> ListMetadata {
        ListMetadata { blank: true, last_prompt_at: None }
    }

    fn reads(&self) -> Option<&'static [&'static str]> {
        Some(&["turn/start", "user/message"])
    }

    fn apply(&self, state: &ListMetadata, event: &SessionEvent) -> Result<Option<ListMetadata>, UnitError> {
        match event.kind.as_str() {
            "turn/start" if state.blank => Ok(Some(ListMetadata { blank: false, ..state.clone() })),
            "user/message" => {
                // A payload that is not a message object is not a human prompt; never an error.
                let from_user = event
                    .data
                    .parse::<UserMessageView>()
                    .ok()
                    .and_then(|view| view.source)
                    .and_then(|source| source.kind)
                    .is_some_and(|kind| kind == "user");
                Ok(from_user.then(|| ListMetadata { last_prompt_at: Some(event.time), ..state.clone() }))
            }
            _ => Ok(None),
        }
    }
}

impl ClientView for SessionListMetadata {
    type View = ListMetadata;

    fn view(&self, state: &ListMetadata) -> ListMetadata {
        state.clone()
    }
}
