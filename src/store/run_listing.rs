//! A page of a tenant's runs, newest first: what [`Conversations::list_runs`] returns, and
//! the one loop both backends gather it with.
//!
//! [`Conversations::list_runs`]: super::Conversations::list_runs

use crate::domain::Message;

/// The most index entries one page reads: a filter the index does not answer returns a
/// shorter page (saying it stopped early) rather than reading the tenant's history.
pub const MAX_SCANNED: usize = 10_000;

/// Where a listing stands: the place of the last run read, in the order the store lists
/// the filter's index (an id, a sequence number or a place in a conversation; the store
/// decides). Meaningful only with the filter that produced it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct RunCursor(pub u128);

/// What one page of a run listing asks for.
#[derive(Debug, Clone, Copy)]
pub struct RunQuery<'a> {
    /// The runs to keep.
    pub filter: &'a crate::domain::RunFilter,
    /// Where the page starts; `None` for the first.
    pub after: Option<RunCursor>,
    /// The most runs it holds.
    pub limit: usize,
}

/// What one page of a conversation listing asks for.
#[derive(Debug, Clone, Copy)]
pub struct ConversationQuery<'a> {
    /// Only conversations this end user started.
    pub user: Option<&'a str>,
    /// The newest run's place when the listing began; `None` on its first page.
    pub as_of: Option<RunCursor>,
    /// Where the page starts; `None` for the first.
    pub after: Option<RunCursor>,
    /// The most conversations it holds.
    pub limit: usize,
}

/// A run as listed.
#[derive(Debug, Clone, PartialEq)]
pub struct ListedRun {
    /// Its message, without the answer (a summary does not show it).
    pub message: Message,
    /// The replica that owns it while it runs, on a store several replicas share.
    pub owner: Option<String>,
}

/// One page of a listing read from an index newest first.
#[derive(Debug, Clone, PartialEq)]
pub struct Listing<T> {
    /// What the page holds, newest first.
    pub items: Vec<T>,
    /// Where the next page starts; `None` on the last.
    pub next: Option<RunCursor>,
    /// Whether the page ended because it read [`MAX_SCANNED`] entries, not because it was
    /// full: more may match past `next`.
    pub stopped_early: bool,
}

impl<T> Default for Listing<T> {
    fn default() -> Self {
        Self {
            items: Vec::new(),
            next: None,
            stopped_early: false,
        }
    }
}

/// One page of runs.
pub type RunPage = Listing<ListedRun>;

/// A conversation as listed: its record, how many messages it holds, and its newest run
/// as of the listing's start.
#[derive(Debug, Clone, PartialEq)]
pub struct ListedConversation {
    /// The conversation.
    pub conversation: crate::domain::Conversation,
    /// Its messages then (the `seq` of that run).
    pub messages: u64,
    /// Its newest run as of the listing's start.
    pub last: ListedRun,
}

/// One page of conversations, with the place of the newest run when the listing began:
/// every page of one listing reads the conversations as they stood then.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ConversationPage {
    /// The newest run's place when the first page was read; `None` when the tenant had no
    /// runs.
    pub as_of: Option<RunCursor>,
    /// The page.
    pub page: Listing<ListedConversation>,
}

/// Whether to offer the next entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    /// Read on.
    More,
    /// The page is done: stop reading.
    Done,
}

/// Gathers one page from index entries offered newest first, each with what it adds to
/// the page when the listing keeps it: reads one kept entry past a full page to tell
/// whether more follow, and stops after [`MAX_SCANNED`] entries.
#[derive(Debug)]
pub struct Gather<T> {
    limit: usize,
    scanned: usize,
    page: Listing<T>,
    /// The place of the page's last run, once the page is full.
    full_at: Option<RunCursor>,
}

/// Entries a read takes once the first did not fill the page.
const LATER_READ: usize = 1_000;

impl<T> Gather<T> {
    /// A page of at most `limit` items.
    pub fn new(limit: usize) -> Self {
        Self {
            limit: limit.max(1),
            scanned: 0,
            page: Listing::default(),
            full_at: None,
        }
    }

    /// The entry at `place`, with its item when the listing keeps it.
    pub fn offer(&mut self, place: RunCursor, kept: Option<T>) -> Flow {
        self.scanned += 1;
        if let Some(full_at) = self.full_at {
            if kept.is_some() || self.scanned >= MAX_SCANNED {
                self.page.next = Some(full_at);
                return Flow::Done;
            }
            return Flow::More;
        }
        if let Some(run) = kept {
            self.page.items.push(run);
            if self.page.items.len() == self.limit {
                self.full_at = Some(place);
            }
        }
        if self.full_at.is_none() && self.scanned >= MAX_SCANNED {
            self.page.next = Some(place);
            self.page.stopped_early = true;
            return Flow::Done;
        }
        Flow::More
    }

    /// How many entries the next read should take: the first, enough to fill the page and
    /// tell whether more follow; later ones (the filter passed some over) more at a time;
    /// never past the scan limit.
    pub fn wanted(&self) -> usize {
        let left = MAX_SCANNED.saturating_sub(self.scanned);
        let first = self.limit + 1;
        let want = if self.scanned == 0 { first } else { LATER_READ };
        want.min(left).max(1)
    }

    /// The page, once the index has nothing more to offer or the gather said done.
    pub fn finish(self) -> Listing<T> {
        self.page
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::{ConversationId, MessageStatus, RunFilter, StrategyKind};

    fn run(status: MessageStatus) -> Option<ListedRun> {
        let mut message = Message::running(
            ConversationId::new(),
            "q".into(),
            StrategyKind::FunctionCalling,
            "p".into(),
            "m".into(),
        );
        message.status = status;
        Some(ListedRun {
            message,
            owner: None,
        })
    }

    fn gather(filter: &RunFilter, limit: usize, entries: &[MessageStatus]) -> RunPage {
        let mut gather = Gather::new(limit);
        for (place, status) in entries.iter().enumerate().rev() {
            let kept = run(*status).filter(|run| filter.keeps(&run.message));
            if gather.offer(RunCursor(place as u128), kept) == Flow::Done {
                break;
            }
        }
        gather.finish()
    }

    #[test]
    fn a_full_page_points_past_its_last_run_only_when_another_is_kept() {
        let all = RunFilter::default();
        let page = gather(&all, 2, &[MessageStatus::Completed; 3]);
        assert_eq!(page.items.len(), 2);
        assert_eq!(page.next, Some(RunCursor(1)));
        let exact = gather(&all, 3, &[MessageStatus::Completed; 3]);
        assert_eq!((exact.items.len(), exact.next), (3, None));
        let failed = RunFilter {
            statuses: vec![MessageStatus::Failed],
            ..RunFilter::default()
        };
        let entries = [
            MessageStatus::Completed,
            MessageStatus::Failed,
            MessageStatus::Failed,
        ];
        let last = gather(&failed, 2, &entries);
        assert_eq!((last.items.len(), last.next), (2, None));
    }

    #[test]
    fn a_page_stops_early_after_the_scan_limit() {
        let failed = RunFilter {
            statuses: vec![MessageStatus::Failed],
            ..RunFilter::default()
        };
        let mut entries = vec![MessageStatus::Failed];
        entries.extend(std::iter::repeat_n(
            MessageStatus::Completed,
            MAX_SCANNED + 5,
        ));
        let page = gather(&failed, 10, &entries);
        assert!(page.stopped_early);
        assert!(page.items.is_empty());
        assert_eq!(page.next, Some(RunCursor(6)));
    }
}
