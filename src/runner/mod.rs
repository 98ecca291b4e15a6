//! The agent runner: validates a run, writes its message, and drives the agent loop in a
//! task of its own that reports through a bounded channel of [`EventEnvelope`]s.
//!
//! The runner knows neither tonic nor sled: it reads models from [`crate::llm`], tools from
//! [`crate::tools`] and persists through [`Store`]'s record API.

mod agent_loop;
mod emitter;
mod error;
mod spec;
pub mod strategy;

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

pub use error::RunError;
pub use spec::{
    AgentSpec, ModelMode, ModelSpec, RunSpec, DEFAULT_MAX_ITERATION, MAX_ITERATION_LIMIT,
};

use crate::domain::{
    Conversation, ConversationId, Message, MessageId, MessageStatus, StrategyKind, Usage,
};
use crate::events::EventEnvelope;
use crate::llm::{Feature, ModelInfo, ModelRegistry};
use crate::store::Store;
use crate::tools::{ToolRegistry, ToolSet};
use agent_loop::AgentRun;
use emitter::Emitter;
use strategy::{FunctionCalling, Strategy};

/// Tunables of the loop, from the server configuration.
#[derive(Debug, Clone)]
pub struct RunnerSettings {
    /// Longest a single tool call may take before it becomes a timeout observation.
    pub tool_timeout: Duration,
    /// Tool calls of one round that run at once.
    pub tool_concurrency: usize,
    /// Events buffered per run before a slow client holds the run back.
    pub event_buffer: usize,
}

impl Default for RunnerSettings {
    fn default() -> Self {
        Self {
            tool_timeout: Duration::from_secs(30),
            tool_concurrency: 8,
            event_buffer: 64,
        }
    }
}

/// A started run: its ids and its event stream.
#[derive(Debug)]
pub struct RunHandle {
    /// The new message.
    pub message_id: MessageId,
    /// Its conversation (new or given).
    pub conversation_id: ConversationId,
    /// Events in `seq` order; closes after the last one.
    pub events: mpsc::Receiver<EventEnvelope>,
}

/// Starts runs and tracks them until they end.
#[derive(Clone)]
pub struct Runner {
    store: Store,
    models: Arc<ModelRegistry>,
    tools: Arc<ToolRegistry>,
    settings: RunnerSettings,
    /// Fires when the service shuts down; every run's token is a child of it.
    shutdown: CancellationToken,
    /// Lets shutdown wait for runs to record how they ended.
    tracker: TaskTracker,
}

impl Runner {
    /// A runner over these stores and registries.
    pub fn new(
        store: Store,
        models: Arc<ModelRegistry>,
        tools: Arc<ToolRegistry>,
        settings: RunnerSettings,
    ) -> Self {
        Self {
            store,
            models,
            tools,
            settings,
            shutdown: CancellationToken::new(),
            tracker: TaskTracker::new(),
        }
    }

    /// A token for one run: fires on shutdown, or when the caller cancels it.
    pub fn run_token(&self) -> CancellationToken {
        self.shutdown.child_token()
    }

    /// Cancels every run; each records itself as interrupted. New runs are refused.
    pub fn cancel_all(&self) {
        self.shutdown.cancel();
    }

    /// Cancels every run and waits up to `grace` for them to finish. Returns whether all
    /// finished in time.
    pub async fn shut_down(&self, grace: Duration) -> bool {
        self.shutdown.cancel();
        self.tracker.close();
        tokio::time::timeout(grace, self.tracker.wait())
            .await
            .is_ok()
    }

    /// Validates `spec`, writes the message as running and starts the loop.
    pub async fn start(
        &self,
        spec: RunSpec,
        cancel: CancellationToken,
    ) -> Result<RunHandle, RunError> {
        if self.shutdown.is_cancelled() {
            return Err(RunError::ShuttingDown);
        }
        let spec = spec.validated()?;
        let model = self
            .models
            .resolve(&spec.agent.model.provider, &spec.agent.model.name)?;
        let strategy = choose_strategy(spec.agent.strategy, &model.info)?;
        let tools = ToolSet::bind(&self.tools.snapshot(), &spec.agent.tools)?;
        let new_conversation = self.conversation_for(&spec)?;
        let conversation_id = new_conversation
            .as_ref()
            .map(|c| c.id)
            .or(spec.conversation_id)
            .unwrap_or_default();
        let message = self.new_message(&spec, conversation_id, strategy.kind())?;
        self.store
            .insert_message(&spec.tenant, new_conversation.as_ref(), &message)?;
        self.store.flush().await?;

        let (tx, rx) = mpsc::channel(self.settings.event_buffer.max(1));
        let span = tracing::info_span!("run", message_id = %message.id, conversation_id = %conversation_id);
        let emitter = Emitter::new(
            self.store.clone(),
            spec.tenant.clone(),
            conversation_id,
            message.id,
            tx,
            cancel.clone(),
        );
        let handle = RunHandle {
            message_id: message.id,
            conversation_id,
            events: rx,
        };
        let run = AgentRun {
            store: self.store.clone(),
            spec,
            message,
            model,
            strategy,
            tools: Arc::new(tools),
            settings: self.settings.clone(),
            emitter,
            cancel,
            shutdown: self.shutdown.clone(),
            started: Instant::now(),
            usage: Usage::default(),
            current: None,
        };
        self.tracker.spawn(run.drive().instrument(span));
        Ok(handle)
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

/// Function calling when asked for, or (unspecified) when the model has tool calls.
fn choose_strategy(
    requested: Option<StrategyKind>,
    model: &ModelInfo,
) -> Result<Box<dyn Strategy>, RunError> {
    let native = model.has(Feature::ToolCall) || model.has(Feature::MultiToolCall);
    let kind = requested.unwrap_or(if native {
        StrategyKind::FunctionCalling
    } else {
        StrategyKind::ChainOfThought
    });
    match kind {
        StrategyKind::FunctionCalling => Ok(Box::new(FunctionCalling)),
        StrategyKind::ChainOfThought => Err(RunError::UnsupportedStrategy(
            "chain of thought is not available in this build; use function calling with a model that supports tool calls",
        )),
    }
}
