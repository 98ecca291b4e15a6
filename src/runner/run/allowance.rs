//! Holding a run to its budget: what a model call may cost before it is made (the prompt
//! paid, `max_tokens` lowered so the worst case fits), how many of a round's tool calls
//! may run, and the wall clock, which counts running time only and stops the call in
//! flight when it runs out.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rust_decimal::Decimal;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::domain::{BudgetKind, Pricing, RunBudget, Spent};

/// The fewest completion tokens a normal round must be able to pay for.
pub const MIN_ROUND_COMPLETION: u64 = 16;
/// The fewest completion tokens the final-answer round must be able to pay for.
pub const MIN_FINAL_COMPLETION: u64 = 256;

/// The most a model call may write so that its worst case stays within `budget`, given
/// what was `spent` and a prompt of `prompt_tokens` priced (at worst) at `price`; `None`
/// when neither tokens nor cost are limited. A call that cannot pay its prompt and
/// `min_completion` tokens is refused with the budget that is short.
pub fn completion_room(
    budget: &RunBudget,
    spent: &Spent,
    prompt_tokens: u64,
    price: &Pricing,
    min_completion: u64,
) -> Result<Option<u64>, BudgetKind> {
    let mut room: Option<u64> = None;
    if let Some(limit) = budget.tokens {
        let left = limit.saturating_sub(spent.tokens);
        if left < prompt_tokens.saturating_add(min_completion) {
            return Err(BudgetKind::Tokens);
        }
        room = Some(left - prompt_tokens);
    }
    if let Some(limit) = budget.cost {
        // Saturating throughout: limits, prices and spend are each bounded where they are
        // read, but their products and quotients need not be.
        let million = Decimal::from(1_000_000u32);
        let left = limit.saturating_sub(spent.cost);
        let prompt_cost =
            Decimal::from(prompt_tokens).saturating_mul(price.input_per_million) / million;
        let per_token = price.output_per_million / million;
        let floor =
            prompt_cost.saturating_add(Decimal::from(min_completion).saturating_mul(per_token));
        if left <= Decimal::ZERO || left < floor {
            return Err(BudgetKind::Cost);
        }
        if per_token > Decimal::ZERO {
            let tokens = left
                .saturating_sub(prompt_cost)
                .checked_div(per_token)
                .map_or(u64::MAX, |tokens| {
                    u64::try_from(tokens.floor()).unwrap_or(u64::MAX)
                });
            room = Some(room.map_or(tokens, |room| room.min(tokens)));
        }
    }
    Ok(room)
}

/// The highest prices among `prices`: what a call that may fall back to any of them can
/// cost at worst.
pub fn worst_price<'a>(prices: impl IntoIterator<Item = &'a Pricing>) -> Pricing {
    let mut worst = Pricing::default();
    for price in prices {
        worst.input_per_million = worst.input_per_million.max(price.input_per_million);
        worst.output_per_million = worst.output_per_million.max(price.output_per_million);
        worst.currency.clone_from(&price.currency);
    }
    worst
}

/// How many more tool calls `budget` allows after `made`; `None` is no limit.
pub fn tool_calls_left(budget: &RunBudget, made: u32) -> Option<u32> {
    budget.tool_calls.map(|limit| limit.saturating_sub(made))
}

/// Why a run stopped, for its error and its log.
pub fn exhausted_text(kind: BudgetKind, budget: &RunBudget) -> String {
    match kind {
        BudgetKind::Tokens => format!(
            "the run's token budget ({}) cannot pay for another model call",
            budget.tokens.unwrap_or_default()
        ),
        BudgetKind::Cost => format!(
            "the run's cost budget ({}) cannot pay for another model call",
            budget.cost.unwrap_or_default()
        ),
        BudgetKind::WallClock => format!(
            "the run's wall-clock budget ({} s) ran out",
            budget.seconds.unwrap_or_default()
        ),
        BudgetKind::ToolCalls => format!(
            "the run's tool-call budget ({}) is spent",
            budget.tool_calls.unwrap_or_default()
        ),
    }
}

/// The wall clock of a run with a time budget: counts while the run runs, stands still
/// while it waits on the caller, and fires `stop` once the budget is spent, so the model
/// or tool call in flight ends.
pub struct Clock {
    limit: Duration,
    /// Running time before `since`.
    before: Duration,
    /// When the clock last started, while it runs.
    since: Option<Instant>,
    stop: CancellationToken,
    ran_out: Arc<AtomicBool>,
    timer: Option<tokio::task::JoinHandle<()>>,
    /// Where the timer runs.
    tasks: TaskTracker,
}

impl Clock {
    /// A stopped clock of `limit` that has counted `before` already (under an earlier
    /// owner); `stop` fires when it runs out. Its timer runs on `tasks` (the runner's, so
    /// shutdown waits for it).
    pub fn new(
        limit: Duration,
        before: Duration,
        stop: CancellationToken,
        tasks: TaskTracker,
    ) -> Self {
        Self {
            limit,
            before,
            since: None,
            stop,
            ran_out: Arc::new(AtomicBool::new(false)),
            timer: None,
            tasks,
        }
    }

    /// Running time so far.
    pub fn running(&self) -> Duration {
        self.before + self.since.map_or(Duration::ZERO, |since| since.elapsed())
    }

    /// Whether the time budget ran out.
    pub fn ran_out(&self) -> bool {
        self.ran_out.load(Ordering::Acquire) || self.running() >= self.limit
    }

    /// Starts counting (again).
    pub fn start(&mut self) {
        if self.since.is_some() {
            return;
        }
        let now = Instant::now();
        self.since = Some(now);
        let left = self.limit.saturating_sub(self.before);
        let (stop, ran_out) = (self.stop.clone(), Arc::clone(&self.ran_out));
        self.timer = Some(self.tasks.spawn(async move {
            tokio::time::sleep_until(now + left).await;
            ran_out.store(true, Ordering::Release);
            stop.cancel();
        }));
    }

    /// Stops counting while the run waits on the caller.
    pub fn pause(&mut self) {
        if let Some(since) = self.since.take() {
            self.before += since.elapsed();
        }
        if let Some(timer) = self.timer.take() {
            timer.abort();
        }
    }
}

impl Drop for Clock {
    fn drop(&mut self) {
        if let Some(timer) = self.timer.take() {
            timer.abort();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn priced(input: i64, output: i64) -> Pricing {
        Pricing {
            input_per_million: Decimal::from(input),
            output_per_million: Decimal::from(output),
            ..Pricing::default()
        }
    }

    #[test]
    fn a_token_budget_pays_the_prompt_then_lowers_max_tokens() {
        let budget = RunBudget {
            tokens: Some(1000),
            ..RunBudget::default()
        };
        let spent = Spent {
            tokens: 600,
            ..Spent::default()
        };
        let free = Pricing::default();
        assert_eq!(
            completion_room(&budget, &spent, 300, &free, MIN_ROUND_COMPLETION),
            Ok(Some(100))
        );
        assert_eq!(
            completion_room(&budget, &spent, 390, &free, MIN_ROUND_COMPLETION),
            Err(BudgetKind::Tokens)
        );
        assert_eq!(
            completion_room(&budget, &spent, 300, &free, MIN_FINAL_COMPLETION),
            Err(BudgetKind::Tokens)
        );
        assert_eq!(
            completion_room(&RunBudget::default(), &spent, 300, &free, 16),
            Ok(None)
        );
    }

    #[test]
    fn a_cost_budget_stops_before_a_call_it_cannot_pay() {
        // 1 per million in, 10 per million out; 0.001 left.
        let budget = RunBudget {
            cost: Some(Decimal::new(2, 3)),
            ..RunBudget::default()
        };
        let spent = Spent {
            cost: Decimal::new(1, 3),
            ..Spent::default()
        };
        let price = priced(1, 10);
        // 500 prompt tokens cost 0.0005; 0.0005 left buys 50 completion tokens.
        assert_eq!(
            completion_room(&budget, &spent, 500, &price, 16),
            Ok(Some(50))
        );
        assert_eq!(
            completion_room(&budget, &spent, 900, &price, 16),
            Err(BudgetKind::Cost)
        );
    }

    #[test]
    fn a_huge_budget_over_a_tiny_price_saturates_instead_of_overflowing() {
        let budget = RunBudget {
            cost: Some(Decimal::MAX),
            ..RunBudget::default()
        };
        let price = Pricing {
            output_per_million: Decimal::new(1, 9),
            input_per_million: Decimal::MAX,
            ..Pricing::default()
        };
        assert_eq!(
            completion_room(&budget, &Spent::default(), u64::MAX, &price, 16),
            Ok(Some(u64::MAX))
        );
        let cheap_prompt = Pricing {
            input_per_million: Decimal::ZERO,
            ..price
        };
        assert_eq!(
            completion_room(&budget, &Spent::default(), 10, &cheap_prompt, 16),
            Ok(Some(u64::MAX))
        );
    }

    #[test]
    fn the_worst_price_is_the_highest_of_each() {
        let worst = worst_price([&priced(1, 10), &priced(3, 4)]);
        assert_eq!(
            (worst.input_per_million, worst.output_per_million),
            (Decimal::from(3), Decimal::from(10))
        );
    }

    #[tokio::test(start_paused = true)]
    async fn the_clock_stands_still_while_paused_and_fires_once_spent() {
        let stop = CancellationToken::new();
        let mut clock = Clock::new(
            Duration::from_secs(10),
            Duration::from_secs(4),
            stop.clone(),
            TaskTracker::new(),
        );
        clock.start();
        tokio::time::sleep(Duration::from_secs(3)).await;
        clock.pause();
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert!(!stop.is_cancelled());
        assert_eq!(clock.running(), Duration::from_secs(7));
        clock.start();
        tokio::time::sleep(Duration::from_millis(2_900)).await;
        assert!(!stop.is_cancelled());
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(stop.is_cancelled());
        assert!(clock.ran_out());
    }
}
