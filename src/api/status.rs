//! The one mapping from core errors to gRPC statuses.

use std::time::Duration;

use tonic::{Code, Status};
use tonic_types::{ErrorDetails, StatusExt};

use crate::access::AccessError;
use crate::catalog::CatalogError;
use crate::domain::{ErrorKind, FieldError};
use crate::library::LibraryError;
use crate::llm::LlmError;
use crate::runner::RunError;
use crate::store::StoreError;
use crate::tools::ToolSetError;

/// An error that knows its class; every core error type implements it.
pub trait Classified: std::fmt::Display {
    /// The class of failure.
    fn kind(&self) -> ErrorKind;

    /// How long to wait before trying again, when waiting helps.
    fn retry_after(&self) -> Option<Duration> {
        None
    }

    /// A reason a client can branch on (`google.rpc.ErrorInfo`) and its metadata.
    fn reason(&self) -> Option<(&'static str, Vec<(&'static str, String)>)> {
        None
    }
}

macro_rules! classified {
    ($($ty:ty),*) => {$(
        impl Classified for $ty {
            fn kind(&self) -> ErrorKind {
                <$ty>::kind(self)
            }
        }
    )*};
}

classified!(
    StoreError,
    ToolSetError,
    LlmError,
    CatalogError,
    AccessError,
    LibraryError
);

impl Classified for RunError {
    fn kind(&self) -> ErrorKind {
        RunError::kind(self)
    }

    fn retry_after(&self) -> Option<Duration> {
        RunError::retry_after(self)
    }

    fn reason(&self) -> Option<(&'static str, Vec<(&'static str, String)>)> {
        RunError::reason(self)
    }
}

impl Classified for FieldError {
    fn kind(&self) -> ErrorKind {
        ErrorKind::InvalidArgument
    }
}

/// The gRPC code of each class. Exhaustive on purpose: a new class must choose its code.
pub fn code_for(kind: ErrorKind) -> Code {
    match kind {
        ErrorKind::InvalidArgument => Code::InvalidArgument,
        ErrorKind::NotFound => Code::NotFound,
        ErrorKind::AlreadyExists => Code::AlreadyExists,
        ErrorKind::FailedPrecondition => Code::FailedPrecondition,
        ErrorKind::ResourceExhausted => Code::ResourceExhausted,
        ErrorKind::Unauthenticated => Code::Unauthenticated,
        ErrorKind::PermissionDenied => Code::PermissionDenied,
        ErrorKind::Unavailable => Code::Unavailable,
        ErrorKind::DeadlineExceeded => Code::DeadlineExceeded,
        ErrorKind::Cancelled => Code::Cancelled,
        ErrorKind::Aborted => Code::Aborted,
        ErrorKind::Internal => Code::Internal,
    }
}

/// The status for `err`. Internal errors are logged and answered without detail, so no
/// storage path or bug detail leaks to callers. Where waiting helps, the status carries a
/// `google.rpc.RetryInfo` detail saying how long.
pub fn from_error<E: Classified>(err: E) -> Status {
    let kind = err.kind();
    if kind == ErrorKind::Internal {
        tracing::error!(error = %err, "internal error");
        return Status::internal("internal error; see the server log");
    }
    let (retry, reason) = (err.retry_after(), err.reason());
    if retry.is_none() && reason.is_none() {
        return Status::new(code_for(kind), err.to_string());
    }
    let mut details = ErrorDetails::new();
    if let Some(delay) = retry {
        details.set_retry_info(Some(delay));
    }
    if let Some((reason, metadata)) = reason {
        let metadata: std::collections::HashMap<String, String> = metadata
            .into_iter()
            .map(|(key, value)| (key.to_owned(), value))
            .collect();
        details.set_error_info(reason, ERROR_DOMAIN, metadata);
    }
    Status::with_error_details(code_for(kind), err.to_string(), details)
}

/// The `domain` of the `google.rpc.ErrorInfo` this service sends.
pub const ERROR_DOMAIN: &str = "agent-runner";

/// `INVALID_ARGUMENT` naming `field`.
pub fn invalid(field: &str, reason: &str) -> Status {
    from_error(FieldError::new(field, reason))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn field_errors_become_invalid_argument_naming_the_field() {
        let status = from_error(FieldError::new(
            "agent.max_iteration",
            "must be between 1 and 99",
        ));
        assert_eq!(status.code(), Code::InvalidArgument);
        assert_eq!(
            status.message(),
            "agent.max_iteration must be between 1 and 99"
        );
    }

    #[test]
    fn a_limit_says_how_long_to_wait() {
        let status = from_error(RunError::LimitExceeded {
            limit: "limits.runs_per_minute",
            detail: "the tenant started 3 runs in the last minute".into(),
            retry_after: Some(Duration::from_secs(42)),
        });
        assert_eq!(status.code(), Code::ResourceExhausted);
        assert!(status.message().starts_with("limits.runs_per_minute: "));
        let retry = status.get_details_retry_info().unwrap();
        assert_eq!(retry.retry_delay, Some(Duration::from_secs(42)));
    }

    #[test]
    fn not_found_keeps_its_message() {
        let status = from_error(RunError::not_found("message", "abc"));
        assert_eq!(status.code(), Code::NotFound);
        assert_eq!(status.message(), "message abc not found");
    }
}
