//! LLM clients behind one trait. The runner builds a normalized [`ChatRequest`] and reads a
//! stream of [`ChatChunk`]s; each provider kind converts to and from its own wire format.
//!
//! This room knows HTTP (reqwest) but neither tonic nor a database.

pub mod anthropic;
mod error;
mod event_source;
mod http;
pub mod openai;
mod redacting;
mod registry;
mod sse;
mod tokens;

use std::pin::Pin;

use futures::Stream;
use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use error::LlmError;
pub use registry::{
    api_key, call_policy, CallPolicy, Feature, ModelEntry, ModelInfo, ModelLookupError,
    ModelRegistry, ProviderApi, ProviderConfig, ResolvedModel, RetryPolicy, Secret,
};
pub use tokens::Tokenizer;

pub use crate::domain::Reasoning;
use crate::domain::TokenUsage;

/// A chat completion request in provider-neutral form.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ChatRequest {
    /// Model name as the provider knows it.
    pub model: String,
    /// The conversation so far.
    pub messages: Vec<ChatMessage>,
    /// Tools offered for native function calling; empty offers none.
    pub tools: Vec<ToolSpec>,
    /// Stop sequences.
    pub stop: Vec<String>,
    /// Sampling parameters passed through as given (temperature, top_p, max_tokens …).
    pub parameters: serde_json::Map<String, Value>,
    /// The end user, for the provider's abuse monitoring.
    pub user: Option<String>,
    /// The most the model may write (text and tool-call arguments), in bytes; the client
    /// stops reading past it and fails with [`LlmError::TooLarge`]. `None` is unbounded.
    pub max_output_bytes: Option<usize>,
    /// A JSON Schema the provider holds the answer to, for models with native structured
    /// output; `None` leaves the answer free.
    pub response_schema: Option<Value>,
}

/// One message of a chat prompt.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "snake_case")]
pub enum ChatMessage {
    /// Instructions to the model.
    System {
        /// The text.
        content: String,
    },
    /// The user's turn.
    User {
        /// Text and image parts.
        content: Vec<ContentPart>,
    },
    /// The model's turn, with the tool calls it made.
    Assistant {
        /// The text.
        content: String,
        /// Calls made in this turn.
        tool_calls: Vec<ToolCallRequest>,
        /// The model's reasoning before those calls, to hand back with them (Anthropic
        /// requires it while thinking is on); providers without it ignore it.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        reasoning: Vec<Reasoning>,
    },
    /// A tool's result, answering one call.
    Tool {
        /// The call this answers.
        tool_call_id: String,
        /// The observation text.
        content: String,
    },
}

impl ChatRequest {
    /// The caller's parameters except `reserved`, the keys a provider's body sets itself:
    /// the start of every request body.
    pub(crate) fn passed_parameters(&self, reserved: &[&str]) -> serde_json::Map<String, Value> {
        self.parameters
            .iter()
            .filter(|(key, _)| !reserved.contains(&key.as_str()))
            .map(|(key, value)| (key.clone(), value.clone()))
            .collect()
    }
}

impl ChatMessage {
    /// An assistant message of text alone.
    pub fn assistant_text(text: impl Into<String>) -> Self {
        ChatMessage::Assistant {
            content: text.into(),
            tool_calls: Vec::new(),
            reasoning: Vec::new(),
        }
    }

    /// A user message holding only text.
    pub fn user_text(text: impl Into<String>) -> Self {
        ChatMessage::User {
            content: vec![ContentPart::Text { text: text.into() }],
        }
    }
}

/// A part of a user message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ContentPart {
    /// Plain text.
    Text {
        /// The text.
        text: String,
    },
    /// An image by URL (which may be a `data:` URL).
    Image {
        /// Where the image is.
        url: String,
        /// `low` or `high`.
        detail: String,
    },
}

/// A tool offered to the model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    /// Name the model calls it by.
    pub name: String,
    /// What the tool does, for the model.
    pub description: String,
    /// JSON Schema of the arguments.
    pub parameters: Value,
}

/// A tool call the model made.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCallRequest {
    /// Call id (minted when the provider gave none).
    pub id: String,
    /// Tool name.
    pub name: String,
    /// Arguments as JSON text, exactly as the model wrote them.
    pub arguments: String,
}

/// A piece of a streamed model turn.
#[derive(Debug, Clone, PartialEq)]
pub enum ChatChunk {
    /// Answer text.
    Text(String),
    /// A piece of a tool call's arguments as the model writes them.
    Arguments(ArgumentsPiece),
    /// Reasoning the model writes beside its answer (never answer text).
    Reasoning(String),
    /// Token counts as the provider reported them. Sent as soon as they are known, so a
    /// stream that fails afterwards (some gateways send usage, then an error) keeps them.
    Usage(TokenUsage),
    /// The turn is complete; always the last item of a successful stream.
    Finished(TurnEnd),
}

/// A piece of one tool call's arguments, before the turn is complete.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ArgumentsPiece {
    /// The call's place in [`TurnEnd::tool_calls`].
    pub index: u32,
    /// The call's id, once the provider gave it (a call given none gets one minted at the
    /// turn's end).
    pub id: Option<String>,
    /// The tool's name, once known.
    pub name: Option<String>,
    /// Argument text following the call's earlier pieces.
    pub text: String,
}

/// What is known only once a turn is complete.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TurnEnd {
    /// Tool calls with their argument deltas merged.
    pub tool_calls: Vec<ToolCallRequest>,
    /// The provider's finish reason (`stop`, `tool_calls`, `length`, `end_turn` …).
    pub finish_reason: Option<String>,
    /// The model's reasoning blocks, in order, to hand back with its tool calls.
    pub reasoning: Vec<Reasoning>,
}

/// A streamed model turn. Dropping it closes the connection.
pub type ChatStream = Pin<Box<dyn Stream<Item = Result<ChatChunk, LlmError>> + Send>>;

/// A chat model reachable over some provider API.
///
/// One interface for every model: a provider that cannot stream a turn (some cannot stream
/// tool calls) answers it whole and yields it as one stream. Which way to call is the
/// client's business, not the loop's.
#[async_trait::async_trait]
pub trait ChatModel: Send + Sync {
    /// Runs one turn as a stream of text pieces and usage, ending in
    /// [`ChatChunk::Finished`].
    async fn stream(&self, request: &ChatRequest) -> Result<ChatStream, LlmError>;
}
