//! The rule for a run that arrives while its conversation has a live run.

use serde::{Deserialize, Serialize};

/// What happens to a new run when its conversation has a live one (running, or waiting for
/// approval or client tools). Kept by the store, so it holds across replicas.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ConversationPolicy {
    /// Both run, each from the same history: a fork of the conversation, opted into.
    Parallel,
    /// The new run is refused, naming the live one; nothing is written.
    Reject,
    /// The new run is stored queued and starts once the runs ahead of it have ended, with
    /// their questions and answers in its prompt: the default, so a conversation keeps one
    /// history.
    #[default]
    Enqueue,
    /// The live runs stop now (keeping what they showed, their unanswered calls answered
    /// "interrupted") and the new run starts after them.
    Interrupt,
    /// As `Interrupt`, and the stopped runs are left out of every later prompt.
    Rollback,
    /// The new text joins the live run as a user turn before its next model call; should
    /// that run make none, the text runs on its own as an `Enqueue`d run would.
    Steer,
}

impl ConversationPolicy {
    /// The policy a run follows: the request's, else the agent's, else the default.
    pub fn resolve(request: Option<Self>, agent: Option<Self>) -> Self {
        request.or(agent).unwrap_or_default()
    }

    /// What the new run does to the live runs ahead of it: `None` when it leaves them be.
    pub fn stops_live(self, by: super::MessageId) -> Option<super::Interruption> {
        match self {
            Self::Interrupt => Some(super::Interruption {
                by,
                rollback: false,
            }),
            Self::Rollback => Some(super::Interruption { by, rollback: true }),
            Self::Parallel | Self::Reject | Self::Enqueue | Self::Steer => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_request_wins_over_the_agent_and_the_default_is_enqueue() {
        use ConversationPolicy::{Enqueue, Parallel, Reject};
        assert_eq!(
            ConversationPolicy::resolve(Some(Parallel), Some(Reject)),
            Parallel
        );
        assert_eq!(ConversationPolicy::resolve(None, Some(Reject)), Reject);
        assert_eq!(ConversationPolicy::resolve(None, None), Enqueue);
    }

    #[test]
    fn only_interrupt_and_rollback_stop_the_live_runs_and_only_rollback_leaves_history() {
        let by = crate::domain::MessageId::new();
        let stops = |policy: ConversationPolicy| policy.stops_live(by);
        assert_eq!(stops(ConversationPolicy::Enqueue), None);
        assert_eq!(stops(ConversationPolicy::Reject), None);
        assert_eq!(stops(ConversationPolicy::Parallel), None);
        let interrupt = stops(ConversationPolicy::Interrupt).unwrap();
        assert_eq!((interrupt.by, interrupt.rollback), (by, false));
        assert!(stops(ConversationPolicy::Rollback).unwrap().rollback);
    }
}
