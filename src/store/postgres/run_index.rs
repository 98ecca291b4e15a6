//! A tenant's runs newest first, and its conversations by last activity, by the number the database gives each message as it is
//! written (`listed`), read from the partial index the filter names (see migration 0006).

use sqlx::Row;
use uuid::Uuid;

use super::error::from_sqlx;
use super::paged::decode;
use super::Postgres;
use crate::domain::{Conversation, Message, MessageId, RunFilter, RunIndex, Tenant};
use crate::store::error::StoreError;
use crate::store::run_listing::{
    ConversationPage, ConversationQuery, Flow, Gather, ListedConversation, ListedRun, RunCursor,
    RunPage, RunQuery,
};

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

/// One batch of conversations: the top-level runs below `$2`, each with whether it was its
/// conversation's newest as of `$4` (no later run of it numbered at or below), the
/// conversation's record; `$1` tenant, `$3` how many.
const CONVERSATIONS: &str = "\
SELECT m.listed AS place, m.id, m.owner, m.running, \
    CASE WHEN length(m.record) <= 32768 THEN m.record END AS record, \
    c.record AS conversation, \
    NOT EXISTS (SELECT 1 FROM messages n WHERE n.tenant = m.tenant \
        AND n.conversation_id = m.conversation_id AND n.seq > m.seq AND n.listed <= $4) AS newest \
FROM messages m JOIN conversations c ON c.tenant = m.tenant AND c.id = m.conversation_id \
WHERE m.tenant = $1 AND m.parent_id IS NULL AND m.listed < $2 \
ORDER BY m.listed DESC LIMIT $3";

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
        query: &RunQuery<'_>,
    ) -> Result<RunPage, StoreError> {
        let RunQuery {
            filter,
            after,
            limit,
        } = *query;
        let index = filter.index();
        let sql = statement(index);
        let mut below = after.map_or(i64::MAX, |RunCursor(place)| {
            i64::try_from(place).unwrap_or(i64::MAX)
        });
        let mut gather = Gather::new(limit);
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
                let kept = run.filter(|run| filter.keeps(&run.message));
                if gather.offer(place, kept) == Flow::Done {
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
        let rows = query
            .fetch_all(&mut *self.connection().await?)
            .await
            .map_err(from_sqlx)?;
        rows.iter().map(entry_of).collect()
    }

    /// A page of the tenant's conversations by last activity as of `as_of`, from `after`
    /// down.
    pub(super) async fn list_conversations_now(
        &self,
        tenant: &Tenant,
        query: &ConversationQuery<'_>,
    ) -> Result<ConversationPage, StoreError> {
        let as_of = match query.as_of {
            Some(RunCursor(place)) => i64::try_from(place).unwrap_or(i64::MAX),
            None => {
                let newest: Option<(i64,)> = sqlx::query_as(
                    "SELECT listed FROM messages WHERE tenant = $1 AND parent_id IS NULL \
                     ORDER BY listed DESC LIMIT 1",
                )
                .bind(tenant.as_str())
                .fetch_optional(&mut *self.connection().await?)
                .await
                .map_err(from_sqlx)?;
                match newest {
                    Some((newest,)) => newest,
                    None => return Ok(ConversationPage::default()),
                }
            }
        };
        let mut below = as_of.saturating_add(1);
        if let Some(RunCursor(after)) = query.after {
            below = below.min(i64::try_from(after).unwrap_or(i64::MAX));
        }
        let mut gather = Gather::new(query.limit);
        loop {
            let wanted = gather.wanted();
            let rows = sqlx::query(CONVERSATIONS)
                .bind(tenant.as_str())
                .bind(below)
                .bind(i64::try_from(wanted).unwrap_or(i64::MAX))
                .bind(as_of)
                .fetch_all(&mut *self.connection().await?)
                .await
                .map_err(from_sqlx)?;
            let exhausted = rows.len() < wanted;
            for row in rows {
                let entry = entry_of(&row)?;
                below = entry.place;
                let place = RunCursor(u128::try_from(entry.place).unwrap_or_default());
                let kept = self
                    .conversation_of(tenant, &row, entry, query.user)
                    .await?;
                if gather.offer(place, kept) == Flow::Done {
                    return Ok(self.conversations(as_of, gather));
                }
            }
            if exhausted {
                return Ok(self.conversations(as_of, gather));
            }
        }
    }

    fn conversations(&self, as_of: i64, gather: Gather<ListedConversation>) -> ConversationPage {
        ConversationPage {
            as_of: Some(RunCursor(u128::try_from(as_of).unwrap_or_default())),
            page: gather.finish(),
        }
    }

    /// A row's conversation, when its run was the newest then and `user` (if given)
    /// started it.
    async fn conversation_of(
        &self,
        tenant: &Tenant,
        row: &sqlx::postgres::PgRow,
        entry: Entry,
        user: Option<&str>,
    ) -> Result<Option<ListedConversation>, StoreError> {
        let newest: bool = row.try_get("newest").map_err(from_sqlx)?;
        if !newest {
            return Ok(None);
        }
        let text: String = row.try_get("conversation").map_err(from_sqlx)?;
        let conversation: Conversation = decode("conversations", &text)?;
        if user.is_some_and(|user| conversation.user != user) {
            return Ok(None);
        }
        let Some(last) = self.listed(tenant, entry).await? else {
            return Ok(None);
        };
        Ok(Some(ListedConversation {
            conversation,
            messages: last.message.seq,
            last,
        }))
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

/// The run a row names.
fn entry_of(row: &sqlx::postgres::PgRow) -> Result<Entry, StoreError> {
    let running: bool = row.try_get("running").map_err(from_sqlx)?;
    let owner: String = row.try_get("owner").map_err(from_sqlx)?;
    Ok(Entry {
        place: row.try_get("place").map_err(from_sqlx)?,
        id: MessageId(row.try_get::<Uuid, _>("id").map_err(from_sqlx)?),
        owner: running.then_some(owner),
        record: row.try_get("record").map_err(from_sqlx)?,
    })
}
