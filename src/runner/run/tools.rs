//! Running one round's tool calls: first a decision on the calls that need approval, then
//! the server's tools concurrently (bounded, each within the tool timeout), then the
//! caller's own tools through the mailbox. Each result is stored and announced as it
//! arrives; the round's thought ends up holding every result in call order.

use std::sync::Arc;
use std::time::Duration;

use futures::{FutureExt, StreamExt};
use tokio_util::sync::CancellationToken;
use tracing::{field, Instrument};

use super::allowance;
use super::calls::{tool_label, CallResults};
use super::children::{ChildCalls, ChildRound};
use super::halt::{or_cancel, Halt};
use super::launch::Family;
use super::state::Round;
use crate::domain::{BudgetKind, Lease, MessageStatus, RunBudget, RunEvent, Spent, ToolCallRecord};
use crate::runner::live::{Awaited, ClientOutput, Decision, Delivery, Mailbox};
use crate::runner::settings::RunnerSettings;
use crate::tools::http_api::truncate_output;
use crate::tools::{Invocation, ProviderKind, ToolSet};

/// How often a call held for the lease looks again.
const LEASE_CHECK_EVERY: Duration = Duration::from_millis(50);

/// One wait of a run on the outside.
struct Wait {
    /// What answers it.
    awaited: Awaited,
    /// The calls waited on.
    ids: Vec<String>,
    /// The message's status meanwhile.
    status: MessageStatus,
    /// The event that tells the outside what is waited on.
    announcement: RunEvent,
    /// How long to wait.
    limit: Duration,
    /// How the run ends when nobody answers in time.
    on_timeout: Halt,
}

/// What running a round's calls needs from its run.
pub struct RoundTools<'a> {
    /// Where results go, and the message that shows the round's waits.
    pub results: CallResults<'a>,
    /// The run's tools.
    pub tools: &'a Arc<ToolSet>,
    /// Timeouts and concurrency.
    pub settings: &'a RunnerSettings,
    /// Stops every call at once.
    pub cancel: &'a CancellationToken,
    /// Fires when the process hands its runs over: a wait for the caller is a step's end.
    pub draining: &'a CancellationToken,
    /// Where the caller's results arrive.
    pub mailbox: &'a Mailbox,
    /// This process's lease on the run.
    pub lease: &'a Lease,
    /// How long the round's first wait had lasted under a lost owner: that much less is
    /// left of it.
    pub waited: Duration,
    /// Where sub-agents start, when the agent has any.
    pub family: Option<&'a Family>,
    /// What the run may spend.
    pub budget: &'a RunBudget,
    /// What it spent before this round's calls.
    pub spent: Spent,
    /// Calls of this round made (or being made) so far.
    pub made: u32,
}

impl RoundTools<'_> {
    /// Runs every call of `round` and records each result.
    /// Calls past what the run's tool-call budget allows are not made; the run then ends
    /// as its budget says (`Halt::Exhausted`), once every result is recorded.
    pub async fn run(&mut self, round: &mut Round) -> Result<(), Halt> {
        let runnable = self.skip_past_limit(round)?;
        let (indices, over) = self.skip_past_budget(round, (0..runnable).collect());
        self.run_calls(round, indices).await?;
        over
    }

    /// Runs what is left of a round a lost owner had decided: a call with a result keeps
    /// it; a call whose start is durable (in `started`) was perhaps made, so unless its tool
    /// is idempotent it is not made again and its result says its outcome is unknown; the
    /// others run as usual (with the `Idempotency-Key` the first attempt had).
    pub async fn run_resumed(
        &mut self,
        round: &mut Round,
        started: &std::collections::HashSet<String>,
    ) -> Result<(), Halt> {
        let mut pending = Vec::new();
        let mut unknown = Vec::new();
        for (index, call) in round.thought.tool_calls.iter().enumerate() {
            if call.observation.is_some() {
                continue;
            }
            // A call perhaps made already is made again only when that is harmless; the
            // caller's own calls were only handed over, and are asked for again.
            // A sub-agent's run is found again by its id and followed, never started twice.
            let repeatable = self.tools.is_idempotent(&call.name)
                || self.tools.is_client(&call.name)
                || self.tools.is_agent(&call.name);
            if started.contains(&call.id) && !repeatable {
                unknown.push(index);
            } else {
                pending.push(index);
            }
        }
        if !unknown.is_empty() {
            let tools = Arc::clone(self.tools);
            self.finish_unmade(round, unknown, |name| tools.outcome_unknown(name));
        }
        // What the lost owner made of this round counts against the budget.
        self.made = round
            .thought
            .tool_calls
            .iter()
            .filter(|call| call.observation.is_some())
            .map(ToolCallRecord::calls_made)
            .sum();
        let (pending, over) = self.skip_past_budget(round, pending);
        self.run_calls(round, pending).await?;
        over
    }

    /// Runs the calls of `round` at `indices`: approval first, then each is announced as
    /// started (durably before any call that may not be made twice, so an owner that takes
    /// the run over knows which calls may have had an effect), then the server's and the
    /// caller's.
    async fn run_calls(&mut self, round: &mut Round, indices: Vec<usize>) -> Result<(), Halt> {
        let declined = self.ask_approval(round, &indices).await?;
        let declined_at: std::collections::HashSet<usize> =
            declined.iter().map(|(at, _)| *at).collect();
        let thought = &round.thought;
        for index in &indices {
            self.results.recorder.announce(RunEvent::ToolStarted {
                thought_id: thought.id,
                position: thought.position,
                call: Box::new(thought.tool_calls[*index].clone()),
            });
        }
        let (client, server): (Vec<usize>, Vec<usize>) = indices
            .into_iter()
            .filter(|index| !declined_at.contains(index))
            .partition(|index| self.tools.is_client(&thought.tool_calls[*index].name));
        let unrepeatable = server
            .iter()
            .any(|index| !self.tools.is_idempotent(&thought.tool_calls[*index].name));
        if unrepeatable {
            or_cancel(self.cancel, self.results.recorder.settle()).await?;
            if self.results.recorder.events_failed() {
                // Not durable, or the run is no longer this process's: nothing goes out.
                return Err(Halt::Cancelled);
            }
            self.await_lease().await?;
        }
        for (index, reason) in declined {
            let name = round.thought.tool_calls[index].name.clone();
            let invocation = self.tools.declined(&name, &reason);
            self.results.record(round, index, invocation).await?;
        }
        let (children, server): (Vec<usize>, Vec<usize>) = server
            .into_iter()
            .partition(|index| self.tools.is_agent(&round.thought.tool_calls[*index].name));
        self.run_server_calls(round, server).await?;
        if let Some(family) = self.family {
            let share = self.children_share(children.len());
            let limits = ChildRound {
                family,
                cancel: self.cancel,
                draining: self.draining,
                limit: self.settings.tool_concurrency.max(1),
                share,
            };
            ChildCalls::run(&mut self.results, limits, round, children).await?;
        }
        self.run_client_calls(round, client).await?;
        self.results.recorder.announce_thought(&round.thought);
        Ok(())
    }

    /// Holds calls that may not be made twice until this process's lease has at least half
    /// its length left, so no peer can take the run over while they are out. A lease not
    /// renewed for two lengths fails the run (`lease_lost`) without making them.
    async fn await_lease(&self) -> Result<(), Halt> {
        let started = tokio::time::Instant::now();
        loop {
            let Some((left, whole)) = self.lease.left() else {
                return Ok(());
            };
            if left >= whole / 2 {
                return Ok(());
            }
            if started.elapsed() >= whole * 2 {
                return Err(Halt::failed(
                    "lease_lost",
                    "this replica could not renew its lease, so calls that may not be made \
                     twice were not made",
                ));
            }
            or_cancel(self.cancel, tokio::time::sleep(LEASE_CHECK_EVERY)).await?;
        }
    }

    /// Gives each call past `runner.max_tool_calls_per_round` its observation at once, in
    /// one write; returns how many calls are run. A round of thirty thousand calls then
    /// costs what writing them costs, not thirty thousand runs.
    fn skip_past_limit(&mut self, round: &mut Round) -> Result<usize, Halt> {
        let limit = self.settings.max_tool_calls_per_round.max(1);
        let total = round.thought.tool_calls.len();
        if total <= limit {
            return Ok(total);
        }
        let tools = Arc::clone(self.tools);
        self.finish_unmade(round, (limit..total).collect(), |name| {
            tools.not_run(name, limit)
        });
        Ok(limit)
    }

    /// The calls at `indices` the run's tool-call budget allows, in order; the others get
    /// their observation at once. The second value is what the round ends with: an
    /// exhausted budget when any call was held back.
    fn skip_past_budget(
        &mut self,
        round: &mut Round,
        mut indices: Vec<usize>,
    ) -> (Vec<usize>, Result<(), Halt>) {
        let made = self.spent.tool_calls.saturating_add(self.made);
        let (Some(left), Some(limit)) = (
            allowance::tool_calls_left(self.budget, made),
            self.budget.tool_calls,
        ) else {
            self.made = self.made.saturating_add(count(indices.len()));
            return (indices, Ok(()));
        };
        let allowed = usize::try_from(left).unwrap_or(usize::MAX);
        if indices.len() <= allowed {
            self.made = self.made.saturating_add(count(indices.len()));
            return (indices, Ok(()));
        }
        let held = indices.split_off(allowed);
        let tools = Arc::clone(self.tools);
        self.finish_unmade(round, held, |name| tools.over_budget(name, limit));
        self.made = self.made.saturating_add(left);
        (indices, Err(Halt::Exhausted(BudgetKind::ToolCalls)))
    }

    /// Gives the calls at `indices`, which are not made, the result `result` says, in one
    /// write, and counts each.
    fn finish_unmade(
        &mut self,
        round: &mut Round,
        indices: Vec<usize>,
        result: impl Fn(&str) -> Invocation,
    ) {
        let mut finished = Vec::with_capacity(indices.len());
        for index in indices {
            let name = round.thought.tool_calls[index].name.clone();
            let invocation = result(&name);
            self.results.metrics.tool_call(
                &invocation.provider,
                tool_label(&invocation.provider, &name),
                invocation.outcome,
                Duration::ZERO,
            );
            if let Some(call) = round.observe(index, invocation, Vec::new()) {
                finished.push(call);
            }
        }
        self.results
            .recorder
            .tools_finished(&round.thought, finished);
    }

    /// Waits for a decision on each call at `indices` that needs approval;
    /// returns the declined ones with their reasons. Calls of unknown tools need none: they
    /// fail without running.
    async fn ask_approval(
        &mut self,
        round: &Round,
        indices: &[usize],
    ) -> Result<Vec<(usize, String)>, Halt> {
        let gated: Vec<usize> = indices
            .iter()
            .copied()
            .filter(|index| {
                self.tools
                    .needs_approval(&round.thought.tool_calls[*index].name)
            })
            .collect();
        if gated.is_empty() {
            return Ok(Vec::new());
        }
        let calls: Vec<ToolCallRecord> = gated
            .iter()
            .map(|index| round.thought.tool_calls[*index].clone())
            .collect();
        let limit = self.settings.approval_timeout;
        let delivery = self
            .wait(Wait {
                awaited: Awaited::Approval,
                ids: calls.iter().map(|c| c.id.clone()).collect(),
                status: MessageStatus::WaitingApproval,
                announcement: RunEvent::ApprovalRequired {
                    thought_id: round.thought.id,
                    calls: calls.clone(),
                },
                limit,
                on_timeout: Halt::failed(
                    "approval_timeout",
                    format!(
                        "no decision on the tool calls was made within {}s",
                        limit.as_secs()
                    ),
                ),
            })
            .await?;
        let decisions: Vec<Decision> = match delivery {
            Delivery::Decisions(decisions) => decisions,
            Delivery::Outputs(_) => Vec::new(),
        };
        Ok(gated
            .into_iter()
            .zip(calls)
            .filter_map(|(index, call)| {
                let decision = decisions.iter().find(|d| d.tool_call_id == call.id);
                match decision {
                    Some(decision) if decision.approve => None,
                    Some(decision) => Some((index, decision.reason.clone())),
                    None => Some((index, "no decision was made".to_owned())),
                }
            })
            .collect())
    }

    async fn run_server_calls(
        &mut self,
        round: &mut Round,
        indices: Vec<usize>,
    ) -> Result<(), Halt> {
        let mut calls: Vec<(usize, ToolCallRecord)> = Vec::with_capacity(indices.len());
        for index in indices {
            let call = self.with_run_files(&round.thought.tool_calls[index]).await;
            calls.push((index, call));
        }
        let timeout = self.settings.tool_timeout;
        let tools = Arc::clone(self.tools);
        let (message, position) = (self.results.message.id, round.thought.position);
        let unrepeatable = calls
            .iter()
            .any(|(_, call)| !tools.is_idempotent(&call.name));
        let cancel = self.cancel.clone();
        let mut results = futures::stream::iter(calls)
            .map(|(index, call)| {
                let span = tool_span(&tools, &call);
                let key = call_key(message, position, &call.id);
                let stops = tools.is_idempotent(&call.name).then(|| cancel.clone());
                invoke(Arc::clone(&tools), index, call, timeout, key, stops).instrument(span)
            })
            .buffer_unordered(self.settings.tool_concurrency.max(1));
        loop {
            let next = match or_cancel(self.cancel, results.next()).await {
                Ok(next) => next,
                // A newer run stops this one: a call that must not repeat is let finish
                // (those that may are stopped at once), and its result kept.
                Err(_) if unrepeatable && self.mailbox.interruption().is_some() => {
                    results.next().await
                }
                Err(halt) => return Err(halt),
            };
            let Some(first) = next else { break };
            // Results that are ready as well are written with it: one write of the thought
            // for all of them, not one each.
            let mut ready = vec![first];
            while let Some(Some(more)) = results.next().now_or_never() {
                ready.push(more);
            }
            self.results.record_all(round, ready).await?;
        }
        match self.cancel.is_cancelled() {
            true => Err(Halt::Cancelled),
            false => Ok(()),
        }
    }

    /// What is left of the run's budget for each of `children` started at once: they
    /// share what this run has not spent (this round's calls counted as made).
    fn children_share(&self, children: usize) -> RunBudget {
        if self.budget.is_unlimited() {
            return self.budget.clone();
        }
        let mut spent = self.spent.clone();
        spent.tool_calls = spent.tool_calls.saturating_add(self.made);
        if let Some(clock) = self.results.clock.as_deref() {
            spent.seconds = clock.running().as_secs_f64();
        }
        let ways = u32::try_from(children).unwrap_or(u32::MAX);
        self.budget.left_for_children(&spent, ways)
    }

    /// The call as it is run: an argument that takes a file and names a file this run
    /// produced gets that file. The recorded call keeps the id the model wrote.
    async fn with_run_files(&self, call: &ToolCallRecord) -> ToolCallRecord {
        let fields = self.tools.file_fields(&call.name);
        if fields.is_empty() {
            return call.clone();
        }
        let Ok(serde_json::Value::Object(mut args)) = serde_json::from_str(&call.arguments) else {
            return call.clone();
        };
        for field in fields {
            let Some(id) = args.get(field).and_then(serde_json::Value::as_str) else {
                continue;
            };
            if let Some(file) = self
                .results
                .recorder
                .file_data_url(self.results.message.id, id)
                .await
            {
                args.insert(field.clone(), serde_json::Value::String(file));
            }
        }
        ToolCallRecord {
            arguments: serde_json::Value::Object(args).to_string(),
            ..call.clone()
        }
    }

    /// Hands the caller's calls to it and records what it sends back; calls whose
    /// arguments do not fit get their observation at once, without asking.
    async fn run_client_calls(
        &mut self,
        round: &mut Round,
        indices: Vec<usize>,
    ) -> Result<(), Halt> {
        let mut waiting = Vec::new();
        for index in indices {
            let call = round.thought.tool_calls[index].clone();
            match self.tools.check_client_call(&call.name, &call.arguments) {
                Ok(()) => waiting.push((index, call)),
                Err(invocation) => self.results.record(round, index, *invocation).await?,
            }
        }
        if waiting.is_empty() {
            return Ok(());
        }
        let calls: Vec<ToolCallRecord> = waiting.iter().map(|(_, call)| call.clone()).collect();
        let since = tokio::time::Instant::now();
        let outputs = self.wait_for_outputs(round, calls).await?;
        let waited = since.elapsed().as_secs_f64();
        for (index, call) in waiting {
            let output = outputs.iter().find(|o| o.tool_call_id == call.id).cloned();
            let (text, error) = output.map_or((String::new(), None), |o| {
                let limit = self.settings.tool_output_limit;
                (truncate_output(o.output, limit), Some(o.error))
            });
            let invocation = self.tools.client_result(&call.name, text, error, waited);
            self.results.record(round, index, invocation).await?;
        }
        Ok(())
    }

    /// Tells the caller what to run, and waits for the results until the run is cancelled
    /// or the client-tool timeout passes.
    async fn wait_for_outputs(
        &mut self,
        round: &Round,
        calls: Vec<ToolCallRecord>,
    ) -> Result<Vec<ClientOutput>, Halt> {
        let limit = self.settings.client_tool_timeout;
        let delivery = self
            .wait(Wait {
                awaited: Awaited::ToolOutputs,
                ids: calls.iter().map(|c| c.id.clone()).collect(),
                status: MessageStatus::WaitingToolOutputs,
                announcement: RunEvent::ToolCallsRequired {
                    thought_id: round.thought.id,
                    calls,
                },
                limit,
                on_timeout: Halt::failed(
                    "client_tool_timeout",
                    format!("no tool outputs were submitted within {}s", limit.as_secs()),
                ),
            })
            .await?;
        Ok(match delivery {
            Delivery::Outputs(outputs) => outputs,
            Delivery::Decisions(_) => Vec::new(),
        })
    }

    /// Keeps `delivery` in the store for the process that goes on with this run.
    async fn keep_for_next_owner(&mut self, delivery: Delivery) {
        let command = match delivery {
            Delivery::Outputs(outputs) => crate::domain::RunCommand::Outputs(outputs),
            Delivery::Decisions(decisions) => crate::domain::RunCommand::Decisions(decisions),
        };
        let message = self.results.message.id;
        if let Err(err) = self
            .results
            .recorder
            .keep_for_next_owner(message, &command)
            .await
        {
            tracing::error!(error = %err, "an answer that came as the run was handed over could not be kept for its next owner");
        }
    }

    /// The one wait of a run on the outside: posts the calls in the mailbox, marks the
    /// message waiting, announces the calls, and waits for the delivery until the run is
    /// cancelled or the wait's limit passes.
    async fn wait(&mut self, wait: Wait) -> Result<Delivery, Halt> {
        let mut expected = self.mailbox.expect(wait.awaited, wait.ids);
        // Answered before the wait began (a run taken over, whose caller answered while it
        // changed hands): nothing is asked again.
        if let Some(Some(delivery)) = expected.delivered().now_or_never() {
            return Ok(delivery);
        }
        self.results.set_status(wait.status)?;
        self.results.recorder.announce(wait.announcement);
        let limit = wait.limit.saturating_sub(std::mem::take(&mut self.waited));
        let outcome = tokio::select! {
            biased;
            _ = self.cancel.cancelled() => Err(Halt::Cancelled),
            // The run waits as well on the process that goes on with it.
            _ = self.draining.cancelled() => Err(Halt::HandedOver),
            _ = tokio::time::sleep(limit) => Err(wait.on_timeout),
            delivery = expected.delivered() => delivery.ok_or(Halt::Cancelled),
        };
        if matches!(outcome, Err(Halt::HandedOver)) {
            // An answer that came as the run was handed over goes with it: the caller was
            // told it was taken.
            if let Some(Some(delivery)) = expected.delivered().now_or_never() {
                self.keep_for_next_owner(delivery).await;
            }
        }
        drop(expected);
        let delivery = outcome?;
        self.results.set_status(MessageStatus::Running)?;
        Ok(delivery)
    }
}

/// The span of one tool call: `execute_tool {tool}` in the GenAI semantic conventions.
fn tool_span(tools: &ToolSet, call: &ToolCallRecord) -> tracing::Span {
    let tool_type = match tools.kind_of(&call.name) {
        Some(ProviderKind::Knowledge) => "datastore",
        Some(ProviderKind::Client) => "function",
        Some(ProviderKind::Builtin | ProviderKind::Api | ProviderKind::Mcp) | None => "extension",
    };
    tracing::info_span!(
        "execute_tool",
        "otel.name" = %format_args!("execute_tool {}", call.name),
        gen_ai.operation.name = "execute_tool",
        gen_ai.tool.name = %call.name,
        gen_ai.tool.call.id = %call.id,
        gen_ai.tool.type = tool_type,
        error.type = field::Empty,
        "otel.status_description" = field::Empty,
    )
}

/// Runs one call in the current (tool) span, marking the span when the call failed.
/// Makes one call; one given `stops` (a call that may be repeated) ends as interrupted
/// when that token fires first.
async fn invoke(
    tools: Arc<ToolSet>,
    index: usize,
    call: ToolCallRecord,
    timeout: Duration,
    key: String,
    stops: Option<CancellationToken>,
) -> (usize, Invocation) {
    let made = tools.invoke_keyed(&call.name, &call.arguments, timeout, key);
    let invocation = match stops {
        Some(stops) => tokio::select! {
            biased;
            () = stops.cancelled() => tools.interrupted(&call.name),
            invocation = made => invocation,
        },
        None => made.await,
    };
    if let Some(error) = &invocation.meta.error {
        let span = tracing::Span::current();
        span.record("error.type", invocation.outcome.as_str());
        span.record("otel.status_description", error.as_str());
    }
    (index, invocation)
}

/// The `Idempotency-Key` of call `call_id` of round `position` of `message`: the same
/// whichever replica makes the call, and however often.
pub fn call_key(message: crate::domain::MessageId, position: u32, call_id: &str) -> String {
    use sha2::Digest as _;
    let digest = sha2::Sha256::digest(format!("{message}:{position}:{call_id}"));
    digest[..16]
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

/// A count of calls as the budget counts them.
fn count(calls: usize) -> u32 {
    u32::try_from(calls).unwrap_or(u32::MAX)
}
