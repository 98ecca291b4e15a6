//! The store's contract: one interface per family of records, which every backend honours
//! (see the rule in the module doc of [`crate::store`]).

use std::collections::BTreeMap;
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::{broadcast, watch};

use super::conversation_rule::ConversationRule;
use super::error::StoreError;
pub use super::refusal::Refusal;
use super::run_listing::{ConversationPage, ConversationQuery, RunPage, RunQuery};
use crate::domain::{
    Adoption, AgentChange, AgentRecord, AgentRefusal, AgentVersionRecord, ApiKeyRecord,
    Conversation, ConversationId, EventEnvelope, FileId, FileRecord, IdempotencyRecord, Lease,
    Message, MessageId, PastMessage, ProviderRecord, RunCommand, Tenant, Thought,
};

/// One page of a listing, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page<T> {
    /// The records of the page.
    pub items: Vec<T>,
    /// Whether records follow the last one.
    pub more: bool,
}

/// How much one page may hold: at most `limit` records and, past the first, no more than
/// `max_bytes` of them as stored (a page never holds a whole long conversation in memory).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageSize {
    /// The most records.
    pub limit: usize,
    /// The most bytes of stored records, the first one aside.
    pub max_bytes: usize,
}

impl PageSize {
    /// The pages the runner reads a whole record family in (a message's thoughts, a
    /// conversation's messages): large, since it keeps what it reads, yet bounded.
    pub const FOR_THE_RUNNER: PageSize = PageSize {
        limit: 256,
        max_bytes: 16 * 1024 * 1024,
    };
}

/// Who may write a run's records: the replica that owns the run and the epoch of its claim.
/// A backend refuses a burst whose fence is not the run's current one, so a replica that
/// lost a run cannot write to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fence {
    /// The owning replica.
    pub owner: String,
    /// Raised each time the run changes owner.
    pub epoch: u64,
}

impl Fence {
    /// The fence of a run on a single node, which owns every run it starts.
    pub fn local() -> Self {
        Self {
            owner: "local".to_owned(),
            epoch: 0,
        }
    }
}

/// A run a sweep took over for this process, to resume; its fence names this replica
/// and the new epoch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Adopted {
    /// The run's tenant.
    pub tenant: Tenant,
    /// The run's message.
    pub message: MessageId,
    /// The fence its writes go under from now on.
    pub fence: Fence,
    /// Whether its owner handed it over (stopping) rather than being lost.
    pub handed_over: bool,
}

/// What one sweep did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Swept {
    /// Runs it ended interrupted: the runner stops their children, which nothing else
    /// would (their parent's task is gone).
    pub interrupted: Vec<(Tenant, MessageId)>,
    /// Runs it took over, to resume.
    pub adopted: Vec<Adopted>,
}

/// A record a burst writes with the events that announce it.
#[derive(Debug, Clone, PartialEq)]
pub enum Record {
    /// A thought as it stands (written whole, replacing its earlier state).
    Thought(Thought),
    /// The message as it stands; a terminal status ends its run.
    Message(Message),
    /// LLM tokens the run used, added to its tenant's count for `day` (e.g. `20261123`).
    /// With `once`, counted only by the commit that writes that event (the run's end) for
    /// the first time: a burst committed again after a failure that may have landed counts
    /// its tokens exactly once.
    TenantTokens {
        /// The UTC day.
        day: u32,
        /// Tokens to add.
        tokens: u64,
        /// The event of the same burst (message and `seq`) the count goes with.
        once: Option<(MessageId, u64)>,
    },
}

/// One run's records and the events that announce them, committed together: a reader sees
/// an event only once its records are there too.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Burst {
    /// Records to write, in order.
    pub records: Vec<Record>,
    /// Consecutive events of the run's message, in `seq` order.
    pub events: Vec<EventEnvelope>,
}

impl Burst {
    /// Whether the burst has nothing to write.
    pub fn is_empty(&self) -> bool {
        self.records.is_empty() && self.events.is_empty()
    }

    /// Adds `later` after what the burst holds; a thought written twice is written once,
    /// in its later state.
    pub fn extend(&mut self, later: Burst) {
        for record in later.records {
            self.push(record);
        }
        self.events.extend(later.events);
    }

    /// Adds a record; a thought (or the message) already in the burst is replaced by its
    /// later state.
    pub fn push(&mut self, record: Record) {
        let earlier = self
            .records
            .iter_mut()
            .find(|held| match (&**held, &record) {
                (Record::Thought(a), Record::Thought(b)) => a.id == b.id,
                (Record::Message(a), Record::Message(b)) => a.id == b.id,
                _ => false,
            });
        match earlier {
            Some(held) => *held = record,
            None => self.records.push(record),
        }
    }
}

/// A message to write as its run starts.
pub struct NewMessage<'a> {
    /// Its tenant.
    pub tenant: &'a Tenant,
    /// Its conversation when the run starts one.
    pub conversation: Option<&'a Conversation>,
    /// The message, running; the store gives it its `seq` and `ordinal`.
    pub message: &'a mut Message,
    /// What the run was started with, kept with the message.
    pub spec: &'a serde_json::Value,
    /// The request's idempotency key and what it will point at.
    pub idempotency: Option<(&'a str, &'a IdempotencyRecord)>,
    /// The tenant's limits the message is admitted under.
    pub admission: Admission,
}

/// Limits on a tenant's runs that a new message is admitted under, counted over every
/// process sharing the store (0: no limit).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Admission {
    /// The most top-level messages of the tenant running at once (sub-agents' runs are
    /// covered by their tree's top run).
    pub max_running: u32,
    /// The most top-level messages of the tenant started in the last minute.
    pub per_minute: u32,
    /// The most sub-agents' runs of the tenant running at once, over all its trees: the
    /// limit a sub-agent's message is admitted under.
    pub max_children: u32,
    /// What it may do when its conversation has a live message (running, waiting or
    /// queued), checked and written in one step for every process sharing the store.
    pub rule: ConversationRule,
}

impl Admission {
    /// Whether no tenant limit applies (the conversation rule aside).
    pub fn unlimited(&self) -> bool {
        self.max_running == 0 && self.per_minute == 0 && self.max_children == 0
    }

    /// Whether a new message, a sub-agent's (`child`) or a top-level one, is counted against
    /// a tenant limit at all.
    pub fn counts(&self, child: bool) -> bool {
        !(self.unlimited() || (child && self.max_children == 0))
    }
}

/// Whether a new message was written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Inserted {
    /// It was.
    Yes,
    /// It was, queued behind the conversation's live messages (see
    /// [`ConversationRule::Queue`]); the message now says so.
    Queued {
        /// The live messages ahead of it.
        ahead: u32,
    },
    /// Its idempotency key already points at another message; nothing was written.
    KeyTaken(IdempotencyRecord),
    /// The tenant's limits refuse it; nothing was written.
    Refused(Refusal),
}

/// Conversations, their messages in order, and what each run was started with.
#[async_trait]
pub trait Conversations: Send + Sync {
    /// Reads a conversation.
    async fn get_conversation(
        &self,
        tenant: &Tenant,
        id: ConversationId,
    ) -> Result<Option<Conversation>, StoreError>;

    /// Reads what an idempotency key points at.
    async fn get_idempotency(
        &self,
        tenant: &Tenant,
        key: &str,
    ) -> Result<Option<IdempotencyRecord>, StoreError>;

    /// Writes a new running message with its spec, its conversation when that is new and
    /// its idempotency key, and gives it its place: `seq` one past the conversation's last
    /// (1 in a new one), `ordinal` one past its newest message's (0, unknown, when that
    /// one's is). Places are taken atomically per conversation: two runs started at once
    /// never share or skip one. Of two requests racing with one key, one wins; the other
    /// gets [`Inserted::KeyTaken`] and writes nothing. A message over its tenant's
    /// [`Admission`] limits is [`Inserted::Refused`]; the count and the write are atomic per
    /// tenant, so runs started at once on several replicas never pass a limit together.
    ///
    /// The one write whose durability may come later: it is durable once the run's first
    /// burst is ([`EventLog::commit`] makes every earlier write of the store durable too).
    /// No client learns of a message before its first event, and a run's first model call
    /// need not wait for a disk write of its own.
    async fn insert_message(&self, new: NewMessage<'_>) -> Result<Inserted, StoreError>;

    /// Reads a message.
    async fn get_message(
        &self,
        tenant: &Tenant,
        id: MessageId,
    ) -> Result<Option<Message>, StoreError>;

    /// Reads what history takes from a message.
    async fn get_past_message(
        &self,
        tenant: &Tenant,
        id: MessageId,
    ) -> Result<Option<PastMessage>, StoreError>;

    /// A conversation's messages in `seq` order, from the one after `after_seq`. A page
    /// token of `seq`s never skips a message that committed late: places are taken in
    /// order with the message's write.
    async fn list_messages(
        &self,
        tenant: &Tenant,
        conversation: ConversationId,
        after_seq: u64,
        size: PageSize,
    ) -> Result<Page<Message>, StoreError>;

    /// The `seq`s and ids of a conversation's messages before `before_seq`, newest first:
    /// keys only, so history reads no more records than fit.
    async fn message_ids_before(
        &self,
        tenant: &Tenant,
        conversation: ConversationId,
        before_seq: u64,
        limit: usize,
    ) -> Result<Page<(u64, MessageId)>, StoreError>;

    /// The ids of the top-level messages (runs, not sub-agents' runs) a stored agent
    /// answered, newest first, from the one before `before`: keys only.
    async fn agent_message_ids(
        &self,
        tenant: &Tenant,
        agent_id: &str,
        before: Option<MessageId>,
        limit: usize,
    ) -> Result<Page<MessageId>, StoreError>;

    /// A page of the tenant's runs the query's filter keeps, newest first in the order the store
    /// wrote them (its own clock, never a replica's), from the one after `after`. It reads
    /// the filter's [`RunIndex`](crate::domain::RunIndex) and at most
    /// [`MAX_SCANNED`](super::run_listing::MAX_SCANNED) entries of it. Paging is stable:
    /// every run written before the first page appears exactly once; one written since may
    /// or may not.
    async fn list_runs(&self, tenant: &Tenant, query: &RunQuery<'_>)
        -> Result<RunPage, StoreError>;

    /// A page of the tenant's conversations (sub-agents' aside), by last activity, newest
    /// first: each at the place of its newest run as of `as_of` (the newest run's place when
    /// the first page was read, which the store gives with that page; see
    /// [`ConversationQuery`]). Every conversation
    /// that existed then appears exactly once across the pages, as it stood then. Reads the
    /// top-level runs index from `after` down, at most
    /// [`MAX_SCANNED`](super::run_listing::MAX_SCANNED) entries (a conversation's older runs
    /// are passed over).
    async fn list_conversations(
        &self,
        tenant: &Tenant,
        query: &ConversationQuery<'_>,
    ) -> Result<ConversationPage, StoreError>;

    /// What the run of `message` was started with; `None` for messages of earlier versions.
    async fn get_run_spec(
        &self,
        tenant: &Tenant,
        message: MessageId,
    ) -> Result<Option<serde_json::Value>, StoreError>;

    /// Admits the queued message `message` under `admission` and marks it started: it takes
    /// a slot of the tenant's running messages and counts as a start from now. The count
    /// and the mark are one step for every process sharing the store, as a new message's
    /// are ([`Self::insert_message`]). `Some` refusal when the limits say not yet; then
    /// nothing changes. Only under the message's own `fence`: a replica whose queued run a
    /// peer adopted meanwhile (its lease lapsed while it was paused) is refused
    /// [`StoreError::Fenced`] and must not start it.
    async fn start_queued(
        &self,
        tenant: &Tenant,
        message: MessageId,
        fence: &Fence,
        admission: Admission,
    ) -> Result<Option<Refusal>, StoreError>;

    /// Removes the queued steer `steer` (see [`crate::domain::Message::steers`]) that the
    /// live message `joined` took as a user turn: its message and events go, and its
    /// idempotency key points at `joined` from then on, so a retry follows the run the
    /// text joined. Only under the steer's own `fence`, as [`Self::start_queued`];
    /// `Ok(false)` when it is no longer queued (removed already, or started).
    async fn drop_steer(
        &self,
        tenant: &Tenant,
        steer: MessageId,
        joined: MessageId,
        fence: &Fence,
    ) -> Result<bool, StoreError>;

    /// The live messages (running, waiting or queued) of a conversation placed before `seq`,
    /// oldest first: what a queued message waits for.
    async fn live_before(
        &self,
        tenant: &Tenant,
        conversation: ConversationId,
        seq: u64,
    ) -> Result<Vec<MessageId>, StoreError>;

    /// Whether a message of the conversation is running (on any replica).
    async fn running_in(
        &self,
        tenant: &Tenant,
        conversation: ConversationId,
    ) -> Result<bool, StoreError>;

    /// The sub-agent runs of `parent` still running (on any replica): how the children of a
    /// run ended without its task (by a sweep) are found to be stopped.
    async fn running_children(
        &self,
        tenant: &Tenant,
        parent: MessageId,
    ) -> Result<Vec<MessageId>, StoreError>;

    /// Deletes a conversation with everything of its messages; returns their ids, or
    /// `None` when there is no such conversation.
    async fn delete_conversation(
        &self,
        tenant: &Tenant,
        id: ConversationId,
    ) -> Result<Option<Vec<MessageId>>, StoreError>;
}

/// Thoughts and the files tools produced.
#[async_trait]
pub trait Records: Send + Sync {
    /// A message's thoughts by position, from the one after `after` (the first when
    /// `None`).
    async fn list_thoughts(
        &self,
        tenant: &Tenant,
        message: MessageId,
        after: Option<u32>,
        size: PageSize,
    ) -> Result<Page<Thought>, StoreError>;

    /// Every thought of a message, for the runner (a run has few hundred at most), with
    /// its provider reasoning opened.
    async fn all_thoughts(
        &self,
        tenant: &Tenant,
        message: MessageId,
    ) -> Result<Vec<Thought>, StoreError> {
        let mut thoughts: Vec<Thought> = Vec::new();
        loop {
            let after = thoughts.last().map(|t| t.position);
            let page = self
                .list_thoughts(tenant, message, after, PageSize::FOR_THE_RUNNER)
                .await?;
            thoughts.extend(page.items);
            if !page.more {
                self.open_reasoning(&mut thoughts);
                return Ok(thoughts);
            }
        }
    }

    /// Opens the provider reasoning `thoughts` carry sealed (see [`Thought`]'s
    /// `provider_reasoning`), with the key the store sealed it with.
    fn open_reasoning(&self, thoughts: &mut [Thought]);

    /// Stores a file a tool produced, with its bytes when it has them.
    async fn put_file(
        &self,
        tenant: &Tenant,
        record: &FileRecord,
        bytes: Option<&[u8]>,
    ) -> Result<(), StoreError>;

    /// A file with its bytes (empty for a file that is only a URL).
    async fn get_file(
        &self,
        tenant: &Tenant,
        id: FileId,
    ) -> Result<Option<(FileRecord, Vec<u8>)>, StoreError>;
}

/// Runs' events, committed with the records they announce.
#[async_trait]
pub trait EventLog: Send + Sync {
    /// Writes one run's burst in one durable commit, if `fence` is the run's; commits of
    /// many runs may share a disk write. When it returns, every earlier write of the store
    /// is durable too. Committing a burst again after an error writes its records and events
    /// once (tenant tokens aside, see [`Record::TenantTokens`]).
    async fn commit(&self, tenant: &Tenant, fence: &Fence, burst: &Burst)
        -> Result<(), StoreError>;

    /// A message's committed events with `seq > after_seq`, in order.
    async fn list_events(
        &self,
        tenant: &Tenant,
        message: MessageId,
        after_seq: u64,
    ) -> Result<Vec<EventEnvelope>, StoreError>;

    /// A message's last committed event: for a waiting run, what it waits on.
    async fn last_event(
        &self,
        tenant: &Tenant,
        message: MessageId,
    ) -> Result<Option<EventEnvelope>, StoreError> {
        Ok(self.list_events(tenant, message, 0).await?.pop())
    }

    /// Retires the events of up to `limit` messages that ended before `before`: each keeps
    /// only its last event (its end, which is then all Attach sends); the messages, their
    /// thoughts and files stay as they are. Returns how many messages it retired; a batch
    /// at a time, so no call runs long.
    async fn retire_events(
        &self,
        before: chrono::DateTime<chrono::Utc>,
        limit: usize,
    ) -> Result<usize, StoreError>;
}

/// A provider, or the failure to open its credentials, as listed at start-up.
pub type StoredProvider = (Tenant, String, Result<ProviderRecord, StoreError>);

/// Tool providers, API keys and what tenants used.
#[async_trait]
pub trait Registry: Send + Sync {
    /// Writes (or replaces) a provider; its credentials are sealed before they are written.
    async fn put_provider(
        &self,
        tenant: &Tenant,
        record: &ProviderRecord,
    ) -> Result<(), StoreError>;

    /// A provider with its credentials opened.
    async fn get_provider(
        &self,
        tenant: &Tenant,
        name: &str,
    ) -> Result<Option<ProviderRecord>, StoreError>;

    /// Deletes a provider; returns whether it existed.
    async fn delete_provider(&self, tenant: &Tenant, name: &str) -> Result<bool, StoreError>;

    /// Every provider of every tenant, for start-up; one whose credentials do not open is
    /// an error in its place, not a failure of all.
    async fn all_providers(&self) -> Result<Vec<StoredProvider>, StoreError>;

    /// Seals credentials an earlier version stored in plaintext; returns how many.
    async fn seal_plaintext_credentials(&self) -> Result<usize, StoreError>;

    /// Writes (or replaces) an API key.
    async fn put_api_key(&self, record: &ApiKeyRecord) -> Result<(), StoreError>;

    /// Deletes an API key; returns whether it existed.
    async fn delete_api_key(&self, id: &str) -> Result<bool, StoreError>;

    /// Every API key, for start-up.
    async fn all_api_keys(&self) -> Result<Vec<ApiKeyRecord>, StoreError>;

    /// Tokens `tenant` used on `day` (e.g. `20261123`).
    async fn tenant_tokens(&self, tenant: &Tenant, day: u32) -> Result<u64, StoreError>;

    /// Notes when a key was last used, if the key is still stored (a key revoked meanwhile,
    /// maybe on another replica, stays revoked); returns whether it was.
    async fn touch_api_key(&self, record: &ApiKeyRecord) -> Result<bool, StoreError>;

    /// Counters that move whenever an API key or a tool provider is created, changed or
    /// deleted (by any process on the store; noting a key's use does not count): a cache
    /// reads again when they move.
    async fn registry_changes(&self) -> Result<RegistryChanges, StoreError>;
}

/// Where the registry's records stand; see [`Registry::registry_changes`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RegistryChanges {
    /// Moves with every change of an API key.
    pub api_keys: u64,
    /// Moves with every change of a tool provider.
    pub providers: u64,
}

/// Whether the store can write, for health and admission.
#[async_trait]
pub trait Health: Send + Sync {
    /// Follows whether writes succeed: `false` after one failed (a full disk, a lost
    /// database), `true` again after one succeeded. Reads may work either way.
    fn writable(&self) -> watch::Receiver<bool>;

    /// Writes a small marker: whether the store can write at all. A success marks it
    /// writable again; a backend may reconnect or reopen to get there.
    async fn probe(&self) -> Result<(), StoreError>;

    /// Tells `observe` how long each durable commit takes, for metrics; the first call
    /// counts.
    fn observe_commits(&self, observe: Box<dyn Fn(Duration) + Send + Sync>);

    /// Tells `observe` how long each burst waited for a committer before its flush began,
    /// for metrics; the first call counts. A backend whose bursts do not queue says nothing.
    fn observe_commit_waits(&self, _observe: Box<dyn Fn(Duration) + Send + Sync>) {}

    /// Stops the store's own background work, committing what is queued first, and waits
    /// for it at most `within`; called once at shutdown, after the runs and the background
    /// ended. A backend without such work has nothing to do.
    async fn stop(&self, _within: Duration) {}

    /// Makes every commit fail (`true`) or work again (`false`), as a full disk would.
    #[cfg(any(test, feature = "test-utils"))]
    fn fail_writes(&self, fail: bool);

    /// Names every stored record whose key or value holds `needle`: a check that deleted
    /// data is gone. Reads everything.
    #[cfg(any(test, feature = "test-utils"))]
    async fn find_bytes(&self, needle: &[u8]) -> Result<Vec<String>, StoreError>;
}

/// A command taken by the replica that owns its run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TakenCommand {
    /// The run's tenant.
    pub tenant: Tenant,
    /// The run's message.
    pub message: MessageId,
    /// What was asked.
    pub command: RunCommand,
}

/// Which replica owns which run: the fence its writes go under, the runs whose owner was
/// lost, commands for runs from whichever replica a caller reached to the one that holds
/// them (durable before the caller is answered, so a lost notice costs latency, never a
/// cancel or a delivery), this process's lease, and what peers say through the store.
#[async_trait]
pub trait Ownership: Send + Sync {
    /// The fence of the runs this process starts: its replica, first epoch.
    fn fence(&self) -> Fence {
        Fence::local()
    }

    /// Takes the runs no live process owns: the first call (at start-up, before any run
    /// begins) those this replica left running in an earlier life, each call those of
    /// replicas whose heartbeat lapsed. As `adoption` says, a running run (not one waiting
    /// for its caller) is taken over (its takeover count raised, durably, and its epoch
    /// moved on, so its late owner's writes are refused) for this process to resume;
    /// any other ends interrupted with its end event appended, so its followers
    /// everywhere see it end. One sweeper wins each run.
    async fn take_orphans(&self, adoption: Adoption) -> Result<Swept, StoreError>;

    /// Keeps `command` for the run of `message` if it is running; returns the replica that
    /// owns the run, to wake, or `None` when it is not running (nothing is kept). Durable
    /// when it returns.
    async fn send_command(
        &self,
        tenant: &Tenant,
        message: MessageId,
        command: &RunCommand,
    ) -> Result<Option<String>, StoreError>;

    /// Takes (and removes) the commands for those of `runs` that are running messages this
    /// replica owns, in the order they were kept: the runs that can take them now. Commands
    /// for other runs stay, so one kept for a run this replica is handing over waits for
    /// its next owner instead of being taken by a process that no longer runs it.
    async fn take_commands(&self, runs: &[MessageId]) -> Result<Vec<TakenCommand>, StoreError>;

    /// This process's lease on the runs it owns, for a run to hold: a call that must not
    /// repeat starts only while enough of it is left. Unbounded for a store one process
    /// opens (no peer can take its runs while it lives).
    fn lease(&self) -> Lease {
        Lease::unbounded()
    }

    /// What peers say through the store itself (a shared database's notifications), for
    /// deployments without another way to hear them; `None` when the store carries none.
    fn hear(&self) -> Option<broadcast::Receiver<Heard>> {
        None
    }

    /// Tells peers' followers of `message` of events it does not store (see
    /// [`Heard::Flashed`]), through the store where it is how peers hear each other; a
    /// store one process opens has no peer to tell. Best effort: one too large to carry
    /// is dropped.
    async fn flash(&self, _message: MessageId, _events: &[EventEnvelope]) {}

    /// The replicas on the store, by id, each with its lease and the runs it holds: one
    /// (this process) on a store one process opens.
    async fn replicas(&self) -> Result<Vec<ReplicaEntry>, StoreError>;
}

/// A replica as the store knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicaEntry {
    /// Its id (the fence owner of the runs it holds).
    pub id: String,
    /// When its current process claimed the id.
    pub started_at: chrono::DateTime<chrono::Utc>,
    /// Until when its lease holds; `None` on a store one process opens.
    pub lease_until: Option<chrono::DateTime<chrono::Utc>>,
    /// Whether its lease holds now (always, for the process that opened a store alone).
    pub live: bool,
    /// The runs not yet ended that it owns.
    pub runs_held: u64,
}

/// What a peer said through the store.
#[derive(Debug, Clone, PartialEq)]
pub enum Heard {
    /// A commit wrote events of `message`, up to `last_seq`.
    Committed {
        /// The run's message.
        message: MessageId,
        /// Its last committed `seq`.
        last_seq: u64,
    },
    /// Notices may have been missed (the store was not heard for a while, or a notice named
    /// too many runs to list): every follower reads the store.
    Missed,
    /// A peer sent events of `message` it does not store (reasoning shown, not kept),
    /// for the followers here.
    Flashed {
        /// The run's message.
        message: MessageId,
        /// The events, each with `seq` 0.
        events: Vec<EventEnvelope>,
    },
    /// A peer kept a command for a run this replica owns.
    Woken,
}

/// Stored agents, their versions and aliases. Every write is durable when it returns and
/// is read at once by every process on the store (nothing of it is cached), so a new
/// version or a moved alias is in force everywhere together.
#[async_trait]
pub trait Agents: Send + Sync {
    /// Writes a new agent, with its first version when `first` is given (then
    /// `record.latest_version` is 1). Refused with [`AgentRefusal::Exists`] when the id is
    /// taken, [`AgentRefusal::TooManyAgents`] past [`crate::domain::agent::MAX_AGENTS`].
    async fn create_agent(
        &self,
        tenant: &Tenant,
        record: &AgentRecord,
        first: Option<&AgentVersionRecord>,
    ) -> Result<Result<(), AgentRefusal>, StoreError>;

    /// Reads an agent.
    async fn get_agent(&self, tenant: &Tenant, id: &str)
        -> Result<Option<AgentRecord>, StoreError>;

    /// The tenant's agents by id, from the one after `after`, carrying every label of
    /// `labels`.
    async fn list_agents(
        &self,
        tenant: &Tenant,
        after: &str,
        labels: &BTreeMap<String, String>,
        limit: usize,
    ) -> Result<Page<AgentRecord>, StoreError>;

    /// Applies `change` to the agent as stored, atomically (of two compare-and-sets on one
    /// alias, one wins); returns the agent as it now stands.
    async fn change_agent(
        &self,
        tenant: &Tenant,
        id: &str,
        change: &AgentChange,
    ) -> Result<Result<AgentRecord, AgentRefusal>, StoreError>;

    /// Deletes an agent with its versions; returns whether it existed.
    async fn delete_agent(&self, tenant: &Tenant, id: &str) -> Result<bool, StoreError>;

    /// Adds a version numbered one past the agent's newest: of concurrent adds each gets
    /// its own number and none is skipped. `latest` moves to it.
    async fn add_version(
        &self,
        tenant: &Tenant,
        id: &str,
        config: &serde_json::Value,
    ) -> Result<Result<AgentVersionRecord, AgentRefusal>, StoreError>;

    /// Reads one version.
    async fn get_version(
        &self,
        tenant: &Tenant,
        id: &str,
        version: u32,
    ) -> Result<Option<AgentVersionRecord>, StoreError>;

    /// An agent's versions, newest first, from the one below `before` (`u32::MAX`: the
    /// newest).
    async fn list_versions(
        &self,
        tenant: &Tenant,
        id: &str,
        before: u32,
        size: PageSize,
    ) -> Result<Page<AgentVersionRecord>, StoreError>;
}

/// Everything a backend provides.
pub trait Backend:
    Conversations + Records + EventLog + Registry + Ownership + Agents + Health
{
}

impl<T: Conversations + Records + EventLog + Registry + Ownership + Agents + Health> Backend for T {}
