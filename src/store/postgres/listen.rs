//! The bus without NATS: the database's own notifications. Each commit with events sends
//! at most one `NOTIFY` naming `message_id:last_seq` for each run it wrote (`*` when they
//! do not fit), and a kept command notifies its owner; each replica listens on one
//! connection. A notification carries no events, so a follower reads them from the
//! store; and PostgreSQL orders notifying commits one at a time, which is what this
//! costs (see docs/operations.md, Scale out).

use std::fmt::Write as _;
use std::sync::{Arc, Weak};
use std::time::Duration;

use async_trait::async_trait;
use sqlx::postgres::PgListener;
use tokio::sync::Notify;

use super::Postgres;
use crate::cluster::{Bus, Notice, Watch, Watchers};
use crate::domain::{EventEnvelope, MessageId};
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

/// The bus over the database's notifications.
pub struct Notifications {
    watchers: Arc<Watchers>,
    woken: Arc<Notify>,
}

#[async_trait]
impl Bus for Notifications {
    /// The commit already notified.
    async fn announce(&self, _message: MessageId, _events: &[EventEnvelope]) {}

    async fn watch(&self, message: MessageId, poll: crate::cluster::Poll) -> Watch {
        // One connection listens for every run: nothing to subscribe per message.
        self.watchers.watch(message, || None, poll)
    }

    /// The command's commit already notified.
    async fn wake(&self, _owner: &str) {}

    fn woken(&self) -> Arc<Notify> {
        Arc::clone(&self.woken)
    }
}

impl Postgres {
    /// Notifies the owner of a run that a command was kept for it, with the command's
    /// commit.
    pub(super) async fn notify_owner(
        &self,
        tx: &mut sqlx::Transaction<'static, sqlx::Postgres>,
        owner: &str,
    ) -> Result<(), StoreError> {
        if self.notifications.get().is_none() {
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
        self.notifications.get()?;
        let last_seqs = last_seqs();
        (!last_seqs.is_empty()).then(|| payload(&last_seqs))
    }

    /// Starts listening, and the bus that hands on what is heard.
    pub(super) fn listen(self: &Arc<Self>) -> Arc<Notifications> {
        let bus = Arc::new(Notifications {
            watchers: Arc::default(),
            woken: Arc::default(),
        });
        tokio::spawn(listen(
            Arc::downgrade(self),
            Arc::clone(&bus.watchers),
            Arc::clone(&bus.woken),
        ));
        bus
    }
}

/// Listens until the backend is dropped, connecting again after a failure (and then
/// telling every follower to read the store, for what was missed meanwhile).
async fn listen(backend: Weak<Postgres>, watchers: Arc<Watchers>, woken: Arc<Notify>) {
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
        watchers.notify_all();
        woken.notify_one();
        loop {
            let heard = tokio::select! {
                heard = listener.try_recv() => heard,
                () = tokio::time::sleep(Duration::from_secs(5)) => {
                    if backend.strong_count() == 0 {
                        return;
                    }
                    continue;
                }
            };
            let Ok(Some(notification)) = heard else {
                // Lost: connect again, and have every follower read what it missed.
                break;
            };
            match notification.channel() {
                COMMANDS if notification.payload() == me => woken.notify_one(),
                EVENTS => dispatch(&watchers, notification.payload()),
                _ => {}
            }
        }
    }
}

/// Tells the followers of each run a notification names to read the store.
fn dispatch(watchers: &Watchers, payload: &str) {
    if payload == "*" {
        watchers.notify_all();
        return;
    }
    for entry in payload.split(',') {
        let Some((id, seq)) = entry.split_once(':') else {
            continue;
        };
        let (Ok(id), Ok(last_seq)) = (id.parse::<uuid::Uuid>(), seq.parse::<u64>()) else {
            continue;
        };
        watchers.notify(
            MessageId(id),
            Notice {
                last_seq,
                events: Vec::new(),
            },
        );
    }
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
}
