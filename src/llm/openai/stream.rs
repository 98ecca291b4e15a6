//! Chat Completions chunks to [`ChatChunk`]s: text as it arrives, tool calls merged at the
//! end. The SSE reading itself is [`crate::llm::sse`]'s.

use std::collections::{BTreeSet, HashMap, VecDeque};

use crate::llm::event_source::Event;

use super::wire::{Chunk, ToolCallDelta};
use crate::llm::http::{mint_call_id, normalize_arguments, stream_error_failure};
use crate::llm::sse::{cut_short, keep_within, truncate, Decoder};
use crate::llm::{ArgumentsPiece, ChatChunk, LlmError, ToolCallRequest, TurnEnd};

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
    /// The first slot of each index, and the first of each index still without an id.
    first_of_index: HashMap<u32, usize>,
    first_without_id: HashMap<u32, BTreeSet<usize>>,
    /// The first slot of each id. With these, a delta finds its call in constant time, so
    /// a turn of many calls merges in time linear in its deltas.
    first_of_id: HashMap<String, usize>,
}

impl ToolCallAccumulator {
    /// Adds one delta; returns it as a piece of the call it joined.
    pub fn apply(&mut self, delta: ToolCallDelta) -> ArgumentsPiece {
        let id = delta.id.unwrap_or_default();
        let (name, arguments) = delta
            .function
            .map(|f| (f.name.unwrap_or_default(), f.arguments.unwrap_or_default()))
            .unwrap_or_default();
        let position = self.slot_for(delta.index, &id, &name);
        // A delta that names its call names the piece too; the call's later pieces go
        // without (whoever reads them keeps the first), so nothing is copied per delta.
        let named = Some(id).filter(|id| !id.is_empty());
        if self.slots[position].id.is_empty() {
            if let Some(id) = &named {
                self.name_slot(position, id.clone());
            }
        }
        let slot = &mut self.slots[position];
        let titled = Some(name).filter(|name| !name.is_empty());
        if slot.name.is_empty() {
            if let Some(name) = &titled {
                slot.name.clone_from(name);
            }
        }
        slot.arguments.push_str(&arguments);
        ArgumentsPiece {
            index: u32::try_from(position).unwrap_or(u32::MAX),
            id: named,
            name: titled,
            text: arguments,
        }
    }

    /// The first slot a delta joins: with its index (and no other id), else with its id,
    /// else (carrying neither, and no new name) the most recent one; or a new slot.
    fn slot_for(&mut self, index: Option<u32>, id: &str, name: &str) -> usize {
        let found = match index {
            Some(index) if id.is_empty() => self.first_of_index.get(&index).copied(),
            Some(index) => {
                let same_id = self
                    .first_of_id
                    .get(id)
                    .copied()
                    .filter(|at| self.slots[*at].index == Some(index));
                let without_id = self
                    .first_without_id
                    .get(&index)
                    .and_then(|slots| slots.first().copied());
                same_id.into_iter().chain(without_id).min()
            }
            None if !id.is_empty() => self.first_of_id.get(id).copied(),
            None => self.slots.len().checked_sub(1).filter(|last| {
                let last_name = &self.slots[*last].name;
                name.is_empty() || last_name.is_empty() || last_name == name
            }),
        };
        found.unwrap_or_else(|| {
            let position = self.slots.len();
            self.slots.push(Slot {
                index,
                ..Slot::default()
            });
            if let Some(index) = index {
                self.first_of_index.entry(index).or_insert(position);
                self.first_without_id
                    .entry(index)
                    .or_default()
                    .insert(position);
            }
            position
        })
    }

    fn name_slot(&mut self, position: usize, id: String) {
        if let Some(index) = self.slots[position].index {
            if let Some(slots) = self.first_without_id.get_mut(&index) {
                slots.remove(&position);
            }
        }
        self.first_of_id.entry(id.clone()).or_insert(position);
        self.slots[position].id = id;
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
pub(crate) struct TurnState {
    calls: ToolCallAccumulator,
    finish_reason: Option<String>,
    /// Bytes of text and tool calls the model wrote so far.
    written: usize,
    /// The most it may write; `None` is unbounded.
    limit: Option<usize>,
}

impl TurnState {
    /// A turn whose model may write at most `limit` bytes.
    pub(crate) fn limited(limit: Option<usize>) -> Self {
        Self {
            limit,
            ..Self::default()
        }
    }

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
        let mut reasoning = String::new();
        let mut call_bytes = 0;
        for choice in chunk.choices {
            if let Some(reason) = choice.finish_reason {
                self.finish_reason = Some(reason);
            }
            let Some(delta) = choice.delta else { continue };
            for call in delta.tool_calls.unwrap_or_default() {
                call_bytes += call.written_bytes();
                let piece = self.calls.apply(call);
                out.push_back(Ok(ChatChunk::Arguments(piece)));
            }
            text.push_str(delta.content.as_deref().unwrap_or_default());
            let thought = [delta.reasoning_content, delta.reasoning]
                .into_iter()
                .flatten()
                .find_map(|value| value.as_str().map(str::to_owned));
            reasoning.push_str(thought.as_deref().unwrap_or_default());
        }
        let before = self.written;
        self.written += text.len() + call_bytes + reasoning.len();
        if !reasoning.is_empty() {
            out.push_back(Ok(ChatChunk::Reasoning(reasoning)));
        }
        if let Some(limit) = self.limit.filter(|limit| self.written > *limit) {
            // Keep the text that still fit; nothing past the limit is shown or kept.
            keep_within(&mut text, before, limit);
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
            Some(error) => Err(stream_error_failure(&error)),
            None => Ok(false),
        }
    }
}

impl Decoder for TurnState {
    fn feed(
        &mut self,
        event: &Event,
        out: &mut VecDeque<Result<ChatChunk, LlmError>>,
    ) -> Result<bool, LlmError> {
        // Some gateways send failures as an `error` event rather than an error object.
        if event.event == "error" {
            return Err(
                match serde_json::from_str::<serde_json::Value>(&event.data) {
                    Ok(payload) => stream_error_failure(payload.get("error").unwrap_or(&payload)),
                    Err(_) => LlmError::Stream {
                        message: event.data.clone(),
                    },
                },
            );
        }
        TurnState::feed(self, &event.data, out)
    }

    fn end(self) -> TurnEnd {
        TurnEnd {
            tool_calls: self.calls.finish(),
            finish_reason: self.finish_reason,
            ..TurnEnd::default()
        }
    }

    /// Fine after a finish reason (some servers omit `[DONE]`).
    fn end_at_eof(self) -> Result<TurnEnd, LlmError> {
        if self.finish_reason.is_some() {
            Ok(Decoder::end(self))
        } else {
            Err(cut_short())
        }
    }
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
        deltas.into_iter().for_each(|d| {
            acc.apply(d);
        });
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
    fn thirty_thousand_whole_calls_at_one_index_merge_into_thirty_thousand() {
        let mut acc = ToolCallAccumulator::default();
        for n in 0..30_000 {
            acc.apply(delta(Some(0), Some(&format!("id{n}")), Some("t"), "{}"));
        }
        let calls = acc.finish();
        assert_eq!(calls.len(), 30_000);
        assert_eq!(calls[29_999].id, "id29999");
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
    fn error_objects_in_the_stream_are_errors_of_their_class() {
        let failure = |payload: &str| {
            let mut state = TurnState::default();
            let mut out = VecDeque::new();
            state.feed(payload, &mut out).unwrap_err()
        };
        let server = failure(r#"{"error":{"message":"overloaded","type":"server_error"}}"#);
        assert_eq!(
            server.to_string(),
            "the LLM server failed (HTTP 500): overloaded"
        );
        assert!(server.is_retryable());
        // OpenRouter's form: a status as the code. A deterministic failure is not retried.
        let limit = failure(r#"{"error":{"code":400,"message":"Token limit reached"}}"#);
        assert_eq!(limit.code(), "llm_bad_request");
        assert!(!limit.is_retryable());
        assert!(failure(r#"{"error":{"code":429,"message":"slow down"}}"#).is_retryable());
        assert!(failure(r#"{"error":{"code":502,"message":"upstream"}}"#).is_retryable());
        let quota = failure(r#"{"error":{"type":"insufficient_quota","message":"no credit"}}"#);
        assert!(!quota.is_retryable());
        let unknown = failure(r#"{"error":{"message":"upstream gone"}}"#);
        assert_eq!(unknown.code(), "llm_stream_error");
        assert!(unknown.is_retryable());
    }

    #[test]
    fn usage_in_a_chunk_with_empty_choices_is_passed_on() {
        let mut state = TurnState::default();
        let (chunks, _) = fed(
            &mut state,
            r#"{"choices":[{"delta":{"content":"hi","reasoning_content":"hmm"},"finish_reason":"stop"}]}"#,
        );
        assert_eq!(
            chunks,
            vec![
                ChatChunk::Reasoning("hmm".into()),
                ChatChunk::Text("hi".into())
            ],
            "reasoning beside the text, never in it"
        );
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
