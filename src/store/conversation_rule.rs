//! The rule a new message follows when its conversation has a live message, decided the
//! same way by every backend.

use super::refusal::Refusal;
use crate::domain::{Message, MessageId};

/// What a new message may do when its conversation has a live message.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ConversationRule {
    /// Start beside it.
    #[default]
    Beside,
    /// Nothing: it is refused, naming the oldest live message.
    Alone,
    /// Be written queued (status `Queued`, `queued_behind` the newest live message), unless
    /// `max_queued` of the conversation's messages are queued already. A queued message is
    /// not admitted under the tenant's limits (it takes no slot and is no start) until
    /// [`Conversations::start_queued`] starts it.
    Queue {
        /// The most queued messages of one conversation.
        max_queued: u32,
    },
}

impl ConversationRule {
    /// What the rule makes of a new message whose conversation has the `live` messages
    /// (oldest first, each with whether it is queued): `None` to start now, the messages
    /// ahead of it to be queued, or why it is refused.
    pub fn decide(self, live: &[(MessageId, bool)]) -> Result<Option<u32>, Refusal> {
        let Some((oldest, _)) = live.first() else {
            return Ok(None);
        };
        match self {
            Self::Beside => Ok(None),
            Self::Alone => Err(Refusal::Busy { live: *oldest }),
            Self::Queue { max_queued } => {
                let queued = live.iter().filter(|(_, queued)| *queued).count() as u64;
                if queued >= u64::from(max_queued) {
                    return Err(Refusal::QueueFull { queued });
                }
                Ok(Some(u32::try_from(live.len()).unwrap_or(u32::MAX)))
            }
        }
    }

    /// Whether the rule reads the conversation's live messages at all.
    pub fn checks(self) -> bool {
        self != Self::Beside
    }
}

/// Marks `message` queued behind the newest of `live`, `ahead` of it in all: what a
/// backend writes for a message [`ConversationRule::decide`] queued.
pub fn queue_behind(message: &mut Message, live: &[(MessageId, bool)]) {
    message.status = crate::domain::MessageStatus::Queued;
    message.queued_behind = live.last().map(|(id, _)| *id);
}
