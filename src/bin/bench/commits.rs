//! Where a run's commits spend their time, read from the service's own `/metrics`: how
//! many bursts a run commits, how long each waits for a committer, and how long a flush
//! (one group's statement and its WAL flush) takes.

use std::net::SocketAddr;

use serde::Serialize;

/// The commit histograms' sums and counts at one moment.
#[derive(Debug, Clone, Copy, Default)]
pub struct CommitTotals {
    wait_sum: f64,
    wait_count: f64,
    flush_sum: f64,
    flush_count: f64,
}

/// The commits of the measured runs, per run and per burst.
#[derive(Debug, Clone, Serialize)]
pub struct CommitBreakdown {
    /// Bursts committed per run.
    pub bursts_per_run: f64,
    /// Flushes (group commits) per run.
    pub flushes_per_run: f64,
    /// Mean time a burst waited for a committer and a connection, in milliseconds.
    pub wait_ms: f64,
    /// Mean time of one flush (its statement and WAL flush), in milliseconds.
    pub flush_ms: f64,
}

impl std::ops::Add for CommitTotals {
    type Output = Self;

    /// Two services' totals together, as one.
    fn add(self, other: Self) -> Self {
        Self {
            wait_sum: self.wait_sum + other.wait_sum,
            wait_count: self.wait_count + other.wait_count,
            flush_sum: self.flush_sum + other.flush_sum,
            flush_count: self.flush_count + other.flush_count,
        }
    }
}

/// The totals the service at `metrics` reports now.
pub async fn totals(metrics: SocketAddr) -> anyhow::Result<CommitTotals> {
    let text = reqwest::get(format!("http://{metrics}/metrics"))
        .await?
        .text()
        .await?;
    let value = |name: &str| {
        text.lines()
            .find_map(|line| {
                line.strip_prefix(name)?
                    .strip_prefix(' ')?
                    .trim()
                    .parse()
                    .ok()
            })
            .unwrap_or(0.0)
    };
    Ok(CommitTotals {
        wait_sum: value("agent_runner_store_commit_wait_seconds_sum"),
        wait_count: value("agent_runner_store_commit_wait_seconds_count"),
        flush_sum: value("agent_runner_store_flush_duration_seconds_sum"),
        flush_count: value("agent_runner_store_flush_duration_seconds_count"),
    })
}

/// What `runs` runs committed between `before` and `after`.
pub fn breakdown(before: CommitTotals, after: CommitTotals, runs: usize) -> CommitBreakdown {
    let runs = runs.max(1) as f64;
    let bursts = after.wait_count - before.wait_count;
    let flushes = after.flush_count - before.flush_count;
    let mean = |sum: f64, count: f64| match count > 0.0 {
        true => sum / count * 1000.0,
        false => 0.0,
    };
    CommitBreakdown {
        bursts_per_run: bursts / runs,
        flushes_per_run: flushes / runs,
        wait_ms: mean(after.wait_sum - before.wait_sum, bursts),
        flush_ms: mean(after.flush_sum - before.flush_sum, flushes),
    }
}
