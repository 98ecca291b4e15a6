//! Conversations and messages: what a user asked and what the agent answered.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::thought::RetrieverResource;
use super::{ConversationId, MessageId, Tenant, Usage};

fn is_zero(value: &u64) -> bool {
    *value == 0
}

/// A thread of messages.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Conversation {
    /// The conversation's id.
    pub id: ConversationId,
    /// Owner of the conversation.
    pub tenant: Tenant,
    /// The end user who started it.
    pub user: String,
    /// When the first message arrived.
    pub created_at: DateTime<Utc>,
}

/// How the agent talks to the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StrategyKind {
    /// Native `tools` / `tool_calls` of the chat API.
    FunctionCalling,
    /// ReAct: tools described in the prompt, actions parsed from text.
    ChainOfThought,
}

/// Where a message is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MessageStatus {
    /// The agent loop is working on it.
    Running,
    /// The loop ended with an answer (or at the iteration limit).
    Completed,
    /// The loop ended with an error.
    Failed,
    /// A caller stopped it.
    Cancelled,
    /// Something other than its caller stopped it: the server stopped while it ran (its
    /// `error` says so), or a newer run of its conversation (`interrupted_by`).
    Interrupted,
    /// Paused until the caller submits client-tool outputs.
    WaitingToolOutputs,
    /// Paused until someone approves or declines tool calls.
    WaitingApproval,
    /// Waiting for the runs ahead of it in its conversation to end (`enqueue`); it has not
    /// started.
    Queued,
}

impl MessageStatus {
    /// Whether the message can still change.
    pub fn is_terminal(self) -> bool {
        match self {
            Self::Running | Self::WaitingToolOutputs | Self::WaitingApproval | Self::Queued => {
                false
            }
            Self::Completed | Self::Failed | Self::Cancelled | Self::Interrupted => true,
        }
    }
}

/// Why a run ended without failing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    /// The model answered without calling a tool.
    Stop,
    /// The model still wanted tools after the last allowed round.
    MaxIterations,
    /// A caller stopped the run.
    Cancelled,
    /// A budget of the run ran out (`Message::budget_exhausted` says which).
    BudgetExhausted,
    /// A newer run of the conversation stopped it (`Message::interrupted_by` names it).
    Interrupted,
}

/// What an idempotency key points at: the message it started and the request it came with.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IdempotencyRecord {
    /// The message the first request started.
    pub message_id: MessageId,
    /// Digest of that request, to tell a retry from a different request reusing the key.
    pub fingerprint: String,
}

/// A failure recorded on a message and sent as the stream's last event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunFailure {
    /// Stable machine-readable code, e.g. `llm_server_error`.
    pub code: String,
    /// Human-readable detail.
    pub message: String,
}

/// What an earlier message gives the history of a later run: read from the stored message
/// record without the fields history never uses (usage, inputs, times), which made reading
/// a long conversation's history cost a full decode per turn.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct PastMessage {
    /// The message.
    pub id: MessageId,
    /// Its place among the conversation's messages (0 in records of earlier versions).
    #[serde(default)]
    pub ordinal: u64,
    /// The user's query.
    pub query: String,
    /// The final answer.
    pub answer: String,
    /// Where it stands.
    pub status: MessageStatus,
    /// Why it ended.
    pub finish_reason: Option<FinishReason>,
    /// LLM rounds made.
    pub iterations: u32,
    /// Its tokens as history, by tokenizer.
    #[serde(default)]
    pub history_tokens: BTreeMap<String, u64>,
    /// Left out of every later prompt (stopped by a `rollback`).
    #[serde(default)]
    pub rolled_back: bool,
}

impl From<&Message> for PastMessage {
    fn from(message: &Message) -> Self {
        Self {
            id: message.id,
            ordinal: message.ordinal,
            query: message.query.clone(),
            answer: message.answer.clone(),
            status: message.status,
            finish_reason: message.finish_reason,
            iterations: message.iterations,
            history_tokens: message.history_tokens.clone(),
            rolled_back: message.rolled_back,
        }
    }
}

/// One user turn and the agent's answer to it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    /// The message's id.
    pub id: MessageId,
    /// The conversation it belongs to.
    pub conversation_id: ConversationId,
    /// Position within the conversation; increases with every message.
    pub seq: u64,
    /// How many messages the conversation had with this one (1 for its first), so a run
    /// knows how many earlier turns it left unread without counting them; 0 in records
    /// of earlier versions.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub ordinal: u64,
    /// The user's query.
    pub query: String,
    /// Values given for the instruction's variables.
    pub inputs: BTreeMap<String, String>,
    /// The answer so far; final once the status is terminal.
    pub answer: String,
    /// Life-cycle state.
    pub status: MessageStatus,
    /// Why a completed or cancelled run ended.
    pub finish_reason: Option<FinishReason>,
    /// Set when the run failed or was interrupted.
    pub error: Option<RunFailure>,
    /// Usage summed over all rounds so far.
    pub usage: Usage,
    /// LLM rounds made.
    pub iterations: u32,
    /// The strategy that ran.
    pub strategy: StrategyKind,
    /// LLM provider name from the server configuration.
    pub provider: String,
    /// Model name.
    pub model: String,
    /// The end user.
    pub user: String,
    /// When the run started.
    pub created_at: DateTime<Utc>,
    /// When the record last changed.
    pub updated_at: DateTime<Utc>,
    /// Passages the run's tools retrieved, in the order the model saw them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub retriever_resources: Vec<RetrieverResource>,
    /// The answer as the document `output_schema` asked for, once it met the schema.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub structured_output: Option<serde_json::Value>,
    /// Why the answer does not meet `output_schema` (it is kept as text).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_invalid: Option<String>,
    /// Tokens the turn takes as history, by tokenizer name: counted once when the turn
    /// ended, so later turns fit their history without reading or counting it again.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub history_tokens: BTreeMap<String, u64>,
    /// How many times another process took the run over after its owner was lost; past
    /// `[cluster] max_takeovers` the run ends instead.
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub takeovers: u32,
    /// Its owner stopped and left it for another process to go on with (a hand-over,
    /// which is not counted as a takeover).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub handed_over: bool,
    /// The stored agent and version that answers, with the run's overrides; `None` for an
    /// inline agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<Box<super::PinnedAgent>>,
    /// The budget that ran out, when one did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget_exhausted: Option<super::BudgetKind>,
    /// Seconds the run spent running (waits on the caller excluded), kept each round while
    /// it has a wall-clock budget, so an owner taking it over goes on counting.
    #[serde(default, skip_serializing_if = "is_zero_f64")]
    pub running_seconds: f64,
    /// Set on a sub-agent's run: the run and call that started it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<Box<super::ParentLink>>,
    /// While queued: the run directly ahead of it in its conversation, which it waits for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queued_behind: Option<MessageId>,
    /// Stopped by a newer run of its conversation: that run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interrupted_by: Option<MessageId>,
    /// Left out of every later prompt of its conversation (stopped by a `rollback`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub rolled_back: bool,
    /// A steer waiting to join a live run: that run. Once joined the steer is no message
    /// of its own; should that run end without taking it, it runs as this message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steers: Option<MessageId>,
}

fn is_zero_f64(value: &f64) -> bool {
    *value == 0.0
}

fn is_zero_u32(value: &u32) -> bool {
    *value == 0
}

impl Message {
    /// A new run's message as it is first written: running, nothing answered or spent yet,
    /// a new id; the store gives it its place (`seq`, `ordinal`) when it is written.
    pub fn running(
        conversation_id: ConversationId,
        query: String,
        strategy: StrategyKind,
        provider: String,
        model: String,
    ) -> Self {
        let now = super::now();
        Self {
            id: MessageId::new(),
            conversation_id,
            seq: 0,
            query,
            inputs: BTreeMap::new(),
            answer: String::new(),
            status: MessageStatus::Running,
            finish_reason: None,
            error: None,
            usage: Usage::default(),
            iterations: 0,
            strategy,
            provider,
            model,
            user: String::new(),
            created_at: now,
            updated_at: now,
            retriever_resources: Vec::new(),
            structured_output: None,
            output_invalid: None,
            budget_exhausted: None,
            running_seconds: 0.0,
            history_tokens: Default::default(),
            takeovers: 0,
            handed_over: false,
            agent: None,
            parent: None,
            queued_behind: None,
            interrupted_by: None,
            rolled_back: false,
            steers: None,
            ordinal: 0,
        }
    }

    /// Ends the message with `status` and `reason`, and returns the `end` event that says
    /// so, from what the message holds.
    pub fn end(&mut self, status: MessageStatus, reason: FinishReason) -> super::RunEvent {
        self.status = status;
        self.finish_reason = Some(reason);
        super::RunEvent::MessageEnd(Box::new(super::RunEnded {
            answer: self.answer.clone(),
            usage: self.usage.clone(),
            finish_reason: reason,
            iterations: self.iterations,
            retriever_resources: self.retriever_resources.clone(),
            structured_output: self.structured_output.clone(),
            output_invalid: self.output_invalid.clone(),
            budget_exhausted: self.budget_exhausted,
            interrupted_by: self.interrupted_by,
        }))
    }

    /// Ends the message as stopped by a newer run of its conversation, with the answer it
    /// holds, and returns the `end` event that says so.
    pub fn end_interrupted(&mut self, interruption: super::Interruption) -> super::RunEvent {
        self.interrupted_by = Some(interruption.by);
        self.rolled_back = interruption.rollback;
        self.end(MessageStatus::Interrupted, FinishReason::Interrupted)
    }

    /// Ends the message as `status` (a failure or interruption) for `failure`, not by its
    /// run but by whoever found it stranded, and returns the `error` event that announces
    /// it, one past `last_seq`: its followers, wherever they are, see it end.
    pub fn end_stranded(
        &mut self,
        status: MessageStatus,
        failure: RunFailure,
        last_seq: u64,
    ) -> super::EventEnvelope {
        self.status = status;
        self.error = Some(failure.clone());
        self.updated_at = super::now();
        super::EventEnvelope {
            seq: last_seq + 1,
            conversation_id: self.conversation_id,
            message_id: self.id,
            created_at: self.updated_at,
            event: super::RunEvent::Error {
                failure,
                usage: Box::new(self.usage.clone()),
                iterations: self.iterations,
            },
        }
    }
}
