//! OpenAI-compatible Chat Completions over HTTP: OpenAI, vLLM, Ollama, llama.cpp, DeepSeek …
//!
//! `body` writes the request, `wire` holds the answers' JSON shapes, `stream` turns SSE chunks into [`super::ChatChunk`]s
//! (merging tool-call deltas), and `client` does the HTTP and error classification.

mod body;
mod client;
mod stream;
mod wire;

pub use body::request_body;
pub use client::OpenAiClient;
pub use stream::ToolCallAccumulator;
pub use wire::{FunctionDelta, ToolCallDelta};
