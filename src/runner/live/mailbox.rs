//! The client-tool mailbox: where a run waiting for the results of tools its caller runs
//! posts the call ids it waits for, and where `SubmitToolOutputs` delivers them.
//!
//! The wait itself (status, event, timeout) belongs to the run; this is only the meeting
//! point, shared between the run and the registry.

use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::oneshot;

use crate::domain::FieldError;
use crate::runner::error::RunError;

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
struct Pending {
    ids: Vec<String>,
    reply: oneshot::Sender<Vec<ClientOutput>>,
}

/// The meeting point of one run and its caller's submissions.
///
/// A `std` mutex: it is held only to swap the slot, never across an await.
#[derive(Clone, Default)]
pub struct Mailbox {
    slot: Arc<Mutex<Option<Pending>>>,
}

impl Mailbox {
    /// Starts waiting for results of `ids`; the wait ends when the returned value is dropped.
    pub fn expect(&self, ids: Vec<String>) -> Expected {
        let (reply, delivered) = oneshot::channel();
        *self.lock() = Some(Pending { ids, reply });
        Expected {
            mailbox: self.clone(),
            delivered,
        }
    }

    /// Delivers submitted results to the run waiting here. Every waited-for call must be
    /// answered, and only those; a refused submission leaves the run waiting.
    pub fn deliver(&self, outputs: Vec<ClientOutput>) -> Result<(), RunError> {
        let mut guard = self.lock();
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

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Pending>> {
        self.slot.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A run's wait for its caller's results; dropping it stops waiting.
pub struct Expected {
    mailbox: Mailbox,
    delivered: oneshot::Receiver<Vec<ClientOutput>>,
}

impl Expected {
    /// The results, once delivered; `None` if the mailbox was dropped without them.
    ///
    /// # Cancel safety
    /// Cancel safe: dropping the future leaves the wait in place until `self` is dropped.
    pub async fn results(&mut self) -> Option<Vec<ClientOutput>> {
        (&mut self.delivered).await.ok()
    }
}

impl Drop for Expected {
    fn drop(&mut self) {
        self.mailbox.lock().take();
    }
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

    #[tokio::test]
    async fn a_rejected_submission_leaves_the_run_waiting_and_dropping_the_wait_ends_it() {
        let mailbox = Mailbox::default();
        let mut expected = mailbox.expect(vec!["a".into()]);
        assert!(mailbox.deliver(vec![output("zzz")]).is_err());
        assert!(mailbox.deliver(vec![output("a")]).is_ok());
        assert_eq!(expected.results().await, Some(vec![output("a")]));
        assert!(matches!(
            mailbox.deliver(vec![output("a")]),
            Err(RunError::NotWaiting)
        ));
        let waiting = mailbox.expect(vec!["b".into()]);
        drop(waiting);
        assert!(matches!(
            mailbox.deliver(vec![output("b")]),
            Err(RunError::NotWaiting)
        ));
    }
}
