//! Tools the caller of a run executes itself: they join the run's [`ToolSet`] under their own
//! pseudo-provider, their calls are checked like any other, and their results come back
//! from the caller instead of from a tool.

use std::sync::Arc;

use serde_json::{Map, Value};

use super::schema::PatternBudget;
use super::toolset::RunBy;
use super::{ErasedTool, ToolDescriptor, ToolError, ToolOutput};
use super::{ToolSet, ToolSetError};

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

/// Adds the caller's own tools to `set`; their names must not clash with the run's other
/// tools, and their schemas' patterns count against the request's `budget`.
pub fn add_client_tools(
    set: &mut ToolSet,
    specs: &[ClientToolSpec],
    budget: &mut PatternBudget,
) -> Result<(), ToolSetError> {
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
        if set.has(&spec.name) || specs[..index].iter().any(|s| s.name == spec.name) {
            let reason = format!(
                "tool name {:?} is already used by another tool of the run",
                spec.name
            );
            return Err(ToolSetError::ClientName { index, reason });
        }
        let tool = Arc::new(ClientTool {
            descriptor: ToolDescriptor {
                provider: CLIENT_PROVIDER.to_owned(),
                name: spec.name.clone(),
                description: spec.description.clone(),
                parameters: spec.parameters.clone(),
                ..ToolDescriptor::default()
            },
        }) as Arc<dyn ErasedTool>;
        let approval = spec.require_approval;
        tools.push((tool, RunBy::Caller { approval }));
    }
    set.add_stand_ins(CLIENT_PROVIDER, tools, budget)
        .map_err(|err| {
            let index = specs
                .iter()
                .position(|s| err.to_string().contains(&s.name))
                .unwrap_or(0);
            ToolSetError::ClientSchema {
                index,
                reason: err.to_string(),
            }
        })
}
