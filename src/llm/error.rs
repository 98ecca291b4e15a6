//! LLM call failures, classified so callers can tell a bad key from a busy server.

use std::time::Duration;

use crate::domain::redact::Redactor;
use crate::domain::ErrorKind;

/// Why an LLM call failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum LlmError {
    /// The server could not be reached.
    #[error("could not connect to the LLM server: {message}")]
    Connect {
        /// Transport detail.
        message: String,
    },
    /// No answer within the configured time: to connect, to the first byte, or (idle)
    /// between two pieces of an answer.
    #[error("the LLM server did not answer within {after:?} ({phase})")]
    Timeout {
        /// Which wait ran out: `connect`, `first byte` or `stream`.
        phase: &'static str,
        /// The limit.
        after: Duration,
    },
    /// The key was refused (401/403).
    #[error("the LLM provider refused the credentials (HTTP {status}): {message}")]
    Auth {
        /// HTTP status.
        status: u16,
        /// The provider's message.
        message: String,
    },
    /// The provider does not know the model (404).
    #[error("the LLM provider does not know model {model:?}: {message}")]
    ModelNotFound {
        /// Model name asked for.
        model: String,
        /// The provider's message.
        message: String,
    },
    /// Too many requests (429).
    #[error("the LLM provider is rate limiting requests: {message}")]
    RateLimited {
        /// The provider's message.
        message: String,
        /// How long the provider asked us to wait.
        retry_after: Option<Duration>,
    },
    /// The provider failed (5xx).
    #[error("the LLM server failed (HTTP {status}): {message}")]
    Server {
        /// HTTP status.
        status: u16,
        /// The provider's message.
        message: String,
        /// How long the provider asked us to wait.
        retry_after: Option<Duration>,
    },
    /// The provider rejected the request (other 4xx).
    #[error("the LLM provider rejected the request (HTTP {status}): {message}")]
    BadRequest {
        /// HTTP status.
        status: u16,
        /// The provider's message.
        message: String,
    },
    /// The stream broke off or carried an error object.
    #[error("the LLM stream failed: {message}")]
    Stream {
        /// What happened.
        message: String,
    },
    /// The response did not have the expected shape.
    #[error("could not read the LLM response: {message}")]
    Decode {
        /// What was wrong.
        message: String,
    },
    /// The model wrote more than the run may keep.
    #[error("the model wrote more than runner.max_answer_bytes ({limit} bytes); the run keeps what came before")]
    TooLarge {
        /// The limit.
        limit: usize,
    },
    /// Every slot of the provider's concurrency limit stayed taken for the queue timeout.
    #[error("the LLM provider {provider:?} had no free slot within {waited:?} (max_concurrent_requests)")]
    Busy {
        /// The provider.
        provider: String,
        /// How long the call waited.
        waited: Duration,
    },
}

impl LlmError {
    /// The failure with `redactor`'s secrets masked in every text that came from upstream.
    pub fn redacted(self, redactor: &Redactor) -> Self {
        let mask = |message: String| redactor.redact(&message).into_owned();
        match self {
            Self::Connect { message } => Self::Connect {
                message: mask(message),
            },
            Self::Auth { status, message } => Self::Auth {
                status,
                message: mask(message),
            },
            Self::ModelNotFound { model, message } => Self::ModelNotFound {
                model,
                message: mask(message),
            },
            Self::RateLimited {
                message,
                retry_after,
            } => Self::RateLimited {
                message: mask(message),
                retry_after,
            },
            Self::Server {
                status,
                message,
                retry_after,
            } => Self::Server {
                status,
                message: mask(message),
                retry_after,
            },
            Self::BadRequest { status, message } => Self::BadRequest {
                status,
                message: mask(message),
            },
            Self::Stream { message } => Self::Stream {
                message: mask(message),
            },
            Self::Decode { message } => Self::Decode {
                message: mask(message),
            },
            other @ (Self::Timeout { .. } | Self::TooLarge { .. } | Self::Busy { .. }) => other,
        }
    }

    /// Stable code for the in-band error event.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Connect { .. } => "llm_connect_error",
            Self::Timeout { phase, .. } if *phase == IDLE_PHASE || *phase == ERROR_BODY_PHASE => {
                "llm_idle_timeout"
            }
            Self::Timeout { .. } => "llm_timeout",
            Self::Auth { .. } => "llm_auth_error",
            Self::ModelNotFound { .. } => "llm_model_not_found",
            Self::RateLimited { .. } => "llm_rate_limited",
            Self::Server { .. } => "llm_server_error",
            Self::BadRequest { .. } => "llm_bad_request",
            Self::Stream { .. } => "llm_stream_error",
            Self::Decode { .. } => "llm_decode_error",
            Self::Busy { .. } => "llm_provider_busy",
            Self::TooLarge { .. } => "answer_too_large",
        }
    }

    /// Whether another attempt may succeed: connection failures, timeouts before the first
    /// byte, a broken stream, 408, 409, 429, 5xx and a full provider. A refused key, an
    /// unknown model or a rejected request (a context-length error among them) fail the
    /// same way every time.
    pub fn is_retryable(&self) -> bool {
        match self {
            Self::Connect { .. }
            | Self::RateLimited { .. }
            | Self::Server { .. }
            | Self::Stream { .. }
            | Self::Busy { .. } => true,
            Self::Timeout { phase, .. } => *phase != IDLE_PHASE,
            Self::BadRequest { status, .. } => matches!(status, 408 | 409),
            Self::Auth { .. }
            | Self::ModelNotFound { .. }
            | Self::Decode { .. }
            | Self::TooLarge { .. } => false,
        }
    }

    /// How a caller outside a run should see this failure.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Self::Connect { .. }
            | Self::Server { .. }
            | Self::Stream { .. }
            | Self::Busy { .. } => ErrorKind::Unavailable,
            Self::Timeout { .. } => ErrorKind::DeadlineExceeded,
            Self::Auth { .. } | Self::BadRequest { .. } | Self::Decode { .. } => {
                ErrorKind::FailedPrecondition
            }
            Self::TooLarge { .. } => ErrorKind::ResourceExhausted,
            Self::ModelNotFound { .. } => ErrorKind::InvalidArgument,
            Self::RateLimited { .. } => ErrorKind::ResourceExhausted,
        }
    }

    /// The wait the provider asked for, if any.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Self::RateLimited { retry_after, .. } | Self::Server { retry_after, .. } => {
                *retry_after
            }
            Self::Connect { .. }
            | Self::Timeout { .. }
            | Self::Auth { .. }
            | Self::ModelNotFound { .. }
            | Self::BadRequest { .. }
            | Self::Stream { .. }
            | Self::Decode { .. }
            | Self::Busy { .. }
            | Self::TooLarge { .. } => None,
        }
    }
}

/// The phase of a timeout inside a stream, after its first byte.
pub const IDLE_PHASE: &str = "stream";
/// The phase of a timeout while reading an error answer's body: nothing of the turn was
/// shown, so it is retried like a timeout before the first byte.
pub const ERROR_BODY_PHASE: &str = "error body";
