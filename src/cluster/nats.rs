//! The NATS bus: core subjects, at most once, no state on the server.
//!
//! - `{prefix}.events.{message_id}`: a run's committed events, as JSON
//!   `{"last_seq": n, "events": [...]}` (events left out past
//!   [`super::MAX_NOTICE_EVENTS_BYTES`]). A replica subscribes while it has followers of
//!   the message.
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
use serde::{Deserialize, Serialize};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::seal::{Seal, OVERHEAD};
use super::{Bus, Notice, RejectObserver, RelayObserver, Watch, Watchers, MAX_NOTICE_EVENTS_BYTES};
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

/// A notice on the wire, as read.
#[derive(Deserialize)]
struct Wire {
    last_seq: u64,
    #[serde(default)]
    events: Vec<EventEnvelope>,
}

/// A notice on the wire, as written: the run's events borrowed, not copied.
#[derive(Serialize)]
struct WireRef<'a> {
    last_seq: u64,
    events: &'a [EventEnvelope],
}

/// How far a wake-up's clock may stand from this replica's before it is taken for a replay.
const WAKE_FRESH_MS: i64 = 60_000;

/// The bus over one NATS connection.
pub struct Nats {
    client: async_nats::Client,
    prefix: String,
    watchers: Arc<Watchers>,
    woken: Arc<Notify>,
    observer: Arc<OnceLock<RelayObserver>>,
    rejected: Arc<OnceLock<RejectObserver>>,
    seal: Seal,
    /// The wake-up listener and one forwarder per followed message.
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
            .max_reconnects(None);
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
            watchers: Arc::default(),
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
        Ok(bus)
    }

    fn events_subject(&self, message: MessageId) -> String {
        format!("{}.events.{}", self.prefix, message)
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

    /// Forwards what `subscription` hears to the followers of `message` until `stop`.
    fn forward(
        &self,
        message: MessageId,
        mut subscription: async_nats::Subscriber,
        stop: CancellationToken,
    ) {
        let watchers = Arc::clone(&self.watchers);
        let observer = Arc::clone(&self.observer);
        let (seal, rejected) = (self.seal.clone(), Arc::clone(&self.rejected));
        let subject = self.events_subject(message);
        self.tasks.spawn(async move {
            loop {
                let heard = tokio::select! {
                    () = stop.cancelled() => break,
                    heard = subscription.next() => heard,
                };
                let Some(heard) = heard else { break };
                let Some(wire) = open_notice(&seal, &subject, &heard.payload) else {
                    reject(&rejected);
                    continue;
                };
                if let (Some(observe), Some(last)) = (observer.get(), wire.events.last()) {
                    let lag = (crate::domain::now() - last.created_at)
                        .to_std()
                        .unwrap_or_default();
                    observe(wire.events.len(), lag);
                }
                watchers.notify(
                    message,
                    Notice {
                        last_seq: wire.last_seq,
                        events: wire.events,
                    },
                );
            }
            let _ = subscription.unsubscribe().await;
        });
    }
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
        let mut wire = WireRef {
            last_seq: last.seq,
            events,
        };
        let mut payload = serde_json::to_vec(&wire).unwrap_or_default();
        if payload.len() > MAX_NOTICE_EVENTS_BYTES {
            wire.events = &[];
            payload = serde_json::to_vec(&wire).unwrap_or_default();
        }
        let subject = self.events_subject(message);
        let sealed = self.seal.seal(&subject, &payload);
        if let Err(err) = self.client.publish(subject, sealed.into()).await {
            tracing::debug!(error = %err, "a notice of committed events was dropped");
        }
    }

    async fn watch(&self, message: MessageId, poll: super::Poll) -> Watch {
        let mut first = None;
        let watch = self.watchers.watch(
            message,
            || {
                let stop = self.tasks.stopping().child_token();
                first = Some(stop.clone());
                Some(stop)
            },
            poll,
        );
        if let Some(stop) = first {
            match self.client.subscribe(self.events_subject(message)).await {
                Ok(subscription) => {
                    // Once the server has the subscription, nothing published after it is
                    // missed; a bus that is down costs the follower its polling delay.
                    let _ = tokio::time::timeout(Duration::from_secs(1), self.client.flush()).await;
                    self.forward(message, subscription, stop);
                }
                Err(err) => tracing::debug!(error = %err, "cannot subscribe to a run's notices"),
            }
        }
        watch
    }

    async fn stop(&self, within: Duration) {
        self.watchers.stop_beside(&self.tasks, within).await;
    }

    async fn wake(&self, owner: &str) {
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

/// The notice `payload` carries, if it opens under `seal` for `subject` and reads; nothing
/// larger than a replica of ours publishes is opened at all.
fn open_notice(seal: &Seal, subject: &str, payload: &[u8]) -> Option<Wire> {
    if payload.len() > MAX_NOTICE_EVENTS_BYTES + OVERHEAD {
        return None;
    }
    let plain = seal.open(subject, payload)?;
    serde_json::from_slice::<Wire>(&plain).ok()
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
