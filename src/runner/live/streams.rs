//! The streams clients hold open on this replica to follow runs (`Attach`, A2A's
//! `SubscribeToTask`), counted per tenant so that one tenant's browsers cannot hold every
//! connection and task of the process.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use futures::StreamExt as _;

use super::follower::EventStream;
use crate::domain::Tenant;
use crate::runner::error::RunError;

/// Open follow streams per tenant.
#[derive(Default)]
pub struct FollowStreams {
    open: Mutex<HashMap<Tenant, u32>>,
}

/// One open stream's place; given back when dropped.
pub struct FollowSlot {
    streams: Arc<FollowStreams>,
    tenant: Tenant,
}

impl FollowStreams {
    /// A place for one more stream of `tenant`, or the refusal naming the limit when it
    /// holds `limit` already (0: no limit).
    pub fn open(self: &Arc<Self>, tenant: &Tenant, limit: u32) -> Result<FollowSlot, RunError> {
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        let count = open.entry(tenant.clone()).or_default();
        if limit > 0 && *count >= limit {
            return Err(RunError::LimitExceeded {
                limit: "limits.max_follow_streams",
                detail: format!(
                    "the tenant holds {count} streams following runs on this replica, the most it may"
                ),
                retry_after: None,
            });
        }
        *count += 1;
        Ok(FollowSlot {
            streams: Arc::clone(self),
            tenant: tenant.clone(),
        })
    }
}

impl FollowSlot {
    /// `events`, holding this place until the stream is dropped.
    pub fn holding(self, events: EventStream) -> EventStream {
        Box::pin(events.map(move |event| {
            let _held = &self;
            event
        }))
    }
}

impl Drop for FollowSlot {
    fn drop(&mut self) {
        let mut open = self
            .streams
            .open
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(count) = open.get_mut(&self.tenant) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                open.remove(&self.tenant);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tenant_holds_at_most_its_limit_and_a_place_frees_when_dropped() {
        let streams = Arc::new(FollowStreams::default());
        let acme = Tenant::default_tenant();
        let first = streams.open(&acme, 2).unwrap();
        let _second = streams.open(&acme, 2).unwrap();
        assert!(streams.open(&acme, 2).is_err());
        drop(first);
        assert!(streams.open(&acme, 2).is_ok());
        assert!(streams.open(&acme, 0).is_ok(), "0 is no limit");
    }
}
