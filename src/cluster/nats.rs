//! The NATS bus: core subjects, at most once, no state on the server.
//!
//! - `{prefix}.relay.{replica_id}`: what the replica's runs committed, one message per
//!   commit group ([`super::outbox`]), in the format of [`super::relay`]. A replica
//!   subscribes to every peer's (`{prefix}.relay.*`) while it follows any run of a peer,
//!   and reads only the notices of runs it follows; a run that moves to another replica
//!   (a takeover, a hand-over) is heard on its new owner's subject with nothing to
//!   change. A replica does not hear its own relay (the connection asks for no echo): a
//!   followed run that moves here is handed to its followers here directly.
//! - `{prefix}.commands.{replica_id}`: a command was kept for a run the replica holds.
//!
//! Every payload is sealed ([`super::seal`]) under a key derived from the shared secret
//! key and bound to its subject: other clients of the server read nothing and forge
//! nothing, and what does not open is dropped (and counted) before any read. The
//! connection reconnects on its own; while it is down, notices are dropped and followers
//! read the store every second.

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt as _;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::listening::{Listening, LINGER};
use super::outbox::Outbox;
use super::relay::{self, MAX_RELAY_BYTES};
use super::seal::{Seal, OVERHEAD};
use super::watchers::Hold;
use super::{Bus, Notice, RejectObserver, RelayObserver, Watch, Watchers};
use crate::domain::{EventEnvelope, MessageId};
use crate::tasks::Tasks;

/// How to reach NATS.
#[derive(Clone)]
pub struct Settings {
    /// `nats://[user:password@]host:port` (or `tls://…`); never shown.
    pub url: String,
    /// A `.creds` file (JWT and seed), for servers with decentralised auth.
    pub credentials_file: Option<PathBuf>,
    /// A CA (PEM) to trust for the server's TLS certificate besides the system's.
    pub ca_file: Option<PathBuf>,
    /// Subjects start with it, so deployments (or tests) share a server apart.
    pub prefix: String,
    /// This replica's id: the subject of its command wake-ups.
    pub replica: String,
}

/// Why the bus could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum NatsError {
    /// A file of the settings could not be read.
    #[error("cannot read the NATS credentials file: {0}")]
    Credentials(String),
    /// The server could not be reached.
    #[error("cannot reach NATS at {place}: {reason}")]
    Connect {
        /// Host and port, never credentials.
        place: String,
        /// Why.
        reason: String,
    },
}

/// Where a NATS URL points, as logs may show it: host and port, never credentials.
pub fn describe(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let rest = rest.rsplit_once('@').map_or(rest, |(_, rest)| rest);
    rest.split(['/', '?', ','])
        .next()
        .unwrap_or(rest)
        .to_owned()
}

/// How far a wake-up's clock may stand from this replica's before it is taken for a replay.
const WAKE_FRESH_MS: i64 = 60_000;

/// The bus over one NATS connection.
pub struct Nats {
    client: async_nats::Client,
    prefix: String,
    /// This replica's id, for wake-ups of its own.
    replica: String,
    watchers: Arc<Watchers>,
    /// Notices this replica's runs announced, for its relay to publish.
    outbox: Arc<Outbox>,
    /// The subscription to peers' relays, while anything is followed here and a while after.
    listening: Arc<Listening>,
    woken: Arc<Notify>,
    observer: Arc<OnceLock<RelayObserver>>,
    rejected: Arc<OnceLock<RejectObserver>>,
    seal: Seal,
    /// The wake-up listener, the relay's publisher, the reaper of an idle subscription and,
    /// while listening, its forwarder.
    tasks: Tasks,
}

impl Nats {
    /// Connects (waiting up to five seconds for a first connection, then going on and
    /// retrying in the background, so a replica starts while NATS is away) and listens for
    /// this replica's command wake-ups; payloads are sealed under `key`, which every
    /// replica of the deployment derives alike from the shared secret key.
    pub async fn connect(settings: &Settings, key: &[u8; 32]) -> Result<Arc<Self>, NatsError> {
        let place = describe(&settings.url);
        let mut options = async_nats::ConnectOptions::new()
            .name(format!("agent-runner {}", settings.replica))
            .connection_timeout(Duration::from_secs(5))
            .retry_on_initial_connect()
            .max_reconnects(None)
            .no_echo();
        if let Some(path) = &settings.credentials_file {
            options = options
                .credentials_file(path)
                .await
                .map_err(|err| NatsError::Credentials(err.to_string()))?;
        }
        if let Some(ca) = &settings.ca_file {
            options = options.add_root_certificates(ca.clone());
        }
        let client = options
            .connect(settings.url.as_str())
            .await
            .map_err(|err| NatsError::Connect {
                place: place.clone(),
                reason: err.kind().to_string(),
            })?;
        let bus = Arc::new(Self {
            client,
            prefix: settings.prefix.clone(),
            replica: settings.replica.clone(),
            watchers: Arc::default(),
            outbox: Arc::default(),
            listening: Arc::default(),
            woken: Arc::default(),
            observer: Arc::default(),
            rejected: Arc::default(),
            seal: Seal::new(key),
            tasks: Tasks::default(),
        });
        let commands = format!("{}.commands.{}", bus.prefix, settings.replica);
        let subscription = bus.client.subscribe(commands.clone()).await;
        match subscription {
            Ok(subscription) => bus.listen_for_wakes(commands, subscription),
            Err(err) => {
                tracing::warn!(nats = %place, error = %err, "cannot listen for commands on NATS; commands are looked for every second")
            }
        }
        bus.publish_relays();
        bus.let_go_of_idle_relays();
        Ok(bus)
    }

    /// Where replica `replica`'s runs are relayed.
    fn relay_subject(&self, replica: &str) -> String {
        format!("{}.relay.{}", self.prefix, replica)
    }

    /// Publishes the outbox, one group at a time, until the bus stops.
    fn publish_relays(&self) {
        let (client, outbox, seal) = (
            self.client.clone(),
            Arc::clone(&self.outbox),
            self.seal.clone(),
        );
        let subject = self.relay_subject(&self.replica);
        let stop = self.tasks.stopping();
        self.tasks.spawn(async move {
            loop {
                let group = tokio::select! {
                    () = stop.cancelled() => return,
                    group = outbox.next_group() => group,
                };
                for payload in relay::pack(group) {
                    let sealed = seal.seal(&subject, &payload);
                    if let Err(err) = client.publish(subject.clone(), sealed.into()).await {
                        tracing::debug!(error = %err, "a relay of committed events was dropped");
                    }
                }
            }
        });
    }

    /// Lets go of the subscription to peers' relays once nothing has been followed here
    /// for [`LINGER`], looking twice as often.
    fn let_go_of_idle_relays(&self) {
        let (listening, stop) = (Arc::clone(&self.listening), self.tasks.stopping());
        self.tasks.spawn(async move {
            loop {
                tokio::select! {
                    () = stop.cancelled() => return,
                    () = tokio::time::sleep(LINGER / 2) => {}
                }
                listening.let_go_if_idle(LINGER);
            }
        });
    }

    /// Subscribes to every peer's relay and forwards what is heard; returns what stops it,
    /// once the server has the subscription (`None`: it could not subscribe).
    async fn hear_relays(&self) -> Option<CancellationToken> {
        let peers = format!("{}.relay.*", self.prefix);
        match self.client.subscribe(peers).await {
            Ok(subscription) => {
                // Once the server has the subscription, nothing published after it is
                // missed; a bus that is down costs followers their polling delay.
                let _ = tokio::time::timeout(Duration::from_secs(1), self.client.flush()).await;
                let stop = self.tasks.stopping().child_token();
                self.forward(subscription, stop.clone());
                Some(stop)
            }
            Err(err) => {
                tracing::debug!(error = %err, "cannot subscribe to peers' relays");
                None
            }
        }
    }

    /// Wakes this replica's command loop for each wake-up that opens and is fresh; others
    /// are dropped and counted (a forged or replayed one costs nothing).
    fn listen_for_wakes(&self, subject: String, mut commands: async_nats::Subscriber) {
        let (woken, stop) = (Arc::clone(&self.woken), self.tasks.stopping());
        let (seal, rejected) = (self.seal.clone(), Arc::clone(&self.rejected));
        self.tasks.spawn(async move {
            loop {
                let heard = tokio::select! {
                    () = stop.cancelled() => return,
                    next = commands.next() => match next {
                        Some(heard) => heard,
                        None => return,
                    },
                };
                if is_fresh_wake(seal.open(&subject, &heard.payload).as_deref()) {
                    woken.notify_one();
                } else {
                    reject(&rejected);
                }
            }
        });
    }

    /// Hands what `subscription` hears to the followers here of each notice's message,
    /// until `stop`.
    fn forward(&self, mut subscription: async_nats::Subscriber, stop: CancellationToken) {
        let watchers = Arc::clone(&self.watchers);
        let observer = Arc::clone(&self.observer);
        let (seal, rejected) = (self.seal.clone(), Arc::clone(&self.rejected));
        self.tasks.spawn(async move {
            loop {
                let heard = tokio::select! {
                    () = stop.cancelled() => break,
                    heard = subscription.next() => heard,
                };
                let Some(heard) = heard else { break };
                let Some(plain) = open_relay(&seal, heard.subject.as_str(), &heard.payload) else {
                    reject(&rejected);
                    continue;
                };
                let Some(notices) = relay::unpack(&plain) else {
                    reject(&rejected);
                    continue;
                };
                for notice in notices {
                    if watchers.follows(notice.message) {
                        hand_on(&watchers, &observer, &notice);
                    }
                }
            }
            let _ = subscription.unsubscribe().await;
        });
    }
}

/// Hands `notice`, heard for a message followed here, to its followers; events that do
/// not read are left for them to read from the store.
fn hand_on(watchers: &Watchers, observer: &OnceLock<RelayObserver>, notice: &relay::Heard<'_>) {
    let events = notice.events().unwrap_or_default();
    if let (Some(observe), Some(last)) = (observer.get(), events.last()) {
        let lag = (crate::domain::now() - last.created_at)
            .to_std()
            .unwrap_or_default();
        observe(events.len(), lag);
    }
    watchers.notify(
        notice.message,
        Notice {
            last_seq: notice.last_seq,
            events,
        },
    );
}

impl Drop for Nats {
    fn drop(&mut self) {
        self.tasks.stopping().cancel();
    }
}

#[async_trait]
impl Bus for Nats {
    async fn announce(&self, message: MessageId, events: &[EventEnvelope]) {
        let Some(last) = events.last() else { return };
        if self.watchers.follows(message) {
            // A run followed from here that moved here: no replica hears its own relay.
            let notice = Notice {
                last_seq: last.seq,
                events: events.to_vec(),
            };
            self.watchers.notify(message, notice);
        }
        let Some(notice) = relay::encode(message, events) else {
            return;
        };
        if !self.outbox.push(notice) {
            tracing::debug!("a notice of committed events was dropped: the relay is behind");
        }
    }

    async fn watch(&self, message: MessageId, poll: super::Poll) -> Watch {
        let lease = self.listening.lease(|| self.hear_relays()).await;
        self.watchers
            .watch(message, move || Some(Box::new(lease) as Hold), poll)
    }

    async fn stop(&self, within: Duration) {
        self.watchers.stop_beside(&self.tasks, within).await;
    }

    async fn wake(&self, owner: &str) {
        if owner == self.replica {
            // Taken over by this replica since it was found; no replica hears itself.
            self.woken.notify_one();
            return;
        }
        let subject = format!("{}.commands.{}", self.prefix, owner);
        let now = crate::domain::now().timestamp_millis().to_be_bytes();
        let sealed = self.seal.seal(&subject, &now);
        if let Err(err) = self.client.publish(subject, sealed.into()).await {
            tracing::debug!(error = %err, "a command wake-up was dropped");
        }
    }

    fn woken(&self) -> Arc<Notify> {
        Arc::clone(&self.woken)
    }

    fn observe_relays(&self, observe: RelayObserver) {
        let _ = self.observer.set(observe);
    }

    fn observe_rejections(&self, observe: RejectObserver) {
        let _ = self.rejected.set(observe);
    }
}

/// What a relay `payload` carries, if it opens under `seal` for `subject`; nothing larger
/// than a replica of ours publishes is opened at all.
fn open_relay(seal: &Seal, subject: &str, payload: &[u8]) -> Option<Vec<u8>> {
    if payload.len() > MAX_RELAY_BYTES + OVERHEAD {
        return None;
    }
    seal.open(subject, payload)
}

/// Whether an opened wake-up carries a clock near this replica's (a replay of an old one
/// does not).
fn is_fresh_wake(opened: Option<&[u8]>) -> bool {
    let Some(millis) = opened.and_then(|bytes| <[u8; 8]>::try_from(bytes).ok()) else {
        return false;
    };
    let sent = i64::from_be_bytes(millis);
    (crate::domain::now().timestamp_millis() - sent).abs() <= WAKE_FRESH_MS
}

/// Counts a payload that did not open (forged, replayed, of another deployment or of a
/// replica of an earlier release).
fn reject(rejected: &OnceLock<RejectObserver>) {
    tracing::debug!("a payload on the bus did not open with this deployment's key; dropped");
    if let Some(observe) = rejected.get() {
        observe();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_is_shown_without_its_credentials() {
        assert_eq!(
            describe("nats://app:s3cret@bus.internal:4222"),
            "bus.internal:4222"
        );
        assert_eq!(describe("tls://bus:4443"), "bus:4443");
        assert_eq!(describe("127.0.0.1:4222"), "127.0.0.1:4222");
    }
}
