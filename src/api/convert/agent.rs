//! Stored agents ↔ protobuf: agents and versions in both directions (a version reads
//! back as the inline config `Run` accepts).

use tonic::Status;

use super::json::json_to_struct;
use super::run::{agent_spec, client_tool};
use super::scalar::timestamp;
use crate::api::status::invalid;
use crate::domain::{AgentRecord, AgentVersionRecord, ConversationPolicy, StrategyKind};
use crate::pb;
use crate::runner::{
    AgentDefinition, AgentSpec, ModelMode, ModelSpec, OutputFallback, ReasoningMode,
};
use crate::tools::{ClientToolSpec, ToolRef};

/// A version's definition from a request's `config` and `client_tools`.
pub fn definition(
    config: Option<pb::AgentConfig>,
    client_tools: Vec<pb::ClientTool>,
) -> Result<AgentDefinition, Status> {
    let config = config.ok_or_else(|| invalid("config", "is required"))?;
    let agent = agent_spec(config).map_err(|status| {
        // The inline agent's fields are named `agent.…`; here they sit under `config`.
        match status.message().strip_prefix("agent.") {
            Some(rest) => Status::new(status.code(), format!("config.{rest}")),
            None => status,
        }
    })?;
    Ok(AgentDefinition {
        agent,
        client_tools: client_tools.into_iter().map(client_tool).collect(),
    })
}

/// An agent as the API shows it.
pub fn agent_pb(record: AgentRecord) -> pb::Agent {
    let aliases = record.all_aliases();
    let AgentRecord {
        id,
        name,
        description,
        labels,
        latest_version,
        aliases: _,
        created_at,
        updated_at,
    } = record;
    pb::Agent {
        id,
        name,
        description,
        labels,
        latest_version,
        aliases,
        created_at: Some(timestamp(created_at)),
        updated_at: Some(timestamp(updated_at)),
    }
}

/// A version as the API shows it: its config in the form `Run` accepts.
pub fn version_pb(record: AgentVersionRecord, definition: AgentDefinition) -> pb::AgentVersion {
    let (config, client_tools) = export(definition);
    pb::AgentVersion {
        agent_id: record.agent_id,
        version: record.version,
        config: Some(config),
        client_tools,
        created_at: Some(timestamp(record.created_at)),
    }
}

/// A definition as the inline config and client tools it was made from.
pub fn export(definition: AgentDefinition) -> (pb::AgentConfig, Vec<pb::ClientTool>) {
    let AgentDefinition {
        agent,
        client_tools,
    } = definition;
    (
        config_pb(agent),
        client_tools.into_iter().map(client_tool_pb).collect(),
    )
}

fn config_pb(agent: AgentSpec) -> pb::AgentConfig {
    let AgentSpec {
        model,
        strategy,
        max_iteration,
        instruction,
        tools,
        react_prompt,
        max_history_turns,
        output,
        keep_tool_choice,
        sub_agents,
        budget,
        reasoning,
        conversation_policy,
    } = agent;
    let (output_schema, output_fallback) = match output {
        Some(output) => (
            output.schema.as_object().map(json_to_struct),
            match output.fallback {
                OutputFallback::Text => pb::OutputFallback::Text,
                OutputFallback::Error => pb::OutputFallback::Error,
            },
        ),
        None => (None, pb::OutputFallback::Unspecified),
    };
    pb::AgentConfig {
        model: Some(model_pb(model)),
        strategy: match strategy {
            None => pb::Strategy::Unspecified,
            Some(StrategyKind::FunctionCalling) => pb::Strategy::FunctionCalling,
            Some(StrategyKind::ChainOfThought) => pb::Strategy::ChainOfThought,
        }
        .into(),
        max_iteration,
        instruction,
        tools: tools.into_iter().map(tool_pb).collect(),
        react_prompt,
        memory: (max_history_turns > 0).then_some(pb::MemoryConfig {
            max_turns: max_history_turns,
        }),
        output_schema,
        output_fallback: output_fallback.into(),
        keep_tool_choice,
        sub_agents: sub_agents
            .into_iter()
            .map(|sub| pb::AgentRef {
                agent_id: sub.agent_id,
                version: sub.version,
                alias: sub.alias,
            })
            .collect(),
        budget: super::budget::budget_pb(budget),
        reasoning: match reasoning {
            ReasoningMode::Off => pb::Reasoning::Unspecified,
            ReasoningMode::Stream => pb::Reasoning::Stream,
            ReasoningMode::Keep => pb::Reasoning::Keep,
        }
        .into(),
        conversation_policy: match conversation_policy {
            None => pb::ConversationPolicy::Unspecified,
            Some(ConversationPolicy::Reject) => pb::ConversationPolicy::Reject,
            Some(ConversationPolicy::Parallel) => pb::ConversationPolicy::Parallel,
            Some(ConversationPolicy::Enqueue) => pb::ConversationPolicy::Enqueue,
            Some(ConversationPolicy::Interrupt) => pb::ConversationPolicy::Interrupt,
            Some(ConversationPolicy::Rollback) => pb::ConversationPolicy::Rollback,
            Some(ConversationPolicy::Steer) => pb::ConversationPolicy::Steer,
        }
        .into(),
    }
}

fn model_pb(model: ModelSpec) -> pb::ModelConfig {
    let ModelSpec {
        provider,
        name,
        mode,
        parameters,
        stop,
        fallbacks,
    } = model;
    pb::ModelConfig {
        provider,
        name,
        mode: match mode {
            ModelMode::Chat => pb::ModelMode::Chat,
            ModelMode::Completion => pb::ModelMode::Completion,
        }
        .into(),
        parameters: (!parameters.is_empty()).then(|| json_to_struct(&parameters)),
        stop,
        fallbacks: fallbacks
            .into_iter()
            .map(|fallback| pb::ModelRef {
                provider: fallback.provider,
                name: fallback.name,
            })
            .collect(),
    }
}

fn tool_pb(tool: ToolRef) -> pb::AgentTool {
    let ToolRef {
        provider,
        name,
        preset,
        require_approval,
    } = tool;
    pb::AgentTool {
        provider,
        name,
        parameters: (!preset.is_empty()).then(|| json_to_struct(&preset)),
        require_approval,
    }
}

fn client_tool_pb(tool: ClientToolSpec) -> pb::ClientTool {
    let ClientToolSpec {
        name,
        description,
        parameters,
        require_approval,
    } = tool;
    pb::ClientTool {
        name,
        description,
        parameters_schema: parameters.as_object().map(json_to_struct),
        require_approval,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_version_reads_back_as_the_config_it_was_made_from() {
        let config = pb::AgentConfig {
            model: Some(pb::ModelConfig {
                provider: "openai".into(),
                name: "gpt".into(),
                mode: pb::ModelMode::Chat.into(),
                parameters: Some(json_to_struct(
                    serde_json::json!({"temperature": 0.5}).as_object().unwrap(),
                )),
                stop: vec!["END".into()],
                fallbacks: vec![pb::ModelRef {
                    provider: "anthropic".into(),
                    name: "claude".into(),
                }],
            }),
            strategy: pb::Strategy::ChainOfThought.into(),
            max_iteration: 4,
            instruction: "Help {{name}}.".into(),
            tools: vec![pb::AgentTool {
                provider: "time".into(),
                name: "current_time".into(),
                parameters: Some(json_to_struct(
                    serde_json::json!({"timezone": "UTC"}).as_object().unwrap(),
                )),
                require_approval: true,
            }],
            react_prompt: String::new(),
            memory: Some(pb::MemoryConfig { max_turns: 3 }),
            output_schema: Some(json_to_struct(
                serde_json::json!({"type": "object"}).as_object().unwrap(),
            )),
            output_fallback: pb::OutputFallback::Error.into(),
            keep_tool_choice: true,
            sub_agents: vec![pb::AgentRef {
                agent_id: "researcher".into(),
                version: 0,
                alias: "prod".into(),
            }],
            budget: Some(pb::Budget {
                max_tokens: Some(1000),
                max_cost: "0.5".into(),
                max_seconds: None,
                max_tool_calls: Some(3),
                on_exhausted: pb::OnExhausted::Error.into(),
            }),
            reasoning: pb::Reasoning::Keep.into(),
            conversation_policy: pb::ConversationPolicy::Reject.into(),
        };
        let tools = vec![pb::ClientTool {
            name: "lookup".into(),
            description: "Looks up.".into(),
            parameters_schema: Some(json_to_struct(
                serde_json::json!({"type": "object", "properties": {}})
                    .as_object()
                    .unwrap(),
            )),
            require_approval: false,
        }];
        let definition = definition(Some(config.clone()), tools.clone()).unwrap();
        assert_eq!(export(definition), (config, tools));
    }
}
