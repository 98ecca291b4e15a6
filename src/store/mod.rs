//! Persistence, behind one contract every backend honours. This is the only module that
//! knows a database; the embedded one lives in its own room ([`sled`]).
//!
//! The rule, for every backend: **a write returns when it is durable, and readers never
//! see more** (one write, a run's new message, is durable with the run's first burst; see
//! [`Conversations::insert_message`]). A run's records and the events that announce them are committed together
//! ([`EventLog::commit`]), so no reader sees an event without its record, and no event is
//! announced that a crash could take back. Listings come in pages, never as cursors into
//! the database. Errors carry a [`Category`] that the one error mapping turns into gRPC
//! codes.
//!
//! [`Store`] is the handle the rest of the service holds: cheap to clone, any backend
//! behind it. Call its methods with the family traits in scope.

#[cfg(any(test, feature = "test-utils"))]
pub mod conformance;
mod contract;
mod conversation_rule;
mod error;
mod postgres;
mod refusal;
mod retire;
mod run_listing;
mod sealed;
mod settings;
mod sled;

use std::sync::Arc;

pub use crate::domain::Adoption;
pub use contract::{
    Admission, Adopted, Agents, Backend, Burst, Conversations, EventLog, Fence, Health, Heard,
    Inserted, NewMessage, Ownership, Page, PageSize, Record, Records, Refusal, Registry,
    RegistryChanges, ReplicaEntry, StoredProvider, Swept, TakenCommand,
};
pub use conversation_rule::{queue_behind, ConversationRule};
pub use error::{Category, StoreError};
pub use postgres::{describe as describe_database, with_database};
pub use retire::retire_old_events;
pub use run_listing::{
    ConversationPage, ConversationQuery, ListedConversation, ListedRun, Listing, RunCursor,
    RunPage, RunQuery, MAX_SCANNED,
};
pub use sealed::SecretKey;
pub use settings::{DatabaseSettings, StoreSettings};

/// Handle to the store; cheap to clone.
#[derive(Clone)]
pub struct Store {
    backend: Arc<dyn Backend>,
}

impl std::ops::Deref for Store {
    type Target = dyn Backend;

    fn deref(&self) -> &Self::Target {
        &*self.backend
    }
}

impl Store {
    /// The store `backend` keeps.
    pub fn new(backend: Arc<dyn Backend>) -> Self {
        Self { backend }
    }

    /// Opens the store `settings` name, sealing credentials with `key`: the embedded
    /// database (made under its directory at first use), or the shared one (migrated, and
    /// checked to have been sealed with `key`; one process per replica id).
    pub async fn open(settings: &StoreSettings, key: &SecretKey) -> Result<Self, StoreError> {
        match settings {
            StoreSettings::Embedded { dir, cache_bytes } => Ok(Self::new(Arc::new(
                self::sled::Embedded::open(dir, *cache_bytes, key)?,
            ))),
            StoreSettings::Shared(database) => {
                Ok(Self::new(postgres::Postgres::connect(database, key).await?))
            }
        }
    }

    /// A throw-away embedded database that lives in memory; for tests and benchmarks.
    pub fn temporary() -> Result<Self, StoreError> {
        Ok(Self::new(Arc::new(self::sled::Embedded::temporary()?)))
    }
}

/// Records for the store's unit tests.
#[cfg(any(test, feature = "test-utils"))]
pub mod test_records {
    use crate::domain::{Conversation, ConversationId, Message, StrategyKind, Tenant};

    /// A running message of `conversation`, as a run writes it first.
    pub fn running_message(conversation: ConversationId, seq: u64) -> Message {
        let mut message = Message::running(
            conversation,
            "q".into(),
            StrategyKind::FunctionCalling,
            "p".into(),
            "m".into(),
        );
        message.seq = seq;
        message
    }

    /// A new conversation of `tenant`.
    pub fn conversation(tenant: &Tenant) -> Conversation {
        Conversation {
            id: ConversationId::new(),
            tenant: tenant.clone(),
            user: String::new(),
            created_at: crate::domain::now(),
        }
    }
}
