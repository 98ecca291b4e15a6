//! The runs of one sub-agent tree, counted as they start and end, so one top run cannot
//! fan out into thousands: a child past `runner.max_tree_runs` (alive at once) or
//! `runner.max_tree_runs_total` (over the tree's life) is refused, never waited for, so a
//! tree cannot deadlock on its own slots.
//!
//! The count lives in the process that drives the tree. A run taken over by another
//! replica counts again from itself and the children it finds: what the tree started
//! before then is not known there, so the total bounds each owner's share of the tree.

use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};

/// The counts of one tree, shared by every run of it in this process.
pub struct Tree {
    counts: Mutex<Counts>,
    max_alive: u32,
    max_total: u32,
}

#[derive(Debug, Clone, Copy)]
struct Counts {
    alive: u32,
    total: u32,
}

/// Which bound of the tree a child would pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TreeFull {
    /// `runner.max_tree_runs`, the runs alive at once.
    Alive(u32),
    /// `runner.max_tree_runs_total`, the runs over the tree's life.
    Total(u32),
}

impl fmt::Display for TreeFull {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Alive(max) => write!(
                f,
                "the run's tree has {max} runs alive, the most runner.max_tree_runs ({max}) allows"
            ),
            Self::Total(max) => write!(
                f,
                "the run's tree started {max} runs, the most runner.max_tree_runs_total ({max}) allows"
            ),
        }
    }
}

/// One child's place in its tree, given back when it is dropped (the child ended, or its
/// parent stopped following it).
pub struct TreeSlot(Arc<Tree>);

impl Tree {
    /// A tree whose top run is alive, bounded as given.
    pub fn new(max_alive: u32, max_total: u32) -> Arc<Self> {
        Arc::new(Self {
            counts: Mutex::new(Counts { alive: 1, total: 1 }),
            max_alive,
            max_total,
        })
    }

    /// Takes a place for one more run of the tree, or says which bound it would pass.
    pub fn reserve(self: &Arc<Self>) -> Result<TreeSlot, TreeFull> {
        let mut counts = self.counts.lock().unwrap_or_else(PoisonError::into_inner);
        if counts.alive >= self.max_alive {
            return Err(TreeFull::Alive(self.max_alive));
        }
        if counts.total >= self.max_total {
            return Err(TreeFull::Total(self.max_total));
        }
        counts.alive += 1;
        counts.total += 1;
        Ok(TreeSlot(Arc::clone(self)))
    }

    /// Runs of the tree alive now, its top run included.
    pub fn alive(&self) -> u32 {
        self.counts
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .alive
    }
}

impl Drop for TreeSlot {
    fn drop(&mut self) {
        let mut counts = self.0.counts.lock().unwrap_or_else(PoisonError::into_inner);
        counts.alive = counts.alive.saturating_sub(1);
    }
}

impl fmt::Debug for Tree {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let counts = *self.counts.lock().unwrap_or_else(PoisonError::into_inner);
        f.debug_struct("Tree")
            .field("alive", &counts.alive)
            .field("total", &counts.total)
            .finish()
    }
}

/// The tree a run belongs to, as a spec carries it: equal when it is the same tree.
#[derive(Clone, Debug)]
pub struct TreeHandle(pub Arc<Tree>);

impl PartialEq for TreeHandle {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tree_holds_its_runs_alive_and_started_to_their_bounds() {
        let tree = Tree::new(3, 4);
        let first = tree.reserve().unwrap();
        let second = tree.reserve().unwrap();
        assert_eq!(tree.alive(), 3);
        assert_eq!(tree.reserve().err(), Some(TreeFull::Alive(3)));
        drop(first);
        let third = tree.reserve().unwrap();
        assert_eq!(tree.alive(), 3);
        drop((second, third));
        assert_eq!(
            tree.reserve().err(),
            Some(TreeFull::Total(4)),
            "places given back do not lift the total"
        );
        assert_eq!(tree.alive(), 1);
    }
}
