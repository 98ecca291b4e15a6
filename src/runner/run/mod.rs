//! One run, owned by one task from its first event to its last: LLM → tool calls →
//! observations → LLM … → answer.
//!
//! Per round: write an empty thought, build the prompt, stream the model's turn as answer
//! deltas, store the thought with its calls, run the calls, store each observation, and go
//! again until the model calls no tool. [`RunTask::drive`] is the whole life of a run: it
//! ends by recording the message's final state and sending `end` or `error`, and the run
//! leaves the live registry when the task is dropped. What the run knows lives in
//! [`state`], free of I/O; writing and announcing go through [`recorder`].

mod agent;
mod allowance;
mod budgeted;
mod calls;
mod children;
mod deltas;
mod finish;
mod forming;
mod halt;
mod launch;
mod model_call;
mod output;
mod prompt;
mod recorder;
mod resume;
mod retry;
mod spans;
mod state;
mod steering;
mod takeover;
mod tools;

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::FutureExt;
use rust_decimal::prelude::ToPrimitive;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

pub use launch::{
    child_message_id, legacy_child_message_id, ChildRun, ChildStart, Family, Launcher,
};
pub use recorder::Recorder;
use resume::Resume;
pub use resume::{rebuild, Resumption};
use takeover::{Leftover, PickUp};

pub use self::agent::Agent;
use self::budgeted::{Budgeted, Ending};
use self::calls::CallResults;
use self::deltas::Deltas;
use self::halt::Halt;
use self::model_call::ModelCall;
pub use self::output::Output;
use self::prompt::prompt_context;
pub use self::spans::span;
use self::state::{Round, RunState};
use self::tools::RoundTools;
use super::budget;
use super::history;
use super::live::{Driven, Mailbox, Registration};
use super::settings::RunnerSettings;
use super::spec::{OutputFallback, RunSpec};
use super::strategy::{ModelStep, PromptContext};
use crate::domain::{
    BudgetKind, FinishReason, HistoryReport, Lease, Message, MessageStatus, PastMessage, RunEvent,
    RunStarted,
};
use crate::llm::{ChatRequest, LlmError};
use crate::telemetry::{Metrics, RunOutcome};
use crate::tools::OfferedTool;

/// How a run is stopped and reached from outside while it is in progress.
pub struct Control {
    /// Fires on `Cancel`, the client's deadline, a dropped stream (when asked) or shutdown.
    pub cancel: CancellationToken,
    /// Fires on shutdown only, to tell an interruption from a cancel.
    pub shutdown: CancellationToken,
    /// Fires when the process starts to stop and hands its runs over: the run stops at the
    /// end of its step.
    pub draining: CancellationToken,
    /// Where the caller's tool results arrive.
    pub mailbox: Mailbox,
    /// This process's lease on the run: calls that must not repeat wait for enough of it.
    pub lease: Lease,
    /// Keeps the run in the live registry until the task ends.
    pub registration: Registration,
    /// The runner's tracker, which the run's own timers join so shutdown waits for them.
    pub tasks: TaskTracker,
}

/// How a round ended.
enum RoundEnd {
    /// The model called tools; go on.
    Continue,
    /// The model answered without tools.
    Answered,
    /// The last round still asked for tools.
    LimitReached,
}

/// One run in progress, owned by its task.
pub struct RunTask {
    spec: RunSpec,
    message: Message,
    agent: Agent,
    settings: RunnerSettings,
    recorder: Recorder,
    control: Control,
    metrics: Arc<Metrics>,
    /// What every prompt of the run is built from; history may be cut to fit.
    context: PromptContext,
    state: RunState,
    started: Instant,
    /// The answer as it is sent, in deltas.
    deltas: Deltas,
    /// Where a run taken over from a lost owner picks up; `None` for a run that starts.
    resume: Option<Resume>,
    /// The cut round's stored thought, whose id and place its new attempt keeps.
    cut: Option<crate::domain::Thought>,
    /// Where sub-agents start, when the agent has any.
    family: Option<Family>,
    /// Stops the run's work: a child of the run's token, fired also by the wall clock.
    work: CancellationToken,
    /// What the run may still spend, and its wall clock.
    budgeted: Budgeted,
}

impl RunTask {
    /// A run of `spec` whose `message` is written as running.
    pub fn new(
        spec: RunSpec,
        message: Message,
        agent: Agent,
        settings: RunnerSettings,
        recorder: Recorder,
        control: Control,
        metrics: Arc<Metrics>,
    ) -> Self {
        let context = prompt_context(&spec, &agent);
        let started = Instant::now();
        let work = control.cancel.child_token();
        let budget = spec.agent.budget.clone();
        let clock = spec.agent.budget.seconds.map(|seconds| {
            let before = Duration::from_secs_f64(message.running_seconds.max(0.0));
            let limit = Duration::from_secs(seconds.into());
            allowance::Clock::new(limit, before, work.clone(), control.tasks.clone())
        });
        Self {
            spec,
            message,
            agent,
            settings,
            recorder,
            control,
            metrics,
            context,
            state: RunState::default(),
            started,
            deltas: Deltas::new(started),
            resume: None,
            cut: None,
            family: None,
            work,
            budgeted: Budgeted::new(budget, clock),
        }
    }

    /// The run starts sub-agents through `family`.
    pub fn with_family(mut self, family: Option<Family>) -> Self {
        self.family = family;
        self
    }

    /// The whole life of the run: the rounds, then the record of how they ended; only then
    /// does the run leave the live registry. What the run emits goes to its publisher each
    /// time the run waits.
    pub fn drive(self) -> Driven<impl Future<Output = ()>> {
        let outbox = self.recorder.outbox();
        outbox.drive(self.live())
    }

    async fn live(mut self) {
        self.metrics.run_started();
        // A bug that panics in the rounds must still end the run as every run ends: its
        // message FAILED, an `error` event, its place and gauges given back.
        // The rounds and the ending are boxed, each while it runs: the task that is spawned,
        // moved and kept for every run then holds the run, not room for the deepest await of
        // each (tens of KiB, copied at each move and given back to the system at its end).
        let outcome = std::panic::AssertUnwindSafe(Box::pin(self.rounds()))
            .catch_unwind()
            .await
            .unwrap_or_else(|panic| {
                tracing::error!(panic = ?panic_text(&*panic), "a run's task panicked; the run ends as failed");
                Err(Halt::failed(
                    "internal",
                    "the run failed on an internal error of the service",
                ))
            });
        let registration = Box::pin(self.finish(outcome)).await;
        drop(registration);
    }

    /// The rounds, ended as the run's budget says when one of its budgets runs out.
    async fn rounds(&mut self) -> Result<FinishReason, Halt> {
        if let Some(clock) = &mut self.budgeted.clock {
            clock.start();
        }
        let outcome = self.rounds_within_budget().await;
        let caller_cancelled = self.control.cancel.is_cancelled();
        match self.budgeted.exhaustion(&outcome, caller_cancelled) {
            Some(kind) => self.exhausted(kind).await,
            None => outcome,
        }
    }

    async fn rounds_within_budget(&mut self) -> Result<FinishReason, Halt> {
        let offered = self.agent.tools.offered();
        let max_rounds = self
            .spec
            .agent
            .max_iteration
            .min(super::spec::MAX_ITERATION_LIMIT)
            + 1;
        let first_tools: &[OfferedTool] = if max_rounds == 1 { &[] } else { &offered };
        let first = match self.resume.take() {
            None => {
                self.start(first_tools)?;
                1
            }
            Some(resume) => match self.pick_up(resume, &offered, max_rounds).await? {
                PickUp::At(position) => position,
                PickUp::Ended(reason) => return Ok(reason),
            },
        };
        let mut repairing = false;
        for position in first.. {
            self.check_draining()?;
            if let Some(kind) = self.budgeted.take_spent_out() {
                return Err(Halt::Exhausted(kind));
            }
            if !repairing {
                steering::join(
                    position,
                    self.cut.as_ref(),
                    &self.control.mailbox,
                    &mut self.recorder,
                    &self.message,
                    &mut self.state,
                )
                .await;
            }
            // A repair round offers no tools: it only corrects the answer.
            let last = repairing || position >= max_rounds;
            let tools: &[OfferedTool] = if last { &[] } else { &offered };
            match self
                .round(position, last, tools, allowance::MIN_ROUND_COMPLETION)
                .await?
            {
                RoundEnd::Continue => continue,
                RoundEnd::LimitReached if repairing => {
                    return self.output_failed(
                        "the model called tools instead of correcting its answer".to_owned(),
                    )
                }
                RoundEnd::LimitReached => return Ok(FinishReason::MaxIterations),
                RoundEnd::Answered => match self.check_output() {
                    Ok(()) => return Ok(FinishReason::Stop),
                    Err(problems) if !repairing => {
                        tracing::info!(
                            ?problems,
                            "the answer does not meet the output schema; asking for a repair"
                        );
                        self.context.repair =
                            Some(Output::repair(self.state.last_answer(), &problems));
                        repairing = true;
                    }
                    Err(problems) => return self.output_failed(problems),
                },
            }
        }
        Ok(FinishReason::MaxIterations)
    }

    /// Stops the run between steps once the process hands its runs over.
    fn check_draining(&self) -> Result<(), Halt> {
        match self.control.draining.is_cancelled() {
            true => Err(Halt::HandedOver),
            false => Ok(()),
        }
    }

    /// Checks the last answer against the output schema, keeping the document it holds.
    fn check_output(&mut self) -> Result<(), String> {
        let Some(output) = &self.agent.output else {
            return Ok(());
        };
        let answer = self.state.last_answer();
        let document = output.check(answer)?;
        let text = answer.to_owned();
        self.state.set_document(document, text);
        Ok(())
    }

    /// The answer stays invalid: kept as text, or the run fails, as the run asked.
    fn output_failed(&mut self, problems: String) -> Result<FinishReason, Halt> {
        let fallback = self
            .agent
            .output
            .as_ref()
            .map(|output| output.fallback)
            .unwrap_or_default();
        match fallback {
            OutputFallback::Text => {
                self.state.set_output_invalid(problems);
                Ok(FinishReason::Stop)
            }
            OutputFallback::Error => Err(Halt::failed(
                "output_invalid",
                format!("the answer does not meet agent.output_schema: {problems}"),
            )),
        }
    }

    /// Announces the run, with how much history fits the first prompt; a prompt that fits
    /// not even without history ends the run before the model is called.
    fn start(&mut self, tools: &[OfferedTool]) -> Result<(), Halt> {
        let strategy = &self.agent.strategy;
        let fitted = budget::fit(&mut self.context, &self.agent.model.info, |c| {
            strategy.build_request(c, &[], tools)
        });
        let trim = fitted.as_ref().map(|(_, trim)| *trim).unwrap_or_default();
        self.recorder
            .announce(RunEvent::Started(Box::new(RunStarted {
                strategy: strategy.kind(),
                provider: self.agent.model.provider.clone(),
                model: self.agent.model.info.name.clone(),
                max_iteration: self.spec.agent.max_iteration,
                history: HistoryReport {
                    kept_turns: u32::try_from(self.context.history.len()).unwrap_or(u32::MAX),
                    dropped_turns: trim.turns.saturating_add(self.agent.history.left_out_turns),
                    dropped_tokens: trim.tokens + self.agent.history.left_out_tokens,
                },
                agent: self.spec.pinned.clone(),
                budget: Some(self.spec.agent.budget.clone())
                    .filter(|budget| !budget.is_unlimited()),
            })));
        fitted.map_err(overflow)?;
        log_trim(trim);
        Ok(())
    }

    /// One round; a round that cannot finish is kept for the run's end.
    /// A round whose model call the budget cannot pay is not begun.
    async fn round(
        &mut self,
        position: u32,
        last: bool,
        tools: &[OfferedTool],
        min_completion: u64,
    ) -> Result<RoundEnd, Halt> {
        let request = self.request(tools)?;
        let spent = self.budgeted.spent(&self.state);
        let request = self
            .budgeted
            .afford(request, min_completion, &spent, &self.agent)?;
        let mut round = self.state.begin_round(self.message.id, position);
        if let Some(cut) = self.cut.take().filter(|cut| cut.position == position) {
            // The cut round is made again in its own place: one thought per position.
            round.thought.id = cut.id;
            round.thought.created_at = cut.created_at;
        }
        self.recorder.thought(&round.thought);
        match self.play(&mut round, last, tools, request).await {
            Ok(end) => {
                self.state.close_round(round);
                self.keep_running_time();
                Ok(end)
            }
            Err(halt) => {
                self.state.interrupt(round);
                Err(halt)
            }
        }
    }

    async fn play(
        &mut self,
        round: &mut Round,
        last: bool,
        tools: &[OfferedTool],
        request: ChatRequest,
    ) -> Result<RoundEnd, Halt> {
        let step = self.model_call().call(&request, tools, round).await?;
        self.decide(round, step)?;
        if round.thought.tool_calls.is_empty() {
            return Ok(RoundEnd::Answered);
        }
        // Only the last round ends on a tool call. Earlier, a call of a tool the agent does
        // not offer (some models call tools they were never given) is an unknown tool: its
        // observation says so and the loop goes on.
        if last {
            return Ok(RoundEnd::LimitReached);
        }
        // The decision is durable: a run handed over here has its calls made by the next
        // owner, none of them started.
        self.check_draining()?;
        let ran = self.round_tools(Duration::ZERO).run(round).await;
        self.state.count_children(round);
        self.budgeted.note_spent_out(ran)?;
        Ok(RoundEnd::Continue)
    }

    /// Keeps the running time with the message after each round, so an owner that takes
    /// the run over goes on counting from it.
    fn keep_running_time(&mut self) {
        if let Some(seconds) = self.budgeted.running_seconds() {
            self.message.running_seconds = seconds;
            self.recorder.message(&self.message);
        }
    }

    /// Ends the run whose `kind` budget ran out as its budget says.
    async fn exhausted(&mut self, kind: BudgetKind) -> Result<FinishReason, Halt> {
        tracing::info!(budget = kind.as_str(), "a budget of the run ran out");
        self.metrics.budget_exhausted(kind);
        self.message.budget_exhausted = Some(kind);
        match self.budgeted.ending(kind) {
            Ending::Stop => Ok(FinishReason::BudgetExhausted),
            Ending::Fail(halt) => Err(halt),
            Ending::FinalAnswer => {
                self.final_answer().await?;
                Ok(FinishReason::BudgetExhausted)
            }
        }
    }

    /// One more round without tools, for an answer from what the run found so far; skipped
    /// when what is left cannot pay its prompt and 256 completion tokens.
    async fn final_answer(&mut self) -> Result<(), Halt> {
        let position = self.state.iterations() + 1;
        let outcome = self
            .round(position, true, &[], allowance::MIN_FINAL_COMPLETION)
            .await;
        let caller_cancelled = self.control.cancel.is_cancelled();
        match outcome {
            Ok(_) | Err(Halt::Exhausted(_)) => Ok(()),
            Err(Halt::Cancelled) if self.budgeted.stopped_by_clock(caller_cancelled) => Ok(()),
            Err(halt) => Err(halt),
        }
    }

    /// The task goes on from `resumption` (the records a lost owner made durable) instead
    /// of starting: its events continue the stored `seq`.
    pub fn resuming(mut self, resumption: Resumption) -> Self {
        // A steer's notice may have gone with the lost owner: the store is read once.
        self.control.mailbox.steer_waits();
        self.state = resumption.state;
        self.resume = Some(resumption.resume);
        self
    }

    /// Leaves the run, still running, for another process to go on with: what it emitted
    /// is committed with the message marked handed over, and nothing ends it; its
    /// followers here are told to attach again.
    async fn release(mut self) -> Registration {
        self.recorder.settle_if_failing().await;
        self.message.handed_over = true;
        self.message.updated_at = crate::domain::now();
        self.recorder.message(&self.message);
        self.recorder.close().await;
        self.metrics.run_handed_over();
        tracing::info!("the run is handed over: another process goes on with it");
        self.control.registration
    }

    /// Picks the run up: fits its history as its start did, counts the cut call, announces
    /// the restart, and finishes a round whose model call had finished.
    async fn pick_up(
        &mut self,
        resume: Resume,
        offered: &[OfferedTool],
        max_rounds: u32,
    ) -> Result<PickUp, Halt> {
        let strategy = &self.agent.strategy;
        let rounds = self.state.rounds();
        budget::fit(&mut self.context, &self.agent.model.info, |c| {
            strategy.build_request(c, rounds, offered)
        })
        .map_err(overflow)?;
        let rounds = self.state.rounds();
        let cut = takeover::cut_call_usage(
            &self.agent,
            &self.context,
            rounds,
            &resume,
            offered,
            max_rounds,
        );
        if let Some(usage) = cut {
            self.state.add_cut_usage(&usage);
        }
        let own_seq = self.recorder.next_seq();
        self.recorder
            .announce(takeover::restarted(&resume, own_seq));
        tracing::info!(
            position = resume.position(),
            "a run whose owner was lost goes on here"
        );
        self.cut = resume.cut;
        let mut round = match takeover::leftover(resume.decided, resume.next_position, max_rounds) {
            Leftover::GoOnAt(position) => return Ok(PickUp::At(position)),
            Leftover::Close(round) => {
                self.state.close_round(*round);
                return Ok(PickUp::Ended(FinishReason::MaxIterations));
            }
            Leftover::Finish(round) => *round,
        };
        let position = round.thought.position;
        let finished = self
            .round_tools(resume.waited)
            .run_resumed(&mut round, &resume.started)
            .await;
        self.state.count_children(&round);
        match finished {
            Ok(()) => {
                self.state.close_round(round);
                Ok(PickUp::At(position + 1))
            }
            Err(Halt::Exhausted(kind)) => {
                // The round is whole: its calls past the budget have their results.
                self.state.close_round(round);
                self.budgeted.note_spent_out(Err(Halt::Exhausted(kind)))?;
                Ok(PickUp::At(position + 1))
            }
            Err(halt) => {
                self.state.interrupt(round);
                Err(halt)
            }
        }
    }

    /// What a round's model call needs of the run.
    fn model_call(&mut self) -> ModelCall<'_> {
        ModelCall {
            agent: &self.agent,
            settings: &self.settings,
            work: &self.work,
            metrics: &self.metrics,
            recorder: &mut self.recorder,
            state: &mut self.state,
            deltas: &mut self.deltas,
        }
    }

    /// What running a round's calls needs of the run; `waited` is how long its first wait
    /// already lasted under a lost owner.
    fn round_tools(&mut self, waited: Duration) -> RoundTools<'_> {
        let spent = self.budgeted.spent(&self.state);
        RoundTools {
            results: CallResults {
                recorder: &mut self.recorder,
                message: &mut self.message,
                metrics: &self.metrics,
                clock: self.budgeted.clock.as_mut(),
            },
            tools: &self.agent.tools,
            settings: &self.settings,
            cancel: &self.work,
            draining: &self.control.draining,
            mailbox: &self.control.mailbox,
            lease: &self.control.lease,
            waited,
            family: self.family.as_ref(),
            budget: &self.spec.agent.budget,
            spent,
            made: 0,
        }
    }

    /// The round's request, fitted to the model's context window.
    fn request(&mut self, tools: &[OfferedTool]) -> Result<ChatRequest, Halt> {
        let (strategy, rounds) = (&self.agent.strategy, self.state.rounds());
        let (request, trim) = budget::fit(&mut self.context, &self.agent.model.info, |c| {
            strategy.build_request(c, rounds, tools)
        })
        .map_err(overflow)?;
        log_trim(trim);
        let room = self.state.output_room(self.settings.max_answer_bytes);
        if room == 0 {
            return Err(LlmError::TooLarge {
                limit: self.settings.max_answer_bytes,
            }
            .into());
        }
        Ok(ChatRequest {
            max_output_bytes: Some(room),
            ..request
        })
    }

    /// Takes the model's decision: shows an answer the user has not seen, then stores and
    /// announces the thought with its calls.
    fn decide(&mut self, round: &mut Round, step: ModelStep) -> Result<(), Halt> {
        if let Some(text) = self.state.show_paragraph(&step.unshown) {
            self.deltas
                .announce(text, &mut self.recorder, &self.metrics);
        }
        let tools = &self.agent.tools;
        round.decide(step, |name| {
            tools.provider_of(name).unwrap_or_default().to_owned()
        });
        self.recorder.thought(&round.thought);
        Ok(())
    }

    /// With a context window, counts the tokens this turn will take in later prompts and
    /// keeps them with the message: later turns then read no more history than fits, and
    /// count none of it again.
    async fn keep_history_tokens(&mut self) {
        // Nothing more of a run whose records cannot be stored will be: no read of them.
        if self.agent.model.info.context_window.is_none() || self.recorder.events_failed() {
            return;
        }
        let message = PastMessage::from(&self.message);
        let turn = match history::answered_at_once(&message) {
            Some(turn) => turn,
            None => match self.recorder.thoughts(self.message.id).await {
                Ok(thoughts) => history::past_turn(&message, &thoughts),
                Err(err) => {
                    tracing::warn!(error = %err, "could not read the run's thoughts to count its history tokens");
                    return;
                }
            },
        };
        if !history::is_useful(&message, &turn) {
            return;
        }
        let tokenizer = self.agent.model.info.tokenizer;
        let strategy = &self.agent.strategy;
        let tokens = budget::turn_tokens(&self.context, &turn, tokenizer, |c| {
            strategy.build_request(c, &[], &[])
        });
        self.message
            .history_tokens
            .insert(tokenizer.name().to_owned(), tokens);
    }

    /// Answers the calls a newer run's interruption left open "interrupted", so the model
    /// reads them answered in later prompts, and announces them finished so.
    fn answer_interrupted_calls(&mut self) {
        let tools = &self.agent.tools;
        let Some(round) = self.state.unfinished_mut() else {
            return;
        };
        let open: Vec<(usize, String)> = round
            .thought
            .tool_calls
            .iter()
            .enumerate()
            .filter(|(_, call)| call.observation.is_none())
            .map(|(index, call)| (index, call.name.clone()))
            .collect();
        let answered: Vec<_> = open
            .into_iter()
            .filter_map(|(index, name)| {
                round.observe(index, tools.interrupted(&name), std::iter::empty())
            })
            .collect();
        if !answered.is_empty() {
            self.recorder.tools_finished(&round.thought, answered);
        }
    }

    /// Counts the ended run and marks its span as failed when it failed.
    fn observe_end(&self) {
        let message = &self.message;
        let outcome = match (message.status, message.finish_reason) {
            (MessageStatus::Completed, Some(FinishReason::MaxIterations)) => {
                RunOutcome::MaxIterations
            }
            (MessageStatus::Completed, _) => RunOutcome::Completed,
            (MessageStatus::Cancelled, _) => RunOutcome::Cancelled,
            (MessageStatus::Interrupted, _) => RunOutcome::Interrupted,
            (
                MessageStatus::Failed
                | MessageStatus::Running
                | MessageStatus::Queued
                | MessageStatus::WaitingToolOutputs
                | MessageStatus::WaitingApproval,
                _,
            ) => RunOutcome::Failed,
        };
        if let Some(error) = &message.error {
            tracing::Span::current().record("otel.status_description", error.message.as_str());
        }
        let cost = message.usage.total_price.to_f64().unwrap_or_default();
        self.metrics.run_ended(
            self.spec.tenant.as_str(),
            outcome,
            self.started.elapsed(),
            (cost, &message.usage.currency),
        );
    }

    /// Writes the message's final state, then sends the last event and waits until every
    /// event is published. Returns what keeps the run registered.
    async fn finish(mut self, outcome: Result<FinishReason, Halt>) -> Registration {
        // A run a newer one stopped ends here, even while the process hands its runs over.
        let interruption = self.control.mailbox.interruption();
        let stopping = interruption.is_none()
            && (matches!(outcome, Err(Halt::HandedOver))
                || (matches!(outcome, Err(Halt::Cancelled))
                    && self.control.shutdown.is_cancelled()));
        if stopping && self.settings.hand_over && !self.recorder.events_failed() {
            return self.release().await;
        }
        // While the store refuses its records, a run ends only once they are committed or
        // the write timeout has passed: it does not call itself done with nothing durable.
        self.recorder.settle_if_failing().await;
        // A run whose events could not be stored was stopped for it, whatever it saw.
        let outcome = if self.recorder.events_failed() {
            Err(Halt::failed(
                "store_error",
                "the store cannot write, so the run's records could not be made durable",
            ))
        } else {
            outcome
        };
        if interruption.is_some() && outcome.is_err() {
            self.answer_interrupted_calls();
        }
        if let Some(round) = self.state.unfinished() {
            self.recorder.save_thought(&round.thought);
        }
        if let Some(seconds) = self.budgeted.running_seconds() {
            self.message.running_seconds = seconds;
        }
        let event = finish::conclude(
            &mut self.message,
            &self.state,
            outcome,
            finish::Stopper {
                shutting_down: self.control.shutdown.is_cancelled(),
                interruption,
            },
            self.started.elapsed().as_secs_f64(),
        );
        tracing::info!(status = ?self.message.status, iterations = self.message.iterations, "run ended");
        self.keep_history_tokens().await;
        self.observe_end();
        // The message's final state, its tokens and its last event commit together: a
        // client that sees the end finds the message ended and its tokens counted. The
        // publisher tries a failed commit again until it lands or the service shuts down,
        // so a live process leaves no message running.
        self.recorder.message(&self.message);
        // Sub-agents counted their own model calls as they ended.
        let tokens = self
            .message
            .usage
            .tokens
            .total_tokens
            .saturating_sub(self.state.child_tokens());
        self.recorder
            .count_tokens(self.message.id, super::quota::today(), tokens);
        // The run's place under its tenant's limit frees as its message stops running,
        // with the end's commit: a client that starts its next run on seeing the end finds
        // it free.
        self.recorder.announce(event);
        self.recorder.close().await;
        self.control.registration
    }
}

/// What a panic said, when it said it as text.
fn panic_text(panic: &(dyn std::any::Any + Send)) -> &str {
    panic
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(no message)")
}

fn overflow(err: budget::Overflow) -> Halt {
    Halt::failed("context_overflow", err.to_string())
}

fn log_trim(trim: budget::Trim) {
    if trim.turns > 0 {
        tracing::info!(
            turns = trim.turns,
            tokens = trim.tokens,
            "history cut to fit the context window"
        );
    }
}

#[cfg(test)]
mod tests;
