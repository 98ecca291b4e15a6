//! A steer (`steer`): text a caller adds to its conversation's live run instead of
//! starting another.

use serde::{Deserialize, Serialize};

use super::MessageId;

/// A steer's text as the run it joined took it: a user turn of that run, recorded on the
/// thought of the round whose model call first saw it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SteeredText {
    /// The steer that brought it (its message id while it waited to join).
    pub message_id: MessageId,
    /// The text.
    pub text: String,
}
