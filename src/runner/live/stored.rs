//! A followed message as the bus reads it from the store, once for all its followers on
//! this replica.

use async_trait::async_trait;

use crate::cluster::Source;
use crate::domain::{EventEnvelope, MessageId, Tenant};
use crate::store::Store;

/// How long one read may wait for its answer: a database that fell silent would otherwise
/// hold the message's reads, and so its followers, for as long as the connection lives.
const READ_DEADLINE: std::time::Duration = std::time::Duration::from_secs(5);

/// One message of one tenant in the store.
pub struct StoredMessage {
    store: Store,
    tenant: Tenant,
    message: MessageId,
}

impl StoredMessage {
    /// `message` of `tenant` in `store`.
    pub fn new(store: Store, tenant: Tenant, message: MessageId) -> Self {
        Self {
            store,
            tenant,
            message,
        }
    }
}

#[async_trait]
impl Source for StoredMessage {
    async fn last_seq(&self) -> Option<u64> {
        let read = self.store.last_event(&self.tenant, self.message);
        match tokio::time::timeout(READ_DEADLINE, read).await {
            Ok(Ok(last)) => Some(last.map_or(0, |event| event.seq)),
            Ok(Err(_)) | Err(_) => None,
        }
    }

    async fn events_after(&self, seq: u64) -> Option<Vec<EventEnvelope>> {
        let read = self.store.list_events(&self.tenant, self.message, seq);
        match tokio::time::timeout(READ_DEADLINE, read).await {
            Ok(Ok(events)) => Some(events),
            Ok(Err(_)) | Err(_) => None,
        }
    }
}
