//! What a caller asks of a run that may be held by another replica: kept in the store
//! until the run's owner takes it, so no replica needs another's address.

use serde::{Deserialize, Serialize};

/// One result the caller submitted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClientOutput {
    /// The call it answers.
    pub tool_call_id: String,
    /// The tool's output.
    pub output: String,
    /// Set when the tool failed; the model sees it as the observation.
    pub error: String,
}

/// A decision on one call that needs approval.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Decision {
    /// The call decided on.
    pub tool_call_id: String,
    /// Whether it may run.
    pub approve: bool,
    /// Why it may not, for the model.
    pub reason: String,
}

/// A request for a running message, checked against what is stored before it is kept.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunCommand {
    /// Stop the run.
    Cancel,
    /// Results of the caller's own tools, every call the run waits on answered.
    Outputs(Vec<ClientOutput>),
    /// Decisions on the calls that need approval, every one decided.
    Decisions(Vec<Decision>),
    /// Stop the run for a newer run of its conversation.
    Interrupt(super::Interruption),
    /// A steer waits to join the run: it reads its steers before its next model call.
    Steer,
}
