//! The HTTP side: request building, timeouts and error classification.

use std::time::Duration;

use reqwest::header::{HeaderMap, RETRY_AFTER};
use reqwest::StatusCode;

use futures::StreamExt;

use super::stream::{chat_stream, line_cap, truncate};
use super::wire::{error_message, request_body, Completion};
use std::collections::HashSet;

use crate::llm::error::IDLE_PHASE;
use crate::llm::{
    ChatChunk, ChatModel, ChatRequest, ChatStream, Feature, LlmError, ProviderConfig, Secret,
    TurnEnd,
};
use crate::telemetry::traces;

/// A client for one OpenAI-compatible server.
#[derive(Debug, Clone)]
pub struct OpenAiClient {
    http: reqwest::Client,
    endpoint: String,
    api_key: Option<Secret>,
    connect_timeout: Duration,
    first_byte_timeout: Duration,
    /// Longest silence inside an answer, once its first byte arrived: a clock of its own,
    /// so a slow first byte is not cut short by it.
    idle_timeout: Duration,
    /// Configured models that cannot stream tool calls: asked without streaming when tools
    /// are offered. Unlisted models can.
    whole_tool_turns: HashSet<String>,
}

impl OpenAiClient {
    /// A client for the provider described by `config`.
    pub fn new(config: &ProviderConfig) -> Result<Self, LlmError> {
        let connect_timeout = Duration::from_secs(config.connect_timeout_secs);
        let http = reqwest::Client::builder()
            .connect_timeout(connect_timeout)
            .build()
            .map_err(|err| LlmError::Connect {
                message: format!("could not build the HTTP client: {err}"),
            })?;
        Ok(Self {
            http,
            endpoint: format!("{}/chat/completions", config.base_url.trim_end_matches('/')),
            api_key: config.resolved_api_key(),
            connect_timeout,
            first_byte_timeout: Duration::from_secs(config.first_byte_timeout_secs),
            idle_timeout: Duration::from_secs(config.idle_timeout_secs),
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
        let limit = request.max_output_bytes.map(line_cap);
        let body = tokio::time::timeout(self.idle_timeout, read_body(response, limit))
            .await
            .map_err(|_| LlmError::Timeout {
                phase: IDLE_PHASE,
                after: self.idle_timeout,
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
        let mut builder = self
            .http
            .post(&self.endpoint)
            .json(&request_body(request, stream));
        if let Some(key) = &self.api_key {
            builder = builder.bearer_auth(key.expose());
        }
        let builder = traces::traced(builder);
        let response = tokio::time::timeout(self.first_byte_timeout, builder.send())
            .await
            .map_err(|_| LlmError::Timeout {
                phase: "first byte",
                after: self.first_byte_timeout,
            })?
            .map_err(|err| self.transport_error(err))?;
        if response.status().is_success() {
            Ok(response)
        } else {
            Err(http_error(response, &request.model).await)
        }
    }

    fn transport_error(&self, err: reqwest::Error) -> LlmError {
        if err.is_connect() && err.is_timeout() {
            LlmError::Timeout {
                phase: "connect",
                after: self.connect_timeout,
            }
        } else if err.is_connect() {
            LlmError::Connect {
                message: error_chain(&err.without_url()),
            }
        } else {
            LlmError::Stream {
                message: error_chain(&err.without_url()),
            }
        }
    }
}

/// A whole response body, refusing one longer than `limit` bytes.
async fn read_body(response: reqwest::Response, limit: Option<usize>) -> Result<Vec<u8>, LlmError> {
    let mut body = Vec::new();
    let mut chunks = response.bytes_stream();
    while let Some(chunk) = chunks.next().await {
        let chunk = chunk.map_err(|err| LlmError::Stream {
            message: error_chain(&err.without_url()),
        })?;
        body.extend_from_slice(&chunk);
        if let Some(limit) = limit.filter(|limit| body.len() > *limit) {
            return Err(LlmError::TooLarge {
                limit: (limit - 64 * 1024) / 6,
            });
        }
    }
    Ok(body)
}

/// reqwest's top-level message rarely says why; the source chain does.
fn error_chain(err: &dyn std::error::Error) -> String {
    let mut message = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        message.push_str(": ");
        message.push_str(&cause.to_string());
        source = cause.source();
    }
    message
}

/// The wait a provider asks for: `retry-after-ms` (OpenAI's), else `Retry-After` in seconds
/// or as an HTTP date.
fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let header = |name| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
    };
    if let Some(ms) = header("retry-after-ms").and_then(|v| v.parse::<f64>().ok()) {
        return (ms >= 0.0).then(|| Duration::from_secs_f64(ms / 1000.0));
    }
    let value = header(RETRY_AFTER.as_str())?;
    if let Ok(seconds) = value.parse::<f64>() {
        return (seconds >= 0.0 && seconds.is_finite()).then(|| Duration::from_secs_f64(seconds));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(
        at.duration_since(std::time::SystemTime::now())
            .unwrap_or(Duration::ZERO),
    )
}

/// Classifies a non-2xx answer, keeping the provider's own message.
async fn http_error(response: reqwest::Response, model: &str) -> LlmError {
    let status = response.status();
    let retry_after = retry_after(response.headers());
    let body = response.text().await.unwrap_or_default();
    let message = serde_json::from_str::<serde_json::Value>(&body)
        .ok()
        .and_then(|json| json.get("error").map(error_message))
        .unwrap_or_else(|| truncate(body.trim(), 500).to_owned());
    classify(status, message, retry_after, model)
}

fn classify(
    status: StatusCode,
    message: String,
    retry_after: Option<Duration>,
    model: &str,
) -> LlmError {
    let code = status.as_u16();
    match status {
        StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => LlmError::Auth {
            status: code,
            message,
        },
        StatusCode::NOT_FOUND => LlmError::ModelNotFound {
            model: model.to_owned(),
            message,
        },
        StatusCode::TOO_MANY_REQUESTS => LlmError::RateLimited {
            message,
            retry_after,
        },
        _ if status.is_server_error() => LlmError::Server {
            status: code,
            message,
            retry_after,
        },
        _ => LlmError::BadRequest {
            status: code,
            message,
        },
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
            self.first_byte_timeout,
            self.idle_timeout,
            request.max_output_bytes,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn http_statuses_are_classified_with_the_provider_message() {
        let auth = classify(StatusCode::UNAUTHORIZED, "bad key".into(), None, "m");
        assert_eq!(auth.code(), "llm_auth_error");
        let missing = classify(StatusCode::NOT_FOUND, "no".into(), None, "gpt-x");
        assert!(missing.to_string().contains("gpt-x"));
        let limited = classify(
            StatusCode::TOO_MANY_REQUESTS,
            "slow down".into(),
            Some(Duration::from_secs(7)),
            "m",
        );
        assert_eq!(limited.retry_after(), Some(Duration::from_secs(7)));
        assert!(limited.is_retryable());
        let server = classify(StatusCode::BAD_GATEWAY, "upstream".into(), None, "m");
        assert_eq!(server.code(), "llm_server_error");
        assert!(server.to_string().contains("upstream"));
        let retryable = |status: u16| {
            classify(
                StatusCode::from_u16(status).unwrap(),
                String::new(),
                None,
                "m",
            )
            .is_retryable()
        };
        for status in [408, 409, 429, 500, 502, 503, 504, 529] {
            assert!(retryable(status), "{status}");
        }
        for status in [400, 401, 403, 404, 413, 422] {
            assert!(!retryable(status), "{status}");
        }
    }

    #[test]
    fn retry_after_is_read_in_seconds_milliseconds_or_as_a_date() {
        let headers = |pairs: &[(&'static str, &str)]| {
            let mut map = HeaderMap::new();
            for (name, value) in pairs {
                map.insert(*name, value.parse().unwrap());
            }
            map
        };
        assert_eq!(
            retry_after(&headers(&[("retry-after", "2")])),
            Some(Duration::from_secs(2))
        );
        assert_eq!(
            retry_after(&headers(&[("retry-after", "3"), ("retry-after-ms", "250")])),
            Some(Duration::from_millis(250))
        );
        let soon = httpdate::fmt_http_date(std::time::SystemTime::now() + Duration::from_secs(30));
        let wait = retry_after(&headers(&[("retry-after", &soon)])).unwrap();
        assert!(
            wait > Duration::from_secs(25) && wait <= Duration::from_secs(30),
            "{wait:?}"
        );
        assert_eq!(retry_after(&headers(&[("retry-after", "soon")])), None);
    }
}
