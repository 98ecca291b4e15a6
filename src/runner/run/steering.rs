//! Steers joining the run (`steer`): before each model call after a tool round, the texts
//! of steers waiting in the store to join it become user turns of the run. The store is
//! the truth, a notice only says when to read it, so a steer reaches the run once whichever
//! process goes on with it; and one the run never takes runs on its own.

use super::recorder::Recorder;
use super::state::RunState;
use crate::domain::{Message, MessageStatus, RunEvent, SteeredText, Thought};
use crate::runner::live::Mailbox;

/// Joins the steers waiting for `run` before the model call of round `position`: the cut
/// round's again (taken before this process went on with the run), then those the store
/// holds when a steer was said to wait. Each new one is announced as a `user_turn`.
pub(super) async fn join(
    position: u32,
    cut: Option<&Thought>,
    mailbox: &Mailbox,
    recorder: &mut Recorder,
    run: &Message,
    state: &mut RunState,
) {
    if let Some(cut) = cut.filter(|cut| cut.position == position) {
        state.join_steers(cut.steered.clone());
    }
    // A first round follows no results: a steer waits for the round after it.
    if position < 2 || !mailbox.take_steer_notice() {
        return;
    }
    let waiting = match recorder.waiting_steers(run).await {
        Ok(waiting) => waiting,
        Err(err) => {
            tracing::warn!(error = %err, "the steers waiting for the run could not be read; it reads them again before its next model call");
            mailbox.steer_waits();
            return;
        }
    };
    let new: Vec<SteeredText> = waiting
        .into_iter()
        .filter(|steer| {
            steer.status == MessageStatus::Queued
                && steer.steers == Some(run.id)
                && !state.took_steer(steer.id)
        })
        .map(|steer| SteeredText {
            message_id: steer.id,
            text: steer.query,
        })
        .collect();
    for steer in &new {
        recorder.announce(RunEvent::UserTurn {
            position,
            steer: steer.message_id,
            text: steer.text.clone(),
        });
    }
    if !new.is_empty() {
        tracing::info!(steers = new.len(), position, "steers join the run");
    }
    state.join_steers(new);
}
