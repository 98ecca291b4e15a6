//! Server-sent events to [`ChatChunk`]s: text as it arrives, tool calls merged at the end.

use std::collections::VecDeque;

use hyper::body::Bytes;
use std::time::Duration;

use eventsource_stream::Eventsource;
use futures::{Stream, StreamExt};

use super::wire::{error_message, mint_call_id, normalize_arguments, Chunk, ToolCallDelta};
use crate::llm::error::IDLE_PHASE;
use crate::llm::{ChatChunk, ChatStream, LlmError, ToolCallRequest, TurnEnd};

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

/// Turn state accumulated over the chunks of one response.
#[derive(Default)]
struct TurnState {
    calls: ToolCallAccumulator,
    finish_reason: Option<String>,
    /// Bytes of text and tool calls the model wrote so far.
    written: usize,
    /// The most it may write; `None` is unbounded.
    limit: Option<usize>,
}

impl TurnState {
    /// Reads one SSE payload, queueing the chunks it carries; returns whether it was the
    /// `[DONE]` mark. Usage is queued before an error of the same payload is returned, so
    /// the caller keeps counts the provider reported before failing.
    fn feed(
        &mut self,
        data: &str,
        out: &mut VecDeque<Result<ChatChunk, LlmError>>,
    ) -> Result<bool, LlmError> {
        let data = data.trim();
        if data.is_empty() {
            return Ok(false);
        }
        if data == "[DONE]" {
            return Ok(true);
        }
        let chunk: Chunk = serde_json::from_str(data).map_err(|err| LlmError::Decode {
            message: format!("bad stream chunk ({err}): {}", truncate(data, 200)),
        })?;
        let mut text = String::new();
        let mut call_bytes = 0;
        for choice in chunk.choices {
            if let Some(reason) = choice.finish_reason {
                self.finish_reason = Some(reason);
            }
            let Some(delta) = choice.delta else { continue };
            for call in delta.tool_calls.unwrap_or_default() {
                call_bytes += call.written_bytes();
                self.calls.apply(call);
            }
            text.push_str(delta.content.as_deref().unwrap_or_default());
        }
        self.written += text.len() + call_bytes;
        if let Some(limit) = self.limit.filter(|limit| self.written > *limit) {
            // Keep the text that still fit; nothing past the limit is shown or kept.
            let room = (limit + text.len() + call_bytes).saturating_sub(self.written);
            let mut cut = room.min(text.len());
            while !text.is_char_boundary(cut) {
                cut -= 1;
            }
            text.truncate(cut);
            if !text.is_empty() {
                out.push_back(Ok(ChatChunk::Text(text)));
            }
            return Err(LlmError::TooLarge { limit });
        }
        if !text.is_empty() {
            out.push_back(Ok(ChatChunk::Text(text)));
        }
        if let Some(usage) = chunk.usage {
            out.push_back(Ok(ChatChunk::Usage(usage.into())));
        }
        match chunk.error {
            Some(error) => Err(LlmError::Stream {
                message: error_message(&error),
            }),
            None => Ok(false),
        }
    }

    fn end(self) -> TurnEnd {
        TurnEnd {
            tool_calls: self.calls.finish(),
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

/// Why the raw body of a stream stopped.
#[derive(Debug)]
pub(crate) enum BodyError {
    /// The connection failed.
    Transport(reqwest::Error),
    /// One SSE line was longer than any answer within the output limit could make it.
    LineTooLong {
        /// The output limit the line cap derives from.
        limit: usize,
    },
}

impl std::fmt::Display for BodyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Transport(err) => err.fmt(f),
            Self::LineTooLong { limit } => {
                write!(f, "a stream line exceeds what {limit} bytes of output need")
            }
        }
    }
}

impl std::error::Error for BodyError {}

/// The longest SSE line an answer within `limit` bytes can need: its text escaped as JSON
/// (at most six bytes a byte) and a chunk's framing. The SSE parser holds a line whole
/// until it ends, so this bounds its memory.
pub(crate) fn line_cap(limit: usize) -> usize {
    limit.saturating_mul(6).saturating_add(64 * 1024)
}

/// The body with every line (bytes between newlines) held to `cap` bytes.
fn capped_lines(
    body: impl Stream<Item = Result<Bytes, reqwest::Error>> + Send + 'static,
    cap: Option<usize>,
) -> impl Stream<Item = Result<Bytes, BodyError>> + Send + 'static {
    let mut line = 0usize;
    body.map(move |item| {
        let bytes = item.map_err(BodyError::Transport)?;
        let Some(cap) = cap else {
            return Ok(bytes);
        };
        line = match bytes.iter().rposition(|b| *b == b'\n') {
            Some(last) => bytes.len() - last - 1,
            None => line + bytes.len(),
        };
        if line > cap {
            return Err(BodyError::LineTooLong {
                limit: (cap - 64 * 1024) / 6,
            });
        }
        Ok(bytes)
    })
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
                    eventsource_stream::EventStreamError<BodyError>,
                >,
            > + Send,
    >,
>;

struct Reader {
    events: EventStream,
    /// `None` once the turn has ended or failed.
    state: Option<TurnState>,
    /// Items read but not yet handed out; the last may be the error that ended the turn.
    queue: VecDeque<Result<ChatChunk, LlmError>>,
    first_byte: Option<Duration>,
    idle: Duration,
}

impl Reader {
    async fn next_event(
        &mut self,
    ) -> Result<
        Option<Result<eventsource_stream::Event, eventsource_stream::EventStreamError<BodyError>>>,
        LlmError,
    > {
        match self.first_byte.take() {
            Some(after) => tokio::time::timeout(after, self.events.next())
                .await
                .map_err(|_| LlmError::Timeout {
                    phase: "first byte",
                    after,
                }),
            None => tokio::time::timeout(self.idle, self.events.next())
                .await
                .map_err(|_| LlmError::Timeout {
                    phase: IDLE_PHASE,
                    after: self.idle,
                }),
        }
    }

    /// The next chunk for the caller, or `None` once the turn has ended.
    async fn next_chunk(&mut self) -> Option<Result<ChatChunk, LlmError>> {
        loop {
            if let Some(item) = self.queue.pop_front() {
                return Some(item);
            }
            self.state.as_ref()?;
            match self.next_event().await {
                Ok(Some(Ok(event))) => self.take(event),
                Ok(Some(Err(err))) => self.fail(stream_error(err)),
                Ok(None) => {
                    if let Some(state) = self.state.take() {
                        self.queue
                            .push_back(state.end_at_eof().map(ChatChunk::Finished));
                    }
                }
                Err(err) => self.fail(err),
            }
        }
    }

    fn take(&mut self, event: eventsource_stream::Event) {
        if event.event == "error" {
            return self.fail(LlmError::Stream {
                message: event.data,
            });
        }
        let Some(state) = self.state.as_mut() else {
            return;
        };
        match state.feed(&event.data, &mut self.queue) {
            Ok(false) => {}
            Ok(true) => {
                if let Some(state) = self.state.take() {
                    self.queue.push_back(Ok(ChatChunk::Finished(state.end())));
                }
            }
            Err(err) => self.fail(err),
        }
    }

    fn fail(&mut self, err: LlmError) {
        self.state = None;
        self.queue.push_back(Err(err));
    }
}

fn stream_error(err: eventsource_stream::EventStreamError<BodyError>) -> LlmError {
    let message = match err {
        eventsource_stream::EventStreamError::Transport(BodyError::LineTooLong { limit }) => {
            return LlmError::TooLarge { limit };
        }
        eventsource_stream::EventStreamError::Transport(BodyError::Transport(transport)) => {
            transport.without_url().to_string()
        }
        other @ (eventsource_stream::EventStreamError::Utf8(_)
        | eventsource_stream::EventStreamError::Parser(_)) => other.to_string(),
    };
    LlmError::Stream { message }
}

/// Reads an SSE response body as a chat stream.
pub(crate) fn chat_stream(
    response: reqwest::Response,
    first_byte: Duration,
    idle: Duration,
    limit: Option<usize>,
) -> ChatStream {
    let reader = Reader {
        events: Box::pin(capped_lines(response.bytes_stream(), limit.map(line_cap)).eventsource()),
        state: Some(TurnState {
            limit,
            ..TurnState::default()
        }),
        queue: VecDeque::new(),
        first_byte: Some(first_byte),
        idle,
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

    fn fed(state: &mut TurnState, data: &str) -> (Vec<ChatChunk>, Result<bool, String>) {
        let mut out = VecDeque::new();
        let result = state.feed(data, &mut out).map_err(|e| e.to_string());
        let chunks = out.into_iter().map(Result::unwrap).collect();
        (chunks, result)
    }

    #[test]
    fn error_objects_in_the_stream_are_errors() {
        let mut state = TurnState::default();
        let (_, result) = fed(
            &mut state,
            r#"{"error":{"message":"overloaded","type":"server_error"}}"#,
        );
        assert_eq!(result, Err("the LLM stream failed: overloaded".to_owned()));
    }

    #[test]
    fn usage_in_a_chunk_with_empty_choices_is_passed_on() {
        let mut state = TurnState::default();
        let (chunks, _) = fed(
            &mut state,
            r#"{"choices":[{"delta":{"content":"hi","reasoning_content":"hmm"},"finish_reason":"stop"}]}"#,
        );
        assert_eq!(chunks, vec![ChatChunk::Text("hi".into())]);
        let (chunks, _) = fed(
            &mut state,
            r#"{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}}"#,
        );
        assert!(matches!(&chunks[..], [ChatChunk::Usage(u)] if u.total_tokens == 5));
        assert!(state.end_at_eof().is_ok());
    }

    #[test]
    fn usage_sent_with_an_error_is_kept_before_the_error() {
        let mut state = TurnState::default();
        let (chunks, result) = fed(
            &mut state,
            r#"{"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":1},"error":{"message":"upstream gone"}}"#,
        );
        assert!(matches!(&chunks[..], [ChatChunk::Usage(u)] if u.total_tokens == 8));
        assert!(result.is_err());
    }

    #[test]
    fn a_stream_cut_before_any_finish_reason_is_an_error() {
        let mut state = TurnState::default();
        let _ = fed(&mut state, r#"{"choices":[{"delta":{"content":"par"}}]}"#);
        assert!(state.end_at_eof().is_err());
    }
}
