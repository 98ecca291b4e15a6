//! What an A2A client sends, read into our requests: a user message into a `Run` by
//! reference (text parts are the query, JSON data parts join it as text, image parts are
//! input files; other media are not taken), and a message to an input-required task into
//! decisions or outputs (the tool-calls extension).

use serde::Deserialize;
use tonic::Status;

use super::errors::A2aError;
use super::route::Route;
use super::task::TaskIds;
use crate::a2a_pb as a2a;
use crate::api::convert::json::value_to_json;
use crate::api::convert::timestamp;
use crate::api::status::invalid;
use crate::domain::{ConversationId, MessageId, VersionPick};
use crate::pb;
use crate::runner::{ClientOutput, Decision};

/// The longest message id a client may give: it becomes the run's idempotency key.
const MAX_MESSAGE_ID: usize = 200;
/// The longest reason for declining a call; the model reads it.
const MAX_REASON_BYTES: usize = 4096;
/// Most decisions or outputs one message carries.
const MAX_ANSWERS: usize = 1024;

/// The run a user message starts: the agent `route` names, the message's context as the
/// conversation, and its id as the idempotency key, so a retried send follows the first.
pub fn run_request(route: &Route, message: a2a::Message) -> Result<pb::RunRequest, Status> {
    let a2a::Message {
        message_id,
        context_id,
        task_id: _,
        role,
        parts,
        metadata: _,
        extensions: _,
        reference_task_ids: _,
    } = message;
    check_message_id(&message_id)?;
    if role == i32::from(a2a::Role::Agent) {
        return Err(invalid("message.role", "must be ROLE_USER"));
    }
    if !context_id.is_empty() && context_id.parse::<ConversationId>().is_err() {
        return Err(invalid(
            "message.context_id",
            "is not a context of this service",
        ));
    }
    let mut texts = Vec::new();
    let mut files = Vec::new();
    for (index, part) in parts.into_iter().enumerate() {
        let a2a::Part {
            content,
            metadata: _,
            filename: _,
            media_type,
        } = part;
        let source = match content {
            Some(a2a::part::Content::Text(text)) => {
                texts.push(text);
                continue;
            }
            Some(a2a::part::Content::Data(value)) => {
                texts.push(value_to_json(value).to_string());
                continue;
            }
            Some(a2a::part::Content::Raw(bytes)) => pb::input_file::Source::Data(bytes),
            Some(a2a::part::Content::Url(url)) => pb::input_file::Source::Url(url),
            None => return Err(invalid(&format!("message.parts[{index}]"), "is empty")),
        };
        if !media_type.starts_with("image/") {
            return Err(A2aError::ContentTypeNotSupported(format!(
                "message.parts[{index}] is {:?}: this agent takes text, JSON data and images",
                media_type.chars().take(64).collect::<String>()
            ))
            .into());
        }
        files.push(pb::InputFile {
            source: Some(source),
            mime_type: media_type,
            detail: pb::ImageDetail::Unspecified.into(),
        });
    }
    let query = texts.join("\n\n");
    if query.trim().is_empty() {
        return Err(invalid(
            "message.parts",
            "needs a text part: it is the query",
        ));
    }
    let (version, alias) = match &route.pick {
        VersionPick::Latest => (0, String::new()),
        VersionPick::Number(n) => (*n, String::new()),
        VersionPick::Alias(alias) => (0, alias.clone()),
    };
    Ok(pb::RunRequest {
        conversation_id: context_id,
        query,
        files,
        agent_ref: Some(pb::AgentRef {
            agent_id: route.agent_id.clone(),
            version,
            alias,
        }),
        idempotency_key: format!("a2a:{message_id}"),
        ..pb::RunRequest::default()
    })
}

fn check_message_id(id: &str) -> Result<(), Status> {
    if id.is_empty() || id.len() > MAX_MESSAGE_ID || id.chars().any(char::is_control) {
        return Err(invalid(
            "message.message_id",
            &format!("must be 1 to {MAX_MESSAGE_ID} bytes without control characters"),
        ));
    }
    Ok(())
}

/// The task as a stream first shows it: submitted, not yet run.
pub fn submitted(ids: &TaskIds, routing: &str) -> a2a::Task {
    let mut metadata = serde_json::Map::new();
    metadata.insert("routing".into(), serde_json::json!(routing));
    a2a::Task {
        id: ids.task_id.clone(),
        context_id: ids.context_id.clone(),
        status: Some(a2a::TaskStatus {
            state: a2a::TaskState::Submitted.into(),
            message: None,
            timestamp: Some(timestamp(crate::domain::now())),
        }),
        artifacts: Vec::new(),
        history: Vec::new(),
        metadata: Some(crate::api::convert::json::json_to_struct(&metadata)),
    }
}

/// What a message to an input-required task answers.
pub enum Reply {
    /// Decisions on calls waiting for approval, each for this run or the sub-agent run
    /// it names.
    Decisions(Vec<(Option<MessageId>, Decision)>),
    /// Results of the caller's own tools.
    Outputs(Vec<(Option<MessageId>, ClientOutput)>),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Answers {
    #[serde(default)]
    decisions: Option<Vec<DecisionJson>>,
    #[serde(default)]
    outputs: Option<Vec<OutputJson>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DecisionJson {
    tool_call_id: String,
    approve: bool,
    #[serde(default)]
    reason: String,
    #[serde(default)]
    message_id: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct OutputJson {
    tool_call_id: String,
    #[serde(default)]
    output: String,
    #[serde(default)]
    error: String,
    #[serde(default)]
    message_id: String,
}

/// The decisions or outputs a message carries in its data part.
pub fn reply(message: &a2a::Message) -> Result<Reply, Status> {
    let field = "message.parts";
    let shape = "needs one data part {\"decisions\": [{\"tool_call_id\", \"approve\", \
                 \"reason\"}]} or {\"outputs\": [{\"tool_call_id\", \"output\", \"error\"}]}";
    let mut data = message.parts.iter().filter_map(|part| match &part.content {
        Some(a2a::part::Content::Data(value)) => Some(value_to_json(value.clone())),
        _ => None,
    });
    let (Some(data), None) = (data.next(), data.next()) else {
        return Err(invalid(field, shape));
    };
    let answers: Answers =
        serde_json::from_value(data).map_err(|err| invalid(field, &format!("{shape}: {err}")))?;
    match (answers.decisions, answers.outputs) {
        (Some(decisions), None) if decisions.len() <= MAX_ANSWERS => decisions
            .into_iter()
            .enumerate()
            .map(|(index, d)| {
                if d.reason.len() > MAX_REASON_BYTES {
                    return Err(invalid(
                        &format!("decisions[{index}].reason"),
                        &format!("must be at most {MAX_REASON_BYTES} bytes"),
                    ));
                }
                let target = target(&format!("decisions[{index}].message_id"), &d.message_id)?;
                Ok((
                    target,
                    Decision {
                        tool_call_id: d.tool_call_id,
                        approve: d.approve,
                        reason: d.reason,
                    },
                ))
            })
            .collect::<Result<_, _>>()
            .map(Reply::Decisions),
        (None, Some(outputs)) if outputs.len() <= MAX_ANSWERS => outputs
            .into_iter()
            .enumerate()
            .map(|(index, o)| {
                let target = target(&format!("outputs[{index}].message_id"), &o.message_id)?;
                Ok((
                    target,
                    ClientOutput {
                        tool_call_id: o.tool_call_id,
                        output: o.output,
                        error: o.error,
                    },
                ))
            })
            .collect::<Result<_, _>>()
            .map(Reply::Outputs),
        _ => Err(invalid(field, shape)),
    }
}

fn target(field: &str, id: &str) -> Result<Option<MessageId>, Status> {
    match id {
        "" => Ok(None),
        id => id
            .parse()
            .map(Some)
            .map_err(|_| invalid(field, "is not a valid id")),
    }
}
