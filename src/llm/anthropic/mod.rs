//! Anthropic's Messages API over HTTP.
//!
//! `wire` builds the request (system prompt on top, alternating turns, `tool_use` and
//! `tool_result` blocks, thinking handed back) and `stream` reads the typed event stream
//! into [`super::ChatChunk`]s. Thinking is never answer text.

mod client;
mod stream;
mod wire;

pub use client::AnthropicClient;
pub use wire::{max_tokens, request_body, DEFAULT_MAX_TOKENS};
