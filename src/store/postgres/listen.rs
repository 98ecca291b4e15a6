//! What peers say through the database's own notifications, for deployments without NATS.
//! Each commit with events sends at most one `NOTIFY` naming `message_id:last_seq` for
//! each run it wrote (`*` when they do not fit), and a kept command notifies its owner;
//! each replica listens on one connection and hands on what it hears as [`Heard`] (the bus
//! room builds its bus on that). A notification carries no events, so a follower reads
//! them from the store; and PostgreSQL orders notifying commits one at a time, which is
//! what this costs (see docs/operations.md, Scale out).

use std::fmt::Write as _;
use std::sync::{Arc, Weak};
use std::time::Duration;

use sqlx::postgres::PgListener;
use tokio::sync::broadcast;

use super::Postgres;
use crate::domain::MessageId;
use crate::store::contract::Heard;
use crate::store::error::StoreError;

/// The channel of committed events.
pub(super) const EVENTS: &str = "agent_runner_events";

/// The channel of kept commands; the payload names the owner to wake.
const COMMANDS: &str = "agent_runner_commands";

/// The most a notification payload holds here (PostgreSQL's limit is 8000 bytes).
const MAX_PAYLOAD: usize = 7900;

/// What one notification says of the runs a commit wrote: `id:last_seq,…`, or `*`.
pub fn payload(last_seqs: &[(uuid::Uuid, i64)]) -> String {
    let mut text = String::new();
    for (id, seq) in last_seqs {
        if !text.is_empty() {
            text.push(',');
        }
        let _ = write!(text, "{id}:{seq}");
        if text.len() > MAX_PAYLOAD {
            return "*".to_owned();
        }
    }
    text
}

/// How many notices wait for a slow hearer before it is told it missed some.
const HEARD_BACKLOG: usize = 4096;

/// Where what is heard goes, for hearers to subscribe to.
pub(super) fn heard() -> broadcast::Sender<Heard> {
    broadcast::Sender::new(HEARD_BACKLOG)
}

impl Postgres {
    /// Notifies the owner of a run that a command was kept for it, with the command's
    /// commit.
    pub(super) async fn notify_owner(
        &self,
        tx: &mut sqlx::Transaction<'static, sqlx::Postgres>,
        owner: &str,
    ) -> Result<(), StoreError> {
        if self.heard.is_none() {
            return Ok(());
        }
        sqlx::query("SELECT pg_notify($1, $2)")
            .bind(COMMANDS)
            .bind(owner)
            .execute(&mut **tx)
            .await
            .map_err(|err| self.failed(err))?;
        Ok(())
    }

    /// The notice a commit that wrote these runs' events sends, when commits notify (the
    /// runs' last `seq`s are gathered only then).
    pub(super) fn notice_of(
        &self,
        last_seqs: impl FnOnce() -> Vec<(uuid::Uuid, i64)>,
    ) -> Option<String> {
        self.heard.as_ref()?;
        let last_seqs = last_seqs();
        (!last_seqs.is_empty()).then(|| payload(&last_seqs))
    }

    /// Starts listening, handing on what is heard to the subscribers of
    /// [`Ownership::hear`](crate::store::contract::Ownership::hear).
    pub(super) fn listen(self: &Arc<Self>) {
        if let Some(heard) = &self.heard {
            let listening = listen(Arc::downgrade(self), heard.clone());
            self.tasks.spawn_until_stopped(listening);
        }
    }
}

/// Listens until the backend is dropped, connecting again after a failure (and then
/// telling every follower to read the store, for what was missed meanwhile).
async fn listen(backend: Weak<Postgres>, heard: broadcast::Sender<Heard>) {
    loop {
        let Some(strong) = backend.upgrade() else {
            return;
        };
        let (pool, me) = (strong.pool.clone(), strong.identity.id.clone());
        drop(strong);
        let mut listener = match PgListener::connect_with(&pool).await {
            Ok(listener) => listener,
            Err(_) => {
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
        };
        if listener.listen_all([EVENTS, COMMANDS]).await.is_err() {
            tokio::time::sleep(Duration::from_secs(1)).await;
            continue;
        }
        // Whatever was said while nobody listened is read from the store.
        let _ = heard.send(Heard::Missed);
        let _ = heard.send(Heard::Woken);
        loop {
            let received = tokio::select! {
                received = listener.try_recv() => received,
                () = tokio::time::sleep(Duration::from_secs(5)) => {
                    if backend.strong_count() == 0 {
                        return;
                    }
                    continue;
                }
            };
            let Ok(Some(notification)) = received else {
                // Lost: connect again, and have every follower read what it missed.
                break;
            };
            match notification.channel() {
                COMMANDS if notification.payload() == me => {
                    let _ = heard.send(Heard::Woken);
                }
                EVENTS => hand_on(&heard, notification.payload()),
                _ => {}
            }
        }
    }
}

/// Hands on what one notification of commits says: each run it names, or that every
/// follower must read the store.
fn hand_on(heard: &broadcast::Sender<Heard>, payload: &str) {
    for notice in read_payload(payload) {
        let _ = heard.send(notice);
    }
}

/// What a notification of commits says: the runs it names with their last `seq`, or
/// [`Heard::Missed`] for one too long to name them (entries that do not read are skipped).
fn read_payload(payload: &str) -> Vec<Heard> {
    if payload == "*" {
        return vec![Heard::Missed];
    }
    payload
        .split(',')
        .filter_map(|entry| {
            let (id, seq) = entry.split_once(':')?;
            Some(Heard::Committed {
                message: MessageId(id.parse().ok()?),
                last_seq: seq.parse().ok()?,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_payload_names_each_run_or_all_when_too_long() {
        let a = uuid::Uuid::from_u128(1);
        assert_eq!(
            payload(&[(a, 3), (uuid::Uuid::from_u128(2), 9)]),
            "00000000-0000-0000-0000-000000000001:3,00000000-0000-0000-0000-000000000002:9"
        );
        let many: Vec<_> = (0..300).map(|i| (uuid::Uuid::from_u128(i), 1)).collect();
        assert_eq!(payload(&many), "*");
    }

    #[test]
    fn a_payload_reads_back_as_what_it_names() {
        let a = uuid::Uuid::from_u128(1);
        assert_eq!(
            read_payload(&payload(&[(a, 3)])),
            vec![Heard::Committed {
                message: MessageId(a),
                last_seq: 3
            }]
        );
        assert_eq!(read_payload("*"), vec![Heard::Missed]);
        assert_eq!(read_payload("nonsense,also:x"), Vec::new());
    }
}
