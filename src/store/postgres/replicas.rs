//! Replicas sharing the database: each holds its id by a heartbeat row it renews about
//! five times per lease, judged by the database's clock. A replica whose lease lapsed is
//! gone; the runs it owned are taken over (or ended) by whichever peer sweeps first.

use std::sync::atomic::Ordering;
use std::sync::Weak;
use std::time::{Duration, Instant};

use sqlx::PgPool;
use uuid::Uuid;

use super::error::{self, from_sqlx};
use super::statistics::Statistics;
use super::Postgres;
use crate::domain::{Adoption, Fate};
use crate::domain::{EventEnvelope, Message, Tenant};
use crate::store::contract::{Adopted, Fence, Swept};
use crate::store::error::{Category, StoreError};
use crate::tasks::Tasks;

/// How many orphaned runs one sweep ends at most, so no sweep holds many rows at once.
const SWEEP_BATCH: i64 = 100;

/// Why a run whose replica stopped renewing its heartbeat is interrupted.
const OWNER_GONE: &str = "the replica running this message stopped answering";

/// The name of `owner`'s writer lock, which a sweep of its runs holds exclusively.
/// Commits of this version fence on the runs' rows instead (see the committer); those of
/// earlier versions, which check and write in separate statements, hold this lock shared,
/// so a sweep still fences them while replicas of both versions share a database.
pub fn writer_lock(owner: &str) -> String {
    format!("agent-runner writer\u{1}{owner}")
}

/// Who this process is among the replicas.
#[derive(Clone)]
pub struct Identity {
    /// The configured (or made up) replica id, the owner of the runs it starts.
    pub id: String,
    /// This process's claim on the id: a restart is a new instance.
    pub instance: Uuid,
    /// How long a heartbeat holds.
    pub lease: Duration,
}

impl Identity {
    fn lease_ms(&self) -> i64 {
        i64::try_from(self.lease.as_millis()).unwrap_or(i64::MAX)
    }
}

/// Takes the replica id for this process. An id whose holder still renews its lease is
/// refused after waiting one lease (and a second) for it to lapse, which it does within a
/// lease when that holder was a process that died.
pub async fn claim(pool: &PgPool, me: &Identity, place: &str) -> Result<(), StoreError> {
    let until = Instant::now() + me.lease + Duration::from_secs(1);
    loop {
        let claimed: Option<(String,)> = sqlx::query_as(
            "INSERT INTO replicas (id, instance, lease_until, started_at, reads_spans) \
             VALUES ($1, $2, now() + $3 * interval '1 millisecond', now(), true) \
             ON CONFLICT (id) DO UPDATE SET instance = EXCLUDED.instance, \
             lease_until = EXCLUDED.lease_until, started_at = EXCLUDED.started_at, \
             reads_spans = true \
             WHERE replicas.lease_until < now() OR replicas.instance = EXCLUDED.instance \
             RETURNING id",
        )
        .bind(&me.id)
        .bind(me.instance)
        .bind(me.lease_ms())
        .fetch_optional(pool)
        .await
        .map_err(from_sqlx)?;
        if claimed.is_some() {
            return Ok(());
        }
        if Instant::now() >= until {
            return Err(StoreError::Backend {
                category: Category::Conflict,
                message: format!(
                    "replica id {:?} is held by another live process on the database at {place}: give each replica its own [cluster] replica_id (or AGENT_RUNNER_REPLICA_ID)",
                    me.id
                ),
            });
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Renews the lease about five times per lease until the backend is dropped. A renewal
/// that fails marks the store unwritable (health's probe marks it writable again); one
/// that finds the id taken by another process means this one was given up for gone: it
/// stays unwritable, and the fences refuse every write of its runs.
pub fn renew(backend: Weak<Postgres>, tasks: &Tasks) {
    let stopping = tasks.stopping();
    tasks.spawn(async move {
        let mut lost = false;
        // A connection of its own: a pool busy with commits and reads never starves the
        // heartbeat, so a loaded replica does not lose its runs to its peers.
        let mut connection: Option<sqlx::PgConnection> = None;
        let mut statistics = Statistics::default();
        loop {
            let Some(every) = backend.upgrade().map(|b| b.identity.lease / 5) else {
                return;
            };
            tokio::select! {
                () = tokio::time::sleep(every) => {}
                () = stopping.cancelled() => return,
            }
            let Some(backend) = backend.upgrade() else {
                return;
            };
            let sent = Instant::now();
            let renewed = tokio::time::timeout(every.max(Duration::from_secs(1)), async {
                let held = match connection.take() {
                    Some(held) => held,
                    None => {
                        let options = backend.pool.connect_options();
                        sqlx::ConnectOptions::connect(&*options).await?
                    }
                };
                let connection = connection.insert(held);
                sqlx::query(
                    "UPDATE replicas SET lease_until = now() + $3 * interval '1 millisecond' \
                     WHERE id = $1 AND instance = $2",
                )
                .bind(&backend.identity.id)
                .bind(backend.identity.instance)
                .bind(backend.identity.lease_ms())
                .execute(&mut *connection)
                .await
            })
            .await;
            if !matches!(renewed, Ok(Ok(_))) {
                // Connected again on the next beat.
                connection = None;
            }
            let renewing = |ok: bool| {
                let mut since = backend
                    .renewing_since
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                match ok {
                    true => *since = Some(since.unwrap_or_else(Instant::now)),
                    false => *since = None,
                }
            };
            match renewed {
                Ok(Ok(done)) if done.rows_affected() == 1 => {
                    renewing(true);
                    *backend
                        .last_renewed
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner) = sent;
                    // Whether to write spans, and the planner's statistics, are looked
                    // after on the same connection, after the beat and within half of one,
                    // so they never delay it.
                    if let Some(held) = connection.as_mut() {
                        let looked = backend.spans.look(&mut *held);
                        if !matches!(tokio::time::timeout(every / 4, looked).await, Ok(Ok(()))) {
                            connection = None;
                        }
                    }
                    if let Some(held) = connection.as_mut() {
                        let options = backend.pool.connect_options();
                        let looked = statistics.look(held, &options, &backend.tasks);
                        if !matches!(tokio::time::timeout(every / 2, looked).await, Ok(Ok(()))) {
                            connection = None;
                        }
                    }
                }
                Ok(Ok(_)) => {
                    renewing(false);
                    if !lost {
                        tracing::error!(replica = %backend.identity.id, "another process took this replica's id after its lease lapsed; this process writes nothing more");
                    }
                    lost = true;
                    backend.lost.store(true, Ordering::SeqCst);
                    backend.writable.send_replace(false);
                }
                Ok(Err(_)) | Err(_) => {
                    renewing(false);
                    if *backend.writable.borrow() {
                        tracing::error!("PostgreSQL does not answer");
                    }
                    backend.writable.send_replace(false);
                }
            }
        }
    });
}

/// Gives the id up at once when the backend goes (a graceful stop): a restart under the
/// same id need not wait for the lease to lapse.
pub async fn release(pool: &PgPool, me: &Identity) {
    let _ = sqlx::query("DELETE FROM replicas WHERE id = $1 AND instance = $2")
        .bind(&me.id)
        .bind(me.instance)
        .execute(pool)
        .await;
}

/// The tenant of a stored running message, which was valid when it was written.
fn stored_tenant(stored: &str) -> Result<Tenant, StoreError> {
    Tenant::from_stored(stored).ok_or_else(|| StoreError::Backend {
        category: Category::Corrupt,
        message: "a running message names a tenant that is not valid".to_owned(),
    })
}

impl Postgres {
    /// Ends the runs no live replica owns (see [`crate::store::contract::Conversations::take_orphans`]),
    /// a batch at a time; rows another sweeper holds are skipped, so replicas sweeping at
    /// once end each run once.
    pub(super) async fn sweep_orphans(&self, adoption: Adoption) -> Result<Swept, StoreError> {
        let own = !self.swept_own.swap(true, Ordering::SeqCst);
        if !own && !self.judges_peers() {
            return Ok(Swept::default());
        }
        let mut owners: Vec<String> = match own {
            true => vec![self.identity.id.clone()],
            false => Vec::new(),
        };
        let gone: Vec<(String,)> = sqlx::query_as(
            "SELECT DISTINCT m.owner FROM messages m WHERE m.running AND m.owner <> $1 \
             AND NOT EXISTS (SELECT 1 FROM replicas r \
                 WHERE r.id = m.owner AND r.lease_until > now())",
        )
        .bind(&self.identity.id)
        .fetch_all(&mut *self.connection().await?)
        .await
        .map_err(|err| self.failed(err))?;
        owners.extend(gone.into_iter().map(|(owner,)| owner));
        let mut swept = Swept::default();
        for owner in owners {
            loop {
                let taken = self.sweep_batch(&owner, adoption, &mut swept).await?;
                if taken < usize::try_from(SWEEP_BATCH).unwrap_or(usize::MAX) {
                    break;
                }
            }
        }
        self.drop_stale_commands().await?;
        Ok(swept)
    }

    /// Whether this replica has renewed its own heartbeat for a whole lease: only then does
    /// a lapsed lease of a peer mean the peer is gone, rather than that the database was
    /// away from everyone.
    fn judges_peers(&self) -> bool {
        self.renewing_since
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .is_some_and(|since| since.elapsed() >= self.identity.lease)
    }

    /// Ends a batch of `owner`'s running messages, their rows locked `FOR UPDATE` (and
    /// `owner`'s writer lock taken exclusively, for writers of earlier versions): commits
    /// `owner` has in flight land first, and any it makes later find their runs ended.
    /// A row a commit holds at the moment is skipped and taken by the next sweep. Another
    /// replica's runs are taken only while its lease has lapsed (judged again under the
    /// lock).
    async fn sweep_batch(
        &self,
        owner: &str,
        adoption: Adoption,
        swept: &mut Swept,
    ) -> Result<usize, StoreError> {
        let mine = owner == self.identity.id;
        let started = Instant::now();
        let mut tx = self.begin().await?;
        let failed = |err| self.failed(err);
        // Tried, not waited for: a writer paused inside a commit holds it until its
        // session is ended (idle in a transaction past the statement timeout).
        let (locked,): (bool,) =
            sqlx::query_as("SELECT pg_try_advisory_xact_lock(hashtextextended($1, 0))")
                .bind(writer_lock(owner))
                .fetch_one(&mut *tx)
                .await
                .map_err(failed)?;
        if !locked {
            return Ok(0);
        }
        let rows: Vec<(String, Uuid, String)> = sqlx::query_as(
            "SELECT m.tenant, m.id, m.record FROM messages m \
             WHERE m.running AND m.owner = $1 AND ($2 OR NOT EXISTS ( \
                 SELECT 1 FROM replicas r WHERE r.id = m.owner AND r.lease_until > now())) \
             ORDER BY m.tenant, m.id LIMIT $3 FOR UPDATE OF m SKIP LOCKED",
        )
        .bind(owner)
        .bind(mine)
        .bind(SWEEP_BATCH)
        .fetch_all(&mut *tx)
        .await
        .map_err(failed)?;
        let count = rows.len();
        let (mut ended, mut adopted) = (Vec::new(), Vec::new());
        for (tenant, id, record) in rows {
            let mut message: Message =
                serde_json::from_str(&record).map_err(|err| error::codec("messages", err))?;
            let why = if mine {
                crate::domain::STOPPED
            } else {
                OWNER_GONE
            };
            match crate::domain::fate(&message, adoption, why) {
                Fate::Adopt => {
                    let handed_over = crate::domain::adopt(&mut message);
                    let epoch = self.adopt(&mut tx, &tenant, &message).await?;
                    let tenant = stored_tenant(&tenant)?;
                    adopted.push(Adopted {
                        tenant,
                        message: message.id,
                        fence: Fence {
                            owner: self.identity.id.clone(),
                            epoch,
                        },
                        handed_over,
                    });
                }
                Fate::End(code, why) => {
                    let (last,): (Option<i64>,) = sqlx::query_as(
                        "SELECT max(coalesce(last_seq, seq)) FROM events \
                         WHERE tenant = $1 AND message_id = $2",
                    )
                    .bind(&tenant)
                    .bind(id)
                    .fetch_one(&mut *tx)
                    .await
                    .map_err(failed)?;
                    let last = u64::try_from(last.unwrap_or(0)).unwrap_or(0);
                    let end = crate::domain::end_orphan(&mut message, code, &why, last);
                    self.write_end(&mut tx, &tenant, &message, &end).await?;
                    ended.push((stored_tenant(&tenant)?, crate::domain::MessageId(id)));
                }
            }
        }
        self.finish(tx, started).await?;
        if !ended.is_empty() {
            tracing::warn!(
                count = ended.len(),
                "runs whose replica is gone were interrupted"
            );
        }
        if !adopted.is_empty() {
            tracing::warn!(
                count = adopted.len(),
                "runs whose replica is gone were taken over, to resume here"
            );
        }
        swept.interrupted.extend(ended);
        swept.adopted.extend(adopted);
        Ok(count)
    }

    /// Takes `message` over for this replica: its record (with its raised takeover count)
    /// written, its owner this replica, its epoch moved on; returns the new epoch.
    async fn adopt(
        &self,
        tx: &mut sqlx::Transaction<'static, sqlx::Postgres>,
        tenant: &str,
        message: &Message,
    ) -> Result<u64, StoreError> {
        let (epoch,): (i64,) = sqlx::query_as(
            "UPDATE messages SET record = $3, owner = $4, epoch = epoch + 1 \
             WHERE tenant = $1 AND id = $2 RETURNING epoch",
        )
        .bind(tenant)
        .bind(message.id.0)
        .bind(serde_json::to_string(message).map_err(|err| error::codec("messages", err))?)
        .bind(&self.identity.id)
        .fetch_one(&mut **tx)
        .await
        .map_err(|err| self.failed(err))?;
        Ok(u64::try_from(epoch).unwrap_or(0))
    }

    /// Writes an orphaned run's end: the message, no longer running and no longer any
    /// replica's (its epoch moves on, so its late owner's writes are refused), and its end
    /// event.
    async fn write_end(
        &self,
        tx: &mut sqlx::Transaction<'static, sqlx::Postgres>,
        tenant: &str,
        message: &Message,
        end: &EventEnvelope,
    ) -> Result<(), StoreError> {
        sqlx::query(
            "UPDATE messages SET record = $3, running = false, ended_at = now(), \
             epoch = epoch + 1 WHERE tenant = $1 AND id = $2",
        )
        .bind(tenant)
        .bind(message.id.0)
        .bind(serde_json::to_string(message).map_err(|err| error::codec("messages", err))?)
        .execute(&mut **tx)
        .await
        .map_err(|err| self.failed(err))?;
        sqlx::query("INSERT INTO events (tenant, message_id, seq, record) VALUES ($1, $2, $3, $4)")
            .bind(tenant)
            .bind(end.message_id.0)
            .bind(i64::try_from(end.seq).unwrap_or(i64::MAX))
            .bind(serde_json::to_string(end).map_err(|err| error::codec("events", err))?)
            .execute(&mut **tx)
            .await
            .map_err(|err| self.failed(err))?;
        Ok(())
    }
}
