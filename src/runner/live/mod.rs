//! Runs in progress as the outside reaches them: the registry of live runs, the emitter a
//! run publishes its events through, the follower that streams a message's events to a
//! client, and the mailbox where a client's tool results and approvals meet the run waiting for them.
//!
//! Nothing here drives a run; [`super::run`] does, and uses these.

mod emitter;
mod follower;
mod mailbox;
mod registry;
mod stored;
mod streams;

pub use emitter::{Destination, Driven, Emitter, Outbox};
pub use follower::{follow, EventStream, Known};
pub use mailbox::{not_waiting, Awaited, ClientOutput, Decision, Delivery, Mailbox};
pub use registry::{LiveRun, LiveRuns, Registration, Subscription};
pub use stored::StoredMessage;
pub use streams::FollowStreams;
