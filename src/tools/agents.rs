//! Stored agents offered to a model as tools: one string argument, `input`. The loop runs
//! their calls as sub-agent runs; the set only describes them.

use std::sync::Arc;

use serde_json::{Map, Value};

use super::schema::PatternBudget;
use super::toolset::RunBy;
use super::{ErasedTool, ToolDescriptor, ToolError, ToolOutput, ToolSet, ToolSetError};

/// Name of the pseudo-provider of sub-agent tools.
pub const AGENT_PROVIDER: &str = "agents";

/// A stored agent as a tool: its id is the tool's name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubAgentTool {
    /// The agent's id.
    pub name: String,
    /// What the model reads: the agent's description, else its name.
    pub description: String,
}

/// Stands in for a sub-agent in the set; the loop starts its runs.
struct AgentTool {
    descriptor: ToolDescriptor,
}

#[async_trait::async_trait]
impl ErasedTool for AgentTool {
    fn descriptor(&self) -> &ToolDescriptor {
        &self.descriptor
    }

    async fn call(&self, _arguments: Map<String, Value>) -> Result<ToolOutput, ToolError> {
        Err(ToolError::Failed(
            "sub-agents are run by the agent loop".to_owned(),
        ))
    }
}

/// The schema every sub-agent tool takes.
fn input_schema() -> Value {
    serde_json::json!({
        "type": "object",
        "properties": {
            "input": {"type": "string", "description": "What to ask the agent, in full."}
        },
        "required": ["input"]
    })
}

/// Adds stored agents to `set` as tools; a name another tool of the run has is refused.
pub fn add_agent_tools(
    set: &mut ToolSet,
    agents: &[SubAgentTool],
    budget: &mut PatternBudget,
) -> Result<(), ToolSetError> {
    let mut tools = Vec::new();
    for (index, agent) in agents.iter().enumerate() {
        if set.has(&agent.name) {
            return Err(ToolSetError::SubAgentName {
                index,
                reason: format!(
                    "sub-agent {:?} has the name of another tool of the run",
                    agent.name
                ),
            });
        }
        let tool = Arc::new(AgentTool {
            descriptor: ToolDescriptor {
                provider: AGENT_PROVIDER.to_owned(),
                name: agent.name.clone(),
                description: agent.description.clone(),
                parameters: input_schema(),
                ..ToolDescriptor::default()
            },
        }) as Arc<dyn ErasedTool>;
        tools.push((tool, RunBy::Loop));
    }
    set.add_stand_ins(AGENT_PROVIDER, tools, budget)
        .map_err(|err| ToolSetError::ClientSchema {
            index: 0,
            reason: err.to_string(),
        })
}
