//! Starting a run: its message written in one round trip when nothing about it needs
//! deciding in the service, the idempotency key a start may find taken, and the epoch a
//! run starts at.

use std::time::Instant;

use uuid::Uuid;

use super::error::{from_sqlx, is_connection_lost};
use super::paged::encode;
use super::Postgres;
use crate::domain::{IdempotencyRecord, Message, MessageId, Tenant};
use crate::store::contract::{Inserted, NewMessage};
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

    /// Writes `new` in one call, counted against the tenant's limits as the caller's own
    /// transaction would count it: `None` when the conversation has a live message its
    /// rule reads, or the tenant is at a limit, which the caller decides (and says why) in
    /// a transaction of its own. A call whose connection was lost is made once more on
    /// another; the first try's message, if it landed, is found by its id, never written
    /// twice.
    pub(super) async fn start_in_one_call(
        &self,
        new: &mut NewMessage<'_>,
        began: Instant,
    ) -> Result<Option<Inserted>, StoreError> {
        let child = new.message.parent.is_some();
        let admission = new.admission;
        let limits = admission
            .counts(child)
            .then(|| admission_lock(new.tenant, child));
        let limit = |value: u32| i32::try_from(value).unwrap_or(i32::MAX);
        new.message.seq = 0;
        new.message.ordinal = 0;
        let record = encode("messages", &*new.message)?;
        let Some((head, tail)) = cut_at_seq(&record, new.message) else {
            return Ok(None);
        };
        let conversation = new
            .conversation
            .map(|conversation| encode("conversations", conversation))
            .transpose()?;
        let spec = encode("specs", new.spec)?;
        let lock = conversation_lock(new.tenant, new.message);
        let message = &*new.message;
        let agent = message
            .agent
            .as_ref()
            .filter(|_| message.parent.is_none())
            .map(|pin| pin.agent_id.as_str());
        let (key, fingerprint) = match new.idempotency {
            Some((key, record)) => (Some(key), Some(record.fingerprint.as_str())),
            None => (None, None),
        };
        let call = |again: bool| {
            sqlx::query_as::<_, (String, Option<i64>, Option<i64>)>(START)
                .bind(new.tenant.as_str())
                .bind(message.id.0)
                .bind(message.conversation_id.0)
                .bind(conversation.as_deref())
                .bind(head)
                .bind(tail)
                .bind(spec.as_str())
                .bind(&self.identity.id)
                .bind(FIRST_EPOCH)
                .bind(agent)
                .bind(message.parent.as_ref().map(|parent| parent.message_id.0))
                .bind(lock.as_str())
                .bind(admission.rule.checks())
                .bind(key)
                .bind(fingerprint)
                .bind(again)
                .bind(limits.as_deref())
                .bind(child)
                .bind(limit(admission.max_running))
                .bind(limit(admission.per_minute))
                .bind(limit(admission.max_children))
        };
        self.check_writable()?;
        let mut connection = self.connection_since(began).await?;
        let mut answer = call(false).fetch_one(&mut *connection).await;
        if answer.as_ref().is_err_and(is_connection_lost) {
            // Ended by the server, perhaps while it sat idle untested: it leaves the pool
            // (which may open another), and the call is made once more on another.
            drop(connection.detach());
            connection = self.connection_since(began).await?;
            answer = call(true).fetch_one(&mut *connection).await;
        }
        let (outcome, seq, ordinal) = match answer {
            Ok(answer) => {
                self.warm.give_back(connection);
                answer
            }
            Err(sqlx::Error::Database(db))
                if db
                    .code()
                    .is_some_and(|code| DECIDED_HERE.contains(&code.as_ref())) =>
            {
                return Ok(None)
            }
            Err(err) => return Err(self.failed(err)),
        };
        match (outcome.as_str(), seq, ordinal) {
            ("inserted", Some(seq), Some(ordinal)) => {
                new.message.seq = u64::try_from(seq).unwrap_or_default();
                new.message.ordinal = u64::try_from(ordinal).unwrap_or_default();
                Ok(Some(Inserted::Yes))
            }
            ("key_taken", _, _) => {
                let key = key.unwrap_or_default();
                let winner = self.get_idempotency_now(new.tenant, key).await?;
                Ok(Some(Inserted::KeyTaken(winner)))
            }
            _ => Err(super::unavailable(&format!(
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
