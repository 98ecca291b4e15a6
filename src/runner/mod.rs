//! The agent runner: the facade over runs. It starts a run (preparing it, writing its
//! message, and handing it to the task that owns it to the end), and lets callers follow,
//! cancel, answer and delete what runs leave behind.
//!
//! - [`prepare`](self::prepare): resolving a run before anything is written.
//! - [`run`](self::run): the task that owns one run, its state, and how it records and ends.
//! - [`live`](self::live): runs in progress as the outside reaches them: registry, events,
//!   followers, the client-tool mailbox.
//! - [`strategy`]: how prompts are built and turns read, and which strategy a run gets.
//!
//! The runner knows neither tonic nor a database: it reads models from [`crate::llm`], tools from
//! [`crate::tools`] and persists through [`Store`]'s record API.

mod budget;
mod commands;
mod error;
mod family;
mod found;
mod handle;
mod history;
mod host;
mod interrupt;
mod launch;
mod lineage;
mod live;
mod pin;
mod prepare;
mod pricing;
mod queue;
mod quota;
mod remote;
mod run;
mod settings;
mod spec;
mod steer;
pub mod strategy;
mod takeover;
mod template;
mod tree;

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

pub use error::RunError;
pub use handle::RunHandle;
pub use live::{ClientOutput, Decision, EventStream};
pub use quota::today;
pub use settings::{DeltaPacing, RunnerSettings};
pub use spec::{
    AgentDefinition, AgentReference, AgentSpec, Idempotency, ImageSource, InputImage, ModelMode,
    ModelRef, ModelSpec, OutputFallback, OutputSpec, ReasoningMode, RunSpec, StoredSpec,
    SubAgentRef, DEFAULT_MAX_ITERATION, MAX_FALLBACKS, MAX_ITERATION_LIMIT,
};

use crate::domain::{
    ConversationId, IdempotencyRecord, Message, MessageId, MessageStatus, RunCommand, Tenant,
};
use crate::llm::ModelRegistry;
use crate::store::{Adopted, Inserted, Refusal, Store, TakenCommand};
use crate::telemetry::Metrics;
use crate::tools::ToolRegistry;
use found::Found;
use host::{Host, Parts};
use launch::{Launch, Opened};
use live::{Delivery, Emitter, LiveRun, LiveRuns, Mailbox};
use prepare::Prepared;
use remote::CANCEL_WAIT;
use run::{Control, Recorder, RunTask};

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
    /// Fires when the service starts to stop handing its runs over: each stops at the end
    /// of its step.
    draining: CancellationToken,
    /// Lets shutdown wait for runs to record how they ended.
    tracker: TaskTracker,
    /// Where runs count themselves.
    metrics: Arc<Metrics>,
    /// Where replicas tell each other of committed events and kept commands.
    bus: Arc<dyn crate::cluster::Bus>,
    /// The streams clients hold open following runs, per tenant.
    follow_streams: Arc<live::FollowStreams>,
}

// Runs are started, followed and stopped here; everything else a run does happens in its
// own task (`run::RunTask`).

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
            draining: CancellationToken::new(),
            tracker: TaskTracker::new(),
            metrics: Arc::default(),
            bus: Arc::new(crate::cluster::Silent::default()),
            follow_streams: Arc::default(),
        }
    }

    /// The runner, telling other replicas of its runs' events over `bus` and hearing of
    /// theirs (by default a single process's, which tells nobody).
    pub fn with_bus(mut self, bus: Arc<dyn crate::cluster::Bus>) -> Self {
        self.bus = bus;
        self
    }

    /// The runner, counting its runs in `metrics` (by default in metrics nobody reads).
    pub fn with_metrics(mut self, metrics: Arc<Metrics>) -> Self {
        self.metrics = metrics;
        self
    }

    /// A token for one run: fires on shutdown, or when the caller cancels it.
    pub fn run_token(&self) -> CancellationToken {
        self.shutdown.child_token()
    }

    /// Cancels every run; each records itself as interrupted. New runs are refused.
    pub fn cancel_all(&self) {
        self.shutdown.cancel();
    }

    /// Stops taking runs and, when runs are handed over on shutdown, lets each reach the
    /// end of its step and leaves it for the next process or a peer, cutting those still
    /// in a step after `grace` (the next owner makes that step again); otherwise cancels
    /// every run at once, as [`Self::cancel_all`].
    pub fn hand_over(&self, grace: Duration) {
        if !self.settings.hand_over {
            self.cancel_all();
            return;
        }
        self.draining.cancel();
        let shutdown = self.shutdown.clone();
        self.tracker.spawn(async move {
            tokio::select! {
                () = tokio::time::sleep(grace) => shutdown.cancel(),
                () = shutdown.cancelled() => {}
            }
        });
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
    pub async fn attach(
        &self,
        tenant: &Tenant,
        message_id: MessageId,
        after_seq: u64,
    ) -> Result<EventStream, RunError> {
        let (live, known) = match Found::find(&self.live, &self.store, tenant, message_id).await? {
            Found::Local(run) => (Some(run.subscribe()), live::Known::Nothing),
            Found::Remote(_) => (None, live::Known::SeenRunning),
            Found::Ended(_) => (None, live::Known::Nothing),
        };
        // Heard of before the store is read: nothing committed in between is missed.
        let watch = match live {
            Some(_) => crate::cluster::Watch::never(),
            None => {
                self.bus
                    .watch(message_id, self.last_seq_of(tenant, message_id))
                    .await
            }
        };
        Ok(live::follow(
            self.store.clone(),
            tenant.clone(),
            message_id,
            after_seq,
            live,
            watch,
            known,
        ))
    }

    /// [`Self::attach`] for a client's stream, counted against the tenant's
    /// `max_follow_streams` (0: no limit) while it is open.
    pub async fn attach_for_client(
        &self,
        tenant: &Tenant,
        message_id: MessageId,
        after_seq: u64,
        max_streams: u32,
    ) -> Result<EventStream, RunError> {
        let slot = self.follow_streams.open(tenant, max_streams)?;
        let events = self.attach(tenant, message_id, after_seq).await?;
        Ok(slot.holding(events))
    }

    /// Deletes a conversation and everything recorded for it. A conversation with a
    /// running message cannot be deleted until that run ends.
    pub async fn delete_conversation(
        &self,
        tenant: &Tenant,
        id: ConversationId,
    ) -> Result<(), RunError> {
        if self.store.get_conversation(tenant, id).await?.is_none() {
            return Err(RunError::not_found("conversation", id));
        }
        // Running anywhere: a run holds its message running in the store until it ends.
        if self.store.running_in(tenant, id).await? {
            return Err(RunError::ConversationBusy { id: id.to_string() });
        }
        // The sub-agents' runs go with the runs that started them, deepest first.
        let children = lineage::child_conversations(&self.store, tenant, id).await?;
        for child in &children {
            if self.store.running_in(tenant, *child).await? {
                return Err(RunError::ConversationBusy { id: id.to_string() });
            }
        }
        for child in children {
            self.store.delete_conversation(tenant, child).await?;
        }
        self.store.delete_conversation(tenant, id).await?;
        Ok(())
    }

    /// Delivers the results of client-executed tools to the run waiting for them.
    pub async fn submit_tool_outputs(
        &self,
        tenant: &Tenant,
        message_id: MessageId,
        outputs: Vec<ClientOutput>,
    ) -> Result<(), RunError> {
        self.deliver(tenant, message_id, Delivery::Outputs(outputs))
            .await
    }

    /// Delivers decisions on the calls that need approval to the run waiting on them.
    pub async fn approve_tool_calls(
        &self,
        tenant: &Tenant,
        message_id: MessageId,
        decisions: Vec<Decision>,
    ) -> Result<(), RunError> {
        self.deliver(tenant, message_id, Delivery::Decisions(decisions))
            .await
    }

    /// Delivers decisions given on `top`, each to the run it names: `top`'s own, or a
    /// sub-agent's run below it (as its `child` events name it).
    pub async fn approve_routed(
        &self,
        tenant: &Tenant,
        top: MessageId,
        decisions: Vec<(Option<MessageId>, Decision)>,
    ) -> Result<(), RunError> {
        for (target, group) in lineage::by_target(top, decisions) {
            lineage::check_below(&self.store, tenant, top, target).await?;
            self.approve_tool_calls(tenant, target, group).await?;
        }
        Ok(())
    }

    /// Delivers outputs given on `top`, each to the run it names (see
    /// [`Self::approve_routed`]).
    pub async fn submit_routed(
        &self,
        tenant: &Tenant,
        top: MessageId,
        outputs: Vec<(Option<MessageId>, ClientOutput)>,
    ) -> Result<(), RunError> {
        for (target, group) in lineage::by_target(top, outputs) {
            lineage::check_below(&self.store, tenant, top, target).await?;
            self.submit_tool_outputs(tenant, target, group).await?;
        }
        Ok(())
    }

    /// Whether a run of `definition` may wait on its caller anywhere in its tree: a tool
    /// that asks for approval or a client tool, in it or in any sub-agent below it (as the
    /// versions resolve now).
    pub async fn tree_waits_on_caller(
        &self,
        tenant: &Tenant,
        definition: &AgentDefinition,
    ) -> bool {
        lineage::tree_waits_on_caller(&self.store, tenant, definition).await
    }

    async fn deliver(
        &self,
        tenant: &Tenant,
        message_id: MessageId,
        delivery: Delivery,
    ) -> Result<(), RunError> {
        let run = match Found::find(&self.live, &self.store, tenant, message_id).await? {
            Found::Local(run) => run,
            Found::Remote(message) => {
                return self
                    .elsewhere()
                    .deliver(tenant, message_id, delivery, message.status)
                    .await
            }
            Found::Ended(_) => return Err(live::not_waiting(delivery.awaited())),
        };
        match run.mailbox.deliver(delivery.clone()) {
            // A run being handed over stopped waiting here: the answer is kept for the
            // process that goes on with it, as for a run held elsewhere.
            Err(RunError::NotWaiting { .. }) if self.draining.is_cancelled() => {
                let elsewhere = self.elsewhere();
                let status = elsewhere.stored_status(tenant, message_id).await?;
                elsewhere
                    .deliver(tenant, message_id, delivery, status)
                    .await
            }
            delivered => delivered,
        }
    }

    /// Stops a running message and waits (briefly) until it has recorded its end; returns
    /// the status it ended with.
    pub async fn cancel(
        &self,
        tenant: &Tenant,
        message_id: MessageId,
    ) -> Result<MessageStatus, RunError> {
        let run = match Found::find(&self.live, &self.store, tenant, message_id).await? {
            Found::Local(run) => run,
            Found::Remote(_) => return self.elsewhere().cancel(tenant, message_id).await,
            Found::Ended(message) => {
                return Err(RunError::NotRunning {
                    id: message_id.to_string(),
                    status: message.status,
                })
            }
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
        self.elsewhere().stored_status(tenant, message_id).await
    }

    /// The runs in progress here.
    pub fn live_ids(&self) -> Vec<MessageId> {
        self.live.ids()
    }

    /// Hands each command other replicas kept to its run here.
    pub async fn hand_commands(&self, taken: Vec<TakenCommand>) {
        self.commands().dispatch(taken).await;
    }

    /// Goes on with a run a sweep took over here, from its last durable round, with the
    /// commands `kept` for it while it had no owner.
    pub async fn resume_taken(
        &self,
        adopted: Adopted,
        kept: &[RunCommand],
    ) -> Result<(), RunError> {
        let pickup = takeover::Pickup {
            store: &self.store,
            models: &self.models,
            tools: &self.tools,
            settings: &self.settings,
        };
        match pickup.launch(adopted, kept, self.run_token()).await? {
            Some(takeover::Picked::Run(launch)) => {
                self.launch_task(*launch);
            }
            Some(takeover::Picked::Queued(enqueued)) => {
                queue::enqueue(self, *enqueued);
            }
            None => {}
        }
        Ok(())
    }

    /// Cancels a run without waiting for it to end (a cancel waits for its run, and the
    /// caller goes on meanwhile).
    pub fn cancel_in_background(&self, tenant: &Tenant, message_id: MessageId) {
        let (runner, tenant) = (self.clone(), tenant.clone());
        self.tracker.spawn(async move {
            if let Err(err) = runner.cancel(&tenant, message_id).await {
                tracing::warn!(error = %err, message_id = %message_id, "a run was not cancelled");
            }
        });
    }

    /// The commands other replicas keep for the runs held here.
    fn commands(&self) -> commands::Commands<'_> {
        commands::Commands {
            store: &self.store,
            live: &self.live,
            draining: &self.draining,
        }
    }
}

impl Runner {
    /// Validates `spec`, writes the message as running and starts the run. A retry with
    /// the idempotency key and request of an earlier run follows that run instead. While the
    /// store cannot write (its last flush failed), no run starts.
    pub async fn start(
        &self,
        spec: RunSpec,
        cancel: CancellationToken,
    ) -> Result<RunHandle, RunError> {
        let arrived = tokio::time::Instant::now();
        if self.shutdown.is_cancelled() || self.draining.is_cancelled() {
            return Err(RunError::ShuttingDown);
        }
        let mut spec = pin::pin(&self.store, spec).await?.validated()?;
        let own_cost = spec.agent.budget.cost;
        spec.agent.budget = spec.agent.budget.capped(&spec.limits);
        prepare::check_sizes(&spec, &self.settings)?;
        if let Some(record) = prepare::earlier_run(&self.store, &spec).await? {
            return self.follow_retry(&spec, &record).await;
        }
        self.check_tokens(&spec).await?;
        let by_ceiling = own_cost != spec.agent.budget.cost;
        pricing::check_priced(&self.store, &self.models, &spec, by_ceiling).await?;
        let prepared = prepare::prepare(
            &self.store,
            &self.models,
            &self.tools,
            &spec,
            &self.settings,
        )
        .await?;
        if !*self.store.writable().borrow() {
            return Err(RunError::StoreUnwritable);
        }
        // Once its message is being written, the run either does not exist or has a task
        // driving it: a caller that leaves meanwhile (its deadline passed, its stream was
        // reset) drops this future, not the write and the launch, which would leave a
        // message `RUNNING` that nothing drives.
        let runner = self.clone();
        self.tracker
            .spawn(async move {
                runner
                    .write_and_launch(spec, prepared, cancel, arrived)
                    .await
            })
            .await
            .map_err(|err| {
                if err.is_cancelled() {
                    RunError::ShuttingDown
                } else {
                    RunError::Interrupted
                }
            })?
    }

    /// Writes a new run's message and launches its task; follows the earlier run of a key
    /// taken meanwhile. The caller's deadline counts from `arrived`, when its request came.
    async fn write_and_launch(
        &self,
        mut spec: RunSpec,
        prepared: Prepared,
        cancel: CancellationToken,
        arrived: tokio::time::Instant,
    ) -> Result<RunHandle, RunError> {
        let mut message = prepare::new_message(&spec, &prepared);
        let aim = steer::aim(self, &spec, &message).await;
        message.steers = aim.map(|aim| aim.joined);
        match prepare::insert_message(&self.store, &spec, &prepared, &mut message).await? {
            // Nothing live to steer: it runs as a run.
            Inserted::Yes => message.steers = None,
            Inserted::Queued { .. } => {
                if let Some(aim) = aim {
                    return Ok(steer::start(self, spec, message, aim).await);
                }
                let left = spec.deadline.map(|d| d.saturating_sub(arrived.elapsed()));
                return Ok(queue::hold(self, spec, message, cancel, left).await);
            }
            Inserted::KeyTaken(record) => return self.follow_retry(&spec, &record).await,
            Inserted::Refused(refusal) => {
                if let Refusal::Busy { .. } = refusal {
                    self.metrics.conversation_busy("rejected");
                }
                return Err(quota::refused(refusal, spec.limits));
            }
        }
        spec.deadline = spec
            .deadline
            .map(|deadline| deadline.saturating_sub(arrived.elapsed()));
        // Durable with the run's first burst: the caller learns the message's id from its
        // first event. A disk write of its own would hold the first model call back.
        Ok(self.launch(spec, prepared, message, cancel))
    }

    /// Checks a stored agent's version as a run would resolve it (model and fallbacks
    /// known, tools resolvable, output schema compiles, prompt fits), so a stored agent
    /// fails at `Run` only when something it names went away since.
    /// Returns it as kept (defaults filled in).
    pub fn check_definition(
        &self,
        tenant: &Tenant,
        definition: AgentDefinition,
    ) -> Result<AgentDefinition, RunError> {
        let mut spec = RunSpec::new(tenant.clone(), "?");
        spec.inputs = spec::instruction_variables(&definition.agent.instruction)
            .into_iter()
            .map(|name| (name.to_owned(), String::new()))
            .collect();
        spec.agent = definition.agent;
        spec.client_tools = definition.client_tools;
        let spec = spec.validated()?;
        prepare::check_sizes(&spec, &self.settings)?;
        prepare::check(&self.models, &self.tools, &spec, &self.settings)?;
        Ok(AgentDefinition {
            agent: spec.agent,
            client_tools: spec.client_tools,
        })
    }

    /// The stored agent version `reference` names now, decoded.
    pub async fn read_version(
        &self,
        tenant: &Tenant,
        reference: &AgentReference,
    ) -> Result<(u32, AgentDefinition), RunError> {
        pin::read_version(&self.store, tenant, reference).await
    }

    /// What the run of `message` was started with, as kept with it; `None` for messages of
    /// earlier versions.
    pub async fn stored_spec(
        &self,
        tenant: &Tenant,
        message: MessageId,
    ) -> Result<Option<StoredSpec>, RunError> {
        takeover::read_spec(&self.store, tenant, message).await
    }

    /// Refuses a run of a tenant that used its tokens for today; its other limits are
    /// counted as its message is written.
    async fn check_tokens(&self, spec: &RunSpec) -> Result<(), RunError> {
        if spec.limits.tokens_per_day == 0 {
            return Ok(());
        }
        let tokens_today = self
            .store
            .tenant_tokens(&spec.tenant, quota::today())
            .await?;
        quota::check_tokens(spec.limits, tokens_today)
    }

    /// Follows the earlier run of a retried request from its first event; a different
    /// request under the same key is refused.
    async fn follow_retry(
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
            .get_message(&spec.tenant, record.message_id)
            .await?
            .ok_or_else(|| RunError::not_found("message", record.message_id))?;
        Ok(RunHandle {
            message_id: message.id,
            conversation_id: message.conversation_id,
            events: self.attach(&spec.tenant, message.id, 0).await?,
        })
    }

    /// Registers the run as live, subscribes its first follower, and hands the run to its
    /// own task.
    fn launch(
        &self,
        spec: RunSpec,
        prepared: Prepared,
        message: Message,
        cancel: CancellationToken,
    ) -> RunHandle {
        let (message_id, conversation_id) = (message.id, prepared.conversation_id);
        let tenant = spec.tenant.clone();
        let launch = Launch {
            spec,
            agent: prepared.agent,
            message,
            cancel,
            fence: self.store.fence(),
            resumption: None,
            early: None,
            coming: None,
            interrupted: None,
        };
        let first_follower = self.launch_task(launch);
        RunHandle {
            message_id,
            conversation_id,
            events: live::follow(
                self.store.clone(),
                tenant,
                message_id,
                0,
                Some(first_follower),
                crate::cluster::Watch::never(),
                live::Known::FromFirstEvent,
            ),
        }
    }

    /// Registers the run as live and hands it to its own task; returns its first
    /// follower's subscription, taken before the run emits anything.
    fn launch_task(&self, mut launch: Launch) -> live::Subscription {
        let mailbox = Mailbox::default();
        if let Some((awaited, ids)) = launch.coming.take() {
            mailbox.expect_soon(awaited, ids);
        }
        if let Some(early) = launch.early.take() {
            mailbox.deliver_early(early);
        }
        if let Some(interruption) = launch.interrupted.take() {
            mailbox.interrupt(interruption);
        }
        let after_seq = launch.resumption.as_ref().map_or(0, |r| r.last_seq);
        let (opened, first_follower) = self.open_live(
            &launch.spec.tenant,
            &launch.message,
            launch.fence.clone(),
            &launch.cancel,
            mailbox,
            after_seq,
        );
        self.spawn_run(launch, opened);
        first_follower
    }
}

impl Host for Runner {
    fn parts(&self) -> Parts<'_> {
        Parts {
            store: &self.store,
            models: &self.models,
            tools: &self.tools,
            settings: &self.settings,
            live: &self.live,
            bus: self.bus.as_ref(),
            metrics: &self.metrics,
            shutdown: &self.shutdown,
            draining: &self.draining,
            tracker: &self.tracker,
        }
    }

    fn open_live(
        &self,
        tenant: &Tenant,
        message: &Message,
        fence: crate::store::Fence,
        cancel: &CancellationToken,
        mailbox: Mailbox,
        after_seq: u64,
    ) -> (Opened, live::Subscription) {
        let (events, _) = broadcast::channel(self.settings.event_buffer.max(1));
        let live_run = LiveRun {
            tenant: tenant.clone(),
            cancel: cancel.clone(),
            events: events.clone(),
            mailbox: mailbox.clone(),
        };
        let first_follower = live_run.subscribe();
        let registration = self.live.register(message.id, live_run);
        let destination = live::Destination {
            store: self.store.clone(),
            tenant: tenant.clone(),
            fence,
            shutdown: self.shutdown.clone(),
            write_timeout: self.settings.write_timeout,
            bus: Arc::clone(&self.bus),
        };
        let mut emitter = Emitter::new(
            destination,
            message.conversation_id,
            message.id,
            events,
            cancel.clone(),
            &self.tracker,
        );
        emitter.continue_after(after_seq);
        let opened = Opened {
            registration,
            emitter,
            mailbox,
        };
        (opened, first_follower)
    }

    fn spawn_run(&self, launch: Launch, opened: Opened) {
        let Launch {
            spec,
            agent,
            message,
            cancel,
            resumption,
            ..
        } = launch;
        let Opened {
            registration,
            emitter,
            mailbox,
        } = opened;
        let tenant = spec.tenant.clone();
        if let Some(deadline) = spec.deadline {
            self.tracker
                .spawn(launch::cancel_after(cancel.clone(), deadline));
        }
        let span = run::span(&spec, &agent, &message);
        let family = (!spec.agent.sub_agents.is_empty())
            .then(|| run::Family::of(&spec, Arc::new(self.clone()), &self.settings));
        let task = RunTask::new(
            spec,
            message,
            agent,
            self.settings.clone(),
            Recorder::new(self.store.clone(), tenant, emitter),
            Control {
                cancel,
                shutdown: self.shutdown.clone(),
                draining: self.draining.clone(),
                mailbox,
                lease: self.store.lease(),
                registration,
                tasks: self.tracker.clone(),
            },
            Arc::clone(&self.metrics),
        )
        .with_family(family);
        let task = match resumption {
            Some(resumption) => task.resuming(resumption),
            None => task,
        };
        self.tracker.spawn(task.drive().instrument(span));
    }

    async fn attach(
        &self,
        tenant: &Tenant,
        message_id: MessageId,
        after_seq: u64,
    ) -> Result<EventStream, RunError> {
        Runner::attach(self, tenant, message_id, after_seq).await
    }
}
