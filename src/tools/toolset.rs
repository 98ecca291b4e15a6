//! A run's tools, and one call run the way an agent needs it: never failing, always with an
//! observation.
//!
//! The set looks the tool up, parses the model's argument text, lays preset parameters over
//! it, validates the result against the tool's JSON Schema, runs the tool within a timeout
//! and measures it. Every failure becomes observation text (see [`super::observation`]) plus
//! `meta.error`, so the model can correct itself and the run goes on. Tools the caller runs
//! itself join the set in [`super::client`].

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use serde_json::{json, Map, Value};

use super::observation;
use super::registry::{Provider, RegisteredTool, ToolSnapshot};
use super::schema::PatternBudget;
use super::{ErasedTool, ProviderKind, RegistryError};
use crate::domain::{CallOutcome, ErrorKind, ToolInvokeMeta};

/// A tool named in a run's configuration.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ToolRef {
    /// Provider name.
    pub provider: String,
    /// Tool name.
    pub name: String,
    /// Values that override the model's arguments and are hidden from it.
    #[serde(default)]
    pub preset: Map<String, Value>,
    /// Calls wait for a person's approval before they run.
    #[serde(default)]
    pub require_approval: bool,
}

/// A configured tool that the run cannot use.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ToolSetError {
    /// No provider of that name.
    #[error("agent.tools[{index}].provider: unknown tool provider {provider:?}")]
    UnknownProvider {
        /// Position in the configured list.
        index: usize,
        /// Provider asked for.
        provider: String,
    },
    /// The provider has no such tool.
    #[error("agent.tools[{index}].name: unknown tool {name:?} of provider {provider:?}")]
    UnknownTool {
        /// Position in the configured list.
        index: usize,
        /// Provider name.
        provider: String,
        /// Tool asked for.
        name: String,
    },
    /// A client tool's schema does not compile.
    #[error("client_tools[{index}].parameters_schema: {reason}")]
    ClientSchema {
        /// Position in the request's list.
        index: usize,
        /// What the schema compiler said.
        reason: String,
    },
    /// A sub-agent's name is taken by another tool of the run.
    #[error("agent.sub_agents[{index}].agent_id: {reason}")]
    SubAgentName {
        /// Position in the list.
        index: usize,
        /// What is wrong.
        reason: String,
    },
    /// A client tool's name is unusable or taken.
    #[error("client_tools[{index}].name: {reason}")]
    ClientName {
        /// Position in the request's list.
        index: usize,
        /// What is wrong.
        reason: String,
    },
    /// Two configured tools share a name, so the model could not tell them apart.
    #[error("agent.tools[{index}].name: tool name {name:?} is configured twice")]
    DuplicateName {
        /// Position of the second one.
        index: usize,
        /// The name.
        name: String,
    },
}

impl ToolSetError {
    /// The caller named something that is not there.
    pub fn kind(&self) -> ErrorKind {
        ErrorKind::InvalidArgument
    }
}

pub(super) struct Bound {
    pub(super) provider: Arc<Provider>,
    pub(super) tool: RegisteredTool,
    pub(super) preset: Map<String, Value>,
    /// Run by the caller, not here.
    pub(super) client: bool,
    /// A stored agent, run as a sub-agent by the loop.
    pub(super) agent: bool,
    /// Calls wait for approval before they run.
    pub(super) approval: bool,
}

/// Who runs a stand-in tool a run adds to its set: the caller (after an approval, when it
/// needs one), or the loop (a sub-agent).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum RunBy {
    /// The caller of the run.
    Caller {
        /// Calls wait for approval before they go to the caller.
        approval: bool,
    },
    /// The agent loop, as a sub-agent run.
    Loop,
}

/// The tools of one run, bound to their presets, by the name the model calls them.
#[derive(Default)]
pub struct ToolSet {
    tools: Vec<Bound>,
    by_name: HashMap<String, usize>,
}

/// The outcome of one call, successful or not.
#[derive(Debug, Clone, PartialEq)]
pub struct Invocation {
    /// Provider of the tool; empty when there is no such tool.
    pub provider: String,
    /// The text the model sees.
    pub observation: String,
    /// Timing, error and configuration.
    pub meta: ToolInvokeMeta,
    /// Files the tool produced.
    pub files: Vec<super::ToolFile>,
    /// Passages the answer is made of, as evidence for the message's answer.
    pub resources: Vec<crate::domain::RetrieverResource>,
    /// How the call ended.
    pub outcome: CallOutcome,
}

/// What the model is offered for one tool: its schema without the preset parameters.
#[derive(Debug, Clone, PartialEq)]
pub struct OfferedTool {
    /// Name.
    pub name: String,
    /// Description.
    pub description: String,
    /// Argument schema as the model sees it.
    pub parameters: Value,
}

impl ToolSet {
    /// Resolves the configured tools against a registry snapshot.
    pub fn bind(snapshot: &ToolSnapshot, refs: &[ToolRef]) -> Result<Self, ToolSetError> {
        let mut set = Self::default();
        for (index, tool_ref) in refs.iter().enumerate() {
            let provider =
                snapshot
                    .get(&tool_ref.provider)
                    .ok_or_else(|| ToolSetError::UnknownProvider {
                        index,
                        provider: tool_ref.provider.clone(),
                    })?;
            let tool = provider
                .tool(&tool_ref.name)
                .ok_or_else(|| ToolSetError::UnknownTool {
                    index,
                    provider: tool_ref.provider.clone(),
                    name: tool_ref.name.clone(),
                })?;
            // The model calls the tool by its valid name, whichever name configured it.
            let name = tool.tool.descriptor().name.clone();
            if set.has(&name) {
                return Err(ToolSetError::DuplicateName { index, name });
            }
            set.push(
                &name,
                Bound {
                    provider: Arc::clone(provider),
                    tool: tool.clone(),
                    preset: tool_ref.preset.clone(),
                    client: false,
                    agent: false,
                    approval: tool_ref.require_approval,
                },
            );
        }
        Ok(set)
    }

    /// The tools as the model is offered them, in configured order.
    pub fn offered(&self) -> Vec<OfferedTool> {
        self.tools
            .iter()
            .map(|bound| {
                let descriptor = bound.tool.tool.descriptor();
                OfferedTool {
                    name: descriptor.name.clone(),
                    description: descriptor.description.clone(),
                    parameters: hide_presets(&descriptor.parameters, &bound.preset),
                }
            })
            .collect()
    }

    /// Kind of the provider of the tool the model calls `name`, if the run has it.
    pub fn kind_of(&self, name: &str) -> Option<super::ProviderKind> {
        self.bound(name).map(|bound| bound.provider.kind)
    }

    /// Arguments of the tool the model calls `name` that carry a file.
    pub fn file_fields(&self, name: &str) -> &[String] {
        self.bound(name).map_or(&[], |bound| {
            bound.tool.tool.descriptor().file_fields.as_slice()
        })
    }

    /// Whether calls of the tool the model calls `name` wait for approval.
    pub fn needs_approval(&self, name: &str) -> bool {
        self.bound(name).is_some_and(|bound| bound.approval)
    }

    /// The result of a call of `name` that was declined for `reason`: it did not run.
    pub fn declined(&self, name: &str, reason: &str) -> Invocation {
        let (provider, config) = self
            .bound(name)
            .map(|bound| (bound.provider.name.clone(), tool_config(bound)))
            .unwrap_or_default();
        observation::failure(
            CallOutcome::Declined,
            provider,
            observation::declined(reason),
            0.0,
            config,
        )
    }

    /// The result of a call that is not run because its round held more than `limit`.
    pub fn not_run(&self, name: &str, limit: usize) -> Invocation {
        self.not_made(name, format!("more than {limit} calls in one round"))
    }

    /// The result of a call that is not run because the run's tool-call budget (`limit`)
    /// is spent.
    pub fn over_budget(&self, name: &str, limit: u32) -> Invocation {
        self.not_made(
            name,
            format!("the run's tool-call budget ({limit}) is spent"),
        )
    }

    fn not_made(&self, name: &str, why: String) -> Invocation {
        let provider = self
            .bound(name)
            .map(|bound| bound.provider.name.clone())
            .unwrap_or_default();
        observation::failure(
            CallOutcome::NotRun,
            provider,
            format!("{} {why}", crate::domain::NOT_RUN),
            0.0,
            Map::new(),
        )
    }

    /// The result of a call that was under way when its run's owner was lost: not made
    /// again, so the model is told its outcome is unknown.
    pub fn outcome_unknown(&self, name: &str) -> Invocation {
        let provider = self
            .bound(name)
            .map(|bound| bound.provider.name.clone())
            .unwrap_or_default();
        observation::failure(
            CallOutcome::OutcomeUnknown,
            provider,
            "tool_outcome_unknown: the service lost this run while the call was under way and \
             did not make it again, so whether it took effect is unknown"
                .to_owned(),
            0.0,
            Map::new(),
        )
    }

    /// The result of a call a newer run of the conversation stopped (or never let start):
    /// the model reads that it was interrupted.
    pub fn interrupted(&self, name: &str) -> Invocation {
        let provider = self
            .bound(name)
            .map(|bound| bound.provider.name.clone())
            .unwrap_or_default();
        observation::failure(
            CallOutcome::Interrupted,
            provider,
            crate::domain::INTERRUPTED_CALL.to_owned(),
            0.0,
            Map::new(),
        )
    }

    /// Provider of the tool the model calls `name`, if the run has it.
    pub fn provider_of(&self, name: &str) -> Option<&str> {
        self.by_name
            .get(name)
            .map(|i| self.tools[*i].provider.name.as_str())
    }

    /// Whether a call of `name` may be made again with the effect of once.
    pub fn is_idempotent(&self, name: &str) -> bool {
        self.bound(name)
            .is_some_and(|bound| bound.tool.tool.descriptor().idempotent)
    }

    /// [`Self::invoke`] with the call's `Idempotency-Key`, which tools that send requests
    /// (HTTP APIs) pass on.
    pub async fn invoke_keyed(
        &self,
        name: &str,
        arguments: &str,
        timeout: Duration,
        key: String,
    ) -> Invocation {
        super::CALL_KEY
            .scope(key, self.invoke(name, arguments, timeout))
            .await
    }

    /// Runs the call `name(arguments)`, within `timeout`.
    ///
    /// # Cancel safety
    /// Dropping the future drops the tool's future; the caller decides what to record.
    pub async fn invoke(&self, name: &str, arguments: &str, timeout: Duration) -> Invocation {
        let bound = match self.checked(name, arguments) {
            Ok(checked) => checked,
            Err(failure) => return *failure,
        };
        let (bound, args) = bound;
        let config = tool_config(bound);
        let provider = bound.provider.name.clone();
        let started = Instant::now();
        let result = tokio::time::timeout(timeout, bound.tool.tool.call(args)).await;
        let time_cost = started.elapsed().as_secs_f64();
        match result {
            Ok(Ok(output)) => observation::success(provider, output, time_cost, config),
            Ok(Err(super::ToolError::InvalidArguments(reason))) => observation::failure(
                CallOutcome::InvalidArguments,
                provider,
                observation::invalid_arguments(&reason),
                time_cost,
                config,
            ),
            Ok(Err(err)) => observation::failure(
                CallOutcome::Error,
                provider,
                observation::invoke_error(&err),
                time_cost,
                config,
            ),
            Err(_) => observation::failure(
                CallOutcome::Timeout,
                provider,
                observation::timed_out(timeout),
                time_cost,
                config,
            ),
        }
    }

    /// The bound tool the model calls `name` with its prepared arguments, or the observation
    /// that tells the model why the call cannot run.
    pub(super) fn checked(
        &self,
        name: &str,
        arguments: &str,
    ) -> Result<(&Bound, Map<String, Value>), Box<Invocation>> {
        let Some(bound) = self.bound(name) else {
            return Err(Box::new(observation::failure(
                CallOutcome::UnknownTool,
                String::new(),
                observation::unknown_tool(name),
                0.0,
                Map::new(),
            )));
        };
        match prepare_arguments(bound, arguments) {
            Ok(args) => Ok((bound, args)),
            Err(reason) => Err(Box::new(observation::failure(
                CallOutcome::InvalidArguments,
                bound.provider.name.clone(),
                observation::invalid_arguments(&reason),
                0.0,
                tool_config(bound),
            ))),
        }
    }

    pub(super) fn bound(&self, name: &str) -> Option<&Bound> {
        self.by_name.get(name).map(|i| &self.tools[*i])
    }

    pub(super) fn push(&mut self, name: &str, bound: Bound) {
        self.by_name.insert(name.to_owned(), self.tools.len());
        self.tools.push(bound);
    }

    pub(super) fn has(&self, name: &str) -> bool {
        self.by_name.contains_key(name)
    }

    /// Adds stand-ins (tools the caller or the loop runs) under the pseudo-provider
    /// `provider`; their schemas' patterns count against `budget`.
    pub(super) fn add_stand_ins(
        &mut self,
        provider: &str,
        tools: Vec<(Arc<dyn ErasedTool>, RunBy)>,
        budget: &mut PatternBudget,
    ) -> Result<(), RegistryError> {
        if tools.is_empty() {
            return Ok(());
        }
        let named: Vec<(String, RunBy)> = tools
            .iter()
            .map(|(tool, by)| (tool.descriptor().name.clone(), *by))
            .collect();
        let tools = tools.into_iter().map(|(tool, _)| tool).collect();
        let provider = Arc::new(Provider::within(
            provider,
            ProviderKind::Client,
            "",
            tools,
            budget,
        )?);
        for (name, by) in named {
            if let Some(tool) = provider.tools.get(&name) {
                let bound = Bound {
                    provider: Arc::clone(&provider),
                    tool: tool.clone(),
                    preset: Map::new(),
                    client: matches!(by, RunBy::Caller { .. }),
                    agent: by == RunBy::Loop,
                    approval: by == RunBy::Caller { approval: true },
                };
                self.push(&name, bound);
            }
        }
        Ok(())
    }

    /// Whether the tool the model calls `name` is a sub-agent.
    pub fn is_agent(&self, name: &str) -> bool {
        self.bound(name).is_some_and(|bound| bound.agent)
    }

    /// Whether the caller runs the tool the model calls `name`.
    pub fn is_client(&self, name: &str) -> bool {
        self.bound(name).is_some_and(|bound| bound.client)
    }

    /// Checks a client tool call's arguments as any call's; the failure is the observation
    /// the model gets instead of asking the caller.
    pub fn check_client_call(&self, name: &str, arguments: &str) -> Result<(), Box<Invocation>> {
        self.checked(name, arguments).map(drop)
    }

    /// The outcome of a client tool call from what the caller submitted.
    pub fn client_result(
        &self,
        name: &str,
        output: String,
        error: Option<String>,
        time_cost: f64,
    ) -> Invocation {
        let config = self.bound(name).map(tool_config).unwrap_or_default();
        match error.filter(|e| !e.is_empty()) {
            Some(error) => observation::failure(
                CallOutcome::Error,
                super::CLIENT_PROVIDER.to_owned(),
                observation::invoke_error(&error),
                time_cost,
                config,
            ),
            None => observation::success(
                super::CLIENT_PROVIDER.to_owned(),
                output.into(),
                time_cost,
                config,
            ),
        }
    }
}

pub(super) fn tool_config(bound: &Bound) -> Map<String, Value> {
    let descriptor = bound.tool.tool.descriptor();
    let mut config = Map::new();
    config.insert("tool_name".into(), json!(descriptor.name));
    config.insert("tool_provider".into(), json!(bound.provider.name));
    config.insert(
        "tool_provider_type".into(),
        json!(bound.provider.kind.as_str()),
    );
    config.insert(
        "tool_parameters".into(),
        Value::Object(bound.preset.clone()),
    );
    config
}

/// Parses the model's argument text, applies presets (they win) and validates the result.
pub(super) fn prepare_arguments(
    bound: &Bound,
    arguments: &str,
) -> Result<Map<String, Value>, String> {
    let mut args = parse_arguments(arguments)?;
    for (key, value) in &bound.preset {
        args.insert(key.clone(), value.clone());
    }
    super::nulls::drop_optional_nulls(&bound.tool.tool.descriptor().parameters, &mut args);
    let instance = Value::Object(args);
    let validator = bound
        .tool
        .schema
        .validator()
        .map_err(|err| format!("the tool's schema {err}"))?;
    let problems: Vec<String> = validator
        .iter_errors(&instance)
        .map(|err| describe_violation(&err.instance_path().to_string(), &err.to_string()))
        .collect();
    if !problems.is_empty() {
        return Err(problems.join("; "));
    }
    match instance {
        Value::Object(args) => Ok(args),
        other @ (Value::Null
        | Value::Bool(_)
        | Value::Number(_)
        | Value::String(_)
        | Value::Array(_)) => Err(format!("arguments must be a JSON object, got {other}")),
    }
}

fn parse_arguments(arguments: &str) -> Result<Map<String, Value>, String> {
    if arguments.trim().is_empty() {
        return Ok(Map::new());
    }
    match serde_json::from_str::<Value>(arguments) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(other) => Err(format!("arguments must be a JSON object, got {other}")),
        Err(err) => Err(format!("arguments are not valid JSON ({err})")),
    }
}

/// `"/a/0/b"` and a message become `a.0.b: message`, naming the field the way people read it.
fn describe_violation(pointer: &str, message: &str) -> String {
    let field = pointer.trim_start_matches('/').replace('/', ".");
    if field.is_empty() {
        message.to_owned()
    } else {
        format!("{field}: {message}")
    }
}

/// The schema without the properties that presets fill in.
fn hide_presets(schema: &Value, preset: &Map<String, Value>) -> Value {
    let mut schema = schema.clone();
    if preset.is_empty() {
        return schema;
    }
    if let Some(properties) = schema.get_mut("properties").and_then(Value::as_object_mut) {
        properties.retain(|key, _| !preset.contains_key(key));
    }
    if let Some(required) = schema.get_mut("required").and_then(Value::as_array_mut) {
        required.retain(|key| key.as_str().is_none_or(|k| !preset.contains_key(k)));
    }
    schema
}

#[cfg(test)]
mod tests;
