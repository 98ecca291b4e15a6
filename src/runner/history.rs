//! Earlier turns of a conversation, rebuilt from stored messages and thoughts so the model
//! sees its own earlier tool calls and results under their original call ids.

use super::strategy::{PastTurn, RoundRecord};
use crate::domain::{FinishReason, MessageStatus, PastMessage, Thought};
use crate::llm::{Tokenizer, ToolCallRequest};

/// The earlier turns a run starts with, and what was left out of them unread.
#[derive(Debug, Clone, Default)]
pub struct History {
    /// Turns that may reach the prompt, oldest first.
    pub turns: Vec<PastTurn>,
    /// Earlier messages not read: beyond `memory.max_turns` or the context window.
    pub left_out_turns: u32,
    /// Tokens of the left-out turns whose size was known.
    pub left_out_tokens: u64,
    /// The ordinal of the conversation's newest message: 0 when it has none, `None` when
    /// its record does not say.
    pub newest_ordinal: Option<u64>,
}

/// A past turn from its message and thoughts. Calls without a result are left out: a call
/// the model never saw answered must not be replayed as if it had been. A steer's text
/// follows the round it came after (or the question, when no round before it is replayed).
pub fn past_turn(message: &PastMessage, thoughts: &[Thought]) -> PastTurn {
    let mut query = message.query.clone();
    let mut rounds: Vec<RoundRecord> = Vec::new();
    for thought in thoughts {
        for steered in &thought.steered {
            match rounds.last_mut() {
                Some(before) => before.steered.push(steered.text.clone()),
                None => {
                    query.push_str("\n\n");
                    query.push_str(&steered.text);
                }
            }
        }
        let round = RoundRecord {
            text: thought.thought.clone(),
            calls: answered_calls(thought),
            reasoning: Vec::new(),
            steered: Vec::new(),
        };
        if !round.calls.is_empty() {
            rounds.push(round);
        }
    }
    PastTurn {
        query,
        rounds,
        answer: final_text(message, thoughts),
        tokens: None,
    }
}

/// The turn of a message that was answered in one round without tools, from the message
/// alone: its thoughts add nothing to the prompt, so they need not be read.
pub fn answered_at_once(message: &PastMessage) -> Option<PastTurn> {
    let at_once = message.iterations <= 1
        && message.finish_reason == Some(FinishReason::Stop)
        && message.status == MessageStatus::Completed
        && !message.answer.is_empty();
    at_once.then(|| PastTurn {
        query: message.query.clone(),
        rounds: Vec::new(),
        answer: message.answer.clone(),
        tokens: None,
    })
}

/// A turn's tokens as history, without a prompt to measure it in: its texts, each call's
/// name, arguments and result, and the framing of each message. For turns written before
/// counts were kept with the message; the fitting of the prompt corrects what it misses.
pub fn estimate_tokens(turn: &PastTurn, tokenizer: Tokenizer) -> u64 {
    let count = |text: &str| tokenizer.count_text(text) + Tokenizer::PER_MESSAGE;
    let rounds: usize = turn
        .rounds
        .iter()
        .map(|round| {
            count(&round.text)
                + round.steered.iter().map(|text| count(text)).sum::<usize>()
                + round
                    .calls
                    .iter()
                    .map(|(call, observation)| {
                        count(&call.name) + count(&call.arguments) + count(observation)
                    })
                    .sum::<usize>()
        })
        .sum();
    (count(&turn.query) + rounds + count(&turn.answer)) as u64
}

fn answered_calls(thought: &Thought) -> Vec<(ToolCallRequest, String)> {
    thought
        .tool_calls
        .iter()
        .filter_map(|call| {
            let observation = call.observation.clone()?;
            let request = ToolCallRequest {
                id: call.id.clone(),
                name: call.name.clone(),
                arguments: call.arguments.clone(),
            };
            Some((request, observation))
        })
        .collect()
}

/// The text that closed the turn: the last round's answer when it called no tool, else the
/// message's answer (a run stopped at the iteration limit or interrupted).
fn final_text(message: &PastMessage, thoughts: &[Thought]) -> String {
    match thoughts.last() {
        Some(last) if last.tool_calls.is_empty() && !last.answer.is_empty() => last.answer.clone(),
        Some(last) if last.tool_calls.is_empty() && message.answer.is_empty() => {
            last.thought.clone()
        }
        Some(_) | None => message.answer.clone(),
    }
}

/// Whether a past turn gives the model anything: an unfinished message or one that ended
/// before any answer or tool result would only add a dangling question.
pub fn is_useful(message: &PastMessage, turn: &PastTurn) -> bool {
    message.status.is_terminal() && (!turn.answer.is_empty() || !turn.rounds.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::{Message, MessageId, SteeredText, ToolCallRecord};

    fn called(message: MessageId, position: u32, steered: &[&str]) -> Thought {
        let mut thought = Thought::begin(message, position);
        thought.tool_calls = vec![ToolCallRecord {
            id: format!("c{position}"),
            name: "clock".into(),
            provider: "time".into(),
            arguments: "{}".into(),
            observation: Some("10:00".into()),
            meta: None,
        }];
        thought.steered = steered
            .iter()
            .map(|text| SteeredText {
                message_id: MessageId::new(),
                text: (*text).into(),
            })
            .collect();
        thought
    }

    #[test]
    fn a_steers_text_follows_the_round_it_came_after_in_later_turns() {
        let mut message = Message::running(
            crate::domain::ConversationId::new(),
            "What time?".into(),
            crate::domain::StrategyKind::FunctionCalling,
            "openai".into(),
            "gpt".into(),
        );
        message.status = MessageStatus::Completed;
        message.answer = "Ten in Tokyo.".into();
        let past = PastMessage::from(&message);
        let mut answer = Thought::begin(message.id, 3);
        answer.thought = "Ten in Tokyo.".into();
        answer.answer = answer.thought.clone();
        answer.steered = called(message.id, 3, &["And Osaka?"]).steered;
        let thoughts = [
            called(message.id, 1, &[]),
            called(message.id, 2, &["In Tokyo, please."]),
            answer,
        ];
        let turn = past_turn(&past, &thoughts);
        assert_eq!(turn.query, "What time?");
        assert_eq!(turn.rounds.len(), 2);
        assert_eq!(turn.rounds[0].steered, ["In Tokyo, please."]);
        assert_eq!(turn.rounds[1].steered, ["And Osaka?"]);
        assert_eq!(turn.answer, "Ten in Tokyo.");
    }
}
