//! Tenant limits on new messages in the embedded store. One process opens it, so its own
//! count is every process's: running messages are its running markers, starts in the last
//! minute are kept in memory.

use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use super::{keys, Embedded};
use crate::domain::Tenant;
use crate::store::contract::{Admission, Refusal};
use crate::store::error::StoreError;

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
/// hold nothing, so their starts never wait on each other); names the tenant whose start
/// is noted, none for a sub-agent's message.
pub struct Admitted<'a>(Option<(std::sync::MutexGuard<'a, Starts>, Option<Tenant>)>);

impl Admitted<'_> {
    /// Notes the start of the message just written.
    pub fn started(self) {
        if let Some((mut starts, Some(tenant))) = self.0 {
            starts.entry(tenant).or_default().push_back(Instant::now());
        }
    }
}

/// The value of a sub-agent's running marker; a top-level run's is empty (as every marker
/// written before children were told apart is).
pub const CHILD_MARKER: &[u8] = b"c";

/// The value of a queued message's running marker: live, but holding no slot.
pub const QUEUED_MARKER: &[u8] = b"q";

impl Embedded {
    /// Counts `tenant`'s running messages and recent starts against `admission`, for a
    /// sub-agent's message (`child`) its running sub-agents' messages; on success the
    /// returned guard is held until the message is written.
    pub(super) fn admit(
        &self,
        tenant: &Tenant,
        admission: Admission,
        child: bool,
    ) -> Result<Result<Admitted<'_>, Refusal>, StoreError> {
        if admission.unlimited() {
            return Ok(Ok(Admitted(None)));
        }
        let mut starts = self
            .admissions
            .starts
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if child {
            if admission.max_children > 0 {
                let running = self.running_of(tenant, true)?;
                if running >= u64::from(admission.max_children) {
                    return Ok(Err(Refusal::Children { running }));
                }
            }
            // Held, so two children never pass the limit together; not a start the
            // tenant's per-minute limit counts.
            return Ok(Ok(Admitted(Some((starts, None)))));
        }
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
            let running = self.running_of(tenant, false)?;
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
        Ok(Ok(Admitted(Some((starts, Some(tenant.clone()))))))
    }

    /// How many of `tenant`'s messages run now: its sub-agents' (`children`) or its
    /// top-level ones (queued ones aside).
    fn running_of(&self, tenant: &Tenant, children: bool) -> Result<u64, StoreError> {
        let wanted: &[u8] = if children { CHILD_MARKER } else { &[] };
        let mut count = 0;
        for entry in self
            .t()?
            .running
            .scan_prefix(keys::tenant_prefix(tenant, 0))
        {
            let (_, marker) = entry?;
            if marker.as_ref() == wanted {
                count += 1;
            }
        }
        Ok(count)
    }

    /// Admits the queued `message` under `admission` and marks it a running top-level
    /// message, noting its start; the refusal when the limits say not yet.
    pub(super) fn start_queued(
        &self,
        tenant: &Tenant,
        message: crate::domain::MessageId,
        admission: Admission,
    ) -> Result<Option<Refusal>, StoreError> {
        let admitted = match self.admit(tenant, admission, false)? {
            Ok(admitted) => admitted,
            Err(refusal) => return Ok(Some(refusal)),
        };
        let key = keys::message(tenant, message);
        self.t()?.running.insert(key.as_slice(), &[] as &[u8])?;
        admitted.started();
        Ok(None)
    }
}
