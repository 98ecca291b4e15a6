//! A tenant's runs newest first, by the number the database gives each message as it is
//! written (`listed`), read from the partial index the filter names (see migration 0006).

use sqlx::Row;
use uuid::Uuid;

use super::error::from_sqlx;
use super::paged::decode;
use super::Postgres;
use crate::domain::{Message, MessageId, RunFilter, RunIndex, Tenant};
use crate::store::error::StoreError;
use crate::store::run_listing::{Flow, Gather, ListedRun, RunCursor, RunPage};

/// The statement that reads one batch below the place `$2` (by `$place`): `$1` tenant,
/// `$3` how many, `$4` the index's key (conversation, parent or agent). Records longer
/// than 32 KiB are read one at a time, after the batch: a batch of a thousand rows never
/// holds a thousand long answers.
macro_rules! batch {
    ($place:literal, $condition:literal) => {
        concat!(
            "SELECT ",
            $place,
            " AS place, id, owner, running, ",
            "CASE WHEN length(record) <= 32768 THEN record END AS record ",
            "FROM messages WHERE tenant = $1 AND ",
            $condition,
            " AND ",
            $place,
            " < $2 ",
            "ORDER BY ",
            $place,
            " DESC LIMIT $3"
        )
    };
}

/// The statement that reads one batch of `index`.
fn statement(index: RunIndex) -> &'static str {
    match index {
        RunIndex::Conversation(_) => batch!("seq", "conversation_id = $4::uuid"),
        RunIndex::Children(_) => batch!("listed", "parent_id = $4::uuid"),
        RunIndex::Live => batch!(
            "listed",
            "running AND parent_id IS NULL AND $4::text IS NULL"
        ),
        RunIndex::Agent => batch!("listed", "agent_id = $4::text"),
        RunIndex::All => batch!("listed", "parent_id IS NULL AND $4::text IS NULL"),
    }
}

/// One row of a batch: its place, and its record unless it was too long to read inline.
struct Entry {
    place: i64,
    id: MessageId,
    owner: Option<String>,
    record: Option<String>,
}

impl Postgres {
    /// A page of the tenant's runs `filter` keeps, newest first, after `after`.
    pub(super) async fn list_runs_now(
        &self,
        tenant: &Tenant,
        filter: &RunFilter,
        after: Option<RunCursor>,
        limit: usize,
    ) -> Result<RunPage, StoreError> {
        let index = filter.index();
        let sql = statement(index);
        let mut below = after.map_or(i64::MAX, |RunCursor(place)| {
            i64::try_from(place).unwrap_or(i64::MAX)
        });
        let mut gather = Gather::new(filter, limit);
        loop {
            let wanted = gather.wanted();
            let rows = self
                .batch(sql, tenant, filter, index, below, wanted)
                .await?;
            let exhausted = rows.len() < wanted;
            for row in rows {
                below = row.place;
                let place = RunCursor(u128::try_from(row.place).unwrap_or_default());
                let run = self.listed(tenant, row).await?;
                if gather.offer(place, run) == Flow::Done {
                    return Ok(gather.finish());
                }
            }
            if exhausted {
                return Ok(gather.finish());
            }
        }
    }

    async fn batch(
        &self,
        sql: &'static str,
        tenant: &Tenant,
        filter: &RunFilter,
        index: RunIndex,
        below: i64,
        wanted: usize,
    ) -> Result<Vec<Entry>, StoreError> {
        let query = sqlx::query(sql)
            .bind(tenant.as_str())
            .bind(below)
            .bind(i64::try_from(wanted).unwrap_or(i64::MAX));
        let query = match index {
            RunIndex::Conversation(id) => query.bind(id.0),
            RunIndex::Children(parent) => query.bind(parent.0),
            RunIndex::Agent => query.bind(filter.agent_id.clone()),
            RunIndex::Live | RunIndex::All => query.bind(None::<String>),
        };
        let rows = query.fetch_all(&self.pool).await.map_err(from_sqlx)?;
        rows.into_iter()
            .map(|row| {
                let running: bool = row.try_get("running").map_err(from_sqlx)?;
                let owner: String = row.try_get("owner").map_err(from_sqlx)?;
                Ok(Entry {
                    place: row.try_get("place").map_err(from_sqlx)?,
                    id: MessageId(row.try_get::<Uuid, _>("id").map_err(from_sqlx)?),
                    owner: running.then_some(owner),
                    record: row.try_get("record").map_err(from_sqlx)?,
                })
            })
            .collect()
    }

    /// The run of a row, its long record read on its own; without its answer.
    async fn listed(&self, tenant: &Tenant, row: Entry) -> Result<Option<ListedRun>, StoreError> {
        let message: Option<Message> = match row.record {
            Some(text) => Some(decode("messages", &text)?),
            None => self.read_message(tenant, row.id).await?,
        };
        Ok(message.map(|mut message| {
            message.answer.clear();
            ListedRun {
                message,
                owner: row.owner,
            }
        }))
    }
}
