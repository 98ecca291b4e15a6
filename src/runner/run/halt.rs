//! Why a run stopped before its end, and racing a wait against the run's cancellation.

use std::future::Future;

use tokio_util::sync::CancellationToken;

use crate::domain::{BudgetKind, RunFailure};
use crate::llm::LlmError;
use crate::store::StoreError;

/// Why the loop stopped early.
#[derive(Debug)]
pub enum Halt {
    /// The run's token fired (caller, client deadline, client gone, or shutdown).
    Cancelled,
    /// Something failed; recorded on the message and sent as the `error` event.
    Failed(RunFailure),
    /// The process is stopping and the run reached the end of a step: it is left for
    /// another to go on with.
    HandedOver,
    /// A budget of the run ran out; the run ends as its budget says.
    Exhausted(BudgetKind),
}

impl Halt {
    /// A failure with a stable `code` and a message for people.
    pub fn failed(code: &str, message: impl Into<String>) -> Self {
        Halt::Failed(RunFailure {
            code: code.to_owned(),
            message: message.into(),
        })
    }
}

impl From<StoreError> for Halt {
    fn from(err: StoreError) -> Self {
        tracing::error!(error = %err, "store failure during a run");
        Halt::failed("store_error", err.to_string())
    }
}

impl From<LlmError> for Halt {
    fn from(err: LlmError) -> Self {
        tracing::warn!(error = %err, "LLM call failed");
        Halt::failed(err.code(), err.to_string())
    }
}

/// Awaits `fut` unless `cancel` fires first.
///
/// # Cancel safety
/// When the token wins, `fut` is dropped; callers pass futures whose drop is the stop
/// (an HTTP stream read, a tool call), never a half-done write.
pub async fn or_cancel<T>(
    cancel: &CancellationToken,
    fut: impl Future<Output = T>,
) -> Result<T, Halt> {
    tokio::select! {
        biased;
        _ = cancel.cancelled() => Err(Halt::Cancelled),
        out = fut => Ok(out),
    }
}
