//! A page of a tenant's runs, newest first: what [`Conversations::list_runs`] returns, and
//! the one loop both backends gather it with.
//!
//! [`Conversations::list_runs`]: super::Conversations::list_runs

use crate::domain::{Message, RunFilter};

/// The most index entries one page reads: a filter the index does not answer returns a
/// shorter page (saying it stopped early) rather than reading the tenant's history.
pub const MAX_SCANNED: usize = 10_000;

/// Where a listing stands: the place of the last run read, in the order the store lists
/// the filter's index (an id, a sequence number or a place in a conversation; the store
/// decides). Meaningful only with the filter that produced it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct RunCursor(pub u128);

/// A run as listed.
#[derive(Debug, Clone, PartialEq)]
pub struct ListedRun {
    /// Its message, without the answer (a summary does not show it).
    pub message: Message,
    /// The replica that owns it while it runs, on a store several replicas share.
    pub owner: Option<String>,
}

/// One page of runs.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RunPage {
    /// The runs, newest first.
    pub runs: Vec<ListedRun>,
    /// Where the next page starts; `None` on the last.
    pub next: Option<RunCursor>,
    /// Whether the page ended because it read [`MAX_SCANNED`] entries, not because it was
    /// full: more may match past `next`.
    pub stopped_early: bool,
}

/// Whether to offer the next entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    /// Read on.
    More,
    /// The page is done: stop reading.
    Done,
}

/// Gathers one page from index entries offered newest first: keeps the runs the filter
/// keeps, reads one kept run past a full page to tell whether more follow, and stops after
/// [`MAX_SCANNED`] entries.
#[derive(Debug)]
pub struct Gather<'a> {
    filter: &'a RunFilter,
    limit: usize,
    scanned: usize,
    page: RunPage,
    /// The place of the page's last run, once the page is full.
    full_at: Option<RunCursor>,
}

/// Entries a read takes once the first did not fill the page.
const LATER_READ: usize = 1_000;

impl<'a> Gather<'a> {
    /// A page of at most `limit` runs `filter` keeps.
    pub fn new(filter: &'a RunFilter, limit: usize) -> Self {
        Self {
            filter,
            limit: limit.max(1),
            scanned: 0,
            page: RunPage::default(),
            full_at: None,
        }
    }

    /// The entry at `place`, with its run when it still exists (an index entry may outlive
    /// or precede its message).
    pub fn offer(&mut self, place: RunCursor, run: Option<ListedRun>) -> Flow {
        self.scanned += 1;
        let kept = run.filter(|run| self.filter.keeps(&run.message));
        if let Some(full_at) = self.full_at {
            if kept.is_some() || self.scanned >= MAX_SCANNED {
                self.page.next = Some(full_at);
                return Flow::Done;
            }
            return Flow::More;
        }
        if let Some(run) = kept {
            self.page.runs.push(run);
            if self.page.runs.len() == self.limit {
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
    pub fn finish(self) -> RunPage {
        self.page
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::{ConversationId, MessageStatus, StrategyKind};

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
        let mut gather = Gather::new(filter, limit);
        for (place, status) in entries.iter().enumerate().rev() {
            if gather.offer(RunCursor(place as u128), run(*status)) == Flow::Done {
                break;
            }
        }
        gather.finish()
    }

    #[test]
    fn a_full_page_points_past_its_last_run_only_when_another_is_kept() {
        let all = RunFilter::default();
        let page = gather(&all, 2, &[MessageStatus::Completed; 3]);
        assert_eq!(page.runs.len(), 2);
        assert_eq!(page.next, Some(RunCursor(1)));
        let exact = gather(&all, 3, &[MessageStatus::Completed; 3]);
        assert_eq!((exact.runs.len(), exact.next), (3, None));
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
        assert_eq!((last.runs.len(), last.next), (2, None));
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
        assert!(page.runs.is_empty());
        assert_eq!(page.next, Some(RunCursor(6)));
    }
}
