//! Earlier turns of a conversation, rebuilt from stored messages and thoughts so the model
//! sees its own earlier tool calls and results under their original call ids.

use super::strategy::{PastTurn, RoundRecord};
use crate::domain::{Message, Thought};
use crate::llm::ToolCallRequest;

/// A past turn from its message and thoughts. Calls without a result are left out: a call
/// the model never saw answered must not be replayed as if it had been.
pub fn past_turn(message: &Message, thoughts: &[Thought]) -> PastTurn {
    let rounds = thoughts
        .iter()
        .map(|thought| RoundRecord {
            text: thought.thought.clone(),
            calls: answered_calls(thought),
            reasoning: Vec::new(),
        })
        .filter(|round| !round.calls.is_empty())
        .collect();
    PastTurn {
        query: message.query.clone(),
        rounds,
        answer: final_text(message, thoughts),
    }
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
fn final_text(message: &Message, thoughts: &[Thought]) -> String {
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
pub fn is_useful(message: &Message, turn: &PastTurn) -> bool {
    message.status.is_terminal() && (!turn.answer.is_empty() || !turn.rounds.is_empty())
}
