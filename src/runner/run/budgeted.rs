//! A run held to its budget: each model call paid for before it is made, and the run's
//! end when a budget runs out — a normal end, a last round for a final answer, or an
//! error, as the budget says.

use super::allowance::{self, completion_room, exhausted_text, worst_price};
use super::halt::Halt;
use super::RunTask;
use crate::domain::{BudgetKind, FinishReason, OnExhausted, Spent};
use crate::llm::ChatRequest;
use crate::runner::budget::{lower_max_tokens, reserved_answer_tokens};

impl RunTask {
    /// What the run spent so far.
    pub(super) fn spent(&self) -> Spent {
        let usage = self.state.spent_usage();
        Spent {
            tokens: usage.tokens.total_tokens,
            cost: usage.total_price,
            seconds: self
                .clock
                .as_ref()
                .map_or(0.0, |clock| clock.running().as_secs_f64()),
            tool_calls: self.state.tool_calls(),
        }
    }

    /// `request` as the budget lets it go out: refused when what is left cannot pay its
    /// prompt and `min_completion` tokens, else with `max_tokens` lowered so its worst case
    /// (at the highest price of the model and its fallbacks) fits.
    pub(super) fn afford(
        &self,
        mut request: ChatRequest,
        min_completion: u64,
    ) -> Result<ChatRequest, Halt> {
        if self.clock.as_ref().is_some_and(allowance::Clock::ran_out) {
            return Err(Halt::Exhausted(BudgetKind::WallClock));
        }
        let budget = &self.spec.agent.budget;
        if budget.tokens.is_none() && budget.cost.is_none() {
            return Ok(request);
        }
        let prompt = self.agent.model.info.tokenizer.count_request(&request) as u64;
        let price = worst_price(self.agent.candidates().map(|model| &model.info.pricing));
        let room = completion_room(budget, &self.spent(), prompt, &price, min_completion)
            .map_err(Halt::Exhausted)?;
        if let Some(room) = room {
            let asked = reserved_answer_tokens(&request.parameters);
            if asked == 0 || asked > room {
                lower_max_tokens(&mut request.parameters, room);
            }
        }
        Ok(request)
    }

    /// Keeps the running time with the message after each round, so an owner that takes
    /// the run over goes on counting from it.
    pub(super) fn keep_running_time(&mut self) {
        if let Some(clock) = &self.clock {
            self.message.running_seconds = clock.running().as_secs_f64();
            self.recorder.message(&self.message);
        }
    }

    /// Takes a round's calls' outcome: a tool-call budget spent ends the run before its
    /// next round (the round itself is whole).
    pub(super) fn note_spent_out(&mut self, ran: Result<(), Halt>) -> Result<(), Halt> {
        match ran {
            Err(Halt::Exhausted(kind)) => {
                self.spent_out = Some(kind);
                Ok(())
            }
            other => other,
        }
    }

    /// The budget that `outcome` ran out of, if it did: said so, or a stop by the run's
    /// own wall clock (the caller did not cancel).
    pub(super) fn exhaustion(&self, outcome: &Result<FinishReason, Halt>) -> Option<BudgetKind> {
        match outcome {
            Err(Halt::Exhausted(kind)) => Some(*kind),
            Err(Halt::Cancelled) if self.stopped_by_clock() => Some(BudgetKind::WallClock),
            Ok(_) | Err(Halt::Cancelled | Halt::Failed(_) | Halt::HandedOver) => None,
        }
    }

    fn stopped_by_clock(&self) -> bool {
        !self.control.cancel.is_cancelled()
            && self.clock.as_ref().is_some_and(allowance::Clock::ran_out)
    }

    /// Ends the run whose `kind` budget ran out as its budget says.
    pub(super) async fn exhausted(&mut self, kind: BudgetKind) -> Result<FinishReason, Halt> {
        let budget = self.spec.agent.budget.clone();
        tracing::info!(budget = kind.as_str(), "a budget of the run ran out");
        self.metrics.budget_exhausted(kind);
        self.message.budget_exhausted = Some(kind);
        match budget.on_exhausted {
            OnExhausted::Stop => Ok(FinishReason::BudgetExhausted),
            OnExhausted::Error => Err(Halt::failed(
                "budget_exhausted",
                exhausted_text(kind, &budget),
            )),
            OnExhausted::FinalAnswer if kind == BudgetKind::WallClock => {
                Ok(FinishReason::BudgetExhausted)
            }
            OnExhausted::FinalAnswer => {
                self.final_answer().await?;
                Ok(FinishReason::BudgetExhausted)
            }
        }
    }

    /// One more round without tools, for an answer from what the run found so far; skipped
    /// when what is left cannot pay its prompt and 256 completion tokens.
    async fn final_answer(&mut self) -> Result<(), Halt> {
        let position = self.state.iterations() + 1;
        let outcome = self
            .round(position, true, &[], allowance::MIN_FINAL_COMPLETION)
            .await;
        match outcome {
            Ok(_) | Err(Halt::Exhausted(_)) => Ok(()),
            Err(Halt::Cancelled) if self.stopped_by_clock() => Ok(()),
            Err(halt) => Err(halt),
        }
    }
}
