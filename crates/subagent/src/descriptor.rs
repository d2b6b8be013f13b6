//! The `subagent/descriptor` event, version 2 (reference 03 §2): the typed descriptor, its
//! canonical serialization, the strict parse with the reference's check order and messages, and
//! the first-wins fold that resume uses.

use std::borrow::Borrow;

use serde::{Deserialize, Serialize, Serializer, ser::SerializeMap};
use serde_json::{Map, Value};
use session_core::{JsonData, SessionEvent};

use crate::error::DescriptorError;

/// The only descriptor version this build reads and writes. Any other version is "unsupported by
/// this runtime", which is not a parse error.
pub const SUBAGENT_DESCRIPTOR_VERSION: u64 = 2;

/// The event type of the descriptor.
pub const DESCRIPTOR_EVENT: &str = "subagent/descriptor";

/// The two ways a child can live.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum SubagentMode {
    /// One run, one result, never resumable.
    #[serde(rename = "one-shot")]
    OneShot,
    /// A durable conversation that later messages can resume.
    #[serde(rename = "continuable")]
    Continuable,
}

impl SubagentMode {
    /// The descriptor's `mode` value: `one-shot` or `continuable`.
    pub fn as_str(self) -> &'static str {
        match self {
            SubagentMode::OneShot => "one-shot",
            SubagentMode::Continuable => "continuable",
        }
    }
}

/// A continuable child's tool filter: at least one of `allow` and `deny` (either may be empty).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolFilter {
    allow: Option<Vec<String>>,
    deny: Option<Vec<String>>,
}

impl ToolFilter {
    /// A filter from its two lists; `None` when neither is given (the descriptor schema requires
    /// at least one).
    pub fn new(allow: Option<Vec<String>>, deny: Option<Vec<String>>) -> Option<ToolFilter> {
        (allow.is_some() || deny.is_some()).then_some(ToolFilter { allow, deny })
    }

    /// The tool names the child may use, if the filter declares an allow list.
    pub fn allow(&self) -> Option<&[String]> {
        self.allow.as_deref()
    }

    /// The tool names the child may not use, if the filter declares a deny list.
    pub fn deny(&self) -> Option<&[String]> {
        self.deny.as_deref()
    }
}

impl Serialize for ToolFilter {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let n_fields = usize::from(self.allow.is_some()) + usize::from(self.deny.is_some());
        let mut map = serializer.serialize_map(Some(n_fields))?;
        if let Some(allow) = &self.allow {
            map.serialize_entry("allow", allow)?;
        }
        if let Some(deny) = &self.deny {
            map.serialize_entry("deny", deny)?;
        }
        map.end()
    }
}

/// The one-shot arm: the establishing provider and an optional display label.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OneShotDescriptor {
    /// The name of the subagent provider that established the child (recorded, never
    /// dispatched to again).
    pub provider: String,
    /// The creation and display label (the delegation tool's `description`), if one was given.
    pub label: Option<String>,
}

/// The continuable arm: everything a cold resume needs to rebuild the child's composition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContinuableDescriptor {
    /// The name of the subagent provider that established the child.
    pub provider: String,
    /// The creation and display label; required for a continuable child.
    pub label: String,
    /// The child's LLM provider (the request's override, else the parent's), if one was resolved.
    pub agent_provider: Option<String>,
    /// The child's model (the request's override, else the parent's), if one was resolved.
    pub agent_model: Option<String>,
    /// A per-child persona that shadows the deployment's persona on resume.
    pub persona: Option<String>,
    /// Which tools the child may use.
    pub tool_filter: Option<ToolFilter>,
}

/// A descriptor of the current version, either arm.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Descriptor {
    /// `"mode":"one-shot"`: one run, one result, never resumed.
    OneShot(OneShotDescriptor),
    /// `"mode":"continuable"`: a conversation later messages can resume.
    Continuable(ContinuableDescriptor),
}

/// The outcome of a strict parse that did not fail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DescriptorParse {
    /// A valid version-2 descriptor.
    Supported(Descriptor),
    /// A numeric `version` other than 2: written by another runtime, not corrupt.
    UnsupportedVersion,
}

impl DescriptorParse {
    /// The descriptor, or `None` for another version.
    pub fn supported(self) -> Option<Descriptor> {
        match self {
            DescriptorParse::Supported(descriptor) => Some(descriptor),
            DescriptorParse::UnsupportedVersion => None,
        }
    }
}

impl Descriptor {
    /// Which arm this is.
    pub fn mode(&self) -> SubagentMode {
        match self {
            Descriptor::OneShot(_) => SubagentMode::OneShot,
            Descriptor::Continuable(_) => SubagentMode::Continuable,
        }
    }

    /// The establishing provider's name, from either arm.
    pub fn provider(&self) -> &str {
        match self {
            Descriptor::OneShot(descriptor) => &descriptor.provider,
            Descriptor::Continuable(descriptor) => &descriptor.provider,
        }
    }

    /// The label: always present for a continuable child, optional for a one-shot one.
    pub fn label(&self) -> Option<&str> {
        match self {
            Descriptor::OneShot(descriptor) => descriptor.label.as_deref(),
            Descriptor::Continuable(descriptor) => Some(&descriptor.label),
        }
    }

    /// The payload as written: `version` 2 first, then the fields in canonical order, absent
    /// optional fields omitted (never `null`).
    pub fn to_value(&self) -> Value {
        // Invariant: a descriptor holds strings and a version number only.
        serde_json::to_value(self).expect("a descriptor of strings serializes to JSON")
    }

    /// The payload as event data. Descriptor fields are strings, so the payload is always in the
    /// lossless JSON domain.
    pub fn to_data(&self) -> JsonData {
        // Invariant: strings and a small integer are inside the lossless JSON domain.
        JsonData::from_serialize(self).expect("a descriptor of strings is lossless JSON")
    }

    /// Strictly parses one persisted payload (reference 03 §2.3).
    pub fn parse(payload: &Value) -> Result<DescriptorParse, DescriptorError> {
        parse_descriptor(payload)
    }

    /// Strictly parses the payload of a `subagent/descriptor` event.
    pub fn parse_event(event: &SessionEvent) -> Result<DescriptorParse, DescriptorError> {
        match event.data.to_value() {
            Ok(payload) => parse_descriptor(&payload),
            // Valid JSON text with a number no tree can hold: a corrupt payload, not a crash.
            Err(error) => Err(corrupt(format!("payload is not representable: {error}"))),
        }
    }
}

impl Serialize for Descriptor {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(None)?;
        map.serialize_entry("version", &SUBAGENT_DESCRIPTOR_VERSION)?;
        map.serialize_entry("mode", self.mode().as_str())?;
        map.serialize_entry("provider", self.provider())?;
        match self {
            Descriptor::OneShot(descriptor) => {
                if let Some(label) = &descriptor.label {
                    map.serialize_entry("label", label)?;
                }
            }
            Descriptor::Continuable(descriptor) => {
                map.serialize_entry("label", &descriptor.label)?;
                if let Some(agent_provider) = &descriptor.agent_provider {
                    map.serialize_entry("agentProvider", agent_provider)?;
                }
                if let Some(agent_model) = &descriptor.agent_model {
                    map.serialize_entry("agentModel", agent_model)?;
                }
                if let Some(persona) = &descriptor.persona {
                    map.serialize_entry("persona", persona)?;
                }
                if let Some(tool_filter) = &descriptor.tool_filter {
                    map.serialize_entry("toolFilter", tool_filter)?;
                }
            }
        }
        map.end()
    }
}

const ONE_SHOT_KEYS: [&str; 4] = ["version", "mode", "provider", "label"];
const CONTINUABLE_KEYS: [&str; 8] =
    ["version", "mode", "provider", "label", "agentProvider", "agentModel", "persona", "toolFilter"];

fn corrupt(detail: impl std::fmt::Display) -> DescriptorError {
    DescriptorError::new(format!("persisted subagent descriptor {detail}"))
}

/// Strictly parses one persisted payload, in the reference's check order (reference 03 §2.3):
/// `Ok(Supported)`, `Ok(UnsupportedVersion)` for a numeric version other than 2, or the first
/// failed check's error. A key present with JSON `null` counts as present.
pub fn parse_descriptor(payload: &Value) -> Result<DescriptorParse, DescriptorError> {
    let Value::Object(record) = payload else {
        return Err(corrupt("payload must be an object"));
    };
    let Some(Value::Number(version)) = record.get("version") else {
        return Err(corrupt("version must be a number"));
    };
    // Numeric comparison: `2.0` is version 2, as it is in JSON's number model.
    if version.as_f64() != Some(SUBAGENT_DESCRIPTOR_VERSION as f64) {
        return Ok(DescriptorParse::UnsupportedVersion);
    }
    let mode = match record.get("mode") {
        Some(Value::String(mode)) if mode == "one-shot" => SubagentMode::OneShot,
        Some(Value::String(mode)) if mode == "continuable" => SubagentMode::Continuable,
        _ => return Err(corrupt("mode must be \"one-shot\" or \"continuable\"")),
    };
    let allowed: &[&str] = match mode {
        SubagentMode::OneShot => &ONE_SHOT_KEYS,
        SubagentMode::Continuable => &CONTINUABLE_KEYS,
    };
    if let Some(key) = record.keys().find(|key| !allowed.contains(&key.as_str())) {
        return Err(corrupt(format_args!("payload has unknown field \"{key}\"")));
    }
    let Some(Value::String(provider)) = record.get("provider") else {
        return Err(corrupt("provider must be a string"));
    };
    let provider = provider.clone();
    let descriptor = match mode {
        SubagentMode::OneShot => {
            let label = optional_string(record, "label")?;
            Descriptor::OneShot(OneShotDescriptor { provider, label })
        }
        SubagentMode::Continuable => {
            let Some(Value::String(label)) = record.get("label") else {
                return Err(corrupt("label must be a string"));
            };
            let label = label.clone();
            let agent_provider = optional_string(record, "agentProvider")?;
            let agent_model = optional_string(record, "agentModel")?;
            let persona = optional_string(record, "persona")?;
            let tool_filter = match record.get("toolFilter") {
                None => None,
                Some(value) => Some(parse_tool_filter(value)?),
            };
            Descriptor::Continuable(ContinuableDescriptor {
                provider,
                label,
                agent_provider,
                agent_model,
                persona,
                tool_filter,
            })
        }
    };
    Ok(DescriptorParse::Supported(descriptor))
}

fn optional_string(record: &Map<String, Value>, key: &str) -> Result<Option<String>, DescriptorError> {
    match record.get(key) {
        None => Ok(None),
        Some(Value::String(value)) => Ok(Some(value.clone())),
        Some(_) => Err(corrupt(format_args!("{key} must be a string"))),
    }
}

fn parse_tool_filter(value: &Value) -> Result<ToolFilter, DescriptorError> {
    let Value::Object(filter) = value else {
        return Err(corrupt("toolFilter must be an object"));
    };
    if let Some(key) = filter.keys().find(|key| !matches!(key.as_str(), "allow" | "deny")) {
        return Err(corrupt(format_args!("toolFilter has unknown field \"{key}\"")));
    }
    let list = |key: &str| -> Result<Option<Vec<String>>, DescriptorError> {
        let Some(value) = filter.get(key) else { return Ok(None) };
        let invalid = || corrupt(format_args!("toolFilter.{key} must be an array of strings"));
        let Value::Array(items) = value else { return Err(invalid()) };
        items
            .iter()
            .map(|item| item.as_str().map(str::to_owned).ok_or_else(invalid))
            .collect::<Result<_, _>>()
            .map(Some)
    };
    let allow = list("allow")?;
    let deny = list("deny")?;
    ToolFilter::new(allow, deny).ok_or_else(|| corrupt("toolFilter must declare allow and/or deny"))
}

/// The FIRST `subagent/descriptor` among `events`, strictly parsed (reference 03 §2.4): `None`
/// when there is none or it has another version, an error when it is malformed. Resume
/// authorization folds the child's own suffix (`events[seedLength..]`) with this; listing uses
/// the last-wins identity unit instead (deviation 2 in `docs/deviations.md`).
pub fn fold_first_descriptor<E: Borrow<SessionEvent>>(
    events: impl IntoIterator<Item = E>,
) -> Result<Option<Descriptor>, DescriptorError> {
    for event in events {
        let event = event.borrow();
        if event.kind == DESCRIPTOR_EVENT {
            return Ok(Descriptor::parse_event(event)?.supported());
        }
    }
    Ok(None)
}
