//! Per-tenant limits on runs: how many at once, how many a minute, how many LLM tokens a
//! UTC day. A run over a limit is refused before anything is written, saying which limit
//! and, where waiting helps, for how long.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use chrono::{Datelike, Timelike};

use super::error::RunError;
use crate::domain::{Tenant, TenantLimits};

/// The window of `runs_per_minute`.
const MINUTE: Duration = Duration::from_secs(60);

/// What each limited tenant is doing now.
#[derive(Default)]
pub struct Quotas {
    /// A `std` mutex: held to check and note one start or end, never across an await.
    tenants: Mutex<HashMap<Tenant, Use>>,
}

/// One tenant's runs in progress and recent starts.
#[derive(Default)]
struct Use {
    running: usize,
    starts: VecDeque<Instant>,
}

/// A run's place under its tenant's concurrency limit, given back when dropped.
pub struct RunPermit(Option<(Arc<Quotas>, Tenant)>);

impl RunPermit {
    /// Gives the place back now rather than when dropped.
    pub fn release(&mut self) {
        if let Some((quotas, tenant)) = self.0.take() {
            let mut tenants = quotas.lock();
            if let Some(usage) = tenants.get_mut(&tenant) {
                usage.running = usage.running.saturating_sub(1);
                if usage.running == 0 && usage.starts.is_empty() {
                    tenants.remove(&tenant);
                }
            }
        }
    }
}

impl Drop for RunPermit {
    fn drop(&mut self) {
        self.release();
    }
}

impl Quotas {
    /// Admits a run of `tenant` under `limits` given the tokens it used today, or says
    /// which limit refuses it. Counting and admitting happen under one lock, so a burst
    /// of runs cannot slip past a limit together.
    pub fn admit(
        self: &Arc<Self>,
        tenant: &Tenant,
        limits: TenantLimits,
        tokens_today: u64,
    ) -> Result<RunPermit, RunError> {
        if limits == TenantLimits::default() {
            // Unlimited tenants cost nothing here.
            return Ok(RunPermit(None));
        }
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
        let now = Instant::now();
        let mut tenants = self.lock();
        let usage = tenants.entry(tenant.clone()).or_default();
        while usage
            .starts
            .front()
            .is_some_and(|t| now.duration_since(*t) >= MINUTE)
        {
            usage.starts.pop_front();
        }
        let concurrent = limits.max_concurrent_runs as usize;
        if concurrent > 0 && usage.running >= concurrent {
            return Err(RunError::LimitExceeded {
                limit: "limits.max_concurrent_runs",
                detail: format!(
                    "the tenant has {} runs in progress, the most it may have at once",
                    usage.running
                ),
                // A run ending frees a place; nobody can say when.
                retry_after: None,
            });
        }
        let per_minute = limits.runs_per_minute as usize;
        if per_minute > 0 && usage.starts.len() >= per_minute {
            let oldest = usage.starts.front().copied().unwrap_or(now);
            return Err(RunError::LimitExceeded {
                limit: "limits.runs_per_minute",
                detail: format!(
                    "the tenant started {} runs in the last minute, its limit is {per_minute}",
                    usage.starts.len()
                ),
                retry_after: Some(MINUTE.saturating_sub(now.duration_since(oldest))),
            });
        }
        usage.starts.push_back(now);
        usage.running += 1;
        Ok(RunPermit(Some((Arc::clone(self), tenant.clone()))))
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<Tenant, Use>> {
        self.tenants.lock().unwrap_or_else(PoisonError::into_inner)
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

    fn limits(concurrent: u32, per_minute: u32, tokens: u64) -> TenantLimits {
        TenantLimits {
            max_concurrent_runs: concurrent,
            runs_per_minute: per_minute,
            tokens_per_day: tokens,
        }
    }

    fn limit_of(refused: &RunError) -> &'static str {
        let RunError::LimitExceeded { limit, .. } = refused else {
            panic!("not a limit: {refused:?}");
        };
        limit
    }

    #[test]
    fn concurrent_runs_are_counted_until_their_permits_drop() {
        let quotas = Arc::new(Quotas::default());
        let acme = Tenant::parse("acme").unwrap();
        let first = quotas.admit(&acme, limits(2, 0, 0), 0).unwrap();
        let _second = quotas.admit(&acme, limits(2, 0, 0), 0).unwrap();
        let refused = quotas.admit(&acme, limits(2, 0, 0), 0).err().unwrap();
        assert_eq!(limit_of(&refused), "limits.max_concurrent_runs");
        assert!(refused.retry_after().is_none());
        let other = Tenant::parse("other").unwrap();
        assert!(quotas.admit(&other, limits(2, 0, 0), 0).is_ok());
        drop(first);
        assert!(quotas.admit(&acme, limits(2, 0, 0), 0).is_ok());
    }

    #[test]
    fn runs_per_minute_says_when_the_oldest_start_leaves_the_window() {
        let quotas = Arc::new(Quotas::default());
        let acme = Tenant::parse("acme").unwrap();
        drop(quotas.admit(&acme, limits(0, 1, 0), 0).unwrap());
        let refused = quotas.admit(&acme, limits(0, 1, 0), 0).err().unwrap();
        assert_eq!(limit_of(&refused), "limits.runs_per_minute");
        let wait = refused.retry_after().unwrap();
        assert!(wait > Duration::from_secs(55) && wait <= MINUTE, "{wait:?}");
    }

    #[test]
    fn tokens_per_day_waits_for_the_next_utc_day_and_zero_is_unlimited() {
        let quotas = Arc::new(Quotas::default());
        let acme = Tenant::parse("acme").unwrap();
        let refused = quotas.admit(&acme, limits(0, 0, 100), 100).err().unwrap();
        assert_eq!(limit_of(&refused), "limits.tokens_per_day");
        assert!(refused.retry_after().unwrap() <= Duration::from_secs(86_400));
        assert!(quotas.admit(&acme, limits(0, 0, 101), 100).is_ok());
        for _ in 0..100 {
            assert!(quotas.admit(&acme, limits(0, 0, 0), u64::MAX).is_ok());
        }
        assert!(today() > 20_200_101);
    }
}
