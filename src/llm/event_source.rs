//! Server-sent events read from a body's bytes, as the HTML standard's "interpreting an
//! event stream" says, in time linear in the bytes however they are chunked.
//!
//! Our own rather than a crate's: `eventsource-stream` copies what is left of its buffer
//! after every line and parses an unfinished line again from its start with every chunk,
//! so a burst of events or a long line in small reads costs time quadratic in its bytes;
//! `sse-stream` fails a stream on a line the standard says to ignore (an unknown field, a
//! field without a colon, an event named twice).

use std::collections::VecDeque;

/// One event: its type (`message` unless named) and its data lines joined by `\n`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Event {
    /// The `event:` field, or `message`.
    pub event: String,
    /// The `data:` fields, joined by line feeds.
    pub data: String,
}

/// Why a body could not be read as events.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ParseError {
    /// A line, or an event's data lines together, were longer than `cap` bytes.
    LineTooLong {
        /// The longest line (or event) allowed.
        cap: usize,
    },
    /// A line was not UTF-8.
    NotUtf8,
}

/// Splits bytes into lines and lines into events; keeps only the unfinished line and the
/// event being read between chunks.
#[derive(Debug, Default)]
pub(crate) struct EventParser {
    /// The longest line allowed; `None`: any.
    cap: Option<usize>,
    /// The bytes of the line not yet ended.
    line: Vec<u8>,
    /// The last chunk ended with `\r`: a `\n` starting the next one ends nothing.
    after_cr: bool,
    /// Whether a byte-order mark may still open the stream.
    at_start: bool,
    /// The event being read.
    event: String,
    data: String,
    /// Whether a `data` field came (an event without one is not dispatched).
    has_data: bool,
}

const BOM: &[u8] = b"\xEF\xBB\xBF";

impl EventParser {
    /// A parser that refuses lines longer than `cap` bytes.
    pub(crate) fn new(cap: Option<usize>) -> Self {
        Self {
            cap,
            at_start: true,
            ..Self::default()
        }
    }

    /// Reads `bytes`, appending each event they complete to `out`.
    pub(crate) fn feed(
        &mut self,
        mut bytes: &[u8],
        out: &mut VecDeque<Event>,
    ) -> Result<(), ParseError> {
        if self.after_cr && !bytes.is_empty() {
            self.after_cr = false;
            if bytes[0] == b'\n' {
                bytes = &bytes[1..];
            }
        }
        while let Some(end) = bytes.iter().position(|b| *b == b'\n' || *b == b'\r') {
            let (line, rest) = bytes.split_at(end);
            self.check_cap(self.line.len() + line.len())?;
            if self.line.is_empty() {
                self.take_line(line, out)?;
            } else {
                let mut whole = std::mem::take(&mut self.line);
                whole.extend_from_slice(line);
                let read = self.take_line(&whole, out);
                whole.clear();
                self.line = whole;
                read?;
            }
            bytes = &rest[1..];
            if rest[0] == b'\r' {
                match bytes.first() {
                    Some(b'\n') => bytes = &bytes[1..],
                    Some(_) => {}
                    None => self.after_cr = true,
                }
            }
        }
        self.check_cap(self.line.len() + bytes.len())?;
        self.line.extend_from_slice(bytes);
        Ok(())
    }

    fn check_cap(&self, length: usize) -> Result<(), ParseError> {
        match self.cap {
            Some(cap) if length > cap => Err(ParseError::LineTooLong { cap }),
            _ => Ok(()),
        }
    }

    /// Reads one whole line (without its end).
    fn take_line(&mut self, mut line: &[u8], out: &mut VecDeque<Event>) -> Result<(), ParseError> {
        if std::mem::take(&mut self.at_start) {
            line = line.strip_prefix(BOM).unwrap_or(line);
        }
        if line.is_empty() {
            self.dispatch(out);
            return Ok(());
        }
        let (field, value) = match line.iter().position(|b| *b == b':') {
            // A comment.
            Some(0) => return Ok(()),
            Some(colon) => {
                let value = &line[colon + 1..];
                (&line[..colon], value.strip_prefix(b" ").unwrap_or(value))
            }
            None => (line, &[][..]),
        };
        let value = std::str::from_utf8(value).map_err(|_| ParseError::NotUtf8)?;
        match field {
            b"event" => {
                self.event.clear();
                self.event.push_str(value);
            }
            b"data" => {
                // An event's data lines are held until its blank line: they are bounded
                // together as one line is, or a server that never ends its event would
                // grow them for as long as it writes.
                self.check_cap(self.data.len() + 1 + value.len())?;
                if self.has_data {
                    self.data.push('\n');
                }
                self.data.push_str(value);
                self.has_data = true;
            }
            // `id`, `retry` and unknown fields mean nothing to a model's answer.
            _ => {}
        }
        Ok(())
    }

    /// Ends the event being read at a blank line: handed out when it carried data.
    fn dispatch(&mut self, out: &mut VecDeque<Event>) {
        let event = std::mem::take(&mut self.event);
        if !std::mem::take(&mut self.has_data) {
            return;
        }
        let event = if event.is_empty() {
            "message".to_owned()
        } else {
            event
        };
        out.push_back(Event {
            event,
            data: std::mem::take(&mut self.data),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(chunks: &[&[u8]]) -> Result<Vec<Event>, ParseError> {
        let mut parser = EventParser::new(Some(64));
        let mut out = VecDeque::new();
        for chunk in chunks {
            parser.feed(chunk, &mut out)?;
        }
        Ok(out.into())
    }

    fn event(event: &str, data: &str) -> Event {
        Event {
            event: event.into(),
            data: data.into(),
        }
    }

    #[test]
    fn events_are_read_whatever_the_chunking() {
        let body = b"\xEF\xBB\xBFdata: {\"a\":1}\n\nevent: ping\ndata: x\ndata:y\n\n: comment\r\ndata: z\r\n\r\n";
        let expected = vec![
            event("message", "{\"a\":1}"),
            event("ping", "x\ny"),
            event("message", "z"),
        ];
        assert_eq!(parse(&[body]).unwrap(), expected);
        for cut in 1..body.len() {
            let (a, b) = body.split_at(cut);
            assert_eq!(parse(&[a, b]).unwrap(), expected, "cut at {cut}");
        }
        let bytes: Vec<&[u8]> = body.chunks(1).collect();
        assert_eq!(parse(&bytes).unwrap(), expected);
    }

    /// What the standard says to ignore is ignored: unknown fields, a field without a
    /// colon, `id` and `retry`, an event without data, an event unfinished at the end.
    #[test]
    fn what_the_standard_ignores_is_ignored() {
        let body = b"id: 7\nretry: 10\nfoo: bar\nnocolon\ndata: kept\n\nevent: empty\n\ndata: unfinished\n";
        assert_eq!(parse(&[body]).unwrap(), vec![event("message", "kept")]);
    }

    #[test]
    fn a_lone_cr_ends_a_line_and_a_split_crlf_ends_one() {
        assert_eq!(
            parse(&[b"data: a\r\r", b"data: b\r", b"\n\r\n"]).unwrap(),
            vec![event("message", "a"), event("message", "b")]
        );
    }

    #[test]
    fn a_line_longer_than_the_cap_is_refused_however_it_arrives() {
        let long = vec![b'x'; 65];
        assert_eq!(
            parse(&[b"data: ", &long]),
            Err(ParseError::LineTooLong { cap: 64 })
        );
        let pieces: Vec<&[u8]> = long.chunks(3).collect();
        assert_eq!(parse(&pieces), Err(ParseError::LineTooLong { cap: 64 }));
        assert!(parse(&[&long[..60], b"\n\n"]).is_ok());
    }

    /// Many short data lines of an event that never ends are bounded as one long line is.
    #[test]
    fn an_events_data_lines_are_bounded_together() {
        let line = b"data: xxxxxxxxxx\n";
        let mut parser = EventParser::new(Some(64));
        let mut out = VecDeque::new();
        let refused = (0..10).find_map(|_| parser.feed(line, &mut out).err());
        assert_eq!(refused, Some(ParseError::LineTooLong { cap: 64 }));
        assert!(parse(&[b"data: xxxxxxxxxx\ndata: xxxxxxxxxx\n\n"]).is_ok());
    }

    #[test]
    fn a_field_that_is_not_utf8_is_an_error() {
        assert_eq!(parse(&[b"data: \xff\n\n"]), Err(ParseError::NotUtf8));
    }

    /// Any chunking of a body reads as the whole body does, and no bytes panic the parser:
    /// a model's server decides both.
    #[test]
    fn random_chunkings_read_as_the_whole_and_random_bytes_never_panic() {
        let mut rng = fastrand::Rng::with_seed(7);
        let pieces: [&[u8]; 9] = [
            b"data: a",
            b"\r\n",
            b"\n",
            b"\r",
            b"event: e",
            b": c",
            b"data:",
            b"\xc3\xa9",
            b"id: 1",
        ];
        for _ in 0..500 {
            let body: Vec<u8> = (0..rng.usize(1..40))
                .flat_map(|_| pieces[rng.usize(..pieces.len())].iter().copied())
                .collect();
            let whole = parse(&[&body]);
            let mut cuts: Vec<usize> = (0..rng.usize(0..6))
                .map(|_| rng.usize(0..=body.len()))
                .collect();
            cuts.sort_unstable();
            let mut chunks: Vec<&[u8]> = Vec::new();
            let mut from = 0;
            for cut in cuts.into_iter().chain([body.len()]) {
                chunks.push(&body[from..cut]);
                from = cut;
            }
            assert_eq!(
                parse(&chunks),
                whole,
                "{:?} in {chunks:?}",
                String::from_utf8_lossy(&body)
            );
            let noise: Vec<u8> = (0..rng.usize(0..200)).map(|_| rng.u8(..)).collect();
            let _ = parse(&[&noise]);
        }
    }
}
