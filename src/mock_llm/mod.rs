//! A scripted OpenAI-compatible Chat Completions server, for benchmarks and tests.
//!
//! It speaks the real wire format (SSE `chat.completion.chunk`s, tool-call deltas split
//! across chunks, a usage chunk with empty choices, keep-alive comments, CRLF framing) and is
//! stateless: it reads how many tool rounds a conversation has had from the request itself,
//! so any number of runs can share it. Delays are configurable so it can stand in for a
//! slow model; with none it answers at once, and what a benchmark measures is the runner.

mod frames;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::header;
use axum::response::Response;
use axum::routing::post;
use axum::serve::ListenerExt;
use axum::{Json, Router};
use futures::StreamExt;
use serde_json::Value;
use tokio::net::TcpListener;

pub use frames::{reasoning_frames, sse_frames, ScriptedCall};

/// How the scripted model behaves.
#[derive(Debug, Clone)]
pub struct MockSettings {
    /// Tool rounds before the answer.
    pub rounds: u32,
    /// Tool calls per round.
    pub parallel_tools: u32,
    /// Tool every call names.
    pub tool: String,
    /// Arguments of every call, as JSON text.
    pub arguments: String,
    /// Pieces each call's arguments are streamed in.
    pub argument_pieces: u32,
    /// Reasoning streamed as `reasoning_content` before each turn (none when empty), in
    /// pieces of a word.
    pub reasoning: String,
    /// Chunks the final answer is split into.
    pub answer_chunks: u32,
    /// Bytes of each answer chunk; 0 sends short words (`word7 `).
    pub chunk_bytes: usize,
    /// Wait before the first chunk.
    pub time_to_first_token: Duration,
    /// Wait before each later chunk.
    pub chunk_delay: Duration,
}

impl Default for MockSettings {
    fn default() -> Self {
        Self {
            rounds: 1,
            parallel_tools: 1,
            tool: "current_time".to_owned(),
            arguments: r#"{"timezone": "UTC"}"#.to_owned(),
            argument_pieces: 2,
            reasoning: String::new(),
            answer_chunks: 20,
            chunk_bytes: 0,
            time_to_first_token: Duration::ZERO,
            chunk_delay: Duration::ZERO,
        }
    }
}

/// The server's routes; `POST /v1/chat/completions` (and without `/v1`).
pub fn router(settings: MockSettings) -> Router {
    let settings = Arc::new(settings);
    Router::new()
        .route("/v1/chat/completions", post(completions))
        .route("/chat/completions", post(completions))
        // Prompts as large as a run may send (a round of thousands of tool results).
        .layer(axum::extract::DefaultBodyLimit::max(256 << 20))
        .with_state(settings)
}

/// Serves on `listener` until the process ends.
pub async fn serve(listener: TcpListener, settings: MockSettings) -> std::io::Result<()> {
    // Chunks are small and sent one by one; without TCP_NODELAY, Nagle's algorithm and
    // delayed ACKs add tens of milliseconds per turn.
    let listener = listener.tap_io(|stream| {
        let _ = stream.set_nodelay(true);
    });
    axum::serve(listener, router(settings)).await
}

/// Starts the server on an ephemeral loopback port in the background; returns its address.
pub async fn spawn(settings: MockSettings) -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(serve(listener, settings));
    Ok(addr)
}

/// Tool rounds the conversation has had since the user's last message.
fn rounds_done(body: &Value) -> u32 {
    let messages = body["messages"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    let since_user = messages
        .iter()
        .rev()
        .take_while(|m| m["role"] != "user")
        .filter(|m| m["role"] == "assistant" && m.get("tool_calls").is_some())
        .count();
    u32::try_from(since_user).unwrap_or(u32::MAX)
}

async fn completions(
    State(settings): State<Arc<MockSettings>>,
    Json(body): Json<Value>,
) -> Response {
    let model = body["model"].as_str().unwrap_or("mock").to_owned();
    let done = rounds_done(&body);
    let offers_tools = body.get("tools").is_some();
    let mut frames = if done < settings.rounds && offers_tools {
        let calls: Vec<ScriptedCall> = (0..settings.parallel_tools)
            .map(|i| ScriptedCall {
                id: format!("call_{done}_{i}"),
                name: settings.tool.clone(),
                argument_chunks: split_in(&settings.arguments, settings.argument_pieces),
            })
            .collect();
        sse_frames(&model, &[], &calls, (40, 10))
    } else {
        let text: Vec<String> = (0..settings.answer_chunks)
            .map(|i| chunk_text(i, settings.chunk_bytes))
            .collect();
        let text: Vec<&str> = text.iter().map(String::as_str).collect();
        sse_frames(&model, &text, &[], (60, u64::from(settings.answer_chunks)))
    };
    if !settings.reasoning.is_empty() {
        let pieces: Vec<&str> = settings.reasoning.split_inclusive(' ').collect();
        frames.splice(1..1, reasoning_frames(&model, &pieces));
    }
    paced(frames, settings.time_to_first_token, settings.chunk_delay)
}

/// Answer chunk `i`: a short word, or `bytes` bytes of words.
fn chunk_text(i: u32, bytes: usize) -> String {
    let word = format!("word{i} ");
    if bytes == 0 {
        return word;
    }
    let mut text = word.repeat(bytes / word.len() + 1);
    text.truncate(bytes);
    text
}

/// `text` in `pieces` parts of about one length (at least one), cut at characters.
fn split_in(text: &str, pieces: u32) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    let pieces = usize::try_from(pieces.max(1)).unwrap_or(1);
    let size = chars.len().div_ceil(pieces).max(1);
    let mut parts: Vec<String> = chars.chunks(size).map(|c| c.iter().collect()).collect();
    parts.resize(pieces.max(parts.len()), String::new());
    parts
}

/// An SSE response sending `frames` after `first`, then one every `each`.
fn paced(frames: Vec<String>, first: Duration, each: Duration) -> Response {
    let stream =
        futures::stream::iter(frames.into_iter().enumerate()).then(move |(i, frame)| async move {
            let wait = if i == 0 { first } else { each };
            if !wait.is_zero() {
                tokio::time::sleep(wait).await;
            }
            Ok::<_, std::io::Error>(Bytes::from(frame))
        });
    let mut response = Response::new(Body::from_stream(stream));
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("text/event-stream"),
    );
    response
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn rounds_are_counted_since_the_last_user_message() {
        let body = json!({"messages": [
            {"role": "user", "content": "a"},
            {"role": "assistant", "content": "x", "tool_calls": [{}]},
            {"role": "tool", "content": "r"},
            {"role": "user", "content": "b"},
            {"role": "assistant", "content": "", "tool_calls": [{}]},
            {"role": "tool", "content": "r"},
        ]});
        assert_eq!(rounds_done(&body), 1);
    }
}
