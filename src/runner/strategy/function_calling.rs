//! Function calling: tools offered natively, calls read from the model's `tool_calls`.

use super::{user_message, ModelStep, PromptContext, RoundRecord, Strategy, TurnReader};
use crate::domain::StrategyKind;
use crate::llm::{ChatMessage, ChatRequest, TurnEnd};
use crate::tools::OfferedTool;

/// The function-calling strategy.
#[derive(Debug, Clone, Copy, Default)]
pub struct FunctionCalling;

impl Strategy for FunctionCalling {
    fn kind(&self) -> StrategyKind {
        StrategyKind::FunctionCalling
    }

    fn build_request(
        &self,
        context: &PromptContext,
        rounds: &[RoundRecord],
        tools: &[OfferedTool],
    ) -> ChatRequest {
        let mut messages = Vec::with_capacity(2 + context.history.len() + rounds.len() * 2);
        if !context.instruction.is_empty() {
            messages.push(ChatMessage::System {
                content: context.instruction.clone(),
            });
        }
        for turn in &context.history {
            messages.push(ChatMessage::user_text(turn.query.clone()));
            push_rounds(&mut messages, &turn.rounds);
            if !turn.answer.is_empty() {
                messages.push(ChatMessage::assistant_text(turn.answer.clone()));
            }
        }
        messages.push(user_message(context, !rounds.is_empty()));
        push_rounds(&mut messages, rounds);
        if let Some(repair) = &context.repair {
            messages.push(ChatMessage::assistant_text(repair.answer.clone()));
            messages.push(ChatMessage::user_text(
                repair.request(StrategyKind::FunctionCalling),
            ));
        }
        context.request(messages, tools, context.stop.clone(), !rounds.is_empty())
    }

    fn reader(&self, _tools: &[OfferedTool]) -> Box<dyn TurnReader> {
        Box::new(TextReader::default())
    }
}

/// Each round as the assistant's tool calls followed by one tool message per result, then
/// the user turns steering runs added after it.
fn push_rounds(messages: &mut Vec<ChatMessage>, rounds: &[RoundRecord]) {
    for round in rounds {
        messages.push(ChatMessage::Assistant {
            content: round.text.clone(),
            tool_calls: round.calls.iter().map(|(call, _)| call.clone()).collect(),
            reasoning: round.reasoning.clone(),
        });
        messages.extend(
            round
                .calls
                .iter()
                .map(|(call, observation)| ChatMessage::Tool {
                    tool_call_id: call.id.clone(),
                    content: observation.clone(),
                }),
        );
        messages.extend(round.steered.iter().cloned().map(ChatMessage::user_text));
    }
}

/// Shows all text as it arrives, and all of it is answer, except a `<think>…</think>` the
/// turn opens with (a reasoning model on a server without a reasoning parser): that is
/// reasoning. The calls come from the turn's end.
#[derive(Default)]
struct TextReader {
    text: String,
    opening: Opening,
    /// Text held while it may still be (part of) the opening's tags.
    held: String,
    /// Reasoning read, not yet taken.
    reasoning: String,
}

/// Where the reader is in the turn's opening.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum Opening {
    /// Only spaces so far: a `<think>` may still open the turn.
    #[default]
    Undecided,
    /// Inside the opening `<think>` block.
    Thinking,
    /// Past its end: the spaces before the answer are dropped.
    Closed,
    /// Answer text from here on.
    Answer,
}

const THINK_OPEN: &str = "<think>";
const THINK_CLOSE: &str = "</think>";

impl TextReader {
    /// The answer text `text` adds, reading the opening block on the way.
    fn read(&mut self, text: &str) -> String {
        if self.opening == Opening::Answer {
            return text.to_owned();
        }
        self.held.push_str(text);
        loop {
            match self.opening {
                Opening::Answer => return std::mem::take(&mut self.held),
                Opening::Closed => {
                    self.held = self.held.trim_start().to_owned();
                    if self.held.is_empty() {
                        return String::new();
                    }
                    self.opening = Opening::Answer;
                }
                Opening::Undecided => {
                    let start = self.held.trim_start();
                    if let Some(rest) = start.strip_prefix(THINK_OPEN) {
                        self.held = rest.to_owned();
                        self.opening = Opening::Thinking;
                    } else if THINK_OPEN.starts_with(start) {
                        return String::new();
                    } else {
                        self.opening = Opening::Answer;
                    }
                }
                Opening::Thinking => match self.held.find(THINK_CLOSE) {
                    Some(at) => {
                        self.reasoning.push_str(&self.held[..at]);
                        self.held = self.held[at + THINK_CLOSE.len()..].to_owned();
                        self.opening = Opening::Closed;
                    }
                    None => {
                        // Keep back what may be the start of the closing tag.
                        let keep = (1..THINK_CLOSE.len())
                            .rev()
                            .find(|n| self.held.ends_with(&THINK_CLOSE[..*n]))
                            .unwrap_or(0);
                        let cut = self.held.len() - keep;
                        self.reasoning.push_str(&self.held[..cut]);
                        self.held.drain(..cut);
                        return String::new();
                    }
                },
            }
        }
    }
}

impl TurnReader for TextReader {
    fn push(&mut self, text: &str) -> String {
        let answer = self.read(text);
        self.text.push_str(&answer);
        answer
    }

    fn flush(&mut self) -> String {
        // A turn that ends inside its opening: spaces are nothing, an unclosed block is
        // reasoning.
        let held = std::mem::take(&mut self.held);
        match self.opening {
            Opening::Thinking => {
                self.reasoning.push_str(&held);
                String::new()
            }
            Opening::Undecided | Opening::Closed | Opening::Answer => {
                self.text.push_str(&held);
                held
            }
        }
    }

    fn reasoning(&mut self) -> String {
        std::mem::take(&mut self.reasoning)
    }

    fn shows_answer(&self) -> bool {
        true
    }

    fn finish(self: Box<Self>, end: TurnEnd) -> ModelStep {
        ModelStep {
            answer: self.text.clone(),
            thought: self.text,
            calls: end.tool_calls,
            unshown: String::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    /// What every chunking of `text` reads as: answer and reasoning.
    fn read_in(text: &str, size: usize) -> (String, String) {
        let mut reader = TextReader::default();
        let (mut answer, mut reasoning) = (String::new(), String::new());
        let chars: Vec<char> = text.chars().collect();
        for chunk in chars.chunks(size) {
            answer.push_str(&reader.push(&chunk.iter().collect::<String>()));
            reasoning.push_str(&reader.reasoning());
        }
        answer.push_str(&reader.flush());
        reasoning.push_str(&reader.reasoning());
        (answer, reasoning)
    }

    #[test]
    fn an_opening_think_block_is_reasoning_in_any_chunking() {
        for size in [1, 2, 5, 100] {
            assert_eq!(
                read_in("  <think>Paris, so UTC+1.</think>\n\nIt is 11:00.", size),
                ("It is 11:00.".to_owned(), "Paris, so UTC+1.".to_owned()),
                "size {size}"
            );
            assert_eq!(
                read_in("It is <think>not</think> 11.", size),
                ("It is <think>not</think> 11.".to_owned(), String::new())
            );
            assert_eq!(read_in("<thin", size), ("<thin".to_owned(), String::new()));
            assert_eq!(
                read_in("<think>cut short </thi", size),
                (String::new(), "cut short </thi".to_owned())
            );
        }
    }

    use super::*;
    use crate::llm::{ContentPart, ToolCallRequest};

    fn context() -> PromptContext {
        PromptContext {
            model: "m".into(),
            instruction: "Be brief.".into(),
            history: vec![],
            query: "What time is it?".into(),
            parameters: serde_json::Map::new(),
            ..PromptContext::default()
        }
    }

    #[test]
    fn later_rounds_replay_calls_and_results_under_their_ids() {
        let call = |id: &str| ToolCallRequest {
            id: id.into(),
            name: "current_time".into(),
            arguments: "{}".into(),
        };
        let rounds = vec![RoundRecord {
            reasoning: Vec::new(),
            text: "Checking.".into(),
            calls: vec![(call("a"), "10:00".into()), (call("b"), "11:00".into())],
            steered: vec!["Also in Tokyo, please.".into()],
        }];
        let tool = OfferedTool {
            name: "current_time".into(),
            description: "d".into(),
            parameters: json!({"type": "object"}),
        };
        let request = FunctionCalling.build_request(&context(), &rounds, &[tool]);
        assert_eq!(request.messages.len(), 6);
        assert!(
            matches!(&request.messages[2], ChatMessage::Assistant { tool_calls, .. } if tool_calls.len() == 2)
        );
        assert!(
            matches!(&request.messages[4], ChatMessage::Tool { tool_call_id, content } if tool_call_id == "b" && content == "11:00")
        );
        // A steer's text comes after the results it followed, as the user's.
        assert_eq!(
            request.messages[5],
            ChatMessage::user_text("Also in Tokyo, please.")
        );
        assert_eq!(request.tools.len(), 1);
    }

    #[test]
    fn images_go_with_the_first_round_and_are_flattened_after() {
        let mut ctx = context();
        ctx.files = vec![ContentPart::Image {
            url: "https://example.test/cat.png".into(),
            detail: "low".into(),
        }];
        let first = FunctionCalling.build_request(&ctx, &[], &[]);
        let ChatMessage::User { content } = &first.messages[1] else {
            panic!("no user message")
        };
        assert_eq!(content.len(), 2);
        assert!(matches!(&content[0], ContentPart::Image { .. }));
        let round = RoundRecord {
            reasoning: Vec::new(),
            text: String::new(),
            calls: vec![],
            steered: Vec::new(),
        };
        let later = FunctionCalling.build_request(&ctx, &[round], &[]);
        assert_eq!(
            later.messages[1],
            ChatMessage::user_text("[image]\nWhat time is it?")
        );
    }
}
