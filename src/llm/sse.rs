//! Server-sent event bodies read as chat streams, whatever the provider: the first-byte
//! and idle clocks, the bound on a line's length, and the hand-off of decoded chunks. What
//! an event means is the provider's [`Decoder`].

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use futures::Stream;
use hyper::body::Bytes;

use super::error::IDLE_PHASE;
use super::event_source::{Event, EventParser, ParseError};
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

/// A response body's bytes as they arrive.
type Body = Pin<Box<dyn Stream<Item = Result<Bytes, reqwest::Error>> + Send>>;

struct Reader<D> {
    body: Body,
    /// Reads the body's bytes as events; holds at most one unfinished line.
    parser: EventParser,
    /// Events read but not yet decoded.
    events: VecDeque<Event>,
    /// `None` once the turn has ended or failed.
    decoder: Option<D>,
    /// Items read but not yet handed out; the last may be the error that ended the turn.
    queue: VecDeque<Result<ChatChunk, LlmError>>,
    /// The first event's clock, until an event arrives or a wait for one began.
    first_byte: Option<Duration>,
    idle: Duration,
    /// The clock of the wait under way for the next event, and what it times; `None` while
    /// no wait is under way.
    waiting: Option<(&'static str, Duration)>,
    /// One timer for the stream, set again for each wait: a chunk costs no timer and no
    /// copy of the reader, where a timeout future per chunk cost both.
    clock: Option<Pin<Box<tokio::time::Sleep>>>,
}

// Nothing of a reader is pinned in place: its body and its clock are boxed.
impl<D> Unpin for Reader<D> {}

impl<D: Decoder> Stream for Reader<D> {
    type Item = Result<ChatChunk, LlmError>;

    /// The next chunk for the caller, or `None` once the turn has ended.
    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        loop {
            if let Some(item) = this.queue.pop_front() {
                return Poll::Ready(Some(item));
            }
            if this.decoder.is_none() {
                return Poll::Ready(None);
            }
            if let Some(event) = this.events.pop_front() {
                this.take(&event);
                continue;
            }
            match this.body.as_mut().poll_next(cx) {
                Poll::Ready(Some(Ok(bytes))) => this.read(&bytes),
                Poll::Ready(Some(Err(err))) => this.fail(LlmError::Stream {
                    message: err.without_url().to_string(),
                }),
                Poll::Ready(None) => this.end_of_body(),
                Poll::Pending => {
                    if this.clock_ran_out(cx) {
                        continue;
                    }
                    return Poll::Pending;
                }
            }
        }
    }
}

impl<D: Decoder> Reader<D> {
    /// Reads `bytes` as events. Only an event stops the clocks: bytes that make none (a
    /// keep-alive comment, half a line) are not an answer.
    fn read(&mut self, bytes: &[u8]) {
        if let Err(err) = self.parser.feed(bytes, &mut self.events) {
            // The events before the bad line are the model's, and come first.
            while let Some(event) = self.events.pop_front() {
                self.take(&event);
            }
            self.fail(parse_error(err));
        } else if !self.events.is_empty() {
            self.heard();
        }
    }

    /// The wait under way ended: the next one starts its own clock, the idle one.
    fn heard(&mut self) {
        self.waiting = None;
        self.first_byte = None;
    }

    /// Starts the wait's clock if none runs (the first event's, then the idle one); whether
    /// it ran out, failing the turn.
    fn clock_ran_out(&mut self, cx: &mut Context<'_>) -> bool {
        let (phase, after) = match self.waiting {
            Some(waiting) => waiting,
            None => {
                let waiting = match self.first_byte.take() {
                    Some(after) => ("first byte", after),
                    None => (IDLE_PHASE, self.idle),
                };
                let now = tokio::time::Instant::now();
                // A clock too long to add to now is one that never runs out.
                let deadline = now.checked_add(waiting.1).unwrap_or(now + FAR_FUTURE);
                match self.clock.as_mut() {
                    Some(clock) => clock.as_mut().reset(deadline),
                    None => self.clock = Some(Box::pin(tokio::time::sleep_until(deadline))),
                }
                self.waiting = Some(waiting);
                waiting
            }
        };
        let ran_out = self
            .clock
            .as_mut()
            .is_some_and(|clock| clock.as_mut().poll(cx).is_ready());
        if ran_out {
            self.waiting = None;
            self.fail(LlmError::Timeout { phase, after });
        }
        ran_out
    }

    /// The body ended: the turn is complete if the decoder says so.
    fn end_of_body(&mut self) {
        if let Some(decoder) = self.decoder.take() {
            self.queue
                .push_back(decoder.end_at_eof().map(ChatChunk::Finished));
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

/// What a clock too long to be added to now waits for: about thirty years.
const FAR_FUTURE: Duration = Duration::from_secs(86_400 * 365 * 30);

fn parse_error(err: ParseError) -> LlmError {
    match err {
        ParseError::LineTooLong { cap } => LlmError::TooLarge {
            limit: limit_of_cap(cap),
        },
        ParseError::NotUtf8 => LlmError::Stream {
            message: "a line of the stream is not UTF-8".to_owned(),
        },
    }
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
    Box::pin(Reader {
        body: Box::pin(response.bytes_stream()),
        parser: EventParser::new(limit.map(line_cap)),
        events: VecDeque::new(),
        decoder: Some(decoder),
        queue: VecDeque::new(),
        first_byte: Some(first_byte),
        idle,
        waiting: None,
        clock: None,
    })
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

#[cfg(test)]
mod tests {
    use super::*;
    use futures::StreamExt;
    use tokio::sync::mpsc;

    /// Hands each event's data out as text; `[DONE]` completes the turn.
    struct Texts;

    impl Decoder for Texts {
        fn feed(
            &mut self,
            event: &Event,
            out: &mut VecDeque<Result<ChatChunk, LlmError>>,
        ) -> Result<bool, LlmError> {
            if event.data == "[DONE]" {
                return Ok(true);
            }
            out.push_back(Ok(ChatChunk::Text(event.data.clone())));
            Ok(false)
        }

        fn end(self) -> TurnEnd {
            TurnEnd::default()
        }

        fn end_at_eof(self) -> Result<TurnEnd, LlmError> {
            Err(cut_short())
        }
    }

    const FIRST_BYTE: Duration = Duration::from_secs(10);
    const IDLE: Duration = Duration::from_secs(1);

    /// A reader of the events sent on the returned sender.
    /// Each `data` sent is one event; `: …` a comment.
    fn reader() -> (mpsc::UnboundedSender<&'static str>, ChatStream) {
        let (send, receive) = mpsc::unbounded_channel::<&'static str>();
        let body =
            tokio_stream::wrappers::UnboundedReceiverStream::new(receive).map(|data| match data {
                comment if comment.starts_with(':') => Ok(Bytes::from(format!("{comment}\n\n"))),
                data => Ok(Bytes::from(format!("data: {data}\n\n"))),
            });
        let reader = Reader {
            body: Box::pin(body),
            parser: EventParser::new(None),
            events: VecDeque::new(),
            decoder: Some(Texts),
            queue: VecDeque::new(),
            first_byte: Some(FIRST_BYTE),
            idle: IDLE,
            waiting: None,
            clock: None,
        };
        (send, Box::pin(reader))
    }

    fn timeout_phase(item: Option<Result<ChatChunk, LlmError>>) -> &'static str {
        match item {
            Some(Err(LlmError::Timeout { phase, .. })) => phase,
            other => panic!("expected a timeout, got {other:?}"),
        }
    }

    /// A model that says nothing runs out the first event's clock, not the idle one.
    #[tokio::test(start_paused = true)]
    async fn silence_before_the_first_event_runs_out_the_first_byte_clock() {
        let (_send, mut stream) = reader();
        let started = tokio::time::Instant::now();
        assert_eq!(timeout_phase(stream.next().await), "first byte");
        assert_eq!(started.elapsed(), FIRST_BYTE);
        assert!(
            stream.next().await.is_none(),
            "the turn ended with its timeout"
        );
    }

    /// The idle clock starts again with each event: a model that writes for longer than
    /// either clock in all, but never falls silent for the idle limit, completes its turn.
    #[tokio::test(start_paused = true)]
    async fn the_idle_clock_starts_again_with_each_event() {
        let (send, mut stream) = reader();
        let writer = tokio::spawn(async move {
            for _ in 0..20 {
                send.send("a").ok();
                tokio::time::sleep(IDLE * 3 / 4).await;
            }
            send.send("[DONE]").ok();
            send
        });
        let mut text = String::new();
        while let Some(chunk) = stream.next().await {
            match chunk {
                Ok(ChatChunk::Text(more)) => text.push_str(&more),
                Ok(ChatChunk::Finished(_)) => break,
                other => panic!("unexpected {other:?}"),
            }
        }
        assert_eq!(text, "a".repeat(20));
        assert!(FIRST_BYTE < IDLE * 3 / 4 * 20);
        drop(writer.await);
    }

    /// The first event may take longer than the idle limit (the first-byte clock times
    /// it); once it came, silence runs out the idle clock.
    #[tokio::test(start_paused = true)]
    async fn a_slow_first_event_is_waited_for_then_silence_runs_out_the_idle_clock() {
        let (send, mut stream) = reader();
        let writer = tokio::spawn(async move {
            tokio::time::sleep(IDLE * 3).await;
            send.send("hello").ok();
            send
        });
        assert!(matches!(stream.next().await, Some(Ok(ChatChunk::Text(_)))));
        let started = tokio::time::Instant::now();
        assert_eq!(timeout_phase(stream.next().await), IDLE_PHASE);
        assert_eq!(started.elapsed(), IDLE);
        drop(writer.await);
    }

    /// A first event that was ready before anyone waited still ends the first event's
    /// clock: the silence after it is timed by the idle one.
    #[tokio::test(start_paused = true)]
    async fn an_event_ready_at_once_ends_the_first_byte_clock() {
        let (send, mut stream) = reader();
        send.send("ready").ok();
        send.send("too").ok();
        assert!(matches!(stream.next().await, Some(Ok(ChatChunk::Text(_)))));
        assert!(matches!(stream.next().await, Some(Ok(ChatChunk::Text(_)))));
        let started = tokio::time::Instant::now();
        assert_eq!(timeout_phase(stream.next().await), IDLE_PHASE);
        assert_eq!(started.elapsed(), IDLE);
    }

    /// Keep-alive comments are not an answer: a model that sends only them after its
    /// first event still runs out the idle clock, timed from the event.
    #[tokio::test(start_paused = true)]
    async fn comments_do_not_stop_the_idle_clock() {
        let (send, mut stream) = reader();
        send.send("hello").ok();
        assert!(matches!(stream.next().await, Some(Ok(ChatChunk::Text(_)))));
        let started = tokio::time::Instant::now();
        let pinger = tokio::spawn(async move {
            for _ in 0..10 {
                tokio::time::sleep(IDLE / 4).await;
                send.send(": ping").ok();
            }
            send
        });
        assert_eq!(timeout_phase(stream.next().await), IDLE_PHASE);
        assert_eq!(started.elapsed(), IDLE);
        drop(pinger.await);
    }
}
