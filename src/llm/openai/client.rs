//! The HTTP side of Chat Completions: the request, and the non-streaming path.

use std::collections::HashSet;

use super::body::RequestBody;
use super::stream::TurnState;
use super::wire::Completion;
use crate::llm::http::{self, Clocks};
use crate::llm::sse::{chat_stream, line_cap};
use crate::llm::{
    ChatChunk, ChatModel, ChatRequest, ChatStream, Feature, LlmError, ProviderConfig, Secret,
    TurnEnd,
};

/// A client for one OpenAI-compatible server.
#[derive(Debug, Clone)]
pub struct OpenAiClient {
    http: reqwest::Client,
    endpoint: String,
    /// `endpoint` parsed once, not for every request; `None` leaves an unparsable one to
    /// fail each request as it did.
    endpoint_url: Option<reqwest::Url>,
    api_key: Option<Secret>,
    clocks: Clocks,
    /// Configured models that cannot stream tool calls: asked without streaming when tools
    /// are offered. Unlisted models can.
    whole_tool_turns: HashSet<String>,
}

impl OpenAiClient {
    /// A client for the provider described by `config`.
    pub fn new(config: &ProviderConfig) -> Result<Self, LlmError> {
        let clocks = Clocks::of(config);
        let endpoint = format!("{}/chat/completions", config.api_base());
        Ok(Self {
            http: http::client(clocks)?,
            endpoint_url: reqwest::Url::parse(&endpoint).ok(),
            endpoint,
            api_key: crate::llm::api_key(config),
            clocks,
            whole_tool_turns: config
                .models
                .iter()
                .filter(|model| !model.features.contains(&Feature::StreamToolCall))
                .map(|model| model.name.clone())
                .collect(),
        })
    }

    /// Runs the turn without streaming and yields it as one stream.
    async fn whole_turn(&self, request: &ChatRequest) -> Result<ChatStream, LlmError> {
        let response = self.send(request, false).await?;
        let cap = request.max_output_bytes.map(line_cap);
        let body = tokio::time::timeout(self.clocks.idle, http::read_body(response, cap))
            .await
            .map_err(|_| LlmError::Timeout {
                phase: crate::llm::error::IDLE_PHASE,
                after: self.clocks.idle,
            })??;
        let completion: Completion =
            serde_json::from_slice(&body).map_err(|err| LlmError::Decode {
                message: format!("the completion is not valid JSON: {err}"),
            })?;
        let written = completion
            .choices
            .first()
            .map_or(0, |choice| choice.message.written_bytes());
        if let Some(max) = request.max_output_bytes.filter(|max| written > *max) {
            return Err(LlmError::TooLarge { limit: max });
        }
        let choice = completion.choices.into_iter().next().unwrap_or_default();
        let text = choice.message.content.unwrap_or_default();
        let end = TurnEnd {
            tool_calls: choice
                .message
                .tool_calls
                .into_iter()
                .map(|call| call.into_request())
                .collect(),
            finish_reason: choice.finish_reason,
            ..TurnEnd::default()
        };
        let chunks = [
            (!text.is_empty()).then_some(ChatChunk::Text(text)),
            completion.usage.map(|usage| ChatChunk::Usage(usage.into())),
            Some(ChatChunk::Finished(end)),
        ];
        Ok(Box::pin(futures::stream::iter(
            chunks.into_iter().flatten().map(Ok),
        )))
    }

    /// Sends the request and waits for the response head, within the first-byte timeout.
    async fn send(
        &self,
        request: &ChatRequest,
        stream: bool,
    ) -> Result<reqwest::Response, LlmError> {
        let builder = match &self.endpoint_url {
            Some(url) => self.http.post(url.clone()),
            None => self.http.post(&self.endpoint),
        };
        let mut builder = builder.json(&RequestBody::new(request, stream));
        if let Some(key) = &self.api_key {
            builder = builder.bearer_auth(key.expose());
        }
        http::send(builder, self.clocks, &request.model).await
    }
}

#[async_trait::async_trait]
impl ChatModel for OpenAiClient {
    async fn stream(&self, request: &ChatRequest) -> Result<ChatStream, LlmError> {
        if !request.tools.is_empty() && self.whole_tool_turns.contains(&request.model) {
            return self.whole_turn(request).await;
        }
        let response = self.send(request, true).await?;
        Ok(chat_stream(
            response,
            self.clocks.first_byte,
            self.clocks.idle,
            request.max_output_bytes,
            TurnState::limited(request.max_output_bytes),
        ))
    }
}
