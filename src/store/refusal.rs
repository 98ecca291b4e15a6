//! Why the store did not admit a new message.

use std::time::Duration;

use crate::domain::MessageId;

/// Why a new message was not admitted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// The tenant has `running` messages running, its limit.
    Running {
        /// How many.
        running: u64,
    },
    /// The tenant has `running` sub-agents' runs running, its limit.
    Children {
        /// How many.
        running: u64,
    },
    /// The tenant started `started` messages in the last minute, its limit; the oldest of
    /// them leaves the window after `retry_after`.
    PerMinute {
        /// How many.
        started: u64,
        /// When a start frees.
        retry_after: Duration,
    },
    /// The message was to run alone, and its conversation has a live message: the oldest.
    Busy {
        /// The live message.
        live: MessageId,
    },
    /// The message was to be queued, and its conversation has `queued` queued already, its
    /// limit.
    QueueFull {
        /// How many.
        queued: u64,
    },
}
