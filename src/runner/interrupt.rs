//! A new run that stops the live ones of its conversation (`interrupt`, `rollback`): it is
//! stored queued behind them like an `enqueue`d run, then each run ahead of it is told to
//! stop, wherever it runs. The queued run starts as each ends.

use super::found::Found;
use super::host::Host;
use crate::domain::{Interruption, Message, RunCommand, Tenant};

/// Stops every live run ahead of `message` in its conversation for `interruption`: one held
/// here at once, one held by a peer through a command kept for its owner (so a takeover
/// honours it too). Failures are logged: the new run then waits for them as `enqueue` would.
pub(super) async fn stop_ahead<R: Host>(
    runner: &R,
    tenant: &Tenant,
    message: &Message,
    interruption: Interruption,
) {
    let parts = runner.parts();
    let ahead = match parts
        .store
        .live_before(tenant, message.conversation_id, message.seq)
        .await
    {
        Ok(ahead) => ahead,
        Err(err) => {
            tracing::warn!(error = %err, "the runs to interrupt could not be read; the new run waits for them");
            return;
        }
    };
    parts
        .metrics
        .conversation_busy(match interruption.rollback {
            true => "rolled_back",
            false => "interrupted",
        });
    for id in ahead {
        match Found::find(parts.live, parts.store, tenant, id).await {
            Ok(Found::Local(run)) => {
                run.mailbox.interrupt(interruption);
                run.cancel.cancel();
            }
            Ok(Found::Remote(_)) => {
                if let Err(err) = runner
                    .elsewhere()
                    .notify(tenant, id, RunCommand::Interrupt(interruption))
                    .await
                {
                    tracing::warn!(error = %err, message_id = %id, "a run held elsewhere could not be interrupted; the new run waits for it");
                }
            }
            Ok(Found::Ended(_)) => {}
            Err(err) => {
                tracing::warn!(error = %err, message_id = %id, "a run to interrupt could not be found; the new run waits for it");
            }
        }
    }
}
