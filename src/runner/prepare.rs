//! Preparing a run before anything is written: resolve the model, strategy and tools, find
//! or make the conversation, read its history, and build the message. Free functions over
//! the stores and registries, so the facade only sequences them.

use std::sync::Arc;

use super::budget;
use super::error::RunError;
use super::history::{self, History};
use super::run::{Agent, Output};
use super::settings::RunnerSettings;
use super::spec::{ReasoningMode, RunSpec, StoredSpec};
use super::strategy;
use crate::domain::{
    Conversation, ConversationId, IdempotencyRecord, Message, MessageId, StrategyKind,
};
use crate::domain::{ConversationPolicy, FieldError, Tenant};
use crate::llm::{Feature, ModelInfo, ModelRegistry};
use crate::store::{Admission, ConversationRule, Inserted, NewMessage, Store, StoreError};
use crate::tools::schema::PatternBudget;
use crate::tools::{SubAgentTool, ToolRegistry, ToolSet};

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
pub async fn prepare(
    store: &Store,
    models: &ModelRegistry,
    tools: &ToolRegistry,
    spec: &RunSpec,
    settings: &RunnerSettings,
) -> Result<Prepared, RunError> {
    let agent_tools = sub_agent_tools(store, spec).await?;
    let resolved = resolve(models, tools, spec, settings, &agent_tools)?;
    if counts_tokens(spec, &resolved.model.info) {
        // Within the caller's deadline, which counts from the request's arrival.
        resolved.model.info.tokenizer.load().await;
    }
    let new_conversation = conversation_for(store, spec).await?;
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
        None => past_turns(store, spec, &resolved.model.info, conversation_id, u64::MAX).await?,
    };
    Ok(Prepared {
        agent: resolved.with_history(history),
        new_conversation,
        conversation_id,
    })
}

/// The agent of a run taken over: resolved again from the spec kept with `message`, with
/// the conversation's turns before it as history.
pub async fn prepare_resumed(
    store: &Store,
    models: &ModelRegistry,
    tools: &ToolRegistry,
    spec: &RunSpec,
    settings: &RunnerSettings,
    message: &Message,
) -> Result<Agent, RunError> {
    let agent_tools = sub_agent_tools(store, spec).await?;
    let resolved = resolve(models, tools, spec, settings, &agent_tools)?;
    // A run taken over may count what its lost owner left unfinished.
    resolved.model.info.tokenizer.load().await;
    let history = past_turns(
        store,
        spec,
        &resolved.model.info,
        message.conversation_id,
        message.seq,
    )
    .await?;
    Ok(resolved.with_history(history))
}

/// Whether a run of `spec` on `model` counts tokens before its model answers: to fit a
/// context window, or to keep within a budget of tokens or cost. (A model that reports no
/// usage has its calls counted too; the model call loads the vocabulary then.)
fn counts_tokens(spec: &RunSpec, model: &ModelInfo) -> bool {
    let budget = &spec.agent.budget;
    model.context_window.is_some() || budget.tokens.is_some() || budget.cost.is_some()
}

/// Checks that everything `spec` names resolves, without preparing a run.
pub fn check(
    models: &ModelRegistry,
    tools: &ToolRegistry,
    spec: &RunSpec,
    settings: &RunnerSettings,
) -> Result<(), RunError> {
    let agent_tools: Vec<SubAgentTool> = spec
        .agent
        .sub_agents
        .iter()
        .map(|sub| SubAgentTool {
            name: sub.agent_id.clone(),
            description: String::new(),
        })
        .collect();
    resolve(models, tools, spec, settings, &agent_tools).map(drop)
}

/// The stored agents `spec` may call, as tools: described by their records. One deleted
/// since is still offered; a call of it is a tool error.
async fn sub_agent_tools(store: &Store, spec: &RunSpec) -> Result<Vec<SubAgentTool>, RunError> {
    let mut agent_tools = Vec::with_capacity(spec.agent.sub_agents.len());
    for sub in &spec.agent.sub_agents {
        let record = store.get_agent(&spec.tenant, &sub.agent_id).await?;
        let description = record
            .map(|record| match record.description.is_empty() {
                true => record.name,
                false => record.description,
            })
            .filter(|text| !text.is_empty())
            .unwrap_or_else(|| format!("The agent {}.", sub.agent_id));
        agent_tools.push(SubAgentTool {
            name: sub.agent_id.clone(),
            description,
        });
    }
    Ok(agent_tools)
}

/// An agent resolved but for its history.
struct Resolved {
    model: crate::llm::ResolvedModel,
    fallbacks: Vec<crate::llm::ResolvedModel>,
    strategy: Box<dyn strategy::Strategy>,
    tools: ToolSet,
    output: Option<Output>,
    reasoning: ReasoningMode,
}

impl Resolved {
    fn with_history(self, history: History) -> Agent {
        Agent {
            model: self.model,
            fallbacks: self.fallbacks,
            strategy: self.strategy,
            tools: Arc::new(self.tools),
            history,
            output: self.output,
            reasoning: self.reasoning,
        }
    }
}

/// Resolves the model, fallbacks, strategy, output schema and tools `spec` names, and
/// checks the prompt they make fits.
fn resolve(
    models: &ModelRegistry,
    tools: &ToolRegistry,
    spec: &RunSpec,
    settings: &RunnerSettings,
    agent_tools: &[SubAgentTool],
) -> Result<Resolved, RunError> {
    if spec.agent.reasoning == ReasoningMode::Keep && !settings.allow_keep_reasoning {
        return Err(crate::domain::FieldError::new(
            "agent.reasoning",
            "KEEP is not allowed on this server (runner.allow_keep_reasoning = false)",
        )
        .into());
    }
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
    crate::tools::add_client_tools(&mut bound, &spec.client_tools, &mut budget)?;
    crate::tools::add_agent_tools(&mut bound, agent_tools, &mut budget)?;
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
    Ok(Resolved {
        model,
        fallbacks,
        strategy,
        tools: bound,
        output,
        reasoning: spec.agent.reasoning,
    })
}

/// The run an idempotency key already started, if any.
pub async fn earlier_run(
    store: &Store,
    spec: &RunSpec,
) -> Result<Option<IdempotencyRecord>, RunError> {
    match &spec.idempotency {
        Some(idempotency) => Ok(store
            .get_idempotency(&spec.tenant, &idempotency.key)
            .await?),
        None => Ok(None),
    }
}

/// Writes the message as running with what the run was started with (and its new
/// conversation and idempotency key); durable with the run's first burst. A key another request
/// took first comes back as [`Inserted::KeyTaken`].
pub async fn insert_message(
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
    let stored =
        serde_json::to_value(StoredSpec::of(spec, message.created_at)).map_err(|source| {
            StoreError::Codec {
                record: "specs",
                source,
            }
        })?;
    let inserted = store
        .insert_message(NewMessage {
            tenant: &spec.tenant,
            conversation: prepared.new_conversation.as_ref(),
            message,
            spec: &stored,
            idempotency: record.as_ref().map(|(key, record)| (*key, record)),
            admission: Admission {
                rule: conversation_rule(spec),
                ..super::quota::admission(spec.limits, spec.parent.is_some())
            },
        })
        .await?;
    Ok(inserted)
}

/// What the run's conversation policy asks of the store; a sub-agent's run has a
/// conversation of its own.
fn conversation_rule(spec: &RunSpec) -> ConversationRule {
    if spec.parent.is_some() {
        return ConversationRule::Beside;
    }
    match spec.conversation_policy() {
        ConversationPolicy::Parallel => ConversationRule::Beside,
        ConversationPolicy::Reject => ConversationRule::Alone,
        // The new run waits behind the live ones it stops, as an enqueued run would.
        ConversationPolicy::Enqueue
        | ConversationPolicy::Interrupt
        | ConversationPolicy::Rollback
        // A steer waits queued to join the live run, or to run itself should that run
        // make no further model call.
        | ConversationPolicy::Steer => ConversationRule::Queue {
            max_queued: match spec.limits.max_queued_per_conversation {
                0 => crate::domain::DEFAULT_MAX_QUEUED_PER_CONVERSATION,
                set => set,
            },
        },
    }
}

/// The message of a new run, as running; the store gives it its place (`seq`, `ordinal`)
/// when it is written.
pub fn new_message(spec: &RunSpec, prepared: &Prepared) -> Message {
    let mut message = Message::running(
        prepared.conversation_id,
        spec.query.clone(),
        prepared.agent.strategy.kind(),
        spec.agent.model.provider.clone(),
        spec.agent.model.name.clone(),
    );
    // A new id unless the run was given one.
    if let Some(id) = spec.message_id {
        message.id = id;
    }
    message.inputs = spec.inputs.clone();
    message.user = spec.user.clone();
    message.agent = spec.pinned.clone().map(Box::new);
    message.parent = spec.parent.clone().map(Box::new);
    message
}

/// The earlier turns of a conversation that can reach the prompt, oldest first: read newest
/// first and no further than `memory.max_turns` turns or, with a context window, than the
/// tokens the window leaves for history (by the counts kept with each message), from the
/// message before `before` (a conversation `seq`). What was not read is reported as left out.
async fn past_turns(
    store: &Store,
    spec: &RunSpec,
    model: &ModelInfo,
    conversation_id: ConversationId,
    before: u64,
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
    let mut ids = NewestFirst::new(store, &spec.tenant, conversation_id);
    ids.before = before;
    let stop = loop {
        let Some(id) = ids.next().await? else {
            break None;
        };
        examined += 1;
        let Some(message) = store.get_past_message(&spec.tenant, id).await? else {
            continue;
        };
        if examined == 1 {
            // Records of earlier versions have no ordinal: unknown then.
            history.newest_ordinal = (message.ordinal > 0).then_some(message.ordinal);
        }
        // A rolled-back run is left out as if it had never been.
        if !message.status.is_terminal() || message.rolled_back {
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
            None => {
                let thoughts = store.all_thoughts(&spec.tenant, message.id).await?;
                history::past_turn(&message, &thoughts)
            }
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
            None => ids.count_rest().await?,
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
async fn conversation_for(store: &Store, spec: &RunSpec) -> Result<Option<Conversation>, RunError> {
    match spec.conversation_id {
        Some(id) => match store.get_conversation(&spec.tenant, id).await? {
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

/// A conversation's message ids, newest first, read a page at a time.
pub struct NewestFirst<'a> {
    store: &'a Store,
    tenant: &'a Tenant,
    conversation: ConversationId,
    /// The `seq` of the oldest id read so far.
    before: u64,
    page: std::vec::IntoIter<(u64, MessageId)>,
    more: bool,
}

/// Ids read at once: history usually stops after a few turns.
const IDS_PAGE: usize = 64;

impl<'a> NewestFirst<'a> {
    /// The ids of `conversation`, from its newest message.
    pub fn new(store: &'a Store, tenant: &'a Tenant, conversation: ConversationId) -> Self {
        Self {
            store,
            tenant,
            conversation,
            before: u64::MAX,
            page: Vec::new().into_iter(),
            more: true,
        }
    }

    /// The next older id, `None` after the oldest.
    pub async fn next(&mut self) -> Result<Option<MessageId>, StoreError> {
        loop {
            if let Some((seq, id)) = self.page.next() {
                self.before = seq;
                return Ok(Some(id));
            }
            if !self.more {
                return Ok(None);
            }
            let page = self
                .store
                .message_ids_before(self.tenant, self.conversation, self.before, IDS_PAGE)
                .await?;
            self.more = page.more;
            self.page = page.items.into_iter();
        }
    }

    /// How many ids are left, counted by their keys.
    pub async fn count_rest(&mut self) -> Result<u64, StoreError> {
        let mut count = 0;
        while self.next().await?.is_some() {
            count += 1;
        }
        Ok(count)
    }
}

/// Refuses a query (or instruction inputs) larger than the run may store and echo back, and
/// an instruction that its inputs would fill past the limit (measured, not built).
pub fn check_sizes(spec: &RunSpec, settings: &RunnerSettings) -> Result<(), RunError> {
    let limit = settings.max_query_bytes;
    if spec.query.len() > limit {
        return Err(FieldError::new(
            "query",
            format!(
                "is {} bytes, more than runner.max_query_bytes ({limit})",
                spec.query.len()
            ),
        )
        .into());
    }
    let inputs: usize = spec.inputs.iter().map(|(k, v)| k.len() + v.len()).sum();
    if inputs > limit {
        return Err(FieldError::new(
            "inputs",
            format!("are {inputs} bytes, more than runner.max_query_bytes ({limit})"),
        )
        .into());
    }
    let filled = spec.filled_instruction_len();
    let limit = settings.max_instruction_bytes;
    if filled > limit {
        return Err(FieldError::new(
            "agent.instruction",
            format!(
                "is {filled} bytes with its inputs filled in, more than \
                 runner.max_instruction_bytes ({limit})"
            ),
        )
        .into());
    }
    Ok(())
}
