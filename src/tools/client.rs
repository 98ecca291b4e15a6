//! Tools the caller of a run executes itself: they join the run's [`ToolSet`] under their own
//! pseudo-provider, their calls are checked like any other, and their results come back
//! from the caller instead of from a tool.

use std::sync::Arc;

use serde_json::{Map, Value};

use super::observation;
use super::schema::PatternBudget;
use super::toolset::{tool_config, Bound};
use super::{
    ErasedTool, Invocation, Provider, ProviderKind, ToolDescriptor, ToolError, ToolOutput,
};
use super::{ToolSet, ToolSetError};
use crate::domain::{CallOutcome, ToolInvokeMeta};

/// A tool the caller of a run executes itself.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ClientToolSpec {
    /// Name the model calls it by.
    pub name: String,
    /// What it does, for the model.
    #[serde(default)]
    pub description: String,
    /// JSON Schema of its arguments.
    #[serde(default = "empty_object_schema")]
    pub parameters: Value,
    /// Calls wait for a person's approval before they go to the caller.
    #[serde(default)]
    pub require_approval: bool,
}

fn empty_object_schema() -> Value {
    serde_json::json!({"type": "object", "properties": {}})
}

/// Stands in for a client tool in the set; the loop hands its calls to the caller.
struct ClientTool {
    descriptor: ToolDescriptor,
}

#[async_trait::async_trait]
impl ErasedTool for ClientTool {
    fn descriptor(&self) -> &ToolDescriptor {
        &self.descriptor
    }

    async fn call(&self, _arguments: Map<String, Value>) -> Result<ToolOutput, ToolError> {
        Err(ToolError::Failed(
            "client tools are run by the caller".to_owned(),
        ))
    }
}

/// Name of the pseudo-provider of client tools.
pub const CLIENT_PROVIDER: &str = "client";

impl ToolSet {
    /// Adds the caller's own tools; their names must not clash with the run's other tools,
    /// and their schemas' patterns count against the request's `budget`.
    pub fn add_client_tools(
        &mut self,
        specs: &[ClientToolSpec],
        budget: &mut PatternBudget,
    ) -> Result<(), ToolSetError> {
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
            if self.has(&spec.name) || specs[..index].iter().any(|s| s.name == spec.name) {
                let reason = format!(
                    "tool name {:?} is already used by another tool of the run",
                    spec.name
                );
                return Err(ToolSetError::ClientName { index, reason });
            }
            tools.push(Arc::new(ClientTool {
                descriptor: ToolDescriptor {
                    provider: CLIENT_PROVIDER.to_owned(),
                    name: spec.name.clone(),
                    description: spec.description.clone(),
                    parameters: spec.parameters.clone(),
                    ..ToolDescriptor::default()
                },
            }) as Arc<dyn ErasedTool>);
        }
        let provider = Provider::within(CLIENT_PROVIDER, ProviderKind::Client, "", tools, budget)
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
                self.push(
                    &spec.name,
                    Bound {
                        provider: Arc::clone(&provider),
                        tool: tool.clone(),
                        preset: Map::new(),
                        client: true,
                        agent: false,
                        approval: spec.require_approval,
                    },
                );
            }
        }
        Ok(())
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
                CLIENT_PROVIDER.to_owned(),
                observation::invoke_error(&error),
                time_cost,
                config,
            ),
            None => Invocation {
                provider: CLIENT_PROVIDER.to_owned(),
                outcome: CallOutcome::Success,
                files: Vec::new(),
                resources: super::records::resources_in(&output),
                observation: output,
                meta: ToolInvokeMeta {
                    time_cost,
                    error: None,
                    tool_config: config,
                    usage: None,
                    tool_calls: 0,
                },
            },
        }
    }
}
