//! SSE frames of `chat.completion.chunk`s, in the shapes real servers send.

use serde_json::{json, Value};

/// One tool call as the scripted model streams it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScriptedCall {
    /// Call id.
    pub id: String,
    /// Tool name.
    pub name: String,
    /// The argument text, in the pieces it is streamed in.
    pub argument_chunks: Vec<String>,
}

fn chunk(model: &str, delta: Value, finish: Option<&str>) -> String {
    let chunk = json!({
        "id": "chatcmpl-mock", "object": "chat.completion.chunk", "created": 1, "model": model,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]
    });
    format!("data: {chunk}\n\n")
}

/// The frames of one turn: a role chunk, the text pieces, a keep-alive comment, each tool
/// call (its id and name first, then its argument pieces), a finish chunk, a usage chunk
/// with empty choices (CRLF-framed, as some servers do) and `[DONE]`.
pub fn sse_frames(
    model: &str,
    text: &[&str],
    calls: &[ScriptedCall],
    usage: (u64, u64),
) -> Vec<String> {
    let mut frames = vec![chunk(
        model,
        json!({"role": "assistant", "content": ""}),
        None,
    )];
    frames.extend(
        text.iter()
            .map(|piece| chunk(model, json!({"content": piece}), None)),
    );
    frames.push(": keep-alive\r\n\r\n".to_owned());
    for (index, call) in calls.iter().enumerate() {
        let head = json!({"tool_calls": [{"index": index, "id": call.id, "type": "function",
                                          "function": {"name": call.name, "arguments": ""}}]});
        frames.push(chunk(model, head, None));
        for piece in &call.argument_chunks {
            let delta = json!({"tool_calls": [{"index": index, "function": {"arguments": piece}}]});
            frames.push(chunk(model, delta, None));
        }
    }
    let finish = if calls.is_empty() {
        "stop"
    } else {
        "tool_calls"
    };
    frames.push(chunk(model, json!({}), Some(finish)));
    let usage = json!({
        "id": "chatcmpl-mock", "object": "chat.completion.chunk", "created": 1, "model": model,
        "choices": [],
        "usage": {"prompt_tokens": usage.0, "completion_tokens": usage.1, "total_tokens": usage.0 + usage.1}
    });
    frames.push(format!("data: {usage}\r\n\r\n"));
    frames.push("data: [DONE]\n\n".to_owned());
    frames
}

/// Chunks of reasoning as reasoning parsers send it: `reasoning_content` beside a null
/// `content`.
pub fn reasoning_frames(model: &str, pieces: &[&str]) -> Vec<String> {
    pieces
        .iter()
        .map(|piece| {
            chunk(
                model,
                json!({"content": null, "reasoning_content": piece}),
                None,
            )
        })
        .collect()
}
