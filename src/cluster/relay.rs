//! The relay's wire format: one payload carries the notices that one commit group of a
//! replica's runs announced, `{"notices":[{"message":"…","last_seq":n,"events":[…]},…]}`.
//! A replica that hears it reads the events only of the messages it follows; the others
//! are skipped unparsed, so a peer's runs that nobody follows here cost a scan, not a
//! parse.

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use super::MAX_NOTICE_EVENTS_BYTES;
use crate::domain::{EventEnvelope, MessageId};

/// The most bytes one relay payload carries before sealing; a larger group goes out as
/// several. Far under NATS's default 1 MiB limit on a message, so a server that keeps
/// its defaults takes every payload.
pub const MAX_RELAY_BYTES: usize = 256 * 1024;

/// The opening and closing of a payload around its notices.
const HEAD: &[u8] = br#"{"notices":["#;
const TAIL: &[u8] = b"]}";

/// A notice as written: the run's events borrowed, not copied.
#[derive(Serialize)]
struct NoticeRef<'a> {
    message: MessageId,
    last_seq: u64,
    events: &'a [EventEnvelope],
}

/// A notice as read, its events left unparsed until a follower here wants them.
#[derive(Deserialize)]
pub struct Heard<'a> {
    /// The message the notice is about.
    pub message: MessageId,
    /// Its last committed `seq` (0: the events are unstored ones).
    pub last_seq: u64,
    #[serde(borrow, default)]
    events: Option<&'a RawValue>,
}

impl Heard<'_> {
    /// The events the notice carries (empty when it carries none); `None` when they do not
    /// read.
    pub fn events(&self) -> Option<Vec<EventEnvelope>> {
        match self.events {
            Some(raw) => serde_json::from_str(raw.get()).ok(),
            None => Some(Vec::new()),
        }
    }
}

#[derive(Deserialize)]
struct Payload<'a> {
    #[serde(borrow)]
    notices: Vec<Heard<'a>>,
}

/// `events` (consecutive, of `message`) as one notice; a burst past
/// [`MAX_NOTICE_EVENTS_BYTES`] is announced by its last `seq` alone, for followers to
/// read from the store.
pub fn encode(message: MessageId, events: &[EventEnvelope]) -> Option<Vec<u8>> {
    let last = events.last()?;
    let mut notice = NoticeRef {
        message,
        last_seq: last.seq,
        events,
    };
    let encoded = serde_json::to_vec(&notice).ok()?;
    if encoded.len() <= MAX_NOTICE_EVENTS_BYTES {
        return Some(encoded);
    }
    notice.events = &[];
    serde_json::to_vec(&notice).ok()
}

/// `notices` (each from [`encode`]) packed into as few payloads as hold them, in order,
/// none past [`MAX_RELAY_BYTES`] unless a single notice is.
pub fn pack(notices: impl IntoIterator<Item = Vec<u8>>) -> Vec<Vec<u8>> {
    let mut payloads = Vec::new();
    let mut current: Vec<u8> = Vec::new();
    for notice in notices {
        let full = current.len() + 1 + notice.len() + TAIL.len() > MAX_RELAY_BYTES;
        if !current.is_empty() && full {
            current.extend_from_slice(TAIL);
            payloads.push(std::mem::take(&mut current));
        }
        if current.is_empty() {
            current.extend_from_slice(HEAD);
        } else {
            current.push(b',');
        }
        current.extend_from_slice(&notice);
    }
    if !current.is_empty() {
        current.extend_from_slice(TAIL);
        payloads.push(current);
    }
    payloads
}

/// The notices of an opened payload, in order; `None` when it does not read.
pub fn unpack(plain: &[u8]) -> Option<Vec<Heard<'_>>> {
    serde_json::from_slice::<Payload<'_>>(plain)
        .ok()
        .map(|payload| payload.notices)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::{ConversationId, RunEvent};

    fn burst(
        message: MessageId,
        seqs: std::ops::RangeInclusive<u64>,
        text: &str,
    ) -> Vec<EventEnvelope> {
        seqs.map(|seq| EventEnvelope {
            seq,
            conversation_id: ConversationId::new(),
            message_id: message,
            created_at: crate::domain::now(),
            event: RunEvent::AnswerDelta {
                text: text.to_owned(),
            },
        })
        .collect()
    }

    #[test]
    fn a_group_of_notices_reads_back_in_order() {
        let (one, two) = (MessageId::new(), MessageId::new());
        let first = burst(one, 1..=2, "a");
        let second = burst(two, 7..=7, "b");
        let payloads = pack([encode(one, &first).unwrap(), encode(two, &second).unwrap()]);
        assert_eq!(payloads.len(), 1, "one payload for a small group");
        let heard = unpack(&payloads[0]).unwrap();
        assert_eq!(heard.len(), 2);
        assert_eq!((heard[0].message, heard[0].last_seq), (one, 2));
        assert_eq!(heard[0].events().unwrap(), first);
        assert_eq!((heard[1].message, heard[1].last_seq), (two, 7));
        assert_eq!(heard[1].events().unwrap(), second);
    }

    #[test]
    fn a_large_burst_is_announced_by_its_last_seq_alone() {
        let message = MessageId::new();
        let large = burst(message, 1..=3, &"x".repeat(MAX_NOTICE_EVENTS_BYTES / 2));
        let payloads = pack([encode(message, &large).unwrap()]);
        let heard = unpack(&payloads[0]).unwrap();
        assert_eq!(heard[0].last_seq, 3);
        assert_eq!(heard[0].events().unwrap(), Vec::new());
    }

    #[test]
    fn a_large_group_is_split_and_no_payload_passes_the_limit() {
        let notices: Vec<(MessageId, Vec<EventEnvelope>)> = (0..40)
            .map(|_| {
                let message = MessageId::new();
                (message, burst(message, 1..=1, &"y".repeat(30_000)))
            })
            .collect();
        let payloads = pack(notices.iter().map(|(m, e)| encode(*m, e).unwrap()));
        assert!(payloads.len() > 1);
        assert!(payloads.iter().all(|p| p.len() <= MAX_RELAY_BYTES));
        let heard: Vec<MessageId> = payloads
            .iter()
            .flat_map(|p| unpack(p).unwrap().into_iter().map(|h| h.message))
            .collect();
        let sent: Vec<MessageId> = notices.iter().map(|(m, _)| *m).collect();
        assert_eq!(heard, sent, "every notice, in order");
    }

    #[test]
    fn what_does_not_read_is_refused() {
        assert!(unpack(b"{\"last_seq\":3}").is_none());
        assert!(unpack(b"not json").is_none());
        let bad = br#"{"notices":[{"message":"m","last_seq":1}]}"#;
        assert!(unpack(bad).is_none(), "a message id that is not one");
        let wrong_events = br#"{"notices":[{"message":"0190f0c8-0000-7000-8000-000000000000","last_seq":1,"events":[{"seq":"x"}]}]}"#;
        let heard = unpack(wrong_events).unwrap();
        assert!(heard[0].events().is_none());
    }
}
