//! A round's model call: a slot of its provider, the streamed turn shown as answer deltas,
//! its usage and telemetry, retries and fallbacks until one attempt answers.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::{FutureExt, StreamExt};
use tokio::sync::OwnedSemaphorePermit;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::agent::Agent;
use super::deltas::Deltas;
use super::forming::{Formed, Forming};
use super::halt::{or_cancel, Halt};
use super::recorder::Recorder;
use super::retry::{self, Attempts, Next};
use super::spans::{chat_span, record_json};
use super::state::{Round, RunState, Tally};
use crate::domain::{CallDelta, RunEvent, RunFailure, StrategyKind, TokenUsage};
use crate::llm::{ChatChunk, ChatRequest, ChatStream, LlmError, ResolvedModel, TurnEnd};
use crate::runner::settings::RunnerSettings;
use crate::runner::spec::ReasoningMode;
use crate::runner::strategy::{ModelStep, TurnReader};
use crate::telemetry::{LlmCall, Metrics};
use crate::tools::OfferedTool;

/// Why one attempt at a model call failed.
enum Failure {
    /// The run stops (cancelled, or a failure that is not the model's).
    Stop(Halt),
    /// The model call failed; it may be tried again.
    Llm(LlmError),
}

impl From<Halt> for Failure {
    fn from(halt: Halt) -> Self {
        Failure::Stop(halt)
    }
}

impl From<LlmError> for Failure {
    fn from(err: LlmError) -> Self {
        Failure::Llm(err)
    }
}

/// What a round's model call needs of its run.
pub(super) struct ModelCall<'a> {
    /// The model, its fallbacks and the strategy that reads its turns.
    pub agent: &'a Agent,
    /// Whether prompts and answers go on spans.
    pub settings: &'a RunnerSettings,
    /// Stops the call.
    pub work: &'a CancellationToken,
    /// Where calls, retries and the first delta are counted.
    pub metrics: &'a Metrics,
    /// Where retries and deltas are announced.
    pub recorder: &'a mut Recorder,
    /// The run's state: usage, and the text the user has seen.
    pub state: &'a mut RunState,
    /// The answer as it is sent.
    pub deltas: &'a mut Deltas,
}

impl ModelCall<'_> {
    /// Calls the model, streaming visible text as answer deltas, and returns its decision.
    /// A call that fails before the user saw any of its text is tried again as its
    /// provider's retry policy says, then by the fallback models; each retry is announced.
    pub(super) async fn call(
        &mut self,
        request: &ChatRequest,
        tools: &[OfferedTool],
        round: &mut Round,
    ) -> Result<ModelStep, Halt> {
        let mut attempts = Attempts::new(self.agent.candidates().map(|m| m.policy.retry).collect());
        loop {
            let model = self.agent.candidate(attempts.candidate()).clone();
            attempts.begin();
            let err = match self.attempt(&model, request, tools, round).await {
                Ok(step) => return Ok(step),
                Err(Failure::Stop(halt)) => return Err(halt),
                Err(Failure::Llm(err)) => err,
            };
            // Text the user saw is never taken back, so a failure after it is final.
            if !err.is_retryable() || round.has_shown() {
                return Err(err.into());
            }
            match attempts.after(&err, retry::full_jitter) {
                Next::Retry { model, delay } => {
                    self.metrics.llm_retry(
                        &self.agent.candidate(attempts.candidate()).provider,
                        err.code(),
                    );
                    self.announce_retry(round, attempts.made() + 1, delay, &err, model);
                    or_cancel(self.work, tokio::time::sleep(delay)).await?;
                }
                Next::GiveUp => {
                    let made = attempts.made();
                    tracing::warn!(error = %err, attempts = made, "LLM call failed");
                    let plural = if made == 1 { "" } else { "s" };
                    return Err(Halt::failed(
                        err.code(),
                        format!("{err} (after {made} attempt{plural})"),
                    ));
                }
            }
        }
    }

    fn announce_retry(
        &mut self,
        round: &Round,
        attempt: u32,
        delay: Duration,
        err: &LlmError,
        candidate: usize,
    ) {
        let next = self.agent.candidate(candidate);
        tracing::info!(error = %err, attempt, ?delay, provider = %next.provider, model = %next.info.name, "retrying the LLM call");
        self.recorder.announce(RunEvent::Retry {
            position: round.thought.position,
            attempt,
            delay: delay.as_secs_f64(),
            failure: Box::new(RunFailure {
                code: err.code().to_owned(),
                message: err.to_string(),
            }),
            provider: next.provider.clone(),
            model: next.info.name.clone(),
        });
    }

    /// One attempt on `model`: a slot of its provider, the streamed turn, its usage.
    async fn attempt(
        &mut self,
        model: &ResolvedModel,
        request: &ChatRequest,
        tools: &[OfferedTool],
        round: &mut Round,
    ) -> Result<ModelStep, Failure> {
        let started = Instant::now();
        let _slot = self.slot(model).await?;
        let queued = started.elapsed();
        round.served_by(&model.provider, &model.info.name);
        let request = for_model(request, &model.info.name);
        let mut reader = self.agent.strategy.reader(tools);
        let mut forming = Forming::new(self.settings.argument_deltas);
        let mut tally = Tally::default();
        let span = chat_span(model, round.thought.position);
        if self.settings.trace_content {
            record_json(&span, "gen_ai.input.messages", &request.messages);
        }
        let outcome = self
            .read_turn(
                model,
                &request,
                reader.as_mut(),
                &mut forming,
                round,
                &mut tally,
            )
            .instrument(span.clone())
            .await;
        if let Ok(end) = &outcome {
            tally.add_calls(end);
        }
        self.state.add_written(tally.written.len());
        if tally.counts() {
            model.info.tokenizer.load().await;
        }
        let tokens = tally.tokens(&request, model.info.tokenizer);
        if let Some(tokens) = tokens {
            let mut usage = model
                .info
                .pricing
                .usage(tokens, started.elapsed().as_secs_f64());
            usage.queue_time = queued.as_secs_f64();
            self.state.add_usage(round, usage);
        }
        self.observe_call(model, &span, started.elapsed() - queued, tokens, &outcome);
        let mut end = outcome?;
        round.keep_reasoning(std::mem::take(&mut end.reasoning));
        let held_back = reader.flush();
        self.reason(round, reader.reasoning());
        self.show(round, &held_back, reader.shows_answer());
        self.take_forming(reader.as_mut(), &mut forming, round);
        if self.settings.trace_content {
            let output = serde_json::json!([{"role": "assistant", "content": tally.written, "tool_calls": end.tool_calls}]);
            record_json(&span, "gen_ai.output.messages", &output);
        }
        let step = reader.finish(end);
        // Function calls are streamed as the provider sends them, which is exactly their
        // arguments; a ReAct action's input as the model wrote it.
        let whole = self.agent.strategy.kind() == StrategyKind::FunctionCalling;
        let formed = forming.finish(&step.calls, whole, Instant::now());
        self.announce_formed(round, formed);
        Ok(step)
    }

    /// Announces the pieces of forming calls `reader` read from the model's text.
    fn take_forming(&mut self, reader: &mut dyn TurnReader, forming: &mut Forming, round: &Round) {
        let pieces = reader.forming();
        if pieces.is_empty() {
            return;
        }
        let now = Instant::now();
        let formed: Vec<Formed> = pieces
            .into_iter()
            .filter_map(|piece| forming.push(piece, now))
            .collect();
        self.announce_formed(round, formed);
    }

    /// Announces forming calls' deltas as the round's.
    fn announce_formed(&mut self, round: &Round, formed: Vec<Formed>) {
        for delta in formed {
            self.recorder
                .announce(RunEvent::ToolCallDelta(Box::new(CallDelta {
                    thought_id: round.thought.id,
                    position: round.thought.position,
                    tool_call_id: delta.id,
                    index: delta.index,
                    name: delta.name,
                    arguments_delta: delta.text,
                    truncated: delta.truncated,
                })));
        }
    }

    /// Records one LLM call on its span and in the GenAI client metrics.
    fn observe_call(
        &self,
        model: &ResolvedModel,
        span: &tracing::Span,
        duration: Duration,
        tokens: Option<TokenUsage>,
        outcome: &Result<TurnEnd, Failure>,
    ) {
        if let Some(tokens) = tokens {
            span.record("gen_ai.usage.input_tokens", tokens.prompt_tokens);
            span.record("gen_ai.usage.output_tokens", tokens.completion_tokens);
        }
        let error = match outcome {
            Ok(end) => {
                if let Some(reason) = &end.finish_reason {
                    span.record("gen_ai.response.finish_reasons", reason.as_str());
                }
                None
            }
            Err(Failure::Llm(err)) => {
                span.record("otel.status_description", err.to_string().as_str());
                Some(err.code())
            }
            Err(Failure::Stop(Halt::Cancelled)) => Some("cancelled"),
            Err(Failure::Stop(Halt::HandedOver)) => Some("handed_over"),
            Err(Failure::Stop(Halt::Exhausted(_))) => Some("budget_exhausted"),
            Err(Failure::Stop(Halt::Failed(failure))) => {
                span.record("otel.status_description", failure.message.as_str());
                Some("run_failed")
            }
        };
        if let Some(error) = error {
            span.record("error.type", error);
        }
        self.metrics.llm_call(&LlmCall {
            api: model.api,
            provider: &model.provider,
            model: model.label(),
            duration,
            tokens: tokens.map(|t| (t.prompt_tokens, t.completion_tokens)),
            error,
        });
    }

    /// A slot of the model's provider, when it limits calls in flight: waits for one up to
    /// the queue timeout, after which the call counts as a retryable failure.
    async fn slot(&self, model: &ResolvedModel) -> Result<Option<OwnedSemaphorePermit>, Failure> {
        let Some(slots) = &model.policy.slots else {
            return Ok(None);
        };
        let limit = model.policy.queue_timeout;
        let wait = tokio::time::timeout(limit, Arc::clone(slots).acquire_owned());
        match or_cancel(self.work, wait).await? {
            Ok(Ok(permit)) => Ok(Some(permit)),
            // A closed semaphore limits nothing any more.
            Ok(Err(_closed)) => Ok(None),
            Err(_elapsed) => Err(Failure::Llm(LlmError::Busy {
                provider: model.provider.clone(),
                waited: limit,
            })),
        }
    }

    /// Reads the model's turn: its text shown as it comes, the arguments of its calls
    /// announced as they form (each call's at its pace), until the turn is complete.
    async fn read_turn(
        &mut self,
        model: &ResolvedModel,
        request: &ChatRequest,
        reader: &mut dyn TurnReader,
        forming: &mut Forming,
        round: &mut Round,
        tally: &mut Tally,
    ) -> Result<TurnEnd, Failure> {
        let client = Arc::clone(&model.client);
        let mut stream = or_cancel(self.work, client.stream(request)).await??;
        tally.answered = true;
        let mut next = None;
        loop {
            let item = match next.take() {
                Some(item) => item,
                None => match forming.next_due() {
                    None => or_cancel(self.work, stream.next()).await?,
                    Some(due) => {
                        let read = tokio::time::timeout_at(due.into(), stream.next());
                        match or_cancel(self.work, read).await? {
                            Ok(item) => item,
                            Err(_due) => {
                                let formed = forming.due(Instant::now());
                                self.announce_formed(round, formed);
                                continue;
                            }
                        }
                    }
                },
            };
            match item {
                Some(Ok(ChatChunk::Text(mut text))) => {
                    next = coalesce(&mut stream, &mut text);
                    tally.written.push_str(&text);
                    let visible = reader.push(&text);
                    self.reason(round, reader.reasoning());
                    self.show(round, &visible, reader.shows_answer());
                    self.take_forming(reader, forming, round);
                }
                Some(Ok(ChatChunk::Reasoning(mut text))) => {
                    next = gather_reasoning(&mut stream, &mut text);
                    self.reason(round, text);
                }
                Some(Ok(ChatChunk::Arguments(piece))) => {
                    let formed = forming.push(piece, Instant::now());
                    self.announce_formed(round, formed.into_iter().collect());
                }
                Some(Ok(ChatChunk::Usage(usage))) => tally.reported = Some(usage),
                Some(Ok(ChatChunk::Finished(end))) => return Ok(end),
                Some(Err(err)) => return Err(err.into()),
                None => {
                    return Err(LlmError::Stream {
                        message: "the stream ended without a finish".to_owned(),
                    }
                    .into())
                }
            }
        }
    }

    /// Shows and keeps the model's reasoning as its agent asks: kept on the round's thought
    /// and announced like any event, sent to live followers only, or neither.
    fn reason(&mut self, round: &mut Round, text: String) {
        if text.is_empty() {
            return;
        }
        let keep = match self.agent.reasoning {
            ReasoningMode::Off => return,
            ReasoningMode::Stream => false,
            ReasoningMode::Keep => true,
        };
        if keep {
            round.thought.reasoning.push_str(&text);
        }
        let event = RunEvent::ReasoningDelta {
            thought_id: round.thought.id,
            position: round.thought.position,
            text,
        };
        match keep {
            true => self.recorder.announce(event),
            false => self.recorder.flash(event),
        }
    }

    /// Shows `text` the model wrote, as far as the user is to see it.
    fn show(&mut self, round: &mut Round, text: &str, answer: bool) {
        if let Some(text) = self.state.show(round, text, answer) {
            self.deltas.announce(text, self.recorder, self.metrics);
        }
    }
}

/// `request` for the model called `name`: the same prompt, sent under the fallback's name.
fn for_model<'a>(request: &'a ChatRequest, name: &str) -> Cow<'a, ChatRequest> {
    if request.model == name {
        Cow::Borrowed(request)
    } else {
        Cow::Owned(ChatRequest {
            model: name.to_owned(),
            ..request.clone()
        })
    }
}

/// Appends to `text` every text chunk that has already arrived, so a burst of chunks
/// becomes one delta event (and one stored record) instead of many. Returns the first
/// item that is not ready text, if one was taken.
fn coalesce(
    stream: &mut ChatStream,
    text: &mut String,
) -> Option<Option<Result<ChatChunk, LlmError>>> {
    gather(stream, text, answer_text)
}

/// Appends to `text` every reasoning chunk that has already arrived, as [`coalesce`] does
/// for answer text.
fn gather_reasoning(
    stream: &mut ChatStream,
    text: &mut String,
) -> Option<Option<Result<ChatChunk, LlmError>>> {
    gather(stream, text, reasoning_text)
}

/// Appends to `text` the text `pick` finds in each chunk that has already arrived, until
/// one it does not take, which is returned.
fn gather(
    stream: &mut ChatStream,
    text: &mut String,
    pick: fn(&ChatChunk) -> Option<&str>,
) -> Option<Option<Result<ChatChunk, LlmError>>> {
    loop {
        match stream.next().now_or_never() {
            Some(Some(Ok(chunk))) => match pick(&chunk) {
                Some(more) => text.push_str(more),
                None => return Some(Some(Ok(chunk))),
            },
            Some(other) => return Some(other),
            None => return None,
        }
    }
}

fn answer_text(chunk: &ChatChunk) -> Option<&str> {
    match chunk {
        ChatChunk::Text(text) => Some(text),
        ChatChunk::Arguments(_)
        | ChatChunk::Reasoning(_)
        | ChatChunk::Usage(_)
        | ChatChunk::Finished(_) => None,
    }
}

fn reasoning_text(chunk: &ChatChunk) -> Option<&str> {
    match chunk {
        ChatChunk::Reasoning(text) => Some(text),
        ChatChunk::Arguments(_)
        | ChatChunk::Text(_)
        | ChatChunk::Usage(_)
        | ChatChunk::Finished(_) => None,
    }
}
