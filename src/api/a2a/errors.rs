//! The A2A specification's errors as gRPC statuses: the code its binding table gives and a
//! `google.rpc.ErrorInfo` of domain `a2a-protocol.org` whose reason names the error, which
//! is how the official clients tell them apart.

use std::collections::HashMap;

use tonic::{Code, Status};
use tonic_types::{ErrorDetails, StatusExt};

/// The domain of every A2A error.
pub const DOMAIN: &str = "a2a-protocol.org";

/// An error the A2A specification defines.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum A2aError {
    /// The task does not exist, or not for this caller and agent.
    TaskNotFound(String),
    /// The task has ended and cannot be cancelled.
    TaskNotCancelable(String),
    /// Push notifications are not offered.
    PushNotificationNotSupported,
    /// The operation is not possible here (a message to an ended task, say).
    UnsupportedOperation(String),
    /// A part's media type is not one the agent takes.
    ContentTypeNotSupported(String),
    /// There is no extended card.
    ExtendedAgentCardNotConfigured,
    /// The agent needs an extension the client did not declare.
    ExtensionSupportRequired(String),
    /// The client speaks another protocol version.
    VersionNotSupported(String),
}

impl A2aError {
    fn parts(&self) -> (Code, &'static str, String) {
        match self {
            Self::TaskNotFound(id) => (
                Code::NotFound,
                "TASK_NOT_FOUND",
                format!("task {id:?} not found"),
            ),
            Self::TaskNotCancelable(id) => (
                Code::FailedPrecondition,
                "TASK_NOT_CANCELABLE",
                format!("task {id:?} has ended and cannot be canceled"),
            ),
            Self::PushNotificationNotSupported => (
                Code::FailedPrecondition,
                "PUSH_NOTIFICATION_NOT_SUPPORTED",
                "push notifications are not supported; stream the task or subscribe to it"
                    .to_owned(),
            ),
            Self::UnsupportedOperation(why) => (
                Code::FailedPrecondition,
                "UNSUPPORTED_OPERATION",
                why.clone(),
            ),
            Self::ContentTypeNotSupported(why) => (
                Code::InvalidArgument,
                "CONTENT_TYPE_NOT_SUPPORTED",
                why.clone(),
            ),
            Self::ExtendedAgentCardNotConfigured => (
                Code::FailedPrecondition,
                "EXTENDED_AGENT_CARD_NOT_CONFIGURED",
                "this agent has no extended card".to_owned(),
            ),
            Self::ExtensionSupportRequired(uri) => (
                Code::FailedPrecondition,
                "EXTENSION_SUPPORT_REQUIRED",
                format!(
                    "this agent needs the extension {uri}: declare it in the a2a-extensions \
                     metadata"
                ),
            ),
            Self::VersionNotSupported(version) => (
                Code::FailedPrecondition,
                "VERSION_NOT_SUPPORTED",
                format!("A2A version {version:?} is not supported; this service speaks 1.0"),
            ),
        }
    }
}

impl From<A2aError> for Status {
    fn from(err: A2aError) -> Self {
        let (code, reason, message) = err.parts();
        let details = ErrorDetails::with_error_info(reason, DOMAIN, HashMap::new());
        Status::with_error_details(code, message, details)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_carries_its_reason_in_the_a2a_domain() {
        let status = Status::from(A2aError::TaskNotFound("t-1".into()));
        assert_eq!(status.code(), Code::NotFound);
        let info = status.get_details_error_info().unwrap();
        assert_eq!(
            (info.reason.as_str(), info.domain.as_str()),
            ("TASK_NOT_FOUND", DOMAIN)
        );
        let status = Status::from(A2aError::VersionNotSupported("0.3".into()));
        assert_eq!(status.code(), Code::FailedPrecondition);
        assert_eq!(
            status.get_details_error_info().unwrap().reason,
            "VERSION_NOT_SUPPORTED"
        );
    }
}
