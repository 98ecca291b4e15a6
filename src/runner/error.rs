//! Why a run could not start. Failures after the start are in-band events, not these.

use crate::domain::{ErrorKind, FieldError};
use crate::llm::ModelLookupError;
use crate::store::StoreError;
use crate::tools::ToolSetError;

/// A run that cannot start, or a lookup that failed.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// A request field is invalid.
    #[error(transparent)]
    InvalidField(#[from] FieldError),
    /// The model's provider or name is not configured.
    #[error("agent.model.{field}: {source}")]
    Model {
        /// `provider` or `name`.
        field: &'static str,
        /// The lookup failure.
        source: ModelLookupError,
    },
    /// A fallback model's provider or name is not configured.
    #[error("agent.model.fallbacks[{index}].{field}: {source}")]
    Fallback {
        /// Position in the list.
        index: usize,
        /// `provider` or `name`.
        field: &'static str,
        /// The lookup failure.
        source: ModelLookupError,
    },
    /// A configured tool is unusable.
    #[error(transparent)]
    Tools(#[from] ToolSetError),
    /// A referenced record does not exist.
    #[error("{what} {id} not found")]
    NotFound {
        /// What was looked for, e.g. `conversation`.
        what: &'static str,
        /// The id given.
        id: String,
    },
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The message is not running, so it cannot be cancelled.
    #[error("message {id} is not running (it is {status:?})")]
    NotRunning {
        /// The message.
        id: String,
        /// Its status.
        status: crate::domain::MessageStatus,
    },
    /// The conversation has a message that is still running.
    #[error("conversation {id} has a running message; cancel it or wait for it to end")]
    ConversationBusy {
        /// The conversation.
        id: String,
    },
    /// The run was to start alone (`conversation_policy` REJECT) and its conversation has a
    /// live run.
    #[error(
        "conversation_policy: the conversation has a live run ({live}); REJECT refuses another"
    )]
    ConversationTaken {
        /// The live run's message.
        live: crate::domain::MessageId,
    },
    /// The message is not waiting for what was delivered to it.
    #[error("the message is not waiting for {what}")]
    NotWaiting {
        /// What was delivered: `tool outputs`, `approval of tool calls`.
        what: &'static str,
    },
    /// An idempotency key came back with a different request.
    #[error("idempotency_key was already used with a different request")]
    KeyReused,
    /// The service is stopping and takes no new runs.
    #[error("the service is shutting down")]
    ShuttingDown,
    /// A per-tenant limit refuses the run.
    #[error("{limit}: {detail}")]
    LimitExceeded {
        /// The limit, as configured (`limits.runs_per_minute`).
        limit: &'static str,
        /// What the tenant is using.
        detail: String,
        /// How long to wait before the limit admits a run, when waiting helps.
        retry_after: Option<std::time::Duration>,
    },
    /// The store's last flush failed (a full disk, say): a run could announce nothing.
    #[error("the store cannot write (the database cannot be reached, or its disk is full); no run starts until it can, and health is NOT_SERVING meanwhile")]
    StoreUnwritable,
    /// A run ended without its last events stored: the store cannot write.
    #[error("the run's last events could not be recorded: the store cannot write (the database cannot be reached, or its disk is full); GetMessage shows how it ended")]
    EventsLost,
    /// The process serving the stream stopped and handed its run over to another.
    #[error("this replica is stopping and handed the run over; Attach again with the last seq received to follow it")]
    HandedOver,
    /// A run taken over was started by a version that kept no spec to rebuild it from.
    #[error("the run was started by an earlier version, which kept nothing to resume it from")]
    NotResumable,
    /// The task that wrote a new run's message and launched it failed (a bug).
    #[error("the run's start was interrupted by a failure of the service")]
    Interrupted,
}

impl From<ModelLookupError> for RunError {
    fn from(source: ModelLookupError) -> Self {
        let field = lookup_field(&source);
        Self::Model { field, source }
    }
}

/// The request field a failed model lookup names.
fn lookup_field(source: &ModelLookupError) -> &'static str {
    match source {
        ModelLookupError::UnknownProvider { .. } => "provider",
        ModelLookupError::UnknownModel { .. } => "name",
    }
}

/// How long a caller refused by a busy conversation is told to wait.
const CONVERSATION_RETRY: std::time::Duration = std::time::Duration::from_secs(1);

impl RunError {
    /// Fallback `index` cannot be resolved.
    pub fn fallback(index: usize, source: ModelLookupError) -> Self {
        let field = lookup_field(&source);
        Self::Fallback {
            index,
            field,
            source,
        }
    }

    /// The class of failure, for the API layer's one mapping.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Self::InvalidField(_) => ErrorKind::InvalidArgument,
            Self::Model { source, .. } | Self::Fallback { source, .. } => source.kind(),
            Self::Tools(err) => err.kind(),
            Self::NotFound { .. } => ErrorKind::NotFound,
            Self::Store(err) => err.kind(),
            Self::NotRunning { .. } | Self::NotResumable => ErrorKind::FailedPrecondition,
            Self::KeyReused => ErrorKind::AlreadyExists,
            Self::NotWaiting { .. } => ErrorKind::FailedPrecondition,
            Self::ConversationBusy { .. } => ErrorKind::FailedPrecondition,
            Self::ConversationTaken { .. } => ErrorKind::Aborted,
            Self::ShuttingDown | Self::EventsLost | Self::StoreUnwritable | Self::HandedOver => {
                ErrorKind::Unavailable
            }
            Self::LimitExceeded { .. } => ErrorKind::ResourceExhausted,
            Self::Interrupted => ErrorKind::Internal,
        }
    }

    /// How long a caller should wait before trying again, when waiting helps.
    pub fn retry_after(&self) -> Option<std::time::Duration> {
        if let Self::LimitExceeded { retry_after, .. } = self {
            *retry_after
        } else if let Self::ConversationTaken { .. } = self {
            // A live run may take long; a second is when a retry stops being a busy loop.
            Some(CONVERSATION_RETRY)
        } else {
            None
        }
    }

    /// A reason a client can branch on, with what it names.
    pub fn reason(&self) -> Option<(&'static str, Vec<(&'static str, String)>)> {
        if let Self::ConversationTaken { live } = self {
            Some(("CONVERSATION_BUSY", vec![("message_id", live.to_string())]))
        } else {
            None
        }
    }

    /// A missing record.
    pub fn not_found(what: &'static str, id: impl ToString) -> Self {
        Self::NotFound {
            what,
            id: id.to_string(),
        }
    }
}
