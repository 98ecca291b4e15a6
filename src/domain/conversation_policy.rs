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
}

impl ConversationPolicy {
    /// The policy a run follows: the request's, else the agent's, else the default.
    pub fn resolve(request: Option<Self>, agent: Option<Self>) -> Self {
        request.or(agent).unwrap_or_default()
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
}
