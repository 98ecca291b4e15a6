//! The HTTP side of the Messages API: headers and the output budget per model.

use std::collections::HashMap;

use super::stream::Turn;
use super::wire::{max_tokens, request_body};
use crate::llm::http::{self, Clocks};
use crate::llm::sse::chat_stream;
use reqwest::header::HeaderValue;

use crate::llm::{ChatModel, ChatRequest, ChatStream, LlmError, ProviderConfig};

/// The `anthropic-version` sent when the configuration names none.
pub const DEFAULT_VERSION: &str = "2023-06-01";

/// A client for one Anthropic Messages endpoint.
#[derive(Debug, Clone)]
pub struct AnthropicClient {
    http: reqwest::Client,
    endpoint: String,
    /// The key as a header value marked sensitive, so no debug output shows it.
    api_key: Option<HeaderValue>,
    version: String,
    clocks: Clocks,
    /// Configured output limits by model, for `max_tokens` (which the API requires).
    max_output: HashMap<String, u32>,
}

impl AnthropicClient {
    /// A client for the provider described by `config`.
    pub fn new(config: &ProviderConfig) -> Result<Self, LlmError> {
        let clocks = Clocks::of(config);
        Ok(Self {
            http: http::client(clocks)?,
            endpoint: format!("{}/v1/messages", config.api_base()),
            api_key: crate::llm::api_key(config)
                .map(|key| key_header(key.expose()))
                .transpose()?,
            version: config
                .anthropic_version
                .clone()
                .unwrap_or_else(|| DEFAULT_VERSION.to_owned()),
            clocks,
            max_output: config
                .models
                .iter()
                .filter_map(|model| Some((model.name.clone(), model.max_output_tokens?)))
                .collect(),
        })
    }
}

fn key_header(key: &str) -> Result<HeaderValue, LlmError> {
    let mut value = HeaderValue::from_str(key.trim()).map_err(|_| LlmError::Auth {
        status: 0,
        message: "the configured API key has characters an HTTP header cannot carry".to_owned(),
    })?;
    value.set_sensitive(true);
    Ok(value)
}

#[async_trait::async_trait]
impl ChatModel for AnthropicClient {
    async fn stream(&self, request: &ChatRequest) -> Result<ChatStream, LlmError> {
        let budget = max_tokens(request, self.max_output.get(&request.model).copied());
        let mut builder = self
            .http
            .post(&self.endpoint)
            .header("anthropic-version", &self.version)
            .json(&request_body(request, budget));
        if let Some(key) = &self.api_key {
            builder = builder.header("x-api-key", key.clone());
        }
        let response = http::send(builder, self.clocks, &request.model).await?;
        Ok(chat_stream(
            response,
            self.clocks.first_byte,
            self.clocks.idle,
            request.max_output_bytes,
            Turn::limited(request.max_output_bytes),
        ))
    }
}
