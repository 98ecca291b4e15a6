//! The NATS relay between replicas, driven through the bus itself against a real NATS
//! server: what one commit of several runs announces goes to a peer as one message, and a
//! followed run that moves to another replica (a third, or its follower's own) is heard
//! from there at once.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_runner::cluster::nats::{Nats, Settings};
use agent_runner::cluster::{Bus as _, Notice, Source, Watch};
use agent_runner::domain::{ConversationId, EventEnvelope, MessageId, RunEvent};
use async_trait::async_trait;
use futures::StreamExt as _;

use crate::support::replicas::{nats_bus, Bus, TURN};

/// A message's committed events, as the store would give them.
#[derive(Default)]
struct Committed(Mutex<Vec<EventEnvelope>>);

impl Committed {
    fn commit(&self, message: MessageId, text: &str) -> EventEnvelope {
        let mut committed = self.0.lock().unwrap();
        let event = EventEnvelope {
            seq: committed.len() as u64 + 1,
            conversation_id: ConversationId::new(),
            message_id: message,
            created_at: agent_runner::domain::now(),
            event: RunEvent::AnswerDelta {
                text: text.to_owned(),
            },
        };
        committed.push(event.clone());
        event
    }
}

#[async_trait]
impl Source for Committed {
    async fn last_seq(&self) -> Option<u64> {
        Some(self.0.lock().unwrap().len() as u64)
    }

    async fn events_after(&self, seq: u64) -> Option<Vec<EventEnvelope>> {
        let committed = self.0.lock().unwrap();
        Some(committed.iter().filter(|e| e.seq > seq).cloned().collect())
    }
}

/// Replica `replica`'s bus under the test's prefix.
async fn bus(url: &str, prefix: &str, replica: &str) -> Arc<Nats> {
    let settings = Settings {
        url: url.to_owned(),
        credentials_file: None,
        ca_file: None,
        prefix: prefix.to_owned(),
        replica: replica.to_owned(),
    };
    Nats::connect(&settings, &[9; 32]).await.unwrap()
}

/// The next notice `watch` hears within `within`.
async fn heard_within(watch: &mut Watch, within: Duration) -> Option<Arc<Notice>> {
    match tokio::time::timeout(within, watch.next()).await {
        Ok(Some(Ok(notice))) => Some(notice),
        _ => None,
    }
}

/// Five runs that one commit woke announce their events one after another: their
/// followers on a peer each get their own run's events, and the wire carried one message.
#[tokio::test]
async fn a_commit_groups_notices_reach_a_peer_in_one_message() {
    let _turn = TURN.lock().await;
    let Some(Bus::Nats { url, prefix }) = nats_bus().await else {
        return;
    };
    let owner = bus(&url, &prefix, "a").await;
    let peer = bus(&url, &prefix, "b").await;
    let listener = async_nats::connect(url.as_str()).await.unwrap();
    let mut wire = listener
        .subscribe(format!("{prefix}.relay.>"))
        .await
        .unwrap();
    listener.flush().await.unwrap();

    let runs: Vec<(MessageId, Arc<Committed>)> =
        (0..5).map(|_| (MessageId::new(), Arc::default())).collect();
    let mut watches = Vec::new();
    for (message, committed) in &runs {
        watches.push(peer.watch(*message, committed.clone()).await);
    }
    // The subscription is written to the server when `watch` returns; the server takes it
    // a moment later, and the owner's relay goes through another connection.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut announced = Vec::new();
    for (n, (message, committed)) in runs.iter().enumerate() {
        let event = committed.commit(*message, &format!("run {n}"));
        owner.announce(*message, std::slice::from_ref(&event)).await;
        announced.push(event);
    }

    for (watch, event) in watches.iter_mut().zip(&announced) {
        let notice = heard_within(watch, Duration::from_millis(800))
            .await
            .expect("each follower hears its run before any poll of the store");
        assert_eq!((notice.last_seq, &notice.events), (1, &vec![event.clone()]));
    }
    let first = tokio::time::timeout(Duration::from_secs(2), wire.next()).await;
    assert!(matches!(first, Ok(Some(_))), "the relay went out on NATS");
    let more = tokio::time::timeout(Duration::from_millis(300), wire.next()).await;
    assert!(more.is_err(), "one message carried the five notices");
}

/// A run held by replica a and followed on b, whose first events b has heard from a.
struct FollowedOnB {
    a: Arc<Nats>,
    b: Arc<Nats>,
    message: MessageId,
    committed: Arc<Committed>,
    watch: Watch,
}

impl FollowedOnB {
    async fn begin(url: &str, prefix: &str) -> Self {
        let (a, b) = (bus(url, prefix, "a").await, bus(url, prefix, "b").await);
        let message = MessageId::new();
        let committed = Arc::new(Committed::default());
        let watch = b.watch(message, committed.clone()).await;
        let mut followed = Self {
            a,
            b,
            message,
            committed,
            watch,
        };
        let a = Arc::clone(&followed.a);
        let heard = followed
            .announce_on(&a, "begun on a", Duration::from_millis(800))
            .await;
        assert!(heard, "b hears the run from its owner a");
        followed
    }

    /// Whether an event `holder` commits and announces reaches the follower on b within
    /// `within`, and as itself.
    async fn announce_on(&mut self, holder: &Nats, text: &str, within: Duration) -> bool {
        let event = self.committed.commit(self.message, text);
        holder
            .announce(self.message, std::slice::from_ref(&event))
            .await;
        heard_within(&mut self.watch, within)
            .await
            .is_some_and(|notice| notice.events == vec![event])
    }
}

/// A run followed on replica b from its owner a moves to b (a takeover): what b's run then
/// announces reaches its followers on b at once, though no replica hears its own relay; a
/// poll of the store would take a second.
#[tokio::test]
async fn a_run_that_moves_to_its_followers_replica_is_heard_there_at_once() {
    let _turn = TURN.lock().await;
    let Some(Bus::Nats { url, prefix }) = nats_bus().await else {
        return;
    };
    let mut followed = FollowedOnB::begin(&url, &prefix).await;
    let b = Arc::clone(&followed.b);
    let heard = followed
        .announce_on(&b, "taken over by b", Duration::from_millis(500))
        .await;
    assert!(heard, "heard at once on b");
}

/// A run held by a, followed on b, is taken over by c: what c then announces reaches b at
/// once, with nothing to resubscribe (a poll of the store would take a second).
#[tokio::test]
async fn a_run_that_moves_to_a_third_replica_is_heard_from_it_at_once() {
    let _turn = TURN.lock().await;
    let Some(Bus::Nats { url, prefix }) = nats_bus().await else {
        return;
    };
    let mut followed = FollowedOnB::begin(&url, &prefix).await;
    let c = bus(&url, &prefix, "c").await;
    let heard = followed
        .announce_on(&c, "taken over by c", Duration::from_millis(500))
        .await;
    assert!(heard, "heard from c at once");
}
