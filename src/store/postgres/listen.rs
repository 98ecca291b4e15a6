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

use sqlx::postgres::{PgListener, PgPoolOptions};
use tokio::sync::broadcast;

use super::Postgres;
use crate::domain::{EventEnvelope, MessageId};
use crate::store::contract::Heard;
use crate::store::error::StoreError;

/// The channel of committed events.
pub(super) const EVENTS: &str = "agent_runner_events";

/// The channel of kept commands; the payload names the owner to wake.
const COMMANDS: &str = "agent_runner_commands";

/// The channel of events a run does not store: `message_id:` and the events sealed under
/// the store's key (what anyone who may LISTEN on the database reads is ciphertext).
const FLASHES: &str = "agent_runner_flashes";

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

    /// Tells peers' followers of `message` of unstored events, sealed, when commits
    /// notify; one whose payload would pass PostgreSQL's limit is dropped.
    pub(super) async fn flash(&self, message: MessageId, events: &[EventEnvelope]) {
        if self.heard.is_none() || events.is_empty() {
            return;
        }
        let Ok(plain) = serde_json::to_vec(events) else {
            return;
        };
        let Ok(sealed) = self.sealer.seal(&plain) else {
            return;
        };
        let payload = format!("{}:{sealed}", message.0);
        if payload.len() > MAX_PAYLOAD {
            tracing::debug!("unstored events too large for a notification were not sent to peers");
            return;
        }
        // One step of the pool's wait, not a call's whole wait: a notice late by that much
        // is worth less than the run's pace, and followers read the events once stored.
        let connection = match self.warm.take() {
            Some(warm) => Ok(warm),
            None => self.pool.acquire().await,
        };
        let Ok(mut connection) = connection else {
            tracing::debug!("unstored events were not sent to peers: the pool is busy");
            return;
        };
        let sent = sqlx::query("SELECT pg_notify($1, $2)")
            .bind(FLASHES)
            .bind(payload)
            .execute(&mut *connection)
            .await;
        if let Err(err) = sent {
            tracing::debug!(error = %err, "unstored events were not sent to peers");
        }
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
        let sealer = strong.sealer.clone();
        drop(strong);
        // A connection of its own, outside the pool: calls waiting for the pool never hold
        // up the notices, nor does the listener take one of the calls' connections.
        let own = PgPoolOptions::new()
            .max_connections(1)
            .connect_lazy_with((*pool.connect_options()).clone());
        drop(pool);
        let mut listener = match PgListener::connect_with(&own).await {
            Ok(listener) => listener,
            Err(_) => {
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
        };
        if listener
            .listen_all([EVENTS, COMMANDS, FLASHES])
            .await
            .is_err()
        {
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
                FLASHES => {
                    if let Some(flashed) = read_flash(&sealer, notification.payload()) {
                        let _ = heard.send(flashed);
                    }
                }
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

/// The unstored events a flash notification carries; `None` for one that does not read
/// or open (not sealed under this store's key).
fn read_flash(sealer: &super::sealed::Sealer, payload: &str) -> Option<Heard> {
    let (id, sealed) = payload.split_once(':')?;
    let plain = sealer.open(sealed).ok()?;
    let events: Vec<EventEnvelope> = serde_json::from_slice(&plain).ok()?;
    Some(Heard::Flashed {
        message: MessageId(id.parse().ok()?),
        events: events.into_iter().filter(|event| event.seq == 0).collect(),
    })
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

    /// Unstored events travel sealed: they read back under the store's key, and not
    /// under another's (a notification anyone who may LISTEN can send or read).
    #[test]
    fn a_flash_opens_only_under_its_stores_key() {
        use crate::domain::{ConversationId, RunEvent};
        let key = super::super::sealed::SecretKey::generate();
        let sealer = super::super::sealed::Sealer::new(&key);
        let message = MessageId::new();
        let events = vec![EventEnvelope {
            seq: 0,
            conversation_id: ConversationId::new(),
            message_id: message,
            created_at: crate::domain::now(),
            event: RunEvent::AnswerDelta {
                text: "thinking".into(),
            },
        }];
        let sealed = sealer.seal(&serde_json::to_vec(&events).unwrap()).unwrap();
        let payload = format!("{}:{sealed}", message.0);
        assert!(!payload.contains("thinking"));
        assert_eq!(
            read_flash(&sealer, &payload),
            Some(Heard::Flashed { message, events })
        );
        let other = super::super::sealed::Sealer::new(&super::super::sealed::SecretKey::generate());
        assert_eq!(read_flash(&other, &payload), None);
        assert_eq!(read_flash(&sealer, "nonsense"), None);
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
