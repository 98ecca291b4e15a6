//! Run budgets ↔ protobuf, each refusal naming its field under the caller's prefix
//! (`agent.budget`, `config.budget`, `overrides.budget`).

use std::str::FromStr;

use rust_decimal::Decimal;
use tonic::Status;

use crate::api::status::invalid;
use crate::domain::{OnExhausted, RunBudget, MAX_BUDGET_COST};
use crate::pb;

/// The most running seconds a budget may name: a day.
pub const MAX_BUDGET_SECONDS: u32 = 86_400;

/// A run budget from `budget`, fields named under `prefix`.
pub fn run_budget(budget: Option<pb::Budget>, prefix: &str) -> Result<RunBudget, Status> {
    let Some(pb::Budget {
        max_tokens,
        max_cost,
        max_seconds,
        max_tool_calls,
        on_exhausted,
    }) = budget
    else {
        return Ok(RunBudget::default());
    };
    if max_tokens == Some(0) {
        return Err(invalid(
            &format!("{prefix}.max_tokens"),
            "must be at least 1 (leave it unset for no limit)",
        ));
    }
    if let Some(seconds) = max_seconds {
        if !(1..=MAX_BUDGET_SECONDS).contains(&seconds) {
            return Err(invalid(
                &format!("{prefix}.max_seconds"),
                &format!("must be between 1 and {MAX_BUDGET_SECONDS}"),
            ));
        }
    }
    let on_exhausted = match pb::OnExhausted::try_from(on_exhausted) {
        Ok(pb::OnExhausted::Unspecified | pb::OnExhausted::Stop) => OnExhausted::Stop,
        Ok(pb::OnExhausted::FinalAnswer) => OnExhausted::FinalAnswer,
        Ok(pb::OnExhausted::Error) => OnExhausted::Error,
        Err(_) => {
            return Err(invalid(
                &format!("{prefix}.on_exhausted"),
                &format!("has unknown value {on_exhausted}"),
            ))
        }
    };
    Ok(RunBudget {
        tokens: max_tokens,
        cost: amount(&format!("{prefix}.max_cost"), &max_cost)?,
        seconds: max_seconds,
        tool_calls: max_tool_calls,
        on_exhausted,
    })
}

/// A positive decimal amount of at most [`MAX_BUDGET_COST`] from `text`, `None` when empty.
pub fn amount(field: &str, text: &str) -> Result<Option<Decimal>, Status> {
    if text.is_empty() {
        return Ok(None);
    }
    let bad = || {
        invalid(
            field,
            &format!("must be a positive decimal such as \"0.25\", at most {MAX_BUDGET_COST}"),
        )
    };
    if text.len() > 40 {
        return Err(bad());
    }
    match Decimal::from_str(text.trim()) {
        Ok(value) if value > Decimal::ZERO && value <= MAX_BUDGET_COST => {
            Ok(Some(value.normalize()))
        }
        _ => Err(bad()),
    }
}

/// A run budget as the API shows it; `None` when nothing is limited.
pub fn budget_pb(budget: RunBudget) -> Option<pb::Budget> {
    if budget == RunBudget::default() {
        return None;
    }
    let RunBudget {
        tokens,
        cost,
        seconds,
        tool_calls,
        on_exhausted,
    } = budget;
    Some(pb::Budget {
        max_tokens: tokens,
        max_cost: cost.map(|c| c.to_string()).unwrap_or_default(),
        max_seconds: seconds,
        max_tool_calls: tool_calls,
        on_exhausted: match on_exhausted {
            OnExhausted::Stop => pb::OnExhausted::Unspecified,
            OnExhausted::FinalAnswer => pb::OnExhausted::FinalAnswer,
            OnExhausted::Error => pb::OnExhausted::Error,
        }
        .into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refusal(budget: pb::Budget) -> String {
        run_budget(Some(budget), "agent.budget")
            .unwrap_err()
            .message()
            .to_owned()
    }

    #[test]
    fn a_budget_names_its_bad_fields_and_reads_back() {
        assert_eq!(
            refusal(pb::Budget {
                max_cost: "-1".into(),
                ..Default::default()
            }),
            "agent.budget.max_cost must be a positive decimal such as \"0.25\", at most 1000000000"
        );
        for huge in ["1000000000.01", "79228162514264337593543950335"] {
            assert!(refusal(pb::Budget {
                max_cost: huge.into(),
                ..Default::default()
            })
            .starts_with("agent.budget.max_cost must be"));
        }
        assert_eq!(
            refusal(pb::Budget {
                max_seconds: Some(0),
                ..Default::default()
            }),
            "agent.budget.max_seconds must be between 1 and 86400"
        );
        assert_eq!(
            refusal(pb::Budget {
                max_tokens: Some(0),
                ..Default::default()
            }),
            "agent.budget.max_tokens must be at least 1 (leave it unset for no limit)"
        );
        let given = pb::Budget {
            max_tokens: Some(500),
            max_cost: "0.25".into(),
            max_seconds: Some(30),
            max_tool_calls: Some(0),
            on_exhausted: pb::OnExhausted::FinalAnswer.into(),
        };
        let budget = run_budget(Some(given.clone()), "agent.budget").unwrap();
        assert_eq!(budget.tool_calls, Some(0));
        assert_eq!(budget_pb(budget), Some(given));
    }
}
