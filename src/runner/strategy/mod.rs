//! How one agent style talks to the model, and which style a run gets. The loop owns
//! rounds, budgets, persistence and events; a strategy owns only prompt building and
//! reading the model's turn (including which of its text is answer).

mod function_calling;
mod react;
pub mod react_parser;

pub use function_calling::FunctionCalling;
pub use react::{scratchpad, ChainOfThought, CHAT_TEMPLATE, COMPLETION_TEMPLATE, OBSERVATION_STOP};

use crate::domain::{FieldError, StrategyKind};
use crate::llm::{
    ArgumentsPiece, ChatMessage, ChatRequest, ContentPart, Feature, ModelInfo, Reasoning,
    ToolCallRequest, ToolSpec, TurnEnd,
};
use crate::runner::spec::{AgentSpec, ModelMode};
use crate::tools::{OfferedTool, ToolSet};

/// What every prompt of a run is built from.
#[derive(Debug, Clone, Default)]
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
    /// A schema the provider holds the final answer to (native structured output).
    pub response_schema: Option<serde_json::Value>,
    /// An answer that did not meet the output schema, to be corrected in this round.
    pub repair: Option<Repair>,
    /// Keep a forced `tool_choice` after a round has called a tool.
    pub keep_tool_choice: bool,
}

impl PromptContext {
    /// A copy without the history (which may be long), for measuring the rest.
    pub fn clone_without_history(&self) -> Self {
        Self {
            model: self.model.clone(),
            instruction: self.instruction.clone(),
            history: Vec::new(),
            query: self.query.clone(),
            parameters: self.parameters.clone(),
            stop: self.stop.clone(),
            user: self.user.clone(),
            files: self.files.clone(),
            response_schema: self.response_schema.clone(),
            repair: self.repair.clone(),
            keep_tool_choice: self.keep_tool_choice,
        }
    }
}

/// The request to correct an answer that does not meet the output schema.
#[derive(Debug, Clone, PartialEq)]
pub struct Repair {
    /// The answer as the model gave it.
    pub answer: String,
    /// What is wrong with it.
    pub problems: String,
}

impl Repair {
    /// What the model is told: the problems, and to answer again.
    pub fn request(&self, strategy: StrategyKind) -> String {
        let again = match strategy {
            StrategyKind::FunctionCalling => "Reply with only the corrected JSON document.",
            StrategyKind::ChainOfThought => {
                "Give the Final Answer again, its action_input being the corrected JSON document."
            }
        };
        format!(
            "Your answer does not meet the required JSON Schema: {}. {again}",
            self.problems
        )
    }
}

impl PromptContext {
    /// A request for this context's model with `messages`, offering `tools` natively and
    /// stopping at `stop`; `called` says whether a round of this run has called tools
    /// (which releases a forced `tool_choice`).
    pub fn request(
        &self,
        messages: Vec<ChatMessage>,
        tools: &[OfferedTool],
        stop: Vec<String>,
        called: bool,
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
            parameters: self.parameters_for(!tools.is_empty(), called),
            user: Some(self.user.clone()).filter(|u| !u.is_empty()),
            max_output_bytes: None,
            response_schema: self.response_schema.clone(),
        }
    }
}

impl PromptContext {
    /// The sampling parameters of one request. A `tool_choice` (and `parallel_tool_calls`)
    /// goes only with tools: OpenAI rejects it without them, and the last round withholds
    /// them so the model must answer. A forced choice becomes `auto` once a round has
    /// called a tool (as the OpenAI Agents SDK's `reset_tool_choice` does), or the model
    /// would have to call tools until the iteration limit; `keep_tool_choice` keeps it.
    fn parameters_for(
        &self,
        offers_tools: bool,
        called: bool,
    ) -> serde_json::Map<String, serde_json::Value> {
        let mut parameters = self.parameters.clone();
        if !offers_tools {
            parameters.remove("tool_choice");
            parameters.remove("parallel_tool_calls");
        } else if called && !self.keep_tool_choice {
            if let Some(choice) = parameters.get_mut("tool_choice") {
                *choice = released(choice);
            }
        }
        parameters
    }
}

/// `auto` in the form of `choice`: Anthropic's `{"type": ...}` objects stay objects (with
/// their other settings), OpenAI's forms become the string; `none` stays `none`.
fn released(choice: &serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    match choice {
        Value::String(kind) if kind == "none" => choice.clone(),
        Value::Object(object) => match object.get("type").and_then(Value::as_str) {
            Some("none" | "auto") => choice.clone(),
            Some("any" | "tool") => {
                let mut auto = object.clone();
                auto.insert("type".into(), Value::String("auto".into()));
                auto.remove("name");
                Value::Object(auto)
            }
            _ => Value::String("auto".into()),
        },
        Value::Null | Value::Bool(_) | Value::Number(_) | Value::String(_) | Value::Array(_) => {
            Value::String("auto".into())
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
    /// Tokens the turn takes in a prompt, when known (kept with its message), so fitting
    /// the history does not count it again.
    pub tokens: Option<u64>,
}

/// One finished round of this run, as later prompts need it.
#[derive(Debug, Clone, PartialEq)]
pub struct RoundRecord {
    /// What the model said.
    pub text: String,
    /// Its calls with their observations, in call order.
    pub calls: Vec<(ToolCallRequest, String)>,
    /// The model's reasoning before the calls, handed back with them (this run's rounds
    /// only: providers need it for the tool loop in progress, not for past turns).
    pub reasoning: Vec<Reasoning>,
    /// User turns steering runs added after its results, before the next model call.
    pub steered: Vec<String>,
}

/// What the model decided in one turn.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ModelStep {
    /// The round's thought text, as stored.
    pub thought: String,
    /// Tools to call; empty ends the run.
    pub calls: Vec<ToolCallRequest>,
    /// The round's part of the answer: for function calling all the text it streamed, for
    /// ReAct the final answer (nothing when the turn called a tool).
    pub answer: String,
    /// Answer text the user has not seen yet (a ReAct final answer given as an action's
    /// input); the loop shows it as a paragraph of its own.
    pub unshown: String,
}

/// Reads one streamed model turn.
pub trait TurnReader: Send {
    /// Takes a piece of model text and returns what the user may see of it now.
    fn push(&mut self, text: &str) -> String;

    /// The stream ended: returns the visible text still held back.
    fn flush(&mut self) -> String {
        String::new()
    }

    /// Reasoning read from the text pushed so far (a reasoning block the answer opens
    /// with), not yet taken; never answer text.
    fn reasoning(&mut self) -> String {
        String::new()
    }

    /// Pieces of tool calls read from the text pushed so far (ReAct actions as the model
    /// writes them); a strategy whose calls the provider streams reads none.
    fn forming(&mut self) -> Vec<ArgumentsPiece> {
        Vec::new()
    }

    /// Whether the text shown so far is answer rather than thought, so a turn cut short
    /// keeps it as the (partial) answer.
    fn shows_answer(&self) -> bool;

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

    /// Refuses a run whose first prompt would pass `limit` bytes, measured before it is
    /// built. Only a template can make a prompt much larger than the request that asked
    /// for it; a strategy without one has nothing to check.
    fn check_prompt_size(
        &self,
        _instruction_len: usize,
        _query_len: usize,
        _tools: &ToolSet,
        _limit: usize,
    ) -> Result<(), FieldError> {
        Ok(())
    }

    /// A reader for the model's next turn, which may call `tools`.
    fn reader(&self, tools: &[OfferedTool]) -> Box<dyn TurnReader>;
}

/// The requested strategy, or (unspecified) function calling when the model has native
/// tool calls and runs in chat mode, else chain of thought.
pub fn choose(agent: &AgentSpec, model: &ModelInfo) -> Result<Box<dyn Strategy>, FieldError> {
    let mode = agent.model.mode;
    let native = model.has(Feature::ToolCall) || model.has(Feature::MultiToolCall);
    let kind = agent
        .strategy
        .unwrap_or(if native && mode == ModelMode::Chat {
            StrategyKind::FunctionCalling
        } else {
            StrategyKind::ChainOfThought
        });
    match (kind, mode) {
        (StrategyKind::FunctionCalling, ModelMode::Chat) => Ok(Box::new(FunctionCalling)),
        (StrategyKind::FunctionCalling, ModelMode::Completion) => Err(FieldError::new(
            "agent.model.mode",
            "COMPLETION needs the chain-of-thought strategy",
        )),
        (StrategyKind::ChainOfThought, mode) => {
            Ok(Box::new(ChainOfThought::new(mode, &agent.react_prompt)))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::ModelEntry;
    use crate::runner::ModelSpec;

    fn model(features: &[Feature]) -> ModelInfo {
        let mut entry = ModelEntry::unlisted("m");
        entry.features = features.to_vec();
        ModelInfo::from(&entry)
    }

    fn chosen(
        strategy: Option<StrategyKind>,
        mode: ModelMode,
        features: &[Feature],
    ) -> Result<StrategyKind, String> {
        let agent = AgentSpec {
            strategy,
            model: ModelSpec {
                mode,
                ..ModelSpec::default()
            },
            ..AgentSpec::default()
        };
        choose(&agent, &model(features))
            .map(|s| s.kind())
            .map_err(|e| e.to_string())
    }

    #[test]
    fn a_released_tool_choice_keeps_its_providers_form() {
        use serde_json::json;
        assert_eq!(released(&json!("required")), json!("auto"));
        assert_eq!(
            released(&json!({"type": "function", "function": {"name": "x"}})),
            json!("auto")
        );
        assert_eq!(released(&json!("none")), json!("none"));
        assert_eq!(
            released(&json!({"type": "tool", "name": "x", "disable_parallel_tool_use": true})),
            json!({"type": "auto", "disable_parallel_tool_use": true})
        );
        assert_eq!(released(&json!({"type": "any"})), json!({"type": "auto"}));
    }

    #[test]
    fn unspecified_strategy_follows_the_model_features() {
        use Feature::*;
        use StrategyKind::*;
        assert_eq!(
            chosen(None, ModelMode::Chat, &[ToolCall]),
            Ok(FunctionCalling)
        );
        assert_eq!(
            chosen(None, ModelMode::Chat, &[MultiToolCall]),
            Ok(FunctionCalling)
        );
        assert_eq!(chosen(None, ModelMode::Chat, &[]), Ok(ChainOfThought));
        assert_eq!(
            chosen(None, ModelMode::Chat, &[StreamToolCall, Vision]),
            Ok(ChainOfThought)
        );
        assert_eq!(
            chosen(None, ModelMode::Completion, &[ToolCall]),
            Ok(ChainOfThought)
        );
    }

    #[test]
    fn an_explicit_strategy_wins_unless_the_mode_cannot_run_it() {
        use StrategyKind::*;
        assert_eq!(
            chosen(Some(ChainOfThought), ModelMode::Chat, &[Feature::ToolCall]),
            Ok(ChainOfThought)
        );
        assert_eq!(
            chosen(Some(FunctionCalling), ModelMode::Chat, &[]),
            Ok(FunctionCalling)
        );
        assert_eq!(
            chosen(Some(FunctionCalling), ModelMode::Completion, &[]),
            Err("agent.model.mode COMPLETION needs the chain-of-thought strategy".to_owned())
        );
    }
}
