//! A run taken over from a lost owner: the new owner tells the client which round is made
//! again (and which text is void), finishes a round whose decision was durable, and goes
//! on with the loop as any run does. What to do is decided here, without I/O; the run's
//! task does it (`RunTask::pick_up`).

use super::agent::Agent;
use super::resume::Resume;
use super::state::Round;
use crate::domain::{FinishReason, RunEvent, TokenUsage, Usage, OWNER_LOST};
use crate::runner::strategy::{PromptContext, RoundRecord};
use crate::tools::OfferedTool;

/// Why a run was taken over, as `round_restarted` says it, when its owner stopped and
/// handed it over (else it is [`OWNER_LOST`]).
pub const HANDED_OVER: &str = "handed_over";

/// Where the loop goes on after a takeover.
pub enum PickUp {
    /// At this round.
    At(u32),
    /// Nowhere: the run ends so.
    Ended(FinishReason),
}

/// What is left to do of the round the lost owner had decided, if any.
pub(super) enum Leftover {
    /// Nothing: the loop goes on at this round.
    GoOnAt(u32),
    /// A decided round at the last position: it is closed as it is, and the run ends
    /// having reached its rounds' limit.
    Close(Box<Round>),
    /// A decided round whose calls are made (those not made yet) before the loop goes on.
    Finish(Box<Round>),
}

/// What is left of `resume`'s rounds when the run may make `max_rounds` rounds.
pub(super) fn leftover(decided: Option<Round>, next_position: u32, max_rounds: u32) -> Leftover {
    match decided {
        None => Leftover::GoOnAt(next_position),
        Some(round) if round.thought.position >= max_rounds => Leftover::Close(Box::new(round)),
        Some(round) => Leftover::Finish(Box::new(round)),
    }
}

/// The event that tells the run's followers which round is made again, and from which
/// `seq` the lost owner's events are void (`own_seq`, the next this owner sends, when none
/// are).
pub(super) fn restarted(resume: &Resume, own_seq: u64) -> RunEvent {
    RunEvent::RoundRestarted {
        position: resume.position(),
        discard_from_seq: resume.void_from.unwrap_or(own_seq),
        reason: match resume.handed_over {
            true => HANDED_OVER,
            false => OWNER_LOST,
        }
        .to_owned(),
    }
}

/// The model call the lost owner was making when it was cut (its prompt, and the text it
/// had shown), as estimated usage: the round made again is counted in full besides.
/// `None` when it had shown nothing.
pub(super) fn cut_call_usage(
    agent: &Agent,
    context: &PromptContext,
    rounds: &[RoundRecord],
    resume: &Resume,
    offered: &[OfferedTool],
    max_rounds: u32,
) -> Option<Usage> {
    if resume.void_text.is_empty() {
        return None;
    }
    let last = resume.next_position >= max_rounds;
    let tools: &[OfferedTool] = if last { &[] } else { offered };
    let request = agent.strategy.build_request(context, rounds, tools);
    let tokenizer = agent.model.info.tokenizer;
    let tokens = TokenUsage::estimated(
        tokenizer.count_request(&request) as u64,
        tokenizer.count_text(&resume.void_text) as u64,
    );
    Some(agent.model.info.pricing.usage(tokens, 0.0))
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;
    use crate::domain::MessageId;
    use crate::runner::run::state::RunState;

    fn resume(decided: Option<Round>, void_from: Option<u64>, handed_over: bool) -> Resume {
        Resume {
            decided,
            cut: None,
            next_position: 3,
            void_from,
            void_text: String::new(),
            started: HashSet::new(),
            handed_over,
            waited: std::time::Duration::ZERO,
        }
    }

    #[test]
    fn a_decided_round_is_finished_unless_it_was_the_last() {
        let message = MessageId::new();
        let decided = || RunState::default().begin_round(message, 2);
        assert!(matches!(leftover(None, 3, 5), Leftover::GoOnAt(3)));
        assert!(matches!(
            leftover(Some(decided()), 3, 5),
            Leftover::Finish(round) if round.thought.position == 2
        ));
        assert!(
            matches!(leftover(Some(decided()), 3, 2), Leftover::Close(_)),
            "a decided last round ends the run at its limit"
        );
    }

    #[test]
    fn the_restart_names_the_round_the_void_text_and_why() {
        let lost = restarted(&resume(None, Some(5), false), 9);
        let RunEvent::RoundRestarted {
            position,
            discard_from_seq,
            reason,
        } = lost
        else {
            panic!("a restart: {lost:?}");
        };
        assert_eq!(
            (position, discard_from_seq, reason.as_str()),
            (3, 5, OWNER_LOST)
        );
        let decided = RunState::default().begin_round(MessageId::new(), 2);
        let handed = restarted(&resume(Some(decided), None, true), 9);
        let RunEvent::RoundRestarted {
            position,
            discard_from_seq,
            reason,
        } = handed
        else {
            panic!("a restart: {handed:?}");
        };
        assert_eq!(
            (position, discard_from_seq, reason.as_str()),
            (2, 9, HANDED_OVER),
            "nothing void: the discard starts at this owner's next event"
        );
    }
}
