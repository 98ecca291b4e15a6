//! The followers of each message on this replica, sharing one subscription per message:
//! a bus subscribes when the first follower of a message arrives and lets go when the
//! last one leaves.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError, Weak};

use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;

use super::{Notice, Notices};
use crate::domain::MessageId;

/// Notices a follower may fall behind by before it reads the store instead.
const BACKLOG: usize = 64;

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
}

impl Watchers {
    /// A watch of `message`. For the message's first follower, `subscribe` is called so
    /// the bus subscribes for it; the token it may return is cancelled when the last
    /// follower leaves.
    pub fn watch(
        self: &Arc<Self>,
        message: MessageId,
        subscribe: impl FnOnce() -> Option<CancellationToken>,
    ) -> Watch {
        let mut followed = self.lock();
        let entry = followed.entry(message).or_insert_with(|| Followed {
            notices: broadcast::channel(BACKLOG).0,
            followers: 0,
            unsubscribe: None,
        });
        entry.followers += 1;
        let notices = entry.notices.subscribe();
        if entry.followers == 1 {
            entry.unsubscribe = subscribe();
        }
        Watch {
            notices: Some(notices),
            leave: Some((Arc::downgrade(self), message)),
        }
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
