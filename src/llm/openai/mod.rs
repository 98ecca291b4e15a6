//! OpenAI-compatible Chat Completions over HTTP: OpenAI, vLLM, Ollama, llama.cpp, DeepSeek …
//!
//! `wire` holds the JSON shapes, `stream` turns SSE chunks into [`super::ChatChunk`]s
//! (merging tool-call deltas), and `client` does the HTTP and error classification.

mod client;
mod stream;
mod wire;

pub use client::OpenAiClient;
pub use stream::ToolCallAccumulator;
pub use wire::request_body;
pub use wire::{FunctionDelta, ToolCallDelta};
