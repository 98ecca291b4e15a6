//! Domain records → protobuf.

use super::json::json_to_struct;
use super::scalar::timestamp;
use crate::domain::{
    FinishReason, Message, MessageStatus, RetrieverResource, RunFailure, StrategyKind,
    TenantLimits, Thought, ToolCallRecord, ToolInvokeMeta, Usage,
};
use crate::pb;

impl From<TenantLimits> for pb::TenantLimits {
    fn from(limits: TenantLimits) -> Self {
        Self {
            max_concurrent_runs: limits.max_concurrent_runs,
            runs_per_minute: limits.runs_per_minute,
            tokens_per_day: limits.tokens_per_day,
            max_run_tokens: limits.max_run_tokens,
            max_run_cost: if limits.max_run_cost.is_zero() {
                String::new()
            } else {
                limits.max_run_cost.to_string()
            },
            max_run_seconds: limits.max_run_seconds,
            max_run_tool_calls: limits.max_run_tool_calls,
            max_concurrent_child_runs: limits.max_concurrent_child_runs,
            max_follow_streams: limits.max_follow_streams,
            max_queued_per_conversation: limits.max_queued_per_conversation,
        }
    }
}

impl From<Usage> for pb::Usage {
    fn from(usage: Usage) -> Self {
        Self {
            prompt_tokens: usage.tokens.prompt_tokens,
            completion_tokens: usage.tokens.completion_tokens,
            total_tokens: usage.tokens.total_tokens,
            prompt_price: usage.prompt_price.to_string(),
            completion_price: usage.completion_price.to_string(),
            total_price: usage.total_price.to_string(),
            currency: usage.currency,
            latency: usage.latency,
            estimated: usage.tokens.estimated,
            queue_time: usage.queue_time,
            cache_read_tokens: usage.tokens.cache_read_tokens,
            cache_creation_tokens: usage.tokens.cache_creation_tokens,
        }
    }
}

impl From<ToolInvokeMeta> for pb::ToolInvokeMeta {
    fn from(meta: ToolInvokeMeta) -> Self {
        Self {
            time_cost: meta.time_cost,
            error: meta.error.unwrap_or_default(),
            tool_config: Some(json_to_struct(&meta.tool_config)),
            usage: meta.usage.map(Into::into),
            tool_calls: meta.tool_calls,
        }
    }
}

impl From<ToolCallRecord> for pb::ToolCall {
    fn from(call: ToolCallRecord) -> Self {
        Self {
            id: call.id,
            name: call.name,
            arguments: call.arguments,
            observation: call.observation.unwrap_or_default(),
            meta: call.meta.map(Into::into),
            provider: call.provider,
        }
    }
}

impl From<Thought> for pb::AgentThought {
    fn from(thought: Thought) -> Self {
        Self {
            id: thought.id.to_string(),
            message_id: thought.message_id.to_string(),
            position: thought.position,
            thought: thought.thought,
            tool_calls: thought.tool_calls.into_iter().map(Into::into).collect(),
            answer: thought.answer,
            file_ids: thought.file_ids,
            usage: thought.usage.map(Into::into),
            provider: thought.provider,
            model: thought.model,
            reasoning: thought.reasoning,
            steered: thought
                .steered
                .into_iter()
                .map(|steered| pb::SteeredText {
                    message_id: steered.message_id.to_string(),
                    text: steered.text,
                })
                .collect(),
            created_at: Some(timestamp(thought.created_at)),
            retriever_resources: thought
                .retriever_resources
                .into_iter()
                .map(Into::into)
                .collect(),
        }
    }
}

impl From<RetrieverResource> for pb::RetrieverResource {
    fn from(resource: RetrieverResource) -> Self {
        let RetrieverResource {
            position,
            provider,
            tool_call_id,
            content,
            title,
            source,
            score,
        } = resource;
        Self {
            position,
            provider,
            tool_call_id,
            content,
            title,
            source,
            score,
        }
    }
}

/// A JSON object document as a `Struct`; other values have no `Struct` form.
pub fn document(value: &serde_json::Value) -> Option<prost_types::Struct> {
    value.as_object().map(json_to_struct)
}

impl From<RunFailure> for pb::RunError {
    fn from(failure: RunFailure) -> Self {
        Self {
            code: failure.code,
            message: failure.message,
            usage: None,
            iterations: 0,
        }
    }
}

/// The protobuf value of a strategy.
pub fn strategy(kind: StrategyKind) -> pb::Strategy {
    match kind {
        StrategyKind::FunctionCalling => pb::Strategy::FunctionCalling,
        StrategyKind::ChainOfThought => pb::Strategy::ChainOfThought,
    }
}

/// The protobuf value of a finish reason.
pub fn finish_reason(reason: FinishReason) -> pb::FinishReason {
    match reason {
        FinishReason::Stop => pb::FinishReason::Stop,
        FinishReason::MaxIterations => pb::FinishReason::MaxIterations,
        FinishReason::Cancelled => pb::FinishReason::Cancelled,
        FinishReason::BudgetExhausted => pb::FinishReason::BudgetExhausted,
        FinishReason::Interrupted => pb::FinishReason::Interrupted,
    }
}

/// The protobuf value of a message status.
pub fn message_status(status: MessageStatus) -> pb::MessageStatus {
    match status {
        MessageStatus::Running => pb::MessageStatus::Running,
        MessageStatus::Completed => pb::MessageStatus::Completed,
        MessageStatus::Failed => pb::MessageStatus::Failed,
        MessageStatus::Cancelled => pb::MessageStatus::Cancelled,
        MessageStatus::Interrupted => pb::MessageStatus::Interrupted,
        MessageStatus::WaitingToolOutputs => pb::MessageStatus::WaitingToolOutputs,
        MessageStatus::WaitingApproval => pb::MessageStatus::WaitingApproval,
        MessageStatus::Queued => pb::MessageStatus::Queued,
    }
}

impl From<Message> for pb::Message {
    fn from(message: Message) -> Self {
        Self {
            id: message.id.to_string(),
            conversation_id: message.conversation_id.to_string(),
            query: message.query,
            answer: message.answer,
            status: message_status(message.status).into(),
            usage: Some(message.usage.into()),
            error: message.error.map(|failure| pb::RunError {
                iterations: message.iterations,
                ..failure.into()
            }),
            user: message.user,
            created_at: Some(timestamp(message.created_at)),
            updated_at: Some(timestamp(message.updated_at)),
            strategy: strategy(message.strategy).into(),
            finish_reason: message
                .finish_reason
                .map_or(pb::FinishReason::Unspecified, finish_reason)
                .into(),
            iterations: message.iterations,
            inputs: message.inputs.into_iter().collect(),
            provider: message.provider,
            model: message.model,
            retriever_resources: message
                .retriever_resources
                .into_iter()
                .map(Into::into)
                .collect(),
            structured_output: message.structured_output.as_ref().and_then(document),
            output_invalid: message.output_invalid.unwrap_or_default(),
            budget_exhausted: message
                .budget_exhausted
                .map(|kind| kind.as_str().to_owned())
                .unwrap_or_default(),
            agent_version: message.agent.as_ref().map_or(0, |pin| pin.version),
            overrides: message
                .agent
                .as_ref()
                .filter(|pin| !pin.overrides.is_empty())
                .map(|pin| super::reference::overrides_pb(pin.overrides.clone())),
            agent_id: message.agent.map(|pin| pin.agent_id).unwrap_or_default(),
            depth: message.parent.as_ref().map_or(0, |parent| parent.depth),
            parent_message_id: message
                .parent
                .as_ref()
                .map(|parent| parent.message_id.to_string())
                .unwrap_or_default(),
            parent_tool_call_id: message
                .parent
                .map(|parent| parent.tool_call_id)
                .unwrap_or_default(),
            steers: message.steers.map(|id| id.to_string()).unwrap_or_default(),
            queued_behind: message
                .queued_behind
                .map(|id| id.to_string())
                .unwrap_or_default(),
            interrupted_by: message
                .interrupted_by
                .map(|id| id.to_string())
                .unwrap_or_default(),
            rolled_back: message.rolled_back,
        }
    }
}
