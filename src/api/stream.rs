//! The response stream of a run: events from a follower's channel and, when the caller asked
//! for it, a guard that cancels the run as soon as tonic drops the stream.

use std::pin::Pin;
use std::task::{Context, Poll};

use futures::Stream;
use tokio_util::sync::DropGuard;
use tonic::Status;

use crate::pb;
use crate::runner::EventStream;

/// Streams a run's events as protobuf; with a guard, dropping it cancels the run.
pub struct RunEventStream {
    events: EventStream,
    _cancel_on_drop: Option<DropGuard>,
}

impl RunEventStream {
    /// Wraps a follower's receiver, optionally with the guard of the run's token.
    pub fn new(events: EventStream, cancel_on_drop: Option<DropGuard>) -> Self {
        Self {
            events,
            _cancel_on_drop: cancel_on_drop,
        }
    }
}

impl Stream for RunEventStream {
    type Item = Result<pb::RunEvent, Status>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.events.as_mut().poll_next(cx).map(|event| {
            event.map(|event| {
                event
                    .map(pb::RunEvent::from)
                    .map_err(super::status::from_error)
            })
        })
    }
}
