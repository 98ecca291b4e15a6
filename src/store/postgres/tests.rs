//! The conformance suite on a real PostgreSQL: each test makes a database of its own and
//! drops it. Without a reachable server the tests pass and say they were skipped, except
//! under `CI=true`, where PostgreSQL is part of the machine.

use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use sqlx::{Connection, PgConnection};

use super::{Postgres, Settings};
use crate::domain::{Conversation, Message};
use crate::store::conformance::{self, Harness};
use crate::store::sealed::SecretKey;
use crate::store::Store;

/// The server tests use when `AGENT_RUNNER_TEST_DATABASE_URL` does not name another.
const DEFAULT_URL: &str = "postgres://postgres@127.0.0.1:5432/test";

/// One test at a time in this process, so it holds at most four connections: the admin
/// one, the process lock, and a pool of two.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn admin_url() -> String {
    std::env::var("AGENT_RUNNER_TEST_DATABASE_URL").unwrap_or_else(|_| DEFAULT_URL.to_owned())
}

/// Databases made for one test, dropped with it.
pub(super) struct Databases {
    admin: String,
    made: Mutex<Vec<String>>,
    key: SecretKey,
    _turn: tokio::sync::MutexGuard<'static, ()>,
}

impl Databases {
    /// `None` (the test is skipped) when PostgreSQL cannot be reached outside CI.
    pub(super) async fn new() -> Option<Self> {
        let turn = ONE_AT_A_TIME.lock().await;
        let admin = admin_url();
        let reached =
            tokio::time::timeout(Duration::from_secs(5), PgConnection::connect(&admin)).await;
        match reached {
            Ok(Ok(connection)) => {
                let _ = connection.close().await;
            }
            failure => {
                let why = match failure {
                    Ok(Err(err)) => err.to_string(),
                    _ => "no answer within 5 s".to_owned(),
                };
                let place = super::describe(&admin);
                assert!(
                    std::env::var("CI").as_deref() != Ok("true"),
                    "PostgreSQL at {place} is needed in CI: {why}"
                );
                crate::test_utils::say_skipped(&format!("PostgreSQL at {place} cannot be reached ({why}); set AGENT_RUNNER_TEST_DATABASE_URL to run these tests"));
                return None;
            }
        }
        Some(Self {
            admin,
            made: Mutex::default(),
            key: SecretKey::generate(),
            _turn: turn,
        })
    }

    fn settings(&self, database: &str) -> Settings {
        Settings {
            url: super::with_database(&self.admin, database),
            pool_size: 2,
            pool_wait: Duration::from_secs(5),
            statement_timeout: Duration::from_secs(5),
            replica_id: "conformance".to_owned(),
            lease: Duration::from_secs(2),
            notify: true,
        }
    }

    /// The URL of the database made last.
    pub(super) fn url(&self) -> String {
        super::with_database(&self.admin, &self.last())
    }

    fn last(&self) -> String {
        self.made
            .lock()
            .unwrap()
            .last()
            .cloned()
            .expect("a database was made")
    }

    /// A fresh store with one conversation, opened by its first run's start.
    pub(super) async fn opened(&self) -> (Store, Conversation, Message) {
        let store = self.fresh().await;
        let opening = crate::store::test_records::conversation(&conformance::tenant());
        let first = conformance::start(&store, opening.id, Some(&opening)).await;
        (store, opening, first)
    }
}

#[async_trait]
impl Harness for Databases {
    async fn fresh(&self) -> Store {
        let name = format!("agent_runner_test_{}", uuid::Uuid::new_v4().simple());
        let mut admin = PgConnection::connect(&self.admin).await.unwrap();
        sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
            .execute(&mut admin)
            .await
            .unwrap();
        let _ = admin.close().await;
        self.made.lock().unwrap().push(name.clone());
        let backend = Postgres::connect(&self.settings(&name), &self.key)
            .await
            .unwrap();
        Store::new(backend)
    }

    async fn reopen(&self, store: Store) -> Store {
        drop(store);
        let backend = Postgres::connect(&self.settings(&self.last()), &self.key)
            .await
            .unwrap();
        Store::new(backend)
    }

    async fn writer(&self, _store: &Store) -> Store {
        let settings = Settings {
            replica_id: "conformance-peer".to_owned(),
            ..self.settings(&self.last())
        };
        Store::new(Postgres::connect(&settings, &self.key).await.unwrap())
    }
}

impl Drop for Databases {
    /// Drops the test's databases, from a thread of its own (this may run inside the
    /// test's runtime, which cannot be blocked on).
    fn drop(&mut self) {
        let made = std::mem::take(&mut *self.made.lock().unwrap_or_else(|e| e.into_inner()));
        let admin = self.admin.clone();
        let dropped = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async {
                let mut connection = PgConnection::connect(&admin).await.unwrap();
                for name in made {
                    let _ = sqlx::query(sqlx::AssertSqlSafe(format!(
                        "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
                    )))
                    .execute(&mut connection)
                    .await;
                }
                let _ = connection.close().await;
            });
        });
        let _ = dropped.join();
    }
}

macro_rules! conformance_on_postgres {
    ($($check:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $check() {
                let Some(databases) = Databases::new().await else {
                    return;
                };
                conformance::$check(&databases).await;
            }
        )*
    };
}

conformance::every_check!(conformance_on_postgres);

/// A second live process with the same replica id is refused, naming the id and the
/// database and not the password; one with another id joins; a process with another
/// sealing key is refused, naming the mismatch.
#[tokio::test]
async fn a_second_process_with_the_id_and_another_key_are_refused() {
    let Some(databases) = Databases::new().await else {
        return;
    };
    let first = databases.fresh().await;
    let mut settings = databases.settings(&databases.last());
    let second = Postgres::connect(&settings, &databases.key)
        .await
        .expect_err("one live process per replica id");
    let text = second.to_string();
    assert!(
        text.contains("\"conformance\" is held by another live process"),
        "{text}"
    );
    assert!(text.contains(&databases.last()), "{text}");
    settings.replica_id = "another".to_owned();
    let peer = Postgres::connect(&settings, &databases.key)
        .await
        .expect("another replica joins");
    drop((first, peer));
    settings.replica_id = "conformance".to_owned();

    let other_key = SecretKey::generate();
    let other = Postgres::connect(&settings, &other_key)
        .await
        .expect_err("another key is refused");
    let text = other.to_string();
    assert!(text.contains("another key"), "{text}");
    for key in [&other_key, &databases.key] {
        assert!(!text.contains(&key.to_base64()), "no key is shown: {text}");
    }
}

/// A commit and a sweep of its run meet on the run's row: a commit made while a sweep
/// holds the row waits for it, and when the sweep moved the run to another owner, the
/// commit is refused as fenced and writes nothing, though it began before the move.
#[tokio::test]
async fn a_commit_waiting_on_a_sweep_that_moved_its_run_writes_nothing() {
    use crate::store::conformance::{delta, envelope, tenant};
    use crate::store::{contract::Burst, error::StoreError};
    let Some(databases) = Databases::new().await else {
        return;
    };
    let (store, _, message) = databases.opened().await;
    let url = super::with_database(&databases.admin, &databases.last());
    let mut sweep = PgConnection::connect(&url).await.unwrap();
    sqlx::query("BEGIN").execute(&mut sweep).await.unwrap();
    sqlx::query("SELECT 1 FROM messages WHERE id = $1 FOR UPDATE")
        .bind(message.id.0)
        .execute(&mut sweep)
        .await
        .unwrap();
    let burst = Burst {
        records: Vec::new(),
        events: vec![envelope(&message, 1, delta("late"))],
    };
    let fence = store.fence();
    let writer = store.clone();
    let commit = tokio::spawn(async move { writer.commit(&tenant(), &fence, &burst).await });
    // A real database holds the commit on a row lock: real time for it to get there.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !commit.is_finished(),
        "the commit waits for the sweep's row"
    );
    sqlx::query("UPDATE messages SET owner = 'peer', epoch = epoch + 1 WHERE id = $1")
        .bind(message.id.0)
        .execute(&mut sweep)
        .await
        .unwrap();
    sqlx::query("COMMIT").execute(&mut sweep).await.unwrap();
    let refused = commit.await.unwrap();
    assert!(matches!(refused, Err(StoreError::Fenced)), "{refused:?}");
    let events = store.list_events(&tenant(), message.id, 0).await.unwrap();
    assert!(events.is_empty(), "{events:?}");
    let _ = sweep.close().await;
}

/// Shutdown stops the store's own work: what was committed stays, the replica id is given
/// up at once (a process under the same id joins without waiting out the lease), and a
/// commit after the stop is refused as unavailable instead of waiting for a committer.
#[tokio::test]
async fn a_stopped_store_gives_its_id_up_and_refuses_later_commits() {
    use crate::store::conformance::{delta, envelope, tenant};
    use crate::store::{contract::Burst, error::Category};
    let Some(databases) = Databases::new().await else {
        return;
    };
    let (store, _, message) = databases.opened().await;
    let burst = |seq, text| Burst {
        records: Vec::new(),
        events: vec![envelope(&message, seq, delta(text))],
    };
    store
        .commit(&tenant(), &store.fence(), &burst(1, "kept"))
        .await
        .unwrap();

    let within = Duration::from_secs(5);
    let stopping = std::time::Instant::now();
    store.stop(within).await;
    assert!(stopping.elapsed() < within, "{:?}", stopping.elapsed());
    let late = tokio::time::timeout(
        Duration::from_secs(2),
        store.commit(&tenant(), &store.fence(), &burst(2, "late")),
    )
    .await
    .expect("refused at once");
    assert!(
        matches!(&late, Err(err) if err.category() == Category::Unavailable),
        "{late:?}"
    );

    let joined = tokio::time::timeout(
        Duration::from_secs(1),
        Postgres::connect(&databases.settings(&databases.last()), &databases.key),
    )
    .await
    .expect("the id is free at once (the lease is 2 s)")
    .expect("a process under the same id joins");
    let events = Store::new(joined)
        .list_events(&tenant(), message.id, 0)
        .await
        .unwrap();
    assert_eq!(events.len(), 1, "{events:?}");
}

/// A server that cannot be reached is named by host, port and database; a password in
/// the URL appears nowhere in the error.
#[tokio::test]
async fn an_unreachable_database_is_named_without_its_password() {
    let settings = Settings {
        url: "postgres://app:hunter2-secret@127.0.0.1:1/agents".to_owned(),
        pool_size: 1,
        pool_wait: Duration::from_secs(1),
        statement_timeout: Duration::from_secs(1),
        replica_id: "r1".to_owned(),
        lease: Duration::from_secs(5),
        notify: false,
    };
    let err = Postgres::connect(&settings, &SecretKey::generate())
        .await
        .expect_err("nothing listens on port 1");
    let text = err.to_string();
    assert!(text.contains("127.0.0.1:1/agents"), "{text}");
    assert!(!text.contains("hunter2"), "{text}");
    assert_eq!(err.category(), crate::store::error::Category::Unavailable);
}

/// A URL's database is replaced, its credentials and parameters kept; one shown names
/// host, port and database only.
#[test]
fn urls_name_another_database_and_show_no_password() {
    assert_eq!(
        super::with_database("postgres://u:p@h:5433/test?sslmode=require", "other"),
        "postgres://u:p@h:5433/other?sslmode=require"
    );
    assert_eq!(
        super::with_database("postgres://h/test", "other"),
        "postgres://h/other"
    );
    assert_eq!(
        super::describe("postgres://u:secret@db.internal:5433/agents?sslmode=verify-full"),
        "db.internal:5433/agents"
    );
    assert!(!super::describe("postgres://u:secret@[").contains("secret"));
}

/// Another replica (`id`) on the database made last, its settings edited by `edit`.
pub(super) async fn peer_store(
    databases: &Databases,
    id: &str,
    edit: impl FnOnce(&mut Settings),
) -> Store {
    let mut settings = databases.settings(&databases.last());
    settings.replica_id = id.to_owned();
    edit(&mut settings);
    let backend = Postgres::connect(&settings, &databases.key).await.unwrap();
    Store::new(backend)
}

/// A store of its own on a fresh database, with `edit` made to its settings, and its
/// backend (for the pool) and settings.
pub(super) async fn own_store(
    databases: &Databases,
    edit: impl FnOnce(&mut Settings),
) -> (std::sync::Arc<Postgres>, Store, Settings) {
    drop(databases.fresh().await);
    let mut settings = databases.settings(&databases.last());
    edit(&mut settings);
    let backend = Postgres::connect(&settings, &databases.key).await.unwrap();
    let store = Store::new(
        std::sync::Arc::clone(&backend) as std::sync::Arc<dyn crate::store::contract::Backend>
    );
    (backend, store, settings)
}

/// A start that finds every connection in use waits for one rather than being refused at
/// once: a moment's pressure costs the caller time, not a retry.
#[tokio::test]
async fn a_start_waits_for_a_connection_to_come_free() {
    use crate::store::conformance::{start, tenant};
    use crate::store::test_records::conversation;
    let Some(databases) = Databases::new().await else {
        return;
    };
    let (backend, store, _) = own_store(&databases, |settings| {
        settings.pool_size = 1;
        settings.pool_wait = Duration::from_secs(20);
    })
    .await;
    let held = backend.connection().await.unwrap();
    let released = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(500)).await;
        drop(held);
    });
    let opening = conversation(&tenant());
    let began = std::time::Instant::now();
    start(&store, opening.id, Some(&opening)).await;
    assert!(
        began.elapsed() >= Duration::from_millis(400),
        "the start waited for the held connection: {:?}",
        began.elapsed()
    );
    released.await.unwrap();
}

/// A store with `pool_size` connections for calls and a long wait for them, and a run
/// started in it.
async fn patient_store_with_a_run(
    databases: &Databases,
    pool_size: u32,
) -> (std::sync::Arc<Postgres>, Store, crate::domain::Message) {
    use crate::store::conformance::{start, tenant};
    use crate::store::test_records::conversation;
    let (backend, store, _) = own_store(databases, |settings| {
        settings.pool_size = pool_size;
        settings.pool_wait = Duration::from_secs(20);
    })
    .await;
    let opening = conversation(&tenant());
    let run = start(&store, opening.id, Some(&opening)).await;
    (backend, store, run)
}

/// A run started in a new conversation on a task of its own.
fn start_elsewhere(store: &Store) -> tokio::task::JoinHandle<crate::domain::Message> {
    use crate::store::conformance::{start, tenant};
    use crate::store::test_records::conversation;
    let store = store.clone();
    tokio::spawn(async move {
        let opening = conversation(&tenant());
        start(&store, opening.id, Some(&opening)).await
    })
}

/// Starts take turns (three quarters of the pool at once) and the rest of the pool serves
/// reads: while every turn is taken, a start waits and a read of a running run is answered
/// at once; a turn freed, the start goes on.
#[tokio::test]
async fn starts_wait_their_turn_while_reads_go_on() {
    use crate::store::conformance::tenant;
    let Some(databases) = Databases::new().await else {
        return;
    };
    let (backend, store, running) = patient_store_with_a_run(&databases, 4).await;
    let turns = backend.starts.acquire_many(3).await.unwrap();
    let waiting = start_elsewhere(&store);
    let read = tokio::time::timeout(
        Duration::from_secs(2),
        store.get_message(&tenant(), running.id),
    )
    .await
    .expect("a read is answered while every start turn is taken")
    .unwrap();
    assert_eq!(read.map(|message| message.id), Some(running.id));
    // Ample for a start with a turn to land (a few milliseconds); this one has none.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiting.is_finished(), "the start waits for a turn");
    drop(turns);
    tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .expect("the start goes on once a turn is free")
        .unwrap();
}

/// While calls wait for the pool, a started run's bursts still commit at once: the
/// committers hold connections of their own, so a burst of starts never stalls the runs
/// already going (it once queued their commits behind the starts).
#[tokio::test]
async fn commits_do_not_queue_behind_calls_waiting_for_the_pool() {
    use crate::store::conformance::{delta, envelope, tenant};
    use crate::store::contract::Burst;
    let Some(databases) = Databases::new().await else {
        return;
    };
    let (backend, store, run) = patient_store_with_a_run(&databases, 1).await;
    let held = backend.connection().await.unwrap();
    let waiting = start_elsewhere(&store);
    let burst = Burst {
        records: Vec::new(),
        events: vec![envelope(&run, 1, delta("still going"))],
    };
    tokio::time::timeout(
        Duration::from_secs(5),
        store.commit(&tenant(), &store.fence(), &burst),
    )
    .await
    .expect("the burst committed while a start waited for the pool")
    .unwrap();
    assert!(!waiting.is_finished(), "the start is still waiting");
    drop(held);
    waiting.await.unwrap();
}

/// With several committers (a pool of 16: four), a burst that comes while a long commit
/// is in flight lands: the committer that gathers it beside that commit never waits on one
/// that is waiting for bursts to come (it once could, and the run stalled).
#[tokio::test]
async fn a_burst_beside_a_long_commit_lands_with_many_committers() {
    use crate::store::conformance::{delta, envelope, start, tenant};
    use crate::store::contract::Burst;
    use crate::store::test_records::conversation;
    let Some(databases) = Databases::new().await else {
        return;
    };
    let (_backend, store, _) = own_store(&databases, |settings| settings.pool_size = 16).await;
    let mut runs = Vec::new();
    for _ in 0..2 {
        let opening = conversation(&tenant());
        runs.push(start(&store, opening.id, Some(&opening)).await);
    }
    let (fence, tenant) = (store.fence(), tenant());
    let text = "x".repeat(1024);
    let all = async {
        for step in 0..5_u64 {
            let long = Burst {
                records: Vec::new(),
                events: (1..=500)
                    .map(|i| envelope(&runs[0], step * 500 + i, delta(&text)))
                    .collect(),
            };
            let short = Burst {
                records: Vec::new(),
                events: vec![envelope(&runs[1], step + 1, delta("y"))],
            };
            let beside = async {
                tokio::time::sleep(Duration::from_millis(3)).await;
                store.commit(&tenant, &fence, &short).await
            };
            let (long, short) = tokio::join!(store.commit(&tenant, &fence, &long), beside);
            long.unwrap();
            short.unwrap();
        }
    };
    tokio::time::timeout(Duration::from_secs(20), all)
        .await
        .expect("every burst committed");
}

/// Ends every session on the test's database but the caller's, as a server's operator or
/// its restart would, and waits until they are gone.
pub(super) async fn end_every_session(databases: &Databases) {
    let mut admin = PgConnection::connect(&databases.admin).await.unwrap();
    let (ended,): (i64,) = sqlx::query_as(
        "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid, 5000)) FROM pg_stat_activity \
         WHERE datname = $1 AND pid <> pg_backend_pid()",
    )
    .bind(databases.last())
    .fetch_one(&mut admin)
    .await
    .unwrap();
    assert!(ended > 0, "the store's sessions were ended");
    let _ = admin.close().await;
}

/// A committer keeps its connection from one commit to the next. When the server ends it
/// while it sits idle, no commit fails for it and the store stays writable: commits right
/// after (the committers take turns, so the one that kept a connection finds it dead
/// mid-statement and takes another) and after a pause (each tests its connection first) all land, and every
/// event is read back once.
#[tokio::test]
async fn a_kept_connection_the_server_ended_fails_no_commit() {
    use crate::store::conformance::{delta, envelope, tenant};
    use crate::store::contract::Burst;
    let Some(databases) = Databases::new().await else {
        return;
    };
    let (_backend, store, run) = patient_store_with_a_run(&databases, 2).await;
    let (fence, tenant) = (store.fence(), tenant());
    let commit = |seq: u64, when: &'static str| {
        let burst = Burst {
            records: Vec::new(),
            events: vec![envelope(&run, seq, delta("going"))],
        };
        let (store, tenant, fence) = (store.clone(), tenant.clone(), fence.clone());
        async move {
            store
                .commit(&tenant, &fence, &burst)
                .await
                .unwrap_or_else(|err| panic!("the commit {when} failed: {err:?}"));
        }
    };
    // The committers (a pool of two has two) take turns: at least one keeps a connection.
    tokio::join!(commit(1, "before"), commit(2, "before"));
    end_every_session(&databases).await;
    commit(3, "right after").await;
    commit(4, "right after").await;
    end_every_session(&databases).await;
    tokio::time::sleep(Duration::from_millis(700)).await;
    commit(5, "after a pause").await;
    commit(6, "after a pause").await;
    assert!(*store.writable().borrow(), "the store stayed writable");
    let seqs: Vec<u64> = store
        .list_events(&tenant, run.id, 0)
        .await
        .unwrap()
        .iter()
        .map(|event| event.seq)
        .collect();
    assert_eq!(seqs, [1, 2, 3, 4, 5, 6]);
}

/// Commits in flight scale with the pool: a quarter of it, at least two, at most eight,
/// each on a connection of its own beside the pool's.
#[test]
fn committers_scale_with_the_pool() {
    use super::committer::committers;
    assert_eq!(committers(1), 2);
    assert_eq!(committers(10), 2);
    assert_eq!(committers(20), 5);
    assert_eq!(committers(32), 8);
    assert_eq!(committers(500), 8);
}

/// A queued run a peer adopted (its owner's lease lapsed while the owner was paused) is not
/// started under the old fence: `start_queued` is refused `Fenced` and the run stays queued
/// for the peer, so a woken owner makes none of its calls; nor may it remove it as a steer
/// its run took (`drop_steer`), which is the peer's to decide.
#[tokio::test]
async fn a_queued_run_a_peer_adopted_is_not_started_under_the_old_fence() {
    use crate::store::conformance::tenant;
    use crate::store::contract::{Admission, Inserted, NewMessage};
    use crate::store::error::StoreError;
    use crate::store::test_records::running_message;
    use crate::store::ConversationRule;
    let Some(databases) = Databases::new().await else {
        return;
    };
    let (store, opening, _live) = databases.opened().await;
    let mut queued = running_message(opening.id, 0);
    let inserted = store
        .insert_message(NewMessage {
            tenant: &tenant(),
            conversation: None,
            message: &mut queued,
            spec: &serde_json::json!({}),
            idempotency: None,
            admission: Admission {
                rule: ConversationRule::Queue { max_queued: 8 },
                ..Admission::default()
            },
        })
        .await
        .unwrap();
    assert_eq!(inserted, Inserted::Queued { ahead: 1 });
    let url = super::with_database(&databases.admin, &databases.last());
    let mut peer = PgConnection::connect(&url).await.unwrap();
    sqlx::query("UPDATE messages SET owner = 'peer', epoch = epoch + 1 WHERE id = $1")
        .bind(queued.id.0)
        .execute(&mut peer)
        .await
        .unwrap();

    let started = store
        .start_queued(&tenant(), queued.id, &store.fence(), Admission::default())
        .await;
    assert!(matches!(started, Err(StoreError::Fenced)), "{started:?}");
    let (still,): (bool,) = sqlx::query_as("SELECT queued FROM messages WHERE id = $1")
        .bind(queued.id.0)
        .fetch_one(&mut peer)
        .await
        .unwrap();
    assert!(still, "still queued, for the peer to start");
    let dropped = store
        .drop_steer(&tenant(), queued.id, queued.id, &store.fence())
        .await;
    assert!(matches!(dropped, Err(StoreError::Fenced)), "{dropped:?}");
    let (kept,): (i64,) = sqlx::query_as("SELECT count(*) FROM messages WHERE id = $1")
        .bind(queued.id.0)
        .fetch_one(&mut peer)
        .await
        .unwrap();
    assert_eq!(kept, 1, "the steer stays, for the peer");
    let _ = peer.close().await;
}
