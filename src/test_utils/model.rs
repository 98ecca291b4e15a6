//! A chat model that plays a script, turn by turn, and records what it was asked.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};

use crate::domain::TokenUsage;
use crate::llm::{
    ChatChunk, ChatModel, ChatRequest, ChatStream, LlmError, ToolCallRequest, TurnEnd,
};

/// One turn of the script.
#[derive(Debug, Clone)]
pub enum ScriptedTurn {
    /// Text pieces, then tool calls (none ends the run), with the usage reported.
    Reply {
        /// The text, in the pieces it streams in.
        text: Vec<String>,
        /// Calls the turn makes.
        calls: Vec<ToolCallRequest>,
        /// Usage the provider reports; `None` reports none.
        usage: Option<TokenUsage>,
    },
    /// The call fails before any answer.
    Fail(LlmError),
    /// Streams the text pieces, then stays silent until the run gives up on it.
    Stall(Vec<String>),
    /// Panics when called, as a bug would.
    Panic(&'static str),
}

impl ScriptedTurn {
    /// A turn that answers `text` (in one piece) and reports 10 prompt and 5 completion tokens.
    pub fn text(text: &str) -> Self {
        Self::Reply {
            text: vec![text.to_owned()],
            calls: Vec::new(),
            usage: Some(usage(10, 5)),
        }
    }

    /// A turn that says `text` and calls each `(id, tool, arguments)`.
    pub fn calls(text: &str, calls: &[(&str, &str, &str)]) -> Self {
        Self::Reply {
            text: if text.is_empty() {
                Vec::new()
            } else {
                vec![text.to_owned()]
            },
            calls: calls
                .iter()
                .map(|(id, name, arguments)| ToolCallRequest {
                    id: (*id).to_owned(),
                    name: (*name).to_owned(),
                    arguments: (*arguments).to_owned(),
                })
                .collect(),
            usage: Some(usage(10, 5)),
        }
    }
}

fn usage(prompt: u64, completion: u64) -> TokenUsage {
    TokenUsage {
        prompt_tokens: prompt,
        completion_tokens: completion,
        total_tokens: prompt + completion,
        ..TokenUsage::default()
    }
}

/// Plays its turns in order and fails clearly once they are used up.
#[derive(Default)]
pub struct ScriptedChatModel {
    /// A `std` mutex: held for a push or a pop, never across an await.
    script: Mutex<VecDeque<ScriptedTurn>>,
    requests: Mutex<Vec<ChatRequest>>,
}

impl ScriptedChatModel {
    /// A model that plays `turns`.
    pub fn new(turns: Vec<ScriptedTurn>) -> Arc<Self> {
        Arc::new(Self {
            script: Mutex::new(turns.into()),
            requests: Mutex::default(),
        })
    }

    /// Every request the model received, in order.
    pub fn requests(&self) -> Vec<ChatRequest> {
        self.requests
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

#[async_trait::async_trait]
impl ChatModel for ScriptedChatModel {
    async fn stream(&self, request: &ChatRequest) -> Result<ChatStream, LlmError> {
        self.requests
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(request.clone());
        let turn = self
            .script
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop_front()
            .ok_or_else(|| LlmError::Decode {
                message: "the scripted model's script is used up".to_owned(),
            })?;
        match turn {
            ScriptedTurn::Reply { text, calls, usage } => {
                let mut chunks: Vec<ChatChunk> = text.into_iter().map(ChatChunk::Text).collect();
                chunks.extend(usage.map(ChatChunk::Usage));
                chunks.push(ChatChunk::Finished(TurnEnd {
                    reasoning: Vec::new(),
                    finish_reason: Some(
                        if calls.is_empty() {
                            "stop"
                        } else {
                            "tool_calls"
                        }
                        .to_owned(),
                    ),
                    tool_calls: calls,
                }));
                Ok(Box::pin(futures::stream::iter(chunks.into_iter().map(Ok))))
            }
            ScriptedTurn::Fail(err) => Err(err),
            #[allow(clippy::panic)]
            ScriptedTurn::Panic(message) => panic!("{message}"),
            ScriptedTurn::Stall(text) => {
                let head = futures::stream::iter(text.into_iter().map(|t| Ok(ChatChunk::Text(t))));
                Ok(Box::pin(futures::StreamExt::chain(
                    head,
                    futures::stream::pending(),
                )))
            }
        }
    }
}
