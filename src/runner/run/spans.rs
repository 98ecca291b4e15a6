//! The run's spans in the GenAI semantic conventions: `invoke_agent` for the run, `chat`
//! for each LLM call.

use tracing::field;

use super::agent::Agent;
use crate::domain::Message;
use crate::llm::ResolvedModel;
use crate::runner::spec::RunSpec;
use crate::telemetry::traces;

/// The run's span: `invoke_agent` in the GenAI semantic conventions, a child of the
/// caller's trace; it carries the trace id so the run's log lines do.
pub fn span(spec: &RunSpec, agent: &Agent, message: &Message) -> tracing::Span {
    let span = tracing::info_span!(
        "invoke_agent",
        "otel.name" = "invoke_agent",
        gen_ai.operation.name = "invoke_agent",
        gen_ai.conversation.id = %message.conversation_id,
        gen_ai.provider.name = agent.model.api,
        gen_ai.request.model = %agent.model.info.name,
        message_id = %message.id,
        trace_id = field::Empty,
        "otel.status_description" = field::Empty,
    );
    spec.trace_parent.adopt(&span);
    if let Some(id) = traces::trace_id(&span, &spec.trace_parent) {
        span.record("trace_id", id.as_str());
    }
    span
}

/// The span of one LLM call: `chat {model}` in the GenAI semantic conventions.
pub(super) fn chat_span(model: &ResolvedModel, position: u32) -> tracing::Span {
    tracing::info_span!(
        "chat",
        "otel.name" = %format_args!("chat {}", model.info.name),
        "otel.kind" = "client",
        gen_ai.operation.name = "chat",
        gen_ai.provider.name = model.api,
        gen_ai.request.model = %model.info.name,
        provider = %model.provider,
        position,
        gen_ai.usage.input_tokens = field::Empty,
        gen_ai.usage.output_tokens = field::Empty,
        gen_ai.response.finish_reasons = field::Empty,
        gen_ai.input.messages = field::Empty,
        gen_ai.output.messages = field::Empty,
        error.type = field::Empty,
        "otel.status_description" = field::Empty,
    )
}

/// Records `value` as JSON text on `span` (only when content tracing is on).
pub(super) fn record_json(
    span: &tracing::Span,
    field: &'static str,
    value: &impl serde::Serialize,
) {
    if let Ok(text) = serde_json::to_string(value) {
        span.record(field, text.as_str());
    }
}
