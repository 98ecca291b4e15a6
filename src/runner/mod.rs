//! The agent runner: validates a run, writes its message, and drives the agent loop in a
//! task of its own that reports through a bounded channel of [`EventEnvelope`]s.
//!
//! The runner knows neither tonic nor sled: it reads models from [`crate::llm`], tools from
//! [`crate::tools`] and persists through [`Store`]'s record API.

mod agent_loop;
mod emitter;
mod error;
mod history;
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
    Conversation, ConversationId, FieldError, Message, MessageId, MessageStatus, StrategyKind,
    Usage,
};
use crate::events::EventEnvelope;
use crate::llm::{Feature, ModelInfo, ModelRegistry};
use crate::store::Store;
use crate::tools::{ToolRegistry, ToolSet};
use agent_loop::AgentRun;
use emitter::Emitter;
use strategy::{ChainOfThought, FunctionCalling, PastTurn, Strategy};

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
        let strategy = choose_strategy(&spec.agent, &model.info)?;
        let tools = ToolSet::bind(&self.tools.snapshot(), &spec.agent.tools)?;
        let new_conversation = self.conversation_for(&spec)?;
        let conversation_id = new_conversation
            .as_ref()
            .map(|c| c.id)
            .or(spec.conversation_id)
            .unwrap_or_default();
        let history = match new_conversation {
            Some(_) => Vec::new(),
            None => self.history(&spec, conversation_id)?,
        };
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
            history,
            current: None,
            streamed: String::new(),
            answer: None,
        };
        self.tracker.spawn(run.drive().instrument(span));
        Ok(handle)
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

/// The requested strategy, or (unspecified) function calling when the model has native
/// tool calls and runs in chat mode, else chain of thought.
fn choose_strategy(agent: &AgentSpec, model: &ModelInfo) -> Result<Box<dyn Strategy>, RunError> {
    let mode = agent.model.mode;
    let native = model.has(Feature::ToolCall) || model.has(Feature::MultiToolCall);
    let kind = agent
        .strategy
        .unwrap_or(if native && mode == ModelMode::Chat {
            StrategyKind::FunctionCalling
        } else {
            StrategyKind::ChainOfThought
        });
    match (kind, mode) {
        (StrategyKind::FunctionCalling, ModelMode::Chat) => Ok(Box::new(FunctionCalling)),
        (StrategyKind::FunctionCalling, ModelMode::Completion) => {
            Err(RunError::InvalidField(FieldError::new(
                "agent.model.mode",
                "COMPLETION needs the chain-of-thought strategy",
            )))
        }
        (StrategyKind::ChainOfThought, mode) => {
            Ok(Box::new(ChainOfThought::new(mode, &agent.react_prompt)))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::ModelEntry;

    fn model(features: &[Feature]) -> ModelInfo {
        let mut entry = ModelEntry::unlisted("m");
        entry.features = features.to_vec();
        ModelInfo::from(&entry)
    }

    fn chosen(
        strategy: Option<StrategyKind>,
        mode: ModelMode,
        features: &[Feature],
    ) -> Result<StrategyKind, String> {
        let agent = AgentSpec {
            strategy,
            model: ModelSpec {
                mode,
                ..ModelSpec::default()
            },
            ..AgentSpec::default()
        };
        choose_strategy(&agent, &model(features))
            .map(|s| s.kind())
            .map_err(|e| e.to_string())
    }

    #[test]
    fn unspecified_strategy_follows_the_model_features() {
        use Feature::*;
        use StrategyKind::*;
        assert_eq!(
            chosen(None, ModelMode::Chat, &[ToolCall]),
            Ok(FunctionCalling)
        );
        assert_eq!(
            chosen(None, ModelMode::Chat, &[MultiToolCall]),
            Ok(FunctionCalling)
        );
        assert_eq!(chosen(None, ModelMode::Chat, &[]), Ok(ChainOfThought));
        assert_eq!(
            chosen(None, ModelMode::Chat, &[StreamToolCall, Vision]),
            Ok(ChainOfThought)
        );
        assert_eq!(
            chosen(None, ModelMode::Completion, &[ToolCall]),
            Ok(ChainOfThought)
        );
    }

    #[test]
    fn an_explicit_strategy_wins_unless_the_mode_cannot_run_it() {
        use StrategyKind::*;
        assert_eq!(
            chosen(Some(ChainOfThought), ModelMode::Chat, &[Feature::ToolCall]),
            Ok(ChainOfThought)
        );
        assert_eq!(
            chosen(Some(FunctionCalling), ModelMode::Chat, &[]),
            Ok(FunctionCalling)
        );
        assert_eq!(
            chosen(Some(FunctionCalling), ModelMode::Completion, &[]),
            Err("agent.model.mode COMPLETION needs the chain-of-thought strategy".to_owned())
        );
    }
}
