//! What one run may spend — tokens, cost, running time, tool calls — and how it ends when
//! one of them runs out. The rules (lowering, ceilings, what is left) live here once, for
//! the API, the runner and a run taken over alike.

use rust_decimal::Decimal;
use serde::{Deserialize, Serialize};

use super::TenantLimits;

/// Which budget ran out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BudgetKind {
    /// Prompt and completion tokens.
    Tokens,
    /// The models' prices times their tokens.
    Cost,
    /// Running time (waits on the caller excluded).
    WallClock,
    /// Tool calls, the sub-agents' own included.
    ToolCalls,
}

impl BudgetKind {
    /// The name clients, metrics and errors use.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Tokens => "tokens",
            Self::Cost => "cost",
            Self::WallClock => "wall_clock",
            Self::ToolCalls => "tool_calls",
        }
    }

    /// The kind a client names, if it is one.
    pub fn parse(name: &str) -> Option<Self> {
        [Self::Tokens, Self::Cost, Self::WallClock, Self::ToolCalls]
            .into_iter()
            .find(|kind| kind.as_str() == name)
    }
}

/// How a run ends when a budget runs out.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnExhausted {
    /// A normal end (finish reason `budget_exhausted`) with the answer written so far.
    #[default]
    Stop,
    /// One more round without tools for a final answer, when what is left pays for it.
    FinalAnswer,
    /// An `error` of code `budget_exhausted`; the message fails.
    Error,
}

/// The largest cost a budget may name: far above any run's spend, and small enough that
/// dividing what is left by a price of a millionth per token stays a finite decimal.
pub const MAX_BUDGET_COST: Decimal = Decimal::from_parts(1_000_000_000, 0, 0, false, 0);

/// What a run may spend; `None` is no limit.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct RunBudget {
    /// Prompt and completion tokens of every model call.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tokens: Option<u64>,
    /// Cost of every model call, in the models' currency.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cost: Option<Decimal>,
    /// Seconds of running time.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seconds: Option<u32>,
    /// Tool calls.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<u32>,
    /// How the run ends when one runs out.
    pub on_exhausted: OnExhausted,
}

/// A per-run budget above its agent's: names the field raised.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("must not be above the agent's budget ({limit})")]
pub struct Raised {
    /// The field, under `budget.`.
    pub field: &'static str,
    /// The agent's limit, as text.
    pub limit: Limit,
}

/// One limit, for messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    /// A count.
    Count(u64),
    /// An amount.
    Amount(Decimal),
}

impl std::fmt::Display for Limit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Count(n) => write!(f, "{n}"),
            Self::Amount(amount) => write!(f, "{amount}"),
        }
    }
}

impl RunBudget {
    /// Whether this is the default budget (nothing limited, stop when exhausted).
    pub fn is_unset(&self) -> bool {
        *self == RunBudget::default()
    }

    /// Whether nothing is limited.
    pub fn is_unlimited(&self) -> bool {
        self.tokens.is_none()
            && self.cost.is_none()
            && self.seconds.is_none()
            && self.tool_calls.is_none()
    }

    /// This budget lowered by a run's own: each of the run's limits must be at most this
    /// one's (a limit this budget lacks may be set freely). `on_exhausted` is the run's when
    /// it sets any limit or a non-default ending.
    pub fn lowered_by(&self, run: &RunBudget) -> Result<RunBudget, Raised> {
        fn lower<T: Copy + Ord>(
            own: Option<T>,
            run: Option<T>,
            field: &'static str,
            limit: impl Fn(T) -> Limit,
        ) -> Result<Option<T>, Raised> {
            match (own, run) {
                (Some(own), Some(run)) if run > own => Err(Raised {
                    field,
                    limit: limit(own),
                }),
                (own, run) => Ok(run.or(own)),
            }
        }
        Ok(RunBudget {
            tokens: lower(self.tokens, run.tokens, "budget.max_tokens", Limit::Count)?,
            cost: lower(self.cost, run.cost, "budget.max_cost", Limit::Amount)?,
            seconds: lower(self.seconds, run.seconds, "budget.max_seconds", |n| {
                Limit::Count(n.into())
            })?,
            tool_calls: lower(
                self.tool_calls,
                run.tool_calls,
                "budget.max_tool_calls",
                |n| Limit::Count(n.into()),
            )?,
            on_exhausted: if run.is_unlimited() && run.on_exhausted == OnExhausted::Stop {
                self.on_exhausted
            } else {
                run.on_exhausted
            },
        })
    }

    /// This budget held under the tenant's ceilings (`limits.max_run_*`): each limit is the
    /// lower of the two.
    pub fn capped(&self, limits: &TenantLimits) -> RunBudget {
        let ceilings = RunBudget {
            tokens: (limits.max_run_tokens > 0).then_some(limits.max_run_tokens),
            cost: (limits.max_run_cost > Decimal::ZERO).then_some(limits.max_run_cost),
            seconds: (limits.max_run_seconds > 0).then_some(limits.max_run_seconds),
            tool_calls: (limits.max_run_tool_calls > 0).then_some(limits.max_run_tool_calls),
            on_exhausted: self.on_exhausted,
        };
        self.within(&ceilings)
    }

    /// Each limit the lower of this budget's and `other`'s; this one's ending.
    pub fn within(&self, other: &RunBudget) -> RunBudget {
        fn lower<T: Copy + Ord>(own: Option<T>, other: Option<T>) -> Option<T> {
            match (own, other) {
                (Some(own), Some(other)) => Some(own.min(other)),
                (own, other) => own.or(other),
            }
        }
        RunBudget {
            tokens: lower(self.tokens, other.tokens),
            cost: lower(self.cost, other.cost),
            seconds: lower(self.seconds, other.seconds),
            tool_calls: lower(self.tool_calls, other.tool_calls),
            on_exhausted: self.on_exhausted,
        }
    }

    /// What is left of this budget after `spent`: the budget a sub-agent started now gets,
    /// shared by `ways` children started at once (each gets its share of the tokens, cost
    /// and tool calls; running time passes for all of them together). A child stops as a
    /// run that reached its budget does; its parent decides what that means.
    pub fn left_for_children(&self, spent: &Spent, ways: u32) -> RunBudget {
        let ways = ways.max(1);
        RunBudget {
            tokens: self
                .tokens
                .map(|n| n.saturating_sub(spent.tokens) / u64::from(ways)),
            cost: self.cost.map(|c| {
                (c.saturating_sub(spent.cost).max(Decimal::ZERO) / Decimal::from(ways))
                    .round_dp_with_strategy(7, rust_decimal::RoundingStrategy::ToZero)
            }),
            seconds: self
                .seconds
                .map(|s| s.saturating_sub(spent.seconds.ceil() as u32).max(1)),
            tool_calls: self
                .tool_calls
                .map(|n| n.saturating_sub(spent.tool_calls) / ways),
            on_exhausted: OnExhausted::Stop,
        }
    }
}

/// What a run spent so far, against its budget.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Spent {
    /// Tokens of its model calls and its sub-agents'.
    pub tokens: u64,
    /// Their cost.
    pub cost: Decimal,
    /// Seconds of running time.
    pub seconds: f64,
    /// Tool calls made, the sub-agents' own included.
    pub tool_calls: u32,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn budget(tokens: Option<u64>, tool_calls: Option<u32>) -> RunBudget {
        RunBudget {
            tokens,
            tool_calls,
            ..RunBudget::default()
        }
    }

    #[test]
    fn a_run_may_lower_its_agents_budget_but_not_raise_it() {
        let agent = budget(Some(1000), None);
        let lowered = agent.lowered_by(&budget(Some(400), Some(3))).unwrap();
        assert_eq!(lowered, budget(Some(400), Some(3)));
        let raised = agent.lowered_by(&budget(Some(1001), None)).unwrap_err();
        assert_eq!(raised.field, "budget.max_tokens");
        assert_eq!(
            raised.to_string(),
            "must not be above the agent's budget (1000)"
        );
        assert_eq!(agent.lowered_by(&RunBudget::default()).unwrap(), agent);
    }

    #[test]
    fn the_ceiling_is_the_lower_of_the_two() {
        let limits = TenantLimits {
            max_run_tokens: 500,
            max_run_cost: Decimal::new(25, 2),
            ..TenantLimits::default()
        };
        let capped = budget(Some(1000), Some(4)).capped(&limits);
        assert_eq!(capped.tokens, Some(500));
        assert_eq!(capped.cost, Some(Decimal::new(25, 2)));
        assert_eq!(capped.tool_calls, Some(4));
        assert_eq!(budget(Some(100), None).capped(&limits).tokens, Some(100));
        assert!(RunBudget::default()
            .capped(&TenantLimits::default())
            .is_unlimited());
    }

    #[test]
    fn children_started_at_once_share_what_is_left() {
        let parent = RunBudget {
            tokens: Some(1000),
            cost: Some(Decimal::ONE),
            seconds: Some(30),
            tool_calls: Some(9),
            on_exhausted: OnExhausted::Error,
        };
        let spent = Spent {
            tokens: 400,
            cost: Decimal::new(4, 1),
            seconds: 10.2,
            tool_calls: 3,
        };
        let child = parent.left_for_children(&spent, 2);
        assert_eq!(child.tokens, Some(300));
        assert_eq!(child.cost, Some(Decimal::new(3, 1)));
        assert_eq!(child.seconds, Some(19));
        assert_eq!(child.tool_calls, Some(3));
        assert_eq!(child.on_exhausted, OnExhausted::Stop);
    }
}
