//! Domain events → protobuf: one exhaustive match, by family.

use super::record::{document, finish_reason, strategy};
use super::scalar::timestamp;
use crate::domain::{EventEnvelope, RunEvent};
use crate::pb;
use crate::pb::run_event::Event;

impl From<EventEnvelope> for pb::RunEvent {
    fn from(envelope: EventEnvelope) -> Self {
        Self {
            seq: envelope.seq,
            conversation_id: envelope.conversation_id.to_string(),
            message_id: envelope.message_id.to_string(),
            created_at: Some(timestamp(envelope.created_at)),
            event: Some(event(envelope.event)),
        }
    }
}

/// One event, by family: the run's course here, tool calls and the end in their own
/// functions.
fn event(event: RunEvent) -> Event {
    match event {
        RunEvent::Started(started) => Event::Started(run_started(*started)),
        RunEvent::Queued { ahead, behind } => Event::Queued(pb::Queued {
            ahead,
            message_id: behind.to_string(),
        }),
        RunEvent::Steered { joined, steer } => Event::Steered(pb::Steered {
            message_id: joined.to_string(),
            steer_message_id: steer.to_string(),
        }),
        RunEvent::UserTurn {
            position,
            steer,
            text,
        } => Event::UserTurn(pb::UserTurn {
            position,
            steer_message_id: steer.to_string(),
            text,
        }),
        RunEvent::Child(child) => Event::Child(Box::new(child_event(*child))),
        RunEvent::AnswerDelta { text } => Event::Delta(pb::MessageDelta { text }),
        RunEvent::ToolCallDelta(delta) => Event::ToolCallDelta(call_delta(*delta)),
        RunEvent::ReasoningDelta {
            thought_id,
            position,
            text,
        } => Event::ReasoningDelta(pb::ReasoningDelta {
            thought_id: thought_id.to_string(),
            position,
            text,
        }),
        RunEvent::Thought(thought) => Event::Thought((*thought).into()),
        call @ (RunEvent::ToolStarted { .. }
        | RunEvent::ToolFinished { .. }
        | RunEvent::ToolCallsRequired { .. }
        | RunEvent::ApprovalRequired { .. }) => call_event(call),
        RunEvent::File(file) => Event::File(message_file(*file)),
        retry @ RunEvent::Retry { .. } => Event::Retry(llm_retry(retry)),
        RunEvent::RoundRestarted {
            position,
            discard_from_seq,
            reason,
        } => Event::RoundRestarted(pb::RoundRestarted {
            position,
            discard_from_seq,
            reason,
        }),
        RunEvent::MessageEnd(end) => Event::End(message_end(*end)),
        RunEvent::Error {
            failure,
            usage,
            iterations,
        } => Event::Error(pb::RunError {
            usage: Some((*usage).into()),
            iterations,
            ..failure.into()
        }),
    }
}

/// A tool call starting, finishing, or waiting on the caller; an empty delta for any
/// other event, which it is never given.
fn call_event(event: RunEvent) -> Event {
    if let RunEvent::ToolStarted {
        thought_id,
        position,
        call,
    } = event
    {
        return Event::ToolStarted(pb::ToolStarted {
            thought_id: thought_id.to_string(),
            position,
            tool_call: Some((*call).into()),
        });
    }
    if let RunEvent::ToolFinished {
        thought_id,
        position,
        call,
    } = event
    {
        return Event::ToolFinished(pb::ToolFinished {
            thought_id: thought_id.to_string(),
            position,
            tool_call: Some((*call).into()),
        });
    }
    if let RunEvent::ToolCallsRequired { thought_id, calls } = event {
        return Event::ToolCallsRequired(pb::ToolCallsRequired {
            thought_id: thought_id.to_string(),
            tool_calls: calls.into_iter().map(Into::into).collect(),
        });
    }
    if let RunEvent::ApprovalRequired { thought_id, calls } = event {
        return Event::ApprovalRequired(pb::ApprovalRequired {
            thought_id: thought_id.to_string(),
            tool_calls: calls.into_iter().map(Into::into).collect(),
        });
    }
    Event::Delta(pb::MessageDelta::default())
}

/// A run's normal end.
fn message_end(end: crate::domain::RunEnded) -> pb::MessageEnd {
    let crate::domain::RunEnded {
        answer,
        usage,
        finish_reason: reason,
        iterations,
        retriever_resources,
        structured_output,
        output_invalid,
        budget_exhausted,
        interrupted_by,
    } = end;
    pb::MessageEnd {
        answer,
        usage: Some(usage.into()),
        finish_reason: finish_reason(reason).into(),
        iterations,
        retriever_resources: retriever_resources.into_iter().map(Into::into).collect(),
        structured_output: structured_output.as_ref().and_then(document),
        output_invalid: output_invalid.unwrap_or_default(),
        budget_exhausted: budget_exhausted
            .map_or_else(String::new, |kind| kind.as_str().to_owned()),
        interrupted_by: interrupted_by.map(|id| id.to_string()).unwrap_or_default(),
    }
}

/// A piece of a forming call's arguments.
fn call_delta(delta: crate::domain::CallDelta) -> pb::ToolCallDelta {
    pb::ToolCallDelta {
        thought_id: delta.thought_id.to_string(),
        position: delta.position,
        tool_call_id: delta.tool_call_id,
        index: delta.index,
        name: delta.name.unwrap_or_default(),
        arguments_delta: delta.arguments_delta,
        truncated: delta.truncated,
    }
}

/// A sub-agent's event as its parent's stream carries it.
fn child_event(child: crate::domain::ChildEvent) -> pb::ChildEvent {
    let crate::domain::ChildEvent {
        tool_call_id,
        depth,
        agent_id,
        agent_version,
        event,
    } = child;
    pb::ChildEvent {
        tool_call_id,
        message_id: event.message_id.to_string(),
        depth,
        agent_id,
        agent_version,
        event: Some(Box::new(event.into())),
    }
}

/// A file the run produced, as the answer's.
fn message_file(file: crate::domain::FileRecord) -> pb::MessageFile {
    pb::MessageFile {
        id: file.id.to_string(),
        r#type: file.kind().to_owned(),
        url: file.url,
        mime_type: file.mime_type,
        belongs_to: "assistant".to_owned(),
    }
}

/// The `started` event of a run.
fn run_started(started: crate::domain::RunStarted) -> pb::RunStarted {
    let crate::domain::RunStarted {
        strategy: kind,
        provider,
        model,
        max_iteration,
        history,
        agent,
        budget,
    } = started;
    pb::RunStarted {
        strategy: strategy(kind).into(),
        provider,
        model,
        max_iteration,
        history_turns: history.kept_turns,
        history_turns_dropped: history.dropped_turns,
        history_tokens_dropped: history.dropped_tokens,
        agent_version: agent.as_ref().map_or(0, |pin| pin.version),
        agent_id: agent.map(|pin| pin.agent_id).unwrap_or_default(),
        budget: budget.and_then(super::budget::budget_pb),
    }
}

/// A retried model call; `Default` for any other event, which it is never given.
fn llm_retry(event: RunEvent) -> pb::LlmRetry {
    let RunEvent::Retry {
        position,
        attempt,
        delay,
        failure,
        provider,
        model,
    } = event
    else {
        return pb::LlmRetry::default();
    };
    pb::LlmRetry {
        attempt,
        delay,
        code: failure.code,
        message: failure.message,
        provider,
        model,
        position,
    }
}
