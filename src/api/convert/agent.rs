//! Stored agents ↔ protobuf: references and overrides of a run, versions in both
//! directions (a version reads back as the inline config `Run` accepts).

use tonic::Status;

use super::json::json_to_struct;
use super::run::{agent_spec, client_tool};
use super::timestamp;
use crate::api::status::invalid;
use crate::domain::agent::{check_slug, LATEST};
use crate::domain::{AgentRecord, AgentVersionRecord, RunOverrides, StrategyKind, VersionPick};
use crate::pb;
use crate::runner::{
    AgentDefinition, AgentReference, AgentSpec, ModelMode, ModelSpec, OutputFallback,
    MAX_ITERATION_LIMIT,
};
use crate::tools::{ClientToolSpec, ToolRef};

/// Longest instruction a run's overrides append.
pub const MAX_ADDITIONAL_INSTRUCTION: usize = 64 * 1024;

/// The stored agent a run names, with its overrides, checked field by field.
pub fn reference(
    agent_ref: pb::AgentRef,
    overrides: Option<pb::RunOverrides>,
) -> Result<AgentReference, Status> {
    let pb::AgentRef {
        agent_id,
        version,
        alias,
    } = agent_ref;
    check_slug("agent_ref.agent_id", &agent_id).map_err(crate::api::status::from_error)?;
    let pick = pick("agent_ref.alias", version, alias)?;
    Ok(AgentReference {
        agent_id,
        pick,
        overrides: run_overrides(overrides.unwrap_or_default())?,
    })
}

/// A version by number or alias (the field `alias_field`); neither is `latest`.
pub fn pick(alias_field: &str, version: u32, alias: String) -> Result<VersionPick, Status> {
    match (version, alias.is_empty()) {
        (0, true) => Ok(VersionPick::Latest),
        (0, false) => {
            check_slug(alias_field, &alias).map_err(crate::api::status::from_error)?;
            Ok(if alias == LATEST {
                VersionPick::Latest
            } else {
                VersionPick::Alias(alias)
            })
        }
        (n, true) => Ok(VersionPick::Number(n)),
        (_, false) => Err(invalid(
            alias_field,
            "must not be given with a version: give one of the two",
        )),
    }
}

fn run_overrides(overrides: pb::RunOverrides) -> Result<RunOverrides, Status> {
    let pb::RunOverrides {
        model,
        max_iteration,
        additional_instruction,
    } = overrides;
    let model = match model {
        None => None,
        Some(pb::ModelRef { provider, name }) if provider.is_empty() || name.is_empty() => {
            return Err(invalid(
                "overrides.model",
                "needs both a provider and a name",
            ))
        }
        Some(pb::ModelRef { provider, name }) => Some((provider, name)),
    };
    if max_iteration > MAX_ITERATION_LIMIT {
        return Err(invalid(
            "overrides.max_iteration",
            &format!("must be between 1 and {MAX_ITERATION_LIMIT}"),
        ));
    }
    if additional_instruction.len() > MAX_ADDITIONAL_INSTRUCTION {
        return Err(invalid(
            "overrides.additional_instruction",
            &format!("must be at most {MAX_ADDITIONAL_INSTRUCTION} bytes"),
        ));
    }
    Ok(RunOverrides {
        model,
        max_iteration,
        additional_instruction,
    })
}

/// The overrides a run applied, as a message shows them.
pub fn overrides_pb(overrides: RunOverrides) -> pb::RunOverrides {
    let RunOverrides {
        model,
        max_iteration,
        additional_instruction,
    } = overrides;
    pb::RunOverrides {
        model: model.map(|(provider, name)| pb::ModelRef { provider, name }),
        max_iteration,
        additional_instruction,
    }
}

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

    #[test]
    fn a_reference_names_its_bad_fields() {
        let bad = |agent_ref: pb::AgentRef, overrides: Option<pb::RunOverrides>| {
            reference(agent_ref, overrides)
                .unwrap_err()
                .message()
                .to_owned()
        };
        let id = |id: &str| pb::AgentRef {
            agent_id: id.into(),
            ..Default::default()
        };
        assert_eq!(
            bad(id("Bad_Id"), None),
            "agent_ref.agent_id must be 1 to 63 characters of a-z, 0-9 and -"
        );
        assert_eq!(
            bad(
                pb::AgentRef {
                    version: 2,
                    alias: "prod".into(),
                    ..id("helper")
                },
                None
            ),
            "agent_ref.alias must not be given with a version: give one of the two"
        );
        assert_eq!(
            bad(
                id("helper"),
                Some(pb::RunOverrides {
                    max_iteration: 100,
                    ..Default::default()
                })
            ),
            "overrides.max_iteration must be between 1 and 99"
        );
        assert_eq!(
            bad(
                id("helper"),
                Some(pb::RunOverrides {
                    additional_instruction: "x".repeat(MAX_ADDITIONAL_INSTRUCTION + 1),
                    ..Default::default()
                })
            ),
            "overrides.additional_instruction must be at most 65536 bytes"
        );
    }
}
