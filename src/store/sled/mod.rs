//! The embedded backend: sled, in the data directory. The only code that names sled.
//!
//! One tree per record type; keys are laid out by [`keys`] so scans come out in creation
//! order. Values are JSON wrapped in `{"v": version, "r": record}` so later schemas can read
//! old records. sled shows a write at once but makes it durable only at a flush: every
//! write of the contract waits for one (shared by all writers at the time, see
//! [`flusher`]), and events a commit has written but not yet made durable are held back
//! from readers (see [`inflight`]).

mod access;
mod adapter;
mod admission;
mod agents;
mod commands;
mod flusher;
mod inflight;
pub mod keys;
mod live_conversations;
mod messages;
mod past_cache;
mod pieces;
mod records;
mod run_index;
mod steers;

use std::path::{Path, PathBuf};
use std::sync::{Arc, PoisonError, RwLock};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::contract;
use super::error::{Category, StoreError};
use super::sealed::{self, SecretKey};
use crate::domain::ConversationId;

impl From<sled::Error> for StoreError {
    fn from(err: sled::Error) -> Self {
        let category = match &err {
            sled::Error::Io(_) => Category::Unavailable,
            sled::Error::CollectionNotFound(_) => Category::NotFound,
            sled::Error::Corruption { .. } => Category::Corrupt,
            sled::Error::Unsupported(_) | sled::Error::ReportableBug(_) => Category::Internal,
        };
        StoreError::Backend {
            category,
            message: err.to_string(),
        }
    }
}

/// Attempts, 50 ms apart, to take a directory whose lock is still held.
const LOCK_RETRIES: u32 = 60;

fn is_lock_held(err: &std::io::Error) -> bool {
    err.to_string().contains("could not acquire lock")
}

/// A key of the `running` tree no message uses (message keys start with a tenant).
const PROBE_KEY: &[u8] = b"\0probe";

/// Schema version written into every value.
const SCHEMA_VERSION: u32 = 1;

/// The open database's handles, replaced whole when it is reopened.
struct Trees {
    conversations: sled::Tree,
    messages: sled::Tree,
    conversation_messages: sled::Tree,
    /// The top-level messages of each stored agent, by tenant, agent and id.
    agent_messages: sled::Tree,
    thoughts: sled::Tree,
    events: sled::Tree,
    /// Top-level messages by tenant and id, keys only: a tenant's runs in order.
    runs: sled::Tree,
    /// Sub-agents' messages by tenant, parent and id, keys only.
    children: sled::Tree,
    /// Markers of messages whose run has not ended, so start-up recovery scans only them.
    running: sled::Tree,
    /// Idempotency keys of runs, by tenant and key.
    idempotency: sled::Tree,
    /// Registered tool providers, by tenant and name.
    providers: sled::Tree,
    /// Files tools produced, by tenant and file id.
    files: sled::Tree,
    /// Their bytes, apart so listing records never reads them.
    file_data: sled::Tree,
    /// Messages' answers, apart so status updates never rewrite them.
    answers: sled::Tree,
    /// What each run was started with, by message; written once.
    specs: sled::Tree,
    /// Pieces of large values (see [`pieces`]).
    pieces: sled::Tree,
    /// API keys, by id.
    api_keys: sled::Tree,
    /// LLM tokens used per tenant and UTC day.
    tenant_usage: sled::Tree,
    /// Ended messages whose events are not retired yet, with when they ended.
    ended: sled::Tree,
    /// Commands for runs, until their run takes them.
    commands: sled::Tree,
    /// Stored agents, by tenant and id.
    agents: sled::Tree,
    /// Their versions, by tenant, agent and number.
    agent_versions: sled::Tree,
    flusher: flusher::Flusher,
}

impl Trees {
    fn open(db: sled::Db, state: &flusher::FlushState) -> Result<Self, StoreError> {
        let trees = Self {
            conversations: db.open_tree("conversations")?,
            messages: db.open_tree("messages")?,
            conversation_messages: db.open_tree("conversation_messages")?,
            agent_messages: db.open_tree("agent_messages")?,
            thoughts: db.open_tree("thoughts")?,
            runs: db.open_tree("runs")?,
            children: db.open_tree("children")?,
            events: db.open_tree("events")?,
            running: db.open_tree("running")?,
            idempotency: db.open_tree("idempotency")?,
            providers: db.open_tree("providers")?,
            files: db.open_tree("files")?,
            file_data: db.open_tree("file_data")?,
            answers: db.open_tree("answers")?,
            specs: db.open_tree("specs")?,
            pieces: db.open_tree("pieces")?,
            api_keys: db.open_tree("api_keys")?,
            tenant_usage: db.open_tree("tenant_usage")?,
            ended: db.open_tree("ended")?,
            commands: db.open_tree("commands")?,
            agents: db.open_tree("agents")?,
            agent_versions: db.open_tree("agent_versions")?,
            flusher: flusher::Flusher::start(db, state)?,
        };
        Embedded::build_run_index(&trees)?;
        Ok(trees)
    }
}

/// Where a database lives, so it can be opened again.
struct Location {
    path: PathBuf,
    cache_bytes: u64,
}

/// Handle to the database; cheap to clone.
///
/// sled keeps the first I/O error it meets (a full disk) and fails every later operation
/// with it, for as long as the handle lives. So a store that cannot write is opened again
/// once its disk has room ([`Embedded::probe`]): what sled had not made durable was never
/// announced, and the reopened database recovers from what was.
#[derive(Clone)]
pub struct Embedded {
    /// The open database; `None` only while it is being opened again.
    current: Arc<RwLock<Option<Arc<Trees>>>>,
    /// `None` for a temporary database, which is never reopened.
    location: Option<Arc<Location>>,
    /// Writability, writers and the flush observer, across reopenings.
    state: flusher::FlushState,
    /// Ended messages as history reads them.
    past: Arc<past_cache::PastCache>,
    /// Seals provider credentials before they are written.
    sealer: sealed::Sealer,
    /// Held while a message takes its place in its conversation.
    order: Arc<OrderLocks>,
    /// Each conversation's live messages.
    live: Arc<live_conversations::LiveConversations>,
    /// Events written but not yet durable, held back from readers.
    inflight: Arc<inflight::InFlight>,
    /// Whether what an earlier process left running was interrupted.
    pub(super) swept: Arc<std::sync::atomic::AtomicBool>,
    /// Changes of API keys and of providers, as [`crate::store::contract::Registry::registry_changes`]
    /// counts them (one process writes them all).
    pub(super) changes: Arc<[std::sync::atomic::AtomicU64; 2]>,
    /// Recent starts of limited tenants.
    admissions: Arc<admission::Admissions>,
    /// Held while an agent record is read and written back, so changes to one agent (a
    /// new version, an alias moved) apply one at a time.
    agent_writes: Arc<std::sync::Mutex<()>>,
    /// When this process opened the database: when its one replica started.
    opened_at: chrono::DateTime<chrono::Utc>,
}

/// Locks that give each conversation one writer of new messages at a time, striped so
/// conversations share a few mutexes instead of keeping one each.
struct OrderLocks([std::sync::Mutex<()>; 64]);

impl OrderLocks {
    fn new() -> Self {
        Self(std::array::from_fn(|_| std::sync::Mutex::new(())))
    }

    /// The lock of `conversation`'s stripe, held for the returned guard's life.
    fn lock(&self, conversation: ConversationId) -> std::sync::MutexGuard<'_, ()> {
        let stripe = conversation.0.as_u128() as usize % self.0.len();
        self.0[stripe]
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

impl Embedded {
    /// Opens (or creates) the database under `path`, keeping at most `cache_bytes` of
    /// pages in memory.
    pub fn open(path: &Path, cache_bytes: u64, key: &SecretKey) -> Result<Self, StoreError> {
        let location = Location {
            path: path.to_owned(),
            cache_bytes,
        };
        let db = open_db(&location)?;
        Self::from_db(db, Some(location), key)
    }

    /// Opens a throw-away database that lives in memory; for tests and benchmarks.
    pub fn temporary() -> Result<Self, StoreError> {
        Self::from_db(
            sled::Config::new().temporary(true).open()?,
            None,
            &SecretKey::generate(),
        )
    }

    fn from_db(
        db: sled::Db,
        location: Option<Location>,
        key: &SecretKey,
    ) -> Result<Self, StoreError> {
        let state = flusher::FlushState::default();
        let store = Self {
            current: Arc::new(RwLock::new(Some(Arc::new(Trees::open(db, &state)?)))),
            location: location.map(Arc::new),
            state,
            past: Arc::new(past_cache::PastCache::new(past_cache::BUDGET_BYTES)),
            sealer: sealed::Sealer::new(key),
            order: Arc::new(OrderLocks::new()),
            live: Arc::default(),
            inflight: Arc::default(),
            swept: Arc::default(),
            changes: Arc::default(),
            admissions: Arc::default(),
            agent_writes: Arc::default(),
            opened_at: crate::domain::now(),
        };
        store.note_live_messages()?;
        Ok(store)
    }

    /// The open database, or unavailable while it is being opened again.
    fn t(&self) -> Result<Arc<Trees>, StoreError> {
        self.current
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
            .ok_or(StoreError::Reopening)
    }

    /// Makes every write so far durable; concurrent callers share one flush.
    ///
    /// # Cancel safety
    /// Dropping the future does not stop the flush; the writes become durable anyway.
    async fn flush(&self) -> Result<(), StoreError> {
        let flusher = self.t()?.flusher.clone();
        flusher.flush().await
    }

    /// Writes and flushes a small marker: whether the store can write at all. A success
    /// marks it writable again. When the write fails but the disk has room again, the
    /// database is opened again (sled keeps failing after its first I/O error) and the
    /// marker is written to the new one.
    async fn probe_disk(&self) -> Result<(), StoreError> {
        let refused = match self.t() {
            Ok(trees) => match trees.running.insert(PROBE_KEY, &[][..]) {
                Ok(_) => return self.flush().await,
                // sled refuses every write once it met an I/O error: only a new handle
                // helps, and only once there is room.
                Err(refused) => refused.into(),
            },
            // A reopening that failed: try again.
            Err(closed) => closed,
        };
        let Some(location) = self.location.clone() else {
            return Err(refused);
        };
        if !has_room(&location.path) {
            return Err(refused);
        }
        let store = self.clone();
        tokio::task::spawn_blocking(move || store.reopen(&location))
            .await
            .map_err(|err| {
                StoreError::NotDurable(format!("reopening the store failed: {err}"))
            })??;
        self.t()?.running.insert(PROBE_KEY, &[][..])?;
        self.flush().await
    }

    /// Closes the database and opens it again from what is on disk. Handles in use finish
    /// first (sled's file lock is held until the last one goes); meanwhile, and until an
    /// opening succeeds, calls are answered as unavailable.
    fn reopen(&self, location: &Location) -> Result<(), StoreError> {
        tracing::warn!("the store cannot write but its disk has room: opening it again");
        let old = self
            .current
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        drop(old);
        // What history kept in memory may hold writes the old handle never made durable.
        self.past.clear();
        self.inflight.clear();
        let trees = open_db(location).and_then(|db| Trees::open(db, &self.state))?;
        *self.current.write().unwrap_or_else(PoisonError::into_inner) = Some(Arc::new(trees));
        tracing::info!("the store is open again");
        Ok(())
    }

    /// Makes every flush fail (`true`) or work again (`false`), as a full disk would: how
    /// tests show what a run and the service do when the store cannot write.
    #[cfg(any(test, feature = "test-utils"))]
    fn fail_flushes(&self, fail: bool) {
        self.state.fail(fail);
    }

    /// Names every record whose key or value contains `needle`, as `tree: key`. A
    /// diagnostic for checking that deleted data is really gone; it reads everything.
    #[cfg(any(test, feature = "test-utils"))]
    fn find_bytes_now(&self, needle: &[u8]) -> Result<Vec<String>, StoreError> {
        let t = self.t()?;
        let trees = [
            ("conversations", &t.conversations),
            ("messages", &t.messages),
            ("conversation_messages", &t.conversation_messages),
            ("thoughts", &t.thoughts),
            ("runs", &t.runs),
            ("children", &t.children),
            ("events", &t.events),
            ("running", &t.running),
            ("idempotency", &t.idempotency),
            ("providers", &t.providers),
            ("files", &t.files),
            ("file_data", &t.file_data),
            ("answers", &t.answers),
            ("specs", &t.specs),
            ("pieces", &t.pieces),
            ("ended", &t.ended),
            ("agents", &t.agents),
            ("agent_versions", &t.agent_versions),
        ];
        let mut found = Vec::new();
        for (name, tree) in trees {
            for entry in tree.iter() {
                let (key, value) = entry?;
                if contains(&key, needle) || contains(&value, needle) {
                    found.push(format!("{name}: {}", String::from_utf8_lossy(&key)));
                }
            }
        }
        Ok(found)
    }
}

/// Opens the database at `location`. A process (or handle) that held it may still be
/// releasing its file lock (sled's background threads close the file a moment after the
/// last handle goes), so a held lock is retried for up to three seconds.
fn open_db(location: &Location) -> Result<sled::Db, StoreError> {
    let config = sled::Config::new()
        .path(&location.path)
        .cache_capacity(location.cache_bytes);
    let mut attempts = 0;
    loop {
        match config.open() {
            Ok(db) => return Ok(db),
            Err(sled::Error::Io(err)) if is_lock_held(&err) && attempts < LOCK_RETRIES => {
                attempts += 1;
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
            Err(err) => return Err(err.into()),
        }
    }
}

/// Whether the disk under `dir` takes a write again: a small file written and synced.
fn has_room(dir: &Path) -> bool {
    use std::io::Write as _;
    let path = dir.join(".room-probe");
    let written = std::fs::File::create(&path).and_then(|mut file| {
        file.write_all(&[0u8; 64 * 1024])?;
        file.sync_all()
    });
    let _ = std::fs::remove_file(&path);
    written.is_ok()
}

#[cfg(any(test, feature = "test-utils"))]
fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty()
        && haystack
            .windows(needle.len())
            .any(|window| window == needle)
}

#[derive(Serialize)]
struct VersionedRef<'a, T> {
    v: u32,
    r: &'a T,
}

#[derive(Deserialize)]
struct Versioned<T> {
    v: u32,
    r: T,
}

fn encode<T: Serialize>(tree: &'static str, record: &T) -> Result<Vec<u8>, StoreError> {
    serde_json::to_vec(&VersionedRef {
        v: SCHEMA_VERSION,
        r: record,
    })
    .map_err(|source| StoreError::Codec {
        record: tree,
        source,
    })
}

fn decode<T: DeserializeOwned>(tree: &'static str, bytes: &[u8]) -> Result<T, StoreError> {
    let versioned: Versioned<T> =
        serde_json::from_slice(bytes).map_err(|source| StoreError::Codec {
            record: tree,
            source,
        })?;
    if versioned.v > SCHEMA_VERSION {
        return Err(StoreError::UnsupportedVersion {
            record: tree,
            found: versioned.v,
            supported: SCHEMA_VERSION,
        });
    }
    Ok(versioned.r)
}

/// Decodes every value under `prefix`, in key order, joining values stored in pieces.
fn scan<T: DeserializeOwned>(
    tree: &sled::Tree,
    pieces: (&sled::Tree, pieces::Owner),
    name: &'static str,
    prefix: &[u8],
) -> Result<Vec<T>, StoreError> {
    scan_with(tree, pieces, prefix, |bytes| decode(name, bytes))
}

/// What `read` makes of every value under `prefix`, in key order, joining values stored in
/// pieces: for records whose decoding is their own.
fn scan_with<T>(
    tree: &sled::Tree,
    pieces: (&sled::Tree, pieces::Owner),
    prefix: &[u8],
    read: impl Fn(&[u8]) -> Result<T, StoreError>,
) -> Result<Vec<T>, StoreError> {
    tree.scan_prefix(prefix)
        .map(|entry| {
            let (key, value) = entry?;
            read(&pieces::join(pieces.0, pieces.1, &key, value)?)
        })
        .collect()
}

/// A page of what `read` makes of the entries of `entries` under `prefix`, in key order:
/// `read` gives a record and its stored size, or `None` to pass an entry over. Reading stops
/// once the page is full by `size`; `more` says an entry under `prefix` follows.
fn sized_page<T>(
    entries: impl Iterator<Item = sled::Result<(sled::IVec, sled::IVec)>>,
    prefix: &[u8],
    size: contract::PageSize,
    mut read: impl FnMut(&[u8], sled::IVec) -> Result<Option<(T, usize)>, StoreError>,
) -> Result<contract::Page<T>, StoreError> {
    let mut page = contract::Page {
        items: Vec::new(),
        more: false,
    };
    let mut bytes = 0;
    for entry in entries {
        let (key, value) = entry?;
        if !key.starts_with(prefix) {
            break;
        }
        if page.items.len() >= size.limit || (!page.items.is_empty() && bytes > size.max_bytes) {
            page.more = true;
            break;
        }
        if let Some((item, stored)) = read(&key, value)? {
            bytes += stored;
            page.items.push(item);
        }
    }
    Ok(page)
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tree_tests;
