//! Preparing a run before anything is written: resolve the model, strategy and tools, find
//! or make the conversation, read its history, and build the message. Free functions over
//! the stores and registries, so the facade only sequences them.

use std::sync::Arc;

use super::budget;
use super::error::RunError;
use super::history::{self, History};
use super::run::{Agent, Output};
use super::settings::RunnerSettings;
use super::spec::{RunSpec, StoredSpec};
use super::strategy;
use crate::domain::{
    Conversation, ConversationId, IdempotencyRecord, Message, MessageId, MessageStatus,
    StrategyKind, Usage,
};
use crate::llm::{Feature, ModelInfo, ModelRegistry};
use crate::store::{Inserted, Store};
use crate::tools::schema::PatternBudget;
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
    settings: &RunnerSettings,
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
    let mut budget = PatternBudget::new();
    let output = spec
        .agent
        .output
        .as_ref()
        .map(|output| {
            let native = strategy.kind() == StrategyKind::FunctionCalling
                && model.info.has(Feature::StructuredOutput);
            Output::new(output, native, &mut budget)
        })
        .transpose()?;
    let mut bound = ToolSet::bind(&tools.snapshot(&spec.tenant), &spec.agent.tools)?;
    bound.add_client_tools(&spec.client_tools, &mut budget)?;
    let output_instruction = output
        .as_ref()
        .and_then(|output| output.instruction(strategy.kind()))
        .map_or(0, |extra| extra.len() + 2);
    strategy.check_prompt_size(
        spec.filled_instruction_len() + output_instruction,
        spec.query.len(),
        &bound,
        settings.max_instruction_bytes,
    )?;
    let new_conversation = conversation_for(store, spec)?;
    let conversation_id = match (&new_conversation, spec.conversation_id) {
        (Some(conversation), _) => conversation.id,
        (None, Some(id)) => id,
        (None, None) => ConversationId::new(),
    };
    let history = match new_conversation {
        Some(_) => History {
            newest_ordinal: Some(0),
            ..History::default()
        },
        None => past_turns(store, spec, &model.info, conversation_id)?,
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

/// Writes what the run was started with, then the message as running (with its new
/// conversation and idempotency key, in one transaction). A key another request took first
/// comes back as [`Inserted::KeyTaken`].
pub fn insert_message(
    store: &Store,
    spec: &RunSpec,
    prepared: &Prepared,
    message: &mut Message,
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
    // The spec first: a message in the store always has it (a crash between the two leaves
    // a spec no message names, which nothing reads).
    store.put_run_spec(
        &spec.tenant,
        message.id,
        &StoredSpec::of(spec, message.created_at),
    )?;
    let inserted = store.insert_message(
        &spec.tenant,
        prepared.new_conversation.as_ref(),
        message,
        record.as_ref().map(|(key, record)| (*key, record)),
    )?;
    if let Inserted::KeyTaken(_) = &inserted {
        store.remove_run_spec(&spec.tenant, message.id)?;
    }
    Ok(inserted)
}

/// The message of a new run, as running; the store gives it its place (`seq`, `ordinal`)
/// when it is written.
pub fn new_message(spec: &RunSpec, prepared: &Prepared) -> Message {
    let now = crate::domain::now();
    Message {
        id: MessageId::new(),
        conversation_id: prepared.conversation_id,
        seq: 0,
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
        history_tokens: Default::default(),
        ordinal: 0,
    }
}

/// The earlier turns of a conversation that can reach the prompt, oldest first: read newest
/// first and no further than `memory.max_turns` turns or, with a context window, than the
/// tokens the window leaves for history (by the counts kept with each message). What was not
/// read is reported as left out.
fn past_turns(
    store: &Store,
    spec: &RunSpec,
    model: &ModelInfo,
    conversation_id: ConversationId,
) -> Result<History, RunError> {
    let tokenizer = model.tokenizer;
    let budget = history_budget(spec, model);
    let max_turns = match spec.agent.max_history_turns {
        0 => usize::MAX,
        n => usize::try_from(n).unwrap_or(usize::MAX),
    };
    let mut history = History {
        newest_ordinal: Some(0),
        ..History::default()
    };
    let mut used = 0u64;
    let mut examined = 0u64;
    let mut ids = store.message_ids_newest_first(&spec.tenant, conversation_id);
    let stop = loop {
        let Some(id) = ids.next() else {
            break None;
        };
        examined += 1;
        let Some(message) = store.get_past_message(&spec.tenant, id?)? else {
            continue;
        };
        if examined == 1 {
            // Records of earlier versions have no ordinal: unknown then.
            history.newest_ordinal = (message.ordinal > 0).then_some(message.ordinal);
        }
        if !message.status.is_terminal() {
            continue;
        }
        if history.turns.len() == max_turns {
            break Some(0);
        }
        let kept = message.history_tokens.get(tokenizer.name()).copied();
        if let Some(size) = kept.filter(|size| used + size > budget) {
            break Some(size);
        }
        let mut turn = match history::answered_at_once(&message) {
            Some(turn) => turn,
            None => history::past_turn(&message, &store.list_thoughts(&spec.tenant, message.id)?),
        };
        if !history::is_useful(&message, &turn) {
            continue;
        }
        let size = kept.unwrap_or_else(|| history::estimate_tokens(&turn, tokenizer));
        if used + size > budget {
            break Some(size);
        }
        used += size;
        // Only a kept count is trusted for fitting; an estimate is measured again there.
        turn.tokens = kept;
        history.turns.push(turn);
    };
    if let Some(size) = stop {
        // This message and every older one are left out: known from the newest one's
        // ordinal, else counted by their keys (never read).
        let older = match history.newest_ordinal {
            Some(newest) => newest.saturating_sub(examined),
            None => ids.count() as u64,
        };
        history.left_out_turns = u32::try_from(older + 1).unwrap_or(u32::MAX);
        history.left_out_tokens = size;
    }
    history.turns.reverse();
    Ok(history)
}

/// Tokens the context window leaves for history: the window less the answer's reserve and
/// the query and instruction; unbounded without a window.
fn history_budget(spec: &RunSpec, model: &ModelInfo) -> u64 {
    let Some(window) = model.context_window.map(u64::from) else {
        return u64::MAX;
    };
    let reserve = budget::reserved_answer_tokens(&spec.agent.model.parameters);
    let prompt = model.tokenizer.count_text(&spec.query)
        + model.tokenizer.count_text(&spec.agent.instruction);
    window.saturating_sub(reserve + prompt as u64)
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
