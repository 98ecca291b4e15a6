//! Tenant limits on new messages in the embedded store. One process opens it, so its own
//! count is every process's: running messages are its running markers, starts in the last
//! minute are kept in memory.

use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use super::{keys, Embedded};
use crate::domain::Tenant;
use crate::store::{Admission, Refusal, StoreError};

/// The window of [`Admission::per_minute`].
const MINUTE: Duration = Duration::from_secs(60);

/// Each limited tenant's starts in the last minute.
type Starts = HashMap<Tenant, VecDeque<Instant>>;

/// Starts of limited tenants in the last minute; its lock makes a count and the insert
/// that follows one step.
#[derive(Default)]
pub struct Admissions {
    starts: Mutex<Starts>,
}

/// Held while a message of a limited tenant is counted and written (unlimited tenants
/// hold nothing, so their starts never wait on each other).
pub struct Admitted<'a>(Option<(std::sync::MutexGuard<'a, Starts>, Tenant)>);

impl Admitted<'_> {
    /// Notes the start of the message just written.
    pub fn started(self) {
        if let Some((mut starts, tenant)) = self.0 {
            starts.entry(tenant).or_default().push_back(Instant::now());
        }
    }
}

impl Embedded {
    /// Counts `tenant`'s running messages and recent starts against `admission`; on
    /// success the returned guard is held until the message is written.
    pub(super) fn admit(
        &self,
        tenant: &Tenant,
        admission: Admission,
    ) -> Result<Result<Admitted<'_>, Refusal>, StoreError> {
        if admission == Admission::default() {
            return Ok(Ok(Admitted(None)));
        }
        let mut starts = self
            .admissions
            .starts
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let now = Instant::now();
        let recent = starts.entry(tenant.clone()).or_default();
        while recent
            .front()
            .is_some_and(|t| now.duration_since(*t) >= MINUTE)
        {
            recent.pop_front();
        }
        let started = recent.len() as u64;
        let oldest = recent.front().copied();
        if admission.max_running > 0 {
            let running = self
                .t()?
                .running
                .scan_prefix(keys::tenant_prefix(tenant, 0))
                .count() as u64;
            if running >= u64::from(admission.max_running) {
                return Ok(Err(Refusal::Running { running }));
            }
        }
        if admission.per_minute > 0 && started >= u64::from(admission.per_minute) {
            let waited = oldest.map_or(Duration::ZERO, |t| now.duration_since(t));
            return Ok(Err(Refusal::PerMinute {
                started,
                retry_after: MINUTE.saturating_sub(waited),
            }));
        }
        Ok(Ok(Admitted(Some((starts, tenant.clone())))))
    }
}
