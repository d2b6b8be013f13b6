//! The `subagent` identity projection unit (reference 03 §4.2): mode and label folded last-wins
//! out of the whole log's `subagent/descriptor` events, with the `seq` of the descriptor they came
//! from. It is the single authority over the fold rules: the live snapshot, the cold restore and
//! the checkpoint cache all compute it through the registry.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;
use session_core::{SessionEvent, json::MAX_SAFE_INTEGER};
use session_projection::{ClientView, ProjectionUnit, UnitError};

use crate::descriptor::{DESCRIPTOR_EVENT, Descriptor, DescriptorParse, SubagentMode};

/// The projection key of the identity unit.
pub const SUBAGENT_IDENTITY_KEY: &str = "subagent";

/// Bumped to 2 when the identity gained `seq`: older checkpoint rows are discarded by version.
pub const SUBAGENT_IDENTITY_STATE_VERSION: u64 = 2;

/// Mode and label with the child row's strong contract: a continuable child always has a label,
/// a one-shot child may not. Serializes as `{mode, label?}`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "mode")]
pub enum ChildMode {
    /// `"mode":"one-shot"`.
    #[serde(rename = "one-shot")]
    OneShot {
        /// The descriptor's label, if it had one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        label: Option<String>,
    },
    /// `"mode":"continuable"`.
    #[serde(rename = "continuable")]
    Continuable {
        /// The descriptor's label (a continuable descriptor always has one).
        label: String,
    },
}

impl ChildMode {
    /// The mode without the label.
    pub fn mode(&self) -> SubagentMode {
        match self {
            ChildMode::OneShot { .. } => SubagentMode::OneShot,
            ChildMode::Continuable { .. } => SubagentMode::Continuable,
        }
    }

    /// The label; always `Some` for a continuable child.
    pub fn label(&self) -> Option<&str> {
        match self {
            ChildMode::OneShot { label } => label.as_deref(),
            ChildMode::Continuable { label } => Some(label),
        }
    }

    /// The mode and label a descriptor establishes; its other fields are not part of a row.
    pub fn of(descriptor: &Descriptor) -> ChildMode {
        match descriptor {
            Descriptor::OneShot(descriptor) => ChildMode::OneShot { label: descriptor.label.clone() },
            Descriptor::Continuable(descriptor) => ChildMode::Continuable { label: descriptor.label.clone() },
        }
    }
}

/// The identity value: `{mode, label?, seq}`. `seq` is the seq of the descriptor event it was
/// folded from; `seq >= header.seedLength` proves it came from the child's own suffix rather than
/// from a fork seed's replayed ancestor descriptor.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SubagentIdentity {
    /// The mode and label the descriptor establishes.
    pub mode: ChildMode,
    /// The seq of the descriptor event the identity was folded from.
    pub seq: u64,
}

impl SubagentIdentity {
    /// Reads a client value of the `subagent` key: `None` for the `null` sentinel and for anything
    /// that is not a well-formed identity (a consumer treats both as "no value").
    pub fn from_value(value: &Value) -> Option<SubagentIdentity> {
        if value.is_null() {
            return None;
        }
        // Deserialized from the borrowed value: nothing is copied but the result.
        SubagentIdentity::deserialize(value).ok()
    }
}

/// The strict wire form of an identity.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct IdentityRepr {
    mode: SubagentMode,
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "present_string")]
    label: Option<String>,
    seq: u64,
}

/// A present `label` must be a string (JSON `null` is not a label).
fn present_string<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<String>, D::Error> {
    String::deserialize(deserializer).map(Some)
}

impl Serialize for SubagentIdentity {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        IdentityRepr { mode: self.mode.mode(), label: self.mode.label().map(str::to_owned), seq: self.seq }
            .serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for SubagentIdentity {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<SubagentIdentity, D::Error> {
        let repr = IdentityRepr::deserialize(deserializer)?;
        if repr.seq > MAX_SAFE_INTEGER {
            return Err(serde::de::Error::custom("subagent identity seq must be a non-negative safe integer"));
        }
        let mode = match (repr.mode, repr.label) {
            (SubagentMode::OneShot, label) => ChildMode::OneShot { label },
            (SubagentMode::Continuable, Some(label)) => ChildMode::Continuable { label },
            (SubagentMode::Continuable, None) => {
                return Err(serde::de::Error::custom("a continuable subagent identity requires a label"));
            }
        };
        Ok(SubagentIdentity { mode, seq: repr.seq })
    }
}

/// The unit's state: `{}` (no valid descriptor folded) or `{identity}`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IdentityState {
    /// The identity of the last descriptor, or `None` if there is none or the last one is not a
    /// valid version-2 descriptor.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identity: Option<SubagentIdentity>,
}

/// The `subagent` identity unit. Register it with
/// [`ProjectionRegistry::register`](session_projection::ProjectionRegistry::register) (the
/// [`SubagentRuntime`](crate::SubagentRuntime) does so when it is given a registry).
///
/// Fold rule: every `subagent/descriptor` overwrites (last-wins over the whole log). A malformed
/// payload or another version resets to the `null` sentinel instead of keeping an earlier
/// identity, so a fork of a healthy ancestor does not inherit an identity its own descriptor
/// cannot stand up. The unit never fails.
#[derive(Debug, Clone, Copy, Default)]
pub struct SubagentIdentityUnit;

impl ProjectionUnit for SubagentIdentityUnit {
    type State = IdentityState;

    fn key(&self) -> &str {
        SUBAGENT_IDENTITY_KEY
    }

    fn state_version(&self) -> u64 {
        SUBAGENT_IDENTITY_STATE_VERSION
    }

    fn init(&self) -> IdentityState {
        IdentityState::default()
    }

    fn reads(&self) -> Option<&'static [&'static str]> {
        Some(&[DESCRIPTOR_EVENT])
    }

    fn apply(&self, _state: &IdentityState, event: &SessionEvent) -> Result<Option<IdentityState>, UnitError> {
        if event.kind != DESCRIPTOR_EVENT {
            return Ok(None);
        }
        // A parse error is swallowed on purpose: a corrupt payload folds like no descriptor.
        let identity = match Descriptor::parse_event(event) {
            Ok(DescriptorParse::Supported(descriptor)) => {
                Some(SubagentIdentity { mode: ChildMode::of(&descriptor), seq: event.seq })
            }
            Ok(DescriptorParse::UnsupportedVersion) | Err(_) => None,
        };
        Ok(Some(IdentityState { identity }))
    }
}

impl ClientView for SubagentIdentityUnit {
    /// `null` when no valid descriptor was folded: never an absent key, so a JSON push replaces a
    /// stale identity on the receiver.
    type View = Option<SubagentIdentity>;

    fn view(&self, state: &IdentityState) -> Option<SubagentIdentity> {
        state.identity.clone()
    }
}
