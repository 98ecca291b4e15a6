//! Runs one tool call the way an agent needs it: never failing, always with an observation.
//!
//! The engine looks the tool up, parses the model's argument text, lays preset parameters
//! over it, validates the result against the tool's JSON Schema, runs the tool within a
//! timeout and measures it. Every failure becomes observation text plus `meta.error`, so
//! the model can correct itself and the run goes on.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use serde_json::{json, Map, Value};

use super::registry::{Provider, RegisteredTool, ToolSnapshot};
use crate::domain::{ErrorKind, ToolInvokeMeta};

/// A tool named in a run's configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolRef {
    /// Provider name.
    pub provider: String,
    /// Tool name.
    pub name: String,
    /// Values that override the model's arguments and are hidden from it.
    pub preset: Map<String, Value>,
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

struct Bound {
    provider: Arc<Provider>,
    tool: RegisteredTool,
    preset: Map<String, Value>,
    /// Run by the caller, not here.
    client: bool,
}

/// A tool the caller of a run executes itself.
#[derive(Debug, Clone, PartialEq)]
pub struct ClientToolSpec {
    /// Name the model calls it by.
    pub name: String,
    /// What it does, for the model.
    pub description: String,
    /// JSON Schema of its arguments.
    pub parameters: Value,
}

/// Stands in for a client tool in the set; the loop hands its calls to the caller.
struct ClientTool {
    descriptor: super::ToolDescriptor,
}

#[async_trait::async_trait]
impl super::ErasedTool for ClientTool {
    fn descriptor(&self) -> &super::ToolDescriptor {
        &self.descriptor
    }

    async fn call(
        &self,
        _arguments: Map<String, Value>,
    ) -> Result<super::ToolOutput, super::ToolError> {
        Err(super::ToolError::Failed(
            "client tools are run by the caller".to_owned(),
        ))
    }
}

/// Name of the pseudo-provider of client tools.
pub const CLIENT_PROVIDER: &str = "client";

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
            let tool =
                provider
                    .tools
                    .get(&tool_ref.name)
                    .ok_or_else(|| ToolSetError::UnknownTool {
                        index,
                        provider: tool_ref.provider.clone(),
                        name: tool_ref.name.clone(),
                    })?;
            if set.by_name.contains_key(&tool_ref.name) {
                return Err(ToolSetError::DuplicateName {
                    index,
                    name: tool_ref.name.clone(),
                });
            }
            set.by_name.insert(tool_ref.name.clone(), set.tools.len());
            set.tools.push(Bound {
                provider: Arc::clone(provider),
                tool: tool.clone(),
                preset: tool_ref.preset.clone(),
                client: false,
            });
        }
        Ok(set)
    }

    /// Adds the caller's own tools; their names must not clash with the run's other tools.
    pub fn add_client_tools(&mut self, specs: &[ClientToolSpec]) -> Result<(), ToolSetError> {
        if specs.is_empty() {
            return Ok(());
        }
        let mut tools = Vec::new();
        for (index, spec) in specs.iter().enumerate() {
            let valid = !spec.name.is_empty()
                && spec.name.len() <= 64
                && spec
                    .name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
            if !valid {
                let reason = "must be 1 to 64 letters, digits, `_` or `-`".to_owned();
                return Err(ToolSetError::ClientName { index, reason });
            }
            if self.by_name.contains_key(&spec.name)
                || specs[..index].iter().any(|s| s.name == spec.name)
            {
                let reason = format!(
                    "tool name {:?} is already used by another tool of the run",
                    spec.name
                );
                return Err(ToolSetError::ClientName { index, reason });
            }
            tools.push(Arc::new(ClientTool {
                descriptor: super::ToolDescriptor {
                    provider: CLIENT_PROVIDER.to_owned(),
                    name: spec.name.clone(),
                    description: spec.description.clone(),
                    parameters: spec.parameters.clone(),
                },
            }) as Arc<dyn super::ErasedTool>);
        }
        let provider = Provider::new(CLIENT_PROVIDER, super::ProviderKind::Client, "", tools)
            .map_err(|err| {
                let index = specs
                    .iter()
                    .position(|s| err.to_string().contains(&s.name))
                    .unwrap_or(0);
                ToolSetError::ClientSchema {
                    index,
                    reason: err.to_string(),
                }
            })?;
        let provider = Arc::new(provider);
        for spec in specs {
            if let Some(tool) = provider.tools.get(&spec.name) {
                self.by_name.insert(spec.name.clone(), self.tools.len());
                self.tools.push(Bound {
                    provider: Arc::clone(&provider),
                    tool: tool.clone(),
                    preset: Map::new(),
                    client: true,
                });
            }
        }
        Ok(())
    }

    /// Whether the caller runs the tool the model calls `name`.
    pub fn is_client(&self, name: &str) -> bool {
        self.by_name
            .get(name)
            .is_some_and(|i| self.tools[*i].client)
    }

    /// Checks a client tool call's arguments as the engine checks any call's; the failure
    /// is the observation the model gets instead of asking the caller.
    pub fn check_client_call(&self, name: &str, arguments: &str) -> Result<(), Box<Invocation>> {
        let Some(bound) = self.by_name.get(name).map(|i| &self.tools[*i]) else {
            return Err(Box::new(failure(
                String::new(),
                format!("there is not a tool named {name}"),
                0.0,
                Map::new(),
            )));
        };
        prepare_arguments(bound, arguments)
            .map(drop)
            .map_err(|reason| {
                let text = format!(
                    "tool parameters validation error: {reason}, please check your tool parameters"
                );
                Box::new(failure(
                    bound.provider.name.clone(),
                    text,
                    0.0,
                    tool_config(bound),
                ))
            })
    }

    /// The outcome of a client tool call from what the caller submitted.
    pub fn client_result(
        &self,
        name: &str,
        output: String,
        error: Option<String>,
        time_cost: f64,
    ) -> Invocation {
        let config = self
            .by_name
            .get(name)
            .map(|i| tool_config(&self.tools[*i]))
            .unwrap_or_default();
        match error.filter(|e| !e.is_empty()) {
            Some(error) => failure(
                CLIENT_PROVIDER.to_owned(),
                format!("tool invoke error: {error}"),
                time_cost,
                config,
            ),
            None => Invocation {
                provider: CLIENT_PROVIDER.to_owned(),
                files: Vec::new(),
                observation: output,
                meta: ToolInvokeMeta {
                    time_cost,
                    error: None,
                    tool_config: config,
                },
            },
        }
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

    /// Provider of the tool the model calls `name`, if the run has it.
    pub fn provider_of(&self, name: &str) -> Option<&str> {
        self.by_name
            .get(name)
            .map(|i| self.tools[*i].provider.name.as_str())
    }

    /// Runs the call `name(arguments)`, within `timeout`.
    ///
    /// # Cancel safety
    /// Dropping the future drops the tool's future; the caller decides what to record.
    pub async fn invoke(&self, name: &str, arguments: &str, timeout: Duration) -> Invocation {
        let Some(bound) = self.by_name.get(name).map(|i| &self.tools[*i]) else {
            return failure(
                String::new(),
                format!("there is not a tool named {name}"),
                0.0,
                Map::new(),
            );
        };
        let config = tool_config(bound);
        let provider = bound.provider.name.clone();
        let args = match prepare_arguments(bound, arguments) {
            Ok(args) => args,
            Err(reason) => {
                let text = format!(
                    "tool parameters validation error: {reason}, please check your tool parameters"
                );
                return failure(provider, text, 0.0, config);
            }
        };
        let started = Instant::now();
        let result = tokio::time::timeout(timeout, bound.tool.tool.call(args)).await;
        let time_cost = started.elapsed().as_secs_f64();
        match result {
            Ok(Ok(output)) => Invocation {
                provider,
                files: output.files,
                observation: output.text,
                meta: ToolInvokeMeta {
                    time_cost,
                    error: None,
                    tool_config: config,
                },
            },
            Ok(Err(err)) => failure(
                provider,
                format!("tool invoke error: {err}"),
                time_cost,
                config,
            ),
            Err(_) => failure(
                provider,
                format!(
                    "tool invoke error: the tool did not finish within {}s",
                    timeout.as_secs_f64()
                ),
                time_cost,
                config,
            ),
        }
    }
}

fn failure(
    provider: String,
    text: String,
    time_cost: f64,
    tool_config: Map<String, Value>,
) -> Invocation {
    Invocation {
        provider,
        files: Vec::new(),
        meta: ToolInvokeMeta {
            time_cost,
            error: Some(text.clone()),
            tool_config,
        },
        observation: text,
    }
}

fn tool_config(bound: &Bound) -> Map<String, Value> {
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
fn prepare_arguments(bound: &Bound, arguments: &str) -> Result<Map<String, Value>, String> {
    let mut args = parse_arguments(arguments)?;
    for (key, value) in &bound.preset {
        args.insert(key.clone(), value.clone());
    }
    let instance = Value::Object(args);
    let problems: Vec<String> = bound
        .tool
        .validator
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
