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
use super::halt::{or_cancel, Halt};
use super::recorder::Recorder;
use super::retry::{self, Attempts, Next};
use super::spans::{chat_span, record_json};
use super::state::{Round, RunState, Tally};
use crate::domain::{RunEvent, RunFailure, TokenUsage};
use crate::llm::{ChatChunk, ChatRequest, ChatStream, LlmError, ResolvedModel, TurnEnd};
use crate::runner::settings::RunnerSettings;
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
            failure: RunFailure {
                code: err.code().to_owned(),
                message: err.to_string(),
            },
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
        let mut tally = Tally::default();
        let span = chat_span(model, round.thought.position);
        if self.settings.trace_content {
            record_json(&span, "gen_ai.input.messages", &request.messages);
        }
        let outcome = self
            .read_turn(model, &request, reader.as_mut(), round, &mut tally)
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
        self.show(round, &held_back, reader.shows_answer());
        if self.settings.trace_content {
            let output = serde_json::json!([{"role": "assistant", "content": tally.written, "tool_calls": end.tool_calls}]);
            record_json(&span, "gen_ai.output.messages", &output);
        }
        Ok(reader.finish(end))
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

    async fn read_turn(
        &mut self,
        model: &ResolvedModel,
        request: &ChatRequest,
        reader: &mut dyn TurnReader,
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
                None => or_cancel(self.work, stream.next()).await?,
            };
            match item {
                Some(Ok(ChatChunk::Text(mut text))) => {
                    next = coalesce(&mut stream, &mut text);
                    tally.written.push_str(&text);
                    let visible = reader.push(&text);
                    self.show(round, &visible, reader.shows_answer());
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
    loop {
        match stream.next().now_or_never() {
            Some(Some(Ok(ChatChunk::Text(more)))) => text.push_str(&more),
            Some(other) => return Some(other),
            None => return None,
        }
    }
}
