//! What a run's task is started with: a new run's, or one taken over's.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::live::{Awaited, Delivery, Emitter, Mailbox, Registration};
use super::run;
use super::spec::RunSpec;
use crate::domain::Message;
use crate::store::Fence;

/// What a run's task is started with.
pub(super) struct Launch {
    pub spec: RunSpec,
    pub agent: run::Agent,
    pub message: Message,
    pub cancel: CancellationToken,
    /// The fence its writes go under.
    pub fence: Fence,
    /// The records of a run taken over, to go on from; `None` for a new run.
    pub resumption: Option<run::Resumption>,
    /// What its caller answered while it had no owner, for its wait.
    pub early: Option<Delivery>,
    /// The wait a run taken over while it waited enters again.
    pub coming: Option<(Awaited, Vec<String>)>,
    /// A newer run stopped it while it had no owner (its token is cancelled too).
    pub interrupted: Option<crate::domain::Interruption>,
}

/// A run registered as live here, with its open event stream: what its task (or, while it
/// is queued, its wait) writes and is followed through. One registration and one stream
/// serve a queued run from its first `queued` event to its end.
pub(super) struct Opened {
    /// Its place among the live runs here; it leaves when dropped.
    pub registration: Registration,
    /// Where its records and events go.
    pub emitter: Emitter,
    /// Where its callers' answers arrive.
    pub mailbox: Mailbox,
}

/// Cancels `cancel` once `deadline` has passed, unless it fired before (a run's token
/// fires at shutdown too, so this never holds shutdown up).
pub(super) async fn cancel_after(cancel: CancellationToken, deadline: Duration) {
    tokio::select! {
        () = cancel.cancelled() => {}
        () = tokio::time::sleep(deadline) => cancel.cancel(),
    }
}
