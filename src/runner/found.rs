//! Where a run is, as this replica finds it: cancel, deliver and attach each act on what
//! they find, not on whether a lookup happened to succeed.

use super::error::RunError;
use super::live::{LiveRun, LiveRuns};
use crate::domain::{Message, MessageId, Tenant};
use crate::store::Store;

/// Where a run is.
pub(super) enum Found {
    /// In progress here: its live handle.
    Local(LiveRun),
    /// Not ended, and held by another replica (or by none yet, until a sweep takes it): the
    /// message as stored.
    Remote(Message),
    /// Ended: the message as stored.
    Ended(Message),
}

impl Found {
    /// Finds the run of `message_id`: here first, then in the store. A message the store
    /// does not hold for `tenant` is not found.
    pub async fn find(
        live: &LiveRuns,
        store: &Store,
        tenant: &Tenant,
        message_id: MessageId,
    ) -> Result<Self, RunError> {
        if let Some(run) = live.get(tenant, message_id) {
            return Ok(Self::Local(run));
        }
        let message = store
            .get_message(tenant, message_id)
            .await?
            .ok_or_else(|| RunError::not_found("message", message_id))?;
        Ok(match message.status.is_terminal() {
            true => Self::Ended(message),
            false => Self::Remote(message),
        })
    }
}
