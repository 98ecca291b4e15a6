//! What a caller asks to run, validated before anything is written.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::template;
use crate::domain::{
    ConversationId, ConversationPolicy, FieldError, ParentLink, PinnedAgent, RunBudget,
    RunOverrides, StrategyKind, Tenant, TenantLimits, VersionPick,
};
use crate::telemetry::TraceParent;
use crate::tools::ToolRef;

/// Iteration limit when the request gives none.
pub const DEFAULT_MAX_ITERATION: u32 = 10;
/// Highest iteration limit accepted.
pub const MAX_ITERATION_LIMIT: u32 = 99;

/// How the model expects its prompt.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ModelMode {
    /// A list of role-tagged messages.
    #[default]
    Chat,
    /// One prompt string (ReAct only).
    Completion,
}

/// The model to call and how.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ModelSpec {
    /// Provider name from the server configuration.
    pub provider: String,
    /// Model name.
    pub name: String,
    /// Chat or completion.
    pub mode: ModelMode,
    /// Sampling parameters passed through.
    pub parameters: Map<String, Value>,
    /// Stop sequences.
    pub stop: Vec<String>,
    /// Models tried in order when this one fails after its retries.
    pub fallbacks: Vec<ModelRef>,
}

/// A model of a configured provider.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ModelRef {
    /// Provider name from the server configuration.
    pub provider: String,
    /// Model name.
    pub name: String,
}

/// The agent's configuration for one run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct AgentSpec {
    /// The model.
    pub model: ModelSpec,
    /// `None` picks by the model's features.
    pub strategy: Option<StrategyKind>,
    /// 1..=99.
    pub max_iteration: u32,
    /// System prompt template with `{{name}}` variables.
    pub instruction: String,
    /// Tools the model may call.
    pub tools: Vec<ToolRef>,
    /// Overrides the ReAct template.
    pub react_prompt: String,
    /// Earlier turns sent to the model at most; 0 sends all.
    pub max_history_turns: u32,
    /// The shape the final answer must have, if any.
    pub output: Option<OutputSpec>,
    /// Keep a forced `tool_choice` after a round has called a tool.
    pub keep_tool_choice: bool,
    /// Stored agents the model may call as tools.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub sub_agents: Vec<SubAgentRef>,
    /// What one run may spend (before the tenant's ceilings).
    #[serde(skip_serializing_if = "RunBudget::is_unset")]
    pub budget: RunBudget,
    /// Whether the model's reasoning is shown, and kept.
    #[serde(skip_serializing_if = "ReasoningMode::is_off")]
    pub reasoning: ReasoningMode,
    /// The rule for a run that arrives while its conversation has a live run; `None`
    /// leaves it to the server's default.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub conversation_policy: Option<ConversationPolicy>,
}

/// What happens to the reasoning a model streams beside its answer. It decides showing
/// and keeping, never whether the model reasons, and the text never goes back to a model.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReasoningMode {
    /// Neither shown nor kept.
    #[default]
    Off,
    /// Sent to the run's live followers only, outside the stored log.
    Stream,
    /// Sent and stored like any event, and kept on the round's thought.
    Keep,
}

impl ReasoningMode {
    fn is_off(&self) -> bool {
        *self == ReasoningMode::Off
    }
}

/// A stored agent offered to the model as a tool.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct SubAgentRef {
    /// The agent, which is also the tool's name.
    pub agent_id: String,
    /// A version (0: none).
    #[serde(skip_serializing_if = "is_zero")]
    pub version: u32,
    /// An alias, when no version is given; neither means `latest`.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub alias: String,
}

fn is_zero(value: &u32) -> bool {
    *value == 0
}

impl SubAgentRef {
    /// Which version it names.
    pub fn pick(&self) -> VersionPick {
        match (self.version, self.alias.as_str()) {
            (0, "" | crate::domain::agent::LATEST) => VersionPick::Latest,
            (0, alias) => VersionPick::Alias(alias.to_owned()),
            (n, _) => VersionPick::Number(n),
        }
    }
}

/// Sub-agents one agent may name at most.
pub const MAX_SUB_AGENTS: usize = 16;

/// A final answer held to a JSON Schema.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OutputSpec {
    /// The JSON Schema.
    pub schema: Value,
    /// What happens when the answer does not meet it after one repair round.
    pub fallback: OutputFallback,
}

/// What a run does with an answer that does not meet its output schema.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OutputFallback {
    /// The answer is kept as plain text; the end says why it is not the document.
    #[default]
    Text,
    /// The run ends with `output_invalid`.
    Error,
}

/// Where an image given with the query comes from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ImageSource {
    /// A URL the model fetches.
    Url(String),
    /// Inline bytes.
    Data {
        /// MIME type, e.g. `image/png`.
        mime_type: String,
        /// The image.
        #[serde(with = "base64_bytes")]
        bytes: Vec<u8>,
    },
}

/// An image given with the query.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InputImage {
    /// The image.
    pub source: ImageSource,
    /// `low` or `high`.
    pub detail: String,
}

impl InputImage {
    /// The image as a prompt part; inline bytes become a `data:` URL.
    pub fn content_part(&self) -> crate::llm::ContentPart {
        use base64::Engine as _;
        let url = match &self.source {
            ImageSource::Url(url) => url.clone(),
            ImageSource::Data { mime_type, bytes } => format!(
                "data:{mime_type};base64,{}",
                base64::engine::general_purpose::STANDARD.encode(bytes)
            ),
        };
        crate::llm::ContentPart::Image {
            url,
            detail: self.detail.clone(),
        }
    }
}

/// A caller's idempotency key with a digest of the request it came with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Idempotency {
    /// The key, unique per tenant.
    pub key: String,
    /// Digest of the request, to tell a retry from a reuse of the key.
    pub fingerprint: String,
}

/// Fallback models a run may name at most.
pub const MAX_FALLBACKS: usize = 4;

/// Longest idempotency key accepted.
const MAX_KEY_LEN: usize = 256;

/// One user turn to run.
#[derive(Debug, Clone, PartialEq)]
pub struct RunSpec {
    /// Owner of the records.
    pub tenant: Tenant,
    /// `None` starts a new conversation.
    pub conversation_id: Option<ConversationId>,
    /// The user's query.
    pub query: String,
    /// Values for the instruction's variables.
    pub inputs: BTreeMap<String, String>,
    /// The end user.
    pub user: String,
    /// The agent.
    pub agent: AgentSpec,
    /// Images given with the query.
    pub files: Vec<InputImage>,
    /// Tools the caller runs itself.
    pub client_tools: Vec<crate::tools::ClientToolSpec>,
    /// Makes retries safe: the same key and request follow the first run.
    pub idempotency: Option<Idempotency>,
    /// The caller's deadline; when it passes the run is cancelled.
    pub deadline: Option<std::time::Duration>,
    /// The caller's trace, the parent of the run's span.
    pub trace_parent: TraceParent,
    /// Whether a dropped stream cancels the run (the transport acts on it; it is kept with
    /// the run).
    pub cancel_on_disconnect: bool,
    /// The limits of the run's tenant (0: unlimited).
    pub limits: TenantLimits,
    /// The stored agent to run, resolved into `agent` and `pinned` as the run starts.
    pub reference: Option<AgentReference>,
    /// The stored agent and version that runs, once resolved.
    pub pinned: Option<PinnedAgent>,
    /// Set on a sub-agent's run: the run and call that started it.
    pub parent: Option<ParentLink>,
    /// The stored agents of the runs above this one, outermost first: a call of one of
    /// them again is a cycle.
    pub lineage: Vec<String>,
    /// The message's id when it is chosen before the run (a sub-agent's, derived from its
    /// parent's call, so a resumed parent finds it instead of starting it again).
    pub message_id: Option<crate::domain::MessageId>,
    /// The sub-agent tree the run belongs to, counted in this process; a top run (or a run
    /// taken over) starts its own.
    pub tree: Option<super::tree::TreeHandle>,
    /// The request's rule for a conversation with a live run; `None` leaves it to the agent.
    pub conversation_policy: Option<ConversationPolicy>,
}

/// A stored agent a run names instead of an inline one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentReference {
    /// The agent.
    pub agent_id: String,
    /// Which of its versions.
    pub pick: VersionPick,
    /// What this run changes of it.
    pub overrides: RunOverrides,
}

/// What a stored version holds: the agent and the tools its callers run, in the form kept
/// in the store.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentDefinition {
    /// The agent.
    pub agent: AgentSpec,
    /// Tools its callers execute.
    #[serde(default)]
    pub client_tools: Vec<crate::tools::ClientToolSpec>,
}

impl RunSpec {
    /// A run of `query` for `tenant` in a new conversation, with everything else empty:
    /// the start of a spec built in code (tests, embedders).
    pub fn new(tenant: Tenant, query: impl Into<String>) -> Self {
        Self {
            tenant,
            conversation_id: None,
            query: query.into(),
            inputs: BTreeMap::new(),
            user: String::new(),
            agent: AgentSpec::default(),
            files: Vec::new(),
            client_tools: Vec::new(),
            idempotency: None,
            deadline: None,
            trace_parent: TraceParent::default(),
            cancel_on_disconnect: false,
            limits: TenantLimits::default(),
            reference: None,
            pinned: None,
            parent: None,
            lineage: Vec::new(),
            message_id: None,
            tree: None,
            conversation_policy: None,
        }
    }

    /// The rule this run follows when its conversation has a live run.
    pub fn conversation_policy(&self) -> ConversationPolicy {
        ConversationPolicy::resolve(self.conversation_policy, self.agent.conversation_policy)
    }

    /// Checks every field a run depends on; `max_iteration` 0 becomes the default.
    pub fn validated(mut self) -> Result<Self, FieldError> {
        if self.query.trim().is_empty() {
            return Err(FieldError::new("query", "must not be empty"));
        }
        let model = &self.agent.model;
        check_name("agent.model.provider", &model.provider)?;
        check_name("agent.model.name", &model.name)?;
        if model.fallbacks.len() > MAX_FALLBACKS {
            return Err(FieldError::new(
                "agent.model.fallbacks",
                format!("may name at most {MAX_FALLBACKS} models"),
            ));
        }
        for (index, fallback) in model.fallbacks.iter().enumerate() {
            if fallback.provider.trim().is_empty() || fallback.name.trim().is_empty() {
                return Err(FieldError::new(
                    format!("agent.model.fallbacks[{index}]"),
                    "needs both a provider and a name",
                ));
            }
            check_name(
                &format!("agent.model.fallbacks[{index}].provider"),
                &fallback.provider,
            )?;
            check_name(
                &format!("agent.model.fallbacks[{index}].name"),
                &fallback.name,
            )?;
        }
        self.agent.max_iteration = match self.agent.max_iteration {
            0 => DEFAULT_MAX_ITERATION,
            n if n <= MAX_ITERATION_LIMIT => n,
            _ => {
                return Err(FieldError::new(
                    "agent.max_iteration",
                    format!("must be between 1 and {MAX_ITERATION_LIMIT}"),
                ))
            }
        };
        if self
            .idempotency
            .as_ref()
            .is_some_and(|i| i.key.len() > MAX_KEY_LEN)
        {
            return Err(FieldError::new(
                "idempotency_key",
                format!("must be at most {MAX_KEY_LEN} bytes"),
            ));
        }
        if let Some(missing) = instruction_variables(&self.agent.instruction)
            .into_iter()
            .find(|name| !self.inputs.contains_key(*name))
        {
            return Err(FieldError::new(
                format!("inputs.{missing}"),
                "is required by the instruction",
            ));
        }
        for (index, tool) in self.agent.tools.iter().enumerate() {
            if tool.provider.is_empty() || tool.name.is_empty() {
                return Err(FieldError::new(
                    format!("agent.tools[{index}]"),
                    "needs both a provider and a name",
                ));
            }
            check_name(&format!("agent.tools[{index}].provider"), &tool.provider)?;
            check_name(&format!("agent.tools[{index}].name"), &tool.name)?;
        }
        check_sub_agents(&self.agent.sub_agents)?;
        Ok(self)
    }

    /// The instruction with each `{{name}}` replaced by its input.
    pub fn filled_instruction(&self) -> String {
        template::fill(&self.agent.instruction, |name| {
            self.inputs.get(name.trim()).map(String::as_str)
        })
    }

    /// The length of [`Self::filled_instruction`], counted without building it.
    pub fn filled_instruction_len(&self) -> usize {
        template::filled_len(&self.agent.instruction, |name| {
            self.inputs.get(name.trim()).map(String::as_str)
        })
    }
}

/// Bytes as base64 text in stored specs (a JSON array of numbers would be four times the
/// size).
mod base64_bytes {
    use base64::Engine as _;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(bytes: &[u8], serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&base64::engine::general_purpose::STANDARD.encode(bytes))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<u8>, D::Error> {
        let text = String::deserialize(deserializer)?;
        base64::engine::general_purpose::STANDARD
            .decode(text)
            .map_err(serde::de::Error::custom)
    }
}

/// What a run was started with beyond what its message records (query, inputs, user,
/// strategy, model): kept with the message when the run starts, so the run can be told
/// apart, audited and, later, resumed from its records alone.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoredSpec {
    /// The form of this record.
    pub version: u32,
    /// The agent as the request gave it.
    pub agent: AgentSpec,
    /// Images sent with the query.
    #[serde(default)]
    pub files: Vec<InputImage>,
    /// The caller's own tools.
    #[serde(default)]
    pub client_tools: Vec<crate::tools::ClientToolSpec>,
    /// When the caller's deadline passes, as a moment rather than a span.
    #[serde(default)]
    pub deadline: Option<DateTime<Utc>>,
    /// Whether a dropped stream cancels the run.
    #[serde(default)]
    pub cancel_on_disconnect: bool,
    /// The caller's `traceparent`, when it sent one.
    #[serde(default)]
    pub trace_parent: Option<String>,
    /// The stored agents of the runs above a sub-agent's, outermost first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub lineage: Vec<String>,
}

impl StoredSpec {
    /// The record's current form.
    pub const VERSION: u32 = 1;

    /// What `spec` keeps, its deadline counted from `started`.
    pub fn of(spec: &RunSpec, started: DateTime<Utc>) -> Self {
        Self {
            version: Self::VERSION,
            agent: spec.agent.clone(),
            files: spec.files.clone(),
            client_tools: spec.client_tools.clone(),
            deadline: spec
                .deadline
                .and_then(|deadline| chrono::Duration::from_std(deadline).ok())
                .and_then(|deadline| started.checked_add_signed(deadline)),
            cancel_on_disconnect: spec.cancel_on_disconnect,
            trace_parent: spec.trace_parent.to_header(),
            lineage: spec.lineage.clone(),
        }
    }
}

/// Checks the sub-agents an agent names: at most [`MAX_SUB_AGENTS`], each an agent id,
/// each once, a version or an alias but not both.
fn check_sub_agents(sub_agents: &[SubAgentRef]) -> Result<(), FieldError> {
    if sub_agents.len() > MAX_SUB_AGENTS {
        return Err(FieldError::new(
            "agent.sub_agents",
            format!("may name at most {MAX_SUB_AGENTS} agents"),
        ));
    }
    for (index, sub) in sub_agents.iter().enumerate() {
        let field = format!("agent.sub_agents[{index}]");
        crate::domain::agent::check_slug(&format!("{field}.agent_id"), &sub.agent_id)?;
        if sub.version > 0 && !sub.alias.is_empty() {
            return Err(FieldError::new(
                format!("{field}.alias"),
                "must not be given with a version: give one of the two",
            ));
        }
        if !sub.alias.is_empty() {
            crate::domain::agent::check_slug(&format!("{field}.alias"), &sub.alias)?;
        }
        if sub_agents[..index]
            .iter()
            .any(|earlier| earlier.agent_id == sub.agent_id)
        {
            return Err(FieldError::new(
                format!("{field}.agent_id"),
                format!("names {:?} a second time", sub.agent_id),
            ));
        }
    }
    Ok(())
}

/// Longest model, provider or tool name a run accepts.
pub const MAX_NAME_LEN: usize = 256;

/// A name the run logs, labels and sends on: not blank, at most [`MAX_NAME_LEN`] bytes, no
/// control characters (a newline in it would forge log lines).
fn check_name(field: &str, name: &str) -> Result<(), FieldError> {
    if name.trim().is_empty() {
        return Err(FieldError::new(field, "must not be empty"));
    }
    if name.len() > MAX_NAME_LEN {
        return Err(FieldError::new(
            field,
            format!("is {} bytes, more than {MAX_NAME_LEN}", name.len()),
        ));
    }
    if name.chars().any(char::is_control) {
        return Err(FieldError::new(
            field,
            "must not contain control characters",
        ));
    }
    Ok(())
}

/// The `{{name}}` variables a template uses (names of letters, digits, `_` and `-`).
pub fn instruction_variables(template: &str) -> Vec<&str> {
    let mut names = Vec::new();
    let mut rest = template;
    while let Some(start) = rest.find("{{") {
        let after = &rest[start + 2..];
        let Some(end) = after.find("}}") else { break };
        let name = after[..end].trim();
        let valid = !name.is_empty()
            && name
                .chars()
                .all(|c| c.is_alphanumeric() || c == '_' || c == '-');
        if valid && !names.contains(&name) {
            names.push(name);
        }
        rest = &after[end + 2..];
    }
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> RunSpec {
        RunSpec {
            agent: AgentSpec {
                model: ModelSpec {
                    provider: "openai".into(),
                    name: "m".into(),
                    ..ModelSpec::default()
                },
                ..AgentSpec::default()
            },
            ..RunSpec::new(Tenant::default_tenant(), "hi")
        }
    }

    #[test]
    fn validation_names_the_field() {
        type Mutation = fn(&mut RunSpec);
        let cases: Vec<(Mutation, &str)> = vec![
            (|s| s.query = "  ".into(), "query must not be empty"),
            (
                |s| s.agent.model.provider.clear(),
                "agent.model.provider must not be empty",
            ),
            (
                |s| s.agent.model.name.clear(),
                "agent.model.name must not be empty",
            ),
            (
                |s| s.agent.max_iteration = 100,
                "agent.max_iteration must be between 1 and 99",
            ),
        ];
        for (mutate, expected) in cases {
            let mut bad = spec();
            mutate(&mut bad);
            assert_eq!(bad.validated().unwrap_err().to_string(), expected);
        }
    }

    #[test]
    fn zero_iterations_means_the_default() {
        assert_eq!(
            spec().validated().unwrap().agent.max_iteration,
            DEFAULT_MAX_ITERATION
        );
    }

    #[test]
    fn a_variable_the_instruction_uses_must_be_given() {
        let mut s = spec();
        s.agent.instruction =
            "Help {{ name }} with {{topic}}; {{topic}} again; {{not a var}}".into();
        s.inputs.insert("name".into(), "Ada".into());
        assert_eq!(
            s.clone().validated().unwrap_err().to_string(),
            "inputs.topic is required by the instruction"
        );
        s.inputs.insert("topic".into(), "maths".into());
        assert!(s.validated().is_ok());
    }

    #[test]
    fn instruction_variables_are_filled() {
        let mut s = spec();
        s.agent.instruction = "You help {{name}} with {{topic}}.".into();
        s.inputs.insert("name".into(), "Ada".into());
        assert_eq!(s.filled_instruction(), "You help Ada with {{topic}}.");
    }
}
