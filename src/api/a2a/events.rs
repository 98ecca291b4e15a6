//! A run's events as A2A stream responses: answer text as appends to the `answer`
//! artifact, then a status update when the task ends or waits. What the client assembled
//! is always the answer: when the streamed text is not it (a ReAct run streams its
//! thoughts, a run taken over voided some text), the last artifact update replaces it.

use crate::a2a_pb as a2a;
use crate::api::convert::timestamp;
use crate::domain::{FinishReason, RunEvent};

use super::task::{data_part, text_part, waiting_parts, TaskIds, ANSWER_ARTIFACT};

/// Turns one task's run events into stream responses.
pub struct TaskEvents {
    ids: TaskIds,
    streamed: String,
    sent_any: bool,
}

impl TaskEvents {
    /// For the task `ids`, nothing streamed yet.
    pub fn new(ids: TaskIds) -> Self {
        Self {
            ids,
            streamed: String::new(),
            sent_any: false,
        }
    }

    /// The responses `event` makes, and whether the task then ended or waits (the stream
    /// ends there).
    pub fn convert(&mut self, event: &RunEvent) -> (Vec<a2a::StreamResponse>, bool) {
        match event {
            RunEvent::AnswerDelta { text } => {
                self.streamed.push_str(text);
                let append = std::mem::replace(&mut self.sent_any, true);
                (
                    vec![self.artifact(vec![text_part(text.clone())], append, false)],
                    false,
                )
            }
            RunEvent::ApprovalRequired { .. }
            | RunEvent::ToolCallsRequired { .. }
            | RunEvent::Child(_) => match waiting_parts(event) {
                // A wait of this run, or of a sub-agent's run below it: the task waits.
                Some(part) => {
                    let note = self.ids.agent_message("waiting", vec![part]);
                    (
                        vec![self.status(a2a::TaskState::InputRequired, Some(note))],
                        true,
                    )
                }
                None => (Vec::new(), false),
            },
            RunEvent::MessageEnd(end) => {
                let mut out = self.final_artifact(&end.answer, end.structured_output.as_ref());
                let state = match end.finish_reason {
                    // A newer message of the context stopped it: its work was stopped, as
                    // a cancel stops it.
                    FinishReason::Cancelled | FinishReason::Interrupted => a2a::TaskState::Canceled,
                    FinishReason::Stop
                    | FinishReason::MaxIterations
                    | FinishReason::BudgetExhausted => a2a::TaskState::Completed,
                };
                out.push(self.status(state, None));
                (out, true)
            }
            RunEvent::Error { failure, .. } => {
                let text = format!("{}: {}", failure.code, failure.message);
                let note = self.ids.agent_message("error", vec![text_part(text)]);
                (vec![self.status(a2a::TaskState::Failed, Some(note))], true)
            }
            // Forming arguments and reasoning are not the task's output (see docs/a2a.md); a
            // queued task stays `submitted` until it starts.
            RunEvent::Started { .. }
            | RunEvent::Queued { .. }
            | RunEvent::Steered { .. }
            | RunEvent::UserTurn { .. }
            | RunEvent::ToolCallDelta(_)
            | RunEvent::ReasoningDelta { .. }
            | RunEvent::Thought(_)
            | RunEvent::ToolStarted { .. }
            | RunEvent::ToolFinished { .. }
            | RunEvent::File(_)
            | RunEvent::Retry { .. }
            | RunEvent::RoundRestarted { .. } => (Vec::new(), false),
        }
    }

    /// The last artifact update: a closing append when the client already holds the
    /// answer, else the whole answer in place of what was streamed.
    fn final_artifact(
        &self,
        answer: &str,
        document: Option<&serde_json::Value>,
    ) -> Vec<a2a::StreamResponse> {
        let whole = self.streamed == answer && document.is_none();
        if whole && !self.sent_any {
            return Vec::new();
        }
        if whole {
            return vec![self.artifact(vec![text_part("")], true, true)];
        }
        let mut parts = vec![text_part(answer)];
        if let Some(document) = document {
            parts.push(data_part(document));
        }
        vec![self.artifact(parts, false, true)]
    }

    fn artifact(
        &self,
        parts: Vec<a2a::Part>,
        append: bool,
        last_chunk: bool,
    ) -> a2a::StreamResponse {
        a2a::StreamResponse {
            payload: Some(a2a::stream_response::Payload::ArtifactUpdate(
                a2a::TaskArtifactUpdateEvent {
                    task_id: self.ids.task_id.clone(),
                    context_id: self.ids.context_id.clone(),
                    artifact: Some(a2a::Artifact {
                        artifact_id: ANSWER_ARTIFACT.to_owned(),
                        name: ANSWER_ARTIFACT.to_owned(),
                        parts,
                        ..a2a::Artifact::default()
                    }),
                    append,
                    last_chunk,
                    metadata: None,
                },
            )),
        }
    }

    fn status(&self, state: a2a::TaskState, note: Option<a2a::Message>) -> a2a::StreamResponse {
        a2a::StreamResponse {
            payload: Some(a2a::stream_response::Payload::StatusUpdate(
                a2a::TaskStatusUpdateEvent {
                    task_id: self.ids.task_id.clone(),
                    context_id: self.ids.context_id.clone(),
                    status: Some(a2a::TaskStatus {
                        state: state.into(),
                        message: note,
                        timestamp: Some(timestamp(crate::domain::now())),
                    }),
                    metadata: None,
                },
            )),
        }
    }
}
