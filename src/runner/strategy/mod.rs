//! How one agent style talks to the model. The loop owns rounds, budgets, persistence and
//! events; a strategy owns only prompt building and reading the model's turn.

mod function_calling;

pub use function_calling::FunctionCalling;

use crate::domain::StrategyKind;
use crate::llm::{ChatMessage, ChatRequest, ToolCallRequest, TurnEnd};
use crate::tools::engine::OfferedTool;

/// What every prompt of a run is built from.
#[derive(Debug, Clone)]
pub struct PromptContext {
    /// Model name.
    pub model: String,
    /// The instruction with its variables filled.
    pub instruction: String,
    /// Earlier turns of the conversation.
    pub history: Vec<ChatMessage>,
    /// The user's query.
    pub query: String,
    /// Sampling parameters.
    pub parameters: serde_json::Map<String, serde_json::Value>,
    /// Stop sequences.
    pub stop: Vec<String>,
    /// The end user.
    pub user: String,
}

/// One finished round of this run, as later prompts need it.
#[derive(Debug, Clone, PartialEq)]
pub struct RoundRecord {
    /// What the model said.
    pub text: String,
    /// Its calls with their observations, in call order.
    pub calls: Vec<(ToolCallRequest, String)>,
}

/// What the model decided in one turn.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ModelStep {
    /// The round's thought text, as stored.
    pub thought: String,
    /// Tools to call; empty ends the run.
    pub calls: Vec<ToolCallRequest>,
}

/// Reads one streamed model turn.
pub trait TurnReader: Send {
    /// Takes a piece of model text and returns what the user may see of it now.
    fn push(&mut self, text: &str) -> String;

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

    /// A reader for the model's next turn.
    fn reader(&self) -> Box<dyn TurnReader>;
}
