//! `RunRequest` → [`RunSpec`], naming the field of every problem.

use std::time::Duration;

use prost::Message as _;
use sha2::{Digest, Sha256};
use tonic::Status;

use super::json::struct_to_json;
use super::scalar::parse_id;
use crate::api::status::invalid;
use crate::domain::{ConversationPolicy, StrategyKind, Tenant};
use crate::pb;
use crate::runner::{
    AgentSpec, Idempotency, ImageSource, InputImage, ModelMode, ModelRef, ModelSpec,
    OutputFallback, OutputSpec, ReasoningMode, RunSpec, SubAgentRef,
};
use crate::telemetry::TraceParent;
use crate::tools::{ClientToolSpec, ToolRef};

/// Converts and validates a run request for `tenant`, with the caller's deadline.
pub fn run_spec(
    tenant: Tenant,
    request: pb::RunRequest,
    deadline: Option<Duration>,
) -> Result<RunSpec, Status> {
    let idempotency = idempotency(&request);
    let pb::RunRequest {
        conversation_id,
        query,
        inputs,
        files,
        agent,
        user,
        idempotency_key: _,
        client_tools,
        // How the transport treats a dropped stream; it does not change what runs, and is
        // kept with the run.
        cancel_on_disconnect,
        agent_ref,
        overrides,
        conversation_policy,
    } = request;
    let conversation_policy = policy("conversation_policy", conversation_policy)?;
    let conversation_id = if conversation_id.is_empty() {
        None
    } else {
        Some(parse_id("conversation_id", &conversation_id)?)
    };
    let reference = match (agent_ref, overrides) {
        (Some(agent_ref), overrides) => Some(super::reference::reference(agent_ref, overrides)?),
        (None, Some(_)) => return Err(invalid("overrides", "applies only with agent_ref")),
        (None, None) => None,
    };
    let agent = match (agent, &reference) {
        (Some(_), Some(_)) => {
            return Err(invalid(
                "agent",
                "must not be given with agent_ref: give one of the two",
            ))
        }
        (Some(agent), None) => agent_spec(agent)?,
        (None, Some(_)) => AgentSpec::default(),
        (None, None) => return Err(invalid("agent", "is required (or agent_ref)")),
    };
    let stored = reference.is_some();
    let spec = RunSpec {
        tenant,
        conversation_id,
        query,
        inputs: inputs.into_iter().collect(),
        user,
        agent,
        files: files
            .into_iter()
            .enumerate()
            .map(|(index, file)| input_image(index, file))
            .collect::<Result<_, _>>()?,
        idempotency,
        deadline,
        client_tools: client_tools.into_iter().map(client_tool).collect(),
        trace_parent: TraceParent::default(),
        cancel_on_disconnect,
        limits: Default::default(),
        reference,
        pinned: None,
        parent: None,
        lineage: Vec::new(),
        message_id: None,
        tree: None,
        conversation_policy,
    };
    if stored {
        // The stored agent is read and the whole spec checked as the run starts.
        return Ok(spec);
    }
    spec.validated().map_err(crate::api::status::from_error)
}

/// The key with a digest of everything else in the request that decides what runs.
/// Maps are ordered (see `build.rs`), so equal requests encode to equal bytes.
fn idempotency(request: &pb::RunRequest) -> Option<Idempotency> {
    if request.idempotency_key.is_empty() {
        return None;
    }
    let mut canonical = request.clone();
    canonical.idempotency_key.clear();
    canonical.cancel_on_disconnect = false;
    let digest = Sha256::digest(canonical.encode_to_vec());
    Some(Idempotency {
        key: request.idempotency_key.clone(),
        fingerprint: digest.iter().map(|byte| format!("{byte:02x}")).collect(),
    })
}

/// Largest inline image accepted.
const MAX_IMAGE_BYTES: usize = 20 * 1024 * 1024;

fn input_image(index: usize, file: pb::InputFile) -> Result<InputImage, Status> {
    let pb::InputFile {
        source,
        mime_type,
        detail,
    } = file;
    let field = |name: &str| format!("files[{index}].{name}");
    let detail = match pb::ImageDetail::try_from(detail) {
        Ok(pb::ImageDetail::Unspecified | pb::ImageDetail::Low) => "low",
        Ok(pb::ImageDetail::High) => "high",
        Err(_) => {
            return Err(invalid(
                &field("detail"),
                &format!("has unknown value {detail}"),
            ))
        }
    };
    if !mime_type.is_empty() && !mime_type.starts_with("image/") {
        return Err(invalid(
            &field("mime_type"),
            "must be an image type; only images are supported",
        ));
    }
    let source = match source {
        Some(pb::input_file::Source::Url(url)) => {
            let known = ["http://", "https://", "data:image/"]
                .iter()
                .any(|p| url.starts_with(p));
            if !known {
                return Err(invalid(
                    &field("url"),
                    "must be an http(s) or data:image/ URL",
                ));
            }
            ImageSource::Url(url)
        }
        Some(pb::input_file::Source::Data(bytes)) => {
            if mime_type.is_empty() {
                return Err(invalid(&field("mime_type"), "is required with inline data"));
            }
            if bytes.len() > MAX_IMAGE_BYTES {
                return Err(invalid(&field("data"), "is larger than 20 MiB"));
            }
            ImageSource::Data { mime_type, bytes }
        }
        None => return Err(invalid(&format!("files[{index}]"), "needs a url or data")),
    };
    Ok(InputImage {
        source,
        detail: detail.to_owned(),
    })
}

pub(super) fn client_tool(tool: pb::ClientTool) -> ClientToolSpec {
    let pb::ClientTool {
        name,
        description,
        parameters_schema,
        require_approval,
    } = tool;
    let parameters = parameters_schema.map_or_else(
        || serde_json::json!({"type": "object", "properties": {}}),
        |schema| serde_json::Value::Object(struct_to_json(schema)),
    );
    ClientToolSpec {
        name,
        description,
        parameters,
        require_approval,
    }
}

pub(super) fn agent_spec(agent: pb::AgentConfig) -> Result<AgentSpec, Status> {
    let pb::AgentConfig {
        model,
        strategy,
        max_iteration,
        instruction,
        tools,
        react_prompt,
        memory,
        output_schema,
        output_fallback,
        keep_tool_choice,
        sub_agents,
        budget,
        reasoning,
        conversation_policy,
    } = agent;
    let max_history_turns = memory.map_or(0, |pb::MemoryConfig { max_turns }| max_turns);
    let model = model.ok_or_else(|| invalid("agent.model", "is required"))?;
    Ok(AgentSpec {
        model: model_spec(model)?,
        strategy: strategy_kind(strategy)?,
        max_iteration,
        instruction,
        tools: tools.into_iter().map(tool_ref).collect(),
        react_prompt,
        max_history_turns,
        output: output_spec(output_schema, output_fallback)?,
        keep_tool_choice,
        sub_agents: sub_agents
            .into_iter()
            .map(
                |pb::AgentRef {
                     agent_id,
                     version,
                     alias,
                 }| SubAgentRef {
                    agent_id,
                    version,
                    alias,
                },
            )
            .collect(),
        budget: super::budget::run_budget(budget, "agent.budget")?,
        reasoning: reasoning_mode(reasoning)?,
        conversation_policy: policy("agent.conversation_policy", conversation_policy)?,
    })
}

/// A conversation policy, `None` when unset.
fn policy(field: &str, value: i32) -> Result<Option<ConversationPolicy>, Status> {
    match pb::ConversationPolicy::try_from(value) {
        Ok(pb::ConversationPolicy::Unspecified) => Ok(None),
        Ok(pb::ConversationPolicy::Reject) => Ok(Some(ConversationPolicy::Reject)),
        Ok(pb::ConversationPolicy::Parallel) => Ok(Some(ConversationPolicy::Parallel)),
        Ok(pb::ConversationPolicy::Enqueue) => Ok(Some(ConversationPolicy::Enqueue)),
        Ok(pb::ConversationPolicy::Interrupt) => Ok(Some(ConversationPolicy::Interrupt)),
        Ok(pb::ConversationPolicy::Rollback) => Ok(Some(ConversationPolicy::Rollback)),
        Ok(pb::ConversationPolicy::Steer) => Ok(Some(ConversationPolicy::Steer)),
        Err(_) => Err(invalid(field, &format!("has unknown value {value}"))),
    }
}

fn reasoning_mode(value: i32) -> Result<ReasoningMode, Status> {
    match pb::Reasoning::try_from(value) {
        Ok(pb::Reasoning::Unspecified | pb::Reasoning::Off) => Ok(ReasoningMode::Off),
        Ok(pb::Reasoning::Stream) => Ok(ReasoningMode::Stream),
        Ok(pb::Reasoning::Keep) => Ok(ReasoningMode::Keep),
        Err(_) => Err(invalid(
            "agent.reasoning",
            &format!("has unknown value {value}"),
        )),
    }
}

fn output_spec(
    schema: Option<prost_types::Struct>,
    fallback: i32,
) -> Result<Option<OutputSpec>, Status> {
    let fallback = match pb::OutputFallback::try_from(fallback) {
        Ok(pb::OutputFallback::Unspecified | pb::OutputFallback::Text) => OutputFallback::Text,
        Ok(pb::OutputFallback::Error) => OutputFallback::Error,
        Err(_) => {
            return Err(invalid(
                "agent.output_fallback",
                &format!("has unknown value {fallback}"),
            ))
        }
    };
    Ok(schema.map(|schema| OutputSpec {
        schema: serde_json::Value::Object(struct_to_json(schema)),
        fallback,
    }))
}

fn model_spec(model: pb::ModelConfig) -> Result<ModelSpec, Status> {
    let pb::ModelConfig {
        provider,
        name,
        mode,
        parameters,
        stop,
        fallbacks,
    } = model;
    let mode = match pb::ModelMode::try_from(mode) {
        Ok(pb::ModelMode::Unspecified | pb::ModelMode::Chat) => ModelMode::Chat,
        Ok(pb::ModelMode::Completion) => ModelMode::Completion,
        Err(_) => {
            return Err(invalid(
                "agent.model.mode",
                &format!("has unknown value {mode}"),
            ))
        }
    };
    Ok(ModelSpec {
        provider,
        name,
        mode,
        parameters: parameters.map(struct_to_json).unwrap_or_default(),
        stop,
        fallbacks: fallbacks
            .into_iter()
            .map(|pb::ModelRef { provider, name }| ModelRef { provider, name })
            .collect(),
    })
}

fn strategy_kind(value: i32) -> Result<Option<StrategyKind>, Status> {
    match pb::Strategy::try_from(value) {
        Ok(pb::Strategy::Unspecified) => Ok(None),
        Ok(pb::Strategy::FunctionCalling) => Ok(Some(StrategyKind::FunctionCalling)),
        Ok(pb::Strategy::ChainOfThought) => Ok(Some(StrategyKind::ChainOfThought)),
        Err(_) => Err(invalid(
            "agent.strategy",
            &format!("has unknown value {value}"),
        )),
    }
}

fn tool_ref(tool: pb::AgentTool) -> ToolRef {
    let pb::AgentTool {
        provider,
        name,
        parameters,
        require_approval,
    } = tool;
    ToolRef {
        provider,
        name,
        preset: parameters.map(struct_to_json).unwrap_or_default(),
        require_approval,
    }
}

#[cfg(test)]
mod tests {
    use tonic::Code;

    use super::*;

    fn request() -> pb::RunRequest {
        pb::RunRequest {
            query: "hi".into(),
            agent: Some(pb::AgentConfig {
                model: Some(pb::ModelConfig {
                    provider: "openai".into(),
                    name: "gpt".into(),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn error(mutate: impl FnOnce(&mut pb::RunRequest)) -> (Code, String) {
        let mut req = request();
        mutate(&mut req);
        let status = run_spec(Tenant::default_tenant(), req, None).unwrap_err();
        (status.code(), status.message().to_owned())
    }

    #[test]
    fn each_bad_field_is_named() {
        type Mutation = Box<dyn FnOnce(&mut pb::RunRequest)>;
        let cases: Vec<(Mutation, &str)> = vec![
            (Box::new(|r| r.query.clear()), "query must not be empty"),
            (
                Box::new(|r| r.agent = None),
                "agent is required (or agent_ref)",
            ),
            (
                Box::new(|r| {
                    r.agent_ref = Some(pb::AgentRef {
                        agent_id: "helper".into(),
                        ..Default::default()
                    })
                }),
                "agent must not be given with agent_ref: give one of the two",
            ),
            (
                Box::new(|r| r.overrides = Some(pb::RunOverrides::default())),
                "overrides applies only with agent_ref",
            ),
            (
                Box::new(|r| r.agent.as_mut().unwrap().model = None),
                "agent.model is required",
            ),
            (
                Box::new(|r| r.agent.as_mut().unwrap().max_iteration = 100),
                "agent.max_iteration must be between 1 and 99",
            ),
            (
                Box::new(|r| r.conversation_id = "nope".into()),
                "conversation_id is not a valid id: \"nope\"",
            ),
            (
                Box::new(|r| r.agent.as_mut().unwrap().strategy = 9),
                "agent.strategy has unknown value 9",
            ),
        ];
        for (mutate, message) in cases {
            assert_eq!(error(mutate), (Code::InvalidArgument, message.to_owned()));
        }
    }

    #[test]
    fn presets_and_parameters_arrive_as_json() {
        let mut req = request();
        let agent = req.agent.as_mut().unwrap();
        agent.tools.push(pb::AgentTool {
            provider: "time".into(),
            name: "current_time".into(),
            parameters: Some(crate::api::convert::json::json_to_struct(
                serde_json::json!({"timezone": "UTC"}).as_object().unwrap(),
            )),
            require_approval: true,
        });
        let spec = run_spec(Tenant::default_tenant(), req, None).unwrap();
        assert_eq!(spec.agent.tools[0].preset["timezone"], "UTC");
        assert!(spec.agent.tools[0].require_approval);
        assert_eq!(spec.agent.max_iteration, 10);
    }
}
