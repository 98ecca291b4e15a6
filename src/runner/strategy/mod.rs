//! How one agent style talks to the model. The loop owns rounds, budgets, persistence and
//! events; a strategy owns only prompt building and reading the model's turn.

mod function_calling;
mod react;
pub mod react_parser;

pub use function_calling::FunctionCalling;
pub use react::{scratchpad, ChainOfThought, CHAT_TEMPLATE, COMPLETION_TEMPLATE, OBSERVATION_STOP};

use crate::domain::StrategyKind;
use crate::llm::{ChatMessage, ChatRequest, ContentPart, ToolCallRequest, ToolSpec, TurnEnd};
use crate::tools::engine::OfferedTool;

/// What every prompt of a run is built from.
#[derive(Debug, Clone)]
pub struct PromptContext {
    /// Model name.
    pub model: String,
    /// The instruction with its variables filled.
    pub instruction: String,
    /// Earlier turns of the conversation, oldest first.
    pub history: Vec<PastTurn>,
    /// The user's query.
    pub query: String,
    /// Sampling parameters.
    pub parameters: serde_json::Map<String, serde_json::Value>,
    /// Stop sequences.
    pub stop: Vec<String>,
    /// The end user.
    pub user: String,
    /// Images sent with the query (only for models that can see them).
    pub files: Vec<ContentPart>,
}

impl PromptContext {
    /// A request for this context's model with `messages`, offering `tools` natively and
    /// stopping at `stop`.
    pub fn request(
        &self,
        messages: Vec<ChatMessage>,
        tools: &[OfferedTool],
        stop: Vec<String>,
    ) -> ChatRequest {
        ChatRequest {
            model: self.model.clone(),
            messages,
            tools: tools
                .iter()
                .map(|tool| ToolSpec {
                    name: tool.name.clone(),
                    description: tool.description.clone(),
                    parameters: tool.parameters.clone(),
                })
                .collect(),
            stop,
            parameters: self.parameters.clone(),
            user: Some(self.user.clone()).filter(|u| !u.is_empty()),
        }
    }
}

/// The user's message: the images then the query, or (flattened, for later rounds of
/// function calling) one text where each image is `[image]`.
pub fn user_message(context: &PromptContext, flatten: bool) -> ChatMessage {
    if context.files.is_empty() {
        return ChatMessage::user_text(context.query.clone());
    }
    if flatten {
        let mut lines: Vec<&str> = context.files.iter().map(|_| "[image]").collect();
        lines.push(&context.query);
        return ChatMessage::user_text(lines.join("\n"));
    }
    let mut content = context.files.clone();
    content.push(ContentPart::Text {
        text: context.query.clone(),
    });
    ChatMessage::User { content }
}

/// An earlier turn of the conversation.
#[derive(Debug, Clone, PartialEq)]
pub struct PastTurn {
    /// What the user asked.
    pub query: String,
    /// The rounds that called tools, with their results.
    pub rounds: Vec<RoundRecord>,
    /// The answer the turn ended with.
    pub answer: String,
}

/// One finished round of this run, as later prompts need it.
#[derive(Debug, Clone, PartialEq)]
pub struct RoundRecord {
    /// What the model said.
    pub text: String,
    /// Its calls with their observations, in call order.
    pub calls: Vec<(ToolCallRequest, String)>,
}

/// An answer a turn gave explicitly.
#[derive(Debug, Clone, PartialEq)]
pub struct FinalAnswer {
    /// The answer.
    pub text: String,
    /// Whether the user has already seen it as it streamed; otherwise it is sent now.
    pub streamed: bool,
}

/// What the model decided in one turn.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ModelStep {
    /// The round's thought text, as stored.
    pub thought: String,
    /// Tools to call; empty ends the run.
    pub calls: Vec<ToolCallRequest>,
    /// The answer, when the turn gave one explicitly (ReAct); function calling leaves it
    /// `None` because its answer is the text it streamed.
    pub final_answer: Option<FinalAnswer>,
}

/// Reads one streamed model turn.
pub trait TurnReader: Send {
    /// Takes a piece of model text and returns what the user may see of it now.
    fn push(&mut self, text: &str) -> String;

    /// The stream ended: returns the visible text still held back.
    fn flush(&mut self) -> String {
        String::new()
    }

    /// Reads the complete turn.
    fn finish(self: Box<Self>, end: TurnEnd) -> ModelStep;
}

/// An agent style.
pub trait Strategy: Send + Sync {
    /// Which style this is.
    fn kind(&self) -> StrategyKind;

    /// The request for the next round; `tools` is empty on the last round.
    fn build_request(
        &self,
        context: &PromptContext,
        rounds: &[RoundRecord],
        tools: &[OfferedTool],
    ) -> ChatRequest;

    /// A reader for the model's next turn, which may call `tools`.
    fn reader(&self, tools: &[OfferedTool]) -> Box<dyn TurnReader>;

    /// Whether the answer is everything streamed (function calling) rather than only what
    /// a turn gave as its final answer (ReAct, whose streamed thoughts are not the answer).
    fn streamed_text_is_answer(&self) -> bool {
        true
    }
}
