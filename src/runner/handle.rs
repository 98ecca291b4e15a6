//! What a caller gets for a run it started.

use super::live::EventStream;
use crate::domain::{ConversationId, MessageId};

/// A started (or, for an idempotent retry, already running) run: its ids and its events.
pub struct RunHandle {
    /// The message.
    pub message_id: MessageId,
    /// Its conversation.
    pub conversation_id: ConversationId,
    /// Events in `seq` order from the first; closes after the last one.
    pub events: EventStream,
}
