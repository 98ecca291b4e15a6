//! The followers of each message on this replica, sharing one subscription per message:
//! a bus subscribes when the first follower of a message arrives and lets go when the
//! last one leaves. They share one poll of the store as well: once a second the message's
//! last committed `seq` is read, and a notice sent when it moved, so a lost notice costs a
//! second and a quiet followed run one read a second, whatever the number of followers.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError, Weak};

use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;

use super::{Notice, Notices, Poll};
use crate::domain::MessageId;

/// Notices a follower may fall behind by before it reads the store instead.
const BACKLOG: usize = 64;

/// How often a followed message's last committed `seq` is read, for all its followers here.
const POLL_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// Followed messages and where their notices go.
#[derive(Default)]
pub struct Watchers {
    followed: Mutex<HashMap<MessageId, Followed>>,
}

struct Followed {
    notices: broadcast::Sender<Arc<Notice>>,
    followers: usize,
    /// Stops the bus's subscription for the message once no follower is left.
    unsubscribe: Option<CancellationToken>,
    /// Stops the message's shared poll once no follower is left.
    stop_polling: CancellationToken,
}

impl Watchers {
    /// A watch of `message`. For the message's first follower, `subscribe` is called so
    /// the bus subscribes for it (the token it may return is cancelled when the last
    /// follower leaves), and `poll` starts being asked for the message's last `seq`.
    pub fn watch(
        self: &Arc<Self>,
        message: MessageId,
        subscribe: impl FnOnce() -> Option<CancellationToken>,
        poll: Poll,
    ) -> Watch {
        let mut followed = self.lock();
        let entry = followed.entry(message).or_insert_with(|| Followed {
            notices: broadcast::channel(BACKLOG).0,
            followers: 0,
            unsubscribe: None,
            stop_polling: CancellationToken::new(),
        });
        entry.followers += 1;
        let notices = entry.notices.subscribe();
        if entry.followers == 1 {
            entry.unsubscribe = subscribe();
            self.start_polling(message, poll, entry.stop_polling.clone());
        }
        Watch {
            notices: Some(notices),
            leave: Some((Arc::downgrade(self), message)),
        }
    }

    /// Reads the last `seq` of `message` every [`POLL_EVERY`] until `stop`, telling its
    /// followers when it moved.
    fn start_polling(self: &Arc<Self>, message: MessageId, poll: Poll, stop: CancellationToken) {
        let watchers = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut last = 0;
            loop {
                tokio::select! {
                    () = stop.cancelled() => return,
                    () = tokio::time::sleep(POLL_EVERY) => {}
                }
                let Some(seq) = poll().await else { continue };
                if seq <= last {
                    continue;
                }
                last = seq;
                let Some(watchers) = watchers.upgrade() else {
                    return;
                };
                let notice = Notice {
                    last_seq: seq,
                    events: Vec::new(),
                };
                watchers.notify(message, notice);
            }
        });
    }

    /// Hands `notice` to the followers of `message`; returns whether it has any.
    pub fn notify(&self, message: MessageId, notice: Notice) -> bool {
        match self.lock().get(&message) {
            Some(followed) => {
                let _ = followed.notices.send(Arc::new(notice));
                true
            }
            None => false,
        }
    }

    /// Tells every follower to read the store (a notice named more messages than it
    /// could carry).
    pub fn notify_all(&self) {
        for followed in self.lock().values() {
            let _ = followed.notices.send(Arc::new(Notice {
                last_seq: u64::MAX,
                events: Vec::new(),
            }));
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
            entry.stop_polling.cancel();
            if let Some(unsubscribe) = entry.unsubscribe {
                unsubscribe.cancel();
            }
        }
        true
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<MessageId, Followed>> {
        self.followed.lock().unwrap_or_else(PoisonError::into_inner)
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
