//! Events stored as spans: a run's events committed together are one row (`seq` the first,
//! `last_seq` the last, `record` a JSON array), written only once every live replica reads
//! them (migration 0010). A commit that failed may have landed: its retry is cut where the
//! failed try's spans ended, so each span it writes again has the same key and content as
//! before, and `ON CONFLICT DO NOTHING` keeps what landed once.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, PoisonError};

use uuid::Uuid;

use super::error::codec;
use crate::domain::{EventEnvelope, MessageId};
use crate::store::error::StoreError;

/// The schema version a database holding spans needs: a build before them is refused.
pub(super) const SPANS_SCHEMA: i64 = 2;

/// Whether every live replica reads spans; the minimum version raised when so.
pub(super) const LOOK: &str = "\
WITH every AS ( \
    SELECT coalesce(bool_and(reads_spans), true) AS reads FROM replicas WHERE lease_until > now()), \
raised AS ( \
    UPDATE store_meta SET value = $1 FROM every \
    WHERE every.reads AND key = 'min_version' AND value::bigint < $1::bigint) \
SELECT reads FROM every";

/// How a burst's events are laid out in rows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Layout {
    /// One row per event.
    Rows,
    /// Spans, cut after each of these `seq`s (where an earlier try's spans ended).
    Spans(Vec<u64>),
}

/// This process's side of spans: whether to write them, and the cuts of commits that
/// failed and will be tried again.
#[derive(Default)]
pub(super) struct Spans {
    on: AtomicBool,
    /// Each run whose last commit failed, and where its spans ended (in `seq` order).
    tried: Mutex<HashMap<Uuid, Vec<u64>>>,
}

impl Spans {
    /// Writes spans from now on, or rows again, as the last look found.
    pub(super) fn set(&self, on: bool) {
        self.on.store(on, Ordering::SeqCst);
    }

    /// Looks whether every live replica reads spans (raising the schema's minimum version
    /// the first time they all do), and writes spans or rows from now on as found.
    pub(super) async fn look<'c, E>(&self, on: E) -> Result<(), sqlx::Error>
    where
        E: sqlx::Executor<'c, Database = sqlx::Postgres>,
    {
        let (reads,): (bool,) = sqlx::query_as(LOOK)
            .bind(SPANS_SCHEMA.to_string())
            .fetch_one(on)
            .await?;
        self.set(reads);
        Ok(())
    }

    /// How `message`'s next burst is laid out: as its failed try was, cut at the same
    /// places, whatever the look says now (rows and spans of one try never overlap).
    pub(super) fn layout(&self, message: MessageId) -> Layout {
        let tried = self.tried.lock().unwrap_or_else(PoisonError::into_inner);
        match tried.get(&message.0) {
            Some(cuts) => Layout::Spans(cuts.clone()),
            None if self.on.load(Ordering::SeqCst) => Layout::Spans(Vec::new()),
            None => Layout::Rows,
        }
    }

    /// Notes how a commit of `message`'s `events` (laid out as `layout`) ended: one that
    /// failed is cut where its rows or spans ended when it is tried again.
    pub(super) fn settled(
        &self,
        message: MessageId,
        layout: &Layout,
        events: &[EventEnvelope],
        failed: bool,
    ) {
        let mut tried = self.tried.lock().unwrap_or_else(PoisonError::into_inner);
        if !failed {
            tried.remove(&message.0);
            return;
        }
        let cuts = match layout {
            Layout::Rows => events.iter().map(|event| event.seq).collect(),
            Layout::Spans(cuts) => {
                let mut cuts = cuts.clone();
                cuts.extend(events.last().map(|event| event.seq));
                cuts
            }
        };
        tried.insert(message.0, cuts);
    }
}

/// `events` cut into spans after each of `cuts`: consecutive events, in order.
pub(super) fn cut<'e>(events: &'e [EventEnvelope], cuts: &[u64]) -> Vec<&'e [EventEnvelope]> {
    let mut spans = Vec::new();
    let mut from = 0;
    for (at, event) in events.iter().enumerate() {
        if cuts.contains(&event.seq) {
            spans.push(&events[from..=at]);
            from = at + 1;
        }
    }
    if from < events.len() {
        spans.push(&events[from..]);
    }
    spans
}

/// The events a row holds: a span's (`last_seq` set) or its one event.
pub(super) fn decode(
    last_seq: Option<i64>,
    record: &str,
) -> Result<Vec<EventEnvelope>, StoreError> {
    match last_seq {
        Some(_) => serde_json::from_str(record).map_err(|err| codec("events", err)),
        None => Ok(vec![
            serde_json::from_str(record).map_err(|err| codec("events", err))?
        ]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::{ConversationId, RunEvent};

    fn events(seqs: std::ops::RangeInclusive<u64>) -> Vec<EventEnvelope> {
        let (conversation_id, message_id) = (ConversationId::new(), MessageId::new());
        seqs.map(|seq| EventEnvelope {
            seq,
            conversation_id,
            message_id,
            created_at: crate::domain::now(),
            event: RunEvent::AnswerDelta {
                text: format!("{seq}"),
            },
        })
        .collect()
    }

    fn seqs(spans: &[&[EventEnvelope]]) -> Vec<Vec<u64>> {
        spans
            .iter()
            .map(|span| span.iter().map(|event| event.seq).collect())
            .collect()
    }

    #[test]
    fn a_burst_is_cut_where_its_failed_tries_ended() {
        let burst = events(5..=12);
        assert_eq!(seqs(&cut(&burst, &[])), vec![(5..=12).collect::<Vec<_>>()]);
        assert_eq!(
            seqs(&cut(&burst, &[7, 9])),
            vec![vec![5, 6, 7], vec![8, 9], vec![10, 11, 12]]
        );
        assert_eq!(
            seqs(&cut(&burst, &[3, 12])),
            vec![(5..=12).collect::<Vec<_>>()]
        );
    }

    #[test]
    fn a_retry_keeps_the_layout_of_the_try_that_failed() {
        let spans = Spans::default();
        let run = MessageId::new();
        assert_eq!(spans.layout(run), Layout::Rows);
        // Rows tried and failed: each row is a span of its own on the retry, even once
        // spans are on.
        spans.settled(run, &Layout::Rows, &events(1..=3), true);
        spans.set(true);
        assert_eq!(spans.layout(run), Layout::Spans(vec![1, 2, 3]));
        // That retry failed too, with more: its new span ends where it ended.
        spans.settled(run, &Layout::Spans(vec![1, 2, 3]), &events(1..=5), true);
        assert_eq!(spans.layout(run), Layout::Spans(vec![1, 2, 3, 5]));
        spans.settled(run, &Layout::Spans(vec![1, 2, 3, 5]), &events(1..=6), false);
        assert_eq!(spans.layout(run), Layout::Spans(Vec::new()));
        // Spans off again: a run with nothing pending writes rows.
        spans.set(false);
        assert_eq!(spans.layout(run), Layout::Rows);
    }

    #[test]
    fn a_row_reads_as_its_events() {
        let burst = events(1..=3);
        let span = serde_json::to_string(&burst).unwrap();
        assert_eq!(decode(Some(3), &span).unwrap(), burst);
        let one = serde_json::to_string(&burst[0]).unwrap();
        assert_eq!(decode(None, &one).unwrap(), burst[..1].to_vec());
        assert!(decode(Some(3), &one).is_err());
    }
}
