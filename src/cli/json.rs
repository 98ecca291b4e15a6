//! Events and records as JSON for scripts: one flat object per event with a `type`,
//! snake_case names that do not change, numbers as numbers and every field present (zero
//! values included), unlike the protobuf JSON mapping grpcurl prints.

use serde_json::{json, Value};

use super::proto_json;
use crate::pb;
use crate::pb::run_event::Event;

/// One event as a JSON object.
pub fn event(event: &pb::RunEvent) -> Value {
    let mut object = json!({
        "seq": event.seq,
        "message_id": event.message_id,
        "conversation_id": event.conversation_id,
        "time": timestamp(event.created_at.as_ref()),
    });
    let (kind, body) = match &event.event {
        Some(Event::Started(started)) => ("started", started_json(started)),
        Some(Event::Delta(delta)) => ("delta", json!({"text": delta.text})),
        Some(Event::Queued(queued)) => (
            "queued",
            json!({"ahead": queued.ahead, "message_id": queued.message_id}),
        ),
        Some(Event::Steered(steered)) => (
            "steered",
            json!({"message_id": steered.message_id, "steer_message_id": steered.steer_message_id}),
        ),
        Some(Event::UserTurn(turn)) => (
            "user_turn",
            json!({"position": turn.position, "steer_message_id": turn.steer_message_id,
                   "text": turn.text}),
        ),
        Some(Event::ToolCallDelta(delta)) => (
            "tool_call_delta",
            json!({"thought_id": delta.thought_id, "position": delta.position,
                   "tool_call_id": delta.tool_call_id, "index": delta.index,
                   "name": delta.name, "arguments_delta": delta.arguments_delta,
                   "truncated": delta.truncated}),
        ),
        Some(Event::ReasoningDelta(reasoning)) => (
            "reasoning_delta",
            json!({"thought_id": reasoning.thought_id, "position": reasoning.position,
                   "text": reasoning.text}),
        ),
        Some(Event::Thought(thought)) => ("thought", thought_json(thought)),
        Some(Event::ToolStarted(started)) => (
            "tool_started",
            json!({"thought_id": started.thought_id, "position": started.position,
                   "tool_call": started.tool_call.as_ref().map(tool_call)}),
        ),
        Some(Event::ToolFinished(finished)) => (
            "tool_finished",
            json!({"thought_id": finished.thought_id, "position": finished.position,
                   "tool_call": finished.tool_call.as_ref().map(tool_call)}),
        ),
        Some(Event::ToolCallsRequired(required)) => (
            "tool_calls_required",
            json!({"thought_id": required.thought_id,
                   "tool_calls": required.tool_calls.iter().map(tool_call).collect::<Vec<_>>()}),
        ),
        Some(Event::ApprovalRequired(required)) => (
            "approval_required",
            json!({"thought_id": required.thought_id,
                   "tool_calls": required.tool_calls.iter().map(tool_call).collect::<Vec<_>>()}),
        ),
        Some(Event::File(file)) => (
            "file",
            json!({"file_id": file.id, "file_type": file.r#type, "url": file.url,
                   "mime_type": file.mime_type, "belongs_to": file.belongs_to}),
        ),
        Some(Event::End(end)) => ("end", end_json(end)),
        Some(Event::Error(error)) => ("error", run_error(error)),
        Some(Event::Retry(retry)) => (
            "retry",
            json!({"attempt": retry.attempt, "delay": retry.delay, "code": retry.code,
                   "message": retry.message, "provider": retry.provider, "model": retry.model,
                   "position": retry.position}),
        ),
        Some(Event::Child(child)) => (
            "child",
            json!({"tool_call_id": child.tool_call_id, "message_id": child.message_id,
                   "depth": child.depth, "agent_id": child.agent_id,
                   "agent_version": child.agent_version,
                   "event": child.event.as_deref().map(self::event)}),
        ),
        Some(Event::RoundRestarted(restarted)) => (
            "round_restarted",
            json!({"position": restarted.position, "discard_from_seq": restarted.discard_from_seq,
                   "reason": restarted.reason}),
        ),
        None => ("unknown", json!({})),
    };
    if let (Some(object), Value::Object(body)) = (object.as_object_mut(), body) {
        object.insert("type".to_owned(), json!(kind));
        object.extend(body);
    }
    object
}

fn started_json(started: &pb::RunStarted) -> Value {
    json!({
        "strategy": strategy_name(started.strategy),
        "provider": started.provider,
        "model": started.model,
        "max_iteration": started.max_iteration,
        "history_turns": started.history_turns,
        "history_turns_dropped": started.history_turns_dropped,
        "history_tokens_dropped": started.history_tokens_dropped,
    })
}

fn end_json(end: &pb::MessageEnd) -> Value {
    json!({
        "answer": end.answer,
        "finish_reason": finish_reason_name(end.finish_reason),
        "iterations": end.iterations,
        "usage": usage(end.usage.as_ref()),
        "structured_output": structured(end.structured_output.as_ref()),
        "output_invalid": end.output_invalid,
        "budget_exhausted": end.budget_exhausted,
        "retriever_resources": end.retriever_resources.iter().map(resource).collect::<Vec<_>>(),
    })
}

/// A run's failure.
pub fn run_error(error: &pb::RunError) -> Value {
    json!({
        "code": error.code,
        "message": error.message,
        "iterations": error.iterations,
        "usage": usage(error.usage.as_ref()),
    })
}

/// One round of the loop.
pub fn thought_json(thought: &pb::AgentThought) -> Value {
    json!({
        "thought_id": thought.id,
        "position": thought.position,
        "thought": thought.thought,
        "answer": thought.answer,
        "tool_calls": thought.tool_calls.iter().map(tool_call).collect::<Vec<_>>(),
        "file_ids": thought.file_ids,
        "usage": usage(thought.usage.as_ref()),
        "provider": thought.provider,
        "model": thought.model,
        "retriever_resources": thought.retriever_resources.iter().map(resource).collect::<Vec<_>>(),
        "time": timestamp(thought.created_at.as_ref()),
    })
}

/// A stored message.
pub fn message_json(message: &pb::Message) -> Value {
    json!({
        "message_id": message.id,
        "conversation_id": message.conversation_id,
        "query": message.query,
        "answer": message.answer,
        "status": status_name(message.status),
        "usage": usage(message.usage.as_ref()),
        "error": message.error.as_ref().map(run_error),
        "strategy": strategy_name(message.strategy),
        "finish_reason": finish_reason_name(message.finish_reason),
        "iterations": message.iterations,
        "provider": message.provider,
        "model": message.model,
        "structured_output": structured(message.structured_output.as_ref()),
        "output_invalid": message.output_invalid,
        "retriever_resources": message.retriever_resources.iter().map(resource).collect::<Vec<_>>(),
        "created_at": timestamp(message.created_at.as_ref()),
        "updated_at": timestamp(message.updated_at.as_ref()),
    })
}

fn tool_call(call: &pb::ToolCall) -> Value {
    let meta = call.meta.clone().unwrap_or_default();
    json!({
        "id": call.id,
        "provider": call.provider,
        "name": call.name,
        "arguments": call.arguments,
        "observation": call.observation,
        "time_cost": meta.time_cost,
        "error": meta.error,
    })
}

fn usage(usage: Option<&pb::Usage>) -> Value {
    let usage = usage.cloned().unwrap_or_default();
    json!({
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "total_tokens": usage.total_tokens,
        "prompt_price": usage.prompt_price,
        "completion_price": usage.completion_price,
        "total_price": usage.total_price,
        "currency": usage.currency,
        "latency": usage.latency,
        "estimated": usage.estimated,
        "queue_time": usage.queue_time,
        "cache_read_tokens": usage.cache_read_tokens,
        "cache_creation_tokens": usage.cache_creation_tokens,
    })
}

fn resource(resource: &pb::RetrieverResource) -> Value {
    json!({
        "position": resource.position,
        "provider": resource.provider,
        "tool_call_id": resource.tool_call_id,
        "content": resource.content,
        "title": resource.title,
        "source": resource.source,
        "score": resource.score,
    })
}

fn timestamp(time: Option<&prost_types::Timestamp>) -> Value {
    time.and_then(|t| {
        chrono::DateTime::from_timestamp(t.seconds, u32::try_from(t.nanos).unwrap_or(0))
    })
    .map_or(Value::Null, |t| {
        json!(t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
    })
}

/// An enum's protobuf name without its prefix, in lower case: `FINISH_REASON_STOP` → `stop`.
fn short_name(full: &str, prefix: &str) -> String {
    full.strip_prefix(prefix)
        .unwrap_or(full)
        .to_ascii_lowercase()
}

/// `function_calling`, `chain_of_thought` or `unspecified`.
pub fn strategy_name(value: i32) -> String {
    pb::Strategy::try_from(value).map_or_else(
        |_| value.to_string(),
        |s| short_name(s.as_str_name(), "STRATEGY_"),
    )
}

/// `stop`, `max_iterations`, `cancelled` or `unspecified`.
pub fn finish_reason_name(value: i32) -> String {
    pb::FinishReason::try_from(value).map_or_else(
        |_| value.to_string(),
        |r| short_name(r.as_str_name(), "FINISH_REASON_"),
    )
}

/// `completed`, `failed`, `cancelled`, `running` …
pub fn status_name(value: i32) -> String {
    pb::MessageStatus::try_from(value).map_or_else(
        |_| value.to_string(),
        |s| short_name(s.as_str_name(), "MESSAGE_STATUS_"),
    )
}

/// A structured output as the JSON object it was; `null` when there is none.
fn structured(output: Option<&prost_types::Struct>) -> Value {
    output
        .and_then(|output| proto_json::to_json("google.protobuf.Struct", output).ok())
        .unwrap_or(Value::Null)
}
