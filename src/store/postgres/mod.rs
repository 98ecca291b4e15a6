//! The shared backend: PostgreSQL. The only code that names it.
//!
//! Records are JSON of the service's own types, with the columns queries select and order
//! on beside them. A run's burst is one transaction, committed with `synchronous_commit` on,
//! so it is durable when the commit returns; a new message is committed without waiting
//! for its WAL flush, which the run's first burst (a later synchronous commit) covers.
//! Migrations are embedded and applied at connection under the migrator's advisory lock.

mod agents;
mod commands;
mod committer;
mod conversations;
mod error;
mod listen;
mod paged;
mod records;
mod registry;
mod replicas;
mod run_index;
mod spans;
mod start;
mod start_batch;
mod statistics;
mod warm;

use std::str::FromStr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};
use sqlx::migrate::{Migration, MigrationType, Migrator};
use sqlx::pool::PoolConnection;
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use tokio::sync::watch;

use super::error::{Category, StoreError};
use super::sealed::{self, SecretKey};
use crate::store::contract::Heard;
use crate::store::settings::DatabaseSettings as Settings;
use crate::tasks::Tasks;
pub use error::unavailable;

/// The schema version this build writes; a database whose recorded minimum is newer is
/// refused.
const SCHEMA_VERSION: i64 = spans::SPANS_SCHEMA;

/// Where the database is, as errors and logs may name it: host, port and database, never
/// the user's password.
pub fn describe(url: &str) -> String {
    match PgConnectOptions::from_str(url) {
        Ok(options) => format!(
            "{}:{}/{}",
            options.get_host(),
            options.get_port(),
            options.get_database().unwrap_or("postgres")
        ),
        Err(_) => "an unreadable database URL".to_owned(),
    }
}

/// `url` with its database replaced by `database` (query parameters kept): how a tool
/// that makes a database of its own reaches it.
pub fn with_database(url: &str, database: &str) -> String {
    let (base, query) = url.split_once('?').unwrap_or((url, ""));
    let server = base.rsplit_once('/').map_or(base, |(server, _)| server);
    match query {
        "" => format!("{server}/{database}"),
        query => format!("{server}/{database}?{query}"),
    }
}

/// How long a connection may sit idle and still be used untested: longer, it is tested
/// first (one round trip). A connection in use this recently is known to be alive, as
/// pools such as HikariCP assume by default (half a second there too). A connection the
/// server ended within that fails the statement it is used for, as one ended mid-statement
/// would: a commit, and a start in one call, are made once more on another; any other call
/// is refused as unavailable, to be tried again.
const ALIVE_WITHOUT_TEST: Duration = Duration::from_millis(500);

/// How often a call waiting past its patience checks that the database still answers.
const CHECK_ANSWERED: Duration = Duration::from_millis(250);

/// The backend: its pools and what the contract's health needs.
pub struct Postgres {
    /// Connections for calls: starts, attaches, reads. A call waits up to `pool_wait` for
    /// one, so a burst of starts queues rather than being refused.
    pool: PgPool,
    /// `[store] pool_wait_ms`.
    pool_wait: Duration,
    /// Connections starts gave back lately, handed out before the pool's.
    warm: warm::Warm,
    /// Starts in flight at once: three quarters of the pool, so a burst of starts leaves
    /// the rest to the reads of the runs already going (their followers, their history).
    starts: tokio::sync::Semaphore,
    /// The committers' own connections, one each: a commit never queues behind calls
    /// waiting for the pool, so the runs that started keep their pace through a burst.
    commits: PgPool,
    sealer: sealed::Sealer,
    writable: Arc<watch::Sender<bool>>,
    observer: OnceLock<Box<dyn Fn(Duration) + Send + Sync>>,
    /// Told how long each burst waited for a committer and a connection.
    wait_observer: OnceLock<Box<dyn Fn(Duration) + Send + Sync>>,
    /// Makes writes fail, as a lost database would; for tests.
    fail: AtomicBool,
    /// Who this process is among the replicas.
    identity: replicas::Identity,
    /// Set once another process took this replica's id: nothing more is written.
    lost: AtomicBool,
    /// Whether the runs an earlier life of this replica left were swept.
    swept_own: AtomicBool,
    /// Since when this replica's heartbeat has been renewed without a miss: it judges its
    /// peers gone only after a whole lease of that (after an outage every lease lapsed,
    /// and peers need a moment to renew theirs).
    renewing_since: std::sync::Mutex<Option<Instant>>,
    /// When the last heartbeat that landed was sent: the lease runs from no earlier.
    last_renewed: Arc<std::sync::Mutex<Instant>>,
    /// Where what is heard on the database's notifications goes, when commits notify.
    heard: Option<tokio::sync::broadcast::Sender<Heard>>,
    /// Where bursts wait for their group commit.
    committer: tokio::sync::mpsc::UnboundedSender<committer::Job>,
    /// Where starts wait to be written together.
    start_jobs: tokio::sync::mpsc::UnboundedSender<start_batch::Job>,
    /// Whether events are written as spans, and how a failed commit is tried again.
    spans: spans::Spans,
    /// Where it is, for messages.
    place: String,
    /// How long a commit waits for the database's answer, on this side: a link that went
    /// silent (no reset) would otherwise hold the commit, and every run behind it, for as
    /// long as the operating system keeps the connection.
    commit_deadline: Duration,
    /// When the database last answered a commit: a call left unanswered while others
    /// were answered met a busy database, not a silent one.
    last_answer: std::sync::Mutex<Instant>,
    /// The committers, the heartbeat and the listener: stopped by
    /// [`Health::stop`](crate::store::contract::Health::stop), which releases the id.
    tasks: Tasks,
}

impl Postgres {
    /// Connects, applies the migrations, checks the schema's minimum version and the
    /// sealing key's fingerprint, claims the replica id and starts its heartbeat and the
    /// group committer.
    pub async fn connect(settings: &Settings, key: &SecretKey) -> Result<Arc<Self>, StoreError> {
        let place = describe(&settings.url);
        let options =
            PgConnectOptions::from_str(&settings.url).map_err(|_| StoreError::Backend {
                category: Category::Internal,
                message:
                    "the database URL cannot be read (postgres://user:password@host:port/database)"
                        .to_owned(),
            })?;
        let timeout = settings.statement_timeout.as_millis().to_string();
        // A session idle inside a transaction that long (its process paused mid-commit)
        // is ended, so the locks it holds do not hold up the sweep of its runs. Prepared
        // statements keep one generic plan: every query here is a lookup by key, and the
        // commit's statement, whose arrays make each custom plan look cheaper, would
        // otherwise be planned again on every commit (measured: a third of the database's
        // CPU per run). A generic plan is only as good as the statistics it was made
        // from: `statistics.rs` keeps them from falling far behind.
        let options = options.options([
            ("statement_timeout", timeout.as_str()),
            ("idle_in_transaction_session_timeout", timeout.as_str()),
            ("plan_cache_mode", "force_generic_plan"),
        ]);
        let unreachable = |err: sqlx::Error| StoreError::Backend {
            category: Category::Unavailable,
            message: format!("cannot reach PostgreSQL at {place}: {}", error::text(&err)),
        };
        // How long one wait for a connection may take before the database's silence is
        // judged: for a call, one step of its wait (see `connection`); for a commit, all.
        let step = settings.statement_timeout.max(Duration::from_secs(1));
        let pool = PgPoolOptions::new()
            .max_connections(settings.pool_size.max(1))
            // The pool would test every connection it hands out (a round trip before each
            // call's first statement): only one that sat idle for long is.
            .test_before_acquire(false)
            .before_acquire(|connection, meta| {
                Box::pin(async move {
                    if meta.idle_for > ALIVE_WITHOUT_TEST {
                        sqlx::Connection::ping(connection).await?;
                    }
                    Ok(true)
                })
            })
            .acquire_timeout(step.min(settings.pool_wait))
            .connect_with(options.clone())
            .await
            .map_err(unreachable)?;
        let committers = committer::committers(settings.pool_size);
        let commits = PgPoolOptions::new()
            .max_connections(u32::try_from(committers).unwrap_or(u32::MAX))
            .acquire_timeout(step)
            .connect_lazy_with(options);
        migrator()
            .run(&pool)
            .await
            .map_err(|err| StoreError::Backend {
                category: Category::Unavailable,
                message: format!("cannot migrate the database at {place}: {err}"),
            })?;
        check_schema(&pool, &place).await?;
        check_key(&pool, key, &place).await?;
        let identity = replicas::Identity {
            id: settings.replica_id.clone(),
            instance: uuid::Uuid::new_v4(),
            lease: settings.lease,
        };
        replicas::claim(&pool, &identity, &place).await?;
        let spans = spans::Spans::default();
        spans.look(&pool).await.map_err(error::from_sqlx)?;
        let writable = Arc::new(watch::Sender::new(true));
        let tasks = Tasks::default();
        let backend = Arc::new_cyclic(|backend| Self {
            pool,
            pool_wait: settings.pool_wait,
            warm: warm::Warm::default(),
            starts: tokio::sync::Semaphore::new(
                usize::try_from(settings.pool_size.saturating_mul(3) / 4)
                    .unwrap_or(usize::MAX)
                    .max(1),
            ),
            commits,
            sealer: sealed::Sealer::new(key),
            writable,
            observer: OnceLock::new(),
            wait_observer: OnceLock::new(),
            fail: AtomicBool::new(false),
            identity,
            lost: AtomicBool::new(false),
            swept_own: AtomicBool::new(false),
            renewing_since: std::sync::Mutex::new(Some(Instant::now())),
            last_renewed: Arc::new(std::sync::Mutex::new(Instant::now())),
            heard: settings.notify.then(listen::heard),
            committer: committer::start(backend.clone(), committers, &tasks),
            start_jobs: start_batch::start(backend.clone(), committers, &tasks),
            spans,
            place,
            // The server's own timeout, with a margin for the round trip.
            commit_deadline: settings.statement_timeout + Duration::from_secs(1),
            last_answer: std::sync::Mutex::new(Instant::now()),
            tasks,
        });
        replicas::renew(Arc::downgrade(&backend), &backend.tasks);
        if settings.notify {
            backend.listen();
        }
        Ok(backend)
    }

    /// Starts a transaction, or fails as unavailable while writes are made to fail.
    async fn begin(&self) -> Result<sqlx::Transaction<'static, sqlx::Postgres>, StoreError> {
        self.check_writable()?;
        let connection = self.connection().await?;
        sqlx::Transaction::begin(connection, None)
            .await
            .map_err(|err| self.failed(err))
    }

    /// [`Self::begin`] with a `BEGIN` of its own (settings of the transaction sent with
    /// it, in one round trip), for a call that began waiting at `waiting_since`.
    async fn begin_with(
        &self,
        begin: &'static str,
        waiting_since: Instant,
    ) -> Result<sqlx::Transaction<'static, sqlx::Postgres>, StoreError> {
        self.check_writable()?;
        let connection = self.connection_since(waiting_since).await?;
        sqlx::Transaction::begin(connection, Some(sqlx::SqlSafeStr::into_sql_str(begin)))
            .await
            .map_err(|err| self.failed(err))
    }

    /// A connection for a call: one a start gave back lately (see `warm.rs`), else the
    /// pool's. While none comes free and the database
    /// answers, the call waits, up to `[store] pool_wait_ms` (its own deadline may
    /// end it first): a burst queues rather than being refused. Each wait for a connection
    /// is bounded as a statement is, so a database that fell silent (a connection's check
    /// unanswered, no commit landing) fails the call as soon as it did before.
    async fn connection(&self) -> Result<PoolConnection<sqlx::Postgres>, StoreError> {
        self.connection_since(Instant::now()).await
    }

    /// [`Self::connection`] for a call that began waiting at `began` (for its turn among
    /// starts): one wait of `pool_wait_ms` in all.
    async fn connection_since(
        &self,
        began: Instant,
    ) -> Result<PoolConnection<sqlx::Postgres>, StoreError> {
        if let Some(warm) = self.warm.take() {
            return Ok(warm);
        }
        loop {
            let err = match self.pool.acquire().await {
                Ok(connection) => {
                    // Checked or opened just now: the database answers.
                    self.answered();
                    return Ok(connection);
                }
                Err(err) => err,
            };
            if !matches!(err, sqlx::Error::PoolTimedOut) || !self.answered_lately() {
                return Err(self.failed(err));
            }
            if began.elapsed() >= self.pool_wait {
                return Err(self.pool_busy(began.elapsed()));
            }
        }
    }

    /// A turn among the starts in flight, taken in arrival order; the start began waiting
    /// at `began`, and its turn and then its connection come within one `[store]
    /// pool_wait_ms`.
    async fn start_turn(
        &self,
        began: Instant,
    ) -> Result<tokio::sync::SemaphorePermit<'_>, StoreError> {
        match tokio::time::timeout(self.pool_wait, self.starts.acquire()).await {
            Ok(Ok(turn)) => Ok(turn),
            Ok(Err(_)) | Err(_) => Err(self.pool_busy(began.elapsed())),
        }
    }

    /// A call refused after `waited` for a connection while every one was in use: busy,
    /// not lost (health and every other run carry on).
    fn pool_busy(&self, waited: Duration) -> StoreError {
        StoreError::Backend {
            category: Category::Unavailable,
            message: format!(
                "the database at {} is busy: no connection came free in {} ms ([store] \
                 pool_wait_ms is {}); try again",
                self.place,
                waited.as_millis(),
                self.pool_wait.as_millis()
            ),
        }
    }

    /// Fails as [`Self::begin`] does when this process may not write.
    fn check_writable(&self) -> Result<(), StoreError> {
        if self.lost.load(Ordering::SeqCst) {
            return Err(StoreError::Fenced);
        }
        if self.fail.load(Ordering::SeqCst) {
            self.writable.send_replace(false);
            return Err(unavailable("writes are failing (simulated)"));
        }
        Ok(())
    }

    /// The error, noting an unavailable database for health. A wait for a connection that
    /// timed out while every connection is open and in use is a busy pool, not a lost
    /// database, and so is a statement timed out, as long as the database answers other
    /// calls or commits (a silent one leaves every connection in use too): the caller is
    /// refused (`UNAVAILABLE`, to retry), but health and every other run carry on, rather
    /// than a burst of starts taking the replica out of service. A lost database closes
    /// the pool's connections (and fails the heartbeat's own), so it is still noticed.
    fn failed(&self, err: sqlx::Error) -> StoreError {
        if matches!(err, sqlx::Error::PoolTimedOut)
            && self.pool.size() >= self.pool.options().get_max_connections()
            && self.answered_lately()
        {
            return self.pool_busy(self.pool.options().get_acquire_timeout());
        }
        if error::is_overload(&err) && self.answered_lately() {
            return StoreError::Backend {
                category: Category::Unavailable,
                message: format!(
                    "the database at {} is busy ({}); try again",
                    self.place,
                    error::text(&err)
                ),
            };
        }
        let err = error::from_sqlx(err);
        if err.category() == Category::Unavailable {
            self.writable.send_replace(false);
        }
        err
    }

    /// A commit that failed with `err`. Its connections are its own (they do not come from
    /// the calls' pool), so a wait for one that timed out says the database did not answer
    /// the check or the connect in time: [`Self::slow_or_silent`], never the calls' pool
    /// being busy.
    fn commit_failed(&self, err: sqlx::Error) -> StoreError {
        if matches!(err, sqlx::Error::PoolTimedOut) {
            return self.slow_or_silent(self.commits.options().get_acquire_timeout());
        }
        self.failed(err)
    }

    /// A call the database did not answer within `waited`. When it answered other commits
    /// within the last commit deadline, it is busy, not silent: this call alone is refused
    /// (`UNAVAILABLE`, to try again) and health stays as it is, so a burst does not take
    /// the replica out of service. Otherwise it is [`Self::unanswered`].
    fn slow_or_silent(&self, waited: Duration) -> StoreError {
        if !self.answered_lately() {
            return self.unanswered(waited);
        }
        StoreError::Backend {
            category: Category::Unavailable,
            message: format!(
                "the database at {} is busy: no answer to this call within {} s while it \
                 answered others; try again",
                self.place,
                waited.as_secs()
            ),
        }
    }

    /// Notes that the database answered just now.
    fn answered(&self) {
        if let Ok(mut last) = self.last_answer.lock() {
            *last = Instant::now();
        }
    }

    /// Whether the database answered (a commit, or a connection's check) within the last
    /// commit deadline.
    fn answered_lately(&self) -> bool {
        self.last_answer
            .lock()
            .map(|last| last.elapsed() < self.commit_deadline)
            .unwrap_or(false)
    }

    /// A commit the database did not answer within `waited`: the store is
    /// marked unwritable (health turns `NOT_SERVING`, new runs are refused) until a commit
    /// lands. It may still land; a burst committed again writes its records once.
    fn unanswered(&self, waited: Duration) -> StoreError {
        self.writable.send_replace(false);
        unavailable(&format!(
            "the database cannot be reached: no answer from {} within {} s",
            self.place,
            waited.as_secs()
        ))
    }

    /// `work` (a transaction and its statements), given up once it has waited past what a
    /// wait for a connection and two statements may take while the database has stopped
    /// answering, or past the pool's whole wait and those in any case: a database that fell
    /// silent (no reset) would otherwise hold it for as long as the connection lives, while
    /// a busy one that answers others lets it queue. Given up, it is
    /// [`Self::slow_or_silent`].
    async fn bounded<T>(
        &self,
        work: impl std::future::Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        let patience = self.pool.options().get_acquire_timeout() + 2 * self.commit_deadline;
        let most = self.pool_wait + patience;
        let began = Instant::now();
        tokio::pin!(work);
        let mut step = patience;
        loop {
            if let Ok(done) = tokio::time::timeout(step, &mut work).await {
                return done;
            }
            let waited = began.elapsed();
            if waited >= most || !self.answered_lately() {
                return Err(self.slow_or_silent(waited));
            }
            step = CHECK_ANSWERED.min(most - waited);
        }
    }

    /// Commits `tx`, durably; a success marks the store writable and is timed.
    async fn finish(
        &self,
        tx: sqlx::Transaction<'static, sqlx::Postgres>,
        started: Instant,
    ) -> Result<(), StoreError> {
        tx.commit().await.map_err(|err| self.failed(err))?;
        self.committed(started);
        Ok(())
    }

    /// A commit begun at `started` is durable: timed, and the store marked writable.
    fn committed(&self, started: Instant) {
        if let Some(observe) = self.observer.get() {
            observe(started.elapsed());
        }
        self.answered();
        self.writable
            .send_if_modified(|writable| !std::mem::replace(writable, true));
    }
}

/// The embedded migrations, applied in order under the migrator's advisory lock, so
/// replicas starting at once on an empty database apply each once.
fn migrator() -> Migrator {
    let steps = [
        (1, "initial", include_str!("migrations/0001_initial.sql")),
        (2, "replicas", include_str!("migrations/0002_replicas.sql")),
        (3, "agents", include_str!("migrations/0003_agents.sql")),
        (
            4,
            "agent_messages",
            include_str!("migrations/0004_agent_messages.sql"),
        ),
        (
            5,
            "message_parents",
            include_str!("migrations/0005_message_parents.sql"),
        ),
        (
            6,
            "listed_runs",
            include_str!("migrations/0006_listed_runs.sql"),
        ),
        (
            7,
            "live_in_conversation",
            include_str!("migrations/0007_live_in_conversation.sql"),
        ),
        (8, "queued", include_str!("migrations/0008_queued.sql")),
        (
            9,
            "start_in_one_call",
            include_str!("migrations/0009_start_in_one_call.sql"),
        ),
        (
            10,
            "event_spans",
            include_str!("migrations/0010_event_spans.sql"),
        ),
        (
            11,
            "start_many",
            include_str!("migrations/0011_start_many.sql"),
        ),
    ];
    Migrator::with_migrations(
        steps
            .into_iter()
            .map(|(version, name, sql)| {
                Migration::new(
                    version,
                    name.into(),
                    MigrationType::Simple,
                    sqlx::SqlStr::from_static(sql),
                    false,
                )
            })
            .collect(),
    )
}

/// Refuses a database whose schema needs a newer build than this one.
async fn check_schema(pool: &PgPool, place: &str) -> Result<(), StoreError> {
    sqlx::query(
        "INSERT INTO store_meta (key, value) VALUES ('min_version', $1) ON CONFLICT (key) DO NOTHING",
    )
    .bind(SCHEMA_VERSION.to_string())
    .execute(pool)
    .await
    .map_err(error::from_sqlx)?;
    let (min,): (String,) =
        sqlx::query_as("SELECT value FROM store_meta WHERE key = 'min_version'")
            .fetch_one(pool)
            .await
            .map_err(error::from_sqlx)?;
    let min: i64 = min.parse().unwrap_or(i64::MAX);
    if min > SCHEMA_VERSION {
        return Err(StoreError::Backend {
            category: Category::Internal,
            message: format!(
                "the database at {place} needs schema version {min}; this build writes version {SCHEMA_VERSION}: upgrade it"
            ),
        });
    }
    Ok(())
}

/// A short, one-way fingerprint of the sealing key: replicas compare keys without any of
/// them showing one.
fn fingerprint(key: &SecretKey) -> String {
    let digest = Sha256::new()
        .chain_update(b"agent-runner sealing key\0")
        .chain_update(key.to_base64().as_bytes())
        .finalize();
    digest.iter().take(8).map(|b| format!("{b:02x}")).collect()
}

/// Records the key's fingerprint on first use, and refuses another key later: what one
/// replica sealed, every replica must open.
async fn check_key(pool: &PgPool, key: &SecretKey, place: &str) -> Result<(), StoreError> {
    let ours = fingerprint(key);
    sqlx::query(
        "INSERT INTO store_meta (key, value) VALUES ('key_fingerprint', $1) ON CONFLICT (key) DO NOTHING",
    )
    .bind(&ours)
    .execute(pool)
    .await
    .map_err(error::from_sqlx)?;
    let (recorded,): (String,) =
        sqlx::query_as("SELECT value FROM store_meta WHERE key = 'key_fingerprint'")
            .fetch_one(pool)
            .await
            .map_err(error::from_sqlx)?;
    if recorded != ours {
        return Err(StoreError::SecretKey(format!(
            "the database at {place} was sealed with another key (fingerprint {recorded}; this process's key has {ours}): start every replica with the same AGENT_RUNNER_SECRET_KEY"
        )));
    }
    Ok(())
}

#[async_trait::async_trait]
impl crate::store::contract::Health for Postgres {
    fn writable(&self) -> watch::Receiver<bool> {
        self.writable.subscribe()
    }

    async fn probe(&self) -> Result<(), StoreError> {
        let started = Instant::now();
        let mut tx = self.begin().await?;
        sqlx::query(
            "INSERT INTO store_meta (key, value) VALUES ('probe', now()::text) \
             ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
        )
        .execute(&mut *tx)
        .await
        .map_err(|err| self.failed(err))?;
        self.finish(tx, started).await
    }

    /// Stops the committers (once what is queued is committed), the heartbeat and the
    /// listener, then gives the replica id up.
    async fn stop(&self, within: Duration) {
        let started = Instant::now();
        self.warm.clear();
        if !self.tasks.stop(within).await {
            tracing::warn!(?within, "the store's own tasks did not stop in time");
        }
        let left = within.saturating_sub(started.elapsed());
        let _ = tokio::time::timeout(left, replicas::release(&self.pool, &self.identity)).await;
    }

    fn observe_commit_waits(&self, observe: Box<dyn Fn(Duration) + Send + Sync>) {
        let _ = self.wait_observer.set(observe);
    }

    fn observe_commits(&self, observe: Box<dyn Fn(Duration) + Send + Sync>) {
        let _ = self.observer.set(observe);
    }

    #[cfg(any(test, feature = "test-utils"))]
    fn fail_writes(&self, fail: bool) {
        self.fail.store(fail, Ordering::SeqCst);
    }

    #[cfg(any(test, feature = "test-utils"))]
    async fn find_bytes(&self, needle: &[u8]) -> Result<Vec<String>, StoreError> {
        let text = String::from_utf8_lossy(needle).into_owned();
        let hex: String = needle.iter().map(|b| format!("{b:02x}")).collect();
        let mut found = Vec::new();
        for table in [
            "conversations",
            "messages",
            "thoughts",
            "events",
            "files",
            "idempotency_keys",
            "providers",
            "api_keys",
            "tenant_usage",
            "replicas",
            "run_commands",
        ] {
            let rows: Vec<(String,)> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
                "SELECT t::text FROM {table} t WHERE strpos(t::text, $1) > 0 OR strpos(t::text, $2) > 0"
            )))
            .bind(&text)
            .bind(&hex)
            .fetch_all(&mut *self.connection().await?)
            .await
            .map_err(error::from_sqlx)?;
            found.extend(rows.into_iter().map(|(row,)| {
                let shown: String = row.chars().take(80).collect();
                format!("{table}: {shown}")
            }));
        }
        Ok(found)
    }
}

impl Drop for Postgres {
    /// An opener that never stopped the store (a test, a tool) gives the id up as it goes,
    /// so a restart under the same id need not wait for the lease to lapse.
    fn drop(&mut self) {
        if self.tasks.is_stopping() || tokio::runtime::Handle::try_current().is_err() {
            return;
        }
        let (pool, identity) = (self.pool.clone(), self.identity.clone());
        self.tasks
            .spawn(async move { replicas::release(&pool, &identity).await });
    }
}

impl std::fmt::Debug for Postgres {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Postgres").field("at", &self.place).finish()
    }
}

#[cfg(test)]
mod busy_tests;
#[cfg(test)]
mod spans_tests;
#[cfg(test)]
mod start_batch_tests;
#[cfg(test)]
mod start_tests;
#[cfg(test)]
mod statistics_tests;
#[cfg(test)]
mod tests;
