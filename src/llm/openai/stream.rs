//! Server-sent events to [`ChatChunk`]s: text as it arrives, tool calls merged at the end.

use std::time::Duration;

use eventsource_stream::Eventsource;
use futures::{Stream, StreamExt};

use super::wire::{error_message, Chunk, ToolCallDelta};
use crate::domain::TokenUsage;
use crate::llm::{ChatChunk, ChatStream, LlmError, ToolCallRequest, TurnEnd};

/// A call id for servers that do not send one.
pub(crate) fn mint_call_id() -> String {
    format!("call_{}", uuid::Uuid::new_v4().simple())
}

/// Empty argument text means "no arguments"; the model sees `{}` either way.
pub(crate) fn normalize_arguments(arguments: String) -> String {
    if arguments.trim().is_empty() {
        "{}".to_owned()
    } else {
        arguments
    }
}

#[derive(Debug, Default)]
struct Slot {
    index: Option<u32>,
    id: String,
    name: String,
    arguments: String,
}

/// Merges streamed tool-call deltas into whole calls.
///
/// Servers differ: most send `index` and send `id` and `name` once, some repeat `id` and
/// `name` in every delta, some leave out `index`, and some send each whole call in one delta.
/// A delta joins the call with its index, else the call with its id, else (carrying neither,
/// and no new name) the most recent call.
#[derive(Debug, Default)]
pub struct ToolCallAccumulator {
    slots: Vec<Slot>,
}

impl ToolCallAccumulator {
    /// Adds one delta.
    pub fn apply(&mut self, delta: ToolCallDelta) {
        let id = delta.id.unwrap_or_default();
        let (name, arguments) = delta
            .function
            .map(|f| (f.name.unwrap_or_default(), f.arguments.unwrap_or_default()))
            .unwrap_or_default();
        let slot = self.slot_for(delta.index, &id, &name);
        if slot.id.is_empty() {
            slot.id = id;
        }
        if slot.name.is_empty() {
            slot.name = name;
        }
        slot.arguments.push_str(&arguments);
    }

    fn slot_for(&mut self, index: Option<u32>, id: &str, name: &str) -> &mut Slot {
        let found = match index {
            Some(index) => self.slots.iter().position(|slot| {
                slot.index == Some(index) && (id.is_empty() || slot.id.is_empty() || slot.id == id)
            }),
            None if !id.is_empty() => self.slots.iter().position(|slot| slot.id == id),
            None => self.slots.len().checked_sub(1).filter(|last| {
                let last_name = &self.slots[*last].name;
                name.is_empty() || last_name.is_empty() || last_name == name
            }),
        };
        let position = found.unwrap_or_else(|| {
            self.slots.push(Slot {
                index,
                ..Slot::default()
            });
            self.slots.len() - 1
        });
        &mut self.slots[position]
    }

    /// The merged calls in the order they began.
    pub fn finish(self) -> Vec<ToolCallRequest> {
        self.slots
            .into_iter()
            .map(|slot| ToolCallRequest {
                id: if slot.id.is_empty() {
                    mint_call_id()
                } else {
                    slot.id
                },
                name: slot.name,
                arguments: normalize_arguments(slot.arguments),
            })
            .collect()
    }
}

/// What one SSE payload contributed.
enum Fed {
    Text(String),
    Nothing,
    Done,
}

/// Turn state accumulated over the chunks of one response.
#[derive(Default)]
struct TurnState {
    calls: ToolCallAccumulator,
    usage: Option<TokenUsage>,
    finish_reason: Option<String>,
}

impl TurnState {
    fn feed(&mut self, data: &str) -> Result<Fed, LlmError> {
        let data = data.trim();
        if data.is_empty() {
            return Ok(Fed::Nothing);
        }
        if data == "[DONE]" {
            return Ok(Fed::Done);
        }
        let chunk: Chunk = serde_json::from_str(data).map_err(|err| LlmError::Decode {
            message: format!("bad stream chunk ({err}): {}", truncate(data, 200)),
        })?;
        if let Some(error) = chunk.error {
            return Err(LlmError::Stream {
                message: error_message(&error),
            });
        }
        if let Some(usage) = chunk.usage {
            self.usage = Some(usage.into());
        }
        let mut text = String::new();
        for choice in chunk.choices {
            if let Some(reason) = choice.finish_reason {
                self.finish_reason = Some(reason);
            }
            let Some(delta) = choice.delta else { continue };
            for call in delta.tool_calls.unwrap_or_default() {
                self.calls.apply(call);
            }
            text.push_str(delta.content.as_deref().unwrap_or_default());
        }
        Ok(if text.is_empty() {
            Fed::Nothing
        } else {
            Fed::Text(text)
        })
    }

    fn end(self) -> TurnEnd {
        TurnEnd {
            tool_calls: self.calls.finish(),
            usage: self.usage,
            finish_reason: self.finish_reason,
        }
    }

    /// The byte stream ended: fine after a finish reason (some servers omit `[DONE]`),
    /// otherwise the connection dropped mid-answer.
    fn end_at_eof(self) -> Result<TurnEnd, LlmError> {
        if self.finish_reason.is_some() {
            Ok(self.end())
        } else {
            Err(LlmError::Stream {
                message: "the connection closed before the response was complete".to_owned(),
            })
        }
    }
}

pub(crate) fn truncate(text: &str, max: usize) -> &str {
    match text.char_indices().nth(max) {
        Some((cut, _)) => &text[..cut],
        None => text,
    }
}

type EventStream = std::pin::Pin<
    Box<
        dyn Stream<
                Item = Result<
                    eventsource_stream::Event,
                    eventsource_stream::EventStreamError<reqwest::Error>,
                >,
            > + Send,
    >,
>;

struct Reader {
    events: EventStream,
    state: Option<TurnState>,
    first_byte: Option<Duration>,
}

impl Reader {
    async fn next_event(
        &mut self,
    ) -> Result<
        Option<
            Result<eventsource_stream::Event, eventsource_stream::EventStreamError<reqwest::Error>>,
        >,
        LlmError,
    > {
        match self.first_byte.take() {
            Some(after) => tokio::time::timeout(after, self.events.next())
                .await
                .map_err(|_| LlmError::Timeout {
                    phase: "first byte",
                    after,
                }),
            None => Ok(self.events.next().await),
        }
    }

    /// The next chunk for the caller, or `None` once the turn has ended.
    async fn next_chunk(&mut self) -> Option<Result<ChatChunk, LlmError>> {
        loop {
            self.state.as_ref()?;
            let event = match self.next_event().await {
                Ok(Some(Ok(event))) => event,
                Ok(Some(Err(err))) => return self.fail(stream_error(err)),
                Ok(None) => {
                    let state = self.state.take()?;
                    return Some(state.end_at_eof().map(ChatChunk::Finished));
                }
                Err(err) => return self.fail(err),
            };
            if event.event == "error" {
                return self.fail(LlmError::Stream {
                    message: event.data,
                });
            }
            let state = self.state.as_mut()?;
            match state.feed(&event.data) {
                Ok(Fed::Text(text)) => return Some(Ok(ChatChunk::Text(text))),
                Ok(Fed::Nothing) => continue,
                Ok(Fed::Done) => {
                    let state = self.state.take()?;
                    return Some(Ok(ChatChunk::Finished(state.end())));
                }
                Err(err) => return self.fail(err),
            }
        }
    }

    fn fail(&mut self, err: LlmError) -> Option<Result<ChatChunk, LlmError>> {
        self.state = None;
        Some(Err(err))
    }
}

fn stream_error(err: eventsource_stream::EventStreamError<reqwest::Error>) -> LlmError {
    if let eventsource_stream::EventStreamError::Transport(transport) = &err {
        if transport.is_timeout() {
            return LlmError::Stream {
                message: "the stream went silent for longer than the idle timeout".to_owned(),
            };
        }
    }
    LlmError::Stream {
        message: err.to_string(),
    }
}

/// Reads an SSE response body as a chat stream.
pub(crate) fn chat_stream(response: reqwest::Response, first_byte: Duration) -> ChatStream {
    let reader = Reader {
        events: Box::pin(response.bytes_stream().eventsource()),
        state: Some(TurnState::default()),
        first_byte: Some(first_byte),
    };
    Box::pin(futures::stream::unfold(reader, |mut reader| async move {
        let chunk = reader.next_chunk().await?;
        Some((chunk, reader))
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::openai::wire::FunctionDelta;

    fn delta(
        index: Option<u32>,
        id: Option<&str>,
        name: Option<&str>,
        args: &str,
    ) -> ToolCallDelta {
        ToolCallDelta {
            index,
            id: id.map(str::to_owned),
            function: Some(FunctionDelta {
                name: name.map(str::to_owned),
                arguments: Some(args.to_owned()),
            }),
        }
    }

    fn merged(deltas: Vec<ToolCallDelta>) -> Vec<(String, String, String)> {
        let mut acc = ToolCallAccumulator::default();
        deltas.into_iter().for_each(|d| acc.apply(d));
        acc.finish()
            .into_iter()
            .map(|c| (c.id, c.name, c.arguments))
            .collect()
    }

    fn call(id: &str, name: &str, args: &str) -> (String, String, String) {
        (id.into(), name.into(), args.into())
    }

    #[test]
    fn deltas_merge_by_index_openai_style() {
        let calls = merged(vec![
            delta(Some(0), Some("a"), Some("time"), ""),
            delta(Some(1), Some("b"), Some("maths"), ""),
            delta(Some(0), None, None, "{\"tz\":"),
            delta(Some(1), None, None, "{\"x\":1}"),
            delta(Some(0), None, None, "\"UTC\"}"),
        ]);
        assert_eq!(
            calls,
            vec![
                call("a", "time", "{\"tz\":\"UTC\"}"),
                call("b", "maths", "{\"x\":1}")
            ]
        );
    }

    #[test]
    fn id_and_name_repeated_in_every_delta_are_not_duplicated() {
        let calls = merged(vec![
            delta(Some(0), Some("a"), Some("time"), "{\"tz\""),
            delta(Some(0), Some("a"), Some("time"), ":\"UTC\"}"),
        ]);
        assert_eq!(calls, vec![call("a", "time", "{\"tz\":\"UTC\"}")]);
    }

    #[test]
    fn missing_index_falls_back_to_id_then_to_the_latest_call() {
        let calls = merged(vec![
            delta(None, Some("a"), Some("time"), "{"),
            delta(None, None, None, "}"),
            delta(None, Some("b"), Some("time"), "{\"x\":"),
            delta(None, Some("b"), None, "2}"),
        ]);
        assert_eq!(
            calls,
            vec![call("a", "time", "{}"), call("b", "time", "{\"x\":2}")]
        );
    }

    #[test]
    fn whole_calls_sharing_index_zero_stay_separate() {
        let calls = merged(vec![
            delta(Some(0), Some("a"), Some("time"), "{}"),
            delta(Some(0), Some("b"), Some("maths"), "{\"e\":\"1\"}"),
        ]);
        assert_eq!(
            calls,
            vec![call("a", "time", "{}"), call("b", "maths", "{\"e\":\"1\"}")]
        );
    }

    #[test]
    fn calls_without_ids_get_minted_ones_and_empty_arguments_become_an_object() {
        let calls = merged(vec![delta(Some(0), None, Some("time"), "")]);
        assert!(calls[0].0.starts_with("call_"));
        assert_eq!(calls[0].2, "{}");
    }

    #[test]
    fn error_objects_in_the_stream_are_errors() {
        let mut state = TurnState::default();
        let err = state
            .feed(r#"{"error":{"message":"overloaded","type":"server_error"}}"#)
            .err()
            .map(|e| e.to_string());
        assert_eq!(err.as_deref(), Some("the LLM stream failed: overloaded"));
    }

    #[test]
    fn usage_in_a_chunk_with_empty_choices_is_kept() {
        let mut state = TurnState::default();
        assert!(matches!(
            state.feed(r#"{"choices":[{"delta":{"content":"hi","reasoning_content":"hmm"},"finish_reason":"stop"}]}"#),
            Ok(Fed::Text(t)) if t == "hi"
        ));
        assert!(matches!(
            state.feed(r#"{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}}"#),
            Ok(Fed::Nothing)
        ));
        let end = state.end_at_eof().unwrap();
        assert_eq!(end.usage.unwrap().total_tokens, 5);
    }

    #[test]
    fn a_stream_cut_before_any_finish_reason_is_an_error() {
        let mut state = TurnState::default();
        let _ = state.feed(r#"{"choices":[{"delta":{"content":"par"}}]}"#);
        assert!(state.end_at_eof().is_err());
    }
}
