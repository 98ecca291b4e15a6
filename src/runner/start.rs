//! Starting a run: validate, resolve model, strategy and tools, write the message (with its
//! idempotency key), register it as live, and spawn the loop.

use std::sync::Arc;
use std::time::Instant;

use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::agent_loop::AgentRun;
use super::emitter::Emitter;
use super::live::{self, LiveRun};
use super::strategy::{PastTurn, Strategy};
use super::{choose_strategy, history, RunError, RunHandle, RunSpec, Runner};
use crate::domain::{
    Conversation, ConversationId, IdempotencyRecord, Message, MessageId, MessageStatus,
    StrategyKind, Usage,
};
use crate::llm::ResolvedModel;
use crate::store::Inserted;
use crate::tools::ToolSet;

/// Everything a run needs that is resolved before its message is written.
struct Prepared {
    model: ResolvedModel,
    strategy: Box<dyn Strategy>,
    tools: ToolSet,
    new_conversation: Option<Conversation>,
    conversation_id: ConversationId,
    history: Vec<PastTurn>,
}

impl Runner {
    /// Validates `spec`, writes the message as running and starts the loop. A retry with
    /// the idempotency key and request of an earlier run follows that run instead.
    pub async fn start(
        &self,
        spec: RunSpec,
        cancel: CancellationToken,
    ) -> Result<RunHandle, RunError> {
        if self.shutdown.is_cancelled() {
            return Err(RunError::ShuttingDown);
        }
        let spec = spec.validated()?;
        if let Some(record) = self.earlier_run(&spec)? {
            return self.follow_retry(&spec, &record);
        }
        let prepared = self.prepare(&spec)?;
        let message =
            self.new_message(&spec, prepared.conversation_id, prepared.strategy.kind())?;
        let record = spec.idempotency.as_ref().map(|i| {
            (
                i.key.as_str(),
                IdempotencyRecord {
                    message_id: message.id,
                    fingerprint: i.fingerprint.clone(),
                },
            )
        });
        let inserted = self.store.insert_message(
            &spec.tenant,
            prepared.new_conversation.as_ref(),
            &message,
            record.as_ref().map(|(key, record)| (*key, record)),
        )?;
        if let Inserted::KeyTaken(record) = inserted {
            return self.follow_retry(&spec, &record);
        }
        self.store.flush().await?;
        Ok(self.launch(spec, prepared, message, cancel))
    }

    /// The run an idempotency key already started, if any.
    fn earlier_run(&self, spec: &RunSpec) -> Result<Option<IdempotencyRecord>, RunError> {
        match &spec.idempotency {
            Some(idempotency) => Ok(self.store.get_idempotency(&spec.tenant, &idempotency.key)?),
            None => Ok(None),
        }
    }

    /// Follows the earlier run of a retried request from its first event; a different
    /// request under the same key is refused.
    fn follow_retry(
        &self,
        spec: &RunSpec,
        record: &IdempotencyRecord,
    ) -> Result<RunHandle, RunError> {
        let same = spec
            .idempotency
            .as_ref()
            .is_some_and(|i| i.fingerprint == record.fingerprint);
        if !same {
            return Err(RunError::KeyReused);
        }
        let message = self
            .store
            .get_message(&spec.tenant, record.message_id)?
            .ok_or_else(|| RunError::not_found("message", record.message_id))?;
        Ok(RunHandle {
            message_id: message.id,
            conversation_id: message.conversation_id,
            events: self.attach(&spec.tenant, message.id, 0)?,
        })
    }

    fn prepare(&self, spec: &RunSpec) -> Result<Prepared, RunError> {
        let model = self
            .models
            .resolve(&spec.agent.model.provider, &spec.agent.model.name)?;
        let strategy = choose_strategy(&spec.agent, &model.info)?;
        let mut tools = ToolSet::bind(&self.tools.snapshot(&spec.tenant), &spec.agent.tools)?;
        tools.add_client_tools(&spec.client_tools)?;
        let new_conversation = self.conversation_for(spec)?;
        let conversation_id = match (&new_conversation, spec.conversation_id) {
            (Some(conversation), _) => conversation.id,
            (None, Some(id)) => id,
            (None, None) => ConversationId::new(),
        };
        let history = match new_conversation {
            Some(_) => Vec::new(),
            None => self.history(spec, conversation_id)?,
        };
        Ok(Prepared {
            model,
            strategy,
            tools,
            new_conversation,
            conversation_id,
            history,
        })
    }

    /// Registers the run as live, subscribes its first follower, and spawns the loop.
    fn launch(
        &self,
        spec: RunSpec,
        prepared: Prepared,
        message: Message,
        cancel: CancellationToken,
    ) -> RunHandle {
        let (events, _) = broadcast::channel(self.settings.event_buffer.max(1));
        let tenant = spec.tenant.clone();
        let live_run = LiveRun {
            tenant: tenant.clone(),
            cancel: cancel.clone(),
            events: events.clone(),
            durable: Arc::default(),
            client_slot: Arc::default(),
        };
        let client_slot = Arc::clone(&live_run.client_slot);
        let first_follower = live_run.subscribe();
        let durable = Arc::clone(&live_run.durable);
        self.live.insert(message.id, live_run);
        let conversation_id = prepared.conversation_id;
        let emitter = Emitter::new(
            self.store.clone(),
            tenant.clone(),
            conversation_id,
            message.id,
            events,
            durable,
            cancel.clone(),
        );
        let handle = RunHandle {
            message_id: message.id,
            conversation_id,
            events: live::follow(
                self.store.clone(),
                tenant,
                message.id,
                0,
                Some(first_follower),
            ),
        };
        if let Some(deadline) = spec.deadline {
            let cancel = cancel.clone();
            tokio::spawn(async move {
                tokio::select! {
                    _ = cancel.cancelled() => {}
                    _ = tokio::time::sleep(deadline) => cancel.cancel(),
                }
            });
        }
        let span = tracing::info_span!("run", message_id = %message.id, conversation_id = %conversation_id);
        let run = AgentRun {
            store: self.store.clone(),
            spec,
            message,
            model: prepared.model,
            strategy: prepared.strategy,
            tools: Arc::new(prepared.tools),
            settings: self.settings.clone(),
            emitter,
            live: Arc::clone(&self.live),
            cancel,
            shutdown: self.shutdown.clone(),
            started: Instant::now(),
            usage: Usage::default(),
            history: prepared.history,
            current: None,
            streamed: String::new(),
            answer: None,
            client_slot,
            waiting_since: None,
        };
        self.tracker.spawn(run.drive().instrument(span));
        handle
    }

    /// The earlier turns of a conversation, oldest first, at most `memory.max_turns` of them.
    fn history(
        &self,
        spec: &RunSpec,
        conversation_id: ConversationId,
    ) -> Result<Vec<PastTurn>, RunError> {
        let messages = self
            .store
            .list_messages(&spec.tenant, conversation_id, 0, usize::MAX)?;
        let mut turns = Vec::with_capacity(messages.len());
        for message in &messages {
            let thoughts = self.store.list_thoughts(&spec.tenant, message.id)?;
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
    fn conversation_for(&self, spec: &RunSpec) -> Result<Option<Conversation>, RunError> {
        match spec.conversation_id {
            Some(id) => match self.store.get_conversation(&spec.tenant, id)? {
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

    fn new_message(
        &self,
        spec: &RunSpec,
        conversation_id: ConversationId,
        strategy: StrategyKind,
    ) -> Result<Message, RunError> {
        let now = crate::domain::now();
        Ok(Message {
            id: MessageId::new(),
            conversation_id,
            seq: self.store.next_id()?,
            query: spec.query.clone(),
            inputs: spec.inputs.clone(),
            answer: String::new(),
            status: MessageStatus::Running,
            finish_reason: None,
            error: None,
            usage: Usage::default(),
            iterations: 0,
            strategy,
            provider: spec.agent.model.provider.clone(),
            model: spec.agent.model.name.clone(),
            user: spec.user.clone(),
            created_at: now,
            updated_at: now,
        })
    }
}
