//! The followers of each message on this replica: a bus listens for the message from its
//! first follower's arrival until the last one leaves. They share the message's reads of
//! the store as well: once a second its last committed `seq` is read, and when that moved
//! past what the followers were handed, or a notice came without its events (a burst too
//! large to carry, or the database's notifications, which carry none) or after a gap, the
//! missing events are read once and handed to every follower. A lost notice costs a
//! second, a quiet followed run one read a second, and a commit at most one read, whatever
//! the number of followers.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use tokio::sync::{broadcast, Notify};
use tokio_util::sync::CancellationToken;

use super::{Notice, Notices, Poll};
use crate::domain::{EventEnvelope, MessageId};
use crate::tasks::Tasks;

/// What keeps a bus listening for a followed message (a subscription, or a share of one).
pub type Hold = Box<dyn Send + Sync>;

/// Notices a follower may fall behind by before it reads the store instead.
const BACKLOG: usize = 64;

/// How often a followed message's last committed `seq` is read, for all its followers here.
const POLL_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// Followed messages and where their notices go.
#[derive(Default)]
pub struct Watchers {
    followed: Mutex<HashMap<MessageId, Followed>>,
    /// The fillers, one per followed message.
    tasks: Tasks,
}

struct Followed {
    notices: broadcast::Sender<Arc<Notice>>,
    followers: usize,
    /// The last `seq` handed to the followers in a notice with its events; `None` until the
    /// first such notice or the first poll (its followers read what came before themselves).
    handed: Option<u64>,
    /// When a notice of the message last came: the store is polled only after a second
    /// without one.
    heard: tokio::time::Instant,
    /// The last `seq` known committed, when more than `handed`: the filler reads up to it.
    wanted: u64,
    /// Wakes the message's filler.
    wake: Arc<Notify>,
    /// What keeps the bus listening for the message, let go once no follower is left.
    _hold: Option<Hold>,
    /// Stops the message's filler once no follower is left.
    stop_filling: CancellationToken,
}

impl Watchers {
    /// A watch of `message`. For the message's first follower, `hold` is called for what
    /// keeps the bus listening for it (dropped when the last follower leaves), and the
    /// message's filler starts reading through `poll`.
    pub fn watch(
        self: &Arc<Self>,
        message: MessageId,
        hold: impl FnOnce() -> Option<Hold>,
        poll: Poll,
    ) -> Watch {
        let mut followed = self.lock();
        let entry = followed.entry(message).or_insert_with(|| Followed {
            notices: broadcast::channel(BACKLOG).0,
            followers: 0,
            handed: None,
            heard: tokio::time::Instant::now(),
            wanted: 0,
            wake: Arc::new(Notify::new()),
            _hold: None,
            stop_filling: self.tasks.stopping().child_token(),
        });
        entry.followers += 1;
        let notices = entry.notices.subscribe();
        if entry.followers == 1 {
            entry._hold = hold();
            let filler = Filler {
                watchers: Arc::downgrade(self),
                message,
                poll,
                wake: Arc::clone(&entry.wake),
            };
            self.tasks.spawn(filler.run(entry.stop_filling.clone()));
        }
        Watch {
            notices: Some(notices),
            leave: Some((Arc::downgrade(self), message)),
        }
    }

    /// Hands `notice` to the followers of `message` when it carries the events that follow
    /// what they were handed; otherwise (no events, a gap) has them read once for all of
    /// them. A notice of what they were handed already is dropped. Returns whether the
    /// message has followers here.
    pub fn notify(&self, message: MessageId, notice: Notice) -> bool {
        let mut followed = self.lock();
        let Some(entry) = followed.get_mut(&message) else {
            return false;
        };
        entry.heard = tokio::time::Instant::now();
        if notice.last_seq == 0 {
            // Unstored events: handed to whoever follows now, outside the count.
            if !notice.events.is_empty() {
                let _ = entry.notices.send(Arc::new(notice));
            }
            return true;
        }
        let Some(handed) = entry.handed else {
            // Nothing handed yet: the followers read what this notice does not carry
            // themselves, once, and past it every one of them holds what it announces:
            // handing on starts there.
            entry.handed = Some(notice.last_seq);
            let _ = entry.notices.send(Arc::new(notice));
            return true;
        };
        if notice.last_seq <= handed {
            return true;
        }
        if notice
            .events
            .first()
            .is_some_and(|first| first.seq == handed + 1)
        {
            entry.handed = Some(notice.last_seq);
            let _ = entry.notices.send(Arc::new(notice));
        } else {
            entry.wanted = entry.wanted.max(notice.last_seq);
            entry.wake.notify_one();
        }
        true
    }

    /// Whether `message` has followers here.
    pub fn follows(&self, message: MessageId) -> bool {
        self.lock().contains_key(&message)
    }

    /// Has every followed message read once (a notice named more messages than it could
    /// carry).
    pub fn notify_all(&self) {
        for entry in self.lock().values_mut() {
            match entry.handed {
                Some(handed) => {
                    entry.wanted = entry.wanted.max(handed + 1);
                    entry.wake.notify_one();
                }
                None => {
                    let _ = entry.notices.send(Arc::new(Notice {
                        last_seq: u64::MAX,
                        events: Vec::new(),
                    }));
                }
            }
        }
    }

    /// When the store should next be polled for `message`: a second after its last notice.
    fn next_poll(&self, message: MessageId) -> Option<tokio::time::Instant> {
        self.lock()
            .get(&message)
            .map(|entry| entry.heard + POLL_EVERY)
    }

    /// Records that `message`'s last committed `seq` is `seq`: the first reading is where
    /// handing on starts; a later one past what was handed is read for the followers.
    /// Returns whether there is something to read.
    fn saw(&self, message: MessageId, seq: u64) -> bool {
        let mut followed = self.lock();
        let Some(entry) = followed.get_mut(&message) else {
            return false;
        };
        match entry.handed {
            None => {
                entry.handed = Some(seq);
                entry.wanted > seq
            }
            Some(handed) => {
                entry.wanted = entry.wanted.max(seq);
                entry.wanted > handed
            }
        }
    }

    /// What the filler of `message` should read, if anything: after which `seq`, up to
    /// which. Taken, so a notice that comes during the read asks for another.
    fn take_wanted(&self, message: MessageId) -> Option<(u64, u64)> {
        let mut followed = self.lock();
        let entry = followed.get_mut(&message)?;
        let handed = entry.handed?;
        let wanted = std::mem::take(&mut entry.wanted);
        (wanted > handed).then_some((handed, wanted))
    }

    /// Hands `events`, read for the followers of `message`, on to them, less any that a
    /// notice handed meanwhile; keeps `wanted` wanted when the read came short of it (the
    /// next poll reads again).
    fn hand_read(&self, message: MessageId, wanted: u64, events: Vec<EventEnvelope>) {
        let mut followed = self.lock();
        let Some(entry) = followed.get_mut(&message) else {
            return;
        };
        let Some(handed) = entry.handed else {
            return;
        };
        let events: Vec<_> = events.into_iter().filter(|e| e.seq > handed).collect();
        if let (Some(first), Some(last)) = (events.first(), events.last()) {
            if first.seq == handed + 1 {
                let last = last.seq;
                entry.handed = Some(last);
                let _ = entry.notices.send(Arc::new(Notice {
                    last_seq: last,
                    events,
                }));
            }
        }
        if entry.handed.is_some_and(|handed| handed < wanted) {
            entry.wanted = entry.wanted.max(wanted);
        }
    }

    /// Forgets a follower; returns whether it was the message's last.
    fn leave(&self, message: MessageId) -> bool {
        let mut followed = self.lock();
        let Some(entry) = followed.get_mut(&message) else {
            return false;
        };
        entry.followers -= 1;
        if entry.followers > 0 {
            return false;
        }
        if let Some(entry) = followed.remove(&message) {
            entry.stop_filling.cancel();
        }
        true
    }

    /// Stops every filler, and the bus's `own` tasks beside them, waiting at most
    /// `within` for both.
    pub async fn stop_beside(&self, own: &Tasks, within: Duration) {
        let (own, fillers) = tokio::join!(own.stop(within), self.tasks.stop(within));
        if !(own && fillers) {
            tracing::warn!(?within, "the bus's own tasks did not stop in time");
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<MessageId, Followed>> {
        self.followed.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Reads a followed message for all its followers here: its last `seq` once a second, its
/// events when they were not handed on.
struct Filler {
    watchers: Weak<Watchers>,
    message: MessageId,
    poll: Poll,
    wake: Arc<Notify>,
}

impl Filler {
    /// Polls and fills until `stop` (the message's last follower left). The store is polled
    /// a second after the message's last notice (or the last poll): while notices come, a
    /// lost one shows as a gap in the next, and only silence needs a read to notice.
    async fn run(self, stop: CancellationToken) {
        let mut next_poll = tokio::time::Instant::now() + POLL_EVERY;
        loop {
            let polled = tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep_until(next_poll) => true,
                () = self.wake.notified() => false,
            };
            let Some(watchers) = self.watchers.upgrade() else {
                return;
            };
            if polled {
                let due = watchers.next_poll(self.message).unwrap_or(next_poll);
                let now = tokio::time::Instant::now();
                next_poll = due.max(now + POLL_EVERY);
                if due > now {
                    next_poll = due;
                    continue;
                }
                let Some(seq) = self.poll.last_seq().await else {
                    continue;
                };
                if !watchers.saw(self.message, seq) {
                    continue;
                }
            }
            self.fill(&watchers).await;
        }
    }

    /// Reads what the followers were not handed, once, and hands it to all of them.
    async fn fill(&self, watchers: &Watchers) {
        let Some((after, wanted)) = watchers.take_wanted(self.message) else {
            return;
        };
        // A read that fails is made again at the next poll, which finds the `seq` moved.
        let events = self.poll.events_after(after).await.unwrap_or_default();
        watchers.hand_read(self.message, wanted, events);
    }
}

/// One follower's notices of one message; leaves when dropped.
pub struct Watch {
    notices: Option<Notices>,
    leave: Option<(Weak<Watchers>, MessageId)>,
}

impl Watch {
    /// A watch that never hears anything (nobody else writes the message).
    pub fn never() -> Self {
        Self {
            notices: None,
            leave: None,
        }
    }

    /// Whether the message's store is polled for this watch's followers (a shared poll
    /// sends a notice when it moved): then a follower need not poll on its own but
    /// rarely.
    pub fn is_polled(&self) -> bool {
        self.leave.is_some()
    }

    /// The next notice; `None` when no notice will come (the follower reads the store on
    /// its own clock).
    ///
    /// # Cancel safety
    /// Cancel safe, as a broadcast receiver is.
    pub async fn next(&mut self) -> Option<Result<Arc<Notice>, broadcast::error::RecvError>> {
        match self.notices.as_mut() {
            Some(notices) => Some(notices.recv().await),
            None => std::future::pending().await,
        }
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        if let Some((watchers, message)) = self.leave.take() {
            if let Some(watchers) = watchers.upgrade() {
                watchers.leave(message);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use async_trait::async_trait;

    use super::*;
    use crate::cluster::Source;
    use crate::domain::{ConversationId, RunEvent};

    /// A message whose committed events are `committed`, counting the reads of them.
    #[derive(Default)]
    struct Scripted {
        committed: Mutex<Vec<EventEnvelope>>,
        reads: AtomicUsize,
        polls: AtomicUsize,
    }

    impl Scripted {
        fn commit(&self, message: MessageId, seq: u64) -> EventEnvelope {
            let event = EventEnvelope {
                seq,
                conversation_id: ConversationId::new(),
                message_id: message,
                created_at: crate::domain::now(),
                event: RunEvent::AnswerDelta {
                    text: format!("piece {seq}"),
                },
            };
            self.committed.lock().unwrap().push(event.clone());
            event
        }
    }

    #[async_trait]
    impl Source for Scripted {
        async fn last_seq(&self) -> Option<u64> {
            self.polls.fetch_add(1, Ordering::SeqCst);
            Some(self.committed.lock().unwrap().last().map_or(0, |e| e.seq))
        }

        async fn events_after(&self, seq: u64) -> Option<Vec<EventEnvelope>> {
            self.reads.fetch_add(1, Ordering::SeqCst);
            let committed = self.committed.lock().unwrap();
            Some(committed.iter().filter(|e| e.seq > seq).cloned().collect())
        }
    }

    /// Watches of one message.
    fn followed(
        source: &Arc<Scripted>,
        message: MessageId,
        count: usize,
    ) -> (Arc<Watchers>, Vec<Watch>) {
        let watchers = Arc::new(Watchers::default());
        let poll: Poll = source.clone();
        let watches: Vec<Watch> = (0..count)
            .map(|_| watchers.watch(message, || None, Arc::clone(&poll)))
            .collect();
        (watchers, watches)
    }

    /// Commits `seq` and announces it with its event.
    fn carried(source: &Scripted, watchers: &Watchers, message: MessageId, seq: u64) -> Notice {
        let notice = Notice {
            last_seq: seq,
            events: vec![source.commit(message, seq)],
        };
        watchers.notify(message, notice.clone());
        notice
    }

    fn seqs(notice: &Notice) -> Vec<u64> {
        notice.events.iter().map(|e| e.seq).collect()
    }

    async fn next_notice(watch: &mut Watch) -> Arc<Notice> {
        let next = tokio::time::timeout(Duration::from_secs(3), watch.next()).await;
        next.expect("a notice comes").unwrap().unwrap()
    }

    #[tokio::test]
    async fn a_notice_without_its_events_is_read_once_for_every_follower() {
        let source = Arc::new(Scripted::default());
        let message = MessageId::new();
        let (registry, mut watches) = followed(&source, message, 10);
        carried(&source, &registry, message, 1);
        source.commit(message, 2);
        source.commit(message, 3);
        let eventless = Notice {
            last_seq: 3,
            events: Vec::new(),
        };
        registry.notify(message, eventless);
        for watch in &mut watches {
            assert_eq!(next_notice(watch).await.last_seq, 1);
            let notice = next_notice(watch).await;
            assert_eq!((notice.last_seq, seqs(&notice)), (3, vec![2, 3]));
        }
        assert_eq!(source.reads.load(Ordering::SeqCst), 1, "one read for ten");
    }

    #[tokio::test(start_paused = true)]
    async fn carried_events_are_handed_on_and_replays_dropped_without_a_read() {
        let source = Arc::new(Scripted::default());
        let message = MessageId::new();
        let (registry, mut watches) = followed(&source, message, 3);
        let first = carried(&source, &registry, message, 1);
        registry.notify(message, first.clone());
        let eventless = Notice {
            last_seq: 1,
            events: Vec::new(),
        };
        registry.notify(message, eventless);
        for watch in &mut watches {
            assert_eq!(*next_notice(watch).await, first);
        }
        for watch in &mut watches {
            let more = tokio::time::timeout(Duration::from_millis(100), watch.next()).await;
            assert!(more.is_err(), "the replays reach nobody");
        }
        assert_eq!(source.reads.load(Ordering::SeqCst), 0);
    }

    #[tokio::test]
    async fn a_gap_is_read_once_from_what_was_handed() {
        let source = Arc::new(Scripted::default());
        let message = MessageId::new();
        let (registry, mut watches) = followed(&source, message, 4);
        carried(&source, &registry, message, 1);
        // The notice of seq 2 is lost.
        source.commit(message, 2);
        carried(&source, &registry, message, 3);
        for watch in &mut watches {
            assert_eq!(next_notice(watch).await.last_seq, 1);
            assert_eq!(seqs(&*next_notice(watch).await), vec![2, 3]);
        }
        assert_eq!(source.reads.load(Ordering::SeqCst), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn the_store_is_polled_only_after_a_second_without_notices() {
        let source = Arc::new(Scripted::default());
        let message = MessageId::new();
        let (registry, mut watches) = followed(&source, message, 2);
        for seq in 1..=15 {
            carried(&source, &registry, message, seq);
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        for watch in &mut watches {
            for seq in 1..=15 {
                assert_eq!(next_notice(watch).await.last_seq, seq);
            }
        }
        assert_eq!(
            source.polls.load(Ordering::SeqCst),
            0,
            "notices came all along"
        );
        // Then silence, and the notice of the next event is lost: a poll finds it.
        source.commit(message, 16);
        for watch in &mut watches {
            assert_eq!(seqs(&*next_notice(watch).await), vec![16]);
        }
        assert_eq!(source.reads.load(Ordering::SeqCst), 1);
    }

    /// The database's notifications carry no events: the first is passed on for each
    /// follower to read what it names; every later one is read once for all of them.
    #[tokio::test]
    async fn notices_that_never_carry_events_are_read_once_after_the_first() {
        let source = Arc::new(Scripted::default());
        let message = MessageId::new();
        let (registry, mut watches) = followed(&source, message, 5);
        for seq in 1..=3 {
            source.commit(message, seq);
            let eventless = Notice {
                last_seq: seq,
                events: Vec::new(),
            };
            registry.notify(message, eventless);
            for watch in &mut watches {
                let notice = next_notice(watch).await;
                let expected = if seq == 1 { Vec::new() } else { vec![seq] };
                assert_eq!((notice.last_seq, seqs(&notice)), (seq, expected));
            }
        }
        assert_eq!(
            source.reads.load(Ordering::SeqCst),
            2,
            "one read a notice after the first"
        );
    }
}
