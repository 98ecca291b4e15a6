//! The rule for a run that arrives while its conversation has a live run.

use serde::{Deserialize, Serialize};

/// What happens to a new run when its conversation has a live one (running, or waiting for
/// approval or client tools). Kept by the store, so it holds across replicas.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ConversationPolicy {
    /// Both run, each from the same history: a fork of the conversation, opted into.
    #[default]
    Parallel,
    /// The new run is refused, naming the live one; nothing is written.
    Reject,
}

impl ConversationPolicy {
    /// The policy a run follows: the request's, else the agent's, else the default.
    pub fn resolve(request: Option<Self>, agent: Option<Self>) -> Self {
        request.or(agent).unwrap_or_default()
    }

    /// Whether the run may start only while no other run of its conversation is live.
    pub fn alone(self) -> bool {
        match self {
            Self::Parallel => false,
            Self::Reject => true,
        }
    }

    /// The name metrics and logs use.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Parallel => "parallel",
            Self::Reject => "reject",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_request_wins_over_the_agent_and_the_default_is_parallel() {
        use ConversationPolicy::{Parallel, Reject};
        assert_eq!(
            ConversationPolicy::resolve(Some(Parallel), Some(Reject)),
            Parallel
        );
        assert_eq!(ConversationPolicy::resolve(None, Some(Reject)), Reject);
        assert_eq!(ConversationPolicy::resolve(None, None), Parallel);
        assert!(Reject.alone());
        assert!(!Parallel.alone());
    }
}
