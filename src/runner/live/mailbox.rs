//! The mailbox of a waiting run: where a run posts the call ids it waits on (for its
//! caller's tool outputs, or for decisions on calls that need approval), and where
//! `SubmitToolOutputs` and `ApproveToolCalls` deliver them.
//!
//! The wait itself (status, event, timeout) belongs to the run; this is only the meeting
//! point, shared between the run and the registry. One run waits for one thing at a time.
//! A newer run of the conversation that stops this one leaves its reason here too, and a
//! steer that waits to join it its notice.

use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::oneshot;

pub use crate::domain::{ClientOutput, Decision};
use crate::domain::{FieldError, Interruption};
use crate::runner::error::RunError;

/// What a waiting run receives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Delivery {
    /// Results of the caller's own tools.
    Outputs(Vec<ClientOutput>),
    /// Decisions on calls that need approval.
    Decisions(Vec<Decision>),
}

impl Delivery {
    /// Whether this answers every one of `ids`, the calls a run waits on, once and
    /// nothing else; the refusal names the field at fault.
    pub fn answers(&self, ids: &[String]) -> Result<(), RunError> {
        Ok(check(self.awaited(), ids, &self.ids())?)
    }

    /// What a run must be waiting for to take this.
    pub fn awaited(&self) -> Awaited {
        match self {
            Self::Outputs(_) => Awaited::ToolOutputs,
            Self::Decisions(_) => Awaited::Approval,
        }
    }

    /// The call ids answered, in order.
    fn ids(&self) -> Vec<&str> {
        match self {
            Self::Outputs(outputs) => outputs.iter().map(|o| o.tool_call_id.as_str()).collect(),
            Self::Decisions(decisions) => {
                decisions.iter().map(|d| d.tool_call_id.as_str()).collect()
            }
        }
    }
}

/// What a run waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Awaited {
    /// Its caller's tool outputs.
    ToolOutputs,
    /// Decisions on calls that need approval.
    Approval,
}

impl Awaited {
    /// As an error text says it.
    fn describe(self) -> &'static str {
        match self {
            Self::ToolOutputs => "tool outputs",
            Self::Approval => "approval of tool calls",
        }
    }

    /// The request field that lists the answers.
    fn field(self) -> &'static str {
        match self {
            Self::ToolOutputs => "outputs",
            Self::Approval => "decisions",
        }
    }

    /// What each answer is called.
    fn answer(self) -> &'static str {
        match self {
            Self::ToolOutputs => "result",
            Self::Approval => "decision",
        }
    }
}

/// Calls a run waits on, and where to deliver what answers them.
struct Pending {
    awaited: Awaited,
    ids: Vec<String>,
    reply: oneshot::Sender<Delivery>,
}

/// The meeting point of one run and its caller's submissions.
///
/// A `std` mutex: it is held only to swap the slot, never across an await.
#[derive(Clone, Default)]
pub struct Mailbox {
    slot: Arc<Mutex<Option<Pending>>>,
    /// A delivery that came before its wait: kept for a run taken over while it waited,
    /// to which the caller answered while it had no owner, or before its new owner got
    /// back to the wait.
    early: Arc<Mutex<Option<Delivery>>>,
    /// The wait a run taken over while it waited is about to enter again: what answers it
    /// is taken meanwhile and kept for it.
    coming: Arc<Mutex<Option<Coming>>>,
    /// Set, once, when a newer run of the conversation stops this one: read at its end to
    /// tell an interruption from a cancel.
    interruption: Arc<std::sync::OnceLock<Interruption>>,
    /// Set when a steer waits to join the run; the run reads the store's steers before its
    /// next model call and clears it. A run that starts here, or goes on after a takeover,
    /// reads them once anyway: a notice lost with a process costs nothing.
    steers: Arc<std::sync::atomic::AtomicBool>,
}

/// A wait about to be entered again: what it waits for, on which calls.
type Coming = (Awaited, Vec<String>);

impl Mailbox {
    /// Starts waiting for `awaited` on `ids`; the wait ends when the returned value is
    /// dropped.
    pub fn expect(&self, awaited: Awaited, ids: Vec<String>) -> Expected {
        // Locks in one order everywhere (slot, coming, early), so a delivery is either
        // kept for this wait or delivered to it, never refused in between.
        let mut slot = self.lock();
        self.coming
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        let (reply, delivered) = oneshot::channel();
        let early = {
            let mut early = self.early.lock().unwrap_or_else(PoisonError::into_inner);
            let answers = early
                .as_ref()
                .is_some_and(|early| early.awaited() == awaited && early.answers(&ids).is_ok());
            if answers {
                early.take()
            } else {
                None
            }
        };
        match early {
            Some(early) => {
                let _ = reply.send(early);
            }
            None => {
                *slot = Some(Pending {
                    awaited,
                    ids,
                    reply,
                })
            }
        }
        drop(slot);
        Expected {
            mailbox: self.clone(),
            delivered,
        }
    }

    /// Delivers to the run waiting here. Every waited-on call must be answered, and only
    /// those; a refused delivery leaves the run waiting.
    pub fn deliver(&self, delivery: Delivery) -> Result<(), RunError> {
        let awaited = delivery.awaited();
        let mut guard = self.lock();
        let Some(pending) = guard.take() else {
            return self.keep_for_coming_wait(delivery);
        };
        if pending.awaited != awaited {
            *guard = Some(pending);
            return Err(not_waiting(awaited));
        }
        if let Err(err) = delivery.answers(&pending.ids) {
            *guard = Some(pending);
            return Err(err);
        }
        // A run that stopped waiting (cancelled or timed out) no longer listens; nothing to do.
        let _ = pending.reply.send(delivery);
        Ok(())
    }

    /// Takes deliveries answering `awaited` on `ids` before the wait is entered: a run
    /// taken over while it waited is about to wait for them again.
    pub fn expect_soon(&self, awaited: Awaited, ids: Vec<String>) {
        *self.coming.lock().unwrap_or_else(PoisonError::into_inner) = Some((awaited, ids));
    }

    /// A delivery while nothing waits: kept when it answers the wait about to be entered
    /// again ([`Self::expect_soon`]), else refused.
    fn keep_for_coming_wait(&self, delivery: Delivery) -> Result<(), RunError> {
        let awaited = delivery.awaited();
        let mut coming = self.coming.lock().unwrap_or_else(PoisonError::into_inner);
        let Some((expected, ids)) = coming.as_ref() else {
            return Err(not_waiting(awaited));
        };
        if *expected != awaited {
            return Err(not_waiting(awaited));
        }
        delivery.answers(ids)?;
        coming.take();
        drop(coming);
        self.deliver_early(delivery);
        Ok(())
    }

    /// Keeps `delivery` for the run's next wait, when it answers that wait: what a caller
    /// sent while the run had no owner.
    pub fn deliver_early(&self, delivery: Delivery) {
        *self.early.lock().unwrap_or_else(PoisonError::into_inner) = Some(delivery);
    }

    /// Marks the run as stopped by a newer run; the first interruption holds. The caller
    /// then fires the run's token.
    pub fn interrupt(&self, interruption: Interruption) {
        let _ = self.interruption.set(interruption);
    }

    /// Tells the run a steer waits to join it.
    pub fn steer_waits(&self) {
        self.steers
            .store(true, std::sync::atomic::Ordering::Release);
    }

    /// Whether a steer was said to wait since the last call, clearing the notice.
    pub fn take_steer_notice(&self) -> bool {
        self.steers.swap(false, std::sync::atomic::Ordering::AcqRel)
    }

    /// What stopped the run, when a newer run did.
    pub fn interruption(&self) -> Option<Interruption> {
        self.interruption.get().copied()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Pending>> {
        self.slot.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The refusal of a delivery to a message that does not wait for it.
pub fn not_waiting(awaited: Awaited) -> RunError {
    RunError::NotWaiting {
        what: awaited.describe(),
    }
}

/// A run's wait; dropping it stops waiting.
pub struct Expected {
    mailbox: Mailbox,
    delivered: oneshot::Receiver<Delivery>,
}

impl Expected {
    /// What was delivered; `None` if the mailbox was dropped without it.
    ///
    /// # Cancel safety
    /// Cancel safe: dropping the future leaves the wait in place until `self` is dropped.
    pub async fn delivered(&mut self) -> Option<Delivery> {
        (&mut self.delivered).await.ok()
    }
}

impl Drop for Expected {
    fn drop(&mut self) {
        self.mailbox.lock().take();
    }
}

fn check(awaited: Awaited, ids: &[String], answered: &[&str]) -> Result<(), FieldError> {
    let field = awaited.field();
    for (index, id) in answered.iter().enumerate() {
        if !ids.iter().any(|waited| waited == id) {
            return Err(FieldError::new(
                format!("{field}[{index}].tool_call_id"),
                format!("{id:?} is not a call the run is waiting for"),
            ));
        }
        if answered[..index].contains(id) {
            return Err(FieldError::new(
                format!("{field}[{index}].tool_call_id"),
                format!("{id:?} is answered twice"),
            ));
        }
    }
    let missing: Vec<String> = ids
        .iter()
        .filter(|id| !answered.contains(&id.as_str()))
        .map(|id| format!("{id:?}"))
        .collect();
    if missing.is_empty() {
        Ok(())
    } else {
        Err(FieldError::new(
            field,
            format!(
                "has no {} for tool_call_id {}",
                awaited.answer(),
                missing.join(", ")
            ),
        ))
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
        let ids = vec!["a".to_owned(), "b".to_owned(), "c".to_owned()];
        let outputs = Awaited::ToolOutputs;
        assert!(check(outputs, &ids, &["a", "b", "c"]).is_ok());
        assert_eq!(
            check(outputs, &ids, &["a", "c"]).unwrap_err().to_string(),
            "outputs has no result for tool_call_id \"b\""
        );
        assert_eq!(
            check(Awaited::Approval, &ids, &["b"])
                .unwrap_err()
                .to_string(),
            "decisions has no decision for tool_call_id \"a\", \"c\""
        );
        assert_eq!(
            check(outputs, &ids, &["a", "x"]).unwrap_err().to_string(),
            "outputs[1].tool_call_id \"x\" is not a call the run is waiting for"
        );
        assert!(check(outputs, &ids, &["a", "a", "b", "c"]).is_err());
    }

    fn outputs(ids: &[&str]) -> Delivery {
        Delivery::Outputs(ids.iter().map(|id| output(id)).collect())
    }

    #[tokio::test]
    async fn a_rejected_submission_leaves_the_run_waiting_and_dropping_the_wait_ends_it() {
        let mailbox = Mailbox::default();
        let mut expected = mailbox.expect(Awaited::ToolOutputs, vec!["a".into()]);
        assert!(mailbox.deliver(outputs(&["zzz"])).is_err());
        assert!(mailbox.deliver(outputs(&["a"])).is_ok());
        assert_eq!(expected.delivered().await, Some(outputs(&["a"])));
        assert!(matches!(
            mailbox.deliver(outputs(&["a"])),
            Err(RunError::NotWaiting { .. })
        ));
        let waiting = mailbox.expect(Awaited::ToolOutputs, vec!["b".into()]);
        drop(waiting);
        assert!(matches!(
            mailbox.deliver(outputs(&["b"])),
            Err(RunError::NotWaiting { .. })
        ));
    }

    #[tokio::test]
    async fn outputs_do_not_answer_a_wait_for_approval() {
        let mailbox = Mailbox::default();
        let mut expected = mailbox.expect(Awaited::Approval, vec!["a".into()]);
        let refused = mailbox.deliver(outputs(&["a"])).unwrap_err();
        assert_eq!(
            refused.to_string(),
            "the message is not waiting for tool outputs"
        );
        let decision = Delivery::Decisions(vec![Decision {
            tool_call_id: "a".into(),
            approve: false,
            reason: "no".into(),
        }]);
        mailbox.deliver(decision.clone()).unwrap();
        assert_eq!(expected.delivered().await, Some(decision));
    }

    #[tokio::test(start_paused = true)]
    async fn an_answer_that_came_before_its_wait_is_taken_by_the_wait_it_answers() {
        let mailbox = Mailbox::default();
        mailbox.deliver_early(Delivery::Outputs(vec![output("a")]));
        // A wait it does not answer leaves it for the next.
        let other = mailbox.expect(Awaited::ToolOutputs, vec!["b".into()]);
        drop(other);
        let mut wait = mailbox.expect(Awaited::ToolOutputs, vec!["a".into()]);
        assert_eq!(
            wait.delivered().await,
            Some(Delivery::Outputs(vec![output("a")]))
        );
        let mut later = mailbox.expect(Awaited::ToolOutputs, vec!["a".into()]);
        let nothing = tokio::time::timeout(std::time::Duration::from_millis(20), later.delivered());
        assert!(nothing.await.is_err(), "taken once");
    }

    #[tokio::test]
    async fn an_answer_to_a_wait_about_to_be_entered_again_is_kept_for_it() {
        let mailbox = Mailbox::default();
        assert!(mailbox
            .deliver(Delivery::Outputs(vec![output("a")]))
            .is_err());
        mailbox.expect_soon(Awaited::ToolOutputs, vec!["a".into()]);
        let wrong = mailbox.deliver(Delivery::Outputs(vec![output("b")]));
        assert!(matches!(wrong, Err(RunError::InvalidField(_))), "{wrong:?}");
        let approval = mailbox.deliver(Delivery::Decisions(Vec::new()));
        assert!(matches!(approval, Err(RunError::NotWaiting { .. })));
        mailbox
            .deliver(Delivery::Outputs(vec![output("a")]))
            .unwrap();
        let mut wait = mailbox.expect(Awaited::ToolOutputs, vec!["a".into()]);
        assert_eq!(
            wait.delivered().await,
            Some(Delivery::Outputs(vec![output("a")]))
        );
    }
}
