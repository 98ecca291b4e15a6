//! The floor: the same two model calls a run makes, made directly against the scripted
//! model, so what the service adds can be told from what the model takes.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use futures::StreamExt;
use serde_json::{json, Value};

/// The two calls of the bench's workload (a call of `current_time`, then the answer),
/// made directly.
pub struct Direct {
    http: reqwest::Client,
    url: String,
    first: Value,
    second: Value,
}

impl Direct {
    pub fn new(llm: SocketAddr) -> Self {
        let tool = json!({"type": "function", "function": {"name": "current_time", "description": "time",
            "parameters": {"type": "object", "properties": {}}}});
        let first = json!({"model": "bench-model", "stream": true, "stream_options": {"include_usage": true},
            "messages": [{"role": "user", "content": "What time is it?"}], "tools": [tool]});
        let second = json!({"model": "bench-model", "stream": true, "stream_options": {"include_usage": true},
            "messages": [{"role": "user", "content": "What time is it?"},
                         {"role": "assistant", "content": null, "tool_calls": [{"id": "c", "type": "function",
                          "function": {"name": "current_time", "arguments": "{}"}}]},
                         {"role": "tool", "tool_call_id": "c", "content": "12:00"}], "tools": [tool]});
        Self {
            http: reqwest::Client::new(),
            url: format!("http://{llm}/v1/chat/completions"),
            first,
            second,
        }
    }

    /// Both calls, one after the other: their whole duration and the time until the
    /// second one's first answer chunk.
    pub async fn pair(&self) -> anyhow::Result<(Duration, Duration)> {
        let started = Instant::now();
        self.read_stream(&self.first).await?;
        let (first_chunk, _) = self.read_stream(&self.second).await?;
        Ok((started.elapsed(), first_chunk.duration_since(started)))
    }

    /// Reads a streamed answer; returns when its first content chunk and its end arrived.
    async fn read_stream(&self, body: &Value) -> anyhow::Result<(Instant, Instant)> {
        let response = self.http.post(&self.url).json(body).send().await?;
        let mut bytes = response.bytes_stream();
        let mut first = None;
        while let Some(chunk) = bytes.next().await {
            let chunk = chunk?;
            let needle = b"\"content\":\"w";
            if first.is_none() && chunk.windows(needle.len()).any(|w| w == needle) {
                first = Some(Instant::now());
            }
        }
        let end = Instant::now();
        Ok((first.unwrap_or(end), end))
    }
}
