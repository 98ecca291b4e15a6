//! The HTTP side every provider shares: the client, the first-byte clock, transport errors
//! without URLs, and the classification of error answers.

use std::time::Duration;

use futures::StreamExt;
use reqwest::header::{HeaderMap, RETRY_AFTER};
use reqwest::StatusCode;
use serde_json::Value;

use super::sse::{limit_of_cap, truncate};
use super::{LlmError, ProviderConfig};
use crate::telemetry::traces;

/// The clocks of one provider's calls.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Clocks {
    /// To establish a connection.
    pub connect: Duration,
    /// From sending a request to the first byte of its answer.
    pub first_byte: Duration,
    /// Longest silence inside an answer, once its first byte arrived: a clock of its own,
    /// so a slow first byte is not cut short by it.
    pub idle: Duration,
}

impl Clocks {
    /// The clocks `config` sets.
    pub fn of(config: &ProviderConfig) -> Self {
        Self {
            connect: Duration::from_secs(config.connect_timeout_secs),
            first_byte: Duration::from_secs(config.first_byte_timeout_secs),
            idle: Duration::from_secs(config.idle_timeout_secs),
        }
    }
}

/// An HTTP client that gives up connecting after `clocks.connect`.
pub(crate) fn client(clocks: Clocks) -> Result<reqwest::Client, LlmError> {
    reqwest::Client::builder()
        .connect_timeout(clocks.connect)
        .build()
        .map_err(|err| LlmError::Connect {
            message: format!("could not build the HTTP client: {err}"),
        })
}

/// Sends `request` (carrying the caller's trace) and waits for the response head within the
/// first-byte clock; an error answer is classified with the provider's own message.
pub(crate) async fn send(
    request: reqwest::RequestBuilder,
    clocks: Clocks,
    model: &str,
) -> Result<reqwest::Response, LlmError> {
    let response = tokio::time::timeout(clocks.first_byte, traces::traced(request).send())
        .await
        .map_err(|_| LlmError::Timeout {
            phase: "first byte",
            after: clocks.first_byte,
        })?
        .map_err(|err| transport_error(err, clocks))?;
    if response.status().is_success() {
        Ok(response)
    } else {
        Err(http_error(response, clocks, model).await)
    }
}

fn transport_error(err: reqwest::Error, clocks: Clocks) -> LlmError {
    let connect = err.is_connect();
    if connect && err.is_timeout() {
        return LlmError::Timeout {
            phase: "connect",
            after: clocks.connect,
        };
    }
    // URLs stay out of error texts: a query string may carry a key.
    let message = error_chain(&err.without_url());
    if connect {
        LlmError::Connect { message }
    } else {
        LlmError::Stream { message }
    }
}

/// A whole response body, refusing one longer than `cap` bytes (a line cap: the limit it
/// derives from is what the error names).
pub(crate) async fn read_body(
    response: reqwest::Response,
    cap: Option<usize>,
) -> Result<Vec<u8>, LlmError> {
    let mut body = Vec::new();
    let mut chunks = response.bytes_stream();
    while let Some(chunk) = chunks.next().await {
        let chunk = chunk.map_err(|err| LlmError::Stream {
            message: error_chain(&err.without_url()),
        })?;
        body.extend_from_slice(&chunk);
        if let Some(cap) = cap.filter(|cap| body.len() > *cap) {
            return Err(LlmError::TooLarge {
                limit: limit_of_cap(cap),
            });
        }
    }
    Ok(body)
}

/// reqwest's top-level message rarely says why; the source chain does.
pub(crate) fn error_chain(err: &dyn std::error::Error) -> String {
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
/// or as an HTTP date. A wait too long to represent (`1e300`, `inf`) is the longest wait
/// there is, which every retry budget refuses; a negative or unreadable one is no wait asked.
fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let header = |name| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
    };
    if let Some(ms) = header("retry-after-ms").and_then(|v| v.parse::<f64>().ok()) {
        return seconds_asked(ms / 1000.0);
    }
    let value = header(RETRY_AFTER.as_str())?;
    if let Ok(seconds) = value.parse::<f64>() {
        return seconds_asked(seconds);
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(
        at.duration_since(std::time::SystemTime::now())
            .unwrap_or(Duration::ZERO),
    )
}

fn seconds_asked(seconds: f64) -> Option<Duration> {
    if seconds.is_nan() || seconds < 0.0 {
        return None;
    }
    Some(Duration::try_from_secs_f64(seconds).unwrap_or(Duration::MAX))
}

/// The most of an error answer's body that is read: enough for any provider's message.
pub(crate) const ERROR_BODY_CAP: usize = 64 * 1024;

/// Classifies a non-2xx answer, keeping the provider's own message (OpenAI and Anthropic
/// both put it in an `error` value). The body is read up to [`ERROR_BODY_CAP`] and within the
/// idle clock: a body that never comes is a timeout, not a hang.
async fn http_error(response: reqwest::Response, clocks: Clocks, model: &str) -> LlmError {
    let status = response.status();
    let retry_after = retry_after(response.headers());
    let body = match error_body(response, clocks.idle).await {
        Ok(body) => body,
        Err(err) => return err,
    };
    let message = serde_json::from_str::<Value>(&body)
        .ok()
        .and_then(|json| json.get("error").map(error_message))
        .unwrap_or_else(|| truncate(body.trim(), 500).to_owned());
    classify(status, message, retry_after, model)
}

/// At most [`ERROR_BODY_CAP`] bytes of `response`'s body, each piece within `idle`; the
/// rest is not read. A connection that breaks ends the body where it broke.
async fn error_body(response: reqwest::Response, idle: Duration) -> Result<String, LlmError> {
    let mut body = Vec::new();
    let mut chunks = response.bytes_stream();
    while body.len() < ERROR_BODY_CAP {
        match tokio::time::timeout(idle, chunks.next()).await {
            Err(_) => {
                return Err(LlmError::Timeout {
                    phase: super::error::ERROR_BODY_PHASE,
                    after: idle,
                })
            }
            Ok(None | Some(Err(_))) => break,
            Ok(Some(Ok(chunk))) => {
                let room = ERROR_BODY_CAP - body.len();
                body.extend_from_slice(&chunk[..chunk.len().min(room)]);
            }
        }
    }
    Ok(String::from_utf8_lossy(&body).into_owned())
}

/// The failure an HTTP status means: 401/403 the key, 404 the model, 429 and 5xx (529,
/// Anthropic's "overloaded", among them) retryable, other 4xx the request.
pub(crate) fn classify(
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

/// The failure an error object inside a stream names, in the classes an HTTP status would
/// give, so only what a retry can cure is retried: a numeric `code` (OpenRouter's
/// `{"error": {"code": 400, ...}}`) is read as a status; a `type` as OpenAI and Anthropic
/// name them. An object saying neither is a broken stream, which may be retried.
pub(crate) fn stream_error_failure(error: &Value) -> LlmError {
    let message = error_message(error);
    let status = error
        .get("code")
        .and_then(|code| {
            code.as_u64()
                .or_else(|| code.as_str().and_then(|text| text.parse().ok()))
        })
        .and_then(|code| u16::try_from(code).ok())
        .and_then(|code| StatusCode::from_u16(code).ok())
        .filter(|status| status.is_client_error() || status.is_server_error());
    if let Some(status) = status {
        return classify(status, message, None, "");
    }
    let kind = error
        .get("type")
        .or_else(|| error.get("code"))
        .and_then(Value::as_str)
        .unwrap_or_default();
    let status = match kind {
        "overloaded_error" => 529,
        "server_error" | "api_error" => 500,
        "rate_limit_error" | "rate_limit_exceeded" => 429,
        "invalid_request_error" | "context_length_exceeded" => 400,
        "request_too_large" => 413,
        "authentication_error" | "invalid_api_key" => 401,
        "permission_error" => 403,
        "not_found_error" => 404,
        // Out of credit: a retry cannot cure it.
        "insufficient_quota" => {
            return LlmError::BadRequest {
                status: 402,
                message,
            }
        }
        _ => return LlmError::Stream { message },
    };
    match StatusCode::from_u16(status) {
        Ok(status) => classify(status, message, None, ""),
        Err(_) => LlmError::Stream { message },
    }
}

/// The human-readable message of an `error` value, whatever its shape.
pub(crate) fn error_message(error: &Value) -> String {
    if let Some(text) = error.as_str() {
        return text.to_owned();
    }
    error
        .get("message")
        .and_then(Value::as_str)
        .map_or_else(|| error.to_string(), str::to_owned)
}

/// A call id for servers that do not send one.
pub(crate) fn mint_call_id() -> String {
    format!("call_{}", uuid::Uuid::new_v4().simple())
}

/// Empty argument text means "no arguments"; the model sees `{}` either way.
pub(crate) fn normalize_arguments(arguments: String) -> String {
    if arguments.trim().is_empty() {
        "{}".to_owned()
    } else {
        arguments
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
        for absurd in ["1e300", "inf", "Infinity", "1e25"] {
            assert_eq!(
                retry_after(&headers(&[("retry-after", absurd)])),
                Some(Duration::MAX),
                "{absurd}"
            );
            assert_eq!(
                retry_after(&headers(&[("retry-after-ms", absurd)])),
                Some(Duration::MAX),
                "{absurd}"
            );
        }
        assert_eq!(retry_after(&headers(&[("retry-after-ms", "NaN")])), None);
        assert_eq!(retry_after(&headers(&[("retry-after", "-5")])), None);
    }
}
