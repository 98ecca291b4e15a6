//! Our records as A2A sees them: a task is a message (its run), a context a conversation.
//! The answer is the task's one artifact (`answer`); a task waiting for approvals or client
//! tools is input-required, its status message naming the calls in a data part (the
//! tool-calls extension).

use serde_json::json;

use crate::a2a_pb as a2a;
use crate::api::convert::json::{json_to_struct, json_to_value};
use crate::api::convert::timestamp;
use crate::domain::{Message, MessageStatus, RunEvent};

/// The id of the artifact that holds the answer.
pub const ANSWER_ARTIFACT: &str = "answer";

/// The task state a message's status is.
pub fn task_state(status: MessageStatus) -> a2a::TaskState {
    match status {
        MessageStatus::Running => a2a::TaskState::Working,
        MessageStatus::Queued => a2a::TaskState::Submitted,
        MessageStatus::WaitingApproval | MessageStatus::WaitingToolOutputs => {
            a2a::TaskState::InputRequired
        }
        MessageStatus::Completed => a2a::TaskState::Completed,
        MessageStatus::Failed | MessageStatus::Interrupted => a2a::TaskState::Failed,
        MessageStatus::Cancelled => a2a::TaskState::Canceled,
    }
}

/// Whether a client may still act on a task in `state` (send to it, cancel it, follow it).
pub fn is_open(state: a2a::TaskState) -> bool {
    matches!(
        state,
        a2a::TaskState::Submitted | a2a::TaskState::Working | a2a::TaskState::InputRequired
    )
}

/// A part holding `text`.
pub fn text_part(text: impl Into<String>) -> a2a::Part {
    a2a::Part {
        content: Some(a2a::part::Content::Text(text.into())),
        ..a2a::Part::default()
    }
}

/// A part holding a JSON document.
pub fn data_part(data: &serde_json::Value) -> a2a::Part {
    a2a::Part {
        content: Some(a2a::part::Content::Data(json_to_value(data))),
        media_type: "application/json".to_owned(),
        ..a2a::Part::default()
    }
}

/// A message of the agent in the task `message`.
pub fn agent_message(message: &Message, suffix: &str, parts: Vec<a2a::Part>) -> a2a::Message {
    let ids = TaskIds {
        task_id: message.id.to_string(),
        context_id: message.conversation_id.to_string(),
    };
    ids.agent_message(suffix, parts)
}

/// The ids every message and event of one task carries.
#[derive(Debug, Clone)]
pub struct TaskIds {
    /// The task (our message).
    pub task_id: String,
    /// Its context (our conversation).
    pub context_id: String,
}

impl TaskIds {
    /// A message of the agent in this task; its id is the task's with `suffix`.
    pub fn agent_message(&self, suffix: &str, parts: Vec<a2a::Part>) -> a2a::Message {
        a2a::Message {
            message_id: format!("{}-{suffix}", self.task_id),
            context_id: self.context_id.clone(),
            task_id: self.task_id.clone(),
            role: a2a::Role::Agent.into(),
            parts,
            ..a2a::Message::default()
        }
    }
}

/// The user's message that started the task.
fn user_message(message: &Message) -> a2a::Message {
    a2a::Message {
        message_id: format!("{}-query", message.id),
        context_id: message.conversation_id.to_string(),
        task_id: message.id.to_string(),
        role: a2a::Role::User.into(),
        parts: vec![text_part(message.query.clone())],
        ..a2a::Message::default()
    }
}

/// The answer artifact: its text, and the structured output as a data part.
pub fn answer_artifact(message: &Message) -> Option<a2a::Artifact> {
    let mut parts = Vec::new();
    if !message.answer.is_empty() {
        parts.push(text_part(message.answer.clone()));
    }
    if let Some(document) = &message.structured_output {
        parts.push(data_part(document));
    }
    (!parts.is_empty()).then(|| a2a::Artifact {
        artifact_id: ANSWER_ARTIFACT.to_owned(),
        name: ANSWER_ARTIFACT.to_owned(),
        parts,
        ..a2a::Artifact::default()
    })
}

/// What a waiting run asks for, as the status message of the tool-calls extension; a
/// sub-agent's wait (carried in a `child` event) names the sub-agent's run in each call's
/// `message_id`, where the answer goes.
pub fn waiting_parts(event: &RunEvent) -> Option<a2a::Part> {
    let (kind, calls) = wait_of(event)?;
    Some(data_part(&json!({ kind: calls })))
}

fn wait_of(event: &RunEvent) -> Option<(&'static str, Vec<serde_json::Value>)> {
    let wait = event.wait()?;
    let kind = match wait.status {
        MessageStatus::WaitingApproval => "approval_required",
        MessageStatus::WaitingToolOutputs => "tool_outputs_required",
        MessageStatus::Running
        | MessageStatus::Queued
        | MessageStatus::Completed
        | MessageStatus::Failed
        | MessageStatus::Cancelled
        | MessageStatus::Interrupted => return None,
    };
    let calls = wait
        .calls
        .iter()
        .map(|call| {
            let mut value = json!({"id": call.id, "name": call.name, "arguments": call.arguments});
            if let Some(run) = wait.run {
                value["message_id"] = json!(run.to_string());
            }
            value
        })
        .collect();
    Some((kind, calls))
}

/// The status of the task `message`; `waiting` is the event that announced its wait.
pub fn task_status(message: &Message, waiting: Option<&RunEvent>) -> a2a::TaskStatus {
    let state = task_state(message.status);
    let note = match (state, &message.error) {
        (a2a::TaskState::InputRequired, _) => waiting
            .and_then(waiting_parts)
            .map(|part| agent_message(message, "waiting", vec![part])),
        (a2a::TaskState::Failed, Some(failure)) => Some(agent_message(
            message,
            "error",
            vec![text_part(format!("{}: {}", failure.code, failure.message))],
        )),
        _ => None,
    };
    a2a::TaskStatus {
        state: state.into(),
        message: note,
        timestamp: Some(timestamp(message.updated_at)),
    }
}

/// The task `message` is, with at most `history_length` messages of history (all when
/// unset).
pub fn task_of(
    message: &Message,
    waiting: Option<&RunEvent>,
    history_length: Option<i32>,
) -> a2a::Task {
    let mut history = vec![user_message(message)];
    if message.status.is_terminal() && !message.answer.is_empty() {
        history.push(agent_message(
            message,
            "answer",
            vec![text_part(message.answer.clone())],
        ));
    }
    if let Some(limit) = history_length {
        let keep = usize::try_from(limit.max(0)).unwrap_or(0);
        let drop = history.len().saturating_sub(keep);
        history.drain(..drop);
    }
    let mut metadata = serde_json::Map::new();
    if let Some(pin) = &message.agent {
        metadata.insert("agent_id".into(), json!(pin.agent_id));
        metadata.insert("agent_version".into(), json!(pin.version));
    }
    a2a::Task {
        id: message.id.to_string(),
        context_id: message.conversation_id.to_string(),
        status: Some(task_status(message, waiting)),
        artifacts: answer_artifact(message).into_iter().collect(),
        history,
        metadata: Some(json_to_struct(&metadata)),
    }
}
