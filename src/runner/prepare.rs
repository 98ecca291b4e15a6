//! Preparing a run before anything is written: resolve the model, strategy and tools, find
//! or make the conversation, read its history, and build the message. Free functions over
//! the stores and registries, so the facade only sequences them.

use std::sync::Arc;

use super::error::RunError;
use super::history;
use super::run::{Agent, Output};
use super::spec::RunSpec;
use super::strategy::{self, PastTurn};
use crate::domain::{
    Conversation, ConversationId, IdempotencyRecord, Message, MessageId, MessageStatus,
    StrategyKind, Usage,
};
use crate::llm::{Feature, ModelRegistry};
use crate::store::{Inserted, Store};
use crate::tools::{ToolRegistry, ToolSet};

/// Everything a run needs that is resolved before its message is written.
pub struct Prepared {
    /// The agent the run drives.
    pub agent: Agent,
    /// The conversation to create with the message, when the request starts one.
    pub new_conversation: Option<Conversation>,
    /// The conversation the message belongs to.
    pub conversation_id: ConversationId,
}

/// Resolves what `spec` names; fails on anything the run could not use.
pub fn prepare(
    store: &Store,
    models: &ModelRegistry,
    tools: &ToolRegistry,
    spec: &RunSpec,
) -> Result<Prepared, RunError> {
    let model = models.resolve(&spec.agent.model.provider, &spec.agent.model.name)?;
    let fallbacks = spec
        .agent
        .model
        .fallbacks
        .iter()
        .enumerate()
        .map(|(index, fallback)| {
            models
                .resolve(&fallback.provider, &fallback.name)
                .map_err(|err| RunError::fallback(index, err))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let strategy = strategy::choose(&spec.agent, &model.info)?;
    let output = spec
        .agent
        .output
        .as_ref()
        .map(|output| {
            let native = strategy.kind() == StrategyKind::FunctionCalling
                && model.info.has(Feature::StructuredOutput);
            Output::new(output, native)
        })
        .transpose()?;
    let mut bound = ToolSet::bind(&tools.snapshot(&spec.tenant), &spec.agent.tools)?;
    bound.add_client_tools(&spec.client_tools)?;
    let new_conversation = conversation_for(store, spec)?;
    let conversation_id = match (&new_conversation, spec.conversation_id) {
        (Some(conversation), _) => conversation.id,
        (None, Some(id)) => id,
        (None, None) => ConversationId::new(),
    };
    let history = match new_conversation {
        Some(_) => Vec::new(),
        None => past_turns(store, spec, conversation_id)?,
    };
    Ok(Prepared {
        agent: Agent {
            model,
            fallbacks,
            strategy,
            tools: Arc::new(bound),
            history,
            output,
        },
        new_conversation,
        conversation_id,
    })
}

/// The run an idempotency key already started, if any.
pub fn earlier_run(store: &Store, spec: &RunSpec) -> Result<Option<IdempotencyRecord>, RunError> {
    match &spec.idempotency {
        Some(idempotency) => Ok(store.get_idempotency(&spec.tenant, &idempotency.key)?),
        None => Ok(None),
    }
}

/// Writes the message as running (with its new conversation and idempotency key, in one
/// transaction). A key another request took first comes back as [`Inserted::KeyTaken`].
pub fn insert_message(
    store: &Store,
    spec: &RunSpec,
    prepared: &Prepared,
    message: &Message,
) -> Result<Inserted, RunError> {
    let record = spec.idempotency.as_ref().map(|i| {
        (
            i.key.as_str(),
            IdempotencyRecord {
                message_id: message.id,
                fingerprint: i.fingerprint.clone(),
            },
        )
    });
    Ok(store.insert_message(
        &spec.tenant,
        prepared.new_conversation.as_ref(),
        message,
        record.as_ref().map(|(key, record)| (*key, record)),
    )?)
}

/// The message of a new run, as running.
pub fn new_message(
    store: &Store,
    spec: &RunSpec,
    prepared: &Prepared,
) -> Result<Message, RunError> {
    let now = crate::domain::now();
    Ok(Message {
        id: MessageId::new(),
        conversation_id: prepared.conversation_id,
        seq: store.next_id()?,
        query: spec.query.clone(),
        inputs: spec.inputs.clone(),
        answer: String::new(),
        status: MessageStatus::Running,
        finish_reason: None,
        error: None,
        usage: Usage::default(),
        iterations: 0,
        strategy: prepared.agent.strategy.kind(),
        provider: spec.agent.model.provider.clone(),
        model: spec.agent.model.name.clone(),
        user: spec.user.clone(),
        created_at: now,
        updated_at: now,
        retriever_resources: Vec::new(),
        structured_output: None,
        output_invalid: None,
    })
}

/// The earlier turns of a conversation, oldest first, at most `memory.max_turns` of them.
fn past_turns(
    store: &Store,
    spec: &RunSpec,
    conversation_id: ConversationId,
) -> Result<Vec<PastTurn>, RunError> {
    let messages = store.list_messages(&spec.tenant, conversation_id, 0, usize::MAX)?;
    let mut turns = Vec::with_capacity(messages.len());
    for message in &messages {
        let thoughts = store.list_thoughts(&spec.tenant, message.id)?;
        let turn = history::past_turn(message, &thoughts);
        if history::is_useful(message, &turn) {
            turns.push(turn);
        }
    }
    let keep = match spec.agent.max_history_turns {
        0 => turns.len(),
        n => usize::try_from(n).unwrap_or(usize::MAX),
    };
    Ok(turns.split_off(turns.len().saturating_sub(keep)))
}

/// The conversation to create, or `None` when the request continues an existing one.
fn conversation_for(store: &Store, spec: &RunSpec) -> Result<Option<Conversation>, RunError> {
    match spec.conversation_id {
        Some(id) => match store.get_conversation(&spec.tenant, id)? {
            Some(_) => Ok(None),
            None => Err(RunError::not_found("conversation", id)),
        },
        None => Ok(Some(Conversation {
            id: ConversationId::new(),
            tenant: spec.tenant.clone(),
            user: spec.user.clone(),
            created_at: crate::domain::now(),
        })),
    }
}
