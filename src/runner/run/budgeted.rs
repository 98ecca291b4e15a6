//! A run held to its budget: each model call paid for before it is made, and how the run
//! ends when a budget runs out (a normal end, a last round for a final answer, or an
//! error, as the budget says). Decisions only: the run does what they say.

use super::agent::Agent;
use super::allowance::{completion_room, exhausted_text, worst_price, Clock};
use super::halt::Halt;
use super::state::RunState;
use crate::domain::{BudgetKind, FinishReason, OnExhausted, RunBudget, Spent};
use crate::llm::ChatRequest;
use crate::runner::budget::{lower_max_tokens, reserved_answer_tokens};

/// What a run may spend, its wall clock, and a budget the last round's calls ran out of.
pub(super) struct Budgeted {
    budget: RunBudget,
    /// The wall clock of a run with a time budget.
    pub clock: Option<Clock>,
    /// A budget the last round's calls ran out of: the run ends before another round.
    spent_out: Option<BudgetKind>,
}

/// How a run whose budget ran out ends.
#[derive(Debug)]
pub(super) enum Ending {
    /// A normal end with the answer written so far.
    Stop,
    /// One more round without tools, for a final answer.
    FinalAnswer,
    /// An error: the message fails.
    Fail(Halt),
}

impl Budgeted {
    /// `budget`, and the wall clock of a run with a time budget.
    pub fn new(budget: RunBudget, clock: Option<Clock>) -> Self {
        Self {
            budget,
            clock,
            spent_out: None,
        }
    }

    /// What the run of `state` spent so far.
    pub fn spent(&self, state: &RunState) -> Spent {
        let usage = state.spent_usage();
        Spent {
            tokens: usage.tokens.total_tokens,
            cost: usage.total_price,
            seconds: self.running_seconds().unwrap_or(0.0),
            tool_calls: state.tool_calls(),
        }
    }

    /// Seconds the run has been running, when it has a wall clock.
    pub fn running_seconds(&self) -> Option<f64> {
        self.clock
            .as_ref()
            .map(|clock| clock.running().as_secs_f64())
    }

    /// `request` as the budget lets it go out, having `spent` so far: refused when what is
    /// left cannot pay its prompt and `min_completion` tokens, else with `max_tokens`
    /// lowered so its worst case (at the highest price of `agent`'s model and its
    /// fallbacks) fits.
    pub fn afford(
        &self,
        mut request: ChatRequest,
        min_completion: u64,
        spent: &Spent,
        agent: &Agent,
    ) -> Result<ChatRequest, Halt> {
        if self.clock.as_ref().is_some_and(Clock::ran_out) {
            return Err(Halt::Exhausted(BudgetKind::WallClock));
        }
        if self.budget.tokens.is_none() && self.budget.cost.is_none() {
            return Ok(request);
        }
        let prompt = agent.model.info.tokenizer.count_request(&request) as u64;
        let price = worst_price(agent.candidates().map(|model| &model.info.pricing));
        let room = completion_room(&self.budget, spent, prompt, &price, min_completion)
            .map_err(Halt::Exhausted)?;
        if let Some(room) = room {
            let asked = reserved_answer_tokens(&request.parameters);
            if asked == 0 || asked > room {
                lower_max_tokens(&mut request.parameters, room);
            }
        }
        Ok(request)
    }

    /// Takes a round's calls' outcome: a budget they spent ends the run before its next
    /// round (the round itself is whole).
    pub fn note_spent_out(&mut self, ran: Result<(), Halt>) -> Result<(), Halt> {
        match ran {
            Err(Halt::Exhausted(kind)) => {
                self.spent_out = Some(kind);
                Ok(())
            }
            other => other,
        }
    }

    /// The budget the last round's calls ran out of, once.
    pub fn take_spent_out(&mut self) -> Option<BudgetKind> {
        self.spent_out.take()
    }

    /// The budget that `outcome` ran out of, if it did: said so, or a stop by the run's
    /// own wall clock when the caller did not cancel.
    pub fn exhaustion(
        &self,
        outcome: &Result<FinishReason, Halt>,
        caller_cancelled: bool,
    ) -> Option<BudgetKind> {
        match outcome {
            Err(Halt::Exhausted(kind)) => Some(*kind),
            Err(Halt::Cancelled) if self.stopped_by_clock(caller_cancelled) => {
                Some(BudgetKind::WallClock)
            }
            Ok(_) | Err(Halt::Cancelled | Halt::Failed(_) | Halt::HandedOver) => None,
        }
    }

    /// Whether the run's own wall clock stopped it (and not its caller).
    pub fn stopped_by_clock(&self, caller_cancelled: bool) -> bool {
        !caller_cancelled && self.clock.as_ref().is_some_and(Clock::ran_out)
    }

    /// How the run ends when its `kind` budget ran out: as the budget says, except that a
    /// run out of time has no time for a final answer.
    pub fn ending(&self, kind: BudgetKind) -> Ending {
        match self.budget.on_exhausted {
            OnExhausted::Stop => Ending::Stop,
            OnExhausted::Error => Ending::Fail(Halt::failed(
                "budget_exhausted",
                exhausted_text(kind, &self.budget),
            )),
            OnExhausted::FinalAnswer if kind == BudgetKind::WallClock => Ending::Stop,
            OnExhausted::FinalAnswer => Ending::FinalAnswer,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio_util::sync::CancellationToken;

    use super::*;

    fn budget(on_exhausted: OnExhausted) -> RunBudget {
        RunBudget {
            tokens: Some(100),
            on_exhausted,
            ..RunBudget::default()
        }
    }

    #[test]
    fn an_exhausted_budget_ends_the_run_as_the_budget_says() {
        let stop = Budgeted::new(budget(OnExhausted::Stop), None);
        assert!(matches!(stop.ending(BudgetKind::Tokens), Ending::Stop));
        let last = Budgeted::new(budget(OnExhausted::FinalAnswer), None);
        assert!(matches!(
            last.ending(BudgetKind::Tokens),
            Ending::FinalAnswer
        ));
        assert!(
            matches!(last.ending(BudgetKind::WallClock), Ending::Stop),
            "no time is left for a final answer"
        );
        let fail = Budgeted::new(budget(OnExhausted::Error), None);
        let Ending::Fail(Halt::Failed(failure)) = fail.ending(BudgetKind::Tokens) else {
            panic!("an error budget fails the run");
        };
        assert_eq!(failure.code, "budget_exhausted");
    }

    #[test]
    fn calls_that_spent_a_budget_end_the_run_before_its_next_round_once() {
        let mut budgeted = Budgeted::new(budget(OnExhausted::Stop), None);
        let ran = budgeted.note_spent_out(Err(Halt::Exhausted(BudgetKind::ToolCalls)));
        assert!(ran.is_ok(), "the round itself is whole");
        assert_eq!(budgeted.take_spent_out(), Some(BudgetKind::ToolCalls));
        assert_eq!(budgeted.take_spent_out(), None);
        assert!(matches!(
            budgeted.note_spent_out(Err(Halt::Cancelled)),
            Err(Halt::Cancelled)
        ));
    }

    #[tokio::test(start_paused = true)]
    async fn a_stop_by_the_clock_is_the_budget_but_a_callers_cancel_is_not() {
        let work = CancellationToken::new();
        let mut clock = Clock::new(
            Duration::from_secs(1),
            Duration::ZERO,
            work.clone(),
            tokio_util::task::TaskTracker::new(),
        );
        clock.start();
        let budgeted = Budgeted::new(budget(OnExhausted::Stop), Some(clock));
        let cancelled: Result<FinishReason, Halt> = Err(Halt::Cancelled);
        assert_eq!(
            budgeted.exhaustion(&cancelled, false),
            None,
            "still running"
        );
        tokio::time::sleep(Duration::from_millis(1_100)).await;
        assert!(work.is_cancelled(), "the clock stops the work");
        assert_eq!(
            budgeted.exhaustion(&cancelled, false),
            Some(BudgetKind::WallClock)
        );
        assert_eq!(
            budgeted.exhaustion(&cancelled, true),
            None,
            "the caller cancelled"
        );
        let exhausted: Result<FinishReason, Halt> = Err(Halt::Exhausted(BudgetKind::Cost));
        assert_eq!(
            budgeted.exhaustion(&exhausted, true),
            Some(BudgetKind::Cost)
        );
    }
}
