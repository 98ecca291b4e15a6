//! Which model serves a round's call, and when a failed call is tried again: the retry
//! policy as a small state machine, free of I/O so its decisions can be tested alone.
//!
//! A retryable failure is retried on the same model with exponential backoff and full
//! jitter (a random wait between zero and `base × 2^retry`, capped by the maximum delay),
//! or after exactly the wait the provider asked for. A provider that asks for more than the
//! maximum delay, or a model out of retries, hands the call to the next fallback at once.

use std::time::Duration;

use crate::llm::{LlmError, RetryPolicy};

/// What to do after a failed attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// Wait `delay`, then call candidate `model` (0 is the primary).
    Retry {
        /// The candidate to call.
        model: usize,
        /// How long to wait first.
        delay: Duration,
    },
    /// No attempt is left.
    GiveUp,
}

/// The attempts of one call over its candidates (the primary model, then its fallbacks).
#[derive(Debug)]
pub struct Attempts {
    /// The retry policy of each candidate.
    policies: Vec<RetryPolicy>,
    current: usize,
    /// Retries made on the current candidate.
    retries: u32,
    /// Attempts made over all candidates.
    made: u32,
}

impl Attempts {
    /// A call whose candidates retry by `policies`, in order.
    pub fn new(policies: Vec<RetryPolicy>) -> Self {
        Self {
            policies,
            current: 0,
            retries: 0,
            made: 0,
        }
    }

    /// The candidate the next attempt goes to.
    pub fn candidate(&self) -> usize {
        self.current
    }

    /// Counts an attempt as made; returns its number, from 1.
    pub fn begin(&mut self) -> u32 {
        self.made += 1;
        self.made
    }

    /// Attempts made so far.
    pub fn made(&self) -> u32 {
        self.made
    }

    /// Decides after a retryable failure; `jitter` picks a wait between zero and its
    /// argument (random in production, fixed in tests).
    pub fn after(&mut self, err: &LlmError, jitter: impl FnOnce(Duration) -> Duration) -> Next {
        let Some(policy) = self.policies.get(self.current).copied() else {
            return Next::GiveUp;
        };
        if self.retries < policy.max_retries {
            let delay = match err.retry_after() {
                Some(asked) if asked <= policy.max_delay => Some(asked),
                Some(_) => None,
                None => Some(jitter(backoff(policy, self.retries))),
            };
            if let Some(delay) = delay {
                self.retries += 1;
                return Next::Retry {
                    model: self.current,
                    delay,
                };
            }
        }
        if self.current + 1 < self.policies.len() {
            self.current += 1;
            self.retries = 0;
            return Next::Retry {
                model: self.current,
                delay: Duration::ZERO,
            };
        }
        Next::GiveUp
    }
}

/// The cap of the wait before retry number `retry + 1`: `base × 2^retry`, at most the
/// maximum delay.
fn backoff(policy: RetryPolicy, retry: u32) -> Duration {
    let factor = 2u32.saturating_pow(retry.min(31));
    policy.base.saturating_mul(factor).min(policy.max_delay)
}

/// Full jitter: a uniformly random wait between zero and `cap`.
pub fn full_jitter(cap: Duration) -> Duration {
    let millis = u64::try_from(cap.as_millis()).unwrap_or(u64::MAX);
    Duration::from_millis(fastrand::u64(0..=millis))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(max_retries: u32) -> RetryPolicy {
        RetryPolicy {
            max_retries,
            base: Duration::from_millis(100),
            max_delay: Duration::from_millis(1000),
        }
    }

    fn server_error(retry_after: Option<Duration>) -> LlmError {
        LlmError::Server {
            status: 503,
            message: "busy".into(),
            retry_after,
        }
    }

    #[test]
    fn backoff_doubles_up_to_the_cap_and_jitter_picks_below_it() {
        let mut attempts = Attempts::new(vec![policy(5)]);
        let caps: Vec<Duration> = (0..5)
            .map(|_| match attempts.after(&server_error(None), |cap| cap) {
                Next::Retry { delay, .. } => delay,
                Next::GiveUp => panic!("gave up early"),
            })
            .collect();
        let ms = |n| Duration::from_millis(n);
        assert_eq!(caps, vec![ms(100), ms(200), ms(400), ms(800), ms(1000)]);
        assert_eq!(attempts.after(&server_error(None), |cap| cap), Next::GiveUp);
        for _ in 0..100 {
            assert!(full_jitter(ms(50)) <= ms(50));
        }
    }

    #[test]
    fn the_providers_wait_is_honoured_unless_it_is_longer_than_the_maximum() {
        let mut attempts = Attempts::new(vec![policy(2)]);
        let asked = Duration::from_millis(700);
        assert_eq!(
            attempts.after(&server_error(Some(asked)), |_| Duration::ZERO),
            Next::Retry {
                model: 0,
                delay: asked
            }
        );
        let too_long = server_error(Some(Duration::from_secs(60)));
        assert_eq!(attempts.after(&too_long, |cap| cap), Next::GiveUp);
    }

    #[test]
    fn a_model_out_of_retries_hands_over_to_the_next_fallback_at_once() {
        let mut attempts = Attempts::new(vec![policy(1), policy(0), policy(1)]);
        let err = server_error(None);
        assert_eq!(attempts.begin(), 1);
        assert!(matches!(
            attempts.after(&err, |cap| cap),
            Next::Retry { model: 0, .. }
        ));
        attempts.begin();
        let next = attempts.after(&err, |cap| cap);
        assert_eq!(
            next,
            Next::Retry {
                model: 1,
                delay: Duration::ZERO
            }
        );
        attempts.begin();
        assert!(matches!(
            attempts.after(&err, |cap| cap),
            Next::Retry { model: 2, .. }
        ));
        attempts.begin();
        assert!(matches!(
            attempts.after(&err, |cap| cap),
            Next::Retry { model: 2, .. }
        ));
        attempts.begin();
        assert_eq!(attempts.after(&err, |cap| cap), Next::GiveUp);
        assert_eq!(attempts.made(), 5);
        let too_long = server_error(Some(Duration::from_secs(60)));
        let mut skip = Attempts::new(vec![policy(3), policy(3)]);
        assert_eq!(
            skip.after(&too_long, |cap| cap),
            Next::Retry {
                model: 1,
                delay: Duration::ZERO
            },
            "a provider asking for a long wait goes straight to the fallback"
        );
    }
}
