//! Per-tenant limits on runs: how many at once, how many a minute, how many LLM tokens a
//! UTC day. A run over a limit is refused before anything is written, saying which limit
//! and, where waiting helps, for how long.

use std::time::Duration;

use chrono::{Datelike, Timelike};

use super::error::RunError;
use crate::domain::TenantLimits;
use crate::store::{Admission, ConversationRule, Refusal};

/// Refuses a run of a tenant that used its LLM tokens for today (UTC); the other limits
/// (runs at once, runs a minute) are counted by the store as the message is written, over
/// every replica ([`admission`], [`refused`]).
pub fn check_tokens(limits: TenantLimits, tokens_today: u64) -> Result<(), RunError> {
    if limits.tokens_per_day > 0 && tokens_today >= limits.tokens_per_day {
        return Err(RunError::LimitExceeded {
            limit: "limits.tokens_per_day",
            detail: format!(
                "the tenant used {tokens_today} LLM tokens today (UTC), its limit is {}",
                limits.tokens_per_day
            ),
            retry_after: Some(until_tomorrow()),
        });
    }
    Ok(())
}

/// The limits the store admits a new message under: a top-level run's, or a sub-agent's
/// (`child`), which takes no tenant slot but counts against the tenant's children.
pub fn admission(limits: TenantLimits, child: bool) -> Admission {
    if child {
        // A run taken over carries no caller's limits: its children keep the default.
        let max_children = match limits.max_concurrent_child_runs {
            0 => crate::domain::DEFAULT_MAX_CONCURRENT_CHILD_RUNS,
            set => set,
        };
        return Admission {
            max_children,
            ..Admission::default()
        };
    }
    Admission {
        max_running: limits.max_concurrent_runs,
        per_minute: limits.runs_per_minute,
        max_children: 0,
        rule: ConversationRule::Beside,
    }
}

/// The refusal a caller reads, naming the limit and, where waiting helps, for how long.
pub fn refused(refusal: Refusal, limits: TenantLimits) -> RunError {
    match refusal {
        Refusal::Running { running } => RunError::LimitExceeded {
            limit: "limits.max_concurrent_runs",
            detail: format!(
                "the tenant has {running} runs in progress, the most it may have at once"
            ),
            // A run ending frees a place; nobody can say when.
            retry_after: None,
        },
        Refusal::Children { running } => RunError::LimitExceeded {
            limit: "limits.max_concurrent_child_runs",
            detail: format!(
                "the tenant has {running} sub-agent runs in progress, the most it may have at once"
            ),
            retry_after: None,
        },
        Refusal::PerMinute {
            started,
            retry_after,
        } => RunError::LimitExceeded {
            limit: "limits.runs_per_minute",
            detail: format!(
                "the tenant started {started} runs in the last minute, its limit is {}",
                limits.runs_per_minute
            ),
            retry_after: Some(retry_after),
        },
        Refusal::Busy { live } => RunError::ConversationTaken { live },
        Refusal::QueueFull { queued } => RunError::LimitExceeded {
            limit: "limits.max_queued_per_conversation",
            detail: format!(
                "the conversation has {queued} runs queued, the most it may have at once"
            ),
            retry_after: None,
        },
    }
}

/// Today as a number, `YYYYMMDD`, in UTC: the key of a day's token count.
pub fn today() -> u32 {
    let now = chrono::Utc::now();
    u32::try_from(now.year()).unwrap_or(0) * 10_000 + now.month() * 100 + now.day()
}

/// Time left until the next UTC midnight.
fn until_tomorrow() -> Duration {
    let seconds = u64::from(chrono::Utc::now().num_seconds_from_midnight());
    Duration::from_secs(86_400 - seconds.min(86_399))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limit_of(refused: &RunError) -> &'static str {
        let RunError::LimitExceeded { limit, .. } = refused else {
            panic!("not a limit: {refused:?}");
        };
        limit
    }

    #[test]
    fn tokens_per_day_waits_for_the_next_utc_day_and_zero_is_unlimited() {
        let limits = |tokens| TenantLimits {
            tokens_per_day: tokens,
            ..TenantLimits::default()
        };
        let refused = check_tokens(limits(100), 100).unwrap_err();
        assert_eq!(limit_of(&refused), "limits.tokens_per_day");
        assert!(refused.retry_after().unwrap() <= Duration::from_secs(86_400));
        assert!(check_tokens(limits(101), 100).is_ok());
        assert!(check_tokens(limits(0), u64::MAX).is_ok());
        assert!(today() > 20_200_101);
    }

    #[test]
    fn refusals_name_their_limit_and_when_to_retry() {
        let limits = TenantLimits {
            max_concurrent_runs: 2,
            runs_per_minute: 5,
            tokens_per_day: 0,
            ..TenantLimits::default()
        };
        let running = refused(Refusal::Running { running: 2 }, limits);
        assert_eq!(limit_of(&running), "limits.max_concurrent_runs");
        assert!(running.retry_after().is_none());
        let wait = Duration::from_secs(42);
        let per_minute = refused(
            Refusal::PerMinute {
                started: 5,
                retry_after: wait,
            },
            limits,
        );
        assert_eq!(limit_of(&per_minute), "limits.runs_per_minute");
        assert_eq!(per_minute.retry_after(), Some(wait));
        assert!(
            per_minute.to_string().contains("its limit is 5"),
            "{per_minute}"
        );
    }
}
