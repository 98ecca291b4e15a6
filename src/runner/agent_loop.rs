//! The single agent loop: LLM → tool calls → observations → LLM … → answer.
//!
//! Per round: write an empty thought, build the prompt, stream the model's turn as answer
//! deltas, store the thought with its calls, run the calls concurrently, store each
//! observation, and go again until the model calls no tool. Every record is flushed before
//! the event that announces it is sent, and the last event is always `MessageEnd` or
//! `Error`.

use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use futures::{FutureExt, StreamExt};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::budget;
use super::emitter::Emitter;
use super::live::LiveRuns;
use super::strategy::{
    FinalAnswer, ModelStep, PastTurn, PromptContext, RoundRecord, Strategy, TurnReader,
};
use super::{InputImage, RunSpec, RunnerSettings};
use crate::domain::{
    FileId, FileRecord, FinishReason, Message, MessageStatus, RunFailure, Thought, TokenUsage,
    ToolCallRecord, Usage,
};
use crate::events::{HistoryReport, RunEvent};
use crate::llm::{
    ChatChunk, ChatRequest, ChatStream, ContentPart, Feature, LlmError, ResolvedModel,
    ToolCallRequest, TurnEnd,
};
use crate::store::{Store, StoreError};
use crate::tools::engine::OfferedTool;
use crate::tools::{FileContent, ToolFile, ToolSet};

/// Why the loop stopped early.
pub(super) enum Halt {
    /// The run's token fired (caller, client gone, or shutdown).
    Cancelled,
    /// Something failed; recorded on the message.
    Failed(RunFailure),
}

impl From<StoreError> for Halt {
    fn from(err: StoreError) -> Self {
        tracing::error!(error = %err, "store failure during a run");
        Halt::Failed(RunFailure {
            code: "store_error".to_owned(),
            message: err.to_string(),
        })
    }
}

impl From<LlmError> for Halt {
    fn from(err: LlmError) -> Self {
        tracing::warn!(error = %err, "LLM call failed");
        Halt::Failed(RunFailure {
            code: err.code().to_owned(),
            message: err.to_string(),
        })
    }
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

/// What one model call produced, for its usage record.
#[derive(Default)]
struct Tally {
    /// The provider accepted the request and began to answer, so its tokens count.
    answered: bool,
    /// Counts the provider reported.
    reported: Option<TokenUsage>,
    /// Everything the model wrote, hidden parts and tool calls included.
    written: String,
}

impl Tally {
    /// Adds the turn's tool calls to what the model wrote.
    fn calls(&mut self, end: &TurnEnd) {
        for call in &end.tool_calls {
            self.written.push_str(&call.name);
            self.written.push_str(&call.arguments);
        }
    }
}

/// One run in progress. Owned by its task.
pub(super) struct AgentRun {
    pub store: Store,
    pub spec: RunSpec,
    pub message: Message,
    pub model: ResolvedModel,
    pub strategy: Box<dyn Strategy>,
    pub tools: Arc<ToolSet>,
    pub settings: RunnerSettings,
    pub emitter: Emitter,
    /// Where the run is registered while it is in progress.
    pub live: Arc<LiveRuns>,
    pub cancel: CancellationToken,
    pub shutdown: CancellationToken,
    pub started: Instant,
    pub usage: Usage,
    /// Earlier turns of the conversation.
    pub history: Vec<PastTurn>,
    /// The round being worked on, so a failure can still store what it had.
    pub current: Option<Thought>,
    /// Every answer delta sent so far.
    pub streamed: String,
    /// The final answer, once a turn gave one explicitly.
    pub answer: Option<String>,
    /// Where `SubmitToolOutputs` finds the client calls this run waits for.
    pub client_slot: super::client_tools::PendingSlot,
    /// When the current wait for client outputs began.
    pub waiting_since: Option<tokio::time::Instant>,
}

fn overflow(err: budget::Overflow) -> Halt {
    Halt::Failed(RunFailure {
        code: "context_overflow".to_owned(),
        message: err.to_string(),
    })
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

/// Awaits `fut` unless `cancel` fires first.
async fn or_cancel<T>(cancel: &CancellationToken, fut: impl Future<Output = T>) -> Result<T, Halt> {
    tokio::select! {
        biased;
        _ = cancel.cancelled() => Err(Halt::Cancelled),
        out = fut => Ok(out),
    }
}

impl AgentRun {
    /// Runs the loop to its end and records the outcome.
    pub async fn drive(mut self) {
        let outcome = self.run_rounds().await;
        let (live, id) = (Arc::clone(&self.live), self.message.id);
        if let Err(err) = self.finish(outcome).await {
            tracing::error!(error = %err, "could not record the end of a run");
        }
        live.remove(id);
    }

    async fn run_rounds(&mut self) -> Result<FinishReason, Halt> {
        let mut context = self.prompt_context();
        let offered = self.tools.offered();
        let max_rounds = self
            .spec
            .agent
            .max_iteration
            .min(super::MAX_ITERATION_LIMIT)
            + 1;
        let first_tools: &[OfferedTool] = if max_rounds == 1 { &[] } else { &offered };
        let strategy = &self.strategy;
        let fitted = budget::fit(&mut context, &self.model.info, |c| {
            strategy.build_request(c, &[], first_tools)
        });
        let trim = fitted.as_ref().map(|(_, trim)| *trim).unwrap_or_default();
        self.emitter.emit(RunEvent::Started {
            strategy: self.strategy.kind(),
            provider: self.model.provider.clone(),
            model: self.model.info.name.clone(),
            max_iteration: self.spec.agent.max_iteration,
            history: HistoryReport {
                kept_turns: u32::try_from(context.history.len()).unwrap_or(u32::MAX),
                dropped_turns: trim.turns,
                dropped_tokens: trim.tokens,
            },
        });
        fitted.map_err(overflow)?;
        log_trim(trim);
        let mut rounds = Vec::new();
        for position in 1..=max_rounds {
            let tools: &[OfferedTool] = if position == max_rounds {
                &[]
            } else {
                &offered
            };
            let span = tracing::info_span!("round", position);
            let last = position == max_rounds;
            let end = self
                .round(position, last, &mut context, &mut rounds, tools)
                .instrument(span)
                .await?;
            match end {
                RoundEnd::Continue => continue,
                RoundEnd::Answered => return Ok(FinishReason::Stop),
                RoundEnd::LimitReached => return Ok(FinishReason::MaxIterations),
            }
        }
        Ok(FinishReason::MaxIterations)
    }

    fn prompt_context(&self) -> PromptContext {
        let model = &self.spec.agent.model;
        PromptContext {
            model: model.name.clone(),
            instruction: self.spec.filled_instruction(),
            history: self.history.clone(),
            query: self.spec.query.clone(),
            parameters: model.parameters.clone(),
            stop: model.stop.clone(),
            user: self.spec.user.clone(),
            files: self.image_parts(),
        }
    }

    /// The query's images for a model that can see them; others get the text alone.
    fn image_parts(&self) -> Vec<ContentPart> {
        if self.spec.files.is_empty() {
            return Vec::new();
        }
        if !self.model.info.has(Feature::Vision) {
            tracing::info!(
                files = self.spec.files.len(),
                model = %self.model.info.name,
                "the model has no vision feature; the query's images are left out"
            );
            return Vec::new();
        }
        self.spec
            .files
            .iter()
            .map(InputImage::content_part)
            .collect()
    }

    async fn round(
        &mut self,
        position: u32,
        last: bool,
        context: &mut PromptContext,
        rounds: &mut Vec<RoundRecord>,
        tools: &[OfferedTool],
    ) -> Result<RoundEnd, Halt> {
        let thought = Thought::begin(self.message.id, position);
        self.store.put_thought(&self.spec.tenant, &thought)?;
        self.current = Some(thought.clone());
        self.emitter.emit(RunEvent::Thought(Box::new(thought)));

        let strategy = &self.strategy;
        let (request, trim) = budget::fit(context, &self.model.info, |c| {
            strategy.build_request(c, rounds, tools)
        })
        .map_err(overflow)?;
        log_trim(trim);
        self.message.iterations = position;
        let step = self.call_model(&request, tools).await?;
        let calls = step.calls.clone();
        self.record_turn(step)?;
        if calls.is_empty() {
            self.current = None;
            return Ok(RoundEnd::Answered);
        }
        // Only the last round ends on a tool call. Earlier, a call of a tool the agent does
        // not offer (some models call tools they were never given) is an unknown tool: its
        // observation says so and the loop goes on.
        if last {
            self.current = None;
            return Ok(RoundEnd::LimitReached);
        }
        let observations = self.run_tools().await?;
        let text = self
            .current
            .as_ref()
            .map(|t| t.thought.clone())
            .unwrap_or_default();
        rounds.push(RoundRecord {
            text,
            calls: calls.into_iter().zip(observations).collect(),
        });
        self.current = None;
        Ok(RoundEnd::Continue)
    }

    /// Calls the model, streaming visible text as answer deltas, and returns its decision.
    /// The round's usage is recorded whatever the outcome, once the model began to answer.
    async fn call_model(
        &mut self,
        request: &ChatRequest,
        tools: &[OfferedTool],
    ) -> Result<ModelStep, Halt> {
        let started = Instant::now();
        let mut reader = self.strategy.reader(tools);
        let mut tally = Tally::default();
        let streaming = self.model.info.has(Feature::StreamToolCall) || request.tools.is_empty();
        let span = tracing::info_span!("llm", model = %request.model, streaming);
        let outcome = if streaming {
            self.read_stream(request, reader.as_mut(), &mut tally)
                .instrument(span)
                .await
        } else {
            self.read_whole(request, reader.as_mut(), &mut tally)
                .instrument(span)
                .await
        };
        if let Ok(end) = &outcome {
            tally.calls(end);
        }
        self.record_usage(request, &tally, started);
        let end = outcome?;
        let held_back = reader.flush();
        self.stream_text(held_back)?;
        Ok(reader.finish(end))
    }

    /// Adds a round's usage to the run and its thought: as the provider reported it, or
    /// counted with the model's tokenizer when it reported nothing.
    fn record_usage(&mut self, request: &ChatRequest, tally: &Tally, started: Instant) {
        if !tally.answered {
            return;
        }
        let tokens = tally.reported.unwrap_or_else(|| {
            let tokenizer = self.model.info.tokenizer;
            TokenUsage::estimated(
                tokenizer.count_request(request) as u64,
                tokenizer.count_text(&tally.written) as u64,
            )
        });
        let usage = self
            .model
            .info
            .pricing
            .usage(tokens, started.elapsed().as_secs_f64());
        self.usage.add(&usage);
        if let Some(thought) = self.current.as_mut() {
            thought.usage = Some(usage);
        }
    }

    async fn read_whole(
        &mut self,
        request: &ChatRequest,
        reader: &mut dyn TurnReader,
        tally: &mut Tally,
    ) -> Result<TurnEnd, Halt> {
        let client = Arc::clone(&self.model.client);
        let turn = or_cancel(&self.cancel, client.complete(request)).await??;
        tally.answered = true;
        tally.reported = turn.usage;
        tally.written.push_str(&turn.text);
        self.show(reader, &turn.text)?;
        Ok(turn.end)
    }

    async fn read_stream(
        &mut self,
        request: &ChatRequest,
        reader: &mut dyn TurnReader,
        tally: &mut Tally,
    ) -> Result<TurnEnd, Halt> {
        let client = Arc::clone(&self.model.client);
        let mut stream = or_cancel(&self.cancel, client.stream(request)).await??;
        tally.answered = true;
        let mut next = None;
        loop {
            let item = match next.take() {
                Some(item) => item,
                None => or_cancel(&self.cancel, stream.next()).await?,
            };
            match item {
                Some(Ok(ChatChunk::Text(mut text))) => {
                    next = coalesce(&mut stream, &mut text);
                    tally.written.push_str(&text);
                    self.show(reader, &text)?;
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

    /// Streams what the reader lets the user see of `text`.
    fn show(&mut self, reader: &mut dyn TurnReader, text: &str) -> Result<(), Halt> {
        let visible = reader.push(text);
        self.stream_text(visible)
    }

    /// Sends visible text as a delta and keeps it as the round's text so far. A round's
    /// first piece goes on a new line after earlier rounds' text.
    fn stream_text(&mut self, visible: String) -> Result<(), Halt> {
        if visible.is_empty() {
            return Ok(());
        }
        let first_of_round = self.current.as_ref().is_some_and(|t| t.answer.is_empty());
        if let Some(thought) = self.current.as_mut() {
            thought.thought.push_str(&visible);
            thought.answer.push_str(&visible);
        }
        self.send_delta(visible, first_of_round)
    }

    fn send_delta(&mut self, text: String, new_line: bool) -> Result<(), Halt> {
        let separate = new_line && !self.streamed.is_empty() && !self.streamed.ends_with('\n');
        let piece = if separate { format!("\n{text}") } else { text };
        self.streamed.push_str(&piece);
        self.emitter.emit(RunEvent::AnswerDelta { text: piece });
        Ok(())
    }

    /// Takes a turn's explicit answer, sending it if the user has not seen it yet.
    fn accept_answer(&mut self, answer: FinalAnswer) -> Result<(), Halt> {
        if !answer.streamed && !answer.text.is_empty() {
            self.send_delta(answer.text.clone(), true)?;
        }
        self.answer = Some(answer.text);
        Ok(())
    }

    /// Stores the round's text and calls, then announces them.
    fn record_turn(&mut self, step: ModelStep) -> Result<(), Halt> {
        if let Some(answer) = step.final_answer.clone() {
            self.accept_answer(answer)?;
        }
        let answer_is_stream = self.strategy.streamed_text_is_answer();
        let Some(thought) = self.current.as_mut() else {
            return Ok(());
        };
        thought.thought = step.thought;
        match step.final_answer {
            Some(answer) => thought.answer = answer.text,
            None if !answer_is_stream => thought.answer.clear(),
            None => {}
        }
        thought.tool_calls = step
            .calls
            .iter()
            .map(|call| ToolCallRecord {
                id: call.id.clone(),
                name: call.name.clone(),
                provider: self
                    .tools
                    .provider_of(&call.name)
                    .unwrap_or_default()
                    .to_owned(),
                arguments: call.arguments.clone(),
                observation: None,
                meta: None,
            })
            .collect();
        let snapshot = thought.clone();
        self.store.put_thought(&self.spec.tenant, &snapshot)?;
        self.emitter.emit(RunEvent::Thought(Box::new(snapshot)));
        Ok(())
    }

    /// Runs the round's calls concurrently (bounded), storing and announcing each result as
    /// it arrives; returns the observations in call order.
    async fn run_tools(&mut self) -> Result<Vec<String>, Halt> {
        let Some(thought) = self.current.clone() else {
            return Ok(Vec::new());
        };
        for call in &thought.tool_calls {
            self.emitter.emit(RunEvent::ToolStarted {
                thought_id: thought.id,
                position: thought.position,
                call: call.clone(),
            });
        }
        type Indexed<'a> = Vec<(usize, &'a ToolCallRecord)>;
        let (client, server): (Indexed<'_>, Indexed<'_>) = thought
            .tool_calls
            .iter()
            .enumerate()
            .partition(|(_, call)| self.tools.is_client(&call.name));
        let client: Vec<usize> = client.into_iter().map(|(index, _)| index).collect();
        let requests: Vec<(usize, ToolCallRequest)> = server
            .into_iter()
            .map(|(index, call)| {
                let request = ToolCallRequest {
                    id: call.id.clone(),
                    name: call.name.clone(),
                    arguments: call.arguments.clone(),
                };
                (index, request)
            })
            .collect();
        let tools = Arc::clone(&self.tools);
        let timeout = self.settings.tool_timeout;
        let mut results = futures::stream::iter(requests)
            .map(|(index, call)| {
                let tools = Arc::clone(&tools);
                let span = tracing::info_span!("tool", name = %call.name, call_id = %call.id);
                async move {
                    (
                        index,
                        tools.invoke(&call.name, &call.arguments, timeout).await,
                    )
                }
                .instrument(span)
            })
            .buffer_unordered(self.settings.tool_concurrency.max(1));
        while let Some((index, invocation)) = or_cancel(&self.cancel, results.next()).await? {
            self.record_observation(index, invocation)?;
        }
        drop(results);
        self.run_client_calls(client).await?;
        let thought = self.current.clone().unwrap_or(thought);
        self.emitter
            .emit(RunEvent::Thought(Box::new(thought.clone())));
        Ok(thought
            .tool_calls
            .into_iter()
            .map(|call| call.observation.unwrap_or_default())
            .collect())
    }

    pub(super) fn record_observation(
        &mut self,
        index: usize,
        invocation: crate::tools::Invocation,
    ) -> Result<(), Halt> {
        let files = self.store_files(&invocation.files)?;
        let Some(thought) = self.current.as_mut() else {
            return Ok(());
        };
        let Some(call) = thought.tool_calls.get_mut(index) else {
            return Ok(());
        };
        call.observation = Some(invocation.observation);
        call.meta = Some(invocation.meta);
        let call = call.clone();
        thought
            .file_ids
            .extend(files.iter().map(|f| f.id.to_string()));
        let (thought_id, position) = (thought.id, thought.position);
        self.store.put_thought(&self.spec.tenant, thought)?;
        self.emitter.emit(RunEvent::ToolFinished {
            thought_id,
            position,
            call,
        });
        Ok(())
    }

    /// Stores the files a tool produced and announces each; returns their records.
    fn store_files(&mut self, files: &[ToolFile]) -> Result<Vec<FileRecord>, Halt> {
        let mut records = Vec::with_capacity(files.len());
        for file in files {
            let (bytes, url) = match &file.content {
                FileContent::Bytes(bytes) => (Some(bytes.as_slice()), String::new()),
                FileContent::Url(url) => (None, url.clone()),
            };
            let record = FileRecord {
                id: FileId::new(),
                message_id: self.message.id,
                name: file.name.clone(),
                mime_type: file.mime_type.clone(),
                size: bytes.map_or(0, |b| b.len() as u64),
                url,
                created_at: crate::domain::now(),
            };
            self.store.put_file(&self.spec.tenant, &record, bytes)?;
            self.emitter.emit(RunEvent::File(record.clone()));
            records.push(record);
        }
        Ok(records)
    }

    /// Writes the message's final state, then sends the last event.
    async fn finish(mut self, outcome: Result<FinishReason, Halt>) -> Result<(), StoreError> {
        if let Some(thought) = self.current.take() {
            self.store.put_thought(&self.spec.tenant, &thought)?;
        }
        self.usage.latency = self.started.elapsed().as_secs_f64();
        self.message.answer = match self.answer.take() {
            Some(answer) => answer,
            None if self.strategy.streamed_text_is_answer() => self.streamed.clone(),
            None => String::new(),
        };
        let message = &mut self.message;
        message.usage = self.usage.clone();
        message.updated_at = crate::domain::now();
        let event = match outcome {
            Ok(reason) => {
                message.status = MessageStatus::Completed;
                message.finish_reason = Some(reason);
                end_event(message, reason)
            }
            Err(Halt::Cancelled) if self.shutdown.is_cancelled() => {
                message.status = MessageStatus::Interrupted;
                fail(
                    message,
                    "shutdown",
                    "the service shut down while the run was in progress",
                )
            }
            Err(Halt::Cancelled) => {
                message.status = MessageStatus::Cancelled;
                message.finish_reason = Some(FinishReason::Cancelled);
                end_event(message, FinishReason::Cancelled)
            }
            Err(Halt::Failed(failure)) => {
                message.status = MessageStatus::Failed;
                fail(message, &failure.code, &failure.message)
            }
        };
        tracing::info!(status = ?self.message.status, iterations = self.message.iterations, "run ended");
        let recorded = self.store.update_message(&self.spec.tenant, &self.message);
        if recorded.is_ok() {
            self.emitter.emit(event);
        }
        self.emitter.close().await;
        recorded
    }
}

fn end_event(message: &Message, finish_reason: FinishReason) -> RunEvent {
    RunEvent::MessageEnd {
        answer: message.answer.clone(),
        usage: message.usage.clone(),
        finish_reason,
        iterations: message.iterations,
    }
}

fn fail(message: &mut Message, code: &str, text: &str) -> RunEvent {
    let failure = RunFailure {
        code: code.to_owned(),
        message: text.to_owned(),
    };
    message.error = Some(failure.clone());
    RunEvent::Error {
        failure,
        usage: message.usage.clone(),
        iterations: message.iterations,
    }
}
