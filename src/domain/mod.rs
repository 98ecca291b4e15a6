//! Plain data shared by every room: ids, messages, thoughts, usage, run events and the error
//! taxonomy.
//!
//! Nothing here performs I/O or knows about tonic, a database or reqwest; the other rooms speak to
//! each other in these types.

mod access;
pub mod agent;
mod budget;
mod command;
mod conversation_policy;
mod error;
mod events;
mod file;
mod ids;
mod interruption;
mod lease;
mod message;
mod model_provider;
mod provider;
mod reasoning;
pub mod redact;
mod run_filter;
mod secret;
mod steer;
mod takeover;
mod thought;
mod usage;

pub use access::{
    ApiKeyRecord, TenantLimits, DEFAULT_MAX_CONCURRENT_CHILD_RUNS, DEFAULT_MAX_FOLLOW_STREAMS,
    DEFAULT_MAX_QUEUED_PER_CONVERSATION,
};
pub use agent::{
    AgentChange, AgentRecord, AgentRefusal, AgentVersionRecord, CallAt, ParentLink, PinnedAgent,
    RunOverrides, VersionPick,
};
pub use budget::{BudgetKind, OnExhausted, Raised, RunBudget, Spent, MAX_BUDGET_COST};
pub use command::{ClientOutput, Decision, RunCommand};
pub use conversation_policy::ConversationPolicy;
pub use error::{ErrorKind, FieldError};
pub use events::{
    CallDelta, ChildEvent, EventEnvelope, HistoryReport, RunEnded, RunEvent, RunStarted, Wait,
};
pub use file::FileRecord;
pub use ids::{ConversationId, FileId, MessageId, Tenant, ThoughtId};
pub use interruption::{Interruption, INTERRUPTED_CALL};
pub use lease::Lease;
pub use message::{
    Conversation, FinishReason, IdempotencyRecord, Message, MessageStatus, PastMessage, RunFailure,
    StrategyKind,
};
pub use model_provider::{
    Feature, ModelEntry, ProviderApi, ProviderConfig, Vocabulary, DEFAULT_MAX_RETRIES,
    DEFAULT_QUEUE_TIMEOUT_SECS, DEFAULT_RETRY_BASE_MS, DEFAULT_RETRY_MAX_DELAY_MS,
};
pub use provider::{McpToolDef, ProviderKind, ProviderRecord, ProviderSource};
pub use reasoning::{ProviderReasoning, Reasoning};
pub use run_filter::{RunFilter, RunIndex};
pub use secret::Secret;
pub use steer::SteeredText;
pub use takeover::{adopt, end_orphan, fate, Adoption, Fate, OWNER_LOST, STOPPED};
pub use thought::{
    CallOutcome, RetrieverResource, Thought, ToolCallRecord, ToolInvokeMeta, NOT_RUN,
    SHOWN_TEXT_LIMIT,
};
pub use usage::{Pricing, TokenUsage, Usage};

/// The current time as a UTC timestamp, in one place so records agree on the clock.
pub fn now() -> chrono::DateTime<chrono::Utc> {
    chrono::Utc::now()
}
