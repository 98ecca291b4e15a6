//! How a run ends: the message's final state and the last event, from the loop's outcome.
//! Cancellation by shutdown is an interruption, by anyone else a normal end; a failure is
//! recorded on the message and sent as the `error` event.

use super::halt::Halt;
use super::state::RunState;
use crate::domain::{FinishReason, Interruption, Message, MessageStatus, RunEvent, RunFailure};

/// Who stopped a run that was stopped: tells a newer run's interruption and a shutdown from
/// a caller's cancel.
pub struct Stopper {
    /// The process is shutting down.
    pub shutting_down: bool,
    /// A newer run of the conversation stopped it.
    pub interruption: Option<Interruption>,
}

/// Sets the message's final state from `outcome` and returns the event that announces it.
/// `stopper` tells who stopped a stopped run; `latency` is the run's wall-clock seconds.
pub fn conclude(
    message: &mut Message,
    state: &RunState,
    outcome: Result<FinishReason, Halt>,
    stopper: Stopper,
    latency: f64,
) -> RunEvent {
    message.answer = state.answer();
    message.retriever_resources = state.resources();
    if let Some((document, text)) = state.document() {
        // The answer is the document alone, not the text of earlier rounds before it.
        message.answer.clone_from(text);
        message.structured_output = Some(document.clone());
    }
    message.output_invalid = state.output_invalid().map(str::to_owned);
    message.usage = state.usage(latency);
    message.iterations = state.iterations();
    message.updated_at = crate::domain::now();
    match outcome {
        Ok(reason) => end(message, MessageStatus::Completed, reason),
        Err(Halt::Exhausted(kind)) => {
            message.budget_exhausted = Some(kind);
            end(
                message,
                MessageStatus::Completed,
                FinishReason::BudgetExhausted,
            )
        }
        Err(Halt::Cancelled | Halt::HandedOver) => stopped(message, stopper),
        Err(Halt::Failed(failure)) => fail(message, MessageStatus::Failed, failure),
    }
}

/// The end of a run stopped before its own: by a newer run, by a shutdown, or by its caller.
fn stopped(message: &mut Message, stopper: Stopper) -> RunEvent {
    match stopper {
        Stopper {
            interruption: Some(interruption),
            ..
        } => message.end_interrupted(interruption),
        Stopper {
            shutting_down: true,
            ..
        } => fail(
            message,
            MessageStatus::Interrupted,
            RunFailure {
                code: "shutdown".to_owned(),
                message: "the service shut down while the run was in progress".to_owned(),
            },
        ),
        Stopper { .. } => end(message, MessageStatus::Cancelled, FinishReason::Cancelled),
    }
}

fn end(message: &mut Message, status: MessageStatus, reason: FinishReason) -> RunEvent {
    message.end(status, reason)
}

fn fail(message: &mut Message, status: MessageStatus, failure: RunFailure) -> RunEvent {
    message.status = status;
    message.error = Some(failure.clone());
    RunEvent::Error {
        failure,
        usage: Box::new(message.usage.clone()),
        iterations: message.iterations,
    }
}
