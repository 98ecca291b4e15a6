//! The Messages event stream to [`ChatChunk`]s.
//!
//! Events: `message_start` (usage so far), `content_block_start` / `_delta` / `_stop` for
//! text, `tool_use` (its input as `input_json_delta` pieces), `thinking` (with a
//! `signature_delta`) and `redacted_thinking` blocks, `message_delta` (stop reason and
//! cumulative usage), `message_stop`, `ping`, and `error`. Unknown events and block types
//! are skipped, as the API's versioning policy asks of clients.

use std::collections::VecDeque;

use crate::llm::event_source::Event;
use serde::Deserialize;
use serde_json::Value;

use crate::domain::TokenUsage;
use crate::llm::http::{mint_call_id, normalize_arguments, stream_error_failure};
use crate::llm::sse::{cut_short, keep_within, truncate, Decoder};
use crate::llm::{ArgumentsPiece, ChatChunk, LlmError, Reasoning, ToolCallRequest, TurnEnd};

/// One content block as it is assembled.
#[derive(Debug)]
enum Block {
    Text,
    ToolUse {
        /// The call's place among the turn's calls.
        call: u32,
        id: String,
        name: String,
        /// The input as the start event gave it (usually `{}`).
        initial: Value,
        /// The `input_json_delta` pieces.
        json: String,
    },
    Thinking {
        thinking: String,
        signature: String,
    },
    RedactedThinking {
        data: String,
    },
    /// A block this client does not use (server tools, citations …).
    Other,
}

/// Usage as the stream reports it: `message_start` gives the input side, `message_delta`
/// cumulative counts that replace what came before.
#[derive(Debug, Clone, Copy, Default, Deserialize)]
struct WireUsage {
    input_tokens: Option<u64>,
    output_tokens: Option<u64>,
    cache_creation_input_tokens: Option<u64>,
    cache_read_input_tokens: Option<u64>,
}

impl WireUsage {
    fn update(&mut self, newer: WireUsage) {
        self.input_tokens = newer.input_tokens.or(self.input_tokens);
        self.output_tokens = newer.output_tokens.or(self.output_tokens);
        self.cache_creation_input_tokens = newer
            .cache_creation_input_tokens
            .or(self.cache_creation_input_tokens);
        self.cache_read_input_tokens = newer
            .cache_read_input_tokens
            .or(self.cache_read_input_tokens);
    }

    /// Our counts: the prompt is every input token, cached or not (Anthropic's
    /// `input_tokens` counts only those after the last cache breakpoint).
    fn tokens(self) -> TokenUsage {
        let read = self.cache_read_input_tokens.unwrap_or(0);
        let created = self.cache_creation_input_tokens.unwrap_or(0);
        let prompt = self.input_tokens.unwrap_or(0) + read + created;
        let completion = self.output_tokens.unwrap_or(0);
        TokenUsage {
            prompt_tokens: prompt,
            completion_tokens: completion,
            total_tokens: prompt + completion,
            estimated: false,
            cache_read_tokens: read,
            cache_creation_tokens: created,
        }
    }
}

/// The state of one streamed turn.
#[derive(Debug, Default)]
pub(crate) struct Turn {
    /// Blocks by their index, in the order they started.
    blocks: Vec<(u64, Block)>,
    stop_reason: Option<String>,
    usage: WireUsage,
    /// Bytes the model wrote (text, tool input, thinking).
    written: usize,
    /// The most it may write; `None` is unbounded.
    limit: Option<usize>,
}

impl Turn {
    /// A turn whose model may write at most `limit` bytes.
    pub(crate) fn limited(limit: Option<usize>) -> Self {
        Self {
            limit,
            ..Self::default()
        }
    }

    /// Tool calls begun so far: the next one's place among them.
    fn calls(&self) -> u32 {
        let calls = self
            .blocks
            .iter()
            .filter(|(_, block)| matches!(block, Block::ToolUse { .. }))
            .count();
        u32::try_from(calls).unwrap_or(u32::MAX)
    }

    fn block(&mut self, index: u64) -> Option<&mut Block> {
        self.blocks
            .iter_mut()
            .find(|(at, _)| *at == index)
            .map(|(_, block)| block)
    }

    /// Counts `bytes` more written; past the limit, the turn fails.
    fn count(&mut self, bytes: usize) -> Result<(), LlmError> {
        self.written += bytes;
        match self.limit {
            Some(limit) if self.written > limit => Err(LlmError::TooLarge { limit }),
            _ => Ok(()),
        }
    }

    /// Queues answer text, keeping only what fits the limit.
    fn text(
        &mut self,
        mut text: String,
        out: &mut VecDeque<Result<ChatChunk, LlmError>>,
    ) -> Result<(), LlmError> {
        let before = self.written;
        let counted = self.count(text.len());
        if let (Err(_), Some(limit)) = (&counted, self.limit) {
            keep_within(&mut text, before, limit);
        }
        if !text.is_empty() {
            out.push_back(Ok(ChatChunk::Text(text)));
        }
        counted
    }

    fn start_block(
        &mut self,
        index: u64,
        block: Value,
        out: &mut VecDeque<Result<ChatChunk, LlmError>>,
    ) -> Result<(), LlmError> {
        let field = |name: &str| block.get(name).and_then(Value::as_str).unwrap_or_default();
        let started = match field("type") {
            "text" => {
                let text = field("text").to_owned();
                self.blocks.push((index, Block::Text));
                return self.text(text, out);
            }
            "tool_use" => Block::ToolUse {
                call: self.calls(),
                id: field("id").to_owned(),
                name: field("name").to_owned(),
                initial: block.get("input").cloned().unwrap_or(Value::Null),
                json: String::new(),
            },
            "thinking" => {
                let thinking = field("thinking").to_owned();
                if !thinking.is_empty() {
                    out.push_back(Ok(ChatChunk::Reasoning(thinking.clone())));
                }
                Block::Thinking {
                    thinking,
                    signature: field("signature").to_owned(),
                }
            }
            "redacted_thinking" => Block::RedactedThinking {
                data: field("data").to_owned(),
            },
            _ => Block::Other,
        };
        if let Block::ToolUse { call, id, name, .. } = &started {
            out.push_back(Ok(ChatChunk::Arguments(ArgumentsPiece {
                index: *call,
                id: Some(id.clone()).filter(|id| !id.is_empty()),
                name: Some(name.clone()).filter(|name| !name.is_empty()),
                text: String::new(),
            })));
        }
        let bytes = match &started {
            Block::ToolUse { id, name, .. } => id.len() + name.len(),
            Block::Thinking { thinking, .. } => thinking.len(),
            Block::RedactedThinking { data } => data.len(),
            Block::Text | Block::Other => 0,
        };
        self.blocks.push((index, started));
        self.count(bytes)
    }

    fn delta(
        &mut self,
        index: u64,
        delta: &Value,
        out: &mut VecDeque<Result<ChatChunk, LlmError>>,
    ) -> Result<(), LlmError> {
        let field = |name: &str| delta.get(name).and_then(Value::as_str).unwrap_or_default();
        let kind = field("type");
        let piece = match kind {
            "text_delta" => field("text"),
            "input_json_delta" => field("partial_json"),
            "thinking_delta" => field("thinking"),
            "signature_delta" => field("signature"),
            // Citations and what later versions add carry no text of ours.
            _ => return Ok(()),
        }
        .to_owned();
        match (self.block(index), kind) {
            (Some(Block::Text) | None, "text_delta") => return self.text(piece, out),
            (Some(Block::ToolUse { call, json, .. }), "input_json_delta") => {
                json.push_str(&piece);
                // The block's start named the call; its pieces go without.
                out.push_back(Ok(ChatChunk::Arguments(ArgumentsPiece {
                    index: *call,
                    text: piece.clone(),
                    ..ArgumentsPiece::default()
                })));
            }
            (Some(Block::Thinking { thinking, .. }), "thinking_delta") => {
                thinking.push_str(&piece);
                out.push_back(Ok(ChatChunk::Reasoning(piece.clone())));
            }
            (Some(Block::Thinking { signature, .. }), "signature_delta") => {
                signature.push_str(&piece);
            }
            (block, _) => {
                return Err(LlmError::Decode {
                    message: format!(
                        "a {kind} for content block {index}, which is {}",
                        block
                            .map_or("not open".to_owned(), |b| format!("{b:?}"))
                            .chars()
                            .take(40)
                            .collect::<String>()
                    ),
                })
            }
        }
        self.count(piece.len())
    }

    fn usage(&mut self, usage: Option<&Value>, out: &mut VecDeque<Result<ChatChunk, LlmError>>) {
        let Some(usage) = usage.and_then(|u| WireUsage::deserialize(u).ok()) else {
            return;
        };
        self.usage.update(usage);
        out.push_back(Ok(ChatChunk::Usage(self.usage.tokens())));
    }
}

/// The failure an `error` event names; the same classes an HTTP status would give.
fn stream_failure(error: &Value) -> LlmError {
    stream_error_failure(error)
}

impl Decoder for Turn {
    fn feed(
        &mut self,
        event: &Event,
        out: &mut VecDeque<Result<ChatChunk, LlmError>>,
    ) -> Result<bool, LlmError> {
        let data = event.data.trim();
        if data.is_empty() {
            return Ok(false);
        }
        let payload: Value = serde_json::from_str(data).map_err(|err| LlmError::Decode {
            message: format!("bad stream event ({err}): {}", truncate(data, 200)),
        })?;
        let kind = payload
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or(event.event.as_str());
        let index = payload.get("index").and_then(Value::as_u64).unwrap_or(0);
        match kind {
            "message_start" => {
                let usage = payload.get("message").and_then(|m| m.get("usage"));
                self.usage(usage, out);
            }
            "content_block_start" => {
                let block = payload.get("content_block").cloned().unwrap_or(Value::Null);
                self.start_block(index, block, out)?;
            }
            "content_block_delta" => {
                let delta = payload.get("delta").cloned().unwrap_or(Value::Null);
                self.delta(index, &delta, out)?;
            }
            "message_delta" => {
                if let Some(reason) = payload
                    .get("delta")
                    .and_then(|d| d.get("stop_reason"))
                    .and_then(Value::as_str)
                {
                    self.stop_reason = Some(reason.to_owned());
                }
                self.usage(payload.get("usage"), out);
            }
            "message_stop" => return Ok(true),
            "error" => {
                let error = payload.get("error").cloned().unwrap_or(payload);
                return Err(stream_failure(&error));
            }
            // `ping`, `content_block_stop`, and whatever a later version adds.
            _ => {}
        }
        Ok(false)
    }

    fn end(self) -> TurnEnd {
        let mut end = TurnEnd {
            finish_reason: self.stop_reason,
            ..TurnEnd::default()
        };
        for (_, block) in self.blocks {
            match block {
                Block::ToolUse {
                    id,
                    name,
                    initial,
                    json,
                    ..
                } => end.tool_calls.push(ToolCallRequest {
                    id: if id.is_empty() { mint_call_id() } else { id },
                    name,
                    arguments: normalize_arguments(if json.trim().is_empty() {
                        initial_input(initial)
                    } else {
                        json
                    }),
                }),
                Block::Thinking {
                    thinking,
                    signature,
                } => end.reasoning.push(Reasoning::Thinking {
                    thinking,
                    signature,
                }),
                Block::RedactedThinking { data } => {
                    end.reasoning.push(Reasoning::RedactedThinking { data });
                }
                Block::Text | Block::Other => {}
            }
        }
        end
    }

    /// Complete once the stop reason came (some proxies drop `message_stop`).
    fn end_at_eof(self) -> Result<TurnEnd, LlmError> {
        if self.stop_reason.is_some() {
            Ok(self.end())
        } else {
            Err(cut_short())
        }
    }
}

/// A start event's input when no delta followed: an object given whole, or nothing.
fn initial_input(initial: Value) -> String {
    match initial {
        Value::Object(map) if !map.is_empty() => Value::Object(map).to_string(),
        Value::Object(_)
        | Value::Null
        | Value::Bool(_)
        | Value::Number(_)
        | Value::String(_)
        | Value::Array(_) => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(name: &str, data: &str) -> Event {
        Event {
            event: name.to_owned(),
            data: data.to_owned(),
        }
    }

    /// Feeds `name: data` pairs; returns the chunks and how the last feed ended.
    fn feed(turn: &mut Turn, events: &[(&str, &str)]) -> (Vec<ChatChunk>, Result<bool, String>) {
        let mut out = VecDeque::new();
        let mut result = Ok(false);
        for (name, data) in events {
            result = turn
                .feed(&event(name, data), &mut out)
                .map_err(|e| e.to_string());
            if result.is_err() {
                break;
            }
        }
        (out.into_iter().map(Result::unwrap).collect(), result)
    }

    #[test]
    fn usage_counts_cached_prompt_tokens_and_follows_message_delta() {
        let mut turn = Turn::default();
        let (chunks, _) = feed(
            &mut turn,
            &[
                (
                    "message_start",
                    r#"{"type":"message_start","message":{"usage":{"input_tokens":10,"cache_read_input_tokens":100,"cache_creation_input_tokens":5,"output_tokens":1}}}"#,
                ),
                (
                    "message_delta",
                    r#"{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":42}}"#,
                ),
            ],
        );
        let ChatChunk::Usage(last) = chunks.last().unwrap() else {
            panic!("{chunks:?}");
        };
        assert_eq!((last.prompt_tokens, last.completion_tokens), (115, 42));
        assert_eq!(
            (last.cache_read_tokens, last.cache_creation_tokens),
            (100, 5)
        );
        assert_eq!(turn.end().finish_reason.as_deref(), Some("end_turn"));
    }

    #[test]
    fn a_tool_without_input_gets_an_empty_object_and_thinking_is_not_text() {
        let mut turn = Turn::default();
        let (chunks, result) = feed(
            &mut turn,
            &[
                (
                    "content_block_start",
                    r#"{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":""}}"#,
                ),
                (
                    "content_block_delta",
                    r#"{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"Need the time."}}"#,
                ),
                (
                    "content_block_delta",
                    r#"{"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"EqQB"}}"#,
                ),
                (
                    "content_block_start",
                    r#"{"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_9","name":"current_time","input":{}}}"#,
                ),
                (
                    "content_block_stop",
                    r#"{"type":"content_block_stop","index":1}"#,
                ),
                ("message_stop", r#"{"type":"message_stop"}"#),
            ],
        );
        // No text: the thinking as reasoning, the call's start as a piece of it.
        assert_eq!(
            chunks,
            vec![
                ChatChunk::Reasoning("Need the time.".into()),
                ChatChunk::Arguments(ArgumentsPiece {
                    index: 0,
                    id: Some("toolu_9".into()),
                    name: Some("current_time".into()),
                    text: String::new(),
                }),
            ]
        );
        assert_eq!(result, Ok(true));
        let end = turn.end();
        assert_eq!(end.tool_calls[0].arguments, "{}");
        assert_eq!(end.tool_calls[0].id, "toolu_9");
        assert_eq!(
            end.reasoning,
            vec![Reasoning::Thinking {
                thinking: "Need the time.".into(),
                signature: "EqQB".into()
            }]
        );
    }

    #[test]
    fn errors_in_the_stream_keep_their_class() {
        let mut turn = Turn::default();
        let (_, result) = feed(
            &mut turn,
            &[(
                "error",
                r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
            )],
        );
        assert_eq!(
            result,
            Err("the LLM server failed (HTTP 529): Overloaded".to_owned())
        );
        let failure =
            stream_failure(&serde_json::json!({"type": "overloaded_error", "message": "x"}));
        assert!(failure.is_retryable());
    }

    /// Feeds a turn limited to 8 bytes one block of `kind` (`text` or `thinking`), its
    /// delta carrying `text`.
    fn one_block_within_8_bytes(kind: &str, text: &str) -> (Vec<ChatChunk>, Result<bool, String>) {
        let start = format!(
            r#"{{"type":"content_block_start","index":0,"content_block":{{"type":"{kind}","{kind}":""}}}}"#
        );
        let delta = format!(
            r#"{{"type":"content_block_delta","index":0,"delta":{{"type":"{kind}_delta","{kind}":"{text}"}}}}"#
        );
        feed(
            &mut Turn::limited(Some(8)),
            &[
                ("content_block_start", &start),
                ("content_block_delta", &delta),
            ],
        )
    }

    #[test]
    fn the_output_limit_counts_thinking_and_keeps_text_that_fit() {
        let (chunks, result) = one_block_within_8_bytes("text", "hello world");
        assert_eq!(chunks, vec![ChatChunk::Text("hello wo".into())]);
        assert!(result.unwrap_err().contains("max_answer_bytes"));
        let (_, result) = one_block_within_8_bytes("thinking", "a long thought");
        assert!(result.is_err());
    }

    #[test]
    fn a_stream_cut_before_its_stop_reason_is_an_error() {
        let mut turn = Turn::default();
        let _ = feed(
            &mut turn,
            &[(
                "content_block_start",
                r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":"par"}}"#,
            )],
        );
        assert!(turn.end_at_eof().is_err());
    }
}
