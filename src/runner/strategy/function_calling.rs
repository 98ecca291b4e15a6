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

/// Each round as the assistant's tool calls followed by one tool message per result.
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
    }
}

/// Shows all text as it arrives, and all of it is answer; the calls come from the turn's end.
#[derive(Default)]
struct TextReader {
    text: String,
}

impl TurnReader for TextReader {
    fn push(&mut self, text: &str) -> String {
        self.text.push_str(text);
        text.to_owned()
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
        }];
        let tool = OfferedTool {
            name: "current_time".into(),
            description: "d".into(),
            parameters: json!({"type": "object"}),
        };
        let request = FunctionCalling.build_request(&context(), &rounds, &[tool]);
        assert_eq!(request.messages.len(), 5);
        assert!(
            matches!(&request.messages[2], ChatMessage::Assistant { tool_calls, .. } if tool_calls.len() == 2)
        );
        assert!(
            matches!(&request.messages[4], ChatMessage::Tool { tool_call_id, content } if tool_call_id == "b" && content == "11:00")
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
        };
        let later = FunctionCalling.build_request(&ctx, &[round], &[]);
        assert_eq!(
            later.messages[1],
            ChatMessage::user_text("[image]\nWhat time is it?")
        );
    }
}
