//! The JSON of a Messages request.

use serde_json::{json, Value};

use crate::llm::{ChatMessage, ChatRequest, ContentPart, Reasoning, ToolCallRequest};

/// `max_tokens` when neither the request nor the model's entry sets it.
pub const DEFAULT_MAX_TOKENS: u32 = 4096;

/// Keys the body sets itself; caller parameters may not override them.
const RESERVED_KEYS: [&str; 8] = [
    "model",
    "messages",
    "system",
    "stream",
    "tools",
    "stop_sequences",
    "stop",
    "max_tokens",
];

/// The `max_tokens` of a request, which the API requires: the request's `max_tokens`, else
/// the model's configured output limit, else [`DEFAULT_MAX_TOKENS`]; a default is raised
/// above a thinking budget, which must be below it.
pub fn max_tokens(request: &ChatRequest, model_limit: Option<u32>) -> u32 {
    let given = request
        .parameters
        .get("max_tokens")
        .and_then(Value::as_u64)
        .and_then(|n| u32::try_from(n).ok());
    if let Some(given) = given {
        return given;
    }
    let default = model_limit.unwrap_or(DEFAULT_MAX_TOKENS);
    let thinking_budget = request
        .parameters
        .get("thinking")
        .and_then(|thinking| thinking.get("budget_tokens"))
        .and_then(Value::as_u64)
        .and_then(|n| u32::try_from(n).ok());
    match thinking_budget {
        Some(budget) if budget >= default => budget.saturating_add(DEFAULT_MAX_TOKENS),
        _ => default,
    }
}

/// The streamed request body for `request` with `max_tokens`.
pub fn request_body(request: &ChatRequest, max_tokens: u32) -> Value {
    let mut body = request.passed_parameters(&RESERVED_KEYS);
    body.insert("model".into(), json!(request.model));
    body.insert("max_tokens".into(), json!(max_tokens));
    body.insert("stream".into(), json!(true));
    let system: Vec<&str> = request
        .messages
        .iter()
        .filter_map(|message| match message {
            ChatMessage::System { content } if !content.trim().is_empty() => Some(content.as_str()),
            ChatMessage::System { .. }
            | ChatMessage::User { .. }
            | ChatMessage::Assistant { .. }
            | ChatMessage::Tool { .. } => None,
        })
        .collect();
    if !system.is_empty() {
        body.insert("system".into(), json!(system.join("\n\n")));
    }
    body.insert("messages".into(), Value::Array(turns(&request.messages)));
    if !request.tools.is_empty() {
        let tools = request
            .tools
            .iter()
            .map(|tool| {
                json!({"name": tool.name, "description": tool.description,
                       "input_schema": tool.parameters})
            })
            .collect();
        body.insert("tools".into(), Value::Array(tools));
    }
    let stop = stop_sequences(request);
    if !stop.is_empty() {
        body.insert("stop_sequences".into(), json!(stop));
    }
    if let Some(user) = request.user.as_deref().filter(|u| !u.is_empty()) {
        let metadata = body.entry("metadata").or_insert_with(|| json!({}));
        if let Some(metadata) = metadata.as_object_mut() {
            metadata
                .entry("user_id")
                .or_insert_with(|| Value::String(user.to_owned()));
        }
    }
    Value::Object(body)
}

/// The request's stop sequences and a `stop` parameter written the OpenAI way. The API
/// refuses sequences of whitespace alone.
fn stop_sequences(request: &ChatRequest) -> Vec<String> {
    let from_parameters = match request.parameters.get("stop") {
        Some(Value::String(one)) => vec![one.clone()],
        Some(Value::Array(many)) => many
            .iter()
            .filter_map(Value::as_str)
            .map(str::to_owned)
            .collect(),
        _ => Vec::new(),
    };
    let mut stop: Vec<String> = Vec::new();
    for sequence in request.stop.iter().cloned().chain(from_parameters) {
        if !sequence.trim().is_empty() && !stop.contains(&sequence) {
            stop.push(sequence);
        }
    }
    stop
}

/// The conversation as alternating user and assistant turns: tool results travel in a user
/// turn, consecutive turns of one role are merged, empty ones dropped, and a last assistant
/// turn (a prefill) loses trailing whitespace, which the API refuses there.
fn turns(messages: &[ChatMessage]) -> Vec<Value> {
    let mut turns: Vec<(&'static str, Vec<Value>)> = Vec::new();
    for message in messages {
        let (role, blocks) = match message {
            ChatMessage::System { .. } => continue,
            ChatMessage::User { content } => {
                ("user", content.iter().filter_map(user_block).collect())
            }
            ChatMessage::Assistant {
                content,
                tool_calls,
                reasoning,
            } => (
                "assistant",
                assistant_blocks(content, tool_calls, reasoning),
            ),
            ChatMessage::Tool {
                tool_call_id,
                content,
            } => ("user", vec![tool_result(tool_call_id, content)]),
        };
        if blocks.is_empty() {
            continue;
        }
        match turns.last_mut() {
            Some((last, existing)) if *last == role => existing.extend(blocks),
            _ => turns.push((role, blocks)),
        }
    }
    if let Some(("assistant", blocks)) = turns.last_mut() {
        trim_prefill(blocks);
    }
    turns
        .into_iter()
        .map(|(role, content)| json!({"role": role, "content": content}))
        .collect()
}

fn user_block(part: &ContentPart) -> Option<Value> {
    match part {
        ContentPart::Text { text } if text.is_empty() => None,
        ContentPart::Text { text } => Some(json!({"type": "text", "text": text})),
        ContentPart::Image { url, .. } => Some(image_block(url)),
    }
}

/// A `data:` URL becomes a base64 source; anything else a URL source.
fn image_block(url: &str) -> Value {
    let inline = url
        .strip_prefix("data:")
        .and_then(|rest| rest.split_once(";base64,"));
    match inline {
        Some((media_type, data)) => json!({"type": "image", "source":
            {"type": "base64", "media_type": media_type, "data": data}}),
        None => json!({"type": "image", "source": {"type": "url", "url": url}}),
    }
}

/// Reasoning first (the API wants it before the calls it led to), then text, then calls.
fn assistant_blocks(
    content: &str,
    tool_calls: &[ToolCallRequest],
    reasoning: &[Reasoning],
) -> Vec<Value> {
    let mut blocks: Vec<Value> = reasoning
        .iter()
        .map(|block| match block {
            Reasoning::Thinking {
                thinking,
                signature,
            } => json!({"type": "thinking", "thinking": thinking, "signature": signature}),
            Reasoning::RedactedThinking { data } => {
                json!({"type": "redacted_thinking", "data": data})
            }
        })
        .collect();
    if !content.is_empty() {
        blocks.push(json!({"type": "text", "text": content}));
    }
    blocks.extend(tool_calls.iter().map(|call| {
        json!({"type": "tool_use", "id": call.id, "name": call.name, "input": tool_input(call)})
    }));
    blocks
}

/// The call's arguments as the object the API wants; text that is not a JSON object (a
/// model's malformed arguments) travels as `{}`, its text being in the result already.
fn tool_input(call: &ToolCallRequest) -> Value {
    match serde_json::from_str::<Value>(&call.arguments) {
        Ok(object @ Value::Object(_)) => object,
        Ok(_) | Err(_) => json!({}),
    }
}

fn tool_result(tool_use_id: &str, content: &str) -> Value {
    if content.is_empty() {
        json!({"type": "tool_result", "tool_use_id": tool_use_id})
    } else {
        json!({"type": "tool_result", "tool_use_id": tool_use_id, "content": content})
    }
}

fn trim_prefill(blocks: &mut Vec<Value>) {
    if let Some(Value::String(text)) = blocks
        .last_mut()
        .filter(|block| block["type"] == "text")
        .and_then(|block| block.get_mut("text"))
    {
        let trimmed = text.trim_end().len();
        text.truncate(trimmed);
        if text.is_empty() {
            blocks.pop();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::ToolSpec;

    fn call(id: &str, arguments: &str) -> ToolCallRequest {
        ToolCallRequest {
            id: id.into(),
            name: "current_time".into(),
            arguments: arguments.into(),
        }
    }

    #[test]
    fn system_goes_on_top_and_tool_results_share_one_user_turn() {
        let request = ChatRequest {
            model: "claude".into(),
            messages: vec![
                ChatMessage::System {
                    content: "Be brief.".into(),
                },
                ChatMessage::user_text("time?"),
                ChatMessage::Assistant {
                    content: String::new(),
                    tool_calls: vec![call("toolu_1", "{\"tz\":\"UTC\"}"), call("toolu_2", "")],
                    reasoning: vec![Reasoning::Thinking {
                        thinking: "Two zones.".into(),
                        signature: "sig==".into(),
                    }],
                },
                ChatMessage::Tool {
                    tool_call_id: "toolu_1".into(),
                    content: "12:00".into(),
                },
                ChatMessage::Tool {
                    tool_call_id: "toolu_2".into(),
                    content: String::new(),
                },
            ],
            tools: vec![ToolSpec {
                name: "current_time".into(),
                description: "Now".into(),
                parameters: json!({"type": "object"}),
            }],
            stop: vec!["Observation:".into(), " ".into()],
            ..ChatRequest::default()
        };
        let body = request_body(&request, 1000);
        assert_eq!(body["system"], "Be brief.");
        assert_eq!(body["max_tokens"], 1000);
        assert_eq!(body["stop_sequences"], json!(["Observation:"]));
        assert_eq!(body["tools"][0]["input_schema"], json!({"type": "object"}));
        let messages = body["messages"].as_array().unwrap();
        assert_eq!(messages.len(), 3, "{messages:?}");
        let assistant = messages[1]["content"].as_array().unwrap();
        assert_eq!(assistant[0]["type"], "thinking");
        assert_eq!(assistant[0]["signature"], "sig==");
        assert_eq!(assistant[1]["input"], json!({"tz": "UTC"}));
        assert_eq!(assistant[2]["input"], json!({}));
        let results = messages[2]["content"].as_array().unwrap();
        assert_eq!(results[0]["tool_use_id"], "toolu_1");
        assert_eq!(results[1]["tool_use_id"], "toolu_2");
        assert!(results[1].get("content").is_none());
    }

    #[test]
    fn images_become_base64_or_url_sources() {
        assert_eq!(
            image_block("data:image/png;base64,iVBOR"),
            json!({"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBOR"}})
        );
        assert_eq!(
            image_block("https://example.com/cat.jpg")["source"],
            json!({"type": "url", "url": "https://example.com/cat.jpg"})
        );
    }

    #[test]
    fn max_tokens_comes_from_the_request_the_model_or_the_default() {
        let mut request = ChatRequest::default();
        assert_eq!(max_tokens(&request, None), DEFAULT_MAX_TOKENS);
        assert_eq!(max_tokens(&request, Some(8192)), 8192);
        request.parameters.insert(
            "thinking".into(),
            json!({"type": "enabled", "budget_tokens": 10000}),
        );
        assert_eq!(max_tokens(&request, None), 10000 + DEFAULT_MAX_TOKENS);
        request.parameters.insert("max_tokens".into(), json!(64));
        assert_eq!(max_tokens(&request, Some(8192)), 64);
        let body = request_body(&request, 64);
        assert_eq!(body["thinking"]["budget_tokens"], 10000);
    }

    #[test]
    fn a_trailing_assistant_turn_loses_trailing_whitespace() {
        let request = ChatRequest {
            messages: vec![
                ChatMessage::user_text("hi"),
                ChatMessage::assistant_text("Thought: \n"),
            ],
            ..ChatRequest::default()
        };
        let body = request_body(&request, 10);
        assert_eq!(body["messages"][1]["content"][0]["text"], "Thought:");
    }
}
