//! Retiring the events of messages that ended long ago, in batches.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::contract::EventLog;

/// How often ended messages' old events are looked for.
const RETIRE_EVERY: Duration = Duration::from_secs(3600);

/// Messages whose events one batch retires.
const RETIRE_BATCH: usize = 100;

/// Retires the events of messages that ended more than `days` ago, every hour until
/// `stop`, a batch at a time so the store never runs one long delete. Takes any handle to
/// an event log (the store's face among them) so this room need not know the face.
pub async fn retire_old_events<S>(store: S, days: u32, stop: CancellationToken)
where
    S: std::ops::Deref,
    S::Target: EventLog,
{
    loop {
        let before = crate::domain::now() - chrono::Duration::days(i64::from(days));
        let mut retired = 0;
        loop {
            match store.retire_events(before, RETIRE_BATCH).await {
                Ok(count) => {
                    retired += count;
                    if count < RETIRE_BATCH {
                        break;
                    }
                }
                Err(err) => {
                    tracing::warn!(error = %err, "could not retire old events; trying again later");
                    break;
                }
            }
            if stop.is_cancelled() {
                return;
            }
        }
        if retired > 0 {
            tracing::info!(
                messages = retired,
                days,
                "retired the events of ended messages"
            );
        }
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(RETIRE_EVERY) => {}
        }
    }
}
