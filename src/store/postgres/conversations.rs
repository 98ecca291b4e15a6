//! Conversations and messages in PostgreSQL.

use async_trait::async_trait;
use sqlx::Row;
use uuid::Uuid;

use super::error::from_sqlx;
use super::paged::{decode, encode, Paged};
use super::start::FIRST_EPOCH;
use super::Postgres;
use crate::domain::{
    Conversation, ConversationId, IdempotencyRecord, Message, MessageId, PastMessage, Tenant,
};
use crate::store::contract::{Admission, Inserted, NewMessage, Page, PageSize, Refusal};
use crate::store::conversation_rule::{queue_behind, ConversationRule};
use crate::store::error::StoreError;
use crate::store::run_listing::{ConversationPage, ConversationQuery, RunPage, RunQuery};

/// Messages, a page at a time in their conversation.
const MESSAGES: Paged = Paged {
    table: "messages",
    owner: "conversation_id",
    order: "seq",
};

/// Where a new message goes in its conversation, and the live message that keeps one
/// that must run alone out.
struct Place {
    seq: i64,
    ordinal: i64,
    live: Option<MessageId>,
}

impl Postgres {
    pub(super) async fn read_message<T: serde::de::DeserializeOwned>(
        &self,
        tenant: &Tenant,
        id: MessageId,
    ) -> Result<Option<T>, StoreError> {
        let row: Option<(String,)> =
            sqlx::query_as("SELECT record FROM messages WHERE tenant = $1 AND id = $2")
                .bind(tenant.as_str())
                .bind(id.0)
                .fetch_optional(&mut *self.connection().await?)
                .await
                .map_err(from_sqlx)?;
        row.map(|(text,)| decode("messages", &text)).transpose()
    }
}

#[async_trait]
impl crate::store::contract::Conversations for Postgres {
    async fn get_conversation(
        &self,
        tenant: &Tenant,
        id: ConversationId,
    ) -> Result<Option<Conversation>, StoreError> {
        let row: Option<(String,)> =
            sqlx::query_as("SELECT record FROM conversations WHERE tenant = $1 AND id = $2")
                .bind(tenant.as_str())
                .bind(id.0)
                .fetch_optional(&mut *self.connection().await?)
                .await
                .map_err(from_sqlx)?;
        row.map(|(text,)| decode("conversations", &text))
            .transpose()
    }

    async fn get_idempotency(
        &self,
        tenant: &Tenant,
        key: &str,
    ) -> Result<Option<IdempotencyRecord>, StoreError> {
        self.read_idempotency(tenant, key).await
    }

    /// One transaction, committed without waiting for its WAL flush: the run's first
    /// burst commits synchronously after it, which makes it durable too. The place is taken
    /// under a transaction-scoped advisory lock on the conversation. Unless the tenant is at
    /// a limit or the conversation has a live message its rule reads, that transaction is
    /// one call, shared with the starts waiting beside it (see `start_batch.rs`); otherwise it
    /// waits its turn among the starts in flight for a connection of its own.
    async fn insert_message(&self, mut new: NewMessage<'_>) -> Result<Inserted, StoreError> {
        let began = std::time::Instant::now();
        if let Some(inserted) = self
            .bounded(self.start_in_one_call(&mut new, began))
            .await?
        {
            return Ok(inserted);
        }
        let _turn = self.start_turn(began).await?;
        self.bounded(async move {
            let NewMessage {
                tenant,
                conversation,
                message,
                spec,
                idempotency,
                admission,
            } = new;
            let mut tx = self
                .begin_with("BEGIN; SET LOCAL synchronous_commit = off", began)
                .await?;
            let failed = |err| self.failed(err);
            if let Some((key, record)) = idempotency {
                if !self.take_key(&mut tx, tenant, key, record).await? {
                    drop(tx);
                    let winner = self.get_idempotency_now(tenant, key).await?;
                    return Ok(Inserted::KeyTaken(winner));
                }
            }
            // A message that will be queued is not admitted yet: the tenant's limits may
            // refuse it only if it would start now.
            let refused = self
                .admit(&mut tx, tenant, admission, message.parent.is_some())
                .await?;
            let queueing = matches!(admission.rule, ConversationRule::Queue { .. });
            if let (Some(refusal), false) = (&refused, queueing) {
                return Ok(Inserted::Refused(refusal.clone()));
            }
            let place = self
                .place(&mut tx, tenant, conversation, message, admission.rule.checks())
                .await?;
            let mut admitted = Inserted::Yes;
            if place.live.is_some() {
                let live = self.live_in(&mut tx, tenant, message.conversation_id).await?;
                match admission.rule.decide(&live) {
                    Ok(None) => {}
                    Ok(Some(ahead)) => {
                        queue_behind(message, &live);
                        admitted = Inserted::Queued { ahead };
                    }
                    Err(refusal) => return Ok(Inserted::Refused(refusal)),
                }
            }
            if let (Inserted::Yes, Some(refusal)) = (&admitted, refused) {
                return Ok(Inserted::Refused(refusal));
            }
            let (seq, ordinal) = (place.seq, place.ordinal);
            message.seq = u64::try_from(seq).unwrap_or_default();
            message.ordinal = u64::try_from(ordinal).unwrap_or_default();
            sqlx::query(
                "INSERT INTO messages (tenant, id, conversation_id, seq, ordinal, running, record, spec, owner, epoch, agent_id, parent_id, queued) \
                 VALUES ($1, $2, $3, $4, $5, true, $6, $7, $8, $9, $10, $11, $12)",
            )
            .bind(tenant.as_str())
            .bind(message.id.0)
            .bind(message.conversation_id.0)
            .bind(seq)
            .bind(ordinal)
            .bind(encode("messages", &*message)?)
            .bind(encode("specs", spec)?)
            .bind(&self.identity.id)
            .bind(FIRST_EPOCH)
            .bind(
                message
                    .agent
                    .as_ref()
                    .filter(|_| message.parent.is_none())
                    .map(|pin| pin.agent_id.clone()),
            )
            .bind(message.parent.as_ref().map(|parent| parent.message_id.0))
            .bind(admitted != Inserted::Yes)
            .execute(&mut *tx)
            .await
            .map_err(failed)?;
            tx.commit().await.map_err(failed)?;
            Ok(admitted)
        })
        .await
    }

    async fn get_message(
        &self,
        tenant: &Tenant,
        id: MessageId,
    ) -> Result<Option<Message>, StoreError> {
        self.read_message(tenant, id).await
    }

    async fn get_past_message(
        &self,
        tenant: &Tenant,
        id: MessageId,
    ) -> Result<Option<PastMessage>, StoreError> {
        self.read_message(tenant, id).await
    }

    async fn list_messages(
        &self,
        tenant: &Tenant,
        conversation: ConversationId,
        after_seq: u64,
        size: PageSize,
    ) -> Result<Page<Message>, StoreError> {
        let after = i64::try_from(after_seq).unwrap_or(i64::MAX);
        self.read_page(&MESSAGES, tenant, conversation.0, after, size)
            .await
    }

    async fn message_ids_before(
        &self,
        tenant: &Tenant,
        conversation: ConversationId,
        before_seq: u64,
        limit: usize,
    ) -> Result<Page<(u64, MessageId)>, StoreError> {
        let rows: Vec<(i64, Uuid)> = sqlx::query_as(
            "SELECT seq, id FROM messages WHERE tenant = $1 AND conversation_id = $2 AND seq < $3 \
             ORDER BY seq DESC LIMIT $4",
        )
        .bind(tenant.as_str())
        .bind(conversation.0)
        .bind(i64::try_from(before_seq).unwrap_or(i64::MAX))
        .bind(i64::try_from(limit.saturating_add(1)).unwrap_or(i64::MAX))
        .fetch_all(&mut *self.connection().await?)
        .await
        .map_err(from_sqlx)?;
        let more = rows.len() > limit;
        let items = rows
            .into_iter()
            .take(limit)
            .map(|(seq, id)| (u64::try_from(seq).unwrap_or_default(), MessageId(id)))
            .collect();
        Ok(Page { items, more })
    }

    async fn agent_message_ids(
        &self,
        tenant: &Tenant,
        agent_id: &str,
        before: Option<MessageId>,
        limit: usize,
    ) -> Result<Page<MessageId>, StoreError> {
        let rows: Vec<(Uuid,)> = sqlx::query_as(
            "SELECT id FROM messages WHERE tenant = $1 AND agent_id = $2 \
             AND ($3::uuid IS NULL OR id < $3) ORDER BY id DESC LIMIT $4",
        )
        .bind(tenant.as_str())
        .bind(agent_id)
        .bind(before.map(|id| id.0))
        .bind(i64::try_from(limit.saturating_add(1)).unwrap_or(i64::MAX))
        .fetch_all(&mut *self.connection().await?)
        .await
        .map_err(from_sqlx)?;
        let more = rows.len() > limit;
        let items = rows
            .into_iter()
            .take(limit)
            .map(|(id,)| MessageId(id))
            .collect();
        Ok(Page { items, more })
    }

    async fn list_runs(
        &self,
        tenant: &Tenant,
        query: &RunQuery<'_>,
    ) -> Result<RunPage, StoreError> {
        self.list_runs_now(tenant, query).await
    }

    async fn list_conversations(
        &self,
        tenant: &Tenant,
        query: &ConversationQuery<'_>,
    ) -> Result<ConversationPage, StoreError> {
        self.list_conversations_now(tenant, query).await
    }

    async fn get_run_spec(
        &self,
        tenant: &Tenant,
        message: MessageId,
    ) -> Result<Option<serde_json::Value>, StoreError> {
        let row: Option<(Option<String>,)> =
            sqlx::query_as("SELECT spec FROM messages WHERE tenant = $1 AND id = $2")
                .bind(tenant.as_str())
                .bind(message.0)
                .fetch_optional(&mut *self.connection().await?)
                .await
                .map_err(from_sqlx)?;
        row.and_then(|(spec,)| spec)
            .map(|text| decode("specs", &text))
            .transpose()
    }

    async fn delete_conversation(
        &self,
        tenant: &Tenant,
        id: ConversationId,
    ) -> Result<Option<Vec<MessageId>>, StoreError> {
        self.bounded(async move {
            let mut tx = self.begin().await?;
            let failed = |err| self.failed(err);
            let gone = sqlx::query("DELETE FROM conversations WHERE tenant = $1 AND id = $2")
                .bind(tenant.as_str())
                .bind(id.0)
                .execute(&mut *tx)
                .await
                .map_err(failed)?;
            if gone.rows_affected() == 0 {
                return Ok(None);
            }
            let rows = sqlx::query(
                "DELETE FROM messages WHERE tenant = $1 AND conversation_id = $2 RETURNING id, seq",
            )
            .bind(tenant.as_str())
            .bind(id.0)
            .fetch_all(&mut *tx)
            .await
            .map_err(failed)?;
            let mut deleted: Vec<(i64, Uuid)> = rows
                .iter()
                .map(|row| (row.get::<i64, _>("seq"), row.get::<Uuid, _>("id")))
                .collect();
            deleted.sort_unstable();
            let ids: Vec<Uuid> = deleted.iter().map(|(_, id)| *id).collect();
            for table in ["thoughts", "events", "files", "idempotency_keys"] {
                sqlx::query(sqlx::AssertSqlSafe(format!(
                    "DELETE FROM {table} WHERE tenant = $1 AND message_id = ANY($2)"
                )))
                .bind(tenant.as_str())
                .bind(&ids)
                .execute(&mut *tx)
                .await
                .map_err(failed)?;
            }
            self.finish(tx, std::time::Instant::now()).await?;
            Ok(Some(ids.into_iter().map(MessageId).collect()))
        })
        .await
    }

    async fn running_children(
        &self,
        tenant: &Tenant,
        parent: MessageId,
    ) -> Result<Vec<MessageId>, StoreError> {
        let rows: Vec<(Uuid,)> = sqlx::query_as(
            "SELECT id FROM messages WHERE tenant = $1 AND running AND parent_id = $2",
        )
        .bind(tenant.as_str())
        .bind(parent.0)
        .fetch_all(&mut *self.connection().await?)
        .await
        .map_err(|err| self.failed(err))?;
        Ok(rows.into_iter().map(|(id,)| MessageId(id)).collect())
    }

    /// With one process per database, every running message is one a previous process
    /// left.
    /// One transaction under the tenant's admission lock: counted as
    /// [`Self::insert_message`] counts, then the message marked started (`created_at`, the
    /// moment its start counts from, is now).
    async fn start_queued(
        &self,
        tenant: &Tenant,
        message: MessageId,
        fence: &crate::store::contract::Fence,
        admission: Admission,
    ) -> Result<Option<Refusal>, StoreError> {
        let epoch = i64::try_from(fence.epoch).unwrap_or(i64::MAX);
        self.bounded(async move {
            let mut tx = self.begin_with("BEGIN", std::time::Instant::now()).await?;
            if let Some(refusal) = self.admit(&mut tx, tenant, admission, false).await? {
                return Ok(Some(refusal));
            }
            let started = sqlx::query(
                "UPDATE messages SET queued = false, created_at = now() \
                 WHERE tenant = $1 AND id = $2 AND owner = $3 AND epoch = $4",
            )
            .bind(tenant.as_str())
            .bind(message.0)
            .bind(&fence.owner)
            .bind(epoch)
            .execute(&mut *tx)
            .await
            .map_err(|err| self.failed(err))?;
            // A peer adopted it: the admission is rolled back with the transaction.
            if started.rows_affected() == 0 {
                return Err(StoreError::Fenced);
            }
            tx.commit().await.map_err(|err| self.failed(err))?;
            Ok(None)
        })
        .await
    }

    async fn drop_steer(
        &self,
        tenant: &Tenant,
        steer: MessageId,
        joined: MessageId,
        fence: &crate::store::contract::Fence,
    ) -> Result<bool, StoreError> {
        let epoch = i64::try_from(fence.epoch).unwrap_or(i64::MAX);
        self.bounded(async move {
            let mut tx = self.begin().await?;
            let failed = |err| self.failed(err);
            let owned: Option<(String, i64, bool)> = sqlx::query_as(
                "SELECT owner, epoch, queued FROM messages WHERE tenant = $1 AND id = $2 FOR UPDATE",
            )
            .bind(tenant.as_str())
            .bind(steer.0)
            .fetch_optional(&mut *tx)
            .await
            .map_err(failed)?;
            match owned {
                None => return Ok(false),
                Some((_, _, false)) => return Ok(false),
                Some((owner, held, true)) if owner != fence.owner || held != epoch => {
                    return Err(StoreError::Fenced)
                }
                Some(_) => {}
            }
            for statement in [
                "DELETE FROM messages WHERE tenant = $1 AND id = $2",
                "DELETE FROM events WHERE tenant = $1 AND message_id = $2",
            ] {
                sqlx::query(statement)
                    .bind(tenant.as_str())
                    .bind(steer.0)
                    .execute(&mut *tx)
                    .await
                    .map_err(failed)?;
            }
            sqlx::query(
                "UPDATE idempotency_keys SET message_id = $3 WHERE tenant = $1 AND message_id = $2",
            )
            .bind(tenant.as_str())
            .bind(steer.0)
            .bind(joined.0)
            .execute(&mut *tx)
            .await
            .map_err(failed)?;
            self.finish(tx, std::time::Instant::now()).await?;
            Ok(true)
        })
        .await
    }

    async fn live_before(
        &self,
        tenant: &Tenant,
        conversation: ConversationId,
        seq: u64,
    ) -> Result<Vec<MessageId>, StoreError> {
        let rows: Vec<(Uuid,)> = sqlx::query_as(
            "SELECT id FROM messages \
             WHERE tenant = $1 AND conversation_id = $2 AND running AND seq < $3 ORDER BY seq",
        )
        .bind(tenant.as_str())
        .bind(conversation.0)
        .bind(i64::try_from(seq).unwrap_or(i64::MAX))
        .fetch_all(&mut *self.connection().await?)
        .await
        .map_err(from_sqlx)?;
        Ok(rows.into_iter().map(|(id,)| MessageId(id)).collect())
    }

    async fn running_in(
        &self,
        tenant: &Tenant,
        conversation: ConversationId,
    ) -> Result<bool, StoreError> {
        let (running,): (bool,) = sqlx::query_as(
            "SELECT EXISTS (SELECT 1 FROM messages \
             WHERE tenant = $1 AND conversation_id = $2 AND running)",
        )
        .bind(tenant.as_str())
        .bind(conversation.0)
        .fetch_one(&mut *self.connection().await?)
        .await
        .map_err(from_sqlx)?;
        Ok(running)
    }
}

impl Postgres {
    /// Takes the idempotency `key` for the message `record` names; `false` when another
    /// run holds it already.
    async fn take_key(
        &self,
        tx: &mut sqlx::Transaction<'static, sqlx::Postgres>,
        tenant: &Tenant,
        key: &str,
        record: &IdempotencyRecord,
    ) -> Result<bool, StoreError> {
        let taken = sqlx::query(
            "INSERT INTO idempotency_keys (tenant, key, message_id, fingerprint) \
             VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING",
        )
        .bind(tenant.as_str())
        .bind(key)
        .bind(record.message_id.0)
        .bind(&record.fingerprint)
        .execute(&mut **tx)
        .await
        .map_err(|err| self.failed(err))?;
        Ok(taken.rows_affected() > 0)
    }

    /// The place (`seq`, turn ordinal) of `message` in its conversation, under the
    /// conversation's lock, writing the `conversation` first when it is new.
    async fn place(
        &self,
        tx: &mut sqlx::Transaction<'static, sqlx::Postgres>,
        tenant: &Tenant,
        conversation: Option<&Conversation>,
        message: &Message,
        alone: bool,
    ) -> Result<Place, StoreError> {
        // A new conversation is written, then the conversation's lock taken, in one round
        // trip; the place is read in the next statement, after the lock.
        let record = conversation
            .map(|conversation| encode("conversations", conversation))
            .transpose()?;
        sqlx::query(
            "WITH opened AS ( \
                 INSERT INTO conversations (tenant, id, record) \
                 SELECT $1, $2, $3 WHERE $3::text IS NOT NULL ON CONFLICT DO NOTHING) \
             SELECT pg_advisory_xact_lock(hashtextextended($4, 0))",
        )
        .bind(tenant.as_str())
        .bind(conversation.map_or(message.conversation_id.0, |conversation| conversation.id.0))
        .bind(record)
        .bind(super::start::conversation_lock(tenant, message))
        .execute(&mut **tx)
        .await
        .map_err(|err| self.failed(err))?;
        // The oldest live message is read in the same statement, under the same lock: a
        // run that must start alone costs no round trip of its own.
        let newest: Option<(i64, i64, Option<Uuid>)> = sqlx::query_as(
            "SELECT seq, ordinal, CASE WHEN $3 THEN (SELECT id FROM messages \
                 WHERE tenant = $1 AND conversation_id = $2 AND running \
                 ORDER BY seq LIMIT 1) END \
             FROM messages WHERE tenant = $1 AND conversation_id = $2 \
             ORDER BY seq DESC LIMIT 1",
        )
        .bind(tenant.as_str())
        .bind(message.conversation_id.0)
        .bind(alone)
        .fetch_optional(&mut **tx)
        .await
        .map_err(|err| self.failed(err))?;
        let live = newest.as_ref().and_then(|(_, _, live)| live.map(MessageId));
        let (seq, ordinal) = match newest {
            None => (1, 1),
            // An ordinal of 0 is unknown (messages of earlier versions), and stays so.
            Some((seq, 0, _)) => (seq + 1, 0),
            Some((seq, ordinal, _)) => (seq + 1, ordinal + 1),
        };
        Ok(Place { seq, ordinal, live })
    }

    /// The conversation's live messages, oldest first, each with whether it is queued; read
    /// under the conversation's lock.
    async fn live_in(
        &self,
        tx: &mut sqlx::Transaction<'static, sqlx::Postgres>,
        tenant: &Tenant,
        conversation: ConversationId,
    ) -> Result<Vec<(MessageId, bool)>, StoreError> {
        let rows: Vec<(Uuid, bool)> = sqlx::query_as(
            "SELECT id, (record::jsonb ->> 'status') = 'queued' FROM messages \
             WHERE tenant = $1 AND conversation_id = $2 AND running ORDER BY seq",
        )
        .bind(tenant.as_str())
        .bind(conversation.0)
        .fetch_all(&mut **tx)
        .await
        .map_err(|err| self.failed(err))?;
        Ok(rows
            .into_iter()
            .map(|(id, queued)| (MessageId(id), queued))
            .collect())
    }

    /// Counts the tenant's running top-level messages and its top-level starts in the last
    /// minute against `admission` (for a sub-agent's message, `child`, its running
    /// sub-agents' messages), holding the tenant's lock until the transaction ends, so the
    /// count and the insert are one step for every replica.
    async fn admit(
        &self,
        tx: &mut sqlx::Transaction<'static, sqlx::Postgres>,
        tenant: &Tenant,
        admission: Admission,
        child: bool,
    ) -> Result<Option<Refusal>, StoreError> {
        if !admission.counts(child) {
            return Ok(None);
        }
        let failed = |err| self.failed(err);
        sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))")
            .bind(super::start::admission_lock(tenant, child))
            .execute(&mut **tx)
            .await
            .map_err(failed)?;
        if child {
            let (running,): (i64,) = sqlx::query_as(
                "SELECT count(*) FROM messages \
                 WHERE tenant = $1 AND running AND parent_id IS NOT NULL",
            )
            .bind(tenant.as_str())
            .fetch_one(&mut **tx)
            .await
            .map_err(failed)?;
            let running = u64::try_from(running).unwrap_or(0);
            return Ok((running >= u64::from(admission.max_children))
                .then_some(Refusal::Children { running }));
        }
        let (running, started, wait_ms): (i64, i64, Option<f64>) = sqlx::query_as(
            "SELECT (SELECT count(*) FROM messages WHERE tenant = $1 AND running \
                     AND parent_id IS NULL AND NOT queued), \
             count(*), \
             (extract(epoch FROM min(created_at) + interval '1 minute' - now()) * 1000)::float8 \
             FROM messages WHERE tenant = $1 AND created_at > now() - interval '1 minute' \
             AND parent_id IS NULL AND NOT queued",
        )
        .bind(tenant.as_str())
        .fetch_one(&mut **tx)
        .await
        .map_err(failed)?;
        let (running, started) = (
            u64::try_from(running).unwrap_or(0),
            u64::try_from(started).unwrap_or(0),
        );
        if admission.max_running > 0 && running >= u64::from(admission.max_running) {
            return Ok(Some(Refusal::Running { running }));
        }
        if admission.per_minute > 0 && started >= u64::from(admission.per_minute) {
            let wait = wait_ms.unwrap_or(0.0).clamp(0.0, 60_000.0);
            return Ok(Some(Refusal::PerMinute {
                started,
                retry_after: std::time::Duration::from_millis(wait as u64),
            }));
        }
        Ok(None)
    }
}
