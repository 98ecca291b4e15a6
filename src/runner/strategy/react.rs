//! Chain of thought (ReAct): tools are described in the prompt, the model answers in text,
//! and its action is read from that text by [`super::react_parser`].
//!
//! Chat models get a system prompt, the query, and from round 2 the scratchpad as an
//! assistant message followed by a `continue` user message. Completion models get one
//! prompt with the history, the query and the scratchpad filled in.

use std::collections::HashMap;

use serde_json::{json, Value};

use super::react_parser::{Action, Piece, ReactParser};
use super::{ModelStep, PastTurn, PromptContext, RoundRecord, Strategy, TurnReader};
use crate::domain::{FieldError, StrategyKind};
use crate::llm::{ArgumentsPiece, ChatMessage, ChatRequest, ToolCallRequest, TurnEnd};
use crate::runner::spec::ModelMode;
use crate::runner::template;
use crate::tools::{OfferedTool, ToolSet};

/// The stop word that ends a ReAct turn before the model invents a tool result.
pub const OBSERVATION_STOP: &str = "Observation";

/// The prompt body both modes share, as a literal so both constants can be built from it.
macro_rules! react_body {
    () => {
        r#"{{instruction}}

You can use tools to answer. Each tool is described below as JSON with its name, what it does, and the JSON Schema of its input:
{{tools}}

To use a tool, write a short thought, then exactly one action as a JSON blob in a fenced code block, and stop:

Thought: what you need to find out and why
Action:
```json
{"action": "<tool name>", "action_input": {<the tool's input>}}
```

The tool's result comes back to you as "Observation: ...". Think, act and observe as often as you need. When you can answer, reply:

Thought: I can answer now
Action:
```json
{"action": "Final Answer", "action_input": "<your complete answer for the user>"}
```

Valid actions are "Final Answer" and: {{tool_names}}. Write one JSON blob per reply and nothing after it."#
    };
}

/// The default prompt for chat models.
pub const CHAT_TEMPLATE: &str = react_body!();

/// The default prompt for completion models: the chat prompt followed by the transcript.
pub const COMPLETION_TEMPLATE: &str = concat!(
    react_body!(),
    "\n\n{{historic_messages}}Question: {{query}}\n{{agent_scratchpad}}Thought:"
);

/// The chain-of-thought strategy.
#[derive(Debug, Clone)]
pub struct ChainOfThought {
    mode: ModelMode,
    /// A caller's template; replaces the default for both modes.
    template: Option<String>,
}

impl ChainOfThought {
    /// The strategy for models in `mode`, with an optional custom template.
    pub fn new(mode: ModelMode, template: &str) -> Self {
        Self {
            mode,
            template: Some(template.to_owned()).filter(|t| !t.trim().is_empty()),
        }
    }

    fn template(&self) -> &str {
        match (&self.template, self.mode) {
            (Some(custom), _) => custom,
            (None, ModelMode::Chat) => CHAT_TEMPLATE,
            (None, ModelMode::Completion) => COMPLETION_TEMPLATE,
        }
    }

    fn fill_common(&self, context: &PromptContext, tools: &[OfferedTool]) -> String {
        self.render(&Values::common(context, tools))
    }

    /// The template with `values` filled in one pass, so text a value brings (an input
    /// holding `{{tools}}`, say) is never expanded again.
    fn render(&self, values: &Values<'_>) -> String {
        template::fill(self.template(), |name| values.get(name))
            .trim_start()
            .to_owned()
    }

    fn chat_messages(
        &self,
        context: &PromptContext,
        rounds: &[RoundRecord],
        tools: &[OfferedTool],
    ) -> Vec<ChatMessage> {
        let mut messages = vec![ChatMessage::System {
            content: self.fill_common(context, tools),
        }];
        for turn in &context.history {
            messages.push(ChatMessage::user_text(turn.query.clone()));
            messages.push(ChatMessage::assistant_text(collapsed(turn)));
        }
        messages.push(super::user_message(context, false));
        if !rounds.is_empty() {
            messages.push(ChatMessage::assistant_text(scratchpad(rounds)));
            messages.push(ChatMessage::user_text("continue"));
        }
        if let Some(repair) = &context.repair {
            messages.push(ChatMessage::assistant_text(final_answer(&repair.answer)));
            messages.push(ChatMessage::user_text(
                repair.request(StrategyKind::ChainOfThought),
            ));
        }
        messages
    }

    fn completion_prompt(
        &self,
        context: &PromptContext,
        rounds: &[RoundRecord],
        tools: &[OfferedTool],
    ) -> String {
        let mut scratchpad = scratchpad(rounds);
        if let Some(repair) = &context.repair {
            scratchpad.push_str(&format!(
                "{}\nObservation: {}\n",
                final_answer(&repair.answer),
                repair.request(StrategyKind::ChainOfThought)
            ));
        }
        let mut values = Values::common(context, tools);
        values.transcript = Some(Transcript {
            historic: historic_text(&context.history),
            query: &context.query,
            scratchpad,
        });
        self.render(&values)
    }
}

/// The template's variables, in the order [`Strategy::check_prompt_size`] sizes them.
const VARIABLES: [&str; 6] = [
    "instruction",
    "tools",
    "tool_names",
    "historic_messages",
    "query",
    "agent_scratchpad",
];

/// The variables only completion prompts fill; chat prompts send them as messages.
const TRANSCRIPT: [&str; 3] = ["historic_messages", "query", "agent_scratchpad"];

/// What the variables stand for in one prompt.
struct Values<'a> {
    instruction: &'a str,
    tools: String,
    tool_names: String,
    transcript: Option<Transcript<'a>>,
}

/// The completion prompt's own variables.
struct Transcript<'a> {
    historic: String,
    query: &'a str,
    scratchpad: String,
}

impl<'a> Values<'a> {
    fn common(context: &'a PromptContext, tools: &[OfferedTool]) -> Self {
        Self {
            instruction: context.instruction.trim(),
            tools: tools_json(tools),
            tool_names: tool_names(tools),
            transcript: None,
        }
    }

    fn get(&self, name: &str) -> Option<&str> {
        let transcript = self.transcript.as_ref();
        match name {
            "instruction" => Some(self.instruction),
            "tools" => Some(&self.tools),
            "tool_names" => Some(&self.tool_names),
            "historic_messages" => transcript.map(|t| t.historic.as_str()),
            "query" => transcript.map(|t| t.query),
            "agent_scratchpad" => transcript.map(|t| t.scratchpad.as_str()),
            _ => None,
        }
    }
}

/// The tools as the prompt describes them: JSON with name, description and schema.
fn tools_json(tools: &[OfferedTool]) -> String {
    let described: Vec<Value> = tools
        .iter()
        .map(|t| json!({"name": t.name, "description": t.description, "parameters": t.parameters}))
        .collect();
    Value::Array(described).to_string()
}

fn tool_names(tools: &[OfferedTool]) -> String {
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
    names.join(", ")
}

/// A Final Answer action as the model writes it.
fn final_answer(answer: &str) -> String {
    let input =
        serde_json::from_str::<Value>(answer).unwrap_or_else(|_| Value::String(answer.to_owned()));
    format!(
        "Action:\n```\n{}\n```",
        json!({"action": "Final Answer", "action_input": input})
    )
}

/// A past turn as one scratchpad: its tool rounds, then its answer.
fn collapsed(turn: &PastTurn) -> String {
    format!("{}Final Answer: {}", scratchpad(&turn.rounds), turn.answer)
}

/// Earlier turns as transcript text for completion prompts.
fn historic_text(history: &[PastTurn]) -> String {
    history
        .iter()
        .map(|turn| format!("Question: {}\n{}\n\n", turn.query, collapsed(turn)))
        .collect()
}

/// The rounds so far in the format the prompt asks for, so the model sees its own steps.
pub fn scratchpad(rounds: &[RoundRecord]) -> String {
    rounds.iter().map(render_round).collect()
}

fn render_round(round: &RoundRecord) -> String {
    let actions: Vec<Value> = round
        .calls
        .iter()
        .map(|(call, _)| json!({"action": call.name, "action_input": input_value(&call.arguments)}))
        .collect();
    let action = match actions.as_slice() {
        [single] => single.to_string(),
        _ => Value::Array(actions.clone()).to_string(),
    };
    let observation = match round.calls.as_slice() {
        [(_, only)] => only.clone(),
        calls => calls
            .iter()
            .map(|(call, obs)| format!("\n- {}: {obs}", call.name))
            .collect(),
    };
    let steered: String = round
        .steered
        .iter()
        .map(|text| format!("The user adds: {text}\n\n"))
        .collect();
    format!(
        "Thought: {}\nAction:\n```json\n{action}\n```\nObservation: {observation}\n\n{steered}",
        round.text.trim()
    )
}

fn input_value(arguments: &str) -> Value {
    serde_json::from_str(arguments).unwrap_or_else(|_| Value::String(arguments.to_owned()))
}

impl Strategy for ChainOfThought {
    fn kind(&self) -> StrategyKind {
        StrategyKind::ChainOfThought
    }

    fn build_request(
        &self,
        context: &PromptContext,
        rounds: &[RoundRecord],
        tools: &[OfferedTool],
    ) -> ChatRequest {
        let messages = match self.mode {
            ModelMode::Chat => self.chat_messages(context, rounds, tools),
            ModelMode::Completion => vec![ChatMessage::user_text(
                self.completion_prompt(context, rounds, tools),
            )],
        };
        let mut stop = context.stop.clone();
        if !stop.iter().any(|s| s == OBSERVATION_STOP) {
            stop.push(OBSERVATION_STOP.to_owned());
        }
        context.request(messages, &[], stop, !rounds.is_empty())
    }

    /// Refuses a template whose first prompt would pass `limit` bytes, measured from the
    /// sizes of what fills it: every occurrence of a variable counts. The transcript
    /// variables grow each round, so each may appear once.
    fn check_prompt_size(
        &self,
        instruction_len: usize,
        query_len: usize,
        tools: &ToolSet,
        limit: usize,
    ) -> Result<(), FieldError> {
        let tools = tools.offered();
        let tools = tools.as_slice();
        let field = match self.template {
            Some(_) => "agent.react_prompt",
            None => "agent.instruction",
        };
        let template = self.template();
        let completion = self.mode == ModelMode::Completion;
        let counts = template::occurrences(template, &VARIABLES);
        if completion {
            for (name, count) in VARIABLES.iter().zip(&counts) {
                if TRANSCRIPT.contains(name) && *count > 1 {
                    return Err(FieldError::new(
                        field,
                        format!("uses {{{{{name}}}}} {count} times; it may appear once"),
                    ));
                }
            }
        }
        let values = [
            instruction_len,
            tools_json(tools).len(),
            tool_names(tools).len(),
            0,
            query_len,
            0,
        ];
        let mut size = template.len();
        for ((name, count), value) in VARIABLES.iter().zip(&counts).zip(values) {
            if !completion && TRANSCRIPT.contains(name) {
                continue;
            }
            size = size
                .saturating_sub(count * (name.len() + 4))
                .saturating_add(count.saturating_mul(value));
        }
        if size > limit {
            return Err(FieldError::new(
                field,
                format!("renders a prompt of {size} bytes, more than runner.max_instruction_bytes ({limit})"),
            ));
        }
        Ok(())
    }

    fn reader(&self, tools: &[OfferedTool]) -> Box<dyn TurnReader> {
        Box::new(ReactReader {
            parser: ReactParser::new(),
            thought: String::new(),
            answer: None,
            actions: Vec::new(),
            single_parameter: tools.iter().filter_map(single_parameter).collect(),
            ids: Vec::new(),
        })
    }
}

/// The tool's only parameter, so a plain-string input can be given to it (as models often
/// write `"action_input": "Paris weather"`).
fn single_parameter(tool: &OfferedTool) -> Option<(String, String)> {
    let properties = tool.parameters.get("properties")?.as_object()?;
    match properties.keys().collect::<Vec<_>>().as_slice() {
        [only] => Some((tool.name.clone(), (*only).clone())),
        _ => None,
    }
}

/// Reads one ReAct turn.
struct ReactReader {
    parser: ReactParser,
    /// Visible text before any `Final Answer:` mark.
    thought: String,
    /// Visible text after a `Final Answer:` mark.
    answer: Option<String>,
    actions: Vec<Action>,
    single_parameter: HashMap<String, String>,
    /// The ids of the calls whose input was streamed, by their place: the call made keeps
    /// the id its forming pieces carried.
    ids: Vec<String>,
}

impl ReactReader {
    fn take(&mut self, pieces: Vec<Piece>) -> String {
        let mut visible = String::new();
        for piece in pieces {
            match piece {
                Piece::Text(text) => {
                    match self.answer.as_mut() {
                        Some(answer) => answer.push_str(&text),
                        None => self.thought.push_str(&text),
                    }
                    visible.push_str(&text);
                }
                Piece::AnswerMark(_) => self.answer = Some(self.answer.take().unwrap_or_default()),
                Piece::Actions { actions, .. } => self.actions.extend(actions),
                Piece::Hidden(_) => {}
            }
        }
        visible
    }

    /// The id of the call at `index`, minted the first time it is asked for.
    fn id(&mut self, index: usize) -> String {
        while self.ids.len() <= index {
            self.ids
                .push(format!("call_{}", uuid::Uuid::new_v4().simple()));
        }
        self.ids[index].clone()
    }

    fn call(&mut self, index: usize, action: Action) -> ToolCallRequest {
        let arguments = match action.input {
            Value::Object(map) => Value::Object(map).to_string(),
            Value::Null => "{}".to_owned(),
            Value::String(text)
                if serde_json::from_str::<serde_json::Map<String, Value>>(&text).is_ok() =>
            {
                text
            }
            other @ (Value::String(_) | Value::Bool(_) | Value::Number(_) | Value::Array(_)) => {
                match self.single_parameter.get(&action.name) {
                    Some(parameter) => json!({ parameter: other }).to_string(),
                    None => other.to_string(),
                }
            }
        };
        ToolCallRequest {
            id: self.id(index),
            name: action.name,
            arguments,
        }
    }
}

fn answer_text(input: Value) -> String {
    match input {
        Value::String(text) => text,
        Value::Null => String::new(),
        other @ (Value::Bool(_) | Value::Number(_) | Value::Array(_) | Value::Object(_)) => {
            other.to_string()
        }
    }
}

impl TurnReader for ReactReader {
    fn push(&mut self, text: &str) -> String {
        let pieces = self.parser.push(text);
        self.take(pieces)
    }

    fn flush(&mut self) -> String {
        let pieces = self.parser.finish();
        self.take(pieces)
    }

    fn forming(&mut self) -> Vec<ArgumentsPiece> {
        self.parser
            .forming()
            .into_iter()
            .map(|piece| ArgumentsPiece {
                index: piece.index,
                id: Some(self.id(piece.index as usize)),
                name: Some(piece.name),
                text: piece.text,
            })
            .collect()
    }

    fn shows_answer(&self) -> bool {
        self.answer.is_some()
    }

    /// The first action decides: `Final Answer` gives the answer (not yet shown), a tool
    /// gives calls (no answer), and a reply with no action at all is itself the answer.
    fn finish(mut self: Box<Self>, _end: TurnEnd) -> ModelStep {
        let thought = self.thought.trim().to_owned();
        let mut actions = std::mem::take(&mut self.actions);
        let (answer, unshown) = match actions.first() {
            Some(first) if first.is_final_answer() => {
                let first = actions.remove(0);
                actions.clear();
                let answer = answer_text(first.input);
                (answer.clone(), answer)
            }
            Some(_) => (String::new(), String::new()),
            None => {
                let answer = self.answer.take().unwrap_or_else(|| thought.clone());
                (answer.trim().to_owned(), String::new())
            }
        };
        let calls = actions
            .into_iter()
            .filter(|a| !a.is_final_answer())
            .enumerate()
            .map(|(index, a)| self.call(index, a))
            .collect();
        ModelStep {
            thought,
            calls,
            answer,
            unshown,
        }
    }
}

#[cfg(test)]
mod tests;
