//! Thoughts, files and the event log in PostgreSQL: a run's burst is one transaction.

use std::time::Instant;

use async_trait::async_trait;

use super::error::{codec, from_sqlx};
use super::paged::{encode, Paged};
use super::spans::{self, Layout};
use super::Postgres;
use crate::domain::{EventEnvelope, FileId, FileRecord, MessageId, Tenant, Thought};
use crate::store::contract::{Burst, Fence, Page, PageSize};
use crate::store::error::StoreError;

/// Thoughts, a page at a time in their message.
const THOUGHTS: Paged = Paged {
    table: "thoughts",
    owner: "message_id",
    order: "position",
};

#[async_trait]
impl crate::store::contract::Records for Postgres {
    async fn list_thoughts(
        &self,
        tenant: &Tenant,
        message: MessageId,
        after: Option<u32>,
        size: PageSize,
    ) -> Result<Page<Thought>, StoreError> {
        let after = after.map_or(-1, i64::from);
        self.read_page(&THOUGHTS, tenant, message.0, after, size)
            .await
    }

    fn open_reasoning(&self, thoughts: &mut [Thought]) {
        self.sealer.open_thoughts(thoughts);
    }

    async fn put_file(
        &self,
        tenant: &Tenant,
        record: &FileRecord,
        bytes: Option<&[u8]>,
    ) -> Result<(), StoreError> {
        self.bounded(async move {
            let started = Instant::now();
            let mut tx = self.begin().await?;
            sqlx::query(
                "INSERT INTO files (tenant, id, message_id, record, data) VALUES ($1, $2, $3, $4, $5) \
                 ON CONFLICT (tenant, id) DO UPDATE SET record = EXCLUDED.record, data = EXCLUDED.data",
            )
            .bind(tenant.as_str())
            .bind(record.id.0)
            .bind(record.message_id.0)
            .bind(encode("files", record)?)
            .bind(bytes)
            .execute(&mut *tx)
            .await
            .map_err(|err| self.failed(err))?;
            self.finish(tx, started).await
        })
        .await
    }

    async fn get_file(
        &self,
        tenant: &Tenant,
        id: FileId,
    ) -> Result<Option<(FileRecord, Vec<u8>)>, StoreError> {
        let row: Option<(String, Option<Vec<u8>>)> =
            sqlx::query_as("SELECT record, data FROM files WHERE tenant = $1 AND id = $2")
                .bind(tenant.as_str())
                .bind(id.0)
                .fetch_optional(&mut *self.connection().await?)
                .await
                .map_err(from_sqlx)?;
        row.map(|(text, data)| {
            let record = serde_json::from_str(&text).map_err(|err| codec("files", err))?;
            Ok((record, data.unwrap_or_default()))
        })
        .transpose()
    }
}

#[async_trait]
impl crate::store::contract::EventLog for Postgres {
    /// The fence is recorded with each message (one fixed owner until replicas take runs
    /// over). The burst joins the bursts of other runs waiting at the time in one
    /// transaction (see [`super::committer`]), durable when it commits. Events already
    /// written (a burst committed again after an error it did not see) are kept as they are.
    async fn commit(
        &self,
        tenant: &Tenant,
        fence: &Fence,
        burst: &Burst,
    ) -> Result<(), StoreError> {
        if burst.is_empty() {
            return Ok(());
        }
        let stopped = || super::unavailable("the store's committer has stopped");
        let burst = self.sealer.seal_burst(burst)?;
        let run = burst.events.first().map(|event| event.message_id);
        let layout = run.map_or(Layout::Rows, |run| self.spans.layout(run));
        let (job, done) = super::committer::job(tenant, fence, &burst, &layout)?;
        self.committer.send(job).map_err(|_| stopped())?;
        let committed = done.await.map_err(|_| stopped())?;
        if let Some(run) = run {
            // Fenced, nothing was written and the run writes nothing more.
            let failed = matches!(&committed, Err(err) if !matches!(err, StoreError::Fenced));
            self.spans.settled(run, &layout, &burst.events, failed);
        }
        committed
    }

    async fn list_events(
        &self,
        tenant: &Tenant,
        message: MessageId,
        after_seq: u64,
    ) -> Result<Vec<EventEnvelope>, StoreError> {
        let after = i64::try_from(after_seq).unwrap_or(i64::MAX);
        let rows: Vec<(Option<i64>, String)> = sqlx::query_as(
            "SELECT last_seq, record FROM events WHERE tenant = $1 AND message_id = $2 \
             AND (seq > $3 OR last_seq > $3) ORDER BY seq",
        )
        .bind(tenant.as_str())
        .bind(message.0)
        .bind(after)
        .fetch_all(&mut *self.connection().await?)
        .await
        .map_err(from_sqlx)?;
        let mut events = Vec::with_capacity(rows.len());
        for (last_seq, record) in &rows {
            let held = spans::decode(*last_seq, record)?;
            events.extend(held.into_iter().filter(|event| event.seq > after_seq));
        }
        Ok(events)
    }

    async fn last_event(
        &self,
        tenant: &Tenant,
        message: MessageId,
    ) -> Result<Option<EventEnvelope>, StoreError> {
        let row: Option<(Option<i64>, String)> = sqlx::query_as(
            "SELECT last_seq, record FROM events WHERE tenant = $1 AND message_id = $2 \
             ORDER BY seq DESC LIMIT 1",
        )
        .bind(tenant.as_str())
        .bind(message.0)
        .fetch_optional(&mut *self.connection().await?)
        .await
        .map_err(from_sqlx)?;
        match row {
            Some((last_seq, record)) => Ok(spans::decode(last_seq, &record)?.pop()),
            None => Ok(None),
        }
    }

    /// One statement per batch: the ended messages picked (skipping any another process
    /// holds), their events but the last deleted (a last span cut down to its last event),
    /// and the messages marked.
    async fn retire_events(
        &self,
        before: chrono::DateTime<chrono::Utc>,
        limit: usize,
    ) -> Result<usize, StoreError> {
        self.bounded(async move {
            let started = std::time::Instant::now();
            let mut tx = self.begin().await?;
            let retired = sqlx::query(
                "WITH picked AS ( \
                     SELECT tenant, id FROM messages \
                     WHERE ended_at < $1 AND NOT events_retired \
                     ORDER BY ended_at LIMIT $2 FOR UPDATE SKIP LOCKED \
                 ), gone AS ( \
                     DELETE FROM events e USING picked p \
                     WHERE e.tenant = p.tenant AND e.message_id = p.id AND e.seq < ( \
                         SELECT max(l.seq) FROM events l \
                         WHERE l.tenant = p.tenant AND l.message_id = p.id) \
                 ), cut AS ( \
                     UPDATE events e SET seq = e.last_seq, last_seq = NULL, \
                         record = (e.record::json -> -1)::text \
                     FROM picked p \
                     WHERE e.tenant = p.tenant AND e.message_id = p.id \
                         AND e.last_seq IS NOT NULL AND e.seq = ( \
                         SELECT max(l.seq) FROM events l \
                         WHERE l.tenant = p.tenant AND l.message_id = p.id) \
                 ) \
                 UPDATE messages m SET events_retired = true FROM picked p \
                 WHERE m.tenant = p.tenant AND m.id = p.id",
            )
            .bind(before)
            .bind(i64::try_from(limit).unwrap_or(i64::MAX))
            .execute(&mut *tx)
            .await
            .map_err(|err| self.failed(err))?;
            self.finish(tx, started).await?;
            Ok(usize::try_from(retired.rows_affected()).unwrap_or(usize::MAX))
        })
        .await
    }
}
