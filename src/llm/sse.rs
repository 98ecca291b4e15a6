//! Server-sent event bodies read as chat streams, whatever the provider: the first-byte
//! and idle clocks, the bound on a line's length, and the hand-off of decoded chunks. What
//! an event means is the provider's [`Decoder`].

use std::collections::VecDeque;
use std::time::Duration;

use eventsource_stream::{Event, EventStreamError, Eventsource};
use futures::{Stream, StreamExt};
use hyper::body::Bytes;

use super::error::IDLE_PHASE;
use super::{ChatChunk, ChatStream, LlmError, TurnEnd};

/// What a provider's events mean.
pub(crate) trait Decoder: Send + 'static {
    /// Reads one event, queueing the chunks it carries; returns whether the turn is
    /// complete. Chunks queued before an error are still handed out (usage a provider
    /// reported before failing is kept).
    fn feed(
        &mut self,
        event: &Event,
        out: &mut VecDeque<Result<ChatChunk, LlmError>>,
    ) -> Result<bool, LlmError>;

    /// The complete turn.
    fn end(self) -> TurnEnd;

    /// The body ended without the turn's completion mark: complete if the provider had
    /// already said how the turn ended, otherwise the connection dropped mid-answer.
    fn end_at_eof(self) -> Result<TurnEnd, LlmError>;
}

/// The error of a stream that closed before its turn was complete.
pub(crate) fn cut_short() -> LlmError {
    LlmError::Stream {
        message: "the connection closed before the response was complete".to_owned(),
    }
}

/// Why the raw body of a stream stopped.
#[derive(Debug)]
pub(crate) enum BodyError {
    /// The connection failed.
    Transport(reqwest::Error),
    /// One SSE line was longer than any answer within the output limit could make it.
    LineTooLong {
        /// The output limit the line cap derives from.
        limit: usize,
    },
}

impl std::fmt::Display for BodyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Transport(err) => err.fmt(f),
            Self::LineTooLong { limit } => {
                write!(f, "a stream line exceeds what {limit} bytes of output need")
            }
        }
    }
}

impl std::error::Error for BodyError {}

/// The longest SSE line an answer within `limit` bytes can need: its text escaped as JSON
/// (at most six bytes a byte) and a chunk's framing. The SSE parser holds a line whole
/// until it ends, so this bounds its memory.
pub(crate) fn line_cap(limit: usize) -> usize {
    limit.saturating_mul(6).saturating_add(64 * 1024)
}

/// The output limit a line cap was derived from.
pub(crate) fn limit_of_cap(cap: usize) -> usize {
    cap.saturating_sub(64 * 1024) / 6
}

/// The body with every line (bytes between newlines) held to `cap` bytes.
fn capped_lines(
    body: impl Stream<Item = Result<Bytes, reqwest::Error>> + Send + 'static,
    cap: Option<usize>,
) -> impl Stream<Item = Result<Bytes, BodyError>> + Send + 'static {
    let mut line = 0usize;
    body.map(move |item| {
        let bytes = item.map_err(BodyError::Transport)?;
        let Some(cap) = cap else {
            return Ok(bytes);
        };
        line = match bytes.iter().rposition(|b| *b == b'\n') {
            Some(last) => bytes.len() - last - 1,
            None => line + bytes.len(),
        };
        if line > cap {
            return Err(BodyError::LineTooLong {
                limit: limit_of_cap(cap),
            });
        }
        Ok(bytes)
    })
}

type EventStream =
    std::pin::Pin<Box<dyn Stream<Item = Result<Event, EventStreamError<BodyError>>> + Send>>;

struct Reader<D> {
    events: EventStream,
    /// `None` once the turn has ended or failed.
    decoder: Option<D>,
    /// Items read but not yet handed out; the last may be the error that ended the turn.
    queue: VecDeque<Result<ChatChunk, LlmError>>,
    first_byte: Option<Duration>,
    idle: Duration,
}

impl<D: Decoder> Reader<D> {
    async fn next_event(
        &mut self,
    ) -> Result<Option<Result<Event, EventStreamError<BodyError>>>, LlmError> {
        match self.first_byte.take() {
            Some(after) => tokio::time::timeout(after, self.events.next())
                .await
                .map_err(|_| LlmError::Timeout {
                    phase: "first byte",
                    after,
                }),
            None => tokio::time::timeout(self.idle, self.events.next())
                .await
                .map_err(|_| LlmError::Timeout {
                    phase: IDLE_PHASE,
                    after: self.idle,
                }),
        }
    }

    /// The next chunk for the caller, or `None` once the turn has ended.
    async fn next_chunk(&mut self) -> Option<Result<ChatChunk, LlmError>> {
        loop {
            if let Some(item) = self.queue.pop_front() {
                return Some(item);
            }
            self.decoder.as_ref()?;
            match self.next_event().await {
                Ok(Some(Ok(event))) => self.take(&event),
                Ok(Some(Err(err))) => self.fail(stream_error(err)),
                Ok(None) => {
                    if let Some(decoder) = self.decoder.take() {
                        self.queue
                            .push_back(decoder.end_at_eof().map(ChatChunk::Finished));
                    }
                }
                Err(err) => self.fail(err),
            }
        }
    }

    fn take(&mut self, event: &Event) {
        let Some(decoder) = self.decoder.as_mut() else {
            return;
        };
        match decoder.feed(event, &mut self.queue) {
            Ok(false) => {}
            Ok(true) => {
                if let Some(decoder) = self.decoder.take() {
                    self.queue.push_back(Ok(ChatChunk::Finished(decoder.end())));
                }
            }
            Err(err) => self.fail(err),
        }
    }

    fn fail(&mut self, err: LlmError) {
        self.decoder = None;
        self.queue.push_back(Err(err));
    }
}

fn stream_error(err: EventStreamError<BodyError>) -> LlmError {
    let message = match err {
        EventStreamError::Transport(BodyError::LineTooLong { limit }) => {
            return LlmError::TooLarge { limit };
        }
        EventStreamError::Transport(BodyError::Transport(transport)) => {
            transport.without_url().to_string()
        }
        other @ (EventStreamError::Utf8(_) | EventStreamError::Parser(_)) => other.to_string(),
    };
    LlmError::Stream { message }
}

/// Reads an SSE response body as a chat stream decoded by `decoder`. `limit` is the most
/// the model may write, which bounds the length of a line.
pub(crate) fn chat_stream<D: Decoder>(
    response: reqwest::Response,
    first_byte: Duration,
    idle: Duration,
    limit: Option<usize>,
    decoder: D,
) -> ChatStream {
    let reader = Reader {
        events: Box::pin(capped_lines(response.bytes_stream(), limit.map(line_cap)).eventsource()),
        decoder: Some(decoder),
        queue: VecDeque::new(),
        first_byte: Some(first_byte),
        idle,
    };
    Box::pin(futures::stream::unfold(reader, |mut reader| async move {
        let chunk = reader.next_chunk().await?;
        Some((chunk, reader))
    }))
}

/// Text cut to `max` characters, for quoting a provider's output in an error.
pub(crate) fn truncate(text: &str, max: usize) -> &str {
    match text.char_indices().nth(max) {
        Some((cut, _)) => &text[..cut],
        None => text,
    }
}

/// Cuts `text` to the room `limit` leaves after `before` bytes already written, on a char
/// boundary: what fit of the piece that crossed the limit is kept, nothing after it.
pub(crate) fn keep_within(text: &mut String, before: usize, limit: usize) {
    let mut cut = limit.saturating_sub(before).min(text.len());
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    text.truncate(cut);
}
