//! A newer run of a conversation stopping the live ones (`interrupt`, `rollback`).

use serde::{Deserialize, Serialize};

use super::MessageId;

/// Why a run is stopped by another: which run stopped it, and whether it leaves the history.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Interruption {
    /// The newer run that stops it.
    pub by: MessageId,
    /// The stopped run is left out of every later prompt (`rollback`).
    #[serde(default)]
    pub rollback: bool,
}

/// What the model reads for a call the interruption left unanswered: the call ran or not,
/// its result is unknown.
pub const INTERRUPTED_CALL: &str =
    "interrupted: a newer message in the conversation stopped the run before this call answered";
