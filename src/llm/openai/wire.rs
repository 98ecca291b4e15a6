//! JSON shapes of the Chat Completions API's answers, lenient because real servers differ.

use serde::Deserialize;
use serde_json::Value;

use crate::domain::TokenUsage;
use crate::llm::http::{mint_call_id, normalize_arguments};
use crate::llm::ToolCallRequest;

/// One `chat.completion.chunk`, or an error object sent in its place.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct Chunk {
    #[serde(default)]
    pub choices: Vec<ChunkChoice>,
    #[serde(default)]
    pub usage: Option<WireUsage>,
    #[serde(default)]
    pub error: Option<Value>,
}

#[derive(Debug, Default, Deserialize)]
pub(crate) struct ChunkChoice {
    #[serde(default)]
    pub delta: Option<Delta>,
    #[serde(default)]
    pub finish_reason: Option<String>,
}

/// A chunk's delta. Reasoning models' text beside the answer comes as `reasoning_content`
/// (DeepSeek, vLLM, llama.cpp) or `reasoning` (OpenRouter, Ollama); read as any JSON, so
/// a server that sends something else there (an object) fails nothing.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct Delta {
    #[serde(default)]
    pub content: Option<String>,
    #[serde(default)]
    pub reasoning_content: Option<serde_json::Value>,
    #[serde(default)]
    pub reasoning: Option<serde_json::Value>,
    #[serde(default)]
    pub tool_calls: Option<Vec<ToolCallDelta>>,
}

/// A piece of a streamed tool call.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
pub struct ToolCallDelta {
    /// Position of the call in the turn; some servers leave it out.
    #[serde(default)]
    pub index: Option<u32>,
    /// Call id; usually only in the first delta, some servers repeat it.
    #[serde(default)]
    pub id: Option<String>,
    /// Name and argument text.
    #[serde(default)]
    pub function: Option<FunctionDelta>,
}

impl ToolCallDelta {
    /// Bytes the model wrote in this delta (id, name and argument text).
    pub fn written_bytes(&self) -> usize {
        let function = self.function.as_ref();
        self.id.as_ref().map_or(0, String::len)
            + function
                .and_then(|f| f.name.as_ref())
                .map_or(0, String::len)
            + function
                .and_then(|f| f.arguments.as_ref())
                .map_or(0, String::len)
    }
}

/// The function part of a tool-call delta.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
pub struct FunctionDelta {
    /// Tool name; usually only in the first delta, some servers repeat it.
    #[serde(default)]
    pub name: Option<String>,
    /// A piece of the argument JSON text.
    #[serde(default)]
    pub arguments: Option<String>,
}

#[derive(Debug, Clone, Copy, Default, Deserialize)]
pub(crate) struct WireUsage {
    #[serde(default)]
    pub prompt_tokens: u64,
    #[serde(default)]
    pub completion_tokens: u64,
    #[serde(default)]
    pub total_tokens: u64,
    #[serde(default)]
    pub prompt_tokens_details: Option<PromptDetails>,
}

/// What OpenAI says of the prompt's tokens: how many came from its prompt cache.
#[derive(Debug, Clone, Copy, Default, Deserialize)]
pub(crate) struct PromptDetails {
    #[serde(default)]
    pub cached_tokens: u64,
}

impl From<WireUsage> for TokenUsage {
    fn from(usage: WireUsage) -> Self {
        let total = if usage.total_tokens == 0 {
            usage.prompt_tokens + usage.completion_tokens
        } else {
            usage.total_tokens
        };
        TokenUsage {
            prompt_tokens: usage.prompt_tokens,
            completion_tokens: usage.completion_tokens,
            total_tokens: total,
            estimated: false,
            cache_read_tokens: usage.prompt_tokens_details.map_or(0, |d| d.cached_tokens),
            cache_creation_tokens: 0,
        }
    }
}

/// A non-streamed `chat.completion`.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct Completion {
    #[serde(default)]
    pub choices: Vec<CompletionChoice>,
    #[serde(default)]
    pub usage: Option<WireUsage>,
}

#[derive(Debug, Default, Deserialize)]
pub(crate) struct CompletionChoice {
    #[serde(default)]
    pub message: CompletionMessage,
    #[serde(default)]
    pub finish_reason: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
pub(crate) struct CompletionMessage {
    #[serde(default)]
    pub content: Option<String>,
    #[serde(default)]
    pub tool_calls: Vec<WholeToolCall>,
}

#[derive(Debug, Default, Deserialize)]
pub(crate) struct WholeToolCall {
    #[serde(default)]
    pub id: String,
    #[serde(default)]
    pub function: WholeFunction,
}

#[derive(Debug, Default, Deserialize)]
pub(crate) struct WholeFunction {
    #[serde(default)]
    pub name: String,
    /// A JSON string per the spec; some servers send the object itself.
    #[serde(default)]
    pub arguments: Value,
}

impl CompletionMessage {
    /// Bytes the model wrote: its text and its calls.
    pub fn written_bytes(&self) -> usize {
        self.content.as_ref().map_or(0, String::len)
            + self
                .tool_calls
                .iter()
                .map(|call| {
                    call.id.len()
                        + call.function.name.len()
                        + call.function.arguments.to_string().len()
                })
                .sum::<usize>()
    }
}

impl WholeToolCall {
    /// The call in normalized form, minting an id when the server gave none.
    pub fn into_request(self) -> ToolCallRequest {
        let arguments = match self.function.arguments {
            Value::String(text) => text,
            Value::Null => String::new(),
            other @ (Value::Bool(_) | Value::Number(_) | Value::Array(_) | Value::Object(_)) => {
                other.to_string()
            }
        };
        ToolCallRequest {
            id: if self.id.is_empty() {
                mint_call_id()
            } else {
                self.id
            },
            name: self.function.name,
            arguments: normalize_arguments(arguments),
        }
    }
}
