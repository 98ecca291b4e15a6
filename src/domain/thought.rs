//! Thought records: one per LLM round, holding what the model said and the tools it called.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::{MessageId, ThoughtId, Usage};

/// How one tool call went.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolInvokeMeta {
    /// Seconds the tool took.
    pub time_cost: f64,
    /// The failure the model was told about, if any.
    pub error: Option<String>,
    /// Which tool ran with which preset parameters.
    pub tool_config: serde_json::Map<String, serde_json::Value>,
}

/// How a tool call ended, as metrics and spans tell it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallOutcome {
    /// The tool answered.
    Success,
    /// The tool ran and failed.
    Error,
    /// The tool did not finish in time.
    Timeout,
    /// The arguments did not fit the tool's schema.
    InvalidArguments,
    /// The run offers no such tool.
    UnknownTool,
}

impl CallOutcome {
    /// The outcome's name in metrics and spans.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Success => "success",
            Self::Error => "error",
            Self::Timeout => "timeout",
            Self::InvalidArguments => "invalid_arguments",
            Self::UnknownTool => "unknown_tool",
        }
    }
}

/// One tool call of a round. Calls are kept in the order the model made them and keyed by
/// their call id, so two calls of the same tool keep both results.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCallRecord {
    /// Call id from the model, or minted when it gave none.
    pub id: String,
    /// Tool name as the model wrote it.
    pub name: String,
    /// Provider of the tool; empty when no such tool exists.
    pub provider: String,
    /// Arguments exactly as the model wrote them.
    pub arguments: String,
    /// The tool's result as the model sees it; `None` until the tool has run.
    pub observation: Option<String>,
    /// Timing and error of the call; `None` until the tool has run.
    pub meta: Option<ToolInvokeMeta>,
}

/// One round of the agent loop.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Thought {
    /// The record's id.
    pub id: ThoughtId,
    /// The message the round belongs to.
    pub message_id: MessageId,
    /// 1-based, continuous within the message.
    pub position: u32,
    /// What the model said in this round (stored once).
    pub thought: String,
    /// Tool calls the model made in this round.
    pub tool_calls: Vec<ToolCallRecord>,
    /// The round's contribution to the answer.
    pub answer: String,
    /// Files the round's tools produced.
    pub file_ids: Vec<String>,
    /// The round's LLM usage; `None` until the model has answered.
    pub usage: Option<Usage>,
    /// Provider of the model that answered the round (a fallback's when the primary failed).
    #[serde(default)]
    pub provider: String,
    /// The model that answered the round.
    #[serde(default)]
    pub model: String,
    /// When the round began.
    pub created_at: DateTime<Utc>,
}

impl Thought {
    /// An empty record for round `position`, written before the model is called.
    pub fn begin(message_id: MessageId, position: u32) -> Self {
        Self {
            id: ThoughtId::new(),
            message_id,
            position,
            thought: String::new(),
            tool_calls: Vec::new(),
            answer: String::new(),
            file_ids: Vec::new(),
            usage: None,
            provider: String::new(),
            model: String::new(),
            created_at: super::now(),
        }
    }
}
