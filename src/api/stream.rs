//! The response stream of a run: events from the run's channel, and a guard that cancels
//! the run as soon as tonic drops the stream (the client went away).

use std::pin::Pin;
use std::task::{Context, Poll};

use futures::Stream;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::DropGuard;
use tonic::Status;

use crate::events::EventEnvelope;
use crate::pb;

/// Streams a run's events as protobuf; dropping it cancels the run.
pub struct RunEventStream {
    events: ReceiverStream<EventEnvelope>,
    _cancel_on_drop: DropGuard,
}

impl RunEventStream {
    /// Wraps a run's receiver with the guard of its cancellation token.
    pub fn new(events: mpsc::Receiver<EventEnvelope>, cancel_on_drop: DropGuard) -> Self {
        Self {
            events: ReceiverStream::new(events),
            _cancel_on_drop: cancel_on_drop,
        }
    }
}

impl Stream for RunEventStream {
    type Item = Result<pb::RunEvent, Status>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        Pin::new(&mut self.events)
            .poll_next(cx)
            .map(|event| event.map(|event| Ok(pb::RunEvent::from(event))))
    }
}
