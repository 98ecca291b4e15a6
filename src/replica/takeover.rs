//! Taking over the runs whose owner was lost (a process that died, stalled past its lease,
//! or stopped): the store's sweep decides which (see the policy in
//! [`crate::domain::fate`]); each taken over goes on here with the commands kept for it,
//! one that cannot ends saying why, and the children of those ended are stopped.

use tokio::sync::Mutex;

use crate::cluster::Bus;
use crate::domain::{Adoption, MessageId, MessageStatus, RunCommand, RunFailure, Tenant};
use crate::runner::{RunError, Runner};
use crate::store::{Adopted, Burst, Record, Store, TakenCommand};

/// What one sweep did with the runs no live process owned.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Adoptions {
    /// Runs it ended interrupted.
    pub interrupted: usize,
    /// Runs it took over and resumed here.
    pub resumed: usize,
}

/// One sweep's takeover.
pub(super) struct Takeover<'a> {
    /// Where taken runs go on.
    pub runner: &'a Runner,
    /// Where orphans and their commands are taken.
    pub store: &'a Store,
    /// Tells followers elsewhere of a run ended here.
    pub bus: &'a dyn Bus,
    /// Held while runs taken over are started (see [`super::Replica::take_commands`]).
    pub taking: &'a Mutex<()>,
}

impl Takeover<'_> {
    /// Takes the runs no live process owns, as `adoption` says: each taken over goes on
    /// here from its last durable round; one that cannot (its agent names what no longer
    /// exists, say) ends as failed, saying why.
    pub async fn adopt_orphans(&self, adoption: Adoption) -> Result<Adoptions, RunError> {
        let taking = self.taking.lock().await;
        let swept = self.store.take_orphans(adoption).await?;
        let mut adoptions = Adoptions {
            interrupted: swept.interrupted.len(),
            resumed: 0,
        };
        self.resume_adopted(swept.adopted, &mut adoptions).await?;
        drop(taking);
        self.stop_children_of(&swept.interrupted).await;
        Ok(adoptions)
    }

    /// Cancels the running children of runs a sweep ended, wherever they run: their
    /// parent's task, which would have cancelled them, is gone, and nobody reads them.
    async fn stop_children_of(&self, ended: &[(Tenant, MessageId)]) {
        for (tenant, parent) in ended {
            let children = match self.store.running_children(tenant, *parent).await {
                Ok(children) => children,
                Err(err) => {
                    tracing::warn!(error = %err, message_id = %parent, "the children of a run that lost its owner could not be found to stop them");
                    continue;
                }
            };
            for child in children {
                self.runner.cancel_in_background(tenant, child);
            }
        }
    }

    /// Resumes the runs a sweep took over here, each with the commands kept for it.
    async fn resume_adopted(
        &self,
        adopted: Vec<Adopted>,
        adoptions: &mut Adoptions,
    ) -> Result<(), RunError> {
        if adopted.is_empty() {
            return Ok(());
        }
        // Commands kept while the runs had no owner are now this replica's: a cancel
        // among them wins over resuming its run.
        let mut runs = self.runner.live_ids();
        runs.extend(adopted.iter().map(|adopted| adopted.message));
        let (theirs, others): (Vec<_>, Vec<_>) = self
            .store
            .take_commands(&runs)
            .await?
            .into_iter()
            .partition(|taken| {
                adopted
                    .iter()
                    .any(|a| a.message == taken.message && a.tenant == taken.tenant)
            });
        for adopted in adopted {
            let kept = kept_for(&theirs, adopted.message);
            match self.runner.resume_taken(adopted.clone(), &kept).await {
                Ok(()) => adoptions.resumed += 1,
                Err(err) => {
                    tracing::error!(error = %err, message_id = %adopted.message, "a run taken over cannot go on; it ends");
                    let (status, failure) = unresumable(&err);
                    self.end_unresumable(adopted, status, failure).await?;
                }
            }
        }
        self.runner.hand_commands(others).await;
        Ok(())
    }

    /// Ends a run taken over that cannot go on, under its new fence, so it does not stay
    /// running with an owner that does not run it.
    async fn end_unresumable(
        &self,
        adopted: Adopted,
        status: MessageStatus,
        failure: RunFailure,
    ) -> Result<(), RunError> {
        let Some(mut message) = self
            .store
            .get_message(&adopted.tenant, adopted.message)
            .await?
        else {
            return Ok(());
        };
        let last = self
            .store
            .last_event(&adopted.tenant, adopted.message)
            .await?
            .map_or(0, |event| event.seq);
        let end = message.end_stranded(status, failure, last);
        let burst = Burst {
            records: vec![Record::Message(message)],
            events: vec![end],
        };
        self.store
            .commit(&adopted.tenant, &adopted.fence, &burst)
            .await?;
        self.bus.announce(adopted.message, &burst.events).await;
        Ok(())
    }
}

/// The commands of `taken` kept for the run of `message`, in the order they were kept.
fn kept_for(taken: &[TakenCommand], message: MessageId) -> Vec<RunCommand> {
    taken
        .iter()
        .filter(|taken| taken.message == message)
        .map(|taken| taken.command.clone())
        .collect()
}

/// How a run that cannot go on ends: one of an earlier version is interrupted, as runs
/// left running always were; one whose agent no longer resolves (a provider removed since)
/// fails, saying why.
fn unresumable(err: &RunError) -> (MessageStatus, RunFailure) {
    if let RunError::NotResumable = err {
        return (
            MessageStatus::Interrupted,
            RunFailure {
                code: "interrupted".to_owned(),
                message: format!("its process stopped while it was running, and {err}"),
            },
        );
    }
    (
        MessageStatus::Failed,
        RunFailure {
            code: "resume_failed".to_owned(),
            message: format!("the run lost its owner and could not go on: {err}"),
        },
    )
}
