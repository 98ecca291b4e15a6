//! A round's tool calls as the model writes them: the pieces of their arguments gathered
//! and handed out as `tool_call_delta`s at a pace that keeps their cost flat, since every
//! delta is a stored event. No I/O and no clock of its own: the model call feeds it pieces
//! and the time, and announces what it hands out.

use std::time::Instant;

use crate::llm::{ArgumentsPiece, ToolCallRequest};
use crate::runner::settings::DeltaPacing;

/// One delta to announce, without its round.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Formed {
    /// The call's place among the round's calls.
    pub index: u32,
    /// The call's id.
    pub id: String,
    /// The tool's name, on the call's first delta only.
    pub name: Option<String>,
    /// The text that follows the call's earlier deltas.
    pub text: String,
    /// The call passed the most that is streamed: nothing of it follows.
    pub truncated: bool,
}

/// The forming calls of one model call.
#[derive(Debug)]
pub(super) struct Forming {
    pacing: DeltaPacing,
    /// By the call's place among the round's calls.
    calls: Vec<Call>,
}

/// One forming call.
#[derive(Debug, Default)]
struct Call {
    id: Option<String>,
    name: Option<String>,
    /// The argument text received, at most the streamed limit of it.
    text: String,
    /// Bytes of `text` already sent.
    sent: usize,
    /// More text came than the limit keeps.
    over: bool,
    /// A delta of it went out (the name goes on the first).
    announced: bool,
    /// Its last delta said `truncated`: it is done.
    closed: bool,
    /// When its last delta went out, or (none yet) when it began forming.
    since: Option<Instant>,
}

impl Call {
    fn pending(&self) -> bool {
        !self.closed && (self.sent < self.text.len() || self.over)
    }

    fn sendable(&self) -> bool {
        self.id.is_some() && self.name.is_some() && self.pending()
    }

    /// Adds `piece` of text, keeping at most `max` bytes in all.
    fn take(&mut self, piece: &str, max: usize) {
        if self.over {
            return;
        }
        let room = max.saturating_sub(self.text.len());
        if piece.len() <= room {
            self.text.push_str(piece);
            return;
        }
        let mut cut = room;
        while !piece.is_char_boundary(cut) {
            cut -= 1;
        }
        self.text.push_str(&piece[..cut]);
        self.over = true;
    }

    /// The delta that sends what is pending.
    fn send(&mut self, index: usize, now: Instant) -> Formed {
        let text = self.text[self.sent..].to_owned();
        self.sent = self.text.len();
        self.closed = self.over;
        self.since = Some(now);
        let first = !std::mem::replace(&mut self.announced, true);
        Formed {
            index: u32::try_from(index).unwrap_or(u32::MAX),
            id: self.id.clone().unwrap_or_default(),
            name: if first { self.name.clone() } else { None },
            text,
            truncated: self.over,
        }
    }
}

impl Forming {
    /// Nothing forming yet; deltas paced by `pacing`.
    pub fn new(pacing: DeltaPacing) -> Self {
        Self {
            pacing,
            calls: Vec::new(),
        }
    }

    /// Takes a piece of a call at `now`; returns that call's delta when it is due (enough
    /// gathered, or the interval passed since its last one).
    pub fn push(&mut self, piece: ArgumentsPiece, now: Instant) -> Option<Formed> {
        if self.pacing.max_bytes == 0 {
            return None;
        }
        let index = usize::try_from(piece.index).ok()?;
        // A provider numbers calls from 0 in the order they begin; a number far past the
        // calls seen is not a call to keep room for.
        if index > self.calls.len() + 1024 {
            return None;
        }
        if self.calls.len() <= index {
            self.calls.resize_with(index + 1, Call::default);
        }
        let call = &mut self.calls[index];
        call.since.get_or_insert(now);
        if call.id.is_none() {
            call.id = piece.id;
        }
        if call.name.is_none() {
            call.name = piece.name;
        }
        call.take(&piece.text, self.pacing.max_bytes);
        let gathered = call.text.len() - call.sent >= self.pacing.bytes || call.over;
        let waited = call
            .since
            .is_some_and(|since| now.duration_since(since) >= self.pacing.interval);
        (call.sendable() && (gathered || waited)).then(|| call.send(index, now))
    }

    /// The deltas of every call whose interval has passed at `now`.
    pub fn due(&mut self, now: Instant) -> Vec<Formed> {
        let interval = self.pacing.interval;
        self.calls
            .iter_mut()
            .enumerate()
            .filter(|(_, call)| {
                call.sendable()
                    && call
                        .since
                        .is_some_and(|since| now.duration_since(since) >= interval)
            })
            .map(|(index, call)| call.send(index, now))
            .collect()
    }

    /// When the next call's interval passes, if one has text waiting.
    pub fn next_due(&self) -> Option<Instant> {
        self.calls
            .iter()
            .filter(|call| call.sendable())
            .filter_map(|call| call.since)
            .min()
            .map(|since| since + self.pacing.interval)
    }

    /// The turn is complete with `calls`: every call that was forming gets its final id
    /// and name, and what it has pending is sent. With `whole`, a call's deltas are
    /// completed to its final arguments (function calling, where they are the text the
    /// model wrote, a call given no arguments becoming `{}`); without, they stay the text
    /// as written (a ReAct action's input, which the final call normalises).
    pub fn finish(&mut self, calls: &[ToolCallRequest], whole: bool, now: Instant) -> Vec<Formed> {
        let max = self.pacing.max_bytes;
        let mut out = Vec::new();
        for (index, (call, last)) in self.calls.iter_mut().zip(calls).enumerate() {
            if call.since.is_none() {
                continue;
            }
            call.id = Some(last.id.clone());
            call.name = Some(last.name.clone());
            if whole && !call.over {
                if let Some(rest) = last.arguments.strip_prefix(call.text.as_str()) {
                    call.take(rest, max);
                }
            }
            if call.pending() {
                out.push(call.send(index, now));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn pacing(interval_ms: u64, bytes: usize, max_bytes: usize) -> DeltaPacing {
        DeltaPacing {
            interval: Duration::from_millis(interval_ms),
            bytes,
            max_bytes,
        }
    }

    fn piece(index: u32, id: Option<&str>, name: Option<&str>, text: &str) -> ArgumentsPiece {
        ArgumentsPiece {
            index,
            id: id.map(str::to_owned),
            name: name.map(str::to_owned),
            text: text.to_owned(),
        }
    }

    fn call(id: &str, name: &str, arguments: &str) -> ToolCallRequest {
        ToolCallRequest {
            id: id.into(),
            name: name.into(),
            arguments: arguments.into(),
        }
    }

    /// 40 pieces 30 ms apart under a 50 ms interval: about one delta every other piece,
    /// the name on the first only, and the whole arguments once finished.
    #[test]
    fn pieces_are_gathered_by_time_and_joined_give_the_arguments() {
        let start = Instant::now();
        let mut forming = Forming::new(pacing(50, 1024, 64 * 1024));
        let mut sent = Vec::new();
        let mut written = String::new();
        for n in 0..40u64 {
            let text = format!("{n:02}-");
            written.push_str(&text);
            let at = start + Duration::from_millis(30 * n);
            sent.extend(forming.push(piece(0, Some("c1"), Some("search"), &text), at));
        }
        let end = start + Duration::from_millis(1200);
        sent.extend(forming.finish(&[call("c1", "search", &written)], true, end));
        assert!((15..=25).contains(&sent.len()), "{} deltas", sent.len());
        assert_eq!(sent[0].name.as_deref(), Some("search"));
        assert!(sent[1..].iter().all(|d| d.name.is_none()));
        let joined: String = sent.iter().map(|d| d.text.as_str()).collect();
        assert_eq!(joined, written);
    }

    #[test]
    fn a_kibibyte_gathered_goes_at_once_and_the_timer_sends_the_rest() {
        let start = Instant::now();
        let mut forming = Forming::new(pacing(50, 1024, 64 * 1024));
        let big = "x".repeat(1500);
        let sent = forming.push(piece(0, Some("c"), Some("t"), &big), start);
        assert_eq!(sent.map(|d| d.text.len()), Some(1500));
        assert!(forming
            .push(
                piece(0, None, None, "yz"),
                start + Duration::from_millis(10)
            )
            .is_none());
        assert_eq!(forming.next_due(), Some(start + Duration::from_millis(50)));
        assert!(forming.due(start + Duration::from_millis(49)).is_empty());
        let due = forming.due(start + Duration::from_millis(50));
        assert_eq!(due.len(), 1);
        assert_eq!(due[0].text, "yz");
        assert_eq!(forming.next_due(), None);
    }

    /// A call whose id comes only with the finished turn (minted for it) waits for it:
    /// no delta names an id the call does not have.
    #[test]
    fn a_call_without_an_id_waits_for_its_final_one() {
        let start = Instant::now();
        let mut forming = Forming::new(pacing(0, 1, 64 * 1024));
        assert!(forming
            .push(piece(0, None, Some("t"), "{\"a\":"), start)
            .is_none());
        assert!(forming.due(start + Duration::from_secs(1)).is_empty());
        let done = forming.finish(&[call("call_minted", "t", "{\"a\":1}")], true, start);
        assert_eq!(done.len(), 1);
        assert_eq!(done[0].id, "call_minted");
        assert_eq!(done[0].text, "{\"a\":1}");
        assert_eq!(done[0].name.as_deref(), Some("t"));
    }

    #[test]
    fn arguments_past_the_limit_end_in_one_truncated_delta() {
        let start = Instant::now();
        let mut forming = Forming::new(pacing(50, 4, 10));
        let first = forming.push(piece(0, Some("c"), Some("t"), "abcdef"), start);
        assert_eq!(
            first.map(|d| (d.text, d.truncated)),
            Some(("abcdef".into(), false))
        );
        let last = forming
            .push(piece(0, None, None, "ghijklmnop"), start)
            .unwrap();
        assert_eq!((last.text.as_str(), last.truncated), ("ghij", true));
        assert!(forming
            .push(piece(0, None, None, "more"), start + Duration::from_secs(1))
            .is_none());
        assert!(forming
            .finish(&[call("c", "t", "abcdefghijklmnopmore")], true, start)
            .is_empty());
    }

    /// The text as written stays for a ReAct action, whose final call is normalised; for
    /// function calling, `{}` given for no arguments completes the deltas.
    #[test]
    fn finishing_completes_function_calls_and_keeps_written_text() {
        let start = Instant::now();
        let mut raw = Forming::new(pacing(50, 1024, 1024));
        let _ = raw.push(piece(0, Some("c"), Some("t"), "{ \"q\" : 1 }"), start);
        let done = raw.finish(&[call("c", "t", "{\"q\":1}")], false, start);
        assert_eq!(done[0].text, "{ \"q\" : 1 }");
        let mut empty = Forming::new(pacing(50, 1024, 1024));
        let _ = empty.push(piece(0, Some("c"), Some("t"), ""), start);
        let done = empty.finish(&[call("c", "t", "{}")], true, start);
        assert_eq!(done[0].text, "{}");
    }

    #[test]
    fn a_limit_of_zero_streams_nothing() {
        let start = Instant::now();
        let mut forming = Forming::new(pacing(0, 1, 0));
        assert!(forming
            .push(piece(0, Some("c"), Some("t"), "x"), start)
            .is_none());
        assert!(forming
            .finish(&[call("c", "t", "x")], true, start)
            .is_empty());
    }
}
