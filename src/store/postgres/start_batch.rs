//! Starts written together: the starts waiting at one moment go to the database in one
//! call and one transaction (`agent_runner_start_many`, migration 0011), as the bursts of
//! runs go in a group commit. A transaction is most of what a start costs the database;
//! a lone start still goes at once, in a batch of one.

use std::sync::{Arc, Weak};
use std::time::Instant;

use tokio::sync::{mpsc, oneshot, Mutex};
use uuid::Uuid;

use super::error::{is_connection_lost, is_overload};
use super::start::{Outcome, StartArgs, FIRST_EPOCH};
use super::Postgres;
use crate::store::contract::{Inserted, NewMessage};
use crate::store::error::{Category, StoreError};
use crate::tasks::Tasks;

/// Starts one call carries at most: a batch holds the locks of all its conversations
/// until it commits, so a bounded one keeps that wait short.
const BATCH: usize = 64;

/// The call.
const START_MANY: &str = "SELECT outcome, placed_seq, placed_ordinal FROM \
    agent_runner_start_many($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, \
    $15, $16, $17, $18, $19, $20, $21)";

/// One start waiting for its batch.
pub(super) struct Job {
    args: Arc<StartArgs>,
    reply: oneshot::Sender<Answer>,
    queued: Instant,
}

/// What a start's batch answers it.
pub(super) enum Answer {
    /// The database's answer for this start.
    Placed(Outcome),
    /// The batch failed as a whole (one start's failure fails them all): this start is
    /// made in a call of its own, which meets its own failure, if any. With `again`, the
    /// batch may have landed before its answer was lost.
    Alone { again: bool },
    /// The database could not be reached or was busy: every start of the batch fails so.
    Failed { category: Category, message: String },
}

/// Starts `count` batchers of `backend` on `tasks`; they stop once the backend is
/// dropped, or once `tasks` stop and nothing is left queued.
pub(super) fn start(
    backend: Weak<Postgres>,
    count: usize,
    tasks: &Tasks,
) -> mpsc::UnboundedSender<Job> {
    let (jobs, queue) = mpsc::unbounded_channel::<Job>();
    let queue = Arc::new(Mutex::new(queue));
    for _ in 0..count {
        let queue = Arc::clone(&queue);
        let (backend, stopping) = (backend.clone(), tasks.stopping());
        tasks.spawn(async move {
            let mut waiting = Vec::with_capacity(BATCH);
            loop {
                // One batcher takes what is waiting; the others wait their turn. What is
                // queued is started before a stop is heeded.
                let received = tokio::select! {
                    biased;
                    received = async {
                        queue.lock().await.recv_many(&mut waiting, BATCH).await
                    } => received,
                    () = stopping.cancelled() => return,
                };
                if received == 0 {
                    return;
                }
                let Some(backend) = backend.upgrade() else {
                    return;
                };
                backend.start_many(std::mem::take(&mut waiting)).await;
            }
        });
    }
    jobs
}

impl Postgres {
    /// Writes `new` in one call, counted against the tenant's limits as the caller's own
    /// transaction would count it: `None` when the conversation has a live message its
    /// rule reads, or the tenant is at a limit, which the caller decides (and says why) in
    /// a transaction of its own. The call is made with the starts waiting beside it, in
    /// one transaction (see `start_batch.rs`); a batch that failed as a whole leaves each
    /// of its starts to a call of its own.
    pub(super) async fn start_in_one_call(
        &self,
        new: &mut NewMessage<'_>,
        began: Instant,
    ) -> Result<Option<Inserted>, StoreError> {
        new.message.seq = 0;
        new.message.ordinal = 0;
        let Some(args) = StartArgs::of(new)? else {
            return Ok(None);
        };
        self.check_writable()?;
        let args = Arc::new(args);
        let outcome = match self.start_batched(Arc::clone(&args)).await {
            Answer::Placed(outcome) => outcome,
            Answer::Alone { again } => {
                let _turn = self.start_turn(began).await?;
                self.start_alone(&args, again, began).await?
            }
            Answer::Failed { category, message } => {
                return Err(StoreError::Backend { category, message })
            }
        };
        match outcome {
            Outcome::Inserted { seq, ordinal } => {
                new.message.seq = u64::try_from(seq).unwrap_or_default();
                new.message.ordinal = u64::try_from(ordinal).unwrap_or_default();
                Ok(Some(Inserted::Yes))
            }
            Outcome::KeyTaken => {
                let key = args.key.as_deref().unwrap_or_default();
                let winner = self.get_idempotency_now(new.tenant, key).await?;
                Ok(Some(Inserted::KeyTaken(winner)))
            }
            Outcome::Decide => Ok(None),
        }
    }

    /// The answer of `args`'s batch; `Alone` when no batcher took it (the store stops).
    pub(super) async fn start_batched(&self, args: Arc<StartArgs>) -> Answer {
        let (reply, answer) = oneshot::channel();
        let job = Job {
            args,
            reply,
            queued: Instant::now(),
        };
        if self.start_jobs.send(job).is_err() {
            return Answer::Alone { again: false };
        }
        // A batcher dropped with the job taken (the store stopping mid-call) may have
        // written it.
        answer.await.unwrap_or(Answer::Alone { again: true })
    }

    /// Writes `jobs` in one call and answers each.
    async fn start_many(&self, jobs: Vec<Job>) {
        let began = jobs.iter().map(|job| job.queued).min();
        let answers = match self
            .call_start_many(&jobs, began.unwrap_or_else(Instant::now))
            .await
        {
            Ok(outcomes) => outcomes.into_iter().map(Answer::Placed).collect(),
            Err(failed) => jobs.iter().map(|_| failed.answer()).collect::<Vec<_>>(),
        };
        for (job, answer) in jobs.into_iter().zip(answers) {
            let _ = job.reply.send(answer);
        }
    }

    /// The call for `jobs`, made once more on another connection when the first one's was
    /// lost; each start's outcome, in their order.
    async fn call_start_many(&self, jobs: &[Job], began: Instant) -> Result<Vec<Outcome>, Failed> {
        self.check_writable().map_err(Failed::of)?;
        // A turn among the starts in flight, as a start of its own takes: the connections
        // they hold (and give back for the next start) leave the rest to reads.
        let _turn = self.start_turn(began).await.map_err(Failed::of)?;
        let columns = Columns::of(jobs.iter().map(|job| &*job.args));
        let call = |again: bool| columns.bind(&self.identity.id, again);
        let mut connection = self.connection_since(began).await.map_err(Failed::of)?;
        let mut answer = call(false).fetch_all(&mut *connection).await;
        let mut again = false;
        if answer.as_ref().is_err_and(is_connection_lost) {
            drop(connection.detach());
            again = true;
            connection = self.connection_since(began).await.map_err(Failed::of)?;
            answer = call(true).fetch_all(&mut *connection).await;
        }
        let rows = match answer {
            Ok(rows) => rows,
            Err(err) if is_connection_lost(&err) || is_overload(&err) => {
                return Err(Failed::of(self.failed(err)))
            }
            // A failure of one start's (a record the database refused, a deadlock) fails
            // the whole batch: each start is made alone, to meet its own.
            Err(_) => return Err(Failed::Alone { again }),
        };
        self.warm.give_back(connection);
        self.answered();
        if rows.len() != jobs.len() {
            return Err(Failed::Alone { again: true });
        }
        rows.into_iter()
            .map(|row| Outcome::read(row).map_err(Failed::of))
            .collect()
    }
}

/// Why a batch has no outcome for its starts.
enum Failed {
    /// See [`Answer::Alone`].
    Alone { again: bool },
    /// See [`Answer::Failed`].
    Store(Category, String),
}

impl Failed {
    fn of(err: StoreError) -> Self {
        match err {
            StoreError::Backend { category, message } => Failed::Store(category, message),
            // Not the database's answer (fenced, a codec): each start meets it alone.
            StoreError::Codec { .. }
            | StoreError::NotDurable(_)
            | StoreError::UnsupportedVersion { .. }
            | StoreError::SecretKey(_)
            | StoreError::Sealed(_)
            | StoreError::Fenced
            | StoreError::Reopening => Failed::Alone { again: false },
        }
    }

    fn answer(&self) -> Answer {
        match self {
            Failed::Alone { again } => Answer::Alone { again: *again },
            Failed::Store(category, message) => Answer::Failed {
                category: *category,
                message: message.clone(),
            },
        }
    }
}

/// The arguments of a batch's starts, column by column, as the call binds them.
#[derive(Default)]
pub(super) struct Columns<'a> {
    tenant: Vec<&'a str>,
    id: Vec<Uuid>,
    conversation: Vec<Uuid>,
    conversation_record: Vec<Option<&'a str>>,
    head: Vec<&'a str>,
    tail: Vec<&'a str>,
    spec: Vec<&'a str>,
    agent: Vec<Option<&'a str>>,
    parent: Vec<Option<Uuid>>,
    lock: Vec<&'a str>,
    alone: Vec<bool>,
    key: Vec<Option<&'a str>>,
    fingerprint: Vec<Option<&'a str>>,
    limits: Vec<Option<&'a str>>,
    child: Vec<bool>,
    max_running: Vec<i32>,
    per_minute: Vec<i32>,
    max_children: Vec<i32>,
}

impl<'a> Columns<'a> {
    pub(super) fn of(starts: impl Iterator<Item = &'a StartArgs>) -> Self {
        let mut columns = Columns::default();
        for args in starts {
            columns.tenant.push(&args.tenant);
            columns.id.push(args.id);
            columns.conversation.push(args.conversation);
            columns
                .conversation_record
                .push(args.conversation_record.as_deref());
            columns.head.push(&args.head);
            columns.tail.push(&args.tail);
            columns.spec.push(&args.spec);
            columns.agent.push(args.agent.as_deref());
            columns.parent.push(args.parent);
            columns.lock.push(&args.lock);
            columns.alone.push(args.alone);
            columns.key.push(args.key.as_deref());
            columns.fingerprint.push(args.fingerprint.as_deref());
            columns.limits.push(args.limits.as_deref());
            columns.child.push(args.child);
            columns.max_running.push(args.max_running);
            columns.per_minute.push(args.per_minute);
            columns.max_children.push(args.max_children);
        }
        columns
    }

    /// The call with these columns, made by `owner`, `again` or not.
    pub(super) fn bind<'q>(
        &'q self,
        owner: &'q str,
        again: bool,
    ) -> sqlx::query::QueryAs<
        'q,
        sqlx::Postgres,
        (String, Option<i64>, Option<i64>),
        sqlx::postgres::PgArguments,
    > {
        sqlx::query_as(START_MANY)
            .bind(&self.tenant)
            .bind(&self.id)
            .bind(&self.conversation)
            .bind(&self.conversation_record)
            .bind(&self.head)
            .bind(&self.tail)
            .bind(&self.spec)
            .bind(owner)
            .bind(FIRST_EPOCH)
            .bind(&self.agent)
            .bind(&self.parent)
            .bind(&self.lock)
            .bind(&self.alone)
            .bind(&self.key)
            .bind(&self.fingerprint)
            .bind(again)
            .bind(&self.limits)
            .bind(&self.child)
            .bind(&self.max_running)
            .bind(&self.per_minute)
            .bind(&self.max_children)
    }
}
