//! Group commit: a committer takes the bursts of every run waiting at the time into one
//! statement, its own transaction, that checks and writes them all. Under load a
//! commit (and its WAL flush) serves many runs; a lone run's burst goes at once. A few
//! committers take turns, so one group is written while another waits for its flush; a
//! small group waits a moment for the bursts it can expect ([`Pacing`]), so a replica
//! holding a few runs writes fewer, fuller transactions.

use std::collections::HashMap;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use sqlx::pool::PoolConnection;
use sqlx::PgPool;
use tokio::sync::{mpsc, oneshot, watch, Mutex};
use uuid::Uuid;

use super::error::{codec, is_connection_lost};
use super::spans::Layout;
use super::Postgres;
use crate::domain::{EventEnvelope, MessageId, Tenant};
use crate::store::contract::{Burst, Fence, Record};
use crate::store::error::StoreError;
use crate::tasks::Tasks;

/// Bursts one transaction takes at most.
const GROUP: usize = 128;

/// Shards of each tenant's daily token count (see `tenant_usage` in the first migration).
const USAGE_SHARDS: u8 = 64;

/// Transactions in flight at once, for a pool of `pool_size` connections: at least two,
/// so while one waits for its WAL flush the next group is written; at most a quarter of
/// the pool, so a stream of commits never holds the connections that starts, reads and
/// followers need. Fewer transactions in flight also means fuller ones: at 50 runs at a
/// time, two committers make a third of the transactions eight made, for 0.6x the
/// replica's CPU and a third of the database's.
pub fn committers(pool_size: u32) -> usize {
    usize::try_from(pool_size / 4)
        .unwrap_or(usize::MAX)
        .clamp(2, 8)
}

/// One run's burst, encoded by its caller (so encoding runs on the callers' tasks, in
/// parallel), waiting for its commit.
pub struct Job {
    rows: Rows,
    reply: oneshot::Sender<Result<(), StoreError>>,
    /// When it was queued.
    queued: Instant,
}

/// The rows of one or more bursts, column by column, as the statements bind them.
#[derive(Default)]
struct Rows {
    /// Each burst's run and the fence it writes under: tenant, message, owner, epoch.
    fences: (Vec<String>, Vec<Uuid>, Vec<String>, Vec<i64>),
    thoughts: (Vec<String>, Vec<Uuid>, Vec<i32>, Vec<String>),
    messages: (Vec<String>, Vec<Uuid>, Vec<String>, Vec<bool>),
    tokens: TokenRows,
    /// Rows of events: tenant, message, first `seq` and the JSON of the event, or of the
    /// span's events.
    events: (Vec<String>, Vec<Uuid>, Vec<i64>, Vec<String>),
    /// Each row's last `seq` when it is a span (see [`super::spans`]).
    event_ends: Vec<Option<i64>>,
}

/// Token counts, one per record: its tenant, day and tokens, and the event it goes with
/// (message and `seq`; none: always counted).
#[derive(Default, Clone)]
struct TokenRows {
    tenants: Vec<String>,
    days: Vec<i32>,
    tokens: Vec<i64>,
    messages: Vec<Option<Uuid>>,
    seqs: Vec<i64>,
}

impl Rows {
    fn add(&mut self, other: Rows) {
        extend4(&mut self.fences, other.fences);
        extend4(&mut self.thoughts, other.thoughts);
        extend4(&mut self.messages, other.messages);
        let TokenRows {
            tenants,
            days,
            tokens,
            messages,
            seqs,
        } = other.tokens;
        self.tokens.tenants.extend(tenants);
        self.tokens.days.extend(days);
        self.tokens.tokens.extend(tokens);
        self.tokens.messages.extend(messages);
        self.tokens.seqs.extend(seqs);
        extend4(&mut self.events, other.events);
        self.event_ends.extend(other.event_ends);
    }
}

/// Adds one row to four columns.
fn push4<A, B, C, D>(into: &mut (Vec<A>, Vec<B>, Vec<C>, Vec<D>), row: (A, B, C, D)) {
    into.0.push(row.0);
    into.1.push(row.1);
    into.2.push(row.2);
    into.3.push(row.3);
}

fn extend4<A, B, C, D>(
    into: &mut (Vec<A>, Vec<B>, Vec<C>, Vec<D>),
    from: (Vec<A>, Vec<B>, Vec<C>, Vec<D>),
) {
    into.0.extend(from.0);
    into.1.extend(from.1);
    into.2.extend(from.2);
    into.3.extend(from.3);
}

/// The rows of `burst`, a run of `tenant` written under `fence`, its events laid out as
/// `layout` says.
pub fn job(
    tenant: &Tenant,
    fence: &Fence,
    burst: &Burst,
    layout: &Layout,
) -> Result<(Job, oneshot::Receiver<Result<(), StoreError>>), StoreError> {
    let mut rows = Rows::default();
    let name = tenant.as_str().to_owned();
    if let Some(message) = run_of(burst) {
        let epoch = i64::try_from(fence.epoch).unwrap_or(i64::MAX);
        push4(
            &mut rows.fences,
            (name.clone(), message.0, fence.owner.clone(), epoch),
        );
    }
    for record in &burst.records {
        match record {
            Record::Thought(thought) => {
                let position = i32::try_from(thought.position).unwrap_or(i32::MAX);
                let json = serde_json::to_string(thought).map_err(|e| codec("thoughts", e))?;
                push4(
                    &mut rows.thoughts,
                    (name.clone(), thought.message_id.0, position, json),
                );
            }
            Record::Message(message) => {
                let json = serde_json::to_string(message).map_err(|e| codec("messages", e))?;
                let running = !message.status.is_terminal();
                push4(
                    &mut rows.messages,
                    (name.clone(), message.id.0, json, running),
                );
            }
            Record::TenantTokens { day, tokens, once } => {
                let counts = &mut rows.tokens;
                counts.tenants.push(name.clone());
                counts.days.push(i32::try_from(*day).unwrap_or(i32::MAX));
                counts
                    .tokens
                    .push(i64::try_from(*tokens).unwrap_or(i64::MAX));
                counts.messages.push(once.map(|(message, _)| message.0));
                counts
                    .seqs
                    .push(once.map_or(0, |(_, seq)| i64::try_from(seq).unwrap_or(i64::MAX)));
            }
        }
    }
    push_events(&mut rows, &name, &burst.events, layout)?;
    let (reply, done) = oneshot::channel();
    Ok((
        Job {
            rows,
            reply,
            queued: Instant::now(),
        },
        done,
    ))
}

/// The message whose run wrote `burst`.
fn run_of(burst: &Burst) -> Option<MessageId> {
    let recorded = burst.records.iter().find_map(|record| match record {
        Record::Thought(thought) => Some(thought.message_id),
        Record::Message(message) => Some(message.id),
        Record::TenantTokens { .. } => None,
    });
    recorded.or_else(|| burst.events.first().map(|event| event.message_id))
}

/// Adds `events` to `rows`: one row each, or one per span.
fn push_events(
    rows: &mut Rows,
    tenant: &str,
    events: &[EventEnvelope],
    layout: &Layout,
) -> Result<(), StoreError> {
    let seq = |event: &EventEnvelope| i64::try_from(event.seq).unwrap_or(i64::MAX);
    match layout {
        Layout::Rows => {
            for event in events {
                let json = serde_json::to_string(event).map_err(|e| codec("events", e))?;
                let row = (tenant.to_owned(), event.message_id.0, seq(event), json);
                push4(&mut rows.events, row);
                rows.event_ends.push(None);
            }
        }
        Layout::Spans(cuts) => {
            for span in super::spans::cut(events, cuts) {
                let (Some(first), Some(last)) = (span.first(), span.last()) else {
                    continue;
                };
                let json = serde_json::to_string(span).map_err(|e| codec("events", e))?;
                let row = (tenant.to_owned(), first.message_id.0, seq(first), json);
                push4(&mut rows.events, row);
                rows.event_ends.push(Some(seq(last)));
            }
        }
    }
    Ok(())
}

/// Starts `count` committers of `backend` on `tasks`; they stop once the backend is
/// dropped, or once `tasks` stop and nothing is left queued.
pub fn start(backend: Weak<Postgres>, count: usize, tasks: &Tasks) -> mpsc::UnboundedSender<Job> {
    let (jobs, queue) = mpsc::unbounded_channel::<Job>();
    let queue = Arc::new(Mutex::new(queue));
    let pacing = Arc::new(Pacing::default());
    for _ in 0..count {
        let (queue, pacing) = (Arc::clone(&queue), Arc::clone(&pacing));
        let (backend, stopping) = (backend.clone(), tasks.stopping());
        tasks.spawn(async move {
            let mut waiting = Vec::with_capacity(GROUP);
            let mut kept = Kept::default();
            loop {
                // One committer takes what is waiting; the others wait their turn. What is
                // queued is committed before a stop is heeded.
                let (mut taking, received) = tokio::select! {
                    biased;
                    taken = async {
                        let mut taking = queue.lock().await;
                        let received = taking.recv_many(&mut waiting, GROUP).await;
                        (taking, received)
                    } => taken,
                    () = stopping.cancelled() => return,
                };
                if received == 0 {
                    return;
                }
                // Gathered still holding the queue, so no other committer takes what
                // comes meanwhile; bounded, and not cut short by a stop.
                pacing.gather(&mut taking, &mut waiting).await;
                drop(taking);
                let Some(backend) = backend.upgrade() else {
                    return;
                };
                let _flight = pacing.flight();
                backend
                    .commit_group(std::mem::take(&mut waiting), &mut kept)
                    .await;
            }
        });
    }
    jobs
}

/// A committer's connection, kept from one commit to the next. Taken from the pool and
/// given back each time, a connection cost two round trips more per commit: the pool tests
/// it as it comes back and before it hands it out again. Kept, a commit is one round trip.
/// One found dead, or that failed a commit, is never kept.
#[derive(Default)]
struct Kept(Option<(PoolConnection<sqlx::Postgres>, Instant)>);

impl Kept {
    /// The connection kept from the last commit, tested first if it sat idle for long, and
    /// whether it went untested; else one from `pool` (which tests its idle ones). One
    /// that fails the test leaves the pool at once, so the pool may open another. The test
    /// and the wait for another take together at most the pool's own wait, as the pool's
    /// test and wait would: a silent database is found as soon as before.
    async fn take(
        &mut self,
        pool: &PgPool,
    ) -> Result<(PoolConnection<sqlx::Postgres>, bool), sqlx::Error> {
        let kept = match self.0.take() {
            Some((connection, used)) if used.elapsed() <= super::ALIVE_WITHOUT_TEST => {
                return Ok((connection, true));
            }
            kept => kept,
        };
        let within = pool.options().get_acquire_timeout();
        let taken = tokio::time::timeout(within, async {
            if let Some((mut connection, _)) = kept {
                if sqlx::Connection::ping(&mut *connection).await.is_ok() {
                    return Ok(connection);
                }
                drop(connection.detach());
            }
            pool.acquire().await
        })
        .await;
        let connection = taken.map_err(|_| sqlx::Error::PoolTimedOut)??;
        Ok((connection, false))
    }

    /// Keeps `connection`, whose last statement was answered in full, for the next commit.
    fn keep(&mut self, connection: PoolConnection<sqlx::Postgres>) {
        self.0 = Some((connection, Instant::now()));
    }
}

/// A group smaller than this may wait for more.
const FULL_ENOUGH: usize = 8;

/// How long such a group waits at the most. 5 ms against 2 ms, six interleaved pairs of
/// `--case replicas`: 0.76–0.94× the service's CPU per run at every load, fewer
/// transactions, and a lower live lag p99, since the database and the replicas then contend
/// less for the machine (docs/performance-history.md).
const PACE: Duration = Duration::from_millis(5);

/// How long a run that wrote counts as about to write again.
const LATELY: Duration = Duration::from_millis(20);

/// What a small group waits for: the commits of this replica in flight, and the runs that
/// wrote lately and have not ended.
#[derive(Default)]
struct Pacing {
    in_flight: watch::Sender<usize>,
    /// Each such run and when its last burst was taken.
    lately: std::sync::Mutex<HashMap<Uuid, tokio::time::Instant>>,
}

impl Pacing {
    /// Adds to a small `waiting` group what arrives while another commit is in flight or
    /// while runs that wrote lately have no burst in it, until the group is full enough,
    /// neither holds, or [`PACE`] has passed. A replica that holds a few runs otherwise
    /// writes each burst in a transaction of its own, two at a time; this writes them in
    /// fewer, fuller ones. A lone run never waits: nothing else is in flight or writing
    /// when its burst comes.
    async fn gather(&self, queue: &mut mpsc::UnboundedReceiver<Job>, waiting: &mut Vec<Job>) {
        let mut flights = self.in_flight.subscribe();
        let paced = async {
            loop {
                let flying = *flights.borrow_and_update() > 0;
                if waiting.len() >= FULL_ENOUGH || !(flying || self.expects_more(waiting)) {
                    return;
                }
                tokio::select! {
                    changed = flights.changed() => {
                        if changed.is_err() {
                            return;
                        }
                    }
                    received = queue.recv_many(waiting, GROUP - waiting.len()) => {
                        if received == 0 {
                            return;
                        }
                    }
                }
            }
        };
        let _ = tokio::time::timeout(PACE, paced).await;
        while waiting.len() < GROUP {
            let Ok(job) = queue.try_recv() else {
                break;
            };
            waiting.push(job);
        }
        self.note(waiting);
    }

    /// Whether a run that wrote lately has no burst in `group`.
    fn expects_more(&self, group: &[Job]) -> bool {
        let Ok(lately) = self.lately.lock() else {
            return false;
        };
        let now = tokio::time::Instant::now();
        lately.iter().any(|(run, at)| {
            now.duration_since(*at) < LATELY
                && !group.iter().any(|job| job.rows.fences.1.contains(run))
        })
    }

    /// Notes the runs of `group` as writing, those it ends as ended, and forgets those
    /// quiet for longer than [`LATELY`].
    fn note(&self, group: &[Job]) {
        let Ok(mut lately) = self.lately.lock() else {
            return;
        };
        let now = tokio::time::Instant::now();
        for job in group {
            for run in &job.rows.fences.1 {
                lately.insert(*run, now);
            }
            let (_, runs, _, running) = &job.rows.messages;
            for (run, running) in runs.iter().zip(running) {
                if !running {
                    lately.remove(run);
                }
            }
        }
        lately.retain(|_, at| now.duration_since(*at) < LATELY);
    }

    /// Counts a commit in flight while the returned guard lives.
    fn flight(&self) -> Flight<'_> {
        self.in_flight.send_modify(|count| *count += 1);
        Flight(&self.in_flight)
    }
}

/// A commit in flight, counted while it lives.
struct Flight<'a>(&'a watch::Sender<usize>);

impl Drop for Flight<'_> {
    fn drop(&mut self) {
        self.0.send_modify(|count| *count = count.saturating_sub(1));
    }
}

impl Postgres {
    /// Commits `group` in one transaction; when that fails for a reason other than an
    /// unavailable database, each burst is tried alone, so one bad burst fails alone.
    async fn commit_group(&self, group: Vec<Job>, kept: &mut Kept) {
        let queued: Vec<Instant> = group.iter().map(|job| job.queued).collect();
        let connected = || {
            if let Some(observe) = self.wait_observer.get() {
                queued.iter().for_each(|queued| observe(queued.elapsed()));
            }
        };
        if group.len() == 1 {
            for job in group {
                let result = self.write_rows(&job.rows, connected, kept).await;
                let _ = job.reply.send(result);
            }
            return;
        }
        let (parts, replies): (Vec<Rows>, Vec<_>) =
            group.into_iter().map(|job| (job.rows, job.reply)).unzip();
        // Merged for the one transaction; the parts kept for a retry one by one.
        let mut rows = Rows::default();
        for part in &parts {
            rows.add(copy(part));
        }
        match self.write_rows(&rows, connected, kept).await {
            Ok(()) => {
                for reply in replies {
                    let _ = reply.send(Ok(()));
                }
            }
            Err(err) if err.category() == crate::store::error::Category::Unavailable => {
                for reply in replies {
                    let _ = reply.send(Err(super::unavailable(&err.to_string())));
                }
            }
            Err(_) => {
                for (part, reply) in parts.iter().zip(replies) {
                    let _ = reply.send(self.write_rows(part, || {}, kept).await);
                }
            }
        }
    }

    /// Writes `rows` in one statement, its own durable transaction: one round trip. It
    /// locks each run's message row (`FOR SHARE`) where the row still names this replica
    /// at the run's epoch, and writes only when every run is held. A sweep that ends or
    /// adopts a run locks its row `FOR UPDATE` first, so the two are ordered: this commit
    /// lands before the sweep reads the run, or waits for it and, reading the row again
    /// as PostgreSQL does for a locking read, finds it moved to another epoch and writes
    /// nothing. The notice of the commit rides on the check (sent only if it commits).
    ///
    /// `connected` is called once a connection is held, when the statement can be sent; the
    /// connection is taken from `kept`, and kept there again once answered.
    async fn write_rows(
        &self,
        rows: &Rows,
        connected: impl FnOnce(),
        kept: &mut Kept,
    ) -> Result<(), StoreError> {
        self.check_writable()?;
        let notice = self.notice_of(|| last_seqs(&rows.events.1, &last_of_rows(rows)));
        let messages = last_of_each(&rows.messages);
        // A shard of the count at random: concurrent commits rarely share a row.
        let shard = i16::from(fastrand::u8(..USAGE_SHARDS));
        let statement = || {
            sqlx::query_as::<_, (bool,)>(WRITE)
                .bind(&rows.fences.0)
                .bind(&rows.fences.1)
                .bind(&rows.fences.2)
                .bind(&rows.fences.3)
                .bind(&rows.thoughts.0)
                .bind(&rows.thoughts.1)
                .bind(&rows.thoughts.2)
                .bind(&rows.thoughts.3)
                .bind(&messages.0)
                .bind(&messages.1)
                .bind(&messages.2)
                .bind(&messages.3)
                .bind(&rows.events.0)
                .bind(&rows.events.1)
                .bind(&rows.events.2)
                .bind(&rows.events.3)
                .bind(&rows.tokens.tenants)
                .bind(&rows.tokens.days)
                .bind(&rows.tokens.tokens)
                .bind(shard)
                .bind(super::listen::EVENTS)
                .bind(notice.as_deref())
                .bind(&rows.tokens.messages)
                .bind(&rows.tokens.seqs)
                .bind(&rows.event_ends)
        };
        let answered = tokio::time::timeout(self.commit_deadline, async {
            let (mut connection, was_kept) = kept.take(&self.commits).await?;
            connected();
            let mut started = Instant::now();
            let mut answer = statement().fetch_one(&mut *connection).await;
            if was_kept && answer.as_ref().is_err_and(is_connection_lost) {
                // The server ended the kept connection while it sat idle, as the pool's own
                // test would have found: it leaves the pool untested (so the pool may open
                // another) and the commit is tried once more on one from the pool. The
                // statement writes what it wrote once, should the first try have landed.
                drop(connection.detach());
                connection = self.commits.acquire().await?;
                started = Instant::now();
                answer = statement().fetch_one(&mut *connection).await;
            }
            let (held,) = answer?;
            Ok::<_, sqlx::Error>((held, started, connection))
        })
        .await;
        let Ok(answered) = answered else {
            return Err(self.slow_or_silent(self.commit_deadline));
        };
        let (held, started, connection) = answered.map_err(|err| self.commit_failed(err))?;
        kept.keep(connection);
        if !held {
            return Err(StoreError::Fenced);
        }
        self.committed(started);
        Ok(())
    }
}

/// The one statement of a commit. Every write is conditioned on `held` (each run still
/// ours at its epoch, its row locked), so a fenced commit writes nothing. Rows are found
/// by key, one lookup per run (`LATERAL`) and `= ANY` on the primary key for the
/// messages updated, so they are read by index however the planner judges the table's
/// size. A data-modifying `WITH` runs whether read or not; the notice is read, so it is
/// sent.
const WRITE: &str = "\
WITH held_rows AS ( \
    SELECT h.id FROM UNNEST($1::text[], $2::uuid[], $3::text[], $4::bigint[]) AS f(tenant, id, owner, epoch) \
    CROSS JOIN LATERAL (SELECT m.id FROM messages m WHERE m.tenant = f.tenant AND m.id = f.id \
        AND m.owner = f.owner AND m.epoch = f.epoch FOR SHARE) AS h), \
held AS (SELECT count(*) = cardinality($1::text[]) AS ok FROM held_rows), \
thoughts_written AS ( \
    INSERT INTO thoughts (tenant, message_id, position, record) \
    SELECT t.* FROM UNNEST($5::text[], $6::uuid[], $7::int[], $8::text[]) AS t, held WHERE held.ok \
    ON CONFLICT (tenant, message_id, position) DO UPDATE SET record = EXCLUDED.record), \
messages_written AS ( \
    UPDATE messages m SET record = u.record, running = u.running, \
        ended_at = CASE WHEN u.running THEN NULL ELSE coalesce(m.ended_at, now()) END \
    FROM UNNEST($9::text[], $10::uuid[], $11::text[], $12::bool[]) AS u(tenant, id, record, running), held \
    WHERE held.ok AND m.tenant = ANY($9::text[]) AND m.id = ANY($10::uuid[]) \
        AND m.tenant = u.tenant AND m.id = u.id), \
events_written AS ( \
    INSERT INTO events (tenant, message_id, seq, record, last_seq) \
    SELECT e.* FROM UNNEST($13::text[], $14::uuid[], $15::bigint[], $16::text[], $25::bigint[]) AS e, held \
    WHERE held.ok \
    ON CONFLICT (tenant, message_id, seq) DO NOTHING \
    RETURNING tenant, message_id, seq, coalesce(last_seq, seq) AS last_seq), \
tokens_counted AS ( \
    INSERT INTO tenant_usage (tenant, day, tokens, shard) \
    SELECT k.tenant, k.day, sum(k.tokens), $20 \
    FROM UNNEST($17::text[], $18::int[], $19::bigint[], $23::uuid[], $24::bigint[]) \
        AS k(tenant, day, tokens, message_id, seq), held \
    WHERE held.ok AND (k.message_id IS NULL OR EXISTS (SELECT 1 FROM events_written w \
        WHERE w.tenant = k.tenant AND w.message_id = k.message_id \
        AND k.seq BETWEEN w.seq AND w.last_seq)) \
    GROUP BY k.tenant, k.day \
    ON CONFLICT (tenant, day, shard) DO UPDATE SET tokens = tenant_usage.tokens + EXCLUDED.tokens), \
notified AS ( \
    SELECT pg_notify($21, $22) FROM held WHERE held.ok AND $22::text IS NOT NULL) \
SELECT ok AND (SELECT count(*) FROM notified) >= 0 FROM held";

/// Each message's last record among `messages` (tenant, id, record, running), in the
/// order of their last: one statement updates a row once, and the last record is the
/// message as its run left it.
fn last_of_each(
    messages: &(Vec<String>, Vec<Uuid>, Vec<String>, Vec<bool>),
) -> (Vec<&str>, Vec<Uuid>, Vec<&str>, Vec<bool>) {
    let all: Vec<(&str, Uuid, &str, bool)> = messages
        .0
        .iter()
        .zip(&messages.1)
        .zip(&messages.2)
        .zip(&messages.3)
        .map(|(((tenant, id), record), running)| (tenant.as_str(), *id, record.as_str(), *running))
        .collect();
    let mut seen = std::collections::HashSet::new();
    let mut kept: Vec<(&str, Uuid, &str, bool)> = all
        .into_iter()
        .rev()
        .filter(|(tenant, id, _, _)| seen.insert((*tenant, *id)))
        .collect();
    kept.reverse();
    let mut columns = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for (tenant, id, record, running) in kept {
        columns.0.push(tenant);
        columns.1.push(id);
        columns.2.push(record);
        columns.3.push(running);
    }
    columns
}

/// Each event row's last `seq`: a span's, or its one event's.
fn last_of_rows(rows: &Rows) -> Vec<i64> {
    rows.events
        .2
        .iter()
        .zip(&rows.event_ends)
        .map(|(first, last)| last.unwrap_or(*first))
        .collect()
}

/// Each run's last `seq` among events of many runs (a run's events are consecutive in a
/// group, so its last one ends its stretch).
fn last_seqs(messages: &[Uuid], seqs: &[i64]) -> Vec<(Uuid, i64)> {
    let mut last: std::collections::HashMap<Uuid, i64> = std::collections::HashMap::new();
    for (message, seq) in messages.iter().zip(seqs) {
        let entry = last.entry(*message).or_insert(*seq);
        *entry = (*entry).max(*seq);
    }
    last.into_iter().collect()
}

fn copy(rows: &Rows) -> Rows {
    Rows {
        fences: rows.fences.clone(),
        thoughts: rows.thoughts.clone(),
        messages: rows.messages.clone(),
        tokens: rows.tokens.clone(),
        events: rows.events.clone(),
        event_ends: rows.event_ends.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A burst of `run`, its message still running or not.
    fn burst_of(run: Uuid, running: bool) -> Job {
        let mut rows = Rows::default();
        push4(&mut rows.fences, (String::new(), run, String::new(), 1));
        push4(
            &mut rows.messages,
            (String::new(), run, String::new(), running),
        );
        Job {
            rows,
            reply: oneshot::channel().0,
            queued: Instant::now(),
        }
    }

    fn burst() -> Job {
        burst_of(Uuid::new_v4(), true)
    }

    /// A queue holding `first` bursts, and its sender for what comes later.
    fn queue_with(first: usize) -> (mpsc::UnboundedSender<Job>, mpsc::UnboundedReceiver<Job>) {
        let (jobs, queue) = mpsc::unbounded_channel();
        for _ in 0..first {
            jobs.send(burst()).unwrap();
        }
        (jobs, queue)
    }

    /// How long gathering onto `waiting` took.
    async fn timed(
        pacing: &Pacing,
        queue: &mut mpsc::UnboundedReceiver<Job>,
        waiting: &mut Vec<Job>,
    ) -> Duration {
        let started = tokio::time::Instant::now();
        pacing.gather(queue, waiting).await;
        started.elapsed()
    }

    /// A lone run's burst goes at once: with no commit in flight and no other run writing,
    /// nothing waits.
    #[tokio::test(start_paused = true)]
    async fn a_lone_burst_does_not_wait() {
        let (jobs, mut queue) = queue_with(0);
        let pacing = Pacing::default();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(1)).await;
            jobs.send(burst()).unwrap();
        });
        let mut waiting = vec![burst()];
        assert_eq!(
            timed(&pacing, &mut queue, &mut waiting).await,
            Duration::ZERO
        );
        assert_eq!(waiting.len(), 1);
    }

    /// Beside a commit in flight, a small group takes in what arrives until that commit
    /// ends, and no longer.
    #[tokio::test(start_paused = true)]
    async fn a_small_group_gathers_until_the_commit_in_flight_ends() {
        let (jobs, mut queue) = queue_with(0);
        let pacing = Arc::new(Pacing::default());
        let flying = Arc::clone(&pacing);
        // Timers tick in whole milliseconds.
        tokio::spawn(async move {
            let flight = flying.flight();
            tokio::time::sleep(Duration::from_millis(1)).await;
            for _ in 0..3 {
                jobs.send(burst()).unwrap();
            }
            drop(flight);
        });
        tokio::task::yield_now().await;
        let mut waiting = vec![burst()];
        let took = timed(&pacing, &mut queue, &mut waiting).await;
        assert_eq!(waiting.len(), 4);
        assert!(took < PACE, "{took:?}");
    }

    /// The wait is bounded by the pace, and a group full enough goes at once.
    #[tokio::test(start_paused = true)]
    async fn the_wait_is_bounded_and_a_full_group_does_not_wait() {
        let (_jobs, mut queue) = queue_with(2);
        let pacing = Pacing::default();
        let _flight = pacing.flight();
        let mut waiting = vec![burst()];
        assert_eq!(timed(&pacing, &mut queue, &mut waiting).await, PACE);
        assert_eq!(waiting.len(), 3);

        let mut full: Vec<Job> = (0..FULL_ENOUGH).map(|_| burst()).collect();
        assert_eq!(timed(&pacing, &mut queue, &mut full).await, Duration::ZERO);
        assert_eq!(full.len(), FULL_ENOUGH);
    }

    /// A group waits for the bursts of runs that wrote lately, not for a run that ended.
    #[tokio::test(start_paused = true)]
    async fn a_group_waits_for_runs_that_wrote_lately_but_not_for_one_that_ended() {
        let (a, b, ended) = (Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4());
        let (jobs, mut queue) = queue_with(0);
        let pacing = Pacing::default();
        let mut first = vec![burst_of(a, true), burst_of(b, true), burst_of(ended, false)];
        pacing.gather(&mut queue, &mut first).await;

        let later = jobs.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(1)).await;
            later.send(burst_of(b, true)).unwrap();
        });
        let mut waiting = vec![burst_of(a, true)];
        let took = timed(&pacing, &mut queue, &mut waiting).await;
        assert_eq!(waiting.len(), 2, "b's burst joined a's");
        assert!(took < PACE, "{took:?}");

        // Quiet past the window, a and b are no longer waited for.
        tokio::time::sleep(LATELY).await;
        let mut alone = vec![burst()];
        assert_eq!(timed(&pacing, &mut queue, &mut alone).await, Duration::ZERO);
    }
}
