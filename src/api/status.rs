//! The one mapping from core errors to gRPC statuses.

use tonic::{Code, Status};

use crate::catalog::CatalogError;
use crate::domain::{ErrorKind, FieldError};
use crate::llm::LlmError;
use crate::runner::RunError;
use crate::store::StoreError;
use crate::tools::ToolSetError;

/// An error that knows its class; every core error type implements it.
pub trait Classified: std::fmt::Display {
    /// The class of failure.
    fn kind(&self) -> ErrorKind;
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

classified!(RunError, StoreError, ToolSetError, LlmError, CatalogError);

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
        ErrorKind::Unavailable => Code::Unavailable,
        ErrorKind::DeadlineExceeded => Code::DeadlineExceeded,
        ErrorKind::Cancelled => Code::Cancelled,
        ErrorKind::Internal => Code::Internal,
    }
}

/// The status for `err`. Internal errors are logged and answered without detail, so no
/// storage path or bug detail leaks to callers.
pub fn from_error<E: Classified>(err: E) -> Status {
    let kind = err.kind();
    if kind == ErrorKind::Internal {
        tracing::error!(error = %err, "internal error");
        return Status::internal("internal error; see the server log");
    }
    Status::new(code_for(kind), err.to_string())
}

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
    fn not_found_keeps_its_message() {
        let status = from_error(RunError::not_found("message", "abc"));
        assert_eq!(status.code(), Code::NotFound);
        assert_eq!(status.message(), "message abc not found");
    }
}
