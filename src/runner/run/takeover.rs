//! A run taken over from a lost owner: the new owner tells the client which round is made
//! again (and which text is void), finishes a round whose decision was durable, and goes
//! on with the loop as any run does.

use super::halt::Halt;
use super::resume::{Resume, Resumption};
use super::{overflow, RunTask};
use crate::domain::{FinishReason, RunEvent};
use crate::runner::budget;
use crate::tools::OfferedTool;

/// Why a run was taken over, as `round_restarted` says it: its owner was lost.
pub const OWNER_LOST: &str = "owner_lost";

/// … or its owner stopped and handed it over.
pub const HANDED_OVER: &str = "handed_over";

/// Where the loop goes on after a takeover.
pub enum PickUp {
    /// At this round.
    At(u32),
    /// Nowhere: the run ends so.
    Ended(FinishReason),
}

impl RunTask {
    /// Counts the model call the lost owner was making when it was cut (its prompt, and
    /// the text it had shown) as estimated usage: the round made again is counted in full
    /// besides.
    fn count_cut_call(&mut self, resume: &Resume, offered: &[OfferedTool], max_rounds: u32) {
        if resume.void_text.is_empty() {
            return;
        }
        let last = resume.next_position >= max_rounds;
        let tools: &[OfferedTool] = if last { &[] } else { offered };
        let strategy = &self.agent.strategy;
        let request = strategy.build_request(&self.context, self.state.rounds(), tools);
        let tokenizer = self.agent.model.info.tokenizer;
        let tokens = crate::domain::TokenUsage::estimated(
            tokenizer.count_request(&request) as u64,
            tokenizer.count_text(&resume.void_text) as u64,
        );
        let usage = self.agent.model.info.pricing.usage(tokens, 0.0);
        self.state.add_cut_usage(&usage);
    }

    /// Leaves the run, still running, for another process to go on with: what it emitted
    /// is committed with the message marked handed over, and nothing ends it; its
    /// followers here are told to attach again.
    pub(super) async fn release(mut self) -> crate::runner::live::Registration {
        self.recorder.settle_if_failing().await;
        self.message.handed_over = true;
        self.message.updated_at = crate::domain::now();
        self.recorder.message(&self.message);
        self.recorder.close().await;
        self.metrics.run_handed_over();
        tracing::info!("the run is handed over: another process goes on with it");
        self.control.registration
    }

    /// The task goes on from `resumption` (the records a lost owner made durable) instead
    /// of starting: its events continue the stored `seq`.
    pub fn resuming(mut self, resumption: Resumption) -> Self {
        self.state = resumption.state;
        self.resume = Some(resumption.resume);
        self
    }

    /// Picks the run up: fits its history as its start did, announces the restart, and
    /// finishes a round whose model call had finished.
    pub(super) async fn pick_up(
        &mut self,
        resume: Resume,
        offered: &[OfferedTool],
        max_rounds: u32,
    ) -> Result<PickUp, Halt> {
        let strategy = &self.agent.strategy;
        let rounds = self.state.rounds();
        budget::fit(&mut self.context, &self.agent.model.info, |c| {
            strategy.build_request(c, rounds, offered)
        })
        .map_err(overflow)?;
        self.count_cut_call(&resume, offered, max_rounds);
        let own_seq = self.recorder.next_seq();
        self.recorder.announce(RunEvent::RoundRestarted {
            position: resume.position(),
            discard_from_seq: resume.void_from.unwrap_or(own_seq),
            reason: match resume.handed_over {
                true => HANDED_OVER,
                false => OWNER_LOST,
            }
            .to_owned(),
        });
        tracing::info!(
            position = resume.position(),
            "a run whose owner was lost goes on here"
        );
        self.cut = resume.cut;
        let Some(mut round) = resume.decided else {
            return Ok(PickUp::At(resume.next_position));
        };
        let position = round.thought.position;
        if position >= max_rounds {
            self.state.close_round(round);
            return Ok(PickUp::Ended(FinishReason::MaxIterations));
        }
        let finished = self
            .round_tools(resume.waited)
            .run_resumed(&mut round, &resume.started)
            .await;
        self.state.count_children(&round);
        match finished {
            Ok(()) => {
                self.state.close_round(round);
                Ok(PickUp::At(position + 1))
            }
            Err(Halt::Exhausted(kind)) => {
                // The round is whole: its calls past the budget have their results.
                self.state.close_round(round);
                self.budgeted.note_spent_out(Err(Halt::Exhausted(kind)))?;
                Ok(PickUp::At(position + 1))
            }
            Err(halt) => {
                self.state.interrupt(round);
                Err(halt)
            }
        }
    }
}
