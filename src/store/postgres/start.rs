//! Starting a run: its message written in one round trip when nothing about it needs
//! deciding in the service, the idempotency key a start may find taken, and the epoch a
//! run starts at.

use std::time::Instant;

use uuid::Uuid;

use super::error::{from_sqlx, is_connection_lost};
use super::paged::encode;
use super::Postgres;
use crate::domain::{IdempotencyRecord, Message, MessageId, Tenant};
use crate::store::contract::NewMessage;
use crate::store::error::StoreError;

/// What the database raises when the start needs the way that decides: the conversation
/// has a live message that the start's rule reads, or the tenant is at one of its limits.
const DECIDED_HERE: [&str; 2] = ["LIVE0", "LIMIT"];

/// The call: `agent_runner_start` (migration 0009).
pub(super) const START: &str =
    "SELECT outcome, placed_seq, placed_ordinal FROM agent_runner_start(\
    $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21)";

/// The epoch a run starts with on its first owner.
pub(super) const FIRST_EPOCH: i64 = 1;

/// The key of the advisory lock under which the tenant's starts are counted against its
/// limits: its sub-agents' (`child`) apart from its top-level ones.
pub(super) fn admission_lock(tenant: &Tenant, child: bool) -> String {
    let lock = if child { "children" } else { "admission" };
    format!("{}\u{2}{lock}", tenant.as_str())
}

/// The key of a conversation's advisory lock, under which a message takes its place.
pub(super) fn conversation_lock(tenant: &Tenant, message: &Message) -> String {
    format!("{}\u{1}{}", tenant.as_str(), message.conversation_id.0)
}

impl Postgres {
    /// What an idempotency key points at.
    pub(super) async fn read_idempotency(
        &self,
        tenant: &Tenant,
        key: &str,
    ) -> Result<Option<IdempotencyRecord>, StoreError> {
        let row: Option<(Uuid, String)> = sqlx::query_as(
            "SELECT message_id, fingerprint FROM idempotency_keys WHERE tenant = $1 AND key = $2",
        )
        .bind(tenant.as_str())
        .bind(key)
        .fetch_optional(&mut *self.connection().await?)
        .await
        .map_err(from_sqlx)?;
        Ok(row.map(|(id, fingerprint)| IdempotencyRecord {
            message_id: MessageId(id),
            fingerprint,
        }))
    }

    /// What an idempotency key points at, after another request took it.
    pub(super) async fn get_idempotency_now(
        &self,
        tenant: &Tenant,
        key: &str,
    ) -> Result<IdempotencyRecord, StoreError> {
        self.read_idempotency(tenant, key)
            .await?
            .ok_or_else(|| super::unavailable("an idempotency key was taken and then released"))
    }

    /// `args` in a call and a transaction of its own. With `again`, the start may have
    /// landed already (in a batch whose answer was lost): its message is found by its id,
    /// never written twice. A call whose connection was lost is made once more on another.
    pub(super) async fn start_alone(
        &self,
        args: &StartArgs,
        again: bool,
        began: Instant,
    ) -> Result<Outcome, StoreError> {
        let call = |again: bool| args.bind(sqlx::query_as(START), &self.identity.id, again);
        self.check_writable()?;
        let mut connection = self.connection_since(began).await?;
        let mut answer = call(again).fetch_one(&mut *connection).await;
        if answer.as_ref().is_err_and(is_connection_lost) {
            // Ended by the server, perhaps while it sat idle untested: it leaves the pool
            // (which may open another), and the call is made once more on another.
            drop(connection.detach());
            connection = self.connection_since(began).await?;
            answer = call(true).fetch_one(&mut *connection).await;
        }
        match answer {
            Ok(row) => {
                self.warm.give_back(connection);
                Outcome::read(row)
            }
            Err(sqlx::Error::Database(db))
                if db
                    .code()
                    .is_some_and(|code| DECIDED_HERE.contains(&code.as_ref())) =>
            {
                Ok(Outcome::Decide)
            }
            Err(err) => Err(self.failed(err)),
        }
    }
}

/// One start's arguments to `agent_runner_start`, owned, so that it can wait among
/// others for a call that carries them all.
pub(super) struct StartArgs {
    pub(super) tenant: String,
    pub(super) id: Uuid,
    pub(super) conversation: Uuid,
    pub(super) conversation_record: Option<String>,
    pub(super) head: String,
    pub(super) tail: String,
    pub(super) spec: String,
    pub(super) agent: Option<String>,
    pub(super) parent: Option<Uuid>,
    pub(super) lock: String,
    pub(super) alone: bool,
    pub(super) key: Option<String>,
    pub(super) fingerprint: Option<String>,
    pub(super) limits: Option<String>,
    pub(super) child: bool,
    pub(super) max_running: i32,
    pub(super) per_minute: i32,
    pub(super) max_children: i32,
}

impl StartArgs {
    /// The arguments of `new`, whose message has no place yet; `None` when its record is
    /// not laid out to be cut at its place (see [`cut_at_seq`]).
    pub(super) fn of(new: &NewMessage<'_>) -> Result<Option<Self>, StoreError> {
        let message = &*new.message;
        let child = message.parent.is_some();
        let admission = new.admission;
        let limit = |value: u32| i32::try_from(value).unwrap_or(i32::MAX);
        let record = encode("messages", message)?;
        let Some((head, tail)) = cut_at_seq(&record, message) else {
            return Ok(None);
        };
        let conversation_record = new
            .conversation
            .map(|conversation| encode("conversations", conversation))
            .transpose()?;
        Ok(Some(StartArgs {
            tenant: new.tenant.as_str().to_owned(),
            id: message.id.0,
            conversation: message.conversation_id.0,
            conversation_record,
            head: head.to_owned(),
            tail: tail.to_owned(),
            spec: encode("specs", new.spec)?,
            agent: message
                .agent
                .as_ref()
                .filter(|_| !child)
                .map(|pin| pin.agent_id.clone()),
            parent: message.parent.as_ref().map(|parent| parent.message_id.0),
            lock: conversation_lock(new.tenant, message),
            alone: admission.rule.checks(),
            key: new.idempotency.map(|(key, _)| key.to_owned()),
            fingerprint: new
                .idempotency
                .map(|(_, record)| record.fingerprint.clone()),
            limits: admission
                .counts(child)
                .then(|| admission_lock(new.tenant, child)),
            child,
            max_running: limit(admission.max_running),
            per_minute: limit(admission.per_minute),
            max_children: limit(admission.max_children),
        }))
    }

    /// `query` (the call [`START`]) with these arguments, made by `owner`, `again` or not.
    pub(super) fn bind<'q, O>(
        &'q self,
        query: sqlx::query::QueryAs<'q, sqlx::Postgres, O, sqlx::postgres::PgArguments>,
        owner: &'q str,
        again: bool,
    ) -> sqlx::query::QueryAs<'q, sqlx::Postgres, O, sqlx::postgres::PgArguments> {
        query
            .bind(self.tenant.as_str())
            .bind(self.id)
            .bind(self.conversation)
            .bind(self.conversation_record.as_deref())
            .bind(self.head.as_str())
            .bind(self.tail.as_str())
            .bind(self.spec.as_str())
            .bind(owner)
            .bind(FIRST_EPOCH)
            .bind(self.agent.as_deref())
            .bind(self.parent)
            .bind(self.lock.as_str())
            .bind(self.alone)
            .bind(self.key.as_deref())
            .bind(self.fingerprint.as_deref())
            .bind(again)
            .bind(self.limits.as_deref())
            .bind(self.child)
            .bind(self.max_running)
            .bind(self.per_minute)
            .bind(self.max_children)
    }
}

/// What the database answered a start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Outcome {
    /// Written, in this place.
    Inserted { seq: i64, ordinal: i64 },
    /// Its idempotency key points at another message.
    KeyTaken,
    /// It needs the way that decides (see [`DECIDED_HERE`]); nothing of it was written.
    Decide,
}

impl Outcome {
    /// The outcome a row of `agent_runner_start` (or `agent_runner_start_many`) answers.
    pub(super) fn read(row: (String, Option<i64>, Option<i64>)) -> Result<Self, StoreError> {
        match row {
            (outcome, Some(seq), Some(ordinal)) if outcome == "inserted" => {
                Ok(Outcome::Inserted { seq, ordinal })
            }
            (outcome, _, _) if outcome == "key_taken" => Ok(Outcome::KeyTaken),
            (outcome, _, _) if outcome == "decide" => Ok(Outcome::Decide),
            (outcome, _, _) => Err(super::unavailable(&format!(
                "the database answered a start with {outcome:?}, which this build does not know"
            ))),
        }
    }
}

/// `record`, the JSON of `message` with `seq` 0 and no ordinal, cut around that 0: the
/// database writes the place it takes between the two parts (see migration 0009). Only the
/// two ids come before `seq`, so the first `"seq"` is the message's own; `None` if the
/// JSON is not laid out so.
pub(super) fn cut_at_seq<'r>(record: &'r str, message: &Message) -> Option<(&'r str, &'r str)> {
    let ids = format!(
        "{{\"id\":\"{}\",\"conversation_id\":\"{}\"",
        message.id.0, message.conversation_id.0
    );
    let rest = record.strip_prefix(ids.as_str())?;
    rest.strip_prefix(",\"seq\":0,")?;
    let at = ids.len() + ",\"seq\":".len();
    Some((&record[..at], &record[at + 1..]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::ConversationId;
    use crate::store::test_records::running_message;

    fn message() -> Message {
        running_message(ConversationId::new(), 3)
    }

    /// What the database writes for a place: the head, the seq, the ordinal unless 0, the
    /// tail (as migration 0009 joins them).
    fn joined(head: &str, tail: &str, seq: u64, ordinal: u64) -> String {
        let ordinal = match ordinal {
            0 => String::new(),
            ordinal => format!(",\"ordinal\":{ordinal}"),
        };
        format!("{head}{seq}{ordinal}{tail}")
    }

    #[test]
    fn the_place_written_in_is_the_record_serde_writes() {
        let mut placed = message();
        placed.query = "a \"seq\":0, inside the query".to_owned();
        placed.seq = 0;
        placed.ordinal = 0;
        let record = serde_json::to_string(&placed).unwrap();
        let (head, tail) = cut_at_seq(&record, &placed).expect("the record is cut at its seq");
        for (seq, ordinal) in [(1, 1), (7, 0), (12, 5), (u64::from(u32::MAX) + 3, 9)] {
            placed.seq = seq;
            placed.ordinal = ordinal;
            let written = joined(head, tail, seq, ordinal);
            assert_eq!(written, serde_json::to_string(&placed).unwrap());
            let read: Message = serde_json::from_str(&written).unwrap();
            assert_eq!((read.seq, read.ordinal), (seq, ordinal));
        }
    }

    #[test]
    fn a_record_laid_out_otherwise_is_not_cut() {
        let placed = message();
        let record = serde_json::to_string(&placed).unwrap();
        let other = message();
        assert!(
            cut_at_seq(&record, &other).is_none(),
            "another message's ids"
        );
        let reordered = record.replacen("{\"id\"", "{\"x\":1,\"id\"", 1);
        assert!(
            cut_at_seq(&reordered, &placed).is_none(),
            "a field before the ids"
        );
    }
}
