//! The agent runner: validates a run, writes its message, and drives the agent loop in a
//! task of its own. Clients follow a run's events through [`EventStream`]s: stored ones first,
//! then live ones, so a dropped connection can re-attach without gaps.
//!
//! The runner knows neither tonic nor sled: it reads models from [`crate::llm`], tools from
//! [`crate::tools`] and persists through [`Store`]'s record API.

mod agent_loop;
mod budget;
mod client_tools;
mod emitter;
mod error;
mod history;
mod live;
mod spec;
mod start;
pub mod strategy;

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

pub use client_tools::ClientOutput;
pub use error::RunError;
pub use live::EventStream;
pub use spec::{
    AgentSpec, Idempotency, ImageSource, InputImage, ModelMode, ModelSpec, RunSpec,
    DEFAULT_MAX_ITERATION, MAX_ITERATION_LIMIT,
};

use crate::domain::{ConversationId, FieldError, MessageId, MessageStatus, StrategyKind, Tenant};
use crate::llm::{Feature, ModelInfo, ModelRegistry};
use crate::store::Store;
use crate::tools::ToolRegistry;
use live::LiveRuns;
use strategy::{ChainOfThought, FunctionCalling, Strategy};

/// Tunables of the loop, from the server configuration.
#[derive(Debug, Clone)]
pub struct RunnerSettings {
    /// Longest a single tool call may take before it becomes a timeout observation.
    pub tool_timeout: Duration,
    /// Tool calls of one round that run at once.
    pub tool_concurrency: usize,
    /// Live events kept per run for clients that fall behind (the rest come from the store).
    pub event_buffer: usize,
    /// Longest a run waits for the results of client-executed tools.
    pub client_tool_timeout: Duration,
}

impl Default for RunnerSettings {
    fn default() -> Self {
        Self {
            tool_timeout: Duration::from_secs(30),
            tool_concurrency: 8,
            event_buffer: 64,
            client_tool_timeout: Duration::from_secs(600),
        }
    }
}

/// A started (or, for an idempotent retry, already running) run: its ids and its events.
pub struct RunHandle {
    /// The message.
    pub message_id: MessageId,
    /// Its conversation.
    pub conversation_id: ConversationId,
    /// Events in `seq` order from the first; closes after the last one.
    pub events: EventStream,
}

/// How long `Cancel` waits for a run to record its end before answering.
const CANCEL_WAIT: Duration = Duration::from_secs(10);

/// Starts runs, tracks them until they end, and lets callers follow or stop them.
#[derive(Clone)]
pub struct Runner {
    store: Store,
    models: Arc<ModelRegistry>,
    tools: Arc<ToolRegistry>,
    settings: RunnerSettings,
    live: Arc<LiveRuns>,
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
            live: Arc::default(),
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

    /// The events of a message after `after_seq`: stored ones, then live ones until the
    /// last. Attaching to a finished message replays it and ends.
    pub fn attach(
        &self,
        tenant: &Tenant,
        message_id: MessageId,
        after_seq: u64,
    ) -> Result<EventStream, RunError> {
        let live = self.live.subscribe(tenant, message_id);
        if live.is_none() && self.store.get_message(tenant, message_id)?.is_none() {
            return Err(RunError::not_found("message", message_id));
        }
        Ok(live::follow(
            self.store.clone(),
            tenant.clone(),
            message_id,
            after_seq,
            live,
        ))
    }

    /// Deletes a conversation and everything recorded for it. A conversation with a
    /// running message cannot be deleted until that run ends.
    pub async fn delete_conversation(
        &self,
        tenant: &Tenant,
        id: ConversationId,
    ) -> Result<(), RunError> {
        if self.store.get_conversation(tenant, id)?.is_none() {
            return Err(RunError::not_found("conversation", id));
        }
        let messages = self.store.list_messages(tenant, id, 0, usize::MAX)?;
        if messages
            .iter()
            .any(|m| self.live.get(tenant, m.id).is_some())
        {
            return Err(RunError::ConversationBusy { id: id.to_string() });
        }
        self.store.delete_conversation(tenant, id)?;
        self.store.flush().await?;
        Ok(())
    }

    /// Delivers the results of client-executed tools to the run waiting for them.
    pub fn submit_tool_outputs(
        &self,
        tenant: &Tenant,
        message_id: MessageId,
        outputs: Vec<ClientOutput>,
    ) -> Result<(), RunError> {
        match self.live.get(tenant, message_id) {
            Some(run) => client_tools::deliver(&run.client_slot, outputs),
            None if self.store.get_message(tenant, message_id)?.is_some() => {
                Err(RunError::NotWaiting)
            }
            None => Err(RunError::not_found("message", message_id)),
        }
    }

    /// Stops a running message and waits (briefly) until it has recorded its end; returns
    /// the status it ended with.
    pub async fn cancel(
        &self,
        tenant: &Tenant,
        message_id: MessageId,
    ) -> Result<MessageStatus, RunError> {
        let Some(run) = self.live.get(tenant, message_id) else {
            let message = self
                .store
                .get_message(tenant, message_id)?
                .ok_or_else(|| RunError::not_found("message", message_id))?;
            return Err(RunError::NotRunning {
                id: message_id.to_string(),
                status: message.status,
            });
        };
        let mut events = run.events.subscribe();
        run.cancel.cancel();
        // Our handle holds a sender too; the channel can only close once it is gone.
        drop(run);
        let ended = async {
            // The channel closes once the run has recorded its end and left the registry.
            while !matches!(
                events.recv().await,
                Err(broadcast::error::RecvError::Closed)
            ) {}
        };
        let _ = tokio::time::timeout(CANCEL_WAIT, ended).await;
        let message = self
            .store
            .get_message(tenant, message_id)?
            .ok_or_else(|| RunError::not_found("message", message_id))?;
        Ok(message.status)
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
