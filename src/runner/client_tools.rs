//! Tools the caller runs: the loop hands their calls to the client in a
//! `tool_calls_required` event, marks the message as waiting, and resumes when
//! `SubmitToolOutputs` delivers every result, or fails the run when the wait times out.

use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::oneshot;

use super::agent_loop::{AgentRun, Halt};
use super::RunError;
use crate::domain::{FieldError, MessageStatus, RunFailure, ToolCallRecord};
use crate::events::RunEvent;

/// One result the caller submitted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientOutput {
    /// The call it answers.
    pub tool_call_id: String,
    /// The tool's output.
    pub output: String,
    /// Set when the tool failed; the model sees it as the observation.
    pub error: String,
}

/// Calls a run waits for, and where to deliver their results.
pub struct Pending {
    ids: Vec<String>,
    reply: oneshot::Sender<Vec<ClientOutput>>,
}

/// The slot a run puts its pending calls in, shared with `SubmitToolOutputs`.
///
/// A `std` mutex: it is held only to swap the slot, never across an await.
pub type PendingSlot = Arc<Mutex<Option<Pending>>>;

/// Delivers submitted results to the run waiting in `slot`. Every waited-for call must be
/// answered, and only those.
pub fn deliver(slot: &PendingSlot, outputs: Vec<ClientOutput>) -> Result<(), RunError> {
    let mut guard = slot.lock().unwrap_or_else(PoisonError::into_inner);
    let Some(pending) = guard.take() else {
        return Err(RunError::NotWaiting);
    };
    if let Err(err) = check(&pending.ids, &outputs) {
        *guard = Some(pending);
        return Err(err.into());
    }
    // A run that stopped waiting (cancelled or timed out) no longer listens; nothing to do.
    let _ = pending.reply.send(outputs);
    Ok(())
}

fn check(ids: &[String], outputs: &[ClientOutput]) -> Result<(), FieldError> {
    for (index, output) in outputs.iter().enumerate() {
        if !ids.contains(&output.tool_call_id) {
            return Err(FieldError::new(
                format!("outputs[{index}].tool_call_id"),
                format!(
                    "{:?} is not a call the run is waiting for",
                    output.tool_call_id
                ),
            ));
        }
        if outputs[..index]
            .iter()
            .any(|o| o.tool_call_id == output.tool_call_id)
        {
            return Err(FieldError::new(
                format!("outputs[{index}].tool_call_id"),
                format!("{:?} is answered twice", output.tool_call_id),
            ));
        }
    }
    match ids
        .iter()
        .find(|id| !outputs.iter().any(|o| &o.tool_call_id == *id))
    {
        Some(missing) => Err(FieldError::new(
            "outputs",
            format!("has no result for tool_call_id {missing:?}"),
        )),
        None => Ok(()),
    }
}

impl AgentRun {
    /// Hands the round's client calls (at `indices` of the current thought) to the caller
    /// and records what it sends back.
    pub(super) async fn run_client_calls(&mut self, indices: Vec<usize>) -> Result<(), Halt> {
        let mut waiting = Vec::new();
        for index in indices {
            let Some(call) = self
                .current
                .as_ref()
                .and_then(|t| t.tool_calls.get(index))
                .cloned()
            else {
                continue;
            };
            match self.tools.check_client_call(&call.name, &call.arguments) {
                Ok(()) => waiting.push((index, call)),
                Err(invocation) => self.record_observation(index, *invocation)?,
            }
        }
        if waiting.is_empty() {
            return Ok(());
        }
        let calls: Vec<ToolCallRecord> = waiting.iter().map(|(_, call)| call.clone()).collect();
        let outputs = self.wait_for_outputs(calls).await?;
        let waited = self
            .waiting_since
            .take()
            .map_or(0.0, |t| t.elapsed().as_secs_f64());
        for (index, call) in waiting {
            let output = outputs.iter().find(|o| o.tool_call_id == call.id).cloned();
            let (text, error) = output.map_or((String::new(), None), |o| (o.output, Some(o.error)));
            let invocation = self.tools.client_result(&call.name, text, error, waited);
            self.record_observation(index, invocation)?;
        }
        Ok(())
    }

    async fn wait_for_outputs(
        &mut self,
        calls: Vec<ToolCallRecord>,
    ) -> Result<Vec<ClientOutput>, Halt> {
        let (reply, delivered) = oneshot::channel();
        let ids = calls.iter().map(|c| c.id.clone()).collect();
        *self
            .client_slot
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(Pending { ids, reply });
        self.set_status(MessageStatus::WaitingToolOutputs)?;
        let thought_id = self.current.as_ref().map(|t| t.id).unwrap_or_default();
        self.emitter
            .emit(RunEvent::ToolCallsRequired { thought_id, calls });
        self.waiting_since = Some(tokio::time::Instant::now());
        let limit = self.settings.client_tool_timeout;
        let outcome = tokio::select! {
            biased;
            _ = self.cancel.cancelled() => Err(Halt::Cancelled),
            _ = tokio::time::sleep(limit) => Err(Halt::Failed(RunFailure {
                code: "client_tool_timeout".to_owned(),
                message: format!("no tool outputs were submitted within {}s", limit.as_secs()),
            })),
            outputs = delivered => outputs.map_err(|_| Halt::Cancelled),
        };
        self.client_slot
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        let outputs = outcome?;
        self.set_status(MessageStatus::Running)?;
        Ok(outputs)
    }

    fn set_status(&mut self, status: MessageStatus) -> Result<(), Halt> {
        self.message.status = status;
        self.message.updated_at = crate::domain::now();
        self.store
            .update_message(&self.spec.tenant, &self.message)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn output(id: &str) -> ClientOutput {
        ClientOutput {
            tool_call_id: id.into(),
            output: "ok".into(),
            error: String::new(),
        }
    }

    #[test]
    fn every_waited_call_must_be_answered_once_and_nothing_else() {
        let ids = vec!["a".to_owned(), "b".to_owned()];
        assert!(check(&ids, &[output("a"), output("b")]).is_ok());
        assert_eq!(
            check(&ids, &[output("a")]).unwrap_err().to_string(),
            "outputs has no result for tool_call_id \"b\""
        );
        assert_eq!(
            check(&ids, &[output("a"), output("x")])
                .unwrap_err()
                .to_string(),
            "outputs[1].tool_call_id \"x\" is not a call the run is waiting for"
        );
        assert!(check(&ids, &[output("a"), output("a"), output("b")]).is_err());
    }

    #[test]
    fn a_rejected_submission_leaves_the_run_waiting() {
        let slot: PendingSlot = Arc::default();
        let (reply, _rx) = oneshot::channel();
        *slot.lock().unwrap() = Some(Pending {
            ids: vec!["a".into()],
            reply,
        });
        assert!(deliver(&slot, vec![output("zzz")]).is_err());
        assert!(deliver(&slot, vec![output("a")]).is_ok());
        assert!(matches!(
            deliver(&slot, vec![output("a")]),
            Err(RunError::NotWaiting)
        ));
    }
}
